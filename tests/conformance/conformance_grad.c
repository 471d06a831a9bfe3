/* Conformance of the gradients of the graph ops (graph.h, nn.h): each case
 * is a model whose parameters are the op's operands and whose loss is
 * sum(op(params) * w) with w fixed, run once forward and backward; the
 * forward output and every parameter's gradient (ug_graph_grad +
 * ug_graph_read) are compared with the op and its ANALYTIC derivative in
 * double. (test_autograd.c checks the same ops against finite differences,
 * and fused and composite graphs.) The elementwise ops come from the tables
 * of test_conformance.c; every other differentiable op is a row below.
 *
 * Tolerance: the device's gradient comes from a few f32 operations per
 * element (and sums of at most a few hundred terms), so its NMSE is around
 * 1e-13; CF_TOL_GRAD = 1e-6 leaves room for fast-math built-ins while a
 * wrong formula (a missing factor, a wrong sign or transposition, a
 * broadcast gradient not summed back) is off by O(1). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "core/graph/internal.h" /* the nodes a row's graph launches */
#include "train_support.h"

#define CF_TOL_GRAD 1e-6

static const char *driven[64];
static int driven_count;
static unsigned rows_run;

void cf_rows_ran(unsigned table) { rows_run |= table; }
unsigned cf_rows_run(void) { return rows_run; }

bool cf_family_driven(const char *family)
{
    for (int i = 0; i < driven_count; i++)
        if (!strcmp(driven[i], family))
            return true;
    return false;
}

/* Notes the family of every node the compiled graph launches. */
static void note_driven(const ug_graph *g)
{
    for (int i = 0; i < g->node_count; i++) {
        const graph_node *n = g->nodes[i];
        if (n->dead || cf_family_driven(n->op.def->family))
            continue;
        REQUIRE(driven_count < CF_COUNT(driven));
        driven[driven_count++] = n->op.def->family;
    }
}

void cf_check_grad(ug_device *dev, const cf_grad_case *c)
{
    th_context("gradient of %s", c->name);
    ug_model *m = ts_model(dev, 0xc0f);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    cf_graph cg = {g, NULL, NULL};
    ug_value *p[CF_MAX_PARAMS] = {0}, *grad[CF_MAX_PARAMS] = {0};
    double *host[CF_MAX_PARAMS] = {0};
    for (int i = 0; i < c->count; i++) {
        const cf_shape *s = &c->p[i].shape;
        const int64_t n = cf_numel(s);
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        ug_tensor *t = NULL;
        REQUIRE_OK(ug_model_param(m, name, s->ndim, s->d, UG_INIT_CONSTANT, 0.0f, &t));
        if (c->values[i]) {
            host[i] = th_alloc((size_t)n * sizeof *host[i]);
            memcpy(host[i], c->values[i], (size_t)n * sizeof *host[i]);
        } else {
            host[i] = cf_values(n, c->p[i].lo, c->p[i].hi, c->p[i].away);
        }
        float *f = th_alloc((size_t)n * sizeof *f);
        for (int64_t k = 0; k < n; k++) {
            f[k] = (float)host[i][k];
            host[i][k] = f[k];
        }
        REQUIRE_OK(ug_tensor_upload(t, f, (size_t)n * sizeof *f));
        REQUIRE_OK(ug_graph_param(g, t, &p[i]));
    }
    ug_value *y = NULL;
    REQUIRE_OK(c->build(&cg, c, p, &y));
    REQUIRE_OK(ug_graph_keep(g, y));

    /* loss = sum(y * w) */
    cf_shape ys = {ug_value_ndim(y), {0}};
    for (int i = 0; i < ys.ndim; i++)
        ys.d[i] = ug_value_dim(y, i);
    const int64_t ny = cf_numel(&ys);
    double *w = cf_values(ny, -1, 1, 0);
    float *wf = th_alloc((size_t)ny * sizeof *wf);
    for (int64_t i = 0; i < ny; i++) {
        wf[i] = (float)w[i];
        w[i] = wf[i];
    }
    ug_tensor *wt = ts_tensor_f32(dev, ys.ndim, ys.d, wf);
    REQUIRE(wt);
    ug_value *wv = NULL, *prod = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "w", UG_F32, ys.ndim, ys.d, &wv));
    REQUIRE_OK(ug_g_mul(g, y, wv, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    for (int i = 0; i < c->count; i++)
        REQUIRE_OK(ug_graph_grad(g, p[i], &grad[i]));
    REQUIRE_OK(ug_graph_compile(g));
    note_driven(g);
    REQUIRE_OK(ug_graph_bind(g, wv, wt));
    if (cg.labels)
        REQUIRE_OK(ug_graph_bind(g, cg.labels, cg.labels_tensor));
    REQUIRE_OK(ug_graph_run(g));

    const float *y_dev = ts_read(g, y);
    REQUIRE(y_dev);
    double *y_ref = th_alloc((size_t)(ny ? ny : 1) * sizeof *y_ref);
    double *y_got = th_alloc((size_t)(ny ? ny : 1) * sizeof *y_got);
    double *g_ref[CF_MAX_PARAMS] = {0};
    for (int i = 0; i < c->count; i++)
        g_ref[i] = th_alloc((size_t)cf_numel(&c->p[i].shape) * sizeof(double));
    c->ref(c, (const double *const *)host, w, y_dev, y_ref, g_ref);
    for (int64_t i = 0; i < ny; i++)
        y_got[i] = y_dev[i];
    th_compare("forward", y_got, y_ref, ny, c->tol ? c->tol : TH_TOL_F32);
    for (int i = 0; i < c->count; i++) {
        const int64_t n = cf_numel(&c->p[i].shape);
        CHECK_EQ_I64(ts_value_numel(grad[i]), n);
        const float *gf = ts_read(g, grad[i]);
        REQUIRE(gf);
        double *got = th_alloc((size_t)n * sizeof *got), energy = 0.0;
        for (int64_t k = 0; k < n; k++) {
            got[k] = gf[k];
            energy += g_ref[i][k] * g_ref[i][k];
        }
        char what[48];
        snprintf(what, sizeof what, "gradient of operand %d", i);
        th_compare(what, got, g_ref[i], n, c->tol ? c->tol : CF_TOL_GRAD);
        CHECK_MSG(energy > 0.0, "operand %d: the reference gradient is zero (a useless case)", i);
    }
}

/* ---- matmul ---- */

/* The last two axes of x (shape s) swapped, as stored when transposed. */
static double *swapped(const cf_shape *s, const double *x, cf_shape *out)
{
    *out = *s;
    out->d[s->ndim - 2] = s->d[s->ndim - 1];
    out->d[s->ndim - 1] = s->d[s->ndim - 2];
    double *y = th_alloc((size_t)cf_numel(s) * sizeof *y);
    ref_transpose(s->ndim, s->d, x, y);
    return y;
}

/* The gradient of a 2-D operand shared by every batch sums over them. */
static void store_grad(const cf_shape *op_shape, const double *g, const cf_shape *gs, double *out)
{
    const int64_t n = cf_numel(op_shape), batch = cf_numel(gs) / n;
    memset(out, 0, (size_t)n * sizeof *out);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < n; i++)
            out[i] += g[b * n + i];
}

static ug_status build_matmul(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_matmul(cg->g, p[0], p[1], c->ta, c->tb, y);
}

/* C = op(A) op(B): d op(A) = W op(B)^T and d op(B) = op(A)^T W; a stored
 * transposed operand takes the transposed gradient. */
static void ref_matmul_grad(const cf_grad_case *c, const double *const *p, const double *w,
                            const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *sa = &c->p[0].shape, *sb = &c->p[1].shape;
    cf_shape oa = *sa, ob = *sb, ys, ga, gb;
    const double *opa = c->ta ? swapped(sa, p[0], &oa) : p[0];
    const double *opb = c->tb ? swapped(sb, p[1], &ob) : p[1];
    ref_matmul(oa.ndim, oa.d, opa, ob.ndim, ob.d, opb, false, false, y, &ys.ndim, ys.d);
    /* Per batch first (a shared operand's gradient then sums over them). */
    const int64_t mn = ys.d[ys.ndim - 2] * ys.d[ys.ndim - 1];
    const int64_t batch = mn ? cf_numel(&ys) / mn : 1;
    double *da = th_alloc((size_t)(batch * cf_numel(&oa) + 1) * sizeof *da);
    double *db = th_alloc((size_t)(batch * cf_numel(&ob) + 1) * sizeof *db);
    ref_matmul(ys.ndim, ys.d, w, ob.ndim, ob.d, opb, false, true, da, &ga.ndim, ga.d);
    ref_matmul(oa.ndim, oa.d, opa, ys.ndim, ys.d, w, true, false, db, &gb.ndim, gb.d);
    double *sum_a = th_alloc((size_t)cf_numel(&oa) * sizeof *sum_a);
    double *sum_b = th_alloc((size_t)cf_numel(&ob) * sizeof *sum_b);
    store_grad(&oa, da, &ga, sum_a);
    store_grad(&ob, db, &gb, sum_b);
    cf_shape stored;
    memcpy(grad[0], c->ta ? swapped(&oa, sum_a, &stored) : sum_a, (size_t)cf_numel(sa) * sizeof(double));
    memcpy(grad[1], c->tb ? swapped(&ob, sum_b, &stored) : sum_b, (size_t)cf_numel(sb) * sizeof(double));
}

/* ---- reductions: the gradient spreads w over the reduced axis ---- */

static ug_status build_sum(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_sum(cg->g, p[0], c->axis, c->all, y);
}

static ug_status build_mean(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_mean(cg->g, p[0], c->axis, c->all, y);
}

static void ref_reduce_grad(const cf_grad_case *c, bool mean, const double *x, const double *w,
                            double *y, double *grad)
{
    const cf_shape *s = &c->p[0].shape;
    int64_t outer = 1, len = cf_numel(s), inner = 1;
    if (!c->all) {
        len = s->d[c->axis];
        for (int i = 0; i < s->ndim; i++) {
            outer *= i < c->axis ? s->d[i] : 1;
            inner *= i > c->axis ? s->d[i] : 1;
        }
    }
    ref_reduce(mean ? REF_RMEAN : REF_RSUM, s->ndim, s->d, x, c->axis, c->all, y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t l = 0; l < len; l++)
            for (int64_t i = 0; i < inner; i++)
                grad[(o * len + l) * inner + i] = w[o * inner + i] / (mean ? (double)len : 1.0);
}

static void ref_sum_grad(const cf_grad_case *c, const double *const *p, const double *w,
                         const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_reduce_grad(c, false, p[0], w, y, grad[0]);
}

static void ref_mean_grad(const cf_grad_case *c, const double *const *p, const double *w,
                          const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_reduce_grad(c, true, p[0], w, y, grad[0]);
}

/* ---- softmax and log-softmax ---- */

static ug_status build_softmax(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    return ug_g_softmax(cg->g, p[0], y);
}

static ug_status build_log_softmax(cf_graph *cg, const cf_grad_case *c, ug_value *const *p,
                                   ug_value **y)
{
    (void)c;
    return ug_g_log_softmax(cg->g, p[0], y);
}

/* softmax: dx_i = y_i (w_i - sum_j w_j y_j); log-softmax: dx_i = w_i -
 * softmax_i sum_j w_j. */
static void ref_softmax_grad_rows(const cf_grad_case *c, bool log_form, const double *x,
                                  const double *w, double *y, double *grad)
{
    const cf_shape *s = &c->p[0].shape;
    const int64_t cols = s->d[s->ndim - 1], rows = cf_numel(s) / cols;
    double *sm = th_alloc((size_t)cf_numel(s) * sizeof *sm);
    ref_softmax(x, sm, rows, cols, false);
    ref_softmax(x, y, rows, cols, log_form);
    for (int64_t r = 0; r < rows; r++) {
        const double *wr = w + r * cols, *pr = sm + r * cols;
        double dot = 0.0, total = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            dot += wr[j] * pr[j];
            total += wr[j];
        }
        for (int64_t j = 0; j < cols; j++)
            grad[r * cols + j] = log_form ? wr[j] - pr[j] * total : pr[j] * (wr[j] - dot);
    }
}

static void ref_softmax_grad(const cf_grad_case *c, const double *const *p, const double *w,
                             const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_softmax_grad_rows(c, false, p[0], w, y, grad[0]);
}

static void ref_log_softmax_grad(const cf_grad_case *c, const double *const *p, const double *w,
                                 const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_softmax_grad_rows(c, true, p[0], w, y, grad[0]);
}

/* ---- transpose and reshape ---- */

static ug_status build_transpose(cf_graph *cg, const cf_grad_case *c, ug_value *const *p,
                                 ug_value **y)
{
    (void)c;
    return ug_g_transpose(cg->g, p[0], y);
}

static void ref_transpose_grad(const cf_grad_case *c, const double *const *p, const double *w,
                               const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *s = &c->p[0].shape;
    cf_shape ws = *s; /* y's shape: the last two axes swapped */
    ws.d[s->ndim - 2] = s->d[s->ndim - 1];
    ws.d[s->ndim - 1] = s->d[s->ndim - 2];
    ref_transpose(s->ndim, s->d, p[0], y);
    ref_transpose(ws.ndim, ws.d, w, grad[0]);
}

static ug_status build_reshape(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_reshape(cg->g, p[0], c->to.ndim, c->to.d, y);
}

static void ref_reshape_grad(const cf_grad_case *c, const double *const *p, const double *w,
                             const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const size_t bytes = (size_t)cf_numel(&c->p[0].shape) * sizeof(double);
    memcpy(y, p[0], bytes);
    memcpy(grad[0], w, bytes);
}

/* ---- layernorm (ug_g_layernorm with learned gamma and beta) ---- */

static ug_status build_layernorm(cf_graph *cg, const cf_grad_case *c, ug_value *const *p,
                                 ug_value **y)
{
    return ug_g_layernorm(cg->g, p[0], p[1], p[2], c->f0, y);
}

/* With h = (x - mean) rstd and g = w gamma, per row:
 * dx = rstd (g - mean(g) - h mean(g h)); dgamma = sum_rows w h; dbeta = sum_rows w. */
static void ref_layernorm_grad(const cf_grad_case *c, const double *const *p, const double *w,
                               const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *s = &c->p[0].shape;
    const int64_t cols = s->d[s->ndim - 1], rows = cf_numel(s) / cols;
    ref_layernorm(p[0], p[1], p[2], y, rows, cols, (double)c->f0);
    memset(grad[1], 0, (size_t)cols * sizeof(double));
    memset(grad[2], 0, (size_t)cols * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const double *x = p[0] + r * cols, *wr = w + r * cols;
        double mean = 0.0, var = 0.0, mg = 0.0, mgh = 0.0;
        for (int64_t j = 0; j < cols; j++)
            mean += x[j] / (double)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (x[j] - mean) * (x[j] - mean) / (double)cols;
        const double rstd = 1.0 / sqrt(var + (double)c->f0);
        for (int64_t j = 0; j < cols; j++) {
            const double h = (x[j] - mean) * rstd, gj = wr[j] * p[1][j];
            mg += gj / (double)cols;
            mgh += gj * h / (double)cols;
            grad[1][j] += wr[j] * h;
            grad[2][j] += wr[j];
        }
        for (int64_t j = 0; j < cols; j++) {
            const double h = (x[j] - mean) * rstd;
            grad[0][r * cols + j] = rstd * (wr[j] * p[1][j] - mg - h * mgh);
        }
    }
}

/* ---- losses ---- */

static ug_status build_xent(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    int64_t rows = c->p[0].shape.d[0];
    const int64_t cols = c->p[0].shape.d[1];
    int32_t *labels = th_alloc((size_t)rows * sizeof *labels);
    for (int64_t r = 0; r < rows; r++)
        labels[r] = cf_label(r, cols);
    ug_device *dev = ug_model_device(ug_graph_model(cg->g));
    ug_status st = ug_tensor_from_host(dev, UG_I32, 1, &rows, labels, &cg->labels_tensor);
    if (st != UG_OK)
        return st;
    th_track(cg->labels_tensor);
    st = ug_graph_input(cg->g, "labels", UG_I32, 1, &rows, &cg->labels);
    if (st != UG_OK)
        return st;
    return ug_g_cross_entropy(cg->g, p[0], cg->labels, c->f0, y);
}

/* y = mean over rows of the smoothed cross-entropy; dlogits = w (softmax -
 * target) / rows. */
static void ref_xent_grad(const cf_grad_case *c, const double *const *p, const double *w,
                          const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const int64_t rows = c->p[0].shape.d[0], cols = c->p[0].shape.d[1];
    double *labels = th_alloc((size_t)rows * sizeof *labels), *loss = th_alloc((size_t)rows * sizeof *loss);
    double *sm = th_alloc((size_t)(rows * cols) * sizeof *sm);
    for (int64_t r = 0; r < rows; r++)
        labels[r] = cf_label(r, cols);
    ref_cross_entropy(p[0], labels, loss, rows, cols, (double)c->f0);
    ref_softmax(p[0], sm, rows, cols, false);
    y[0] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        y[0] += loss[r] / (double)rows;
        for (int64_t j = 0; j < cols; j++) {
            const double t = (1.0 - c->f0) * (j == cf_label(r, cols)) + (double)c->f0 / (double)cols;
            grad[0][r * cols + j] = w[0] * (sm[r * cols + j] - t) / (double)rows;
        }
    }
}

static ug_status build_mse(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    return ug_g_mse(cg->g, p[0], p[1], y);
}

/* y = mean((a - b)^2); da = 2 w (a - b) / n = -db. */
static void ref_mse_grad(const cf_grad_case *c, const double *const *p, const double *w,
                         const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const int64_t n = cf_numel(&c->p[0].shape);
    y[0] = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = p[0][i] - p[1][i];
        y[0] += d * d / (double)n;
        grad[0][i] = 2.0 * w[0] * d / (double)n;
        grad[1][i] = -grad[0][i];
    }
}

/* ---- dropout (training mode): the mask is the device's, read back from
 * the forward output (no input is zero, so y == 0 exactly where dropped) ---- */

static ug_status build_dropout(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_dropout(cg->g, p[0], c->f0, y);
}

static void ref_dropout_grad(const cf_grad_case *c, const double *const *p, const double *w,
                             const float *y_dev, double *y, double *const *grad)
{
    const int64_t n = cf_numel(&c->p[0].shape);
    const double keep = 1.0 / (1.0 - (double)c->f0);
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        const bool kept = y_dev[i] != 0.0f;
        dropped += !kept;
        y[i] = kept ? p[0][i] * keep : 0.0;
        grad[0][i] = kept ? w[i] * keep : 0.0;
    }
    CHECK_MSG(dropped > 0 && dropped < n, "%lld of %lld elements dropped with p = %g",
              (long long)dropped, (long long)n, (double)c->f0);
}

/* ---- the table ---- */

#define X1(shape) {{shape, -1, 1, 0}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
#define MM(nm, a, b, ta_, tb_)                                                                    \
    {.name = nm, .count = 2, .p = {{a, -1, 1, 0}, {b, -1, 1, 0}}, .build = build_matmul,          \
     .ref = ref_matmul_grad, .ta = ta_, .tb = tb_}

static const cf_grad_case graph_op_cases[] = {
    MM("matmul [5,7] x [7,3]", S2(5, 7), S2(7, 3), false, false),
    MM("matmul [7,5]^T x [7,3]", S2(7, 5), S2(7, 3), true, false),
    MM("matmul [5,7] x [3,7]^T", S2(5, 7), S2(3, 7), false, true),
    MM("matmul [7,5]^T x [3,7]^T", S2(7, 5), S2(3, 7), true, true),
    MM("matmul [33,65] x [65,17]", S2(33, 65), S2(65, 17), false, false),
    MM("matmul [2,5,7] x [7,3] (b shared)", S3(2, 5, 7), S2(7, 3), false, false),
    MM("matmul [5,7] x [2,7,3] (a shared)", S2(5, 7), S3(2, 7, 3), false, false),
    MM("matmul [2,7,5]^T x [2,3,7]^T", S3(2, 7, 5), S3(2, 3, 7), true, true),
    MM("matmul [2,7,5]^T x [7,3] (b shared)", S3(2, 7, 5), S2(7, 3), true, false),
    {.name = "sum axis 0 of [2,3,4]", .count = 1, .p = X1(S3(2, 3, 4)), .build = build_sum, .ref = ref_sum_grad, .axis = 0},
    {.name = "sum axis 1 of [2,3,4]", .count = 1, .p = X1(S3(2, 3, 4)), .build = build_sum, .ref = ref_sum_grad, .axis = 1},
    {.name = "sum axis 2 of [2,3,257]", .count = 1, .p = X1(S3(2, 3, 257)), .build = build_sum, .ref = ref_sum_grad, .axis = 2},
    {.name = "sum all of [7,33]", .count = 1, .p = X1(S2(7, 33)), .build = build_sum, .ref = ref_sum_grad, .all = true},
    {.name = "mean axis 1 of [2,3,4]", .count = 1, .p = X1(S3(2, 3, 4)), .build = build_mean, .ref = ref_mean_grad, .axis = 1},
    {.name = "mean axis 0 of [33,7]", .count = 1, .p = X1(S2(33, 7)), .build = build_mean, .ref = ref_mean_grad, .axis = 0},
    {.name = "mean all of [7,33]", .count = 1, .p = X1(S2(7, 33)), .build = build_mean, .ref = ref_mean_grad, .all = true},
    {.name = "softmax [3,7]", .count = 1, .p = {{S2(3, 7), -3, 3, 0}}, .build = build_softmax, .ref = ref_softmax_grad},
    {.name = "softmax [2,2,257]", .count = 1, .p = {{S3(2, 2, 257), -3, 3, 0}}, .build = build_softmax, .ref = ref_softmax_grad},
    {.name = "log_softmax [3,7]", .count = 1, .p = {{S2(3, 7), -3, 3, 0}}, .build = build_log_softmax, .ref = ref_log_softmax_grad},
    {.name = "log_softmax [2,2,257]", .count = 1, .p = {{S3(2, 2, 257), -3, 3, 0}}, .build = build_log_softmax, .ref = ref_log_softmax_grad},
    {.name = "transpose [7,5]", .count = 1, .p = X1(S2(7, 5)), .build = build_transpose, .ref = ref_transpose_grad},
    {.name = "transpose [2,3,4]", .count = 1, .p = X1(S3(2, 3, 4)), .build = build_transpose, .ref = ref_transpose_grad},
    {.name = "reshape [3,4] -> [2,6]", .count = 1, .p = X1(S2(3, 4)), .build = build_reshape, .ref = ref_reshape_grad, .to = S2(2, 6)},
    {.name = "reshape [2,3,2] -> [2,-1]", .count = 1, .p = X1(S3(2, 3, 2)), .build = build_reshape, .ref = ref_reshape_grad, .to = S2(2, -1)},
    {.name = "layernorm [5,9]", .count = 3, .p = {{S2(5, 9), -3, 3, 0}, {{1, {9}}, 0.5, 1.5, 0}, {{1, {9}}, -1, 1, 0}},
     .build = build_layernorm, .ref = ref_layernorm_grad, .f0 = 1e-5f},
    {.name = "layernorm [3,257]", .count = 3, .p = {{S2(3, 257), -3, 3, 0}, {{1, {257}}, 0.5, 1.5, 0}, {{1, {257}}, -1, 1, 0}},
     .build = build_layernorm, .ref = ref_layernorm_grad, .f0 = 1e-5f},
    {.name = "cross_entropy [6,5]", .count = 1, .p = {{S2(6, 5), -3, 3, 0}}, .build = build_xent, .ref = ref_xent_grad},
    {.name = "cross_entropy [40,37] smoothing 0.1", .count = 1, .p = {{S2(40, 37), -3, 3, 0}}, .build = build_xent,
     .ref = ref_xent_grad, .f0 = 0.1f},
    {.name = "mse [7,33]", .count = 2, .p = {{S2(7, 33), -1, 1, 0}, {S2(7, 33), -1, 1, 0}}, .build = build_mse,
     .ref = ref_mse_grad},
    {.name = "dropout p 0.25 [16,16]", .count = 1, .p = {{S2(16, 16), -1, 1, 0.1}}, .build = build_dropout,
     .ref = ref_dropout_grad, .f0 = 0.25f},
};

void cf_graph_op_grad_cases(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(graph_op_cases); i++) {
        cf_check_grad(dev, &graph_op_cases[i]);
        ts_cleanup();
    }
    cf_rows_ran(CF_ROWS_GRAPH_OPS);
}
