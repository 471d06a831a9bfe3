/* ug-bench: one executable, one file per subcommand. A subcommand is a
 * function taking the arguments after its name; it returns the exit status. */
#ifndef UG_BENCH_H
#define UG_BENCH_H

#include <stdbool.h>
#include <stdio.h>

#include "unigrad/unigrad.h"

typedef struct bench_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} bench_command;

int bench_gemm(int argc, char **argv);
int bench_train_mlp(int argc, char **argv);
int bench_train_cnn(int argc, char **argv);
int bench_conv(int argc, char **argv);
int bench_gpt(int argc, char **argv);
int bench_resnet(int argc, char **argv);
int bench_report(int argc, char **argv);
int bench_compare(int argc, char **argv);
int bench_data_parallel(int argc, char **argv);
int bench_pipeline(int argc, char **argv);
int bench_tune(int argc, char **argv);
int bench_load(int argc, char **argv);

/* Fashion-MNIST's training set (x / 255) from Debian's dataset-fashion-mnist,
 * *real true; else 60000 generated images of its size, *real false. NULL
 * when neither can be had (bench_train.c). */
ug_dataset *bench_fashion_mnist(bool *real);

/* Monotonic seconds. */
double bench_now(void);

/* Waits 30 ms: threads spin for a few milliseconds after their last job
 * before they sleep (the CPU device's, OpenMP's where it has oneDNN, and
 * OpenBLAS's), and a timing that follows other work must not run on cores
 * that work's threads still hold. */
void bench_settle(void);

/* The median of v[0..n-1] (sorts v). */
double bench_median(double *v, int n);

/* Times fn(ctx) over enough repetitions to take about target_seconds, in
 * parts of about 0.04 s (at least five) after warmup calls and a
 * calibration: the median part's time per call. sync (may be NULL)
 * waits for queued work: it runs before and after every timed batch, so
 * asynchronous devices are timed to completion. fn and sync return false on
 * a library error (the message is in ug_last_error). *seconds is per call. */
bool bench_time(bool (*fn)(void *ctx), bool (*sync)(void *ctx), void *ctx, int warmup,
                double target_seconds, double *seconds, long *reps);

/* The host's memory bandwidth in bytes per second: the best of a few
 * 64 MiB copies split over bench_cpu_threads() threads, reads and writes
 * counted; 0 without the memory. */
double bench_host_bandwidth(void);

/* The CPU device's thread budget (UG_NUM_THREADS, else the CPUs allowed). */
int bench_cpu_threads(void);

/* bench_time for OpenBLAS called directly on the host, threaded with the CPU
 * device's budget: the library keeps OpenBLAS single-threaded inside its own
 * pool, so the baseline gets the same cores to itself, then gives them back. */
bool bench_time_host_blas(bool (*fn)(void *ctx), void *ctx, int warmup, double target_seconds,
                          double *seconds, long *reps);

/* fn (with sync, as bench_time) against OpenBLAS's blas_fn on the host
 * (as bench_time_host_blas), in alternating rounds over about
 * target_seconds in all: the median round of each, and the median of the
 * rounds' ratios fn / blas_fn. A shared machine's speed drifts between two
 * timings one after the other; alternating puts both under the same load. */
bool bench_time_against_blas(bool (*fn)(void *ctx), bool (*sync)(void *ctx), void *ctx,
                             bool (*blas_fn)(void *ctx), void *blas_ctx, double target_seconds,
                             double *seconds, double *blas_seconds, double *ratio);

/* bench_profile.c: step (on device; bench_time's sync is the device's)
 * timed with the profiler off and on, each step in a "step" range, in 5
 * alternating rounds over about target_seconds: the median rounds and the
 * median of the rounds' ratios on / off. With trace, the middle recorded
 * round's Chrome trace is written there, with its launches' device time
 * per step and those steps' mean span on the device, from the recording. */
typedef struct bench_profile_result {
    double off_s, on_s, ratio;
    double traced_launches_s, traced_step_s; /* 0 without a trace */
} bench_profile_result;
bool bench_profiler_overhead(bool (*step)(void *ctx), void *ctx, ug_device *device, double target_seconds,
                             const char *trace, bench_profile_result *result);

/* Every device id this run should cover: the one named (validated by
 * opening it) or all of them. Returns the count, or -1 with the error printed. */
int bench_device_ids(const char *only, char ids[][32], int max_ids);

/* Prints the library's error for what and returns 2. */
int bench_fail(const char *what);

#endif
