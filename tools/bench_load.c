/* ug-bench load: the CPU backend on a machine it does not have to itself.
 * ug-train's MLP (784-500-10, Adam, batch 64) trains an epoch on cpu
 * through the prefetching loader, with the device's whole thread budget
 * and with one thread, alone and beside busy loops this command starts
 * (child processes spinning at the same priority). Each figure is read
 * against the one-thread run under the same load, timed in rounds that
 * alternate the two, so a pool whose threads wait for descheduled peers
 * shows as a ratio far above 1 where a fair share of the cores gives at
 * most about 1.
 *
 * The loops are bounded three ways: killed after their load's rounds, on
 * SIGINT, SIGTERM or SIGHUP (the handler kills them, then the signal ends
 * ug-bench as it would have), and, should ug-bench die without running the
 * handler, by the kernel (PR_SET_PDEATHSIG) and by their own alarm. */
#define _GNU_SOURCE 1 /* prctl, setenv, kill */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "mlp.h"

enum { FEATURES = 784, HIDDEN = 500, CLASSES = 10, BATCH = 64, WARMUP_STEPS = 20,
       MAX_LOADS = 8, MAX_LOOPS = 64, MAX_ROUNDS = 15 };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench load [--loads LIST] [--rounds N] [--steps N] [--limit S]\n"
            "Trains ug-train's MLP (784-500-10, Adam, batch 64) on cpu for an epoch of\n"
            "Fashion-MNIST (random data of its size when it is not installed; --steps N:\n"
            "the first N batches instead) with the device's thread budget (UG_NUM_THREADS,\n"
            "else every CPU allowed) and with one thread, beside each count of busy loops\n"
            "in LIST (default 0,1,2): child processes spinning at this one's priority,\n"
            "started for that load and killed after it. Each load runs N rounds (default\n"
            "3), each timing both thread counts one after the other; the table gives the\n"
            "median times and the median of the rounds' ratios to the one-thread time.\n"
            "A busy loop ends itself after S seconds (default 600) should ug-bench be\n"
            "killed before it can end them; Ctrl-C ends them at once.\n");
}

/* The running loops, read by the signal handler. */
static volatile sig_atomic_t loop_count;
static volatile pid_t loop_pids[MAX_LOOPS];

static void stop_loops(void)
{
    for (int i = 0; i < loop_count; i++)
        kill(loop_pids[i], SIGKILL);
    for (int i = 0; i < loop_count; i++)
        waitpid(loop_pids[i], NULL, 0);
    loop_count = 0;
}

/* SIGINT and friends: end the loops (kill and waitpid are async-signal-safe),
 * then die of the same signal. */
static void on_signal(int sig)
{
    for (int i = 0; i < loop_count; i++)
        kill(loop_pids[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP};
enum { HANDLED_SIGNALS = sizeof handled_signals / sizeof handled_signals[0] };

/* A child that spins until killed, its parent dies or limit seconds pass.
 * Only async-signal-safe calls after fork: the parent has threads. */
static bool start_loops(int count, unsigned limit)
{
    const pid_t parent = getpid();
    for (int i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "ug-bench load: fork failed starting busy loop %d of %d\n", i + 1, count);
            stop_loops();
            return false;
        }
        if (pid == 0) {
            for (int s = 0; s < HANDLED_SIGNALS; s++)
                signal(handled_signals[s], SIG_DFL);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) /* the parent died before prctl */
                _exit(0);
            alarm(limit);
            for (volatile unsigned long spin = 0;; spin++)
                ;
        }
        loop_pids[i] = pid;
        loop_count = i + 1;
    }
    return true;
}

/* The CPU device opened with a thread budget of threads (UG_NUM_THREADS
 * is read when the device opens; nothing else of ours runs meanwhile). */
static ug_status open_cpu(int threads, ug_device **device)
{
    char value[16];
    snprintf(value, sizeof value, "%d", threads);
    if (setenv("UG_NUM_THREADS", value, 1) != 0) {
        fprintf(stderr, "ug-bench load: setenv UG_NUM_THREADS failed (out of memory)\n");
        return UG_ERR_OUT_OF_MEMORY;
    }
    return ug_device_open("cpu", device);
}

/* A fresh device, trainer's step (trainer.h) and loader: WARMUP_STEPS
 * untimed steps, then the timed steps (0: the whole epoch) on epoch 1's
 * batches. */
static ug_status time_epoch(ug_dataset *data, int threads, int64_t steps, double *seconds)
{
    ug_device *device = NULL;
    ug_train_step *step = NULL;
    ug_loader *loader = NULL;
    mlp_config cfg = {.inputs = FEATURES, .classes = CLASSES, .hidden_count = 1, .hidden = {HIDDEN},
                      .precision = UG_F32};
    ug_trainer_config c = ug_trainer_defaults(); /* Adam */
    c.batch_size = BATCH;
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = BATCH;
    ug_status st = open_cpu(threads, &device);
    if (st == UG_OK) st = ug_train_step_create(device, FEATURES, 0, mlp_forward, &cfg, &c, &step);
    if (st == UG_OK) st = ug_loader_create(data, device, &lc, &loader);
    for (int epoch = 0; epoch < 2 && st == UG_OK; epoch++) {
        const int64_t limit = epoch == 0 ? WARMUP_STEPS : steps > 0 ? steps : INT64_MAX;
        double start = bench_now();
        st = ug_loader_start_epoch(loader, epoch);
        bool done = false;
        for (int64_t i = 0; st == UG_OK && i < limit; i++) {
            ug_batch b;
            st = ug_loader_next(loader, &b, &done);
            if (st != UG_OK || done)
                break;
            st = ug_train_step_run(step, b.x, b.y, false);
        }
        if (st == UG_OK)
            st = ug_device_synchronize(device);
        *seconds = bench_now() - start;
    }
    ug_loader_free(loader);
    ug_train_step_free(step);
    ug_device_close(device);
    return st;
}

/* "0,1,2" into counts; false on anything else. */
static bool parse_loads(const char *text, int *loads, int *count)
{
    *count = 0;
    for (const char *p = text; *p;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > MAX_LOOPS || *count == MAX_LOADS || (*end && *end != ','))
            return false;
        loads[(*count)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return *count > 0;
}

static bool parse_positive(const char *text, long max, long *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > max)
        return false;
    *out = v;
    return true;
}

int bench_load(int argc, char **argv)
{
    int loads[MAX_LOADS] = {0, 1, 2}, load_count = 3;
    long rounds = 3, steps = 0, limit = 600;
    for (int i = 1; i < argc; i++) {
        bool value = i + 1 < argc;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (value && !strcmp(argv[i], "--loads") && parse_loads(argv[i + 1], loads, &load_count)) {
            i++;
        } else if (value && !strcmp(argv[i], "--rounds") && parse_positive(argv[i + 1], MAX_ROUNDS, &rounds)) {
            i++;
        } else if (value && !strcmp(argv[i], "--steps") && parse_positive(argv[i + 1], 1L << 30, &steps)) {
            i++;
        } else if (value && !strcmp(argv[i], "--limit") && parse_positive(argv[i + 1], 86400, &limit)) {
            i++;
        } else {
            fprintf(stderr, "ug-bench load: bad or unknown option '%s' (--loads takes counts of 0..%d such as "
                            "0,1,2; --rounds 1..%d; --steps and --limit positive integers)\n",
                    argv[i], MAX_LOOPS, MAX_ROUNDS);
            usage(stderr);
            return 2;
        }
    }
    const int budget = bench_cpu_threads();
    const char *saved = getenv("UG_NUM_THREADS");
    char saved_value[32] = "";
    if (saved)
        snprintf(saved_value, sizeof saved_value, "%s", saved);
    bool real = false;
    ug_dataset *data = bench_fashion_mnist(&real);
    if (!data)
        return bench_fail("the training data");
    if (!ug_set_flush_denormal(true))
        fprintf(stderr, "ug-bench load: this processor cannot flush denormals; times may grow as training goes\n");

    struct sigaction sa = {0}, old[HANDLED_SIGNALS];
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int s = 0; s < HANDLED_SIGNALS; s++)
        sigaction(handled_signals[s], &sa, &old[s]);

    const int thread_counts[2] = {budget, 1}, thread_kinds = budget > 1 ? 2 : 1;
    printf("ug-bench load: ug-train's MLP 784-%d-%d (Adam, batch %d) on cpu, %s of %s, %ld round%s;\n"
           "  busy loops: child processes spinning at this one's priority\n",
           HIDDEN, CLASSES, BATCH, steps ? "steps" : "an epoch", real ? "Fashion-MNIST" : "random data",
           rounds, rounds > 1 ? "s" : "");
    if (steps)
        printf("  steps: %ld\n", steps);
    printf("%-10s %-8s %10s %12s\n", "loops", "threads", "seconds", "x 1-thread");
    fflush(stdout);
    int rc = 0;
    for (int l = 0; l < load_count && rc == 0; l++) {
        double times[2][MAX_ROUNDS], ratios[MAX_ROUNDS];
        if (!start_loops(loads[l], (unsigned)limit)) {
            rc = 2;
            break;
        }
        for (int r = 0; r < rounds && rc == 0; r++) {
            for (int k = 0; k < thread_kinds && rc == 0; k++) {
                bench_settle();
                if (time_epoch(data, thread_counts[k], steps, &times[k][r]) != UG_OK)
                    rc = bench_fail("training the MLP");
            }
            ratios[r] = times[0][r] / times[thread_kinds - 1][r];
        }
        stop_loops();
        if (rc)
            break;
        for (int k = 0; k < thread_kinds; k++) {
            double t = bench_median(times[k], (int)rounds);
            double ratio = k == thread_kinds - 1 ? 1.0 : bench_median(ratios, (int)rounds);
            printf("%-10d %-8d %10.2f %12.2f\n", loads[l], thread_counts[k], t, ratio);
        }
        fflush(stdout);
    }
    stop_loops();
    for (int s = 0; s < HANDLED_SIGNALS; s++)
        sigaction(handled_signals[s], &old[s], NULL);
    if (saved)
        setenv("UG_NUM_THREADS", saved_value, 1);
    else
        unsetenv("UG_NUM_THREADS");
    ug_dataset_free(data);
    return rc;
}
