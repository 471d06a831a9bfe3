/* Fusion (graph/plan.c) against the same graph unfused
 * (ug_graph_set_fusion(g, false)), on every device: the kernels it saves,
 * counted from the plan, and the same training within float rounding
 * (activations folded into bias adds and batch norm, elementwise ops into
 * the products before them, casts into their producers, the optimizer's updates in one launch, numeric checks and
 * running sums into the kernels that read or write their values, a
 * metric's equality test into its argmax, the loss seed into the
 * cross-entropy's gradient). */
#include <math.h>
#include <string.h>

#include "train_support.h"
#include "unigrad/unigrad.h"

#define OK(expr) CHECK_STATUS(expr, UG_OK)

enum { BATCH = 8, FEATURES = 12, SIDE = 6, CLASSES = 3, STEPS = 5 };

typedef struct net {
    ug_graph *g;
    ug_model *m;
    ug_value *x, *y, *loss;
} net;

static bool make_net(ug_device *dev, bool cnn, ug_dtype precision, ug_check_mode checks, bool fused, net *n)
{
    *n = (net){.m = ts_model(dev, 3)};
    if (!n->m || !(n->g = ts_graph(n->m)))
        return false;
    ug_graph *g = n->g;
    ug_value *h = NULL;
    const int64_t ys = BATCH;
    ug_status st = ug_graph_set_fusion(g, fused);
    if (st == UG_OK) st = ug_graph_set_checks(g, checks);
    if (st == UG_OK) st = ug_graph_set_precision(g, precision);
    if (st == UG_OK) st = ts_small_body(g, cnn, BATCH, FEATURES, SIDE, &n->x, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &h);
    if (st == UG_OK) st = ug_graph_input(g, "y", UG_I32, 1, &ys, &n->y);
    if (st == UG_OK) st = ug_g_cross_entropy(g, h, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_graph_backward(g, n->loss);
    CHECK_OK(st);
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 0.01f;
    oc.loss_scaling.enabled = precision == UG_F16; /* as ug-train: the seed is then the loss scale */
    ug_optimizer *opt = st == UG_OK ? ts_optimizer(n->m, &oc) : NULL;
    if (!opt)
        return false;
    CHECK_OK(st = ug_graph_set_optimizer(g, opt));
    if (st == UG_OK)
        CHECK_OK(st = ug_graph_compile(g));
    return st == UG_OK;
}

/* STEPS steps on one batch; the model's parameters after them (tracked). */
static float *train(ug_device *dev, net *n, bool cnn, int64_t *count)
{
    static float x[BATCH * 2 * SIDE * SIDE];
    int32_t y[BATCH];
    const int64_t numel = BATCH * (cnn ? 2 * SIDE * SIDE : FEATURES);
    for (int64_t i = 0; i < numel; i++)
        x[i] = (float)((i * 37 % 101) - 50) / 40.0f;
    for (int i = 0; i < BATCH; i++)
        y[i] = i % CLASSES;
    const int64_t xs[4] = {BATCH, cnn ? 2 : FEATURES, SIDE, SIDE};
    ug_tensor *xt = ts_tensor_f32(dev, cnn ? 4 : 2, xs, x), *yt = ts_tensor_i32(dev, BATCH, y);
    if (!xt || !yt || !OK(ug_graph_bind(n->g, n->x, xt)) || !OK(ug_graph_bind(n->g, n->y, yt)))
        return NULL;
    for (int s = 0; s < STEPS; s++)
        if (!OK(ug_graph_run(n->g)))
            return NULL;
    return ts_model_params(n->m, count);
}

/* Compiles g: its plan's kernels, or -1 (the failed check says why). */
static int compiled_kernels(ug_graph *g)
{
    ug_graph_memory_info mem;
    if (!OK(ug_graph_compile(g)) || !OK(ug_graph_memory(g, &mem)))
        return -1;
    return mem.nodes;
}

/* fused_exact >= 0: the kernels fusion saves; else at least fused_least. */
static void compare(ug_device *dev, bool cnn, ug_dtype precision, ug_check_mode checks, int fused_exact,
                    int fused_least, double tolerance)
{
    th_context("%s %s%s", cnn ? "CNN" : "MLP", ug_dtype_name(precision),
               checks == UG_CHECK_NONE ? ", no checks" : "");
    net fused, plain;
    REQUIRE(make_net(dev, cnn, precision, checks, true, &fused) &&
            make_net(dev, cnn, precision, checks, false, &plain));
    ug_graph_memory_info a, b;
    REQUIRE_OK(ug_graph_memory(fused.g, &a));
    REQUIRE_OK(ug_graph_memory(plain.g, &b));
    CHECK_EQ_I64(b.fused, 0);
    CHECK_MSG(a.nodes + a.fused == b.nodes, "%d kernels and %d fused away, %d unfused", a.nodes, a.fused, b.nodes);
    if (fused_exact >= 0)
        CHECK_EQ_I64(a.fused, fused_exact);
    else
        CHECK_MSG(a.fused >= fused_least, "%d kernels fused away, expected at least %d", a.fused, fused_least);
    int64_t n_fused = 0, n_plain = 0;
    const float *p = train(dev, &fused, cnn, &n_fused), *q = train(dev, &plain, cnn, &n_plain);
    REQUIRE(p && q && n_fused == n_plain);
    const double rel = ts_max_rel(p, q, n_fused);
    CHECK_MSG(rel <= tolerance, "fused and unfused parameters differ by %.3g (relative) after %d steps", rel, STEPS);
}

/* The ReLU into fc1's bias add, both bias adds and the ReLU's gradient into
 * the products before them, three of four updates into one launch, the
 * loss seed into the cross-entropy's gradient; with the default checks
 * also their twelve nodes (a sum and a flag each): the logits and the
 * loss checked by the cross-entropy, the four gradients by the update. */
TS_TEST(mlp_fused_as_unfused)
{
    compare(dev, false, UG_F32, UG_CHECK_NONE, 8, 0, 1e-5);
    compare(dev, false, UG_F32, UG_CHECK_LOSS_AND_GRADS, 8 + 12, 0, 1e-5);
}
/* The same, and casts folded into the ops producing their inputs: where the
 * unfused graph rounds an intermediate to bf16 the fused one may not, so
 * within bf16's rounding (2^-7). */
TS_TEST(mlp_bf16_fused_as_unfused) { compare(dev, false, UG_BF16, UG_CHECK_LOSS_AND_GRADS, -1, 6 + 12, 0x1p-7); }
/* In f16 with loss scaling: the seed the cross-entropy's gradient takes
 * in is the loss scale, read on the device (11 nodes fused away with it,
 * 10 without); within f16's rounding (2^-10). */
TS_TEST(mlp_f16_fused_as_unfused) { compare(dev, false, UG_F16, UG_CHECK_LOSS_AND_GRADS, -1, 11, 0x1p-10); }
/* The ReLU into batch norm, five of six updates, the seed; the checks of
 * the logits, the loss and six gradients. */
TS_TEST(cnn_fused_as_unfused) { compare(dev, true, UG_F32, UG_CHECK_LOSS_AND_GRADS, -1, 7 + 16, 1e-5); }

/* Elementwise ops on a product made by the product as it stores C
 * (UG_FOLD_PAIR): relu(x W^T + b); a batched x [2, ROWS, K] times the
 * same W, plus b, then a sigmoid; m - x W^T with m of the product's shape
 * (the product the second operand); and a product that is kept (read after
 * the run), so its bias add stays a kernel of its own. Each result equals
 * the host's double-precision one within f32 rounding, fused or not, and
 * fusion saves five kernels. */
TS_TEST(epilogues_folded_into_products)
{
    enum { ROWS = 37, K = 19, N = 23, B = 2, RESULTS = 4 };
    static float x[B * ROWS * K], w[N * K], bias[N], m[B * ROWS * N], want[RESULTS][B * ROWS * N];
    for (int i = 0; i < B * ROWS * K; i++)
        x[i] = (float)((i * 37 % 29) - 14) / 16.0f;
    for (int i = 0; i < N * K; i++)
        w[i] = (float)((i * 13 % 23) - 11) / 32.0f;
    for (int i = 0; i < N; i++)
        bias[i] = (float)(i % 7 - 3) / 4.0f;
    for (int i = 0; i < B * ROWS * N; i++)
        m[i] = (float)(i % 11) / 8.0f;
    for (int r = 0; r < B * ROWS; r++)
        for (int n = 0; n < N; n++) {
            double v = 0;
            for (int k = 0; k < K; k++)
                v += (double)x[r * K + k] * w[n * K + k];
            const int o = r * N + n;
            if (r < ROWS)
                want[0][o] = (float)(v + bias[n] > 0 ? v + bias[n] : 0);
            want[1][o] = (float)(1.0 / (1.0 + exp(-(v + bias[n]))));
            want[2][o] = (float)(m[o] - v);
            want[3][o] = (float)(v + bias[n]);
        }
    const int64_t xs[2] = {ROWS, K}, xs3[3] = {B, ROWS, K}, ws[2] = {N, K}, bs[1] = {N}, ms[3] = {B, ROWS, N};
    const int64_t counts[RESULTS] = {ROWS * N, B * ROWS * N, B * ROWS * N, B * ROWS * N};
    int nodes[2] = {0, 0};
    for (int fused = 0; fused < 2; fused++) {
        th_context("%s", fused ? "fused" : "unfused");
        ug_graph *g = ts_graph(ts_model(dev, 5));
        REQUIRE(g);
        ug_value *xv = NULL, *x3 = NULL, *wv = NULL, *bv = NULL, *mv = NULL, *prod[RESULTS] = {NULL},
                 *sum[2] = {NULL}, *out[RESULTS] = {NULL};
        REQUIRE_OK(ug_graph_set_fusion(g, fused));
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &xv));
        REQUIRE_OK(ug_graph_input(g, "x3", UG_F32, 3, xs3, &x3));
        REQUIRE_OK(ug_graph_input(g, "w", UG_F32, 2, ws, &wv));
        REQUIRE_OK(ug_graph_input(g, "b", UG_F32, 1, bs, &bv));
        REQUIRE_OK(ug_graph_input(g, "m", UG_F32, 3, ms, &mv));
        REQUIRE_OK(ug_g_matmul(g, xv, wv, false, true, &prod[0]));
        REQUIRE_OK(ug_g_add(g, prod[0], bv, &sum[0]));
        REQUIRE_OK(ug_g_relu(g, sum[0], &out[0]));
        REQUIRE_OK(ug_g_matmul(g, x3, wv, false, true, &prod[1]));
        REQUIRE_OK(ug_g_add(g, bv, prod[1], &sum[1])); /* the bias first */
        REQUIRE_OK(ug_g_sigmoid(g, sum[1], &out[1]));
        REQUIRE_OK(ug_g_matmul(g, x3, wv, false, true, &prod[2]));
        REQUIRE_OK(ug_g_sub(g, mv, prod[2], &out[2]));
        REQUIRE_OK(ug_g_matmul(g, x3, wv, false, true, &prod[3]));
        REQUIRE_OK(ug_graph_keep(g, prod[3]));
        REQUIRE_OK(ug_g_add(g, prod[3], bv, &out[3]));
        for (int o = 0; o < RESULTS; o++)
            REQUIRE_OK(ug_graph_keep(g, out[o]));
        REQUIRE((nodes[fused] = compiled_kernels(g)) >= 0);
        ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *x3t = ts_tensor_f32(dev, 3, xs3, x);
        ug_tensor *wt = ts_tensor_f32(dev, 2, ws, w), *bt = ts_tensor_f32(dev, 1, bs, bias);
        ug_tensor *mt = ts_tensor_f32(dev, 3, ms, m);
        REQUIRE(xt && x3t && wt && bt && mt);
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_bind(g, x3, x3t));
        REQUIRE_OK(ug_graph_bind(g, wv, wt));
        REQUIRE_OK(ug_graph_bind(g, bv, bt));
        REQUIRE_OK(ug_graph_bind(g, mv, mt));
        REQUIRE_OK(ug_graph_run(g));
        static float got[B * ROWS * N];
        for (int o = 0; o < RESULTS; o++) {
            REQUIRE_OK(ug_graph_read(g, out[o], got, (size_t)counts[o] * sizeof(float)));
            double worst = 0;
            for (int64_t i = 0; i < counts[o]; i++) {
                const double err = fabs((double)got[i] - want[o][i]) / (fabs(want[o][i]) + 1e-3);
                worst = err > worst ? err : worst;
            }
            CHECK_MSG(worst <= 1e-5, "result %d differs from the host's by %.3g (relative)", o, worst);
        }
    }
    CHECK_EQ_I64(nodes[1], nodes[0] - 5);
}

/* A metric's predicted class: argmax's index cast to f32, the cast folded
 * into the argmax (one kernel fewer), equal to the host's first index of
 * each row's maximum, fused or not. */
TS_TEST(argmax_cast_folded)
{
    enum { ROWS = 70, COLS = 12 };
    float x[ROWS * COLS], want[ROWS];
    for (int r = 0; r < ROWS; r++) {
        int best = 0;
        for (int c = 0; c < COLS; c++) {
            x[r * COLS + c] = (float)((r * 7 + c * 13) % 17 / 3) - 2.0f; /* ties: the first wins */
            if (x[r * COLS + c] > x[r * COLS + best])
                best = c;
        }
        want[r] = (float)best;
    }
    const int64_t shape[2] = {ROWS, COLS};
    int nodes[2] = {0, 0};
    for (int fused = 0; fused < 2; fused++) {
        th_context("%s", fused ? "fused" : "unfused");
        ug_graph *g = ts_graph(ts_model(dev, 5));
        REQUIRE(g);
        ug_value *xv = NULL, *idx = NULL, *pred = NULL;
        REQUIRE_OK(ug_graph_set_fusion(g, fused));
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, shape, &xv));
        REQUIRE_OK(ug_g_argmax(g, xv, 1, &idx));
        REQUIRE_OK(ug_g_cast(g, idx, UG_F32, &pred));
        REQUIRE_OK(ug_graph_keep(g, pred));
        REQUIRE((nodes[fused] = compiled_kernels(g)) >= 0);
        ug_tensor *xt = ts_tensor_f32(dev, 2, shape, x);
        REQUIRE(xt);
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_run(g));
        float got[ROWS];
        REQUIRE_OK(ug_graph_read(g, pred, got, sizeof got));
        CHECK(memcmp(got, want, sizeof got) == 0);
    }
    CHECK_EQ_I64(nodes[1], nodes[0] - 1);
}

/* An activation of a reduction's results made by the reduction
 * (UG_FOLD_ACTIVATION): a row's root mean square, sqrt(mean(x * x)) over
 * the last axis, and tanh of the column sums over the first (the rows'
 * and the columns' kernels on every device). One kernel fewer for each,
 * the same bits as unfused, and within f32 rounding of a double
 * reference. */
TS_TEST(activations_folded_into_reductions)
{
    enum { ROWS = 37, COLS = 300 };
    static float x[ROWS * COLS];
    double rms[ROWS] = {0}, sums[COLS] = {0};
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            const float v = (float)((r * 31 + c * 17) % 29 - 14) / 8.0f;
            x[r * COLS + c] = v;
            rms[r] += (double)v * v / COLS;
            sums[c] += v / 16.0;
        }
    const int64_t shape[2] = {ROWS, COLS};
    int nodes[2] = {0, 0};
    float got[2][ROWS + COLS];
    for (int fused = 0; fused < 2; fused++) {
        th_context("%s", fused ? "fused" : "unfused");
        ug_graph *g = ts_graph(ts_model(dev, 5));
        REQUIRE(g);
        ug_value *xv = NULL, *sq = NULL, *mean = NULL, *root = NULL, *scaled = NULL, *colsum = NULL, *act = NULL;
        REQUIRE_OK(ug_graph_set_fusion(g, fused));
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, shape, &xv));
        REQUIRE_OK(ug_g_mul(g, xv, xv, &sq));
        REQUIRE_OK(ug_g_mean(g, sq, 1, false, &mean));
        REQUIRE_OK(ug_g_sqrt(g, mean, &root));
        REQUIRE_OK(ug_g_scale_shift(g, xv, 1.0f / 16.0f, 0.0f, &scaled));
        REQUIRE_OK(ug_g_sum(g, scaled, 0, false, &colsum));
        REQUIRE_OK(ug_g_tanh(g, colsum, &act));
        REQUIRE_OK(ug_graph_keep(g, root));
        REQUIRE_OK(ug_graph_keep(g, act));
        REQUIRE((nodes[fused] = compiled_kernels(g)) >= 0);
        ug_tensor *xt = ts_tensor_f32(dev, 2, shape, x);
        REQUIRE(xt);
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_run(g));
        REQUIRE_OK(ug_graph_read(g, root, got[fused], ROWS * sizeof(float)));
        REQUIRE_OK(ug_graph_read(g, act, got[fused] + ROWS, COLS * sizeof(float)));
        for (int r = 0; r < ROWS; r++)
            CHECK_MSG(fabs(got[fused][r] - sqrt(rms[r])) <= 1e-5 * sqrt(rms[r]), "row %d: %g, want %g", r,
                      (double)got[fused][r], sqrt(rms[r]));
        for (int c = 0; c < COLS; c++)
            CHECK_MSG(fabs(got[fused][ROWS + c] - tanh(sums[c])) <= 1e-5, "column %d: %g, want %g", c,
                      (double)got[fused][ROWS + c], tanh(sums[c]));
    }
    CHECK_EQ_I64(nodes[1], nodes[0] - 2);
    CHECK(memcmp(got[0], got[1], sizeof got[0]) == 0);
}

/* A metric's correct predictions, equal(argmax(logits), labels), made by
 * the argmax (UG_FOLD_EQUALITY): its index compared with the labels as it
 * is written, the labels' cast to f32 gone with the equal when nothing
 * else reads it. The labels come as i32 cast to f32 (the trainer's form),
 * as f32 (either side of the equal), or cast with the cast kept for
 * another reader. Each row's hit, and their running sum over runs of 70
 * rows and then 33, equal the host's, fused or not; ties, a row with a
 * NaN and labels outside the classes included. */
TS_TEST(correct_predictions_folded)
{
    enum { ROWS = 70, FEWER = 33, COLS = 6, RUNS = 3 };
    static float x[ROWS * COLS];
    float labels_f[ROWS], want_hits[ROWS];
    int32_t labels[ROWS];
    double want_sum = 0;
    for (int r = 0; r < ROWS; r++) {
        int best = 0;
        for (int c = 0; c < COLS; c++) {
            x[r * COLS + c] = r == 9 && c == 4 ? NAN : (float)((r * 5 + c * 11) % 13 / 4) - 1.0f;
            const float v = x[r * COLS + c], b = x[r * COLS + best];
            if (b == b && (v != v || v > b)) /* the first maximum, or the first NaN */
                best = c;
        }
        labels[r] = r % 17 == 3 ? -1 : r % 19 == 5 ? COLS + 2 : (r * 3) % COLS;
        labels_f[r] = (float)labels[r];
        want_hits[r] = (float)best == labels_f[r] ? 1.0f : 0.0f;
    }
    for (int run = 0; run < RUNS; run++)
        for (int r = 0; r < (run < RUNS - 1 ? ROWS : FEWER); r++)
            want_sum += want_hits[r];
    static const struct {
        const char *name;
        bool f32_labels, swapped, cast_kept;
        int saved; /* kernels fused away, the running sum's included */
    } forms[] = {{"i32 labels cast to f32", false, false, false, 4},
                 {"f32 labels", true, false, false, 3},
                 {"f32 labels, the equal swapped", true, true, false, 3},
                 {"the labels' cast read by another op", false, false, true, 3}};
    const int64_t shape[2] = {ROWS, COLS}, fewer[2] = {FEWER, COLS};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        int nodes[2] = {0, 0};
        for (int fused = 0; fused < 2; fused++) {
            th_context("%s, %s", forms[f].name, fused ? "fused" : "unfused");
            ug_graph *g = ts_graph(ts_model(dev, 5));
            REQUIRE(g);
            ug_value *xv = NULL, *yv = NULL, *idx = NULL, *pred = NULL, *truth = NULL, *hits = NULL, *count = NULL,
                     *sum = NULL;
            REQUIRE_OK(ug_graph_set_fusion(g, fused));
            REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, shape, &xv));
            REQUIRE_OK(ug_graph_input(g, "y", forms[f].f32_labels ? UG_F32 : UG_I32, 1, shape, &yv));
            REQUIRE_OK(ug_g_argmax(g, xv, 1, &idx));
            REQUIRE_OK(ug_g_cast(g, idx, UG_F32, &pred));
            truth = yv;
            if (!forms[f].f32_labels)
                REQUIRE_OK(ug_g_cast(g, yv, UG_F32, &truth));
            if (forms[f].cast_kept)
                REQUIRE_OK(ug_graph_keep(g, truth));
            REQUIRE_OK(forms[f].swapped ? ug_g_equal(g, truth, pred, &hits) : ug_g_equal(g, pred, truth, &hits));
            REQUIRE_OK(ug_graph_keep(g, hits));
            REQUIRE_OK(ug_g_sum(g, hits, 0, true, &count));
            REQUIRE_OK(ug_graph_accumulate(g, count, 1.0f, &sum));
            REQUIRE((nodes[fused] = compiled_kernels(g)) >= 0);
            for (int run = 0; run < RUNS; run++) {
                const bool last = run == RUNS - 1;
                ug_tensor *xt = ts_tensor_f32(dev, 2, last ? fewer : shape, x);
                const int64_t rows = last ? FEWER : ROWS;
                ug_tensor *yt = forms[f].f32_labels ? ts_tensor_f32(dev, 1, &rows, labels_f)
                                                    : ts_tensor_i32(dev, rows, labels);
                REQUIRE(xt && yt);
                REQUIRE_OK(ug_graph_bind(g, xv, xt));
                REQUIRE_OK(ug_graph_bind(g, yv, yt));
                REQUIRE_OK(ug_graph_run(g));
            }
            float got_hits[FEWER], got_sum = 0;
            REQUIRE_OK(ug_graph_read(g, hits, got_hits, sizeof got_hits));
            REQUIRE_OK(ug_graph_read(g, sum, &got_sum, sizeof got_sum));
            CHECK(memcmp(got_hits, want_hits, sizeof got_hits) == 0);
            CHECK_MSG(got_sum == (float)want_sum, "%g correct predictions, expected %g", got_sum, want_sum);
        }
        CHECK_EQ_I64(nodes[1], nodes[0] - forms[f].saved);
    }
}

/* Running sums (ug_graph_accumulate) of the cross-entropy's loss (scaled
 * by each run's rows) and of reductions (a sum over the rows, a total)
 * are added by the ops writing those values: three kernels fewer, and
 * the sums equal the host's double-precision ones, fused or not, over
 * runs of 70 rows and then 33. */
TS_TEST(running_sums_folded)
{
    enum { ROWS = 70, FEWER = 33, COLS = 5, RUNS = 3 };
    static float x[ROWS * COLS];
    int32_t labels[ROWS];
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)((i * 29 % 23) - 11) / 8.0f;
    for (int r = 0; r < ROWS; r++)
        labels[r] = (r * 7) % COLS;
    /* The host's sums in double: the loss times the rows (the sum of the
     * rows' losses), the column sums times 0.5, the total times 2. */
    double loss = 0, columns[COLS] = {0}, total = 0;
    for (int run = 0; run < RUNS; run++) {
        for (int r = 0; r < (run < RUNS - 1 ? ROWS : FEWER); r++) {
            const float *row = x + r * COLS;
            double max = row[0], z = 0;
            for (int c = 1; c < COLS; c++)
                max = row[c] > max ? row[c] : max;
            for (int c = 0; c < COLS; c++) {
                z += exp(row[c] - max);
                columns[c] += 0.5 * row[c];
                total += 2.0 * row[c];
            }
            loss += max + log(z) - row[labels[r]];
        }
    }
    const int64_t shape[2] = {ROWS, COLS}, fewer[2] = {FEWER, COLS};
    int nodes[2] = {0, 0};
    for (int fused = 0; fused < 2; fused++) {
        th_context("%s", fused ? "fused" : "unfused");
        ug_graph *g = ts_graph(ts_model(dev, 5));
        REQUIRE(g);
        ug_value *xv = NULL, *yv = NULL, *xent = NULL, *col = NULL, *all = NULL, *sums[3] = {NULL};
        REQUIRE_OK(ug_graph_set_fusion(g, fused));
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, shape, &xv));
        REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, shape, &yv));
        REQUIRE_OK(ug_g_cross_entropy(g, xv, yv, 0.0f, &xent));
        REQUIRE_OK(ug_g_sum(g, xv, 0, false, &col));
        REQUIRE_OK(ug_g_sum(g, xv, 0, true, &all));
        REQUIRE_OK(ug_graph_accumulate_rows(g, xent, &sums[0]));
        REQUIRE_OK(ug_graph_accumulate(g, col, 0.5f, &sums[1]));
        REQUIRE_OK(ug_graph_accumulate(g, all, 2.0f, &sums[2]));
        REQUIRE((nodes[fused] = compiled_kernels(g)) >= 0);
        for (int run = 0; run < RUNS; run++) {
            const bool last = run == RUNS - 1;
            ug_tensor *xt = ts_tensor_f32(dev, 2, last ? fewer : shape, x);
            ug_tensor *yt = ts_tensor_i32(dev, last ? FEWER : ROWS, labels);
            REQUIRE(xt && yt);
            REQUIRE_OK(ug_graph_bind(g, xv, xt));
            REQUIRE_OK(ug_graph_bind(g, yv, yt));
            REQUIRE_OK(ug_graph_run(g));
        }
        float got_loss = 0, got_columns[COLS], got_total = 0;
        REQUIRE_OK(ug_graph_read(g, sums[0], &got_loss, sizeof got_loss));
        REQUIRE_OK(ug_graph_read(g, sums[1], got_columns, sizeof got_columns));
        REQUIRE_OK(ug_graph_read(g, sums[2], &got_total, sizeof got_total));
        CHECK_MSG(fabs(got_loss - loss) <= 1e-5 * fabs(loss), "loss sum %.7g, expected %.7g", got_loss, loss);
        for (int c = 0; c < COLS; c++)
            CHECK_MSG(fabs(got_columns[c] - columns[c]) <= 1e-5 * fabs(columns[c]) + 1e-5,
                      "column %d's sum %.7g, expected %.7g", c, got_columns[c], columns[c]);
        CHECK_MSG(fabs(got_total - total) <= 1e-5 * fabs(total) + 1e-5, "total %.7g, expected %.7g", got_total,
                  total);
    }
    CHECK_EQ_I64(nodes[1], nodes[0] - 3);
}

/* A running sum keeps its shape: a sum of per-row values (a reduction's
 * over each row, added by it; a ReLU's, by a kernel of its own) is
 * refused when fewer rows are bound, and changes nothing. */
TS_TEST(running_sum_of_rows_refused)
{
    enum { ROWS = 6, COLS = 4 };
    float x[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)i;
    const int64_t shape[2] = {ROWS, COLS}, fewer[2] = {ROWS - 1, COLS};
    for (int relu = 0; relu < 2; relu++) {
        th_context("%s", relu ? "a ReLU's" : "a reduction's");
        ug_graph *g = ts_graph(ts_model(dev, 5));
        REQUIRE(g);
        ug_value *xv = NULL, *rows = NULL, *sum = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, shape, &xv));
        REQUIRE_OK(relu ? ug_g_relu(g, xv, &rows) : ug_g_sum(g, xv, 1, false, &rows));
        REQUIRE_OK(ug_graph_accumulate(g, rows, 1.0f, &sum));
        REQUIRE_OK(ug_graph_compile(g));
        ug_tensor *xt = ts_tensor_f32(dev, 2, shape, x), *xf = ts_tensor_f32(dev, 2, fewer, x);
        REQUIRE(xt && xf);
        REQUIRE_OK(ug_graph_bind(g, xv, xt));
        REQUIRE_OK(ug_graph_run(g));
        REQUIRE_OK(ug_graph_bind(g, xv, xf));
        if (CHECK_STATUS(ug_graph_run(g), UG_ERR_SHAPE))
            CHECK_ERROR_HAS("keeps its shape");
        float got[ROWS * COLS];
        const int64_t n = relu ? ROWS * COLS : ROWS;
        REQUIRE_OK(ug_graph_read(g, sum, got, (size_t)n * sizeof *got));
        for (int64_t i = 0; i < n; i++) {
            const float want = relu ? x[i] : (float)(i * COLS * COLS + COLS * (COLS - 1) / 2);
            CHECK_MSG(got[i] == want, "element %lld of the sum is %g, expected %g after one run", (long long)i,
                      got[i], want);
        }
    }
}

TS_TEST(fusion_refused_after_compile)
{
    net n;
    REQUIRE(make_net(dev, false, UG_F32, UG_CHECK_LOSS_AND_GRADS, true, &n));
    CHECK_STATUS(ug_graph_set_fusion(n.g, false), UG_ERR_STATE);
    CHECK_STATUS(ug_graph_set_fusion(NULL, false), UG_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(mlp_fused_as_unfused),
        TH_DEVICE_TEST(mlp_bf16_fused_as_unfused),
        TH_DEVICE_TEST(mlp_f16_fused_as_unfused),
        TH_DEVICE_TEST(cnn_fused_as_unfused),
        TH_DEVICE_TEST(epilogues_folded_into_products),
        TH_DEVICE_TEST(argmax_cast_folded),
        TH_DEVICE_TEST(activations_folded_into_reductions),
        TH_DEVICE_TEST(correct_predictions_folded),
        TH_DEVICE_TEST(running_sums_folded),
        TH_DEVICE_TEST(running_sum_of_rows_refused),
        TH_DEVICE_TEST(fusion_refused_after_compile),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
