/* Allocation-failure sweeps: a full cycle (open the device, make a data set
 * and a loader, build, compile and run a training graph on the loader's
 * batches, read the loss, free everything) is run again and again with the
 * N-th host allocation, then the N-th device (pool) allocation, made to
 * fail, N = 1, 2, ... until a cycle completes without reaching N. Every
 * injected failure must give a clean status with a message, leave no
 * device memory behind (the harness checks the pool after the test, and
 * here after each cycle) and no host memory (LeakSanitizer in CI), and
 * the next cycle must succeed. Then each file call of storing the OpenCL
 * program cache (UG_FAULT_FILE_IO) made to fail in a fresh process: the
 * device still works, the folder holds no temporary file and no entry
 * (but after the rename, the last call), and the next process stores the
 * program. Uses the library's internal fault hooks
 * (base/fault.h). */
#define _POSIX_C_SOURCE 200809L /* fork, execl, setenv, mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fault.h"
#include "children.h"
#include "harness.h"

enum { SAMPLES = 12, FEATURES = 4, CLASSES = 3, BATCH = 4 };

static ug_status cycle(const char *device_id, float *loss)
{
    ug_device *dev = NULL;
    ug_dataset *ds = NULL;
    ug_loader *l = NULL;
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_optimizer *opt = NULL;
    float x[SAMPLES * FEATURES];
    int32_t y[SAMPLES];
    for (int i = 0; i < SAMPLES * FEATURES; i++)
        x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < SAMPLES; i++)
        y[i] = i % CLASSES;
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = BATCH;
    lc.prefetch = 1;
    int64_t xs[2] = {BATCH, FEATURES}, ys = BATCH;
    ug_value *vx = NULL, *vy = NULL, *h = NULL, *logits = NULL, *vloss = NULL;
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);

    ug_status st = ug_device_open(device_id, &dev);
    if (st == UG_OK) st = ug_dataset_from_arrays(SAMPLES, FEATURES, x, y, &ds);
    if (st == UG_OK) st = ug_loader_create(ds, dev, &lc, &l);
    if (st == UG_OK) st = ug_model_create(dev, 3, &m);
    if (st == UG_OK) st = ug_graph_create(m, &g);
    if (st == UG_OK) st = ug_graph_input(g, "x", UG_F32, 2, xs, &vx);
    if (st == UG_OK) st = ug_graph_input(g, "y", UG_I32, 1, &ys, &vy);
    if (st == UG_OK) st = ug_nn_linear(g, "fc1", vx, 8, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(g, logits, vy, 0.0f, &vloss);
    if (st == UG_OK) st = ug_graph_backward(g, vloss);
    if (st == UG_OK) st = ug_optimizer_create(m, &oc, &opt);
    if (st == UG_OK) st = ug_graph_set_optimizer(g, opt);
    if (st == UG_OK) st = ug_graph_compile(g);
    if (st == UG_OK) st = ug_loader_start_epoch(l, 0);
    bool done = false;
    while (st == UG_OK && !done) {
        ug_batch b;
        st = ug_loader_next(l, &b, &done);
        if (st == UG_OK && !done) st = ug_graph_bind(g, vx, b.x);
        if (st == UG_OK && !done) st = ug_graph_bind(g, vy, b.y);
        if (st == UG_OK && !done) st = ug_graph_run(g);
    }
    if (st == UG_OK) st = ug_graph_read(g, vloss, loss, sizeof *loss);
    ug_graph_free(g);
    ug_optimizer_free(opt);
    ug_model_free(m);
    ug_loader_free(l);
    ug_dataset_free(ds);
    ug_device_close(dev);
    return st;
}

/* Work on a side stream: an add queued there behind a timing event,
 * waited for through another event, its sum read back as *loss. */
static ug_status stream_cycle(const char *device_id, float *loss)
{
    ug_device *dev = NULL;
    ug_stream *side = NULL;
    ug_event *start = NULL, *end = NULL;
    ug_tensor *a = NULL, *b = NULL, *c = NULL, *sum = NULL;
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i / 8.0f;
    int64_t n = 64, elapsed = 0;
    ug_status st = ug_device_open(device_id, &dev);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_F32, 1, &n, v, &a);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_F32, 1, &n, v, &b);
    if (st == UG_OK) st = ug_stream_create(dev, &side);
    if (st == UG_OK) st = ug_event_create(dev, true, &start);
    if (st == UG_OK) st = ug_event_create(dev, true, &end);
    if (st == UG_OK) st = ug_event_record(start, side);
    if (st == UG_OK) st = ug_stream_set_current(dev, side);
    if (st == UG_OK) {
        st = ug_add(a, b, &c);
        if (st == UG_OK) st = ug_sum(c, 0, &sum);
        ug_status back = ug_stream_set_current(dev, NULL);
        st = st != UG_OK ? st : back;
    }
    if (st == UG_OK) st = ug_event_record(end, side);
    if (st == UG_OK) st = ug_event_synchronize(end);
    if (st == UG_OK) st = ug_event_elapsed_ns(start, end, &elapsed);
    if (st == UG_OK) st = ug_tensor_download(sum, loss, sizeof *loss);
    ug_tensor_free(sum);
    ug_tensor_free(c);
    ug_tensor_free(b);
    ug_tensor_free(a);
    ug_event_free(end);
    ug_event_free(start);
    ug_stream_free(side);
    ug_device_close(dev);
    return st;
}

typedef ug_status (*cycle_fn)(const char *device_id, float *loss);

static void sweep(ug_device *dev, ug_fault_kind kind, const char *what, cycle_fn cycle)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    float clean_loss = NAN, loss;
    REQUIRE_OK(cycle(info.id, &clean_loss));
    uint64_t in_use = th_stats(dev).bytes_in_use;
    int64_t n = 1;
    for (;; n++) {
        th_context("%s %lld", what, (long long)n);
        ug_clear_error();
        ug_fault_arm(kind, n);
        ug_status st = cycle(info.id, &loss);
        int64_t events = ug_fault_events(kind);
        ug_fault_arm(kind, 0);
        if (events < n) { /* the cycle ended before the N-th event: all covered */
            CHECK_OK(st);
            break;
        }
        if (st == UG_OK) {
            /* The failure was absorbed (a cache retry, a worker's spare
             * attempt): then the results must be right. */
            CHECK_MSG(loss == clean_loss, "loss %g after an absorbed failure, %g clean",
                      (double)loss, (double)clean_loss);
        } else {
            CHECK_MSG(ug_last_error()[0] != '\0', "%s returned with no message",
                      ug_status_name(st));
        }
        CHECK_EQ_I64(th_stats(dev).bytes_in_use, in_use);
        REQUIRE_OK(cycle(info.id, &loss));
        CHECK_MSG(loss == clean_loss, "loss %g after recovery, %g clean", (double)loss,
                  (double)clean_loss);
        if (th_failures())
            return;
        REQUIRE(n < 100000);
    }
    printf("    %s on %s: %lld injection points covered\n", what, info.id, (long long)(n - 1));
}

static void test_host_allocation_sweep(ug_device *dev)
{
    sweep(dev, UG_FAULT_HOST_ALLOC, "host allocation", cycle);
}

/* Streams and events: every host allocation of their path fails once. */
static void test_stream_allocation_sweep(ug_device *dev)
{
    sweep(dev, UG_FAULT_HOST_ALLOC, "stream host allocation", stream_cycle);
}

static void test_device_allocation_sweep(ug_device *dev)
{
    sweep(dev, UG_FAULT_DEVICE_ALLOC, "device allocation", cycle);
}

/* Child mode: a fresh process (its OpenCL program is built and stored in
 * the cache folder XDG_CACHE_HOME names) whose n-th cache file call fails; the
 * device must still open and compute. */
static int cache_write_child(const char *device_id, int64_t n)
{
    ug_fault_arm(UG_FAULT_FILE_IO, n);
    float loss;
    ug_status st = cycle(device_id, &loss);
    if (st != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    return ug_fault_events(UG_FAULT_FILE_IO) >= n ? 0 : 4; /* 4: n past the file calls */
}

static int run_child(const char *device_id, int64_t n, const char *cache)
{
    char arg[32];
    snprintf(arg, sizeof arg, "%lld", (long long)n);
    /* The program's cache alone: test_tuning has the GEMM's. */
    const char *const env[] = {"XDG_CACHE_HOME", cache, "UG_AUTOTUNE", "0", NULL};
    const char *const args[] = {"test_faults", "--cache-write", device_id, arg, NULL};
    fflush(NULL);
    return th_wait_child(th_spawn_self(args, env, NULL, NULL), 0);
}

/* Files in the cache folder: complete cache entries only, never a
 * temporary left behind. */
static void check_cache_folder(const char *cache, int *entries)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/unigrad", cache);
    *entries = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        CHECK_MSG(!strstr(e->d_name, ".tmp"), "a temporary file is left: %s", e->d_name);
        (*entries)++;
    }
    closedir(d);
}

static void test_cache_write_sweep(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    if (strncmp(info.id, "opencl", 6) != 0) {
        th_skip("the program cache belongs to the OpenCL backend; %s has none", info.id);
        return;
    }
    int64_t n = 1, stored_despite_failure = 0;
    for (;; n++) {
        th_context("cache file call %lld", (long long)n);
        char cache[] = "/tmp/ug-test-cache-XXXXXX";
        REQUIRE(mkdtemp(cache));
        int rc = run_child(info.id, n, cache);
        int entries = 0;
        check_cache_folder(cache, &entries);
        if (rc == 4) { /* no n-th call: every call was covered */
            CHECK_EQ_I64(entries, 1);
            /* Only the folder's fsync, the last call, comes after the
             * rename: a complete entry is then in place. */
            CHECK_EQ_I64(stored_despite_failure, n - 1);
        } else {
            CHECK_MSG(rc == 0, "the device failed with cache file call %lld failing (exit %d)",
                      (long long)n, rc);
            if (entries == 1 && !stored_despite_failure)
                stored_despite_failure = n;
            else
                CHECK_EQ_I64(entries, 0);
            /* The next process rebuilds and stores the program. */
            CHECK_EQ_I64(run_child(info.id, 1000, cache), 4);
            check_cache_folder(cache, &entries);
            CHECK_EQ_I64(entries, 1);
        }
        char rm[64];
        snprintf(rm, sizeof rm, "rm -rf %s", cache);
        CHECK(system(rm) == 0);
        if (rc == 4 || th_failures())
            break;
        REQUIRE(n < 100);
    }
    printf("    cache file calls on %s: %lld injection points covered\n", info.id, (long long)(n - 1));
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--cache-write") == 0)
        return cache_write_child(argv[2], atoll(argv[3]));
    static const th_test tests[] = {
        TH_DEVICE_TEST(host_allocation_sweep),
        TH_DEVICE_TEST(stream_allocation_sweep),
        TH_DEVICE_TEST(device_allocation_sweep),
        TH_DEVICE_TEST(cache_write_sweep),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
