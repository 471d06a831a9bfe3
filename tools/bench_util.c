/* Timing and device selection shared by the ug-bench subcommands. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs fn n times between two syncs and returns the seconds taken, or a
 * negative number on error. */
static double timed_batch(bool (*fn)(void *), bool (*sync)(void *), void *ctx, long n)
{
    if (sync && !sync(ctx))
        return -1.0;
    double start = bench_now();
    for (long i = 0; i < n; i++)
        if (!fn(ctx))
            return -1.0;
    if (sync && !sync(ctx))
        return -1.0;
    return bench_now() - start;
}

double bench_median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: at most a few hundred values */
        for (int k = i; k > 0 && v[k] < v[k - 1]; k--) {
            double swap = v[k];
            v[k] = v[k - 1];
            v[k - 1] = swap;
        }
    return v[n / 2];
}

bool bench_time(bool (*fn)(void *ctx), bool (*sync)(void *ctx), void *ctx, int warmup,
                double target_seconds, double *seconds, long *reps)
{
    if (warmup > 0 && timed_batch(fn, sync, ctx, warmup) < 0.0)
        return false;
    /* Calibrate with doubling batches until one takes a tenth of the target,
     * so a slow first guess costs little and a fast op is not timed on too
     * few calls for the clock. */
    long n = 1;
    double elapsed = 0.0;
    for (;;) {
        elapsed = timed_batch(fn, sync, ctx, n);
        if (elapsed < 0.0)
            return false;
        if (elapsed >= target_seconds * 0.1 || n >= (1L << 24))
            break;
        n *= 2;
    }
    /* The rest of the target in parts of a fixed length, and the median
     * part's time per call. Fixed-length parts make a short and a long run
     * estimate the same figure (a long run only takes more parts), and the
     * median keeps a burst of load elsewhere on a shared machine out of it. */
    enum { MIN_PARTS = 5, MAX_PARTS = 255 };
    const double part_seconds = 0.04;
    long parts = (long)(target_seconds / part_seconds);
    parts = parts < MIN_PARTS ? MIN_PARTS : parts > MAX_PARTS ? MAX_PARTS : parts;
    double per_call = elapsed / (double)n;
    long chunk = (long)(target_seconds / (double)parts / (per_call > 1e-9 ? per_call : 1e-9));
    if (chunk < 1)
        chunk = 1;
    double part_times[MAX_PARTS];
    for (long c = 0; c < parts; c++) {
        double t = timed_batch(fn, sync, ctx, chunk);
        if (t < 0.0)
            return false;
        part_times[c] = t / (double)chunk;
    }
    *seconds = bench_median(part_times, (int)parts);
    *reps = chunk * parts;
    return true;
}

void bench_settle(void)
{
    nanosleep(&(struct timespec){.tv_nsec = 30 * 1000 * 1000}, NULL);
}

bool bench_time_against_blas(bool (*fn)(void *ctx), bool (*sync)(void *ctx), void *ctx,
                             bool (*blas_fn)(void *ctx), void *blas_ctx, double target_seconds,
                             double *seconds, double *blas_seconds, double *ratio)
{
    enum { ROUNDS = 5 };
    double each = target_seconds / (2 * ROUNDS), times[ROUNDS], blas[ROUNDS], ratios[ROUNDS];
    long reps = 0;
    for (int r = 0; r < ROUNDS; r++) {
        bench_settle();
        if (!bench_time(fn, sync, ctx, r ? 1 : 3, each, &times[r], &reps))
            return false;
        bench_settle();
        if (!bench_time_host_blas(blas_fn, blas_ctx, r ? 1 : 3, each, &blas[r], &reps))
            return false;
        ratios[r] = times[r] / blas[r];
    }
    *seconds = bench_median(times, ROUNDS);
    *blas_seconds = bench_median(blas, ROUNDS);
    *ratio = bench_median(ratios, ROUNDS);
    return true;
}

int bench_fail(const char *what)
{
    fprintf(stderr, "ug-bench: %s: %s\n", what, ug_last_error());
    return 2;
}

int bench_device_ids(const char *only, char ids[][32], int max_ids)
{
    if (only) {
        ug_device *device;
        if (ug_device_open(only, &device) != UG_OK) {
            bench_fail(only);
            return -1;
        }
        snprintf(ids[0], 32, "%s", ug_device_name(device));
        ug_device_close(device);
        return 1;
    }
    int count = ug_device_count(), n = 0;
    for (int i = 0; i < count && n < max_ids; i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) != UG_OK) {
            bench_fail("ug_device_info_at");
            return -1;
        }
        snprintf(ids[n++], 32, "%s", info.id);
    }
    return n;
}

int bench_cpu_threads(void)
{
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) == UG_OK && strcmp(info.backend, "cpu") == 0)
            return info.compute_units > 0 ? (int)info.compute_units : 1;
    }
    return 1;
}

bool bench_time_host_blas(bool (*fn)(void *ctx), void *ctx, int warmup, double target_seconds,
                          double *seconds, long *reps)
{
    int before = openblas_get_num_threads();
    openblas_set_num_threads(bench_cpu_threads());
    bool ok = bench_time(fn, NULL, ctx, warmup, target_seconds, seconds, reps);
    openblas_set_num_threads(before);
    return ok;
}

typedef struct copy_part {
    char *dst;
    const char *src;
    size_t bytes;
} copy_part;

static void *copy_part_main(void *arg)
{
    const copy_part *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    return NULL;
}

double bench_host_bandwidth(void)
{
    enum { MAX_THREADS = 64, ROUNDS = 5 };
    const size_t bytes = (size_t)64 << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0.0;
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes); /* first touch outside the timing */
    int threads = bench_cpu_threads();
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    double best = 0.0;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t ids[MAX_THREADS];
        bool started[MAX_THREADS] = {false};
        copy_part parts[MAX_THREADS];
        size_t share = bytes / (size_t)threads;
        double start = bench_now();
        for (int t = 0; t < threads; t++) {
            parts[t] = (copy_part){dst + t * share, src + t * share,
                                   t == threads - 1 ? bytes - t * share : share};
            started[t] = t > 0 && pthread_create(&ids[t], NULL, copy_part_main, &parts[t]) == 0;
        }
        for (int t = 0; t < threads; t++) /* the caller's part, and any a thread did not take */
            if (!started[t])
                copy_part_main(&parts[t]);
        for (int t = 1; t < threads; t++)
            if (started[t])
                pthread_join(ids[t], NULL);
        double seconds = bench_now() - start, rate = 2.0 * (double)bytes / seconds;
        best = rate > best ? rate : best;
    }
    free(src);
    free(dst);
    return best;
}
