/* Activation checkpointing: gradients bitwise equal to the graph without
 * checkpoints (dropout, gelu, layernorm and a reshape inside segments; per
 * layer and across several layers; full and partial batches), training
 * steps likewise; the plan's activation bytes drop as the halving scheme
 * says, the pool's measured peak matches the plan's total, nothing is
 * allocated per step; and misuse is refused. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { ROWS = 16, WIDTH = 24, LAYERS = 6, CLASSES = 4 };

typedef enum marking { NONE, EACH_LAYER, FIRST_THREE_AS_ONE } marking;

typedef struct net {
    ug_graph *g;
    ug_value *x, *y, *loss;
} net;

/* LAYERS layers of linear + gelu (+ layernorm on odd layers, + dropout);
 * the first layer's input arrives as [rows, 4, 6] and is reshaped. */
static bool build(ug_model *m, marking mark, bool optimizer, net *n)
{
    n->g = ts_graph(m);
    if (!n->g)
        return false;
    int64_t rows = ROWS;
    ug_value *h = NULL, *logits = NULL, *first = NULL;
    ug_status st = ug_graph_set_seed(n->g, 77);
    if (st == UG_OK) st = ug_graph_input(n->g, "x", UG_F32, 3, (int64_t[]){ROWS, 4, 6}, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "y", UG_I32, 1, &rows, &n->y);
    if (st == UG_OK) st = ug_g_reshape(n->g, n->x, 2, (int64_t[]){ROWS, WIDTH}, &h);
    for (int layer = 0; layer < LAYERS && st == UG_OK; layer++) {
        char name[16];
        snprintf(name, sizeof name, "l%d", layer);
        ug_value *in = layer == 0 ? n->x : h;
        if (layer == 0)
            first = in;
        st = ug_nn_linear(n->g, name, h, WIDTH, &h);
        if (st == UG_OK) st = ug_g_gelu(n->g, h, &h);
        if (st == UG_OK && layer % 2) {
            snprintf(name, sizeof name, "ln%d", layer);
            st = ug_nn_layernorm(n->g, name, h, 1e-5f, &h);
        }
        if (st == UG_OK) st = ug_g_dropout(n->g, h, 0.25f, &h);
        if (st == UG_OK && mark == EACH_LAYER) st = ug_graph_checkpoint(n->g, in, h);
        if (st == UG_OK && mark == FIRST_THREE_AS_ONE && layer == 2) st = ug_graph_checkpoint(n->g, first, h);
    }
    if (st == UG_OK) st = ug_nn_linear(n->g, "head", h, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(n->g, logits, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_graph_backward(n->g, n->loss);
    if (st == UG_OK) st = ts_compile(n->g, m, optimizer, 1e-2f);
    if (st != UG_OK)
        th_fail(TH_LOC, "building (marking %d): %s", (int)mark, ug_last_error());
    return st == UG_OK;
}

static bool bind_batch(ug_device *dev, net *n, int64_t rows, int seed)
{
    float x[ROWS * WIDTH];
    int32_t y[ROWS];
    for (int64_t i = 0; i < rows * WIDTH; i++)
        x[i] = (float)((i * 37 + seed * 11) % 23) / 7.0f - 1.5f;
    for (int64_t i = 0; i < rows; i++)
        y[i] = (int32_t)((i + seed) % CLASSES);
    ug_tensor *xt = ts_tensor_f32(dev, 3, (int64_t[]){rows, 4, 6}, x), *yt = ts_tensor_i32(dev, rows, y);
    return xt && yt && ug_graph_bind(n->g, n->x, xt) == UG_OK && ug_graph_bind(n->g, n->y, yt) == UG_OK;
}

/* Every parameter gradient of a and b, bit for bit. */
static void expect_same_gradients(ug_model *m, net *a, net *b, const char *what)
{
    for (int i = 0; i < ug_model_param_count(m); i++) {
        const char *name = NULL;
        ug_tensor *param = NULL;
        REQUIRE_OK(ug_model_param_at(m, i, &name, &param));
        ug_value *pa = NULL, *pb = NULL, *ga = NULL, *gb = NULL;
        REQUIRE_OK(ug_graph_param(a->g, param, &pa));
        REQUIRE_OK(ug_graph_param(b->g, param, &pb));
        REQUIRE_OK(ug_graph_grad(a->g, pa, &ga));
        REQUIRE_OK(ug_graph_grad(b->g, pb, &gb));
        float *da = ts_read(a->g, ga), *db = ts_read(b->g, gb);
        REQUIRE(da && db);
        CHECK_MSG(!memcmp(da, db, (size_t)ts_value_numel(ga) * sizeof(float)),
                  "%s: the gradient of %s differs from the graph without checkpoints", what, name);
    }
}

static void compare_gradients(ug_device *dev, marking mark, const char *what)
{
    th_context("%s", what);
    ug_model *m = ts_model(dev, 3);
    net plain, checked;
    REQUIRE(m && build(m, NONE, false, &plain) && build(m, mark, false, &checked));
    ug_graph_memory_info info;
    REQUIRE_OK(ug_graph_memory(checked.g, &info));
    CHECK(info.recomputed > 0);
    static const int64_t rows[] = {ROWS, ROWS, 5};
    for (int run = 0; run < 3; run++) {
        REQUIRE(bind_batch(dev, &plain, rows[run], run) && bind_batch(dev, &checked, rows[run], run));
        REQUIRE_OK(ug_graph_run(plain.g));
        REQUIRE_OK(ug_graph_run(checked.g));
        float lp = 0, lc = 0;
        REQUIRE_OK(ug_graph_read(plain.g, plain.loss, &lp, sizeof lp));
        REQUIRE_OK(ug_graph_read(checked.g, checked.loss, &lc, sizeof lc));
        CHECK(!memcmp(&lp, &lc, sizeof lp));
        expect_same_gradients(m, &plain, &checked, rows[run] == ROWS ? "full batch" : "5 rows");
    }
}

TS_TEST(gradients_bitwise_identical)
{
    compare_gradients(dev, EACH_LAYER, "a segment per layer");
    compare_gradients(dev, FIRST_THREE_AS_ONE, "one segment over three layers");
}

/* Two branch segments feeding a third (a segment fed by several): x ->
 * a = tanh(l1 x), b = sigmoid(l2 x), c = a * b -> head. */
static bool build_diamond(ug_model *m, bool checkpointed, net *n)
{
    n->g = ts_graph(m);
    if (!n->g)
        return false;
    int64_t rows = ROWS;
    ug_value *flat = NULL, *a = NULL, *b = NULL, *c = NULL, *logits = NULL;
    ug_status st = ug_graph_input(n->g, "x", UG_F32, 3, (int64_t[]){ROWS, 4, 6}, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "y", UG_I32, 1, &rows, &n->y);
    if (st == UG_OK) st = ug_g_reshape(n->g, n->x, 2, (int64_t[]){ROWS, WIDTH}, &flat);
    if (st == UG_OK) st = ug_nn_linear(n->g, "l1", flat, WIDTH, &a);
    if (st == UG_OK) st = ug_g_tanh(n->g, a, &a);
    if (st == UG_OK && checkpointed) st = ug_graph_checkpoint(n->g, flat, a);
    if (st == UG_OK) st = ug_nn_linear(n->g, "l2", flat, WIDTH, &b);
    if (st == UG_OK) st = ug_g_sigmoid(n->g, b, &b);
    if (st == UG_OK && checkpointed) st = ug_graph_checkpoint(n->g, flat, b);
    if (st == UG_OK) st = ug_g_mul(n->g, a, b, &c);
    if (st == UG_OK) st = ug_g_gelu(n->g, c, &c);
    if (st == UG_OK && checkpointed) st = ug_graph_checkpoint(n->g, a, c);
    if (st == UG_OK) st = ug_nn_linear(n->g, "head", c, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(n->g, logits, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_graph_backward(n->g, n->loss);
    if (st == UG_OK) st = ug_graph_compile(n->g);
    if (st != UG_OK)
        th_fail(TH_LOC, "building the diamond: %s", ug_last_error());
    return st == UG_OK;
}

TS_TEST(segments_fed_by_several)
{
    ug_model *m = ts_model(dev, 6);
    net plain, checked;
    REQUIRE(m && build_diamond(m, false, &plain) && build_diamond(m, true, &checked));
    ug_graph_memory_info info;
    REQUIRE_OK(ug_graph_memory(checked.g, &info));
    CHECK(info.recomputed > 0);
    REQUIRE(bind_batch(dev, &plain, ROWS, 2) && bind_batch(dev, &checked, ROWS, 2));
    REQUIRE_OK(ug_graph_run(plain.g));
    REQUIRE_OK(ug_graph_run(checked.g));
    expect_same_gradients(m, &plain, &checked, "diamond");
}

/* Five Adam steps with and without checkpoints from the same start. */
TS_TEST(training_bitwise_identical)
{
    ug_model *ma = ts_model(dev, 8), *mb = ts_model(dev, 8);
    net plain, checked;
    REQUIRE(ma && mb && build(ma, NONE, true, &plain) && build(mb, EACH_LAYER, true, &checked));
    for (int step = 0; step < 5; step++) {
        REQUIRE(bind_batch(dev, &plain, ROWS, step) && bind_batch(dev, &checked, ROWS, step));
        REQUIRE_OK(ug_graph_run(plain.g));
        REQUIRE_OK(ug_graph_run(checked.g));
    }
    int64_t na = 0, nb = 0;
    float *pa = ts_model_params(ma, &na), *pb = ts_model_params(mb, &nb);
    REQUIRE(pa && pb && na == nb);
    CHECK_MSG(!memcmp(pa, pb, (size_t)na * sizeof(float)), "parameters differ after 5 steps");
}

/* 16 layers of relu: per-layer checkpoints hold about log2(16) layer
 * outputs instead of 16, so the arena shrinks by more than 60%; the pool's
 * peak during a step is the plan's total; steps allocate nothing. */
TS_TEST(memory_follows_the_plan)
{
    enum { DEEP = 16, DEEP_WIDTH = 64, DEEP_ROWS = 32 };
    uint64_t arena[2] = {0, 0};
    for (int checkpointed = 0; checkpointed < 2; checkpointed++) {
        th_context("%s", checkpointed ? "checkpointed" : "plain");
        int64_t rows = DEEP_ROWS;
        float x[DEEP_ROWS * DEEP_WIDTH];
        int32_t y[DEEP_ROWS];
        for (int i = 0; i < DEEP_ROWS * DEEP_WIDTH; i++)
            x[i] = (float)(i % 13) / 13.0f;
        for (int i = 0; i < DEEP_ROWS; i++)
            y[i] = i % CLASSES;
        ug_tensor *xt = ts_tensor_f32(dev, 2, (int64_t[]){DEEP_ROWS, DEEP_WIDTH}, x);
        ug_tensor *yt = ts_tensor_i32(dev, DEEP_ROWS, y);
        REQUIRE(xt && yt);
        REQUIRE_OK(ug_memory_release_cache(dev));
        ug_memory_stats before = th_stats(dev);
        ug_model *m = ts_model(dev, 1);
        ug_graph *g = ts_graph(m);
        REQUIRE(g);
        ug_value *xv = NULL, *yv = NULL, *h = NULL, *loss = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){DEEP_ROWS, DEEP_WIDTH}, &xv));
        REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, &rows, &yv));
        h = xv;
        for (int layer = 0; layer < DEEP; layer++) {
            char name[16];
            snprintf(name, sizeof name, "l%d", layer);
            ug_value *in = h;
            REQUIRE_OK(ug_nn_linear(g, name, h, DEEP_WIDTH, &h));
            REQUIRE_OK(ug_g_relu(g, h, &h));
            if (checkpointed)
                REQUIRE_OK(ug_graph_checkpoint(g, in, h));
        }
        REQUIRE_OK(ug_nn_linear(g, "head", h, CLASSES, &h));
        REQUIRE_OK(ug_g_cross_entropy(g, h, yv, 0.0f, &loss));
        REQUIRE_OK(ug_graph_backward(g, loss));
        ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
        ug_optimizer *opt = ts_optimizer(m, &oc);
        REQUIRE(opt);
        REQUIRE_OK(ug_graph_set_optimizer(g, opt));
        ug_graph_memory_info plan;
        ug_memory_stats planned = th_stats(dev);
        REQUIRE_OK(ug_graph_memory(g, &plan));
        ug_memory_stats after_plan = th_stats(dev);
        CHECK_EQ_I64(after_plan.bytes_in_use, planned.bytes_in_use); /* planning allocates nothing */
        arena[checkpointed] = plan.activation_bytes;
        REQUIRE_OK(ug_graph_compile(g));
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_bind(g, yv, yt));
        REQUIRE_OK(ug_memory_reset_peak(dev));
        REQUIRE_OK(ug_graph_run(g));
        REQUIRE_OK(ug_device_synchronize(dev));
        ug_memory_stats step = th_stats(dev);
        double used = (double)(step.peak_bytes_in_use - before.bytes_in_use);
        CHECK_MSG(used <= 1.05 * (double)plan.total_bytes && used >= 0.95 * (double)plan.total_bytes,
                  "peak %.0f bytes, plan %llu", used, (unsigned long long)plan.total_bytes);
        for (int i = 0; i < 3; i++)
            REQUIRE_OK(ug_graph_run(g));
        ug_memory_stats later = th_stats(dev);
        CHECK_EQ_I64(later.allocations, step.allocations);
        CHECK_EQ_I64(later.cache_hits, step.cache_hits);
        ts_cleanup();
    }
    CHECK_MSG((double)arena[1] <= 0.4 * (double)arena[0], "checkpointed arena %llu bytes, plain %llu",
              (unsigned long long)arena[1], (unsigned long long)arena[0]);
}

TS_TEST(misuse_refused)
{
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    ug_value *x = NULL, *y = NULL, *h = NULL, *k = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){4, 3}, &x));
    REQUIRE_OK(ug_graph_input(g, "y", UG_F32, 2, (int64_t[]){4, 3}, &y));
    REQUIRE_OK(ug_nn_linear(g, "a", x, 3, &h));
    REQUIRE_OK(ug_g_tanh(g, h, &k));
    CHECK_STATUS(ug_graph_checkpoint(g, NULL, h), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_graph_checkpoint(g, y, h), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("no op lies between");
    REQUIRE_OK(ug_graph_checkpoint(g, x, k));
    if (CHECK_STATUS(ug_graph_checkpoint(g, h, k), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("overlap");
    REQUIRE_OK(ug_g_mse(g, k, y, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    CHECK_STATUS(ug_graph_checkpoint(g, x, loss), UG_ERR_STATE);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(gradients_bitwise_identical),
        TH_DEVICE_TEST(training_bitwise_identical),
        TH_DEVICE_TEST(segments_fed_by_several),
        TH_DEVICE_TEST(memory_follows_the_plan),
        TH_DEVICE_TEST(misuse_refused),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
