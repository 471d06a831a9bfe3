/* Conformance of per-token cross-entropy (graph.h: ug_g_cross_entropy_with,
 * as PyTorch's F.cross_entropy(logits.view(-1, V), labels.view(-1),
 * ignore_index=..., label_smoothing=...)) against reference.c's
 * ref_cross_entropy_mean in double: logits [..., classes] with i32 and i64
 * labels, an ignored label (outside and inside [0, classes)), smoothing
 * with it, every row ignored (a NaN loss that the numeric checks report,
 * zero gradients), partial batches of 3-D logits with the running sum and
 * checks folded in or not, and the arguments it refuses. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "conformance.h"
#include "train_support.h"

#define OK(expr) CHECK_STATUS(expr, UG_OK)

/* A case's labels: dtype, the ignore option, and which rows take the
 * ignored index (r % every == 1; 0: none; an index in [0, classes) also
 * ignores the rows whose own label it is). */
typedef struct xent_spec {
    ug_dtype dtype;
    bool ignore;
    int64_t ignore_index;
    int every;
} xent_spec;

/* Every class in turn for the classes used here (none a multiple of 5). */
static int64_t label_at(const xent_spec *s, int64_t r, int64_t classes)
{
    return s->every && r % s->every == 1 ? s->ignore_index : (r * 5 + 3) % classes;
}

/* The labels' shape: the logits' without their last axis. */
static cf_shape labels_shape(const cf_shape *logits)
{
    cf_shape s = {logits->ndim - 1, {0}};
    for (int i = 0; i < s.ndim; i++)
        s.d[i] = logits->d[i];
    return s;
}

/* A tensor of rows labels in dtype (tracked; NULL with a failure). */
static ug_tensor *labels_tensor(ug_device *dev, ug_dtype dtype, const cf_shape *shape, const int64_t *labels)
{
    const int64_t rows = cf_numel(shape);
    int32_t *narrow = th_alloc((size_t)(rows + 1) * sizeof *narrow);
    for (int64_t r = 0; r < rows; r++)
        narrow[r] = (int32_t)labels[r];
    ug_tensor *t = NULL;
    const ug_status st = ug_tensor_from_host(dev, dtype, shape->ndim, shape->d,
                                             dtype == UG_I64 ? (const void *)labels : (const void *)narrow, &t);
    if (st != UG_OK) {
        th_fail(TH_LOC, "labels tensor: %s", ug_last_error());
        return NULL;
    }
    th_track(t);
    return t;
}

static int64_t *case_labels(const cf_grad_case *c, int64_t *rows, int64_t *classes)
{
    const cf_shape *s = &c->p[0].shape;
    *classes = s->d[s->ndim - 1];
    *rows = cf_numel(s) / *classes;
    int64_t *labels = th_alloc((size_t)(*rows + 1) * sizeof *labels);
    for (int64_t r = 0; r < *rows; r++)
        labels[r] = label_at(c->row, r, *classes);
    return labels;
}

static ug_status build_xent(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const xent_spec *s = c->row;
    int64_t rows, classes;
    const int64_t *labels = case_labels(c, &rows, &classes);
    const cf_shape ls = labels_shape(&c->p[0].shape);
    ug_device *dev = ug_model_device(ug_graph_model(cg->g));
    cg->labels_tensor = labels_tensor(dev, s->dtype, &ls, labels);
    if (!cg->labels_tensor)
        return UG_ERR_INVALID_ARGUMENT;
    ug_status st = ug_graph_input(cg->g, "labels", s->dtype, ls.ndim, ls.d, &cg->labels);
    if (st != UG_OK)
        return st;
    const ug_cross_entropy_options o = {.label_smoothing = c->f0, .ignore = s->ignore,
                                        .ignore_index = s->ignore_index};
    return ug_g_cross_entropy_with(cg->g, p[0], cg->labels, &o, y);
}

/* y = the mean over the rows counted; dlogits = w dx. */
static void ref_xent_grad(const cf_grad_case *c, const double *const *p, const double *w,
                          const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const xent_spec *s = c->row;
    int64_t rows, classes;
    const int64_t *labels = case_labels(c, &rows, &classes);
    y[0] = ref_cross_entropy_mean(p[0], labels, rows, classes, (double)c->f0, s->ignore, s->ignore_index,
                                  grad[0]);
    for (int64_t i = 0; i < rows * classes; i++)
        grad[0][i] *= w[0];
}

static const xent_spec plain32 = {UG_I32, false, 0, 0}, plain64 = {UG_I64, false, 0, 0},
                       pad64 = {UG_I64, true, -100, 3}, pad32 = {UG_I32, true, -100, 3},
                       in_range32 = {UG_I32, true, 3, 0}, in_range64 = {UG_I64, true, 2, 4},
                       unused64 = {UG_I64, true, -1, 0};

#define XENT(nm, shape, spec, smoothing)                                                               \
    {.name = nm, .count = 1, .p = {{shape, -3, 3, 0}}, .build = build_xent, .ref = ref_xent_grad,      \
     .row = spec, .f0 = smoothing}
#define S1(a) {1, {a}}
#define S3(a, b, c) {3, {a, b, c}}

static const cf_grad_case xent_cases[] = {
    XENT("cross_entropy [2,5,7] i32", S3(2, 5, 7), &plain32, 0.0f),
    XENT("cross_entropy [2,5,7] i64", S3(2, 5, 7), &plain64, 0.0f),
    XENT("cross_entropy [2,5,7] i64, ignore -100 in some rows", S3(2, 5, 7), &pad64, 0.0f),
    XENT("cross_entropy [2,5,7] i32, ignore -100 in some rows", S3(2, 5, 7), &pad32, 0.0f),
    XENT("cross_entropy [2,5,7] i32, ignore 3 (a class)", S3(2, 5, 7), &in_range32, 0.0f),
    XENT("cross_entropy [2,5,7] i64, ignore -100, smoothing 0.1", S3(2, 5, 7), &pad64, 0.1f),
    XENT("cross_entropy [2,5,7] i32, ignore 3 (a class), smoothing 0.2", S3(2, 5, 7), &in_range32, 0.2f),
    XENT("cross_entropy [3,40,37] i64, ignore 2 (a class and padding)", S3(3, 40, 37), &in_range64, 0.1f),
    XENT("cross_entropy [2,5,7] i64, ignoring a label none has", S3(2, 5, 7), &unused64, 0.0f),
    XENT("cross_entropy [7] i64 (labels [])", S1(7), &plain64, 0.0f),
};

/* ---- a graph of logits = x + b, x an input [rows, 5, 7], labels [rows, 5] ---- */

enum { T = 5, V = 7, ROWS = 2 };

typedef struct lm_graph {
    ug_graph *g;
    ug_value *x, *labels, *loss, *grad_b, *sum;
    float b[V];
} lm_graph;

static bool build_lm(ug_device *dev, const ug_cross_entropy_options *o, bool fused, bool running_sum,
                     lm_graph *n)
{
    memset(n, 0, sizeof *n);
    ug_model *m = ts_model(dev, 3);
    n->g = m ? ts_graph(m) : NULL;
    if (!n->g)
        return false;
    const int64_t xs[3] = {ROWS, T, V}, ys[2] = {ROWS, T}, bs = V;
    for (int i = 0; i < V; i++)
        n->b[i] = (float)(i % 3) * 0.25f - 0.2f;
    ug_tensor *b = NULL;
    ug_value *bv = NULL, *logits = NULL;
    ug_status st = ug_model_param(m, "b", 1, &bs, UG_INIT_CONSTANT, 0.0f, &b);
    if (st == UG_OK) st = ug_tensor_upload(b, n->b, sizeof n->b);
    if (st == UG_OK) st = ug_graph_set_fusion(n->g, fused);
    if (st == UG_OK) st = ug_graph_input(n->g, "x", UG_F32, 3, xs, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "labels", UG_I64, 2, ys, &n->labels);
    if (st == UG_OK) st = ug_graph_param(n->g, b, &bv);
    if (st == UG_OK) st = ug_g_add(n->g, n->x, bv, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy_with(n->g, logits, n->labels, o, &n->loss);
    if (st == UG_OK && running_sum) st = ug_graph_accumulate(n->g, n->loss, 1.0f, &n->sum);
    if (st == UG_OK) st = ug_graph_backward(n->g, n->loss);
    if (st == UG_OK) st = ug_graph_grad(n->g, bv, &n->grad_b);
    if (st == UG_OK) st = ug_graph_compile(n->g);
    if (st != UG_OK)
        th_fail(TH_LOC, "building the graph: %s", ug_last_error());
    return st == UG_OK;
}

/* Binds rows of x (from the fixed values) and labels, runs; false on failure. */
static bool run_lm(ug_device *dev, lm_graph *n, int64_t rows, const float *x, const int64_t *labels)
{
    const int64_t xs[3] = {rows, T, V};
    const cf_shape ls = {2, {rows, T}};
    ug_tensor *xt = ts_tensor_f32(dev, 3, xs, x), *yt = labels_tensor(dev, UG_I64, &ls, labels);
    return xt && yt && OK(ug_graph_bind(n->g, n->x, xt)) && OK(ug_graph_bind(n->g, n->labels, yt)) &&
           OK(ug_graph_run(n->g));
}

/* The run's loss and the gradient of b against the reference over its rows. */
static void check_lm(lm_graph *n, int64_t rows, const float *x, const int64_t *labels,
                     const ug_cross_entropy_options *o)
{
    const int64_t tokens = rows * T;
    double *logits = th_alloc((size_t)(tokens * V) * sizeof *logits);
    double *dx = th_alloc((size_t)(tokens * V) * sizeof *dx), want_b[V] = {0}, got_b[V];
    for (int64_t i = 0; i < tokens * V; i++)
        logits[i] = (double)(x[i] + n->b[i % V]);
    const double want = ref_cross_entropy_mean(logits, labels, tokens, V, (double)o->label_smoothing, o->ignore,
                                               o->ignore_index, dx);
    for (int64_t i = 0; i < tokens * V; i++)
        want_b[i % V] += dx[i];
    float loss = 0.0f;
    REQUIRE_OK(ug_graph_read(n->g, n->loss, &loss, sizeof loss));
    const double got = loss;
    th_compare("loss", &got, &want, 1, TH_TOL_F32);
    const float *gb = ts_read(n->g, n->grad_b);
    REQUIRE(gb);
    for (int i = 0; i < V; i++)
        got_b[i] = gb[i];
    th_compare("gradient of b", got_b, want_b, V, 1e-6);
}

/* logits [2,5,7] planned, [1,5,7] and [2,5,7] bound in turn: the mean
 * divides by the tokens counted in the rows bound, the gradient too, and a
 * running sum of the loss adds each run's; with fusion (the sum and the
 * checks folded into the loss's launch, the seed into the gradient's) and
 * without. */
TS_TEST(cross_entropy_partial_batches)
{
    float x[ROWS * T * V];
    for (int i = 0; i < ROWS * T * V; i++)
        x[i] = (float)((i * 29 % 61) - 30) / 12.0f;
    /* The first row's tokens 1 and 4 are padding, the second's 0, 2 and 3. */
    const int64_t labels[ROWS * T] = {3, -100, 6, 0, -100, -100, 1, -100, -100, 5};
    const ug_cross_entropy_options options[] = {{.ignore = true, .ignore_index = -100},
                                                {.label_smoothing = 0.1f, .ignore = true, .ignore_index = -100}};
    for (int fused = 0; fused < 2; fused++)
        for (int k = 0; k < CF_COUNT(options); k++) {
            th_context("%s, smoothing %g", fused ? "fused" : "unfused", (double)options[k].label_smoothing);
            lm_graph n;
            REQUIRE(build_lm(dev, &options[k], fused, true, &n));
            double total = 0.0;
            for (int run = 0; run < 3; run++) {
                const int64_t rows = run == 1 ? 1 : ROWS;
                REQUIRE(run_lm(dev, &n, rows, x, labels));
                check_lm(&n, rows, x, labels, &options[k]);
                double *logits = th_alloc((size_t)(rows * T * V) * sizeof *logits);
                for (int64_t i = 0; i < rows * T * V; i++)
                    logits[i] = (double)(x[i] + n.b[i % V]);
                total += ref_cross_entropy_mean(logits, labels, rows * T, V, (double)options[k].label_smoothing,
                                                true, -100, NULL);
            }
            float sum = 0.0f;
            REQUIRE_OK(ug_graph_read(n.g, n.sum, &sum, sizeof sum));
            CHECK_MSG(fabs(sum - total) <= 1e-5 * fabs(total), "running sum %.7g, expected %.7g", sum, total);
            ts_cleanup();
        }
}

/* Every label ignored: a NaN loss, as PyTorch gives, which the numeric
 * checks report naming the ignore index, and zero gradients; the next
 * batch, with tokens counted, is finite again. */
TS_TEST(cross_entropy_every_row_ignored)
{
    const ug_cross_entropy_options o = {.ignore = true, .ignore_index = 0};
    float x[ROWS * T * V];
    for (int i = 0; i < ROWS * T * V; i++)
        x[i] = (float)(i % 11) / 5.0f;
    int64_t none[ROWS * T] = {0}, some[ROWS * T];
    for (int i = 0; i < ROWS * T; i++)
        some[i] = i % 3;
    for (int fused = 0; fused < 2; fused++) {
        th_context("%s", fused ? "fused" : "unfused");
        lm_graph n;
        REQUIRE(build_lm(dev, &o, fused, false, &n));
        REQUIRE(run_lm(dev, &n, ROWS, x, none));
        float loss = 0.0f;
        if (CHECK_STATUS(ug_graph_read(n.g, n.loss, &loss, sizeof loss), UG_ERR_NUMERIC))
            CHECK_ERROR_HAS("NaN or infinite", "ignore index");
        CHECK_MSG(isnan(loss), "loss %g with every row ignored, expected NaN", (double)loss);
        const float *gb = ts_read(n.g, n.grad_b);
        REQUIRE(gb);
        for (int i = 0; i < V; i++)
            CHECK_MSG(gb[i] == 0.0f, "gradient of b[%d] %g with every row ignored", i, (double)gb[i]);
        REQUIRE(run_lm(dev, &n, 1, x, some));
        check_lm(&n, 1, x, some, &o);
        ts_cleanup();
    }
}

/* What ug_g_cross_entropy_with refuses, and what it takes. */
TS_TEST(cross_entropy_arguments)
{
    ug_graph *g = ts_graph(ts_model(dev, 1));
    REQUIRE(g);
    ug_value *logits = NULL, *flat = NULL, *l26 = NULL, *l10 = NULL, *lf = NULL, *l32 = NULL, *l64 = NULL,
             *ints = NULL, *none = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "logits", UG_F32, 3, (int64_t[]){2, 5, 7}, &logits));
    REQUIRE_OK(ug_graph_input(g, "no classes", UG_F32, 2, (int64_t[]){4, 0}, &none));
    REQUIRE_OK(ug_graph_input(g, "ints", UG_I32, 3, (int64_t[]){2, 5, 7}, &ints));
    REQUIRE_OK(ug_graph_input(g, "l26", UG_I64, 2, (int64_t[]){2, 6}, &l26));
    REQUIRE_OK(ug_graph_input(g, "l10", UG_I64, 1, (int64_t[]){10}, &l10));
    REQUIRE_OK(ug_graph_input(g, "lf", UG_F32, 2, (int64_t[]){2, 5}, &lf));
    REQUIRE_OK(ug_graph_input(g, "l32", UG_I32, 2, (int64_t[]){2, 5}, &l32));
    REQUIRE_OK(ug_graph_input(g, "l64", UG_I64, 2, (int64_t[]){2, 5}, &l64));
    REQUIRE_OK(ug_graph_input(g, "l4", UG_I64, 1, (int64_t[]){4}, &flat));
    const ug_cross_entropy_options far = {.ignore = true, .ignore_index = (int64_t)1 << 40},
                                   low = {.ignore = true, .ignore_index = INT64_MIN},
                                   edge = {.ignore = true, .ignore_index = INT32_MIN},
                                   smooth1 = {.label_smoothing = 1.0f},
                                   smooth_nan = {.label_smoothing = NAN};
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, logits, l26, NULL, &loss), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("cross_entropy", "[2,5,7]", "[2,6]");
    if (CHECK_STATUS(ug_g_cross_entropy(g, logits, l10, 0.0f, &loss), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[10]", "without its last axis");
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, logits, lf, NULL, &loss), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("labels are f32", "i32 or i64");
    CHECK_STATUS(ug_g_cross_entropy_with(g, ints, l32, NULL, &loss), UG_ERR_DTYPE);
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, none, flat, NULL, &loss), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("no classes");
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, logits, l32, &far, &loss), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ignore index 1099511627776", "i32");
    CHECK_STATUS(ug_g_cross_entropy_with(g, logits, l32, &low, &loss), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, logits, l32, &smooth1, &loss), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("label smoothing 1", "[0, 1)");
    CHECK_STATUS(ug_g_cross_entropy_with(g, logits, l64, &smooth_nan, &loss), UG_ERR_INVALID_ARGUMENT);
    CHECK(loss == NULL);
    /* Taken: any i64 index with i64 labels, i32's limits with i32 ones, no options. */
    CHECK_OK(ug_g_cross_entropy_with(g, logits, l64, &far, &loss));
    CHECK_OK(ug_g_cross_entropy_with(g, logits, l64, &low, &loss));
    CHECK_OK(ug_g_cross_entropy_with(g, logits, l32, &edge, &loss));
    CHECK_OK(ug_g_cross_entropy_with(g, logits, l32, NULL, &loss));
    CHECK(loss && ug_value_ndim(loss) == 0);
    if (CHECK_STATUS(ug_g_cross_entropy_with(g, logits, NULL, NULL, &loss), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("cross_entropy");
}

void test_xent_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(xent_cases); i++) {
        cf_check_grad(dev, &xent_cases[i]);
        ts_cleanup();
    }
    test_cross_entropy_partial_batches(dev);
    test_cross_entropy_every_row_ignored(dev);
    test_cross_entropy_arguments(dev);
}
