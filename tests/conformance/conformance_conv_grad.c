/* Conformance of the convolutional graph ops (conv.h, nn.h): the gradient
 * of every op with respect to each operand through cf_check_grad
 * (conformance_grad.c: a model whose parameters are the operands, loss =
 * sum(y * w), one forward and backward run) against the backward passes of
 * reference_conv.c (checked against finite differences by test_reference.c),
 * a composite conv -> batch norm -> relu -> max pool -> global average pool
 * chain, batch normalisation's running statistics through training steps
 * and eval mode against PyTorch's update rule worked out here, and the
 * nn.h layers' parameters.
 *
 * Tolerances: CF_TOL_GRAD (1e-6 NMSE, as conformance_grad.c: sums of a few
 * hundred f32 terms), TH_TOL_F32 on forward outputs, and CF_REL_STATS
 * (elementwise, relative to the largest) on running statistics, which is
 * tight enough to tell the unbiased variance from the biased one. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "train_support.h"

#define CF_TOL_GRAD 1e-6
#define CF_REL_STATS 1e-5

/* ---- conv2d: operands x, weight and (count 3) bias ---- */

typedef struct conv_spec {
    ug_conv2d_params params;
} conv_spec;

static ref_conv_geom conv_geom(const cf_grad_case *c)
{
    const ug_conv2d_params *p = &((const conv_spec *)c->row)->params;
    const cf_shape *x = &c->p[0].shape, *w = &c->p[1].shape;
    ref_conv_geom g = {x->d[0], x->d[1], x->d[2], x->d[3], w->d[0], (int)w->d[2], (int)w->d[3],
                       {1, 1}, {0, 0}, {1, 1}, p->groups ? p->groups : 1};
    for (int a = 0; a < 2; a++) {
        g.stride[a] = p->stride[a] ? p->stride[a] : 1;
        g.padding[a] = p->padding[a];
        g.dilation[a] = p->dilation[a] ? p->dilation[a] : 1;
    }
    return g;
}

static ug_status build_conv(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_conv2d(cg->g, p[0], p[1], c->count == 3 ? p[2] : NULL,
                       &((const conv_spec *)c->row)->params, y);
}

static void ref_conv_grad(const cf_grad_case *c, const double *const *p, const double *w,
                          const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const ref_conv_geom g = conv_geom(c);
    const bool bias = c->count == 3;
    ref_conv2d(&g, p[0], p[1], bias ? p[2] : NULL, y);
    ref_conv2d_backward(&g, p[0], p[1], w, grad[0], grad[1], bias ? grad[2] : NULL);
}

/* ---- pooling: operand x ---- */

typedef struct pool_spec {
    ug_pool2d_params params;
    bool ties;   /* x from {-2, ..., 2} (fixed values): the first maximum matters */
    int nan_at;  /* > 0: x[nan_at] is NaN (numeric checks off) */
} pool_spec;

static ref_pool_geom pool_geom(const cf_grad_case *c)
{
    const ug_pool2d_params *p = &((const pool_spec *)c->row)->params;
    const cf_shape *x = &c->p[0].shape;
    ref_pool_geom g = {x->d[0] * x->d[1], x->d[2], x->d[3], {p->kernel[0], p->kernel[1]},
                       {p->stride[0] ? p->stride[0] : p->kernel[0], p->stride[1] ? p->stride[1] : p->kernel[1]},
                       {p->padding[0], p->padding[1]}};
    return g;
}

static ug_status build_max_pool(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const pool_spec *s = c->row;
    if (s->nan_at > 0) {
        /* The loss is NaN; the gradient is not. */
        ug_status st = ug_graph_set_checks(cg->g, UG_CHECK_NONE);
        if (st != UG_OK)
            return st;
    }
    return ug_g_max_pool2d(cg->g, p[0], &s->params, y);
}

static void ref_max_pool_grad(const cf_grad_case *c, const double *const *p, const double *w,
                              const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const ref_pool_geom g = pool_geom(c);
    ref_max_pool2d(&g, p[0], y, NULL);
    ref_max_pool2d_backward(&g, p[0], w, grad[0]);
}

static ug_status build_avg_pool(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ug_g_avg_pool2d(cg->g, p[0], &((const pool_spec *)c->row)->params, y);
}

static void ref_avg_pool_grad(const cf_grad_case *c, const double *const *p, const double *w,
                              const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const ref_pool_geom g = pool_geom(c);
    ref_avg_pool2d(&g, p[0], y);
    ref_avg_pool2d_backward(&g, w, grad[0]);
}

static ug_status build_gap(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    return ug_g_global_avg_pool2d(cg->g, p[0], y);
}

static void ref_gap_grad(const cf_grad_case *c, const double *const *p, const double *w,
                         const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *x = &c->p[0].shape;
    const ref_pool_geom g = {x->d[0] * x->d[1], x->d[2], x->d[3], {(int)x->d[2], (int)x->d[3]},
                             {1, 1}, {0, 0}};
    ref_avg_pool2d(&g, p[0], y);
    ref_avg_pool2d_backward(&g, w, grad[0]);
}

/* ---- batch norm: operands x, weight, bias; running statistics are model
 * state made by the build ---- */

typedef struct bn_spec {
    bool eval;
    /* eval: the running statistics (set by cf_conv_grad_cases) */
    double rm[64], rv[64];
} bn_spec;

static int64_t bn_inner(const cf_shape *s) { return s->ndim == 4 ? s->d[2] * s->d[3] : 1; }

/* Running statistics as model parameters "name.running_mean/var" holding
 * mean and var (c values), as graph values. */
static ug_status running_stats(ug_graph *g, const char *name, int64_t c, const double *mean,
                               const double *var, ug_value **vm, ug_value **vv)
{
    ug_model *m = ug_graph_model(g);
    float host[2][64];
    char pname[64];
    for (int k = 0; k < 2; k++) {
        ug_tensor *t = NULL;
        snprintf(pname, sizeof pname, "%s.%s", name, k ? "running_var" : "running_mean");
        ug_status st = ug_model_param(m, pname, 1, &c, UG_INIT_CONSTANT, k ? 1.0f : 0.0f, &t);
        const double *src = k ? var : mean;
        if (st == UG_OK && src) {
            for (int64_t i = 0; i < c; i++)
                host[k][i] = (float)src[i];
            st = ug_tensor_upload(t, host[k], (size_t)c * sizeof(float));
        }
        if (st == UG_OK)
            st = ug_graph_param(g, t, k ? vv : vm);
        if (st != UG_OK)
            return st;
    }
    return UG_OK;
}

static ug_status build_bn(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const bn_spec *s = c->row;
    ug_value *rm = NULL, *rv = NULL;
    ug_status st = running_stats(cg->g, "bn", c->p[0].shape.d[1], s->eval ? s->rm : NULL,
                                 s->eval ? s->rv : NULL, &rm, &rv);
    if (st == UG_OK && s->eval)
        st = ug_graph_set_training(cg->g, false);
    if (st == UG_OK)
        st = ug_g_batch_norm(cg->g, p[0], p[1], p[2], rm, rv, 0.1f, c->f0, y);
    return st;
}

static void ref_bn_grad(const cf_grad_case *c, const double *const *p, const double *w,
                        const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const bn_spec *s = c->row;
    const cf_shape *x = &c->p[0].shape;
    /* The running statistics as the device holds them (f32). */
    double rm[64], rv[64];
    for (int i = 0; i < 64; i++) {
        rm[i] = (float)s->rm[i];
        rv[i] = (float)s->rv[i];
    }
    ref_batch_norm(p[0], x->d[0], x->d[1], bn_inner(x), p[1], p[2], rm, rv, !s->eval, 0.1,
                   (double)c->f0, y);
    for (int i = 0; i < 64; i++) { /* not updated for the backward pass */
        rm[i] = (float)s->rm[i];
        rv[i] = (float)s->rv[i];
    }
    ref_batch_norm_backward(p[0], x->d[0], x->d[1], bn_inner(x), p[1], rm, rv, !s->eval,
                            (double)c->f0, w, grad[0], grad[1], grad[2]);
}

/* ---- conv -> batch norm (weight ones, bias zeros, training) -> relu ->
 * max pool 2x2 -> global average pool: operands x and the conv weight (a
 * conv bias would get a zero gradient: batch norm removes it) ---- */

static const conv_spec chain_conv = {{{1, 1}, {1, 1}, {1, 1}, 1}};
static const ug_pool2d_params chain_pool = {{2, 2}, {2, 2}, {0, 0}};

static ug_status build_chain(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    ug_model *m = ug_graph_model(cg->g);
    int64_t oc = c->p[1].shape.d[0];
    ug_tensor *tw = NULL, *tb = NULL;
    ug_value *h = NULL, *bw = NULL, *bb = NULL, *rm = NULL, *rv = NULL;
    ug_status st = ug_g_conv2d(cg->g, p[0], p[1], NULL, &chain_conv.params, &h);
    if (st == UG_OK) st = ug_model_param(m, "chain.weight", 1, &oc, UG_INIT_CONSTANT, 1.0f, &tw);
    if (st == UG_OK) st = ug_model_param(m, "chain.bias", 1, &oc, UG_INIT_CONSTANT, 0.0f, &tb);
    if (st == UG_OK) st = ug_graph_param(cg->g, tw, &bw);
    if (st == UG_OK) st = ug_graph_param(cg->g, tb, &bb);
    if (st == UG_OK) st = running_stats(cg->g, "chain", oc, NULL, NULL, &rm, &rv);
    if (st == UG_OK) st = ug_g_batch_norm(cg->g, h, bw, bb, rm, rv, 0.1f, 1e-5f, &h);
    if (st == UG_OK) st = ug_g_relu(cg->g, h, &h);
    if (st == UG_OK) st = ug_g_max_pool2d(cg->g, h, &chain_pool, &h);
    if (st == UG_OK) st = ug_g_global_avg_pool2d(cg->g, h, y);
    return st;
}

static void ref_chain_grad(const cf_grad_case *c, const double *const *p, const double *w,
                           const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const ref_conv_geom g = {c->p[0].shape.d[0], c->p[0].shape.d[1], c->p[0].shape.d[2],
                             c->p[0].shape.d[3], c->p[1].shape.d[0], (int)c->p[1].shape.d[2],
                             (int)c->p[1].shape.d[3], {1, 1}, {1, 1}, {1, 1}, 1};
    const int64_t n = g.n, oc = g.oc, hw = g.h * g.w; /* same-size conv */
    const int64_t m1 = n * oc * hw;
    const ref_pool_geom pg = {n * oc, g.h, g.w, {2, 2}, {2, 2}, {0, 0}};
    const int64_t ph = g.h / 2, pw = g.w / 2, m4 = n * oc * ph * pw;
    double *h1 = th_alloc((size_t)m1 * sizeof *h1), *h2 = th_alloc((size_t)m1 * sizeof *h2);
    double *h3 = th_alloc((size_t)m1 * sizeof *h3), *h4 = th_alloc((size_t)m4 * sizeof *h4);
    double *ones = th_alloc((size_t)oc * sizeof *ones), *zeros = th_alloc((size_t)oc * sizeof *zeros);
    for (int64_t i = 0; i < oc; i++) {
        ones[i] = 1.0;
        zeros[i] = 0.0;
    }
    ref_conv2d(&g, p[0], p[1], NULL, h1);
    ref_batch_norm(h1, n, oc, hw, ones, zeros, NULL, NULL, true, 0.1, 1e-5, h2);
    for (int64_t i = 0; i < m1; i++)
        h3[i] = h2[i] > 0 ? h2[i] : 0.0;
    ref_max_pool2d(&pg, h3, h4, NULL);
    for (int64_t i = 0; i < n * oc; i++) {
        y[i] = 0.0;
        for (int64_t k = 0; k < ph * pw; k++)
            y[i] += h4[i * ph * pw + k] / (double)(ph * pw);
    }
    double *d4 = th_alloc((size_t)m4 * sizeof *d4), *d3 = th_alloc((size_t)m1 * sizeof *d3);
    double *d1 = th_alloc((size_t)m1 * sizeof *d1);
    for (int64_t i = 0; i < m4; i++)
        d4[i] = w[i / (ph * pw)] / (double)(ph * pw);
    ref_max_pool2d_backward(&pg, h3, d4, d3);
    for (int64_t i = 0; i < m1; i++)
        d3[i] = h2[i] > 0 ? d3[i] : 0.0;
    ref_batch_norm_backward(h1, n, oc, hw, ones, NULL, NULL, true, 1e-5, d3, d1, NULL, NULL);
    ref_conv2d_backward(&g, p[0], p[1], d1, grad[0], grad[1], NULL);
}

/* ---- the cases ---- */

#define S4(a, b, c, d) {4, {a, b, c, d}}
#define S1(a) {1, {a}}
#define S2D(a, b) {2, {a, b}}
#define CONV(nm, xs, ws, spec)                                                                      \
    {.name = nm, .count = 2, .p = {{xs, -1, 1, 0}, {ws, -1, 1, 0}}, .build = build_conv,            \
     .ref = ref_conv_grad, .row = spec}
#define CONVB(nm, xs, ws, oc, spec)                                                                 \
    {.name = nm, .count = 3, .p = {{xs, -1, 1, 0}, {ws, -1, 1, 0}, {S1(oc), -1, 1, 0}},             \
     .build = build_conv, .ref = ref_conv_grad, .row = spec}

static const conv_spec pad1 = {{{1, 1}, {1, 1}, {1, 1}, 1}};
static const conv_spec stride2 = {{{2, 2}, {0, 0}, {1, 1}, 1}};
static const conv_spec groups2 = {{{2, 2}, {1, 1}, {1, 1}, 2}};
static const conv_spec groups2_pad1 = {{{1, 1}, {1, 1}, {1, 1}, 2}};
static const conv_spec depthwise7 = {{{1, 1}, {1, 1}, {1, 1}, 7}};
static const conv_spec dilation2 = {{{1, 1}, {2, 2}, {2, 2}, 1}};
static const conv_spec pad2 = {{{1, 1}, {2, 2}, {1, 1}, 1}};
static const conv_spec defaults = {{{0, 0}, {0, 0}, {0, 0}, 0}};
static const conv_spec mixed = {{{2, 1}, {1, 2}, {1, 2}, 3}};
static const conv_spec stride32 = {{{3, 2}, {0, 1}, {1, 1}, 1}};

static const cf_grad_case conv_cases[] = {
    CONVB("conv2d x [2,3,7,9] w [5,3,3,3] padding 1", S4(2, 3, 7, 9), S4(5, 3, 3, 3), 5, &pad1),
    CONV("conv2d x [3,3,5,5] w [4,3,3,3] stride 2, no bias", S4(3, 3, 5, 5), S4(4, 3, 3, 3), &stride2),
    CONVB("conv2d x [1,6,7,9] w [4,3,3,3] groups 2 stride 2 padding 1", S4(1, 6, 7, 9), S4(4, 3, 3, 3), 4, &groups2),
    CONVB("conv2d x [2,7,7,9] w [7,1,3,3] depthwise padding 1", S4(2, 7, 7, 9), S4(7, 1, 3, 3), 7, &depthwise7),
    CONV("conv2d x [1,7,5,5] w [14,1,3,3] depthwise x2, no bias", S4(1, 7, 5, 5), S4(14, 1, 3, 3), &depthwise7),
    CONVB("conv2d x [2,3,9,9] w [5,3,3,3] dilation 2 padding 2", S4(2, 3, 9, 9), S4(5, 3, 3, 3), 5, &dilation2),
    CONVB("conv2d x [3,5,5,5] w [7,5,5,5] padding 2", S4(3, 5, 5, 5), S4(7, 5, 5, 5), 7, &pad2),
    CONVB("conv2d x [2,3,7,9] w [6,3,1,1] stride 2", S4(2, 3, 7, 9), S4(6, 3, 1, 1), 6, &stride2),
    CONVB("conv2d x [1,6,7,9] w [6,2,3,5] stride 2,1 padding 1,2 dilation 1,2 groups 3", S4(1, 6, 7, 9),
          S4(6, 2, 3, 5), 6, &mixed),
    CONVB("conv2d x [2,5,8,7] w [3,5,3,3] stride 3,2 padding 0,1 (pixels no window reads)", S4(2, 5, 8, 7),
          S4(3, 5, 3, 3), 3, &stride32),
    CONVB("conv2d x [3,3,5,5] w [5,3,3,3] default params", S4(3, 3, 5, 5), S4(5, 3, 3, 3), 5, &defaults),
    /* 0.3 MiB of columns per image: chunks of 3 images on CPU devices */
    CONVB("conv2d x [5,16,24,24] w [6,8,3,3] groups 2 padding 1, in chunks", S4(5, 16, 24, 24),
          S4(6, 8, 3, 3), 6, &groups2_pad1),
    /* 144 products per output: through oneDNN on the CPU when it is built in */
    CONVB("conv2d x [2,32,9,10] w [32,16,3,3] groups 2 stride 2 padding 1", S4(2, 32, 9, 10),
          S4(32, 16, 3, 3), 32, &groups2),
    CONV("conv2d x [2,16,6,7] w [16,16,3,3] dilation 2 padding 2, no bias", S4(2, 16, 6, 7),
         S4(16, 16, 3, 3), &dilation2),
    /* x's (then dy's) padded frames over 4 MiB: CPU devices' direct passes in chunks */
    CONVB("conv2d x [16,16,64,64] w [4,16,3,3] padding 1", S4(16, 16, 64, 64), S4(4, 16, 3, 3), 4, &pad1),
    CONV("conv2d x [16,4,64,64] w [16,4,3,3] padding 1", S4(16, 4, 64, 64), S4(16, 4, 3, 3), &pad1),
};

static const pool_spec max_k2 = {{{2, 2}, {0, 0}, {0, 0}}, false, 0};
static const pool_spec max_k3s2p1 = {{{3, 3}, {2, 2}, {1, 1}}, false, 0};
static const pool_spec max_k3s1p1_ties = {{{3, 3}, {1, 1}, {1, 1}}, true, 0};
static const pool_spec max_k2s1_ties = {{{2, 2}, {1, 1}, {0, 0}}, true, 0};
static const pool_spec max_rect = {{{3, 2}, {1, 2}, {1, 0}}, false, 0};
static const pool_spec max_k2s2p1_ties = {{{2, 2}, {2, 2}, {1, 1}}, true, 0};
static const pool_spec max_nan = {{{2, 2}, {1, 1}, {0, 0}}, false, 12};

#define MAXP(nm, xs, spec)                                                                          \
    {.name = nm, .count = 1, .p = {{xs, -2, 2, 0}}, .build = build_max_pool,                        \
     .ref = ref_max_pool_grad, .row = spec}
#define AVGP(nm, xs, spec)                                                                          \
    {.name = nm, .count = 1, .p = {{xs, -2, 2, 0}}, .build = build_avg_pool,                        \
     .ref = ref_avg_pool_grad, .row = spec}

static const cf_grad_case pool_cases[] = {
    MAXP("max_pool2d [2,3,7,9] kernel 2", S4(2, 3, 7, 9), &max_k2),
    MAXP("max_pool2d [2,3,7,9] kernel 3 stride 2 padding 1", S4(2, 3, 7, 9), &max_k3s2p1),
    MAXP("max_pool2d [2,3,5,5] kernel 3 stride 1 padding 1, ties", S4(2, 3, 5, 5), &max_k3s1p1_ties),
    MAXP("max_pool2d [1,5,6,7] kernel 2 stride 1, ties", S4(1, 5, 6, 7), &max_k2s1_ties),
    MAXP("max_pool2d [1,4,6,6] kernel 3,2 stride 1,2 padding 1,0", S4(1, 4, 6, 6), &max_rect),
    MAXP("max_pool2d [3,2,6,6] kernel 2 stride 2 padding 1, ties", S4(3, 2, 6, 6), &max_k2s2p1_ties),
    MAXP("max_pool2d [1,2,5,5] kernel 2 stride 1, a NaN", S4(1, 2, 5, 5), &max_nan),
    AVGP("avg_pool2d [2,3,7,9] kernel 2", S4(2, 3, 7, 9), &max_k2),
    AVGP("avg_pool2d [2,3,7,9] kernel 3 stride 2 padding 1", S4(2, 3, 7, 9), &max_k3s2p1),
    AVGP("avg_pool2d [2,3,5,5] kernel 3 stride 1 padding 1", S4(2, 3, 5, 5), &max_k3s1p1_ties),
    AVGP("avg_pool2d [1,4,6,6] kernel 3,2 stride 1,2 padding 1,0", S4(1, 4, 6, 6), &max_rect),
    AVGP("avg_pool2d [3,2,6,6] kernel 2 stride 2 padding 1", S4(3, 2, 6, 6), &max_k2s2p1_ties),
    {.name = "global_avg_pool2d [2,3,7,9]", .count = 1, .p = {{S4(2, 3, 7, 9), -2, 2, 0}}, .build = build_gap, .ref = ref_gap_grad},
    {.name = "global_avg_pool2d [3,5,1,1]", .count = 1, .p = {{S4(3, 5, 1, 1), -2, 2, 0}}, .build = build_gap, .ref = ref_gap_grad},
    {.name = "global_avg_pool2d [1,4,17,19]", .count = 1, .p = {{S4(1, 4, 17, 19), -2, 2, 0}}, .build = build_gap, .ref = ref_gap_grad},
    {.name = "conv 3x3 -> batch_norm -> relu -> max_pool 2 -> global_avg_pool, x [2,3,6,8] w [5,3,3,3]",
     .count = 2, .p = {{S4(2, 3, 6, 8), -1, 1, 0}, {S4(5, 3, 3, 3), -1, 1, 0}},
     .build = build_chain, .ref = ref_chain_grad},
};

/* Batch norm: x, weight in [0.5, 1.5], bias; eps in f0. */
#define BN(nm, xs, c, eps, spec)                                                                    \
    {.name = nm, .count = 3, .p = {{xs, -2, 2, 0}, {S1(c), 0.5, 1.5, 0}, {S1(c), -1, 1, 0}},        \
     .build = build_bn, .ref = ref_bn_grad, .row = spec, .f0 = eps}

static void run_table(ug_device *dev, const cf_grad_case *cases, int count)
{
    for (int i = 0; i < count; i++) {
        cf_grad_case c = cases[i];
        double *fixed = NULL;
        if (c.build == build_max_pool) {
            const pool_spec *s = c.row;
            const int64_t n = cf_numel(&c.p[0].shape);
            if (s->ties || s->nan_at > 0) {
                fixed = cf_values(n, -2, 2, 0);
                for (int64_t k = 0; s->ties && k < n; k++)
                    fixed[k] = round(fixed[k]);
                if (s->nan_at > 0)
                    fixed[s->nan_at] = NAN;
                c.values[0] = fixed;
            }
        }
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
}

static void conv_grads_body(ug_device *dev)
{
    run_table(dev, conv_cases, CF_COUNT(conv_cases));
    run_table(dev, pool_cases, CF_COUNT(pool_cases));

    /* Batch norm in training (the batch's statistics) and in eval mode
     * (running statistics, random and not the defaults). */
    static bn_spec train = {false, {0}, {0}}, eval = {true, {0}, {0}};
    for (int i = 0; i < 64; i++) {
        eval.rm[i] = th_uniform(-1, 1);
        eval.rv[i] = th_uniform(0.5, 2);
    }
    const cf_grad_case bn_cases[] = {
        BN("batch_norm 1-D [8,5] training", S2D(8, 5), 5, 1e-5f, &train),
        BN("batch_norm 1-D [3,7] training", S2D(3, 7), 7, 1e-5f, &train),
        BN("batch_norm 2-D [3,5,7,9] training", S4(3, 5, 7, 9), 5, 1e-5f, &train),
        BN("batch_norm 2-D [1,3,5,5] training", S4(1, 3, 5, 5), 3, 1e-5f, &train),
        BN("batch_norm 2-D [4,6,1,1] training eps 1e-3", S4(4, 6, 1, 1), 6, 1e-3f, &train),
        /* 3335 values a channel: a GPU's sums in chunks */
        BN("batch_norm 2-D [5,2,23,29] training", S4(5, 2, 23, 29), 2, 1e-5f, &train),
        BN("batch_norm 1-D [8,5] eval", S2D(8, 5), 5, 1e-5f, &eval),
        BN("batch_norm 2-D [2,5,3,3] eval", S4(2, 5, 3, 3), 5, 1e-5f, &eval),
    };
    run_table(dev, bn_cases, CF_COUNT(bn_cases));
    cf_rows_ran(CF_ROWS_CONV);
}

/* ---- batch normalisation's running statistics in graphs ---- */

/* The running statistics after one training batch, by PyTorch's rule
 * written out: momentum m, the batch mean and the unbiased variance over
 * N, H, W. */
static void pytorch_running_update(const double *x, int64_t n, int64_t c, int64_t inner,
                                   double momentum, double *running_mean, double *running_var)
{
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0.0, sq = 0.0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < inner; i++)
                sum += x[(b * c + ch) * inner + i];
        const double count = (double)(n * inner), mean = sum / count;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < inner; i++)
                sq += (x[(b * c + ch) * inner + i] - mean) * (x[(b * c + ch) * inner + i] - mean);
        running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mean;
        running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * sq / (count - 1.0);
    }
}

/* A model parameter (c floats) as doubles. */
static bool read_param(ug_model *m, const char *name, int64_t c, double *out)
{
    float buf[64];
    ug_status st = ug_model_read_param(m, name, buf, (size_t)c * sizeof(float));
    if (st != UG_OK) {
        th_fail(TH_LOC, "ug_model_read_param(%s) returned %s: %s", name, ug_status_name(st), ug_last_error());
        return false;
    }
    for (int64_t i = 0; i < c; i++)
        out[i] = buf[i];
    return true;
}

static bool check_stats(ug_model *m, const char *name, int64_t c, const double *mean, const double *var,
                        const char *when)
{
    char pname[64], what[160];
    double got[64];
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        snprintf(pname, sizeof pname, "%s.%s", name, k ? "running_var" : "running_mean");
        if (!read_param(m, pname, c, got))
            return false;
        const double *want = k ? var : mean;
        double diff = 0.0, scale = 0.0;
        int64_t worst = 0;
        for (int64_t i = 0; i < c; i++) {
            if (!(fabs(got[i] - want[i]) <= diff)) {
                diff = isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]);
                worst = i;
            }
            scale = fmax(scale, fabs(want[i]));
        }
        if (diff > CF_REL_STATS * scale) {
            snprintf(what, sizeof what, "%s %s", pname, when);
            th_fail(TH_LOC, "%s: channel %lld is %.9g, expected %.9g (PyTorch's update, momentum and unbiased variance)",
                    what, (long long)worst, got[worst], want[worst]);
            ok = false;
        }
    }
    return ok;
}

/* Input values: channel ch centred at ch - 1 with spread 0.5 + ch / 2, so
 * channels differ and the running statistics move visibly. */
static float *bn_input(int64_t n, int64_t c, int64_t inner, int step, double *as_double)
{
    float *x = th_alloc((size_t)(n * c * inner) * sizeof *x);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = (b * c + ch) * inner + i;
                x[k] = (float)((double)(ch - 1) + (0.5 + 0.5 * (double)ch) *
                                                      sin(0.7 * (double)k + 1.3 * step + 0.1));
                as_double[k] = x[k];
            }
    return x;
}

static bool compare_y(ug_graph *g, ug_value *y, const double *want, int64_t n, const char *what)
{
    const float *got = ts_read(g, y);
    if (!got)
        return false;
    double *d = th_alloc((size_t)n * sizeof *d), *w = th_alloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++) {
        d[i] = got[i];
        w[i] = ref_round_f32(want[i]);
    }
    return th_compare(what, d, w, n, TH_TOL_F32);
}

/* ug_nn_batch_norm (2-D on [4,3,5,5] and 1-D on [6,4]) in a graph trained
 * by Adam for three steps: each step's output normalises with the batch's
 * statistics and the weight and bias of that step, and the running
 * statistics follow PyTorch's rule (momentum 0.1, unbiased variance) from
 * zeros and ones. Then eval mode normalises with them and leaves them, and
 * a training forward pass moves them again. */
static void batch_norm_running_stats_body(ug_device *dev)
{
    enum { N2 = 4, C2 = 3, H = 5, W = 5, N1 = 6, C1 = 4 };
    const int64_t xs2[4] = {N2, C2, H, W}, xs1[2] = {N1, C1};
    const int64_t n2 = N2 * C2 * H * W, n1 = N1 * C1;
    ug_model *m = ts_model(dev, 11);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    ug_value *x2 = NULL, *x1 = NULL, *y2 = NULL, *y1 = NULL, *w2 = NULL, *w1 = NULL, *p2 = NULL,
             *p1 = NULL, *l2 = NULL, *l1 = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x2", UG_F32, 4, xs2, &x2));
    REQUIRE_OK(ug_graph_input(g, "x1", UG_F32, 2, xs1, &x1));
    REQUIRE_OK(ug_graph_input(g, "w2", UG_F32, 4, xs2, &w2));
    REQUIRE_OK(ug_graph_input(g, "w1", UG_F32, 2, xs1, &w1));
    REQUIRE_OK(ug_nn_batch_norm(g, "bn2", x2, &y2));
    REQUIRE_OK(ug_nn_batch_norm(g, "bn1", x1, &y1));
    CHECK(ug_value_ndim(y2) == 4 && ug_value_dim(y2, 1) == C2 && ug_value_dim(y2, 3) == W);
    CHECK(ug_value_ndim(y1) == 2 && ug_value_dim(y1, 0) == N1 && ug_value_dim(y1, 1) == C1);
    REQUIRE_OK(ug_graph_keep(g, y2));
    REQUIRE_OK(ug_graph_keep(g, y1));
    /* loss = sum(y2 * w2) + sum(y1 * w1) */
    REQUIRE_OK(ug_g_mul(g, y2, w2, &p2));
    REQUIRE_OK(ug_g_mul(g, y1, w1, &p1));
    REQUIRE_OK(ug_g_sum(g, p2, 0, true, &l2));
    REQUIRE_OK(ug_g_sum(g, p1, 0, true, &l1));
    REQUIRE_OK(ug_g_add(g, l2, l1, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ts_compile(g, m, true, 0.05f));

    /* The parameters nn.h promises: shapes [C], weight ones, bias zeros,
     * running mean zeros, running var ones. */
    static const char *const suffix[] = {"weight", "bias", "running_mean", "running_var"};
    static const double init[] = {1.0, 0.0, 0.0, 1.0};
    for (int layer = 0; layer < 2; layer++) {
        const int64_t c = layer ? C1 : C2;
        for (int k = 0; k < 4; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s.%s", layer ? "bn1" : "bn2", suffix[k]);
            ug_tensor *t = NULL;
            CHECK_OK(ug_model_find_param(m, name, &t));
            if (!t)
                continue;
            CHECK_MSG(ug_tensor_ndim(t) == 1 && ug_tensor_dim(t, 0) == c, "%s is not [%lld]", name, (long long)c);
            double v[64];
            if (ug_tensor_numel(t) == c && read_param(m, name, c, v))
                for (int64_t i = 0; i < c; i++)
                    CHECK_MSG(v[i] == init[k], "%s[%lld] starts at %g, expected %g", name, (long long)i, v[i], init[k]);
        }
    }

    double rm2[C2] = {0}, rv2[C2] = {1, 1, 1}, rm1[C1] = {0}, rv1[C1] = {1, 1, 1, 1};
    double *d2 = th_alloc(n2 * sizeof *d2), *d1 = th_alloc(n1 * sizeof *d1);
    double *want2 = th_alloc(n2 * sizeof *want2), *want1 = th_alloc(n1 * sizeof *want1);
    float *wf2 = th_alloc(n2 * sizeof *wf2), *wf1 = th_alloc(n1 * sizeof *wf1);
    for (int64_t i = 0; i < n2; i++)
        wf2[i] = (float)cos(0.3 * (double)i);
    for (int64_t i = 0; i < n1; i++)
        wf1[i] = (float)cos(0.45 * (double)i + 1.0);
    ug_tensor *tw2 = ts_tensor_f32(dev, 4, xs2, wf2), *tw1 = ts_tensor_f32(dev, 2, xs1, wf1);
    REQUIRE(tw2 && tw1);
    REQUIRE_OK(ug_graph_bind(g, w2, tw2));
    REQUIRE_OK(ug_graph_bind(g, w1, tw1));
    for (int step = 0; step < 3; step++) {
        th_context("training step %d", step + 1);
        ug_tensor *tx2 = ts_tensor_f32(dev, 4, xs2, bn_input(N2, C2, H * W, step, d2));
        ug_tensor *tx1 = ts_tensor_f32(dev, 2, xs1, bn_input(N1, C1, 1, step + 10, d1));
        REQUIRE(tx2 && tx1);
        double gw2[C2], gb2[C2], gw1[C1], gb1[C1];
        REQUIRE(read_param(m, "bn2.weight", C2, gw2) && read_param(m, "bn2.bias", C2, gb2));
        REQUIRE(read_param(m, "bn1.weight", C1, gw1) && read_param(m, "bn1.bias", C1, gb1));
        if (step > 0)
            CHECK_MSG(gw2[0] != 1.0 && gb1[0] != 0.0, "Adam did not move the batch norm's weight and bias");
        REQUIRE_OK(ug_graph_bind(g, x2, tx2));
        REQUIRE_OK(ug_graph_bind(g, x1, tx1));
        REQUIRE_OK(ug_graph_run(g));
        ref_batch_norm(d2, N2, C2, H * W, gw2, gb2, NULL, NULL, true, 0.1, 1e-5, want2);
        ref_batch_norm(d1, N1, C1, 1, gw1, gb1, NULL, NULL, true, 0.1, 1e-5, want1);
        compare_y(g, y2, want2, n2, "2-D batch norm output in training");
        compare_y(g, y1, want1, n1, "1-D batch norm output in training");
        pytorch_running_update(d2, N2, C2, H * W, (double)0.1f, rm2, rv2);
        pytorch_running_update(d1, N1, C1, 1, (double)0.1f, rm1, rv1);
        check_stats(m, "bn2", C2, rm2, rv2, "after a training step");
        check_stats(m, "bn1", C1, rm1, rv1, "after a training step");
    }

    /* Eval: the running statistics normalise and stay. */
    th_context("eval forward");
    REQUIRE_OK(ug_graph_set_training(g, false));
    ug_tensor *ex2 = ts_tensor_f32(dev, 4, xs2, bn_input(N2, C2, H * W, 7, d2));
    ug_tensor *ex1 = ts_tensor_f32(dev, 2, xs1, bn_input(N1, C1, 1, 17, d1));
    REQUIRE(ex2 && ex1);
    REQUIRE_OK(ug_graph_bind(g, x2, ex2));
    REQUIRE_OK(ug_graph_bind(g, x1, ex1));
    REQUIRE_OK(ug_graph_run_forward(g));
    {
        double gw2[C2], gb2[C2], gw1[C1], gb1[C1], m2[C2], v2[C2], m1[C1], v1[C1];
        REQUIRE(read_param(m, "bn2.weight", C2, gw2) && read_param(m, "bn2.bias", C2, gb2));
        REQUIRE(read_param(m, "bn1.weight", C1, gw1) && read_param(m, "bn1.bias", C1, gb1));
        /* The device's running statistics (checked above) as it stores them. */
        REQUIRE(read_param(m, "bn2.running_mean", C2, m2) && read_param(m, "bn2.running_var", C2, v2));
        REQUIRE(read_param(m, "bn1.running_mean", C1, m1) && read_param(m, "bn1.running_var", C1, v1));
        ref_batch_norm(d2, N2, C2, H * W, gw2, gb2, m2, v2, false, 0.1, 1e-5, want2);
        ref_batch_norm(d1, N1, C1, 1, gw1, gb1, m1, v1, false, 0.1, 1e-5, want1);
        compare_y(g, y2, want2, n2, "2-D batch norm output in eval mode (running statistics)");
        compare_y(g, y1, want1, n1, "1-D batch norm output in eval mode (running statistics)");
        /* Not the batch's statistics: those give a different output. */
        double *batch2 = th_alloc(n2 * sizeof *batch2);
        ref_batch_norm(d2, N2, C2, H * W, gw2, gb2, NULL, NULL, true, 0.1, 1e-5, batch2);
        CHECK_MSG(th_nmse(batch2, want2, n2) > 1e-3, "test bug: eval and training outputs agree");
    }
    check_stats(m, "bn2", C2, rm2, rv2, "after an eval forward pass (unchanged)");
    check_stats(m, "bn1", C1, rm1, rv1, "after an eval forward pass (unchanged)");

    /* Training again: a forward pass alone moves the statistics, as
     * PyTorch's forward in train mode does. */
    th_context("training forward pass after eval");
    REQUIRE_OK(ug_graph_set_training(g, true));
    REQUIRE_OK(ug_graph_run_forward(g));
    pytorch_running_update(d2, N2, C2, H * W, (double)0.1f, rm2, rv2);
    pytorch_running_update(d1, N1, C1, 1, (double)0.1f, rm1, rv1);
    check_stats(m, "bn2", C2, rm2, rv2, "after a training forward pass");
    check_stats(m, "bn1", C1, rm1, rv1, "after a training forward pass");
}

/* ug_g_batch_norm with the caller's parameters (ug_model_param: weight
 * ones, bias zeros, running mean zeros, running var ones), momentum 0.3
 * and eps 1e-3, forward passes only: three training batches of 8 rows,
 * then a batch of 5 rows bound to the same graph (the statistics over the
 * 5 rows only), then eval mode. */
static void batch_norm_1d_momentum_rows_body(ug_device *dev)
{
    enum { ROWS = 8, C = 5 };
    const float momentum = 0.3f, eps = 1e-3f;
    ug_model *m = ts_model(dev, 3);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    const int64_t xs[2] = {ROWS, C}, cs = C;
    static const char *const names[] = {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
    static const float init[] = {1.0f, 0.0f, 0.0f, 1.0f};
    ug_value *v[4] = {0}, *x = NULL, *y = NULL;
    for (int k = 0; k < 4; k++) {
        ug_tensor *t = NULL;
        REQUIRE_OK(ug_model_param(m, names[k], 1, &cs, UG_INIT_CONSTANT, init[k], &t));
        REQUIRE_OK(ug_graph_param(g, t, &v[k]));
    }
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_g_batch_norm(g, x, v[0], v[1], v[2], v[3], momentum, eps, &y));
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_graph_compile(g));

    double rm[C] = {0}, rv[C] = {1, 1, 1, 1, 1}, ones[C] = {1, 1, 1, 1, 1}, zeros[C] = {0};
    double d[ROWS * C], want[ROWS * C];
    static const int rows_of_run[] = {ROWS, ROWS, ROWS, 5};
    for (int run = 0; run < 4; run++) {
        const int64_t rows = rows_of_run[run];
        th_context("training forward pass %d, %lld rows", run + 1, (long long)rows);
        ug_tensor *tx = ts_tensor_f32(dev, 2, (int64_t[]){rows, C}, bn_input(rows, C, 1, run, d));
        REQUIRE(tx);
        REQUIRE_OK(ug_graph_bind(g, x, tx));
        REQUIRE_OK(ug_graph_run_forward(g));
        ref_batch_norm(d, rows, C, 1, ones, zeros, NULL, NULL, true, (double)momentum, (double)eps, want);
        compare_y(g, y, want, rows * C, "1-D batch norm output in training");
        pytorch_running_update(d, rows, C, 1, (double)momentum, rm, rv);
        check_stats(m, "bn", C, rm, rv, "after a training forward pass");
    }
    th_context("eval forward pass");
    REQUIRE_OK(ug_graph_set_training(g, false));
    ug_tensor *tx = ts_tensor_f32(dev, 2, xs, bn_input(ROWS, C, 1, 9, d));
    REQUIRE(tx);
    REQUIRE_OK(ug_graph_bind(g, x, tx));
    REQUIRE_OK(ug_graph_run_forward(g));
    double dm[C], dv[C];
    REQUIRE(read_param(m, "bn.running_mean", C, dm) && read_param(m, "bn.running_var", C, dv));
    ref_batch_norm(d, ROWS, C, 1, ones, zeros, dm, dv, false, (double)momentum, (double)eps, want);
    compare_y(g, y, want, ROWS * C, "1-D batch norm output in eval mode");
    check_stats(m, "bn", C, rm, rv, "after an eval forward pass (unchanged)");
}

/* ug_nn_conv2d: the parameters nn.h promises (names, shapes, PyTorch's
 * initialisation bounds) and the layer's output against ref_conv2d with
 * those parameters, with the planned batch and with one row bound. */
static void nn_conv2d_layer_body(ug_device *dev)
{
    static const struct {
        int64_t xs[4], oc;
        int kh, kw;
        bool defaults;
        ug_conv2d_params params;
    } cases[] = {
        {{2, 3, 7, 9}, 6, 3, 3, false, {{1, 1}, {1, 1}, {1, 1}, 3}},
        {{1, 4, 9, 9}, 5, 5, 3, true, {{0, 0}, {0, 0}, {0, 0}, 0}},
        {{2, 16, 6, 7}, 8, 3, 3, false, {{2, 2}, {1, 1}, {1, 1}, 1}},
        /* depthwise, without a bias (nn.Conv2d(bias=False)) */
        {{2, 4, 6, 5}, 4, 3, 3, false, {{1, 1}, {1, 1}, {1, 1}, 4}},
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        th_context("nn_conv2d case %d", i);
        ug_model *m = ts_model(dev, 100 + (uint64_t)i);
        ug_graph *g = m ? ts_graph(m) : NULL;
        REQUIRE(m && g);
        const int64_t *xs = cases[i].xs;
        const ug_conv2d_params *pp = cases[i].defaults ? NULL : &cases[i].params;
        const int groups = pp && pp->groups ? pp->groups : 1;
        const bool biased = i != 3;
        const ug_nn_layer_params layer = {.without_bias = !biased};
        ug_value *x = NULL, *y = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 4, xs, &x));
        REQUIRE_OK(ug_nn_conv2d_with(g, "conv", x, cases[i].oc, cases[i].kh, cases[i].kw, pp, &layer, &y));
        REQUIRE_OK(ug_graph_keep(g, y));
        REQUIRE_OK(ug_graph_compile(g));

        ug_tensor *tw = NULL, *tb = NULL;
        REQUIRE_OK(ug_model_find_param(m, "conv.weight", &tw));
        const int64_t want_w[4] = {cases[i].oc, xs[1] / groups, cases[i].kh, cases[i].kw};
        REQUIRE(th_check_tensor(tw, UG_F32, 4, want_w));
        const double bound = 1.0 / sqrt((double)(xs[1] / groups * cases[i].kh * cases[i].kw));
        double *w = th_download(tw), *b = th_alloc((size_t)cases[i].oc * sizeof *b); /* zeros: no bias */
        if (biased) {
            REQUIRE_OK(ug_model_find_param(m, "conv.bias", &tb));
            REQUIRE(th_check_tensor(tb, UG_F32, 1, &cases[i].oc));
            b = th_download(tb);
        } else {
            CHECK_MSG(ug_model_find_param(m, "conv.bias", &tb) != UG_OK, "without_bias made conv.bias");
            CHECK_EQ_I64(ug_model_param_count(m), 1);
        }
        REQUIRE(w && b);
        const int64_t nw = ug_tensor_numel(tw);
        double wmax = 0.0, bmax = 0.0;
        for (int64_t k = 0; k < nw; k++)
            wmax = fmax(wmax, fabs(w[k]));
        for (int64_t k = 0; k < cases[i].oc; k++)
            bmax = fmax(bmax, fabs(b[k]));
        CHECK_MSG(wmax <= bound * (1 + 1e-6) && wmax > 0.5 * bound,
                  "weights reach %g, expected uniform in [-%g, %g]", wmax, bound, bound);
        CHECK_MSG(bmax <= bound * (1 + 1e-6) && (bmax > 0.0 || !biased), "biases reach %g, expected uniform in "
                  "[-%g, %g]", bmax, bound, bound);

        const int64_t nx = ref_numel(4, xs);
        double *xv = cf_values(nx, -1, 1, 0);
        float *xf = th_alloc((size_t)nx * sizeof *xf);
        for (int64_t k = 0; k < nx; k++) {
            xf[k] = (float)xv[k];
            xv[k] = xf[k];
        }
        ug_tensor *tx = ts_tensor_f32(dev, 4, xs, xf);
        REQUIRE(tx);
        REQUIRE_OK(ug_graph_bind(g, x, tx));
        REQUIRE_OK(ug_graph_run_forward(g));
        ref_conv_geom geo = {xs[0], xs[1], xs[2], xs[3], cases[i].oc, cases[i].kh, cases[i].kw,
                             {1, 1}, {0, 0}, {1, 1}, groups};
        for (int a = 0; pp && a < 2; a++) {
            geo.stride[a] = pp->stride[a] ? pp->stride[a] : 1;
            geo.padding[a] = pp->padding[a];
            geo.dilation[a] = pp->dilation[a] ? pp->dilation[a] : 1;
        }
        const int64_t oh = ref_conv_out(xs[2], geo.kh, geo.stride[0], geo.padding[0], geo.dilation[0]);
        const int64_t ow = ref_conv_out(xs[3], geo.kw, geo.stride[1], geo.padding[1], geo.dilation[1]);
        CHECK(ug_value_ndim(y) == 4 && ug_value_dim(y, 0) == xs[0] && ug_value_dim(y, 1) == cases[i].oc &&
              ug_value_dim(y, 2) == oh && ug_value_dim(y, 3) == ow);
        const int64_t ny = xs[0] * cases[i].oc * oh * ow;
        REQUIRE(ts_value_numel(y) == ny);
        double *want = th_alloc((size_t)ny * sizeof *want);
        ref_conv2d(&geo, xv, w, b, want);
        compare_y(g, y, want, ny, "nn_conv2d output");
        if (xs[0] > 1) {
            /* Fewer rows bound to the same graph: the first image alone. */
            ug_tensor *first = NULL;
            REQUIRE_OK(ug_tensor_slice(tx, 0, 1, &first));
            th_track(first);
            REQUIRE_OK(ug_graph_bind(g, x, first));
            REQUIRE_OK(ug_graph_run_forward(g));
            CHECK_EQ_I64(ug_value_dim(y, 0), 1);
            REQUIRE(ts_value_numel(y) == ny / xs[0]);
            compare_y(g, y, want, ny / xs[0], "nn_conv2d output with one row bound");
        }
        ts_cleanup();
    }
}

/* Each test frees its models and graphs, also after a REQUIRE returned. */
#define CF_CLEANUP_TEST(name)                                                \
    void test_##name(ug_device *dev)                                         \
    {                                                                        \
        name##_body(dev);                                                    \
        ts_cleanup();                                                        \
    }
CF_CLEANUP_TEST(conv_grads)
CF_CLEANUP_TEST(batch_norm_running_stats)
CF_CLEANUP_TEST(batch_norm_1d_momentum_rows)
CF_CLEANUP_TEST(nn_conv2d_layer)
