/* The worker threads of the CPU backend.
 *
 * One job at a time: the caller publishes it under the mutex and bumps a
 * generation counter; woken workers attach to it (counted in `active`) and
 * claim task numbers from an atomic counter alongside the caller. When the
 * caller finds no task left it waits for active == 0 and detaches the job,
 * so a worker that wakes late never sees a finished job. A second caller
 * (another thread, or a nested call from inside a task) finds `busy` held
 * and runs its work inline instead of waiting.
 *
 * Waking a sleeping thread costs tens of microseconds (more in a virtual
 * machine), as long as a small op itself: a worker that finished a job
 * spins a while for the next one, and the caller spins for the workers to
 * finish, before either sleeps on its condition variable. A training step
 * issues its ops back to back, so the spin mostly meets the next job.
 *
 * Built with oneDNN, whose convolutions run on OpenMP's threads, the jobs
 * run on those same threads instead (an OpenMP parallel region of the
 * thread budget's size), and no worker of our own is started: two pools on
 * the same cores each keep cores the other waits for (libgomp's threads
 * spin for milliseconds after every region, the convolutions' included),
 * which made the CNN's step 30-40% slower on two cores. OpenMP's threads
 * claim tasks from the job just as the workers do. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#endif
#include "base/clock.h"
#include "base/fault.h"
#include "backends/cpu/threads.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h> /* the MXCSR register */
#endif
#ifdef UG_CPU_ONEDNN
#include <omp.h>
#endif

#include "backends/cpu/internal.h"

enum { UG_CPU_MAX_THREADS = 1024, UG_CPU_TASKS_PER_THREAD = 4 };

/* How long a thread spins before it sleeps: about the time between two
 * ops of a step, far below what an idle process would notice. */
#define UG_CPU_SPIN_SECONDS 100e-6

typedef struct worker_job {
    ug_cpu_range_fn fn;
    void *ctx;
    int64_t n, ntasks;
    atomic_llong next; /* next unclaimed task */
} worker_job;

struct ug_cpu_workers {
    pthread_mutex_t mutex;
    pthread_cond_t wake; /* workers: a new generation or stop */
    pthread_cond_t idle; /* caller: active fell to 0 */
    pthread_mutex_t busy; /* held by the one caller running a job */
    worker_job *job;        /* NULL between jobs */
    _Atomic uint64_t generation; /* written under mutex; read by spinning workers */
    atomic_int active; /* workers attached to job (changed under mutex) */
    bool stop;
    int nworkers;
    int team; /* threads running a job, the caller's included */
    pthread_t *threads;
};

ug_status ug_cpu_thread_budget(int *threads, bool report)
{
    const char *env = getenv("UG_NUM_THREADS");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (!errno && end != env && *end == '\0' && v >= 1 && v <= UG_CPU_MAX_THREADS) {
            *threads = (int)v;
            return UG_OK;
        }
        if (report)
            return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT,
                                "UG_NUM_THREADS=\"%s\" is not a thread count: use an integer "
                                "from 1 to %d, or unset it to use every available CPU",
                                env, UG_CPU_MAX_THREADS);
    }
    int n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = 1;
    if (n > UG_CPU_MAX_THREADS)
        n = UG_CPU_MAX_THREADS;
    *threads = n;
    return UG_OK;
}

/* Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6), requested
 * process-wide by ug_set_flush_denormal and taken up by each worker thread
 * before its next task. */
#if defined(__SSE__) || defined(__x86_64__)
#define UG_DENORMAL_BITS 0x8040u
static atomic_int flush_denormal;

static void apply_flush_denormal(void)
{
    unsigned csr = _mm_getcsr();
    unsigned want = atomic_load_explicit(&flush_denormal, memory_order_relaxed)
                        ? csr | UG_DENORMAL_BITS
                        : csr & ~UG_DENORMAL_BITS;
    if (want != csr)
        _mm_setcsr(want);
}

bool ug_set_flush_denormal(bool enabled)
{
    atomic_store(&flush_denormal, enabled ? 1 : 0);
    apply_flush_denormal();
    return true;
}

bool ug_flush_denormal(void) { return atomic_load(&flush_denormal) != 0; }
#else
static void apply_flush_denormal(void) {}
bool ug_set_flush_denormal(bool enabled) { return !enabled; }
bool ug_flush_denormal(void) { return false; }
#endif

static void run_tasks(worker_job *job)
{
    apply_flush_denormal();
    for (;;) {
        long long t = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (t >= job->ntasks)
            return;
        /* Even split: the first n % T tasks take one index more. */
        int64_t base = job->n / job->ntasks, rem = job->n % job->ntasks;
        int64_t begin = t * base + (t < rem ? t : rem);
        int64_t end = begin + base + (t < rem ? 1 : 0);
        job->fn(job->ctx, begin, end);
    }
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

/* Spins until done(ctx) or UG_CPU_SPIN_SECONDS have passed. */
static void spin_until(bool (*done)(void *), void *ctx)
{
    const double until = ug_seconds_now() + UG_CPU_SPIN_SECONDS;
    for (int i = 0; !done(ctx); i++) {
        cpu_relax();
        if (i % 64 == 63 && ug_seconds_now() > until)
            return;
    }
}

typedef struct generation_watch {
    ug_cpu_workers *workers;
    uint64_t seen;
} generation_watch;

static bool new_generation(void *ctx)
{
    const generation_watch *w = ctx;
    return atomic_load_explicit(&w->workers->generation, memory_order_acquire) != w->seen;
}

static bool no_active(void *ctx)
{
    return atomic_load_explicit(&((ug_cpu_workers *)ctx)->active, memory_order_acquire) == 0;
}

static void *worker_main(void *arg)
{
    ug_cpu_workers *workers = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&workers->mutex);
    for (;;) {
        if (!workers->stop && workers->generation == seen) {
            pthread_mutex_unlock(&workers->mutex);
            spin_until(new_generation, &(generation_watch){workers, seen});
            pthread_mutex_lock(&workers->mutex);
        }
        while (!workers->stop && workers->generation == seen)
            pthread_cond_wait(&workers->wake, &workers->mutex);
        if (workers->stop)
            break;
        seen = workers->generation;
        worker_job *job = workers->job;
        if (!job)
            continue; /* woke after that job was already done */
        workers->active++;
        pthread_mutex_unlock(&workers->mutex);
        run_tasks(job);
        pthread_mutex_lock(&workers->mutex);
        if (--workers->active == 0)
            pthread_cond_signal(&workers->idle);
    }
    pthread_mutex_unlock(&workers->mutex);
    return NULL;
}

static void stop_workers(ug_cpu_workers *workers, int started)
{
    pthread_mutex_lock(&workers->mutex);
    workers->stop = true;
    pthread_cond_broadcast(&workers->wake);
    pthread_mutex_unlock(&workers->mutex);
    for (int i = 0; i < started; i++)
        pthread_join(workers->threads[i], NULL);
}

static void free_workers(ug_cpu_workers *workers)
{
    pthread_mutex_destroy(&workers->busy);
    pthread_cond_destroy(&workers->idle);
    pthread_cond_destroy(&workers->wake);
    pthread_mutex_destroy(&workers->mutex);
    free(workers->threads);
    free(workers);
}

ug_status ug_cpu_workers_create(int threads, ug_cpu_workers **out)
{
    *out = NULL;
    ug_cpu_workers *workers = ug_calloc(1, sizeof *workers);
#ifdef UG_CPU_ONEDNN
    int nworkers = 0; /* OpenMP's threads run the jobs */
#else
    int nworkers = threads > 1 ? threads - 1 : 0;
#endif
    if (!workers)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for the worker threads");
    workers->threads = ug_calloc((size_t)(nworkers ? nworkers : 1), sizeof *workers->threads);
    if (!workers->threads) {
        free(workers);
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for the worker threads");
    }
    pthread_mutex_init(&workers->mutex, NULL);
    pthread_cond_init(&workers->wake, NULL);
    pthread_cond_init(&workers->idle, NULL);
    pthread_mutex_init(&workers->busy, NULL);
    for (int i = 0; i < nworkers; i++) {
        int rc = pthread_create(&workers->threads[i], NULL, worker_main, workers);
        if (rc != 0) {
            stop_workers(workers, i);
            free_workers(workers);
            return UG_CPU_ERROR(UG_ERR_BACKEND,
                                "cpu: pthread_create failed (%s) starting worker %d of %d; "
                                "set UG_NUM_THREADS lower",
                                strerror(rc), i + 1, nworkers);
        }
    }
    workers->nworkers = nworkers;
    workers->team = threads > 1 ? threads : 1;
    *out = workers;
    return UG_OK;
}

void ug_cpu_workers_destroy(ug_cpu_workers *workers)
{
    if (!workers)
        return;
    stop_workers(workers, workers->nworkers);
    free_workers(workers);
}

/* Runs job on the caller and the workers (OpenMP's threads with oneDNN);
 * the caller holds busy. */
static void run_job(ug_cpu_workers *workers, worker_job *job)
{
#ifdef UG_CPU_ONEDNN
    if (workers->nworkers == 0) { /* a team but no workers: OpenMP's threads */
#pragma omp parallel num_threads(workers->team)
        run_tasks(job);
        return;
    }
#endif
    pthread_mutex_lock(&workers->mutex);
    workers->job = job;
    workers->generation++;
    pthread_cond_broadcast(&workers->wake);
    pthread_mutex_unlock(&workers->mutex);

    run_tasks(job);

    /* Every task is claimed; those still running belong to attached workers. */
    spin_until(no_active, workers);
    pthread_mutex_lock(&workers->mutex);
    while (workers->active > 0)
        pthread_cond_wait(&workers->idle, &workers->mutex);
    workers->job = NULL;
    pthread_mutex_unlock(&workers->mutex);
}

void ug_cpu_parallel_for(ug_cpu_workers *workers, int64_t n, int64_t min_chunk,
                         ug_cpu_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    int64_t ntasks = n / min_chunk;
    if (workers) {
        int64_t cap = (int64_t)workers->team * UG_CPU_TASKS_PER_THREAD;
        if (ntasks > cap)
            ntasks = cap;
    }
    if (!workers || workers->team == 1 || ntasks <= 1 || pthread_mutex_trylock(&workers->busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    worker_job job = {.fn = fn, .ctx = ctx, .n = n, .ntasks = ntasks};
    atomic_init(&job.next, 0);
    run_job(workers, &job);
    pthread_mutex_unlock(&workers->busy);
}
