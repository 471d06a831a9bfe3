/* Object lifetimes: a graph keeps its model and optimizer, a loader its
 * data set and device, so the program may free them in any order; every
 * free function takes NULL; a program may return from main with a loader
 * mid-epoch. */
#define _POSIX_C_SOURCE 200809L /* fork, execl, setenv */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "children.h"
#include "harness.h"
#include "train_support.h"

TS_TEST(graph_outlives_model)
{
    ug_memory_stats before = th_stats(dev);
    ug_model *m = NULL;
    REQUIRE_OK(ug_model_create(dev, 5, &m));
    ug_graph *g = NULL;
    if (ug_graph_create(m, &g) != UG_OK) {
        ug_model_free(m);
        REQUIRE(false);
    }
    int64_t xs[2] = {3, 4};
    ug_value *x = NULL, *h = NULL, *loss = NULL;
    ug_status st = ug_graph_input(g, "x", UG_F32, 2, xs, &x);
    if (st == UG_OK) st = ug_nn_linear(g, "fc", x, 2, &h);
    if (st == UG_OK) st = ug_g_mean(g, h, 0, true, &loss);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    ug_optimizer *opt = NULL;
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    if (st == UG_OK) st = ug_optimizer_create(m, &oc, &opt);
    if (st == UG_OK) st = ug_graph_set_optimizer(g, opt);
    if (st == UG_OK) st = ug_graph_compile(g);
    /* The program lets go of the model and optimizer first. */
    ug_optimizer_free(opt);
    ug_model_free(m);
    CHECK_OK(st);
    float host[12];
    for (int i = 0; i < 12; i++)
        host[i] = (float)i / 12.0f;
    ug_tensor *xt = NULL;
    if (st == UG_OK)
        st = ug_tensor_from_host(dev, UG_F32, 2, xs, host, &xt);
    float l1 = NAN, l2 = NAN;
    for (int step = 0; step < 2 && st == UG_OK; step++) {
        st = ug_graph_bind(g, x, xt);
        if (st == UG_OK) st = ug_graph_run(g);
        if (st == UG_OK) st = ug_graph_read(g, loss, step ? &l2 : &l1, sizeof l1);
    }
    CHECK_OK(st);
    CHECK_MSG(isfinite(l1) && isfinite(l2) && l1 != l2, "losses %g, %g", l1, l2);
    ug_tensor_free(xt);
    ug_graph_free(g); /* frees the optimizer and the model with it */
    CHECK_EQ_I64(th_stats(dev).bytes_in_use, before.bytes_in_use);
}

TS_TEST(loader_outlives_dataset)
{
    float x[10 * 3];
    int32_t y[10];
    for (int i = 0; i < 30; i++)
        x[i] = (float)i;
    for (int i = 0; i < 10; i++)
        y[i] = i % 3;
    ug_dataset *ds = NULL;
    REQUIRE_OK(ug_dataset_from_arrays(10, 3, x, y, &ds));
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 4;
    c.shuffle = false;
    ug_loader *l = NULL;
    ug_status st = ug_loader_create(ds, dev, &c, &l);
    ug_dataset_free(ds);
    REQUIRE_OK(st);
    int64_t seen = 0;
    bool done = false;
    st = ug_loader_start_epoch(l, 0);
    while (st == UG_OK && !done) {
        ug_batch b;
        st = ug_loader_next(l, &b, &done);
        if (st == UG_OK && !done) {
            float rows[4 * 3];
            st = ug_tensor_download(b.x, rows, (size_t)b.count * 3 * sizeof *rows);
            CHECK_MSG(st != UG_OK || rows[0] == (float)(seen * 3), "batch starts with %g", rows[0]);
            seen += b.count;
        }
    }
    CHECK_OK(st);
    CHECK_EQ_I64(seen, 10);
    ug_loader_free(l);
}

static void test_free_functions_take_null(ug_device *dev)
{
    (void)dev;
    ug_tensor_free(NULL);
    ug_model_free(NULL);
    ug_graph_free(NULL);
    ug_optimizer_free(NULL);
    ug_dataset_free(NULL);
    ug_loader_free(NULL);
    ug_idx_free(NULL);
    ug_host_free(NULL, NULL);
    ug_device_close(NULL);
    CHECK(true); /* reaching here is the test */
}

/* Child mode: opens the device, starts an epoch with prefetching workers,
 * takes one batch and returns from main with everything open. */
static int exit_mid_epoch(const char *device)
{
    ug_device *dev = NULL;
    enum { N = 4096, F = 784 };
    float *x = calloc((size_t)N * F, sizeof *x);
    int32_t *y = calloc(N, sizeof *y);
    ug_dataset *ds = NULL;
    ug_loader *l = NULL;
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 64;
    c.threads = 2;
    c.prefetch = 4;
    ug_batch b;
    bool done;
    if (!x || !y || ug_device_open(device, &dev) != UG_OK ||
        ug_dataset_from_arrays(N, F, x, y, &ds) != UG_OK || ug_loader_create(ds, dev, &c, &l) != UG_OK ||
        ug_loader_start_epoch(l, 0) != UG_OK || ug_loader_next(l, &b, &done) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    return 0; /* the workers are still uploading the next batches */
}

static void test_exit_mid_epoch(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    /* Nothing is freed on purpose: no leak report for the child. */
    const char *const env[] = {"ASAN_OPTIONS", "detect_leaks=0", "UG_EMU_EXIT_CHECK", "0", NULL};
    const char *const args[] = {"test_lifetimes", "--exit-mid-epoch", info.id, NULL};
    for (int run = 0; run < 5; run++) {
        fflush(NULL);
        int status = th_wait_child(th_spawn_self(args, env, NULL, NULL), 0);
        CHECK_MSG(status == 0, "run %d: the child %s %d", run, status > 128 ? "died of signal" : "exited with",
                  status > 128 ? status - 128 : status);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--exit-mid-epoch") == 0)
        return exit_mid_epoch(argv[2]);
    static const th_test tests[] = {
        TH_DEVICE_TEST(graph_outlives_model),
        TH_DEVICE_TEST(loader_outlives_dataset),
        TH_HOST_TEST(free_functions_take_null),
        TH_DEVICE_TEST(exit_mid_epoch),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
