/* The timing of a model's step on each device beside PyTorch's
 * (bench_model.h). */
#define _GNU_SOURCE 1 /* posix_spawn, pipe, environ */
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_model.h"

enum { MAX_DEVICES = 16, MAX_ROUNDS = 20, PROFILED_STEPS = 3 };

static void usage(const bench_model *m, FILE *out)
{
    fprintf(out, "usage: ug-bench %s [--device NAME] [--seconds S] [--rounds N] [--python PATH]\n"
                 "%*s[--no-torch] [--profile ROWS]\n%s"
                 "--profile ROWS: then each device's %d steps recorded by the profiler, its\n"
                 "ROWS costliest ops by device time (where the step's time goes).\n",
            m->command, (int)strlen(m->command) + 17, "", m->usage, PROFILED_STEPS);
}

static bool run_step(void *ctx)
{
    bench_model_step *s = ctx;
    const int i = s->next++ % BENCH_MODEL_BATCHES;
    return ug_train_step_run(s->step, s->x[i], s->y[i], false) == UG_OK;
}

static bool sync_step(void *ctx) { return ug_device_synchronize(((bench_model_step *)ctx)->device) == UG_OK; }

/* PROFILED_STEPS steps of s recorded, the costliest rows by device time
 * printed. */
static bool print_profile(const char *id, bench_model_step *s, long rows)
{
    ug_profiler *prof = NULL;
    bool ok = ug_profiler_start(s->device, &prof) == UG_OK;
    for (int i = 0; ok && i < PROFILED_STEPS; i++)
        ok = run_step(s);
    ok = ok && sync_step(s) && ug_profiler_stop(prof) == UG_OK;
    if (ok) {
        printf("%s: where %d steps' time goes\n", id, PROFILED_STEPS);
        ok = ug_profiler_print_table(prof, UG_PROFILE_BY_DEVICE_TIME, (int)rows, stdout) == UG_OK;
    }
    ug_profiler_free(prof);
    return ok;
}

static void free_step(bench_model_step *s)
{
    ug_train_step_free(s->step);
    for (int i = 0; i < BENCH_MODEL_BATCHES; i++) {
        ug_tensor_free(s->x[i]);
        ug_tensor_free(s->y[i]);
    }
}

/* PyTorch's step in a child process with threads threads: its version and
 * ms per iteration; false (with a line saying why) when it did not run. */
static bool torch_step(const char *python, const char *script, int threads, double seconds, char *version,
                       size_t version_len, double *ms)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    char threads_arg[16], seconds_arg[32], out[4096] = "";
    snprintf(threads_arg, sizeof threads_arg, "%d", threads);
    snprintf(seconds_arg, sizeof seconds_arg, "%g", seconds);
    char *argv[] = {(char *)python, (char *)script, threads_arg, seconds_arg, NULL};
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
        const char *name = strrchr(script, '/') ? strrchr(script, '/') + 1 : script;
        printf("PyTorch: not run: %.62s\n  (%s %s; Debian's python3-torch has torch,\n"
               "  or pass --python)\n", last, python, name);
        return false;
    }
    snprintf(version, version_len, "%s", v);
    return true;
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

int bench_model_run(const bench_model *m, int argc, char **argv)
{
    /* Debian's python3-torch installs for the system's python, which a
     * python3 earlier on PATH (a virtual environment's) may not see. */
    const char *only = NULL, *python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    double seconds = 2.0;
    long rounds = 3, profile_rows = 0;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        const bool value = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(argv[i], "--help")) {
            usage(m, stdout);
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
        } else if (value && !strcmp(argv[i], "--profile") && parse_count(argv[i + 1], 1000, &profile_rows)) {
            i++;
        } else if (!strcmp(argv[i], "--no-torch")) {
            torch = false;
        } else {
            fprintf(stderr, "ug-bench %s: bad or unknown option '%s' (--rounds 1..%d, --seconds in (0, 3600], "
                    "--profile 1..1000)\n", m->command, argv[i], MAX_ROUNDS);
            usage(m, stderr);
            return 2;
        }
    }
    char ids[MAX_DEVICES][32];
    const int count = bench_device_ids(only, ids, MAX_DEVICES);
    if (count < 0)
        return 2;
    ug_set_flush_denormal(true); /* as the trainer's threads, and PyTorch's set_flush_denormal */
    printf("%s%-12s %10s %10s %10s %10s\n", m->header, "device", "ms/iter", m->rate, "plan MiB", "peak MiB");
    fflush(stdout);
    const double mib = 1.0 / (1024.0 * 1024.0);
    /* Every device's step, then rounds in turn: each device once (and
     * PyTorch after the cpu), so the ratios compare runs on the same
     * machine at the same moment. */
    ug_device *devices[MAX_DEVICES] = {0};
    bench_model_step steps[MAX_DEVICES] = {0};
    ug_memory_stats before[MAX_DEVICES];
    double ours[MAX_DEVICES][MAX_ROUNDS], theirs[2][MAX_ROUNDS], median[MAX_DEVICES];
    char version[64] = "";
    int torch_rounds = 0, rc = 0, cpu = -1;
    for (int d = 0; d < count && rc == 0; d++) {
        if (ug_device_open(ids[d], &devices[d]) != UG_OK || ug_memory_get_stats(devices[d], &before[d]) != UG_OK ||
            ug_memory_reset_peak(devices[d]) != UG_OK || m->make(devices[d], &steps[d]) != UG_OK)
            rc = bench_fail(ids[d]);
        steps[d].device = devices[d];
        cpu = !strcmp(ids[d], "cpu") ? d : cpu;
    }
    torch = torch && cpu >= 0;
    for (int r = 0; r < rounds && rc == 0; r++)
        for (int d = 0; d < count && rc == 0; d++) {
            long reps = 0;
            if (!bench_time(run_step, sync_step, &steps[d], r ? 1 : 3, seconds, &ours[d][r], &reps))
                rc = bench_fail("the step");
            else if (d == cpu && torch) {
                if (torch_step(python, m->torch_script, 1, seconds, version, sizeof version, &theirs[0][r]) &&
                    torch_step(python, m->torch_script, 2, seconds, version, sizeof version, &theirs[1][r]))
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
            printf("%-12s %10.2f %10.0f %10.1f %10.1f\n", ids[d], median[d], m->samples / median[d] * 1e3,
                   (double)plan.total_bytes * mib, (double)(after.peak_bytes_in_use - before[d].bytes_in_use) * mib);
    }
    for (int d = 0; d < count && rc == 0 && cpu >= 0; d++)
        if (d != cpu)
            printf("%s / cpu: x%.2f per iteration (median of %ld rounds)\n", ids[d], median[d] / median[cpu], rounds);
    if (rc == 0 && m->after && m->after(devices[0]) != UG_OK)
        rc = bench_fail(m->command);
    for (int d = 0; d < count && rc == 0 && profile_rows > 0; d++)
        if (!print_profile(ids[d], &steps[d], profile_rows))
            rc = bench_fail("the profile");
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
            printf("  %d thread%s %12.2f %10.0f\n", t + 1, t ? "s" : " ", ms, m->samples / ms * 1e3);
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
