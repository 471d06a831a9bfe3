/* A small fixed set of worker threads with a blocking parallel-for: every op of the
 * CPU backend, GEMM tiles included, runs on it. The caller and the workers
 * claim a job's tasks from a shared word, so work never waits for a thread
 * that has not started its part; workers spin for a couple of
 * milliseconds, then sleep on a futex between jobs, and do not spin while
 * other processes hold the cores. Built with oneDNN, the jobs run on OpenMP's threads for a while
 * after a convolution used them (threads.c says why and when). */
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
 * on the caller and the workers, and returns when all have finished. The
 * ranges depend only on n, min_chunk and the thread count, never on which
 * thread runs them. Runs everything inline when the work is small, the
 * workers is NULL or has no workers, or the workers is already busy (a
 * nested call or a second thread). */
void ug_cpu_parallel_for(ug_cpu_workers *workers, int64_t n, int64_t min_chunk,
                         ug_cpu_range_fn fn, void *ctx);

/* Tells the pool that OpenMP's team just ran a job of oneDNN's (a
 * convolution): its threads spin a while, so the next jobs run on them too.
 * NULL is ignored; without oneDNN it does nothing. */
void ug_cpu_workers_used_openmp(ug_cpu_workers *workers);

#endif
