/* ug-bench gpt: the training step of examples/gpt.c's model in nanoGPT's
 * CPU configuration (tools/gpt_model.h; AdamW with decay on matrices,
 * warm-up and cosine, clipping at 1.0) per device, as the trainer takes it
 * (ug_train_step) on 16 batches of random tokens kept on the device:
 * milliseconds per iteration, tokens per second, the plan's memory and the
 * pool's measured peak, the devices in rounds taking turns, and each
 * against the cpu; after the cpu in each round, PyTorch's same step
 * (tools/torch_gpt.py, a process of its own with 1 and with 2 threads),
 * where the python has torch, and the ratio to its best. Then attention
 * alone at 1024 positions: the plan's activation memory fused and composed
 * (two products and a softmax). */
#define _GNU_SOURCE 1 /* posix_spawn, pipe, environ */
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "gpt_model.h"

#ifndef UG_BENCH_TORCH_GPT
#define UG_BENCH_TORCH_GPT "tools/torch_gpt.py"
#endif

enum { BATCH = 12, BATCHES = 16, MAX_DEVICES = 16, MAX_ROUNDS = 20 };

static void usage(FILE *out)
{
    fprintf(out, "usage: ug-bench gpt [--device NAME] [--seconds S] [--rounds N] [--python PATH]\n"
                 "                    [--no-torch]\n"
                 "Times the training step of examples/gpt.c's model in nanoGPT's CPU\n"
                 "configuration (4 layers, 4 heads, 128 channels, block 64, batch 12; AdamW,\n"
                 "decay on matrices, clipping at 1.0) on each device, or the one named, in N\n"
                 "rounds (default 3) of about S seconds (default 2) each device in turn: ms per\n"
                 "iteration, tokens/s, the plan's and the pool's peak memory, and each device\n"
                 "against the cpu. After the cpu in each round, PyTorch's same step\n"
                 "(" UG_BENCH_TORCH_GPT ") with 1 and 2 threads, where PATH (default\n"
                 "/usr/bin/python3) has torch; --no-torch skips it.\n"
                 "Then attention at 1024 positions: activation memory fused and composed.\n");
}

typedef struct gpt_step {
    ug_device *device;
    ug_train_step *step;
    ug_tensor *x[BATCHES], *y[BATCHES];
    int next;
} gpt_step;

static bool run_step(void *ctx)
{
    gpt_step *s = ctx;
    const int i = s->next++ % BATCHES;
    return ug_train_step_run(s->step, s->x[i], s->y[i], false) == UG_OK;
}

static bool sync_step(void *ctx) { return ug_device_synchronize(((gpt_step *)ctx)->device) == UG_OK; }

static void free_step(gpt_step *s)
{
    ug_train_step_free(s->step);
    for (int i = 0; i < BATCHES; i++) {
        ug_tensor_free(s->x[i]);
        ug_tensor_free(s->y[i]);
    }
}

/* examples/gpt.c's trainer settings, for 2000 steps. */
static ug_status make_step(ug_device *device, gpt_config *model, gpt_step *s)
{
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = BATCH;
    c.block_size = model->block;
    c.optimizer = ug_optimizer_defaults(UG_ADAMW);
    c.optimizer.lr = 1e-3f;
    c.optimizer.beta2 = 0.99f;
    c.optimizer.weight_decay = 0.1f;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = 100;
    c.optimizer.total_steps = 2000;
    c.optimizer.min_lr = 1e-4f;
    c.optimizer.max_grad_norm = 1.0f;
    *s = (gpt_step){.device = device};
    ug_status st = ug_optimizer_decay_matrices_only(&c.optimizer);
    if (st == UG_OK)
        st = ug_train_step_create(device, model->block, 0, gpt_build, model, &c, &s->step);
    const int64_t shape[2] = {BATCH, model->block}, n = BATCH * model->block;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n + 1));
    if (st == UG_OK && !ids)
        st = UG_ERR_OUT_OF_MEMORY;
    uint32_t draw = 12345;
    for (int b = 0; b < BATCHES && st == UG_OK; b++) {
        for (int64_t i = 0; i <= n; i++) {
            draw = draw * 1664525u + 1013904223u;
            ids[i] = (int32_t)((draw >> 8) % (uint32_t)model->vocab);
        }
        st = ug_tensor_from_host(device, UG_I32, 2, shape, ids, &s->x[b]);
        if (st == UG_OK)
            st = ug_tensor_from_host(device, UG_I32, 2, shape, ids + 1, &s->y[b]);
    }
    free(ids);
    return st;
}

/* PyTorch's step in a child process with threads threads: its version and
 * ms per iteration; false (with a line saying why) when it did not run. */
static bool torch_step(const char *python, int threads, double seconds, char *version, size_t version_len,
                       double *ms)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    char threads_arg[16], seconds_arg[32], out[4096] = "";
    snprintf(threads_arg, sizeof threads_arg, "%d", threads);
    snprintf(seconds_arg, sizeof seconds_arg, "%g", seconds);
    char *argv[] = {(char *)python, (char *)UG_BENCH_TORCH_GPT, threads_arg, seconds_arg, NULL};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    pid_t pid;
    const int spawned = posix_spawnp(&pid, python, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    size_t len = 0;
    for (ssize_t got; spawned == 0 && len + 1 < sizeof out && (got = read(fds[0], out + len, sizeof out - 1 - len)) != 0;)
        if (got > 0)
            len += (size_t)got;
        else if (errno != EINTR)
            break;
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (spawned == 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char v[64];
    if (spawned != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || sscanf(out, "%63s %lf", v, ms) != 2) {
        while (len > 0 && out[len - 1] == '\n') /* the last line says why (a traceback's error) */
            out[--len] = '\0';
        const char *last = strrchr(out, '\n') ? strrchr(out, '\n') + 1 : len ? out : "no output";
        printf("PyTorch: not run: %.62s\n  (%s torch_gpt.py; Debian's python3-torch has torch,\n"
               "  or pass --python)\n", last, python);
        return false;
    }
    snprintf(version, version_len, "%s", v);
    return true;
}

/* Attention alone, [1, 4, 1024, 32], causal, with its gradient: the plan's
 * activation bytes, fused (ug_g_attention) or composed. */
static ug_status attention_activations(ug_device *device, bool fused, uint64_t *bytes)
{
    const int64_t shape[4] = {1, 4, 1024, 32};
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_tensor *tq = NULL;
    ug_value *q = NULL, *k = NULL, *v = NULL, *y = NULL, *loss = NULL, *scores = NULL, *scaled = NULL, *p = NULL;
    ug_graph_memory_info info;
    ug_status st = ug_model_create(device, 1, &m);
    if (st == UG_OK) st = ug_graph_create(m, &g);
    if (st == UG_OK) st = ug_model_param(m, "q", 4, shape, UG_INIT_UNIFORM, 1.0f, &tq);
    if (st == UG_OK) st = ug_graph_param(g, tq, &q);
    if (st == UG_OK) st = ug_graph_input(g, "k", UG_F32, 4, shape, &k);
    if (st == UG_OK) st = ug_graph_input(g, "v", UG_F32, 4, shape, &v);
    if (st == UG_OK && fused) {
        const ug_attention_options causal = {.causal = true};
        st = ug_g_attention(g, q, k, v, NULL, &causal, &y);
    } else if (st == UG_OK) { /* the causal mask left out: it adds to the composed path's memory */
        st = ug_g_matmul(g, q, k, false, true, &scores);
        if (st == UG_OK) st = ug_g_scale_shift(g, scores, 0.17677669f, 0.0f, &scaled);
        if (st == UG_OK) st = ug_g_softmax(g, scaled, &p);
        if (st == UG_OK) st = ug_g_matmul(g, p, v, false, false, &y);
    }
    if (st == UG_OK) st = ug_g_sum(g, y, 0, true, &loss);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    if (st == UG_OK) st = ug_graph_memory(g, &info);
    if (st == UG_OK) *bytes = info.activation_bytes;
    ug_graph_free(g);
    ug_model_free(m);
    return st;
}

static bool parse_count(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > max)
        return false;
    *out = v;
    return true;
}

int bench_gpt(int argc, char **argv)
{
    /* Debian's python3-torch installs for the system's python, which a
     * python3 earlier on PATH (a virtual environment's) may not see. */
    const char *only = NULL, *python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    double seconds = 2.0;
    long rounds = 3;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        const bool value = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (value && !strcmp(argv[i], "--device")) {
            only = argv[++i];
        } else if (value && !strcmp(argv[i], "--python")) {
            python = argv[++i];
        } else if (value && !strcmp(argv[i], "--rounds") && parse_count(argv[i + 1], MAX_ROUNDS, &rounds)) {
            i++;
        } else if (value && !strcmp(argv[i], "--seconds") && (seconds = strtod(argv[i + 1], &end)) > 0.0 &&
                   seconds <= 3600.0 && end && !*end) {
            i++;
        } else if (!strcmp(argv[i], "--no-torch")) {
            torch = false;
        } else {
            fprintf(stderr, "ug-bench gpt: bad or unknown option '%s' (--rounds 1..%d, --seconds in (0, 3600])\n",
                    argv[i], MAX_ROUNDS);
            usage(stderr);
            return 2;
        }
    }
    char ids[MAX_DEVICES][32];
    const int count = bench_device_ids(only, ids, MAX_DEVICES);
    if (count < 0)
        return 2;
    ug_set_flush_denormal(true); /* as the trainer's threads, and PyTorch's set_flush_denormal */
    gpt_config model = GPT_NANO_CPU;
    printf("ug-bench gpt: examples/gpt.c's model, nanoGPT's CPU configuration\n"
           "  (%lld layers, %lld heads, %lld channels, block %lld, batch %d), AdamW\n",
           (long long)model.layers, (long long)model.heads, (long long)model.dim, (long long)model.block, BATCH);
    printf("%-12s %10s %10s %10s %10s\n", "device", "ms/iter", "tokens/s", "plan MiB", "peak MiB");
    fflush(stdout);
    const double tokens = BATCH * (double)model.block, mib = 1.0 / (1024.0 * 1024.0);
    /* Every device's step, then rounds in turn: each device once (and
     * PyTorch after the cpu), so the ratios compare runs on the same
     * machine at the same moment. */
    ug_device *devices[MAX_DEVICES] = {0};
    gpt_step steps[MAX_DEVICES] = {0};
    ug_memory_stats before[MAX_DEVICES];
    double ours[MAX_DEVICES][MAX_ROUNDS], theirs[2][MAX_ROUNDS], median[MAX_DEVICES];
    char version[64] = "";
    int torch_rounds = 0, rc = 0, cpu = -1;
    for (int d = 0; d < count && rc == 0; d++) {
        if (ug_device_open(ids[d], &devices[d]) != UG_OK || ug_memory_get_stats(devices[d], &before[d]) != UG_OK ||
            ug_memory_reset_peak(devices[d]) != UG_OK || make_step(devices[d], &model, &steps[d]) != UG_OK)
            rc = bench_fail(ids[d]);
        cpu = !strcmp(ids[d], "cpu") ? d : cpu;
    }
    torch = torch && cpu >= 0;
    for (int r = 0; r < rounds && rc == 0; r++)
        for (int d = 0; d < count && rc == 0; d++) {
            long reps = 0;
            if (!bench_time(run_step, sync_step, &steps[d], r ? 1 : 3, seconds, &ours[d][r], &reps))
                rc = bench_fail("the step");
            else if (d == cpu && torch) {
                if (torch_step(python, 1, seconds, version, sizeof version, &theirs[0][r]) &&
                    torch_step(python, 2, seconds, version, sizeof version, &theirs[1][r]))
                    torch_rounds++;
                else
                    torch = false;
            }
            bench_settle();
        }
    for (int d = 0; d < count && rc == 0; d++) {
        ug_memory_stats after;
        ug_graph_memory_info plan;
        median[d] = bench_median(ours[d], (int)rounds) * 1e3;
        if (ug_graph_memory(ug_train_step_graph(steps[d].step), &plan) != UG_OK ||
            ug_memory_get_stats(devices[d], &after) != UG_OK)
            rc = bench_fail("the memory figures");
        else
            printf("%-12s %10.2f %10.0f %10.1f %10.1f\n", ids[d], median[d], tokens / median[d] * 1e3,
                   (double)plan.total_bytes * mib, (double)(after.peak_bytes_in_use - before[d].bytes_in_use) * mib);
    }
    for (int d = 0; d < count && rc == 0 && cpu >= 0; d++)
        if (d != cpu)
            printf("%s / cpu: x%.2f per iteration (median of %ld rounds)\n", ids[d], median[d] / median[cpu], rounds);
    if (rc == 0) {
        uint64_t fused = 0, composed = 0;
        if (attention_activations(devices[0], true, &fused) != UG_OK ||
            attention_activations(devices[0], false, &composed) != UG_OK)
            rc = bench_fail("attention's plans");
        else
            printf("attention alone at 1024 positions (4 heads of 32, causal), the plan's\n"
                   "  activations: fused %.2f MiB, composed %.2f MiB (x%.3f)\n",
                   (double)fused * mib, (double)composed * mib, (double)fused / (double)composed);
    }
    for (int d = 0; d < count; d++) {
        free_step(&steps[d]);
        ug_device_close(devices[d]);
    }
    if (rc == 0 && torch_rounds > 0) {
        double best = 0.0;
        int best_threads = 1;
        printf("PyTorch %s, the same step on the cpu in rounds alternating with it:\n", version);
        for (int t = 0; t < 2; t++) {
            const double ms = bench_median(theirs[t], torch_rounds);
            printf("  %d thread%s %12.2f %10.0f\n", t + 1, t ? "s" : " ", ms, tokens / ms * 1e3);
            if (t == 0 || ms < best) {
                best = ms;
                best_threads = t + 1;
            }
        }
        printf("cpu / PyTorch's best (%d thread%s): x%.2f per iteration (median of %d rounds)\n", best_threads,
               best_threads > 1 ? "s" : "", median[cpu] / best, torch_rounds);
    }
    return rc;
}
