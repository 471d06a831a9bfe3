/* Gradient accumulation: 4 micro-batches of 16 through ug_graph_run_backward
 * and one ug_graph_run_update train like one batch of 64 through
 * ug_graph_run, within f32 rounding, for 20 steps of each optimizer (Adam,
 * Adam with clipping, SGD with momentum, AdamW); misuse is refused; and the
 * phases allocate nothing after the first step. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { ROWS = 64, MICRO = 16, FEATURES = 20, CLASSES = 5, STEPS = 20 };

typedef struct net {
    ug_model *m;
    ug_optimizer *opt;
    ug_graph *g;
    ug_value *x, *y, *loss;
} net;

/* The layers and backward on n->m, then n->opt (made by make when NULL,
 * once the layers have made the parameters), then compile. */
static bool finish(net *n, int64_t batch, const ug_optimizer_config *make)
{
    n->g = ts_graph(n->m);
    if (!n->g)
        return false;
    int64_t xs[2] = {batch, FEATURES};
    ug_value *h = NULL, *logits = NULL;
    ug_status st = ug_graph_input(n->g, "x", UG_F32, 2, xs, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "y", UG_I32, 1, &batch, &n->y);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc1", n->x, 32, &h);
    if (st == UG_OK) st = ug_g_tanh(n->g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc2", h, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(n->g, logits, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_graph_backward(n->g, n->loss);
    if (st == UG_OK && !n->opt) n->opt = ts_optimizer(n->m, make);
    if (st == UG_OK && n->opt) st = ug_graph_set_optimizer(n->g, n->opt);
    if (st == UG_OK) st = ug_graph_compile(n->g);
    if (st != UG_OK)
        th_fail(TH_LOC, "building: %s", ug_last_error());
    return st == UG_OK && n->opt;
}

static bool build(ug_device *dev, int64_t batch, const ug_optimizer_config *oc, net *n)
{
    *n = (net){.m = ts_model(dev, 11)};
    return n->m && finish(n, batch, oc);
}

/* A second graph of the same model and optimizer. */
static bool build_on(ug_model *m, ug_optimizer *opt, int64_t batch, net *n)
{
    *n = (net){.m = m, .opt = opt};
    return finish(n, batch, NULL);
}

static void compare(ug_device *dev, const char *name, ug_optimizer_config oc)
{
    th_context("%s", name);
    net big, small;
    REQUIRE(build(dev, ROWS, &oc, &big) && build(dev, MICRO, &oc, &small));
    float x[ROWS * FEATURES];
    int32_t y[ROWS];
    int64_t xs[2] = {ROWS, FEATURES};
    double max_loss_rel = 0;
    uint64_t allocations = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < ROWS * FEATURES; i++)
            x[i] = sinf((float)(i * 7 + step * 13)) * 2.0f;
        for (int i = 0; i < ROWS; i++)
            y[i] = (i * 3 + step) % CLASSES;
        ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, ROWS, y);
        REQUIRE(xt && yt);
        REQUIRE_OK(ug_graph_bind(big.g, big.x, xt));
        REQUIRE_OK(ug_graph_bind(big.g, big.y, yt));
        REQUIRE_OK(ug_graph_run(big.g));
        float big_loss, micro_loss, sum = 0;
        REQUIRE_OK(ug_graph_read(big.g, big.loss, &big_loss, sizeof big_loss));
        if (step == 1)
            allocations = th_stats(dev).allocations + th_stats(dev).cache_hits;
        for (int k = 0; k < ROWS / MICRO; k++) {
            ug_tensor *xk = NULL, *yk = NULL;
            REQUIRE_OK(ug_tensor_slice(xt, k * MICRO, MICRO, &xk));
            th_track(xk);
            REQUIRE_OK(ug_tensor_slice(yt, k * MICRO, MICRO, &yk));
            th_track(yk);
            REQUIRE_OK(ug_graph_bind(small.g, small.x, xk));
            REQUIRE_OK(ug_graph_bind(small.g, small.y, yk));
            REQUIRE_OK(ug_graph_run_backward(small.g));
            REQUIRE_OK(ug_graph_read(small.g, small.loss, &micro_loss, sizeof micro_loss));
            sum += micro_loss;
        }
        REQUIRE_OK(ug_graph_run_update(small.g));
        double rel = fabs(big_loss - sum / (ROWS / MICRO)) / fabs(big_loss);
        max_loss_rel = fmax(max_loss_rel, rel);
        th_release(xt);
        th_release(yt);
    }
    CHECK_MSG(max_loss_rel <= 1e-6, "losses differ by %.3g relative", max_loss_rel);
    int64_t nb = 0, ns = 0;
    float *pb = ts_model_params(big.m, &nb), *ps = ts_model_params(small.m, &ns);
    REQUIRE(pb && ps && nb == ns);
    double rel = ts_max_rel(pb, ps, nb);
    CHECK_MSG(rel <= 1e-6, "parameters differ by %.3g relative after %d steps", rel, STEPS);
    (void)allocations;
}

TS_TEST(accumulation_matches_one_batch)
{
    ug_optimizer_config adam = ug_optimizer_defaults(UG_ADAM);
    adam.lr = 1e-2f;
    compare(dev, "Adam", adam);
    ug_optimizer_config clipped = adam;
    clipped.max_grad_norm = 0.5f;
    compare(dev, "Adam, clipped to norm 0.5", clipped);
    ug_optimizer_config sgd = ug_optimizer_defaults(UG_SGD);
    sgd.lr = 0.1f;
    sgd.momentum = 0.9f;
    compare(dev, "SGD with momentum", sgd);
    ug_optimizer_config adamw = ug_optimizer_defaults(UG_ADAMW);
    adamw.lr = 1e-2f;
    compare(dev, "AdamW", adamw);
}

TS_TEST(phases_refuse_misuse)
{
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    net n;
    REQUIRE(build(dev, MICRO, &oc, &n));
    float x[MICRO * FEATURES] = {0};
    int32_t y[MICRO] = {0};
    int64_t xs[2] = {MICRO, FEATURES};
    ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, MICRO, y);
    REQUIRE(xt && yt);
    REQUIRE_OK(ug_graph_bind(n.g, n.x, xt));
    REQUIRE_OK(ug_graph_bind(n.g, n.y, yt));
    if (CHECK_STATUS(ug_graph_run_update(n.g), UG_ERR_STATE))
        CHECK_ERROR_HAS("no gradient is accumulated");
    CHECK_OK(ug_graph_run_forward(n.g));
    CHECK_OK(ug_graph_run_backward(n.g));
    if (CHECK_STATUS(ug_graph_run(n.g), UG_ERR_STATE))
        CHECK_ERROR_HAS("the gradients of 1 micro-batch are accumulated");
    CHECK_OK(ug_graph_run_update(n.g));
    CHECK_OK(ug_graph_run(n.g));
    /* Another graph of the model steps the optimizer while micro-batches are
     * accumulated here: they are of old parameters. */
    net other;
    REQUIRE(build_on(n.m, n.opt, MICRO, &other));
    REQUIRE_OK(ug_graph_bind(other.g, other.x, xt));
    REQUIRE_OK(ug_graph_bind(other.g, other.y, yt));
    CHECK_OK(ug_graph_run_backward(n.g));
    CHECK_OK(ug_graph_run(other.g));
    if (CHECK_STATUS(ug_graph_run_update(n.g), UG_ERR_STATE))
        CHECK_ERROR_HAS("another graph", "discarded");
    if (CHECK_STATUS(ug_graph_run_update(n.g), UG_ERR_STATE))
        CHECK_ERROR_HAS("no gradient is accumulated");
    CHECK_OK(ug_graph_run_backward(n.g));
    CHECK_OK(ug_graph_run(other.g));
    CHECK_STATUS(ug_graph_run_backward(n.g), UG_ERR_STATE);
    CHECK_OK(ug_graph_run_backward(n.g));
    CHECK_OK(ug_graph_run_update(n.g));
    /* No allocation in any phase after the first of each. */
    ug_memory_stats before = th_stats(dev);
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ug_graph_run_forward(n.g));
        CHECK_OK(ug_graph_run_backward(n.g));
        CHECK_OK(ug_graph_run_backward(n.g));
        CHECK_OK(ug_graph_run_update(n.g));
        CHECK_OK(ug_graph_run(n.g));
    }
    ug_memory_stats after = th_stats(dev);
    CHECK_EQ_I64(after.allocations, before.allocations);
    CHECK_EQ_I64(after.cache_hits, before.cache_hits);
}

/* Running sums on the device: three forward runs add 16 x loss each; the
 * sum reads back as the weighted total, and clears to 0. */
TS_TEST(running_sums)
{
    ug_optimizer_config oc = ug_optimizer_defaults(UG_SGD);
    net n;
    REQUIRE(build(dev, MICRO, &oc, &n)); /* for its model */
    ts_free_graph(n.g);
    n.g = ts_graph(n.m);
    REQUIRE(n.g);
    int64_t xs[2] = {MICRO, FEATURES}, ys = MICRO;
    ug_value *h = NULL, *logits = NULL, *sum = NULL;
    REQUIRE_OK(ug_graph_input(n.g, "x", UG_F32, 2, xs, &n.x));
    REQUIRE_OK(ug_graph_input(n.g, "y", UG_I32, 1, &ys, &n.y));
    REQUIRE_OK(ug_nn_linear(n.g, "fc1", n.x, 32, &h));
    REQUIRE_OK(ug_nn_linear(n.g, "fc2", h, CLASSES, &logits));
    REQUIRE_OK(ug_g_cross_entropy(n.g, logits, n.y, 0.0f, &n.loss));
    REQUIRE_OK(ug_graph_accumulate(n.g, n.loss, (float)MICRO, &sum));
    REQUIRE_OK(ug_graph_keep(n.g, n.loss));
    REQUIRE_OK(ug_graph_compile(n.g));
    double want = 0;
    for (int run = 0; run < 3; run++) {
        float x[MICRO * FEATURES];
        int32_t y[MICRO];
        for (int i = 0; i < MICRO * FEATURES; i++)
            x[i] = sinf((float)(i + 31 * run));
        for (int i = 0; i < MICRO; i++)
            y[i] = (i + run) % CLASSES;
        ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, MICRO, y);
        REQUIRE(xt && yt);
        REQUIRE_OK(ug_graph_bind(n.g, n.x, xt));
        REQUIRE_OK(ug_graph_bind(n.g, n.y, yt));
        REQUIRE_OK(ug_graph_run_forward(n.g));
        float loss;
        REQUIRE_OK(ug_graph_read(n.g, n.loss, &loss, sizeof loss));
        want += (double)MICRO * loss;
    }
    float got = 0;
    REQUIRE_OK(ug_graph_read(n.g, sum, &got, sizeof got));
    CHECK_MSG(fabs(got - want) <= 1e-5 * fabs(want), "sum %.7g, expected %.7g", (double)got, want);
    /* The same sum copied on the device into a tensor of the caller's. */
    ug_tensor *copy = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 0, NULL, &copy));
    th_track(copy);
    REQUIRE_OK(ug_graph_copy_value(n.g, sum, copy));
    float copied = 0;
    REQUIRE_OK(ug_tensor_download(copy, &copied, sizeof copied));
    CHECK(copied == got);
    REQUIRE_OK(ug_graph_clear_sums(n.g));
    REQUIRE_OK(ug_graph_read(n.g, sum, &got, sizeof got));
    CHECK(got == 0.0f);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(accumulation_matches_one_batch),
        TH_DEVICE_TEST(phases_refuse_misuse),
        TH_DEVICE_TEST(running_sums),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
