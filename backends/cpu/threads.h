/* A small fixed set of worker threads with a blocking parallel-for: every op of the
 * CPU backend, GEMM tiles included, runs on it. Workers spin briefly, then
 * sleep on a condition variable between jobs. Built with oneDNN, the jobs
 * run on OpenMP's threads instead, which oneDNN's convolutions use too. */
#ifndef UG_CPU_THREADS_H
#define UG_CPU_THREADS_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/status.h"

typedef struct ug_cpu_workers ug_cpu_workers;

/* Runs the indices [begin, end) of a job. */
typedef void (*ug_cpu_range_fn)(void *ctx, int64_t begin, int64_t end);

/* The thread budget: UG_NUM_THREADS when set, else the CPUs this process may
 * run on. A malformed UG_NUM_THREADS gives UG_ERR_INVALID_ARGUMENT with the
 * message set when report is true; otherwise it is ignored (UG_OK). */
ug_status ug_cpu_thread_budget(int *threads, bool report);

/* threads counts the caller: threads - 1 workers are started. */
ug_status ug_cpu_workers_create(int threads, ug_cpu_workers **out);
/* Joins every worker. NULL is ignored. */
void ug_cpu_workers_destroy(ug_cpu_workers *workers);

/* Calls fn over [0, n) split into ranges of at least min_chunk indices,
 * on the caller and the workers, and returns when all have finished. Runs
 * everything inline when the work is small, the workers is NULL or has no
 * workers, or the workers is already busy (a nested call or a second thread). */
void ug_cpu_parallel_for(ug_cpu_workers *workers, int64_t n, int64_t min_chunk,
                         ug_cpu_range_fn fn, void *ctx);

#endif
