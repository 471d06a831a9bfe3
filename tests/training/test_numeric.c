/* Numeric faults are reported, not trained on: a NaN in the inputs, a
 * label outside the classes, an infinite loss or gradient, and an op that
 * makes a NaN are named by the graph's checks, both where the checks are
 * folded into the kernels that read or write the values (the cross-entropy,
 * a reduction, the optimizer's update) and where they are nodes of their
 * own (an unfused graph); data sets refuse labels and values that cannot be
 * right. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { ROWS = 8, FEATURES = 6, CLASSES = 4 };

typedef struct classifier {
    ug_graph *g;
    ug_value *x, *y, *loss;
} classifier;

/* linear -> relu -> linear -> cross-entropy, with SGD; fused: checks
 * folded into kernels (the default), else nodes of their own. */
static bool build_classifier(ug_device *dev, ug_check_mode mode, bool fused, classifier *c)
{
    ug_model *m = ts_model(dev, 7);
    c->g = ts_graph(m);
    if (!c->g)
        return false;
    int64_t xs[2] = {ROWS, FEATURES}, ys = ROWS;
    ug_value *h = NULL, *logits = NULL;
    ug_optimizer *opt = NULL;
    ug_status st = ug_graph_set_fusion(c->g, fused);
    if (st == UG_OK) st = ug_graph_input(c->g, "x", UG_F32, 2, xs, &c->x);
    if (st == UG_OK) st = ug_graph_input(c->g, "y", UG_I32, 1, &ys, &c->y);
    if (st == UG_OK) st = ug_nn_linear(c->g, "fc1", c->x, 5, &h);
    if (st == UG_OK) st = ug_g_relu(c->g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(c->g, "fc2", h, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(c->g, logits, c->y, 0.0f, &c->loss);
    if (st == UG_OK) st = ug_graph_backward(c->g, c->loss);
    if (st == UG_OK) {
        ug_optimizer_config oc = ug_optimizer_defaults(UG_SGD);
        oc.lr = 0.1f;
        opt = ts_optimizer(m, &oc);
    }
    if (st == UG_OK && opt) st = ug_graph_set_optimizer(c->g, opt);
    if (st == UG_OK) st = ug_graph_set_checks(c->g, mode);
    if (st == UG_OK) st = ug_graph_compile(c->g);
    if (st != UG_OK)
        th_fail(TH_LOC, "building the classifier: %s", ug_last_error());
    return st == UG_OK && opt;
}

/* Binds inputs (one NaN pixel at nan_at >= 0, one label replaced when
 * bad_label >= 0) and runs steps; returns the status of reading the loss. */
static ug_status train(ug_device *dev, classifier *c, int nan_at, int32_t bad_label, int steps,
                       float *loss)
{
    float x[ROWS * FEATURES];
    int32_t y[ROWS];
    for (int i = 0; i < ROWS * FEATURES; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < ROWS; i++)
        y[i] = i % CLASSES;
    if (nan_at >= 0)
        x[nan_at] = NAN;
    if (bad_label >= 0)
        y[3] = bad_label;
    int64_t xs[2] = {ROWS, FEATURES};
    ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, ROWS, y);
    if (!xt || !yt)
        return UG_ERR_INVALID_ARGUMENT;
    ug_status st = ug_graph_bind(c->g, c->x, xt);
    if (st == UG_OK)
        st = ug_graph_bind(c->g, c->y, yt);
    for (int s = 0; s < steps && st == UG_OK; s++)
        st = ug_graph_run(c->g);
    if (st != UG_OK)
        return st;
    return ug_graph_read(c->g, c->loss, loss, sizeof *loss);
}

static const bool FUSED[2] = {true, false};

TS_TEST(clean_training_passes_checks)
{
    for (int f = 0; f < 2; f++) {
        th_context("%s", FUSED[f] ? "folded" : "unfused");
        classifier c;
        REQUIRE(build_classifier(dev, UG_CHECK_LOSS_AND_GRADS, FUSED[f], &c));
        float loss;
        CHECK_OK(train(dev, &c, -1, -1, 5, &loss));
        CHECK(isfinite(loss));
        CHECK_OK(ug_graph_check(c.g));
    }
}

TS_TEST(nan_input_is_reported)
{
    for (int f = 0; f < 2; f++) {
        th_context("%s", FUSED[f] ? "folded" : "unfused");
        classifier c;
        REQUIRE(build_classifier(dev, UG_CHECK_LOSS_AND_GRADS, FUSED[f], &c));
        float loss = 0;
        if (CHECK_STATUS(train(dev, &c, 13, -1, 3, &loss), UG_ERR_NUMERIC))
            CHECK_ERROR_HAS("NaN or infinity", "the logits of cross_entropy", "runs 1..3");
        CHECK(isnan(loss)); /* the value is still copied */
        /* Reported once: the flags start again. */
        CHECK_OK(ug_graph_check(c.g));
    }
}

TS_TEST(bad_label_is_reported)
{
    for (int f = 0; f < 2; f++) {
        th_context("%s", FUSED[f] ? "folded" : "unfused");
        classifier c;
        REQUIRE(build_classifier(dev, UG_CHECK_LOSS_AND_GRADS, FUSED[f], &c));
        float loss = 0;
        if (CHECK_STATUS(train(dev, &c, -1, 255, 1, &loss), UG_ERR_NUMERIC))
            CHECK_ERROR_HAS("label is outside [0, 4)");
    }
}

/* A parameter w [n] of ones to sevens, w[zero_at] = 0 (none: -1), and
 * loss = sum(f(w)): sqrt's gradient 0.5 / sqrt(w) is infinite at 0 while
 * the loss is finite, and log makes the loss itself -inf. The check that
 * fires is named; folded, the loss is checked by the sum that writes it
 * and the gradient by the update that reads it (SGD for 4 elements, else
 * Adam over a gradient long enough for the backends' vector loops, worker
 * threads and split reductions), and the plan has their four nodes fewer. */
static void infinite_at_zero(ug_device *dev, bool log_loss, bool fused, int64_t n, int64_t zero_at,
                             const char *named)
{
    th_context("%s, %s, %lld elements, 0 at %lld", log_loss ? "log" : "sqrt", fused ? "folded" : "unfused",
               (long long)n, (long long)zero_at);
    ug_model *m = ts_model(dev, 11);
    ug_graph *g = ts_graph(m);
    float *w0 = th_alloc((size_t)n * sizeof *w0);
    REQUIRE(g && w0);
    double want = 0.0;
    for (int64_t i = 0; i < n; i++) {
        w0[i] = i == zero_at ? 0.0f : (float)(1 + i % 7);
        want += log_loss ? log(w0[i]) : sqrt(w0[i]);
    }
    ug_tensor *w = NULL;
    ug_value *wv = NULL, *f = NULL, *loss = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, &n, UG_INIT_CONSTANT, 1.0f, &w));
    REQUIRE_OK(ug_model_write_param(m, "w", w0, (size_t)n * sizeof *w0));
    ug_optimizer_config oc = ug_optimizer_defaults(n == 4 ? UG_SGD : UG_ADAM);
    oc.lr = 0.01f;
    ug_optimizer *opt = ts_optimizer(m, &oc);
    REQUIRE(opt);
    REQUIRE_OK(ug_graph_set_fusion(g, fused));
    REQUIRE_OK(ug_graph_param(g, w, &wv));
    REQUIRE_OK(log_loss ? ug_g_log(g, wv, &f) : ug_g_sqrt(g, wv, &f));
    REQUIRE_OK(ug_g_sum(g, f, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_compile(g));
    ug_graph_memory_info mem;
    REQUIRE_OK(ug_graph_memory(g, &mem));
    CHECK_EQ_I64(mem.fused, fused ? 4 : 0); /* the loss's sum and flag, the gradient's */
    REQUIRE_OK(ug_graph_run(g));
    float value = 0;
    if (zero_at < 0)
        CHECK_OK(ug_graph_read(g, loss, &value, sizeof value));
    else if (CHECK_STATUS(ug_graph_read(g, loss, &value, sizeof value), UG_ERR_NUMERIC))
        CHECK_ERROR_HAS("NaN or infinity", named, "run 1");
    if (isinf(want))
        CHECK(value == -INFINITY);
    else
        CHECK_MSG(fabs(value - want) <= 1e-5 * want, "the loss is %.9g, want %.9g", value, want);
    CHECK_OK(ug_graph_check(g));
}

TS_TEST(infinite_gradient_is_reported)
{
    for (int f = 0; f < 2; f++) {
        infinite_at_zero(dev, false, FUSED[f], 4, 2, "the gradient of w (f32 [4])");
        infinite_at_zero(dev, false, FUSED[f], 70001, -1, NULL);
        for (int64_t at = 35; at < 70001; at += 69965) /* a vector loop's, the tail's */
            infinite_at_zero(dev, false, FUSED[f], 70001, at, "the gradient of w (f32 [70001])");
    }
}

TS_TEST(infinite_loss_is_reported)
{
    for (int f = 0; f < 2; f++) {
        infinite_at_zero(dev, true, FUSED[f], 4, 2, "the loss (f32 [], computed by graph sum)");
        infinite_at_zero(dev, true, FUSED[f], 70001, 70000, "the loss (f32 [], computed by graph sum)");
    }
}

/* Logits near f32's limit, all finite, overflow the loss: the message
 * names both causes of a non-finite loss behind finite logits. */
TS_TEST(overflowing_loss_is_reported)
{
    for (int f = 0; f < 2; f++) {
        th_context("%s", FUSED[f] ? "folded" : "unfused");
        ug_model *m = ts_model(dev, 12);
        ug_graph *g = ts_graph(m);
        REQUIRE(g);
        const int64_t xs[2] = {2, 2}, ys = 2, bs = 2;
        const float x[4] = {3e38f, -3e38f, 0.0f, 1.0f};
        const int32_t y[2] = {1, 0};
        ug_tensor *b = NULL;
        ug_value *xv = NULL, *yv = NULL, *bv = NULL, *logits = NULL, *loss = NULL;
        REQUIRE_OK(ug_model_param(m, "b", 1, &bs, UG_INIT_CONSTANT, 0.0f, &b));
        ug_optimizer_config oc = ug_optimizer_defaults(UG_SGD);
        ug_optimizer *opt = ts_optimizer(m, &oc);
        REQUIRE(opt);
        REQUIRE_OK(ug_graph_set_fusion(g, FUSED[f]));
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &xv));
        REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, &ys, &yv));
        REQUIRE_OK(ug_graph_param(g, b, &bv));
        REQUIRE_OK(ug_g_add(g, xv, bv, &logits));
        REQUIRE_OK(ug_g_cross_entropy(g, logits, yv, 0.0f, &loss));
        REQUIRE_OK(ug_graph_backward(g, loss));
        REQUIRE_OK(ug_graph_set_optimizer(g, opt));
        REQUIRE_OK(ug_graph_compile(g));
        ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, 2, y);
        REQUIRE(xt && yt);
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_bind(g, yv, yt));
        REQUIRE_OK(ug_graph_run(g));
        float value = 0;
        if (CHECK_STATUS(ug_graph_read(g, loss, &value, sizeof value), UG_ERR_NUMERIC))
            CHECK_ERROR_HAS("NaN or infinite", "label is outside [0, 2)", "near f32's limit");
        CHECK(value == INFINITY);
    }
}

TS_TEST(checks_off_stay_silent)
{
    classifier c;
    REQUIRE(build_classifier(dev, UG_CHECK_NONE, true, &c));
    float loss = 0;
    CHECK_OK(train(dev, &c, 13, -1, 2, &loss));
    CHECK(isnan(loss));
}

/* Every node checked: the first op that makes a NaN is named. */
TS_TEST(every_node_names_the_op)
{
    ug_graph *g = ts_graph(ts_model(dev, 8));
    REQUIRE(g);
    int64_t n = 16;
    ug_value *x = NULL, *e = NULL, *l = NULL, *s = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 1, &n, &x));
    REQUIRE_OK(ug_g_exp(g, x, &e));
    REQUIRE_OK(ug_g_log(g, x, &l)); /* log of a negative number */
    REQUIRE_OK(ug_g_add(g, e, l, &s));
    REQUIRE_OK(ug_graph_keep(g, s));
    REQUIRE_OK(ug_graph_set_checks(g, UG_CHECK_EVERY_NODE));
    REQUIRE_OK(ug_graph_compile(g));
    float host[16];
    for (int i = 0; i < 16; i++)
        host[i] = (float)i + 1.0f;
    host[9] = -2.0f;
    ug_tensor *t = ts_tensor_f32(dev, 1, &n, host);
    REQUIRE(t);
    REQUIRE_OK(ug_graph_bind(g, x, t));
    REQUIRE_OK(ug_graph_run(g));
    float out[16];
    if (CHECK_STATUS(ug_graph_read(g, s, out, sizeof out), UG_ERR_NUMERIC))
        CHECK_ERROR_HAS("graph log", "f32 [16]");
}

/* Every node checked in an f16 graph: its checks compile and pass. */
TS_TEST(every_node_in_f16)
{
    ug_graph *g = ts_graph(ts_model(dev, 9));
    REQUIRE(g);
    int64_t n = 8;
    ug_value *x = NULL, *r = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F16, 1, &n, &x));
    REQUIRE_OK(ug_g_relu(g, x, &r));
    REQUIRE_OK(ug_graph_keep(g, r));
    REQUIRE_OK(ug_graph_set_checks(g, UG_CHECK_EVERY_NODE));
    REQUIRE_OK(ug_graph_compile(g));
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F16, 1, &n, &t));
    th_track(t);
    REQUIRE_OK(ug_fill(t, -1.5f));
    REQUIRE_OK(ug_graph_bind(g, x, t));
    REQUIRE_OK(ug_graph_run(g));
    uint16_t out[8];
    CHECK_OK(ug_graph_read(g, r, out, sizeof out));
}

TS_TEST(dataset_checks)
{
    (void)dev;
    float x[3 * 2] = {0, 1, 2, NAN, 4, 5};
    int32_t y[3] = {0, 9, 1};
    ug_dataset *ds = NULL;
    REQUIRE_OK(ug_dataset_from_arrays(3, 2, x, y, &ds));
    if (CHECK_STATUS(ug_dataset_require_classes(ds, 4), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("sample 1", "label 9", "0..3");
    CHECK_OK(ug_dataset_require_classes(ds, 10));
    double mean, stddev;
    if (CHECK_STATUS(ug_dataset_stats(ds, &mean, &stddev), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("sample 1, feature 1", "nan");
    ug_dataset_free(ds);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(clean_training_passes_checks),
        TH_DEVICE_TEST(nan_input_is_reported),
        TH_DEVICE_TEST(bad_label_is_reported),
        TH_DEVICE_TEST(infinite_gradient_is_reported),
        TH_DEVICE_TEST(infinite_loss_is_reported),
        TH_DEVICE_TEST(overflowing_loss_is_reported),
        TH_DEVICE_TEST(checks_off_stay_silent),
        TH_DEVICE_TEST(every_node_names_the_op),
        TH_DEVICE_TEST(every_node_in_f16),
        TH_DEVICE_TEST(dataset_checks),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
