/* Conformance of the normalisations over the last axis (graph.h:
 * ug_g_layernorm with and without its affine parts, ug_g_rmsnorm with and
 * without gamma; nn.h: ug_nn_layernorm, ug_nn_layernorm_with,
 * ug_nn_rmsnorm): gradients through graphs against the analytic
 * derivative in double (cf_check_grad) on 2-, 3- and 4-D inputs, rows
 * that fill no block evenly and rows of 9, 33 and 257; the values each
 * op saves for its backward; the layers' parameters; mixed precision;
 * and what the ops refuse. (The plain layernorm cases of
 * conformance_grad.c remain there.) */
#include <math.h>
#include <string.h>

#include "conformance.h"
#include "core/graph/internal.h" /* the nodes a graph holds, for what they save */
#include "train_support.h"

/* Which op and which of its affine parameters a case has: its parameters
 * are x, then gamma and beta where given. */
typedef struct norm_spec {
    bool rms, gamma, beta;
} norm_spec;

static ug_status build_norm(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const norm_spec *s = c->row;
    ug_value *gamma = s->gamma ? p[1] : NULL, *beta = s->beta ? p[s->gamma ? 2 : 1] : NULL;
    return s->rms ? ug_g_rmsnorm(cg->g, p[0], gamma, c->f0, y) : ug_g_layernorm(cg->g, p[0], gamma, beta, c->f0, y);
}

/* Per row, with m the mean (0 for RMSNorm), rstd = 1 / sqrt(mean((x -
 * m)^2) + eps), h = (x - m) rstd and g = w gamma (w without gamma):
 * dx = rstd (g - mean(g) - h mean(g h)), RMSNorm without the mean(g) term
 * (m does not depend on x there); dgamma = sum_rows w h; dbeta =
 * sum_rows w. y comes from reference.c. */
static void ref_norm_grad(const cf_grad_case *c, const double *const *p, const double *w,
                          const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const norm_spec *s = c->row;
    const cf_shape *xs = &c->p[0].shape;
    const int64_t cols = xs->d[xs->ndim - 1], rows = cf_numel(xs) / cols;
    const double eps = (double)c->f0;
    const double *gamma = s->gamma ? p[1] : NULL, *beta = s->beta ? p[s->gamma ? 2 : 1] : NULL;
    double *dgamma = s->gamma ? grad[1] : NULL, *dbeta = s->beta ? grad[s->gamma ? 2 : 1] : NULL;
    if (s->rms)
        ref_rmsnorm(p[0], gamma, y, rows, cols, eps);
    else
        ref_layernorm(p[0], gamma, beta, y, rows, cols, eps);
    if (dgamma)
        memset(dgamma, 0, (size_t)cols * sizeof *dgamma);
    if (dbeta)
        memset(dbeta, 0, (size_t)cols * sizeof *dbeta);
    for (int64_t r = 0; r < rows; r++) {
        const double *x = p[0] + r * cols, *wr = w + r * cols;
        double mean = 0.0, var = 0.0, mg = 0.0, mgh = 0.0;
        for (int64_t j = 0; j < cols && !s->rms; j++)
            mean += x[j] / (double)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (x[j] - mean) * (x[j] - mean) / (double)cols;
        const double rstd = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < cols; j++) {
            const double h = (x[j] - mean) * rstd, gj = wr[j] * (gamma ? gamma[j] : 1.0);
            mg += s->rms ? 0.0 : gj / (double)cols;
            mgh += gj * h / (double)cols;
            if (dgamma)
                dgamma[j] += wr[j] * h;
            if (dbeta)
                dbeta[j] += wr[j];
        }
        for (int64_t j = 0; j < cols; j++) {
            const double h = (x[j] - mean) * rstd, gj = wr[j] * (gamma ? gamma[j] : 1.0);
            grad[0][r * cols + j] = rstd * (gj - mg - h * mgh);
        }
    }
}

static const norm_spec ln_affine = {false, true, true}, ln_no_bias = {false, true, false},
                       ln_plain = {false, false, false}, rms_gamma = {true, true, false},
                       rms_plain = {true, false, false};

#define S2N(a, b) {2, {a, b}}
#define S3N(a, b, c) {3, {a, b, c}}
#define S4N(a, b, c, d) {4, {a, b, c, d}}
/* x in [lo, hi], gamma in [0.5, 1.5], beta in [-1, 1]: as many as spec has. */
#define NORM(nm, spec, xs, lo, hi, cols, eps)                                                             \
    {.name = nm, .count = 1 + (spec).gamma + (spec).beta,                                                 \
     .p = {{xs, lo, hi, 0}, {{1, {cols}}, (spec).gamma ? 0.5 : -1, (spec).gamma ? 1.5 : 1, 0},            \
           {{1, {cols}}, -1, 1, 0}},                                                                      \
     .build = build_norm, .ref = ref_norm_grad, .row = &(spec), .f0 = eps}

static const cf_grad_case norm_cases[] = {
    NORM("layernorm [2,3,9]", ln_affine, S3N(2, 3, 9), -3, 3, 9, 1e-5f),
    NORM("layernorm [2,2,3,33]", ln_affine, S4N(2, 2, 3, 33), -3, 3, 33, 1e-5f),
    NORM("layernorm without bias [13,257]", ln_no_bias, S2N(13, 257), -3, 3, 257, 1e-5f),
    NORM("layernorm without bias [3,5,9]", ln_no_bias, S3N(3, 5, 9), -2, 4, 9, 1e-5f),
    NORM("layernorm without affine [7,9]", ln_plain, S2N(7, 9), -3, 3, 9, 1e-5f),
    NORM("layernorm without affine [3,2,257]", ln_plain, S3N(3, 2, 257), -3, 3, 257, 1e-5f),
    NORM("rmsnorm [5,9]", rms_gamma, S2N(5, 9), -3, 3, 9, 1e-6f),
    NORM("rmsnorm [2,7,257]", rms_gamma, S3N(2, 7, 257), -3, 3, 257, 1e-6f),
    NORM("rmsnorm [3,1,11,33] (x off zero)", rms_gamma, S4N(3, 1, 11, 33), 0.5, 2, 33, 1e-6f),
    /* eps as large as the mean square: a kernel that drops it is off by ~30% */
    NORM("rmsnorm [4,33] eps 0.5", rms_gamma, S2N(4, 33), -1, 1, 33, 0.5f),
    NORM("rmsnorm without gamma [11,9]", rms_plain, S2N(11, 9), -3, 3, 9, 1e-6f),
    NORM("rmsnorm without gamma [3,2,257]", rms_plain, S3N(3, 2, 257), -3, 3, 257, 1e-6f),
};

/* The values the forward node keeps for backward: layer norm's mean and
 * rstd, RMSNorm's rstd alone, one f32 per row each. */
static void check_saved(ug_device *dev)
{
    for (int rms = 0; rms < 2; rms++) {
        th_context("what %s saves", rms ? "rmsnorm" : "layernorm");
        ug_model *m = ts_model(dev, 7);
        ug_graph *g = m ? ts_graph(m) : NULL;
        REQUIRE(m && g);
        const int64_t xs[3] = {2, 5, 9};
        ug_value *x = NULL, *y = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
        REQUIRE_OK(rms ? ug_g_rmsnorm(g, x, NULL, 1e-6f, &y) : ug_g_layernorm(g, x, NULL, NULL, 1e-5f, &y));
        const graph_node *n = y->producer;
        REQUIRE(n != NULL);
        CHECK_EQ_I64(n->nscratch, rms ? 1 : 2);
        for (int k = 0; k < n->nscratch; k++)
            CHECK(n->scratch[k]->dtype == UG_F32 && n->scratch[k]->ndim == 1 && n->scratch[k]->shape[0] == 10);
        CHECK(ug_value_ndim(y) == 3 && ug_value_dim(y, 2) == 9);
    }
}

/* The layers on x [2,3,9]: the parameters each creates (weight ones, bias
 * zeros, none it was told to leave out) and its forward values. */
static void check_layers(ug_device *dev)
{
    static const struct {
        const char *what;
        bool rms, with, without_weight, without_bias;
        int params;
    } cases[] = {
        {"ug_nn_layernorm", false, false, false, false, 2},
        {"ug_nn_layernorm_with NULL", false, true, false, false, 2},
        {"ug_nn_layernorm_with without_bias", false, true, false, true, 1},
        {"ug_nn_layernorm_with without_weight", false, true, true, false, 0},
        {"ug_nn_rmsnorm", true, false, false, false, 1},
    };
    const int64_t xs[3] = {2, 3, 9}, cols = 9, nx = 54;
    for (int i = 0; i < CF_COUNT(cases); i++) {
        th_context("%s", cases[i].what);
        ug_model *m = ts_model(dev, 11);
        ug_graph *g = m ? ts_graph(m) : NULL;
        REQUIRE(m && g);
        ug_value *x = NULL, *y = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
        const ug_nn_norm_params params = {cases[i].without_weight, cases[i].without_bias};
        const bool defaults = !cases[i].without_weight && !cases[i].without_bias;
        if (cases[i].rms)
            REQUIRE_OK(ug_nn_rmsnorm(g, "norm", x, 1e-6f, &y));
        else if (cases[i].with)
            REQUIRE_OK(ug_nn_layernorm_with(g, "norm", x, 1e-5f, defaults ? NULL : &params, &y));
        else
            REQUIRE_OK(ug_nn_layernorm(g, "norm", x, 1e-5f, &y));
        REQUIRE_OK(ug_graph_keep(g, y));
        REQUIRE_OK(ug_graph_compile(g));
        CHECK_EQ_I64(ug_model_param_count(m), cases[i].params);
        const char *names[2] = {"norm.weight", "norm.bias"};
        for (int k = 0; k < 2; k++) {
            ug_tensor *t = NULL;
            const bool wanted = k < cases[i].params;
            if (!wanted) {
                CHECK(ug_model_find_param(m, names[k], &t) != UG_OK);
                continue;
            }
            REQUIRE_OK(ug_model_find_param(m, names[k], &t));
            REQUIRE(th_check_tensor(t, UG_F32, 1, &cols));
            const double *v = th_download(t);
            REQUIRE(v);
            for (int64_t j = 0; j < cols; j++)
                CHECK_MSG(v[j] == (k ? 0.0 : 1.0), "%s[%lld] is %g", names[k], (long long)j, v[j]);
        }
        double *xv = cf_values(nx, -3, 3, 0);
        float *xf = th_alloc((size_t)nx * sizeof *xf);
        for (int64_t k = 0; k < nx; k++) {
            xf[k] = (float)xv[k];
            xv[k] = xf[k];
        }
        ug_tensor *tx = ts_tensor_f32(dev, 3, xs, xf);
        REQUIRE(tx);
        REQUIRE_OK(ug_graph_bind(g, x, tx));
        REQUIRE_OK(ug_graph_run_forward(g));
        const float *yf = ts_read(g, y);
        REQUIRE(yf);
        double *want = th_alloc((size_t)nx * sizeof *want), *got = th_alloc((size_t)nx * sizeof *got);
        if (cases[i].rms)
            ref_rmsnorm(xv, NULL, want, nx / cols, cols, 1e-6);
        else
            ref_layernorm(xv, NULL, NULL, want, nx / cols, cols, 1e-5);
        for (int64_t k = 0; k < nx; k++)
            got[k] = yf[k];
        th_compare("forward", got, want, nx, TH_TOL_F32);
    }
}

/* In a mixed-precision graph both take a half input widened to f32, as
 * layer norm always has (PyTorch autocast's f32 list), and train. */
static void check_mixed_precision(ug_device *dev)
{
    for (int rms = 0; rms < 2; rms++) {
        th_context("%s in a bf16 graph", rms ? "rmsnorm" : "layernorm without bias");
        ug_model *m = ts_model(dev, 3);
        ug_graph *g = m ? ts_graph(m) : NULL;
        REQUIRE(m && g);
        REQUIRE_OK(ug_graph_set_precision(g, UG_BF16));
        const int64_t xs[2] = {6, 8};
        ug_value *x = NULL, *h = NULL, *y = NULL, *loss = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
        REQUIRE_OK(ug_nn_linear(g, "fc", x, 33, &h));
        CHECK(ug_value_dtype(h) == UG_BF16);
        const ug_nn_norm_params no_bias = {.without_bias = true};
        REQUIRE_OK(rms ? ug_nn_rmsnorm(g, "norm", h, 1e-6f, &y) : ug_nn_layernorm_with(g, "norm", h, 1e-5f, &no_bias, &y));
        CHECK(ug_value_dtype(y) == UG_F32);
        REQUIRE_OK(ug_g_mean(g, y, 0, true, &loss));
        REQUIRE_OK(ug_graph_backward(g, loss));
        ug_tensor *w = NULL;
        ug_value *wv = NULL, *gw = NULL;
        REQUIRE_OK(ug_model_find_param(m, "norm.weight", &w));
        REQUIRE_OK(ug_graph_param(g, w, &wv));
        REQUIRE_OK(ug_graph_grad(g, wv, &gw));
        REQUIRE_OK(ug_graph_compile(g));
        float xf[48];
        for (int k = 0; k < 48; k++)
            xf[k] = (float)((k * 37) % 19) / 9.0f - 1.0f;
        ug_tensor *tx = ts_tensor_f32(dev, 2, xs, xf);
        REQUIRE(tx);
        REQUIRE_OK(ug_graph_bind(g, x, tx));
        REQUIRE_OK(ug_graph_run(g));
        const float *gf = ts_read(g, gw);
        REQUIRE(gf);
        double energy = 0.0;
        for (int k = 0; k < 33; k++) {
            CHECK_MSG(isfinite(gf[k]), "d norm.weight[%d] is %g", k, (double)gf[k]);
            energy += (double)gf[k] * gf[k];
        }
        CHECK(energy > 0.0);
    }
}

/* What the ops and layers refuse, each leaving the graph and model as
 * they were. */
static void check_errors(ug_device *dev)
{
    th_context("normalisation errors");
    ug_model *m = ts_model(dev, 5);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    const int64_t xs[3] = {2, 3, 9}, nine = 9, eight = 8, wide[2] = {1, 9};
    ug_value *x = NULL, *x16 = NULL, *scalar = NULL, *gamma = NULL, *beta = NULL, *short_gamma = NULL,
             *gamma16 = NULL, *row_gamma = NULL, *y = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
    REQUIRE_OK(ug_graph_input(g, "x16", UG_F16, 3, xs, &x16));
    REQUIRE_OK(ug_graph_input(g, "scalar", UG_F32, 0, NULL, &scalar));
    REQUIRE_OK(ug_graph_input(g, "gamma", UG_F32, 1, &nine, &gamma));
    REQUIRE_OK(ug_graph_input(g, "beta", UG_F32, 1, &nine, &beta));
    REQUIRE_OK(ug_graph_input(g, "short_gamma", UG_F32, 1, &eight, &short_gamma));
    REQUIRE_OK(ug_graph_input(g, "gamma16", UG_F16, 1, &nine, &gamma16));
    REQUIRE_OK(ug_graph_input(g, "row_gamma", UG_F32, 2, wide, &row_gamma));

    if (CHECK_STATUS(ug_g_layernorm(g, x, short_gamma, beta, 1e-5f, &y), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("graph layernorm", "gamma", "[8]", "9 elements");
    if (CHECK_STATUS(ug_g_layernorm(g, x, gamma, short_gamma, 1e-5f, &y), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("beta", "[8]");
    if (CHECK_STATUS(ug_g_rmsnorm(g, x, short_gamma, 1e-6f, &y), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("graph rmsnorm", "gamma", "[8]");
    if (CHECK_STATUS(ug_g_layernorm(g, x, NULL, beta, 1e-5f, &y), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("beta without gamma");
    static const float bad_eps[] = {0.0f, -1e-5f, NAN, INFINITY};
    for (int i = 0; i < CF_COUNT(bad_eps); i++) {
        if (CHECK_STATUS(ug_g_rmsnorm(g, x, gamma, bad_eps[i], &y), UG_ERR_INVALID_ARGUMENT))
            CHECK_ERROR_HAS("eps", "positive and finite");
        CHECK_STATUS(ug_g_layernorm(g, x, NULL, NULL, bad_eps[i], &y), UG_ERR_INVALID_ARGUMENT);
    }
    /* f32 only outside autocast, as layer norm has always been */
    if (CHECK_STATUS(ug_g_rmsnorm(g, x16, NULL, 1e-6f, &y), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("x", "f16");
    if (CHECK_STATUS(ug_g_rmsnorm(g, x, gamma16, 1e-6f, &y), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("gamma", "f16");
    if (CHECK_STATUS(ug_g_layernorm(g, scalar, NULL, NULL, 1e-5f, &y), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("at least one axis");
    CHECK_STATUS(ug_g_rmsnorm(g, NULL, gamma, 1e-6f, &y), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_g_rmsnorm(g, x, gamma, 1e-6f, NULL), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_g_rmsnorm(NULL, x, gamma, 1e-6f, &y), UG_ERR_INVALID_ARGUMENT);
    CHECK(y == NULL);
    /* A layer whose op refuses takes its parameters back. */
    CHECK_STATUS(ug_nn_rmsnorm(g, "norm", x, -1.0f, &y), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_nn_layernorm_with(g, "ln", x16, 1e-5f, &(ug_nn_norm_params){.without_bias = true}, &y),
                 UG_ERR_DTYPE);
    CHECK_STATUS(ug_nn_rmsnorm(g, "norm", scalar, 1e-6f, &y), UG_ERR_INVALID_ARGUMENT);
    CHECK_EQ_I64(ug_model_param_count(m), 0);
    /* gamma as [1, cols] holds the right elements: taken, as before */
    CHECK_OK(ug_g_rmsnorm(g, x, row_gamma, 1e-6f, &y));
}

void test_norm_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(norm_cases); i++) {
        cf_check_grad(dev, &norm_cases[i]);
        ts_cleanup();
    }
    check_saved(dev);
    ts_cleanup();
    check_layers(dev);
    ts_cleanup();
    check_mixed_precision(dev);
    ts_cleanup();
    check_errors(dev);
    ts_cleanup();
}
