/* The worker threads of the CPU backend.
 *
 * Work is taken, never handed out. A job is one word, `state`: a
 * generation number, the job's task count and the next unclaimed task.
 * The caller publishes a job by storing a new generation, then claims tasks
 * from the word with compare-and-swap alongside any worker that is
 * running; whoever runs claims the next task, so the tasks of a worker that
 * the scheduler has put aside are done by the others. Once no task is left
 * the caller waits only for tasks already claimed and running (the count
 * `finished`), never for a worker that has claimed nothing: a worker that
 * wakes late finds the tasks gone and waits for the next job. A claim
 * that succeeds proves the job is the one the worker read, so the job's
 * fields need no lock: the caller rewrites them only after every claimed
 * task has finished. Tasks are fixed ranges whoever runs them, so results
 * do not depend on which thread ran what. A second caller (another thread,
 * or a nested call from inside a task) finds `busy` held and runs its work
 * inline instead.
 *
 * Waiting. Waking a sleeping thread costs tens of microseconds (more in a
 * virtual machine), as long as a small op itself: a worker that finished a
 * job spins a while for the next one, and the caller spins for claimed
 * tasks to finish, before either sleeps on a futex. A training step issues
 * its ops back to back, so the spin mostly meets the next job. When other
 * processes hold the cores, a spin only takes time from the thread it waits
 * for, so the pool notes it is contended (for UG_CPU_CONTENDED_SECONDS)
 * when one of its threads finds it lost its core: a spin interrupted for
 * half a millisecond, a worker woken long after the caller
 * woke it, or claimed tasks that finish long after the caller's own. Until
 * then every wait sleeps at once: the core goes to the thread waited for
 * (the kernel moves a runnable thread to a core that falls idle), and a
 * thread that sleeps keeps the scheduler's favour, so a woken worker seldom
 * loses its core mid-task.
 *
 * Built with oneDNN, whose convolutions run on OpenMP's threads: libgomp's
 * threads spin for milliseconds after each parallel region (GOMP_SPINCOUNT;
 * it reads the setting once, when it loads), and workers of our own beside
 * them lost cores to them (the CNN's step took about 20% longer on two cores).
 * So for UG_CPU_OPENMP_SECONDS after a convolution (in a CNN's training,
 * always), and while the pool is not contended, jobs run on OpenMP's team
 * instead, its threads claiming tasks in the same way. Only then: a
 * region ends at a barrier that waits for every thread of the team, so one
 * descheduled thread stalls it (an epoch of the MLP took 8x longer with two
 * threads than with one beside two busy processes when every job ran
 * there); a stall marks the pool contended, and the next jobs come back
 * here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT, syscall */
#endif
#include "base/clock.h"
#include "base/fault.h"
#include "backends/cpu/threads.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h> /* the MXCSR register */
#endif
#ifdef UG_CPU_ONEDNN
#include <omp.h>
#endif

#include "backends/cpu/internal.h"

enum { UG_CPU_MAX_THREADS = 1024, UG_CPU_TASKS_PER_THREAD = 4 };

/* How long a thread spins before it sleeps: longer than the gaps between
 * a training step's parallel ops (the MLP's few products run hundreds of
 * microseconds apart, the ops between them inline), as libgomp's threads
 * spin for milliseconds. A 100 us spin left the MLP's epoch about 10%
 * slower on two idle cores. Nobody spins while the pool is contended. */
#define UG_CPU_SPIN_SECONDS 2e-3
/* A spinning thread reads the clock every few microseconds; a gap longer
 * than this means it was descheduled while others ran. Also the lateness
 * that marks a wake-up or a claimed task as one that lost its core. */
#define UG_CPU_PREEMPTED_SECONDS 500e-6
/* How long the pool sleeps at once after it found itself contended. */
#define UG_CPU_CONTENDED_SECONDS 50e-3
/* How long after a convolution jobs run on OpenMP's team. */
#define UG_CPU_OPENMP_SECONDS 50e-3

/* The state word: generation (32 bits), task count and next task (16
 * each). The task count is at most UG_CPU_MAX_THREADS * TASKS_PER_THREAD. */
#define STATE_TASK_BITS 16
#define STATE_TASK_MASK ((1u << STATE_TASK_BITS) - 1)
_Static_assert(UG_CPU_MAX_THREADS * UG_CPU_TASKS_PER_THREAD <= STATE_TASK_MASK,
               "a job's task count must fit its field of the state word");

static inline uint64_t state_pack(uint32_t generation, uint32_t ntasks, uint32_t next)
{
    return (uint64_t)generation << 32 | (uint64_t)ntasks << STATE_TASK_BITS | next;
}
static inline uint32_t state_generation(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t state_ntasks(uint64_t s) { return (uint32_t)(s >> STATE_TASK_BITS) & STATE_TASK_MASK; }
static inline uint32_t state_next(uint64_t s) { return (uint32_t)s & STATE_TASK_MASK; }

struct ug_cpu_workers {
    _Atomic uint64_t state; /* the job: see state_pack */
    /* The job's fields: written by the caller before it stores a new
     * generation, read by a thread only after it claimed a task of it. */
    ug_cpu_range_fn fn;
    void *ctx;
    int64_t n;
    atomic_uint finished;      /* tasks of the job done (a futex word) */
    atomic_int caller_waiting; /* the caller sleeps on finished */
    atomic_uint wake;          /* bumped to wake sleeping workers (a futex word) */
    atomic_int sleepers;       /* workers asleep or about to sleep on wake */
    atomic_bool stop;
    _Atomic int64_t woken_ns;           /* when the caller last woke sleeping workers */
    _Atomic int64_t contended_until_ns; /* every wait sleeps at once until then */
    _Atomic int64_t openmp_until_ns;    /* jobs run on OpenMP's team until then */
    pthread_mutex_t busy;      /* held by the one caller running a job */
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

/* ---- waiting ---- */

static void futex_wait(atomic_uint *word, unsigned expected)
{
    /* Returns at once if *word != expected; a signal or spurious wake-up
     * returns early too: every caller checks its condition again. */
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int count)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

static int64_t nanoseconds(double seconds) { return (int64_t)(seconds * 1e9); }

static void mark_contended(ug_cpu_workers *workers, double now)
{
    atomic_store_explicit(&workers->contended_until_ns, nanoseconds(now + UG_CPU_CONTENDED_SECONDS),
                          memory_order_relaxed);
}

static bool contended(ug_cpu_workers *workers, double now)
{
    return nanoseconds(now) < atomic_load_explicit(&workers->contended_until_ns, memory_order_relaxed);
}

/* A thread waited from started until now for others whose share of the
 * work should have taken about expected: far longer means they were
 * descheduled. */
static void note_wait(ug_cpu_workers *workers, double started, double expected)
{
    double now = ug_seconds_now();
    if (now - started > UG_CPU_PREEMPTED_SECONDS + 2.0 * expected)
        mark_contended(workers, now);
}

/* Spins until done(ctx) or UG_CPU_SPIN_SECONDS have passed (not at all
 * while the pool is contended); returns done(ctx). */
static bool spin_until(ug_cpu_workers *workers, bool (*done)(ug_cpu_workers *, const void *),
                       const void *ctx)
{
    double last = ug_seconds_now();
    if (contended(workers, last))
        return done(workers, ctx);
    const double until = last + UG_CPU_SPIN_SECONDS;
    for (int i = 0;; i++) {
        if (done(workers, ctx))
            return true;
        cpu_relax();
        if (i % 64 == 63) {
            double now = ug_seconds_now();
            if (now - last > UG_CPU_PREEMPTED_SECONDS) { /* descheduled mid-spin */
                mark_contended(workers, now);
                return done(workers, ctx);
            }
            if (now > until)
                return false;
            last = now;
        }
    }
}

/* ---- running tasks ---- */

/* Task t of ntasks over [0, n): an even split, the first n % ntasks tasks
 * one index longer. */
static void run_task(ug_cpu_range_fn fn, void *ctx, int64_t n, int64_t ntasks, int64_t t)
{
    const int64_t base = n / ntasks, rem = n % ntasks;
    const int64_t begin = t * base + (t < rem ? t : rem);
    fn(ctx, begin, begin + base + (t < rem ? 1 : 0));
}

/* Claims the next task of the current job; false when none is left. */
static bool claim(ug_cpu_workers *workers, uint32_t *task, uint32_t *ntasks)
{
    uint64_t s = atomic_load_explicit(&workers->state, memory_order_acquire);
    for (;;) {
        if (state_next(s) >= state_ntasks(s))
            return false;
        if (atomic_compare_exchange_weak_explicit(&workers->state, &s, s + 1, memory_order_acquire,
                                                  memory_order_acquire)) {
            *task = state_next(s);
            *ntasks = state_ntasks(s);
            return true;
        }
    }
}

/* Claims and runs tasks until none is left; returns how many it ran. */
static unsigned run_tasks(ug_cpu_workers *workers, bool caller)
{
    uint32_t t, ntasks;
    unsigned ran = 0;
    for (; claim(workers, &t, &ntasks); ran++) {
        if (ran == 0)
            apply_flush_denormal();
        run_task(workers->fn, workers->ctx, workers->n, ntasks, t);
        /* The last task wakes a sleeping caller (seq_cst: the caller sets
         * caller_waiting before it reads finished a last time). */
        if (atomic_fetch_add(&workers->finished, 1) + 1 == ntasks && !caller &&
            atomic_load(&workers->caller_waiting))
            futex_wake(&workers->finished, 1);
    }
    return ran;
}

/* seq_cst: a worker about to sleep reads the state after it counted
 * itself in sleepers, the caller reads sleepers after it stored the state. */
static bool new_job(ug_cpu_workers *workers, const void *seen)
{
    return atomic_load(&workers->stop) ||
           state_generation(atomic_load(&workers->state)) != *(const uint32_t *)seen;
}

static void *worker_main(void *arg)
{
    ug_cpu_workers *workers = arg;
    uint32_t seen = 0;
    for (;;) {
        if (!spin_until(workers, new_job, &seen)) {
            /* Asleep until the caller bumps wake (seq_cst with its store
             * of the state and its read of sleepers: one sees the other). */
            unsigned ticket = atomic_load(&workers->wake);
            atomic_fetch_add(&workers->sleepers, 1);
            const bool sleep = !new_job(workers, &seen);
            if (sleep)
                futex_wait(&workers->wake, ticket);
            atomic_fetch_sub(&workers->sleepers, 1);
            if (sleep && new_job(workers, &seen))
                note_wait(workers, 1e-9 * (double)atomic_load_explicit(&workers->woken_ns,
                                                                       memory_order_relaxed), 0.0);
            continue;
        }
        if (atomic_load_explicit(&workers->stop, memory_order_acquire))
            return NULL;
        seen = state_generation(atomic_load_explicit(&workers->state, memory_order_relaxed));
        run_tasks(workers, false);
    }
}

static void stop_workers(ug_cpu_workers *workers, int started)
{
    atomic_store(&workers->stop, true);
    atomic_fetch_add(&workers->wake, 1);
    futex_wake(&workers->wake, INT_MAX);
    for (int i = 0; i < started; i++)
        pthread_join(workers->threads[i], NULL);
}

static void free_workers(ug_cpu_workers *workers)
{
    pthread_mutex_destroy(&workers->busy);
    free(workers->threads);
    free(workers);
}

ug_status ug_cpu_workers_create(int threads, ug_cpu_workers **out)
{
    *out = NULL;
    if (threads > UG_CPU_MAX_THREADS)
        threads = UG_CPU_MAX_THREADS;
    const int nworkers = threads > 1 ? threads - 1 : 0;
    ug_cpu_workers *workers = ug_calloc(1, sizeof *workers);
    if (!workers)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for the worker threads");
    workers->threads = ug_calloc((size_t)(nworkers ? nworkers : 1), sizeof *workers->threads);
    if (!workers->threads) {
        free(workers);
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for the worker threads");
    }
    atomic_init(&workers->state, state_pack(0, 0, 0));
    atomic_init(&workers->finished, 0);
    atomic_init(&workers->caller_waiting, 0);
    atomic_init(&workers->wake, 0);
    atomic_init(&workers->sleepers, 0);
    atomic_init(&workers->stop, false);
    atomic_init(&workers->woken_ns, 0);
    atomic_init(&workers->contended_until_ns, 0);
    atomic_init(&workers->openmp_until_ns, 0);
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

static bool all_finished(ug_cpu_workers *workers, const void *ntasks)
{
    return atomic_load_explicit(&workers->finished, memory_order_acquire) >= *(const uint32_t *)ntasks;
}

/* Runs ntasks tasks on the caller and whichever workers come; the caller
 * holds busy. */
static void run_job(ug_cpu_workers *workers, ug_cpu_range_fn fn, void *ctx, int64_t n, uint32_t ntasks)
{
    /* Every task of the last job has finished, so no thread reads these. */
    workers->fn = fn;
    workers->ctx = ctx;
    workers->n = n;
    atomic_store_explicit(&workers->finished, 0, memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&workers->state, memory_order_relaxed);
    atomic_store(&workers->state, state_pack(state_generation(s) + 1, ntasks, 0));
    if (atomic_load(&workers->sleepers) > 0) {
        atomic_store_explicit(&workers->woken_ns, nanoseconds(ug_seconds_now()), memory_order_relaxed);
        atomic_fetch_add(&workers->wake, 1);
        futex_wake(&workers->wake, INT_MAX);
    }

    const double start = ug_seconds_now();
    const unsigned mine = run_tasks(workers, true);
    const double ran = ug_seconds_now();

    /* Every task is claimed; wait for those still running elsewhere. */
    if (spin_until(workers, all_finished, &ntasks))
        return;
    for (;;) {
        atomic_store(&workers->caller_waiting, 1);
        unsigned done = atomic_load(&workers->finished);
        if (done >= ntasks)
            break;
        futex_wait(&workers->finished, done);
    }
    atomic_store(&workers->caller_waiting, 0);
    note_wait(workers, ran, (ran - start) / (mine ? mine : 1));
}

#ifdef UG_CPU_ONEDNN
typedef struct openmp_job {
    ug_cpu_range_fn fn;
    void *ctx;
    int64_t n, ntasks;
    atomic_llong next;
    double caller_started, caller_ran; /* the calling thread's tasks: first start, last end */
    int64_t caller_tasks;
} openmp_job;

/* The job on OpenMP's team, the caller its master; a stall at the region's
 * closing barrier marks the pool contended. */
static void run_on_openmp(ug_cpu_workers *workers, openmp_job *job)
{
#pragma omp parallel num_threads(workers->team)
    {
        const bool master = omp_get_thread_num() == 0;
        const double started = master ? ug_seconds_now() : 0.0;
        int64_t ran = 0;
        for (long long t; (t = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) < job->ntasks;
             ran++) {
            if (ran == 0)
                apply_flush_denormal();
            run_task(job->fn, job->ctx, job->n, job->ntasks, t);
        }
        if (master) {
            job->caller_started = started;
            job->caller_ran = ug_seconds_now();
            job->caller_tasks = ran;
        }
    }
    note_wait(workers, job->caller_ran,
              (job->caller_ran - job->caller_started) / (double)(job->caller_tasks ? job->caller_tasks : 1));
}

void ug_cpu_workers_used_openmp(ug_cpu_workers *workers)
{
    if (workers)
        atomic_store_explicit(&workers->openmp_until_ns, nanoseconds(ug_seconds_now() + UG_CPU_OPENMP_SECONDS),
                              memory_order_relaxed);
}
#else
void ug_cpu_workers_used_openmp(ug_cpu_workers *workers) { (void)workers; }
#endif

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
        /* A whole number of tasks a thread: 3 tasks on 2 threads would
         * leave one thread waiting for the other's second. */
        if (ntasks > workers->team)
            ntasks -= ntasks % workers->team;
    }
    if (!workers || workers->team == 1 || ntasks <= 1 || pthread_mutex_trylock(&workers->busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
#ifdef UG_CPU_ONEDNN
    const double now = ug_seconds_now();
    if (nanoseconds(now) < atomic_load_explicit(&workers->openmp_until_ns, memory_order_relaxed) &&
        !contended(workers, now)) {
        openmp_job job = {.fn = fn, .ctx = ctx, .n = n, .ntasks = ntasks};
        atomic_init(&job.next, 0);
        run_on_openmp(workers, &job);
        pthread_mutex_unlock(&workers->busy);
        return;
    }
#endif
    run_job(workers, fn, ctx, n, (uint32_t)ntasks);
    pthread_mutex_unlock(&workers->busy);
}
