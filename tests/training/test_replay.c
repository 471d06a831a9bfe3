/* Replayed steps (core/graph/replay.c): on a device that captures (CUDA
 * and HIP graphs; here the emulated CUDA runtime, which records a captured
 * stream's kernels, copies and cuBLAS calls and runs them again on each
 * graph launch), ug_graph_run captures its second step and replays it
 * after. A replayed step must give bitwise what launching each kernel
 * gives, for 50 steps of an MLP and a CNN with dropout, a cosine schedule,
 * clipping and dynamic loss scaling, through overflows the scaler skips
 * inside the replay, a partial batch (launched, the recording kept) and
 * inputs that alternate between tensors. A capture that fails falls back
 * to launching with its reason. Devices whose backend does not capture
 * (cpu, OpenCL) record the step on the host (core/runtime/recorder.c) and
 * replay it the same way, and are held to the same equality. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <math.h>
#include <string.h>

#include "train_support.h"
#include "unigrad/unigrad.h"

enum { BATCH = 8, FEATURES = 12, SIDE = 6, CLASSES = 3, STEPS = 50 };

typedef struct net {
    ug_graph *g;
    ug_model *m;
    ug_optimizer *opt;
    ug_value *x, *y, *loss;
    bool cnn;
} net;

static bool make_net(ug_device *dev, bool cnn, net *n)
{
    *n = (net){.m = ts_model(dev, 7), .cnn = cnn};
    if (!n->m || !(n->g = ts_graph(n->m)))
        return false;
    ug_graph *g = n->g;
    ug_value *h = NULL;
    ug_status st = ug_graph_set_seed(g, 11);
    /* The overflowing steps' losses are read too (they are NaN). */
    if (st == UG_OK) st = ug_graph_set_checks(g, UG_CHECK_NONE);
    if (st == UG_OK) st = ts_small_body(g, cnn, BATCH, FEATURES, SIDE, &n->x, &h);
    const int64_t ys = BATCH;
    if (st == UG_OK) st = ug_g_dropout(g, h, 0.25f, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &h);
    if (st == UG_OK) st = ug_graph_input(g, "y", UG_I32, 1, &ys, &n->y);
    if (st == UG_OK) st = ug_g_cross_entropy(g, h, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_graph_keep(g, n->loss);
    if (st == UG_OK) st = ug_graph_backward(g, n->loss);
    CHECK_OK(st);
    if (st != UG_OK)
        return false;
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 0.02f;
    oc.schedule = UG_SCHEDULE_COSINE;
    oc.warmup_steps = 5;
    oc.total_steps = STEPS;
    oc.max_grad_norm = 1.0f;
    oc.loss_scaling.enabled = true;
    oc.loss_scaling.init_scale = 1024.0f;
    oc.loss_scaling.growth_interval = 6;
    if (!(n->opt = ts_optimizer(n->m, &oc)))
        return false;
    CHECK_OK(st = ug_graph_set_optimizer(g, n->opt));
    if (st == UG_OK)
        CHECK_OK(st = ug_graph_compile(g));
    return st == UG_OK;
}

/* The batches a run alternates between: two ordinary ones, one of
 * infinities that make the gradients non-finite (the scaler skips its
 * step), one with fewer rows. */
typedef struct batches {
    ug_tensor *x[4], *y[4];
} batches;

static bool make_batches(ug_device *dev, bool cnn, batches *b)
{
    const int64_t per_row = cnn ? 2 * SIDE * SIDE : FEATURES;
    static float x[BATCH * 2 * SIDE * SIDE];
    int32_t y[BATCH];
    for (int k = 0; k < 4; k++) {
        const int64_t rows = k == 3 ? BATCH - 3 : BATCH;
        for (int64_t i = 0; i < rows * per_row; i++)
            x[i] = k == 2 ? INFINITY : (float)sin(0.37 * (double)i + k) * 1.5f;
        for (int i = 0; i < rows; i++)
            y[i] = (i + k) % CLASSES;
        const int64_t xs[4] = {rows, cnn ? 2 : FEATURES, SIDE, SIDE};
        b->x[k] = ts_tensor_f32(dev, cnn ? 4 : 2, xs, x);
        b->y[k] = ts_tensor_i32(dev, rows, y);
        if (!b->x[k] || !b->y[k])
            return false;
    }
    return true;
}

/* Which batch step s binds: overflows at 20 and 33, fewer rows at 27. */
static int batch_at(int s) { return s == 20 || s == 33 ? 2 : s == 27 ? 3 : s % 2; }

/* True on the devices whose backend captures (CUDA and HIP graphs); the
 * others record the step on the host. */
static bool captures(const ug_device *dev)
{
    ug_device_info info;
    return ug_device_get_info((ug_device *)dev, &info) == UG_OK &&
           (!strncmp(info.id, "cuda", 4) || !strncmp(info.id, "hip", 3));
}

/* Runs steps first..last-1, the losses into losses; checks that each step
 * was replayed when replay_expected (but the first, and the partial
 * batch), else launched with a reason. */
static void run_steps(net *n, const batches *b, int first, int last, float *losses, bool replay_expected)
{
    for (int s = first; s < last; s++) {
        th_context("%s step %d", n->cnn ? "CNN" : "MLP", s);
        const int k = batch_at(s);
        REQUIRE_OK(ug_graph_bind(n->g, n->x, b->x[k]));
        REQUIRE_OK(ug_graph_bind(n->g, n->y, b->y[k]));
        REQUIRE_OK(ug_graph_run(n->g));
        REQUIRE_OK(ug_graph_read(n->g, n->loss, &losses[s], sizeof losses[s]));
        char why[320];
        const bool replayed = ug_graph_replaying(n->g, why, sizeof why);
        /* Step 1 of a shape is launched, 2 captured and replayed; the
         * partial batch is launched and the next full one replays. */
        const bool want = replay_expected && s >= 1 && k != 3;
        CHECK_MSG(replayed == want, "replayed %d, expected %d: %s", replayed, want, why);
        if (!replay_expected)
            CHECK_MSG(why[0], "a launched step without a reason");
    }
}

static void compare_runs(ug_device *dev, bool cnn)
{
    batches b;
    net replayed, launched;
    REQUIRE(make_batches(dev, cnn, &b));
    REQUIRE(make_net(dev, cnn, &replayed) && make_net(dev, cnn, &launched));
    REQUIRE_OK(ug_graph_set_replay(launched.g, false));
    float with[STEPS], without[STEPS];
    run_steps(&replayed, &b, 0, STEPS, with, true);
    REQUIRE(!th_failures());
    run_steps(&launched, &b, 0, STEPS, without, false);
    REQUIRE(!th_failures());
    th_context("%s", cnn ? "CNN" : "MLP");
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&with[s], &without[s], sizeof with[s])) {
            th_fail(TH_LOC, "step %d: loss %.9g replayed, %.9g launched", s, (double)with[s], (double)without[s]);
            break;
        }
    int64_t count = 0, count2 = 0;
    const float *p = ts_model_params(replayed.m, &count), *q = ts_model_params(launched.m, &count2);
    REQUIRE(p && q && count == count2);
    CHECK_MSG(!memcmp(p, q, (size_t)count * sizeof *p), "the parameters differ after %d steps", STEPS);
    ug_loss_scaler_state a, c;
    REQUIRE_OK(ug_optimizer_loss_scaler(replayed.opt, &a));
    REQUIRE_OK(ug_optimizer_loss_scaler(launched.opt, &c));
    CHECK_MSG(a.skipped_steps == 2 && c.skipped_steps == 2 && a.scale == c.scale,
              "skipped %lld and %lld steps (expected the 2 overflows), scales %g and %g",
              (long long)a.skipped_steps, (long long)c.skipped_steps, (double)a.scale, (double)c.scale);
    CHECK_EQ_I64(ug_optimizer_steps(replayed.opt), STEPS);
}

TS_TEST(mlp_replay_equals_launches) { compare_runs(dev, false); }

TS_TEST(cnn_replay_equals_launches) { compare_runs(dev, true); }

/* The emulated runtime's ug_emu_fail_captures, where cuda:0 is emulated. */
static void (*emulator_fail_captures(void))(int)
{
    void *module = dlopen("libunigrad-cuda.so", RTLD_NOW | RTLD_NOLOAD);
    if (!module)
        return NULL;
    void (*fail)(int) = (void (*)(int))dlsym(module, "ug_emu_fail_captures");
    dlclose(module);
    return fail;
}

TS_TEST(failed_capture_falls_back)
{
    void (*fail_captures)(int) = emulator_fail_captures();
    if (!captures(dev) || !fail_captures) {
        th_skip("needs a device whose capture can be made to fail (the emulated cuda:0)");
        return;
    }
    batches b;
    net n, launched;
    REQUIRE(make_batches(dev, false, &b));
    REQUIRE(make_net(dev, false, &n) && make_net(dev, false, &launched));
    REQUIRE_OK(ug_graph_set_replay(launched.g, false));
    float with[12], without[12];
    run_steps(&n, &b, 0, 1, with, true);
    REQUIRE(!th_failures());
    fail_captures(1);
    run_steps(&n, &b, 1, 8, with, false);
    REQUIRE(!th_failures());
    char why[320];
    CHECK(!ug_graph_replaying(n.g, why, sizeof why));
    CHECK_MSG(strstr(why, "capturing the step failed") && strstr(why, "cudaErrorStreamCaptureInvalidated"),
              "reason: %s", why);
    /* Turned on again: the next step is captured. */
    REQUIRE_OK(ug_graph_set_replay(n.g, true));
    run_steps(&n, &b, 8, 9, with, false);
    REQUIRE(!th_failures());
    run_steps(&n, &b, 9, 12, with, true);
    REQUIRE(!th_failures());
    run_steps(&launched, &b, 0, 12, without, false);
    REQUIRE(!th_failures());
    CHECK_MSG(!memcmp(with, without, sizeof with), "the losses differ from the launched run's");
}

/* Replay sees what launching sees: data written into the tensors bound
 * once (no new binding), and a seed set after compile (dropout's draws). */
static void run_in_place(net *n, ug_tensor *x, ug_tensor *y, float *losses, int *replays)
{
    const int64_t per_row = n->cnn ? 2 * SIDE * SIDE : FEATURES;
    static float xs[BATCH * 2 * SIDE * SIDE];
    int32_t ys[BATCH];
    REQUIRE_OK(ug_graph_bind(n->g, n->x, x));
    REQUIRE_OK(ug_graph_bind(n->g, n->y, y));
    for (int s = 0; s < 12; s++) {
        th_context("%s step %d", n->cnn ? "CNN" : "MLP", s);
        for (int64_t i = 0; i < BATCH * per_row; i++)
            xs[i] = (float)cos(0.11 * (double)i + 0.7 * s);
        for (int i = 0; i < BATCH; i++)
            ys[i] = (i * 7 + s) % CLASSES;
        REQUIRE_OK(ug_tensor_upload(x, xs, (size_t)(BATCH * per_row) * sizeof *xs));
        REQUIRE_OK(ug_tensor_upload(y, ys, sizeof ys));
        if (s == 6)
            REQUIRE_OK(ug_graph_set_seed(n->g, 1234));
        REQUIRE_OK(ug_graph_run(n->g));
        REQUIRE_OK(ug_graph_read(n->g, n->loss, &losses[s], sizeof losses[s]));
        *replays += ug_graph_replaying(n->g, NULL, 0);
    }
}

static void compare_in_place(ug_device *dev, bool cnn)
{
    net replayed, launched;
    REQUIRE(make_net(dev, cnn, &replayed) && make_net(dev, cnn, &launched));
    REQUIRE_OK(ug_graph_set_replay(launched.g, false));
    const int64_t xs[4] = {BATCH, cnn ? 2 : FEATURES, SIDE, SIDE};
    static float zeros[BATCH * 2 * SIDE * SIDE];
    const int32_t labels[BATCH] = {0};
    ug_tensor *x[2] = {ts_tensor_f32(dev, cnn ? 4 : 2, xs, zeros), ts_tensor_f32(dev, cnn ? 4 : 2, xs, zeros)};
    ug_tensor *y[2] = {ts_tensor_i32(dev, BATCH, labels), ts_tensor_i32(dev, BATCH, labels)};
    REQUIRE(x[0] && x[1] && y[0] && y[1]);
    float with[12], without[12];
    int replays = 0, none = 0;
    run_in_place(&replayed, x[0], y[0], with, &replays);
    run_in_place(&launched, x[1], y[1], without, &none);
    REQUIRE(!th_failures());
    th_context("%s", cnn ? "CNN" : "MLP");
    /* Steps 0 and 6 (a new seed) launch; 1 and 7 capture and replay. */
    CHECK_EQ_I64(replays, 10);
    for (int s = 0; s < 12; s++)
        if (memcmp(&with[s], &without[s], sizeof with[s])) {
            th_fail(TH_LOC, "step %d: loss %.9g replayed, %.9g launched", s, (double)with[s], (double)without[s]);
            break;
        }
}

TS_TEST(mlp_replay_reads_bound_tensors) { compare_in_place(dev, false); }

TS_TEST(cnn_replay_reads_bound_tensors) { compare_in_place(dev, true); }

TS_TEST(replay_refuses_null)
{
    (void)dev;
    char why[64];
    CHECK_STATUS(ug_graph_set_replay(NULL, true), UG_ERR_INVALID_ARGUMENT);
    CHECK(!ug_graph_replaying(NULL, why, sizeof why));
    CHECK(strstr(why, "NULL") != NULL);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(mlp_replay_equals_launches),
        TH_DEVICE_TEST(cnn_replay_equals_launches),
        TH_DEVICE_TEST(mlp_replay_reads_bound_tensors),
        TH_DEVICE_TEST(cnn_replay_reads_bound_tensors),
        TH_DEVICE_TEST(failed_capture_falls_back),
        TH_DEVICE_TEST(replay_refuses_null),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
