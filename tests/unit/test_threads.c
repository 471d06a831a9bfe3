/* One device used from several threads at once: opening and closing it,
 * pool allocations, eager ops and transfers, each thread checking its own
 * results. Then the CPU backend's worker threads themselves: ops large
 * enough to be split over them, many in a row, each index computed once;
 * and ops that must finish while every other thread of the process is
 * stopped, as a descheduled worker on a busy machine is. Built under
 * ThreadSanitizer in CI (UG_SANITIZE_THREAD). */
#define _GNU_SOURCE 1 /* syscall, SYS_gettid, SYS_tgkill */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

enum { THREADS = 4, ROUNDS = 40, N = 3000 };

typedef struct worker {
    const char *device;
    int index;
    int failures;
    char message[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    ug_device *dev = NULL;
    if (ug_device_open(w->device, &dev) != UG_OK) {
        snprintf(w->message, sizeof w->message, "open: %s", ug_last_error());
        w->failures++;
        return NULL;
    }
    static float host[THREADS][N], out[THREADS][N];
    float *x = host[w->index], *y = out[w->index];
    int64_t n = N;
    for (int round = 0; round < ROUNDS && !w->failures; round++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)(w->index * 1000 + round + i % 17);
        ug_tensor *a = NULL, *b = NULL, *s = NULL;
        ug_status st = ug_tensor_from_host(dev, UG_F32, 1, &n, x, &a);
        if (st == UG_OK) st = ug_add(a, a, &b);
        if (st == UG_OK) st = ug_scale_shift(b, 0.5f, 1.0f, &s);
        if (st == UG_OK) st = ug_tensor_download(s, y, sizeof out[0]);
        for (int i = 0; st == UG_OK && i < N; i++)
            if (y[i] != x[i] + 1.0f) {
                snprintf(w->message, sizeof w->message, "round %d element %d is %g, expected %g",
                         round, i, (double)y[i], (double)(x[i] + 1.0f));
                w->failures++;
                break;
            }
        if (st != UG_OK) {
            snprintf(w->message, sizeof w->message, "round %d: %s", round, ug_last_error());
            w->failures++;
        }
        ug_tensor_free(s);
        ug_tensor_free(b);
        ug_tensor_free(a);
    }
    ug_device_close(dev);
    return NULL;
}

static void test_one_device_many_threads(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.device = info.id, .index = i};
        REQUIRE(pthread_create(&t[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        CHECK_MSG(w[i].failures == 0, "thread %d: %s", i, w[i].message);
}

/* Sizes around the CPU backend's threshold for splitting an op (32768
 * elements) and splits that leave remainders; 30 rounds of each in a row,
 * so workers that finish one job meet the next while others still start. */
static void test_split_ops_compute_every_index_once(ug_device *dev)
{
    static const int64_t sizes[] = {32768, 32769, 65537, 200003, 1 << 20};
    enum { ROUNDS = 30 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        float *x = th_alloc((size_t)n * sizeof *x), *y = th_alloc((size_t)n * sizeof *y);
        float *out = th_alloc((size_t)n * sizeof *out);
        REQUIRE(x && y && out);
        for (int round = 0; round < ROUNDS; round++) {
            th_context("n %lld, round %d", (long long)n, round);
            for (int64_t i = 0; i < n; i++) {
                x[i] = (float)(i % 1000 + round);
                y[i] = (float)(2 * round + 1);
            }
            ug_tensor *a = NULL, *b = NULL, *c = NULL;
            REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 1, &n, x, &a));
            th_track(a);
            REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 1, &n, y, &b));
            th_track(b);
            REQUIRE_OK(ug_add(a, b, &c));
            th_track(c);
            REQUIRE_OK(ug_tensor_download(c, out, (size_t)n * sizeof *out));
            int64_t wrong = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (out[i] != (float)(i % 1000 + 3 * round + 1) && wrong++ == 0)
                    first = i;
            CHECK_MSG(wrong == 0, "%lld of %lld sums wrong, the first at %lld: %g, expected %g",
                      (long long)wrong, (long long)n, (long long)first, (double)out[first],
                      (double)(first % 1000 + 3 * round + 1));
            th_release(c);
            th_release(b);
            th_release(a);
        }
    }
    th_context("%s", "");
}

/* ---- every other thread stopped ---- */

static atomic_int parked, release_parked;

/* SIGUSR1: the thread stays here until released (nanosleep and lock-free
 * atomics are async-signal-safe). */
static void park(int sig)
{
    (void)sig;
    atomic_fetch_add(&parked, 1);
    while (!atomic_load(&release_parked))
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    atomic_fetch_sub(&parked, 1);
}

typedef struct watchdog {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_t thread;
    pid_t tid;
    bool done, timed_out;
} watchdog;

/* Releases the parked threads if the ops are not done within 20 s, so a
 * pool that waits for them fails this test instead of hanging it. */
static void *watch(void *arg)
{
    watchdog *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&w->lock);
    w->tid = (pid_t)syscall(SYS_gettid);
    pthread_cond_broadcast(&w->changed);
    while (!w->done && pthread_cond_timedwait(&w->changed, &w->lock, &until) == 0)
        ;
    if (!w->done) {
        w->timed_out = true;
        atomic_store(&release_parked, 1);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Whether thread tid blocks SIGUSR1 (a runtime's service thread may block
 * every signal; such a thread cannot be stopped this way, and is not the
 * pool's). */
static bool blocks_sigusr1(pid_t tid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    bool blocked = false;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "SigBlk:", 7) == 0)
            blocked = (strtoull(line + 7, NULL, 16) >> (SIGUSR1 - 1)) & 1;
    if (f)
        fclose(f);
    return blocked;
}

/* Sends SIGUSR1 to every thread of the process but the caller and skip;
 * returns how many it reached. */
static int park_other_threads(pid_t skip)
{
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return -1;
    const pid_t self = (pid_t)syscall(SYS_gettid);
    int sent = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && tid != self && tid != skip && !blocks_sigusr1(tid) &&
            syscall(SYS_tgkill, (pid_t)getpid(), tid, SIGUSR1) == 0)
            sent++;
    }
    closedir(dir);
    return sent;
}

/* The CPU device's ops, split over its workers, while every other thread
 * of the process (the workers, OpenBLAS's and OpenMP's threads) is stopped:
 * the calling thread must do all the work itself, as it must when the
 * scheduler gives the workers' cores to other processes; a pool that waits
 * for a worker that has not started its part never returns. */
static void test_ops_finish_while_other_threads_are_stopped(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    if (strcmp(info.backend, "cpu") != 0) {
        th_skip("the CPU backend's threads only");
        return;
    }
    enum { N = 1 << 20, M = 192, K = 160, P = 256 };
    int64_t n = N, a_shape[2] = {M, K}, b_shape[2] = {K, P};
    float *x = th_alloc(N * sizeof *x), *sum = th_alloc(N * sizeof *sum);
    float *a = th_alloc(M * K * sizeof *a), *b = th_alloc(K * P * sizeof *b), *c = th_alloc(M * P * sizeof *c);
    REQUIRE(x && sum && a && b && c);
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 4096);
    for (int i = 0; i < M * K; i++) /* small integers: every product and sum exact in f32 */
        a[i] = (float)(i % 7 - 3);
    for (int i = 0; i < K * P; i++)
        b[i] = (float)(i % 5 - 2);
    ug_tensor *tx = NULL, *ta = NULL, *tb = NULL, *warm = NULL;
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 1, &n, x, &tx));
    th_track(tx);
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, a_shape, a, &ta));
    th_track(ta);
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, b_shape, b, &tb));
    th_track(tb);
    /* Once first, so that every thread the ops use exists before the stop. */
    REQUIRE_OK(ug_add(tx, tx, &warm));
    th_track(warm);
    REQUIRE_OK(ug_device_synchronize(dev));

    /* The handler stays: a signal that arrives late (ThreadSanitizer defers
     * them) finds release_parked set and returns at once. */
    struct sigaction sa = {0};
    sa.sa_handler = park;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
    atomic_store(&release_parked, 0);
    watchdog w = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};
    REQUIRE(pthread_create(&w.thread, NULL, watch, &w) == 0);
    pthread_mutex_lock(&w.lock);
    while (!w.tid)
        pthread_cond_wait(&w.changed, &w.lock);
    pthread_mutex_unlock(&w.lock);

    const int sent = park_other_threads(w.tid);
    const double until = (double)time(NULL) + 5.0;
    while (atomic_load(&parked) < sent && (double)time(NULL) < until)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    const int stopped = atomic_load(&parked);

    ug_tensor *ts = NULL, *tc = NULL;
    ug_status st_sum = ug_add(tx, tx, &ts);
    ug_status st_mm = st_sum == UG_OK ? ug_matmul(ta, tb, false, false, &tc) : st_sum;
    if (st_mm == UG_OK)
        st_mm = ug_device_synchronize(dev);

    pthread_mutex_lock(&w.lock);
    w.done = true;
    pthread_cond_broadcast(&w.changed);
    pthread_mutex_unlock(&w.lock);
    pthread_join(w.thread, NULL);
    atomic_store(&release_parked, 1);
    while (atomic_load(&parked) > 0)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    th_track(ts);
    th_track(tc);

    /* ThreadSanitizer delays signals to threads blocked outside the calls
     * it knows, so there some threads may have run: the results still
     * count, the waiting does not. */
    if (stopped < sent)
        printf("  note: %d of %d other threads stopped; the check for waiting covers those\n", stopped,
               sent);
    CHECK_MSG(!w.timed_out, "the ops were not done 20 s after every other thread stopped: the "
                            "caller waited for a stopped thread");
    REQUIRE_OK(st_sum);
    REQUIRE_OK(st_mm);
    REQUIRE_OK(ug_tensor_download(ts, sum, N * sizeof *sum));
    REQUIRE_OK(ug_tensor_download(tc, c, M * P * sizeof *c));
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += sum[i] != 2.0f * x[i];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < P; j++) {
            double ref = 0;
            for (int k = 0; k < K; k++)
                ref += (double)a[i * K + k] * b[k * P + j];
            wrong += c[i * P + j] != (float)ref;
        }
    CHECK_MSG(wrong == 0, "%d results wrong", wrong);
}

int main(int argc, char **argv)
{
    /* At least three workers wherever this runs, so every path of the
     * pool's hand-over is taken even on a one- or two-core machine. */
    setenv("UG_NUM_THREADS", "4", 0);
    static const th_test tests[] = {
        TH_DEVICE_TEST(one_device_many_threads),
        TH_DEVICE_TEST(split_ops_compute_every_index_once),
        TH_DEVICE_TEST(ops_finish_while_other_threads_are_stopped),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
