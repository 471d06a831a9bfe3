/* Conformance of convolution, batch normalisation and max pooling computing
 * in f16 and bf16, as a mixed-precision graph runs them: the operands cast to the half
 * type in the graph (the convolution's bias and batch norm's affine
 * parameters stay f32, as autocast leaves them), the output cast back to
 * f32; forward and every gradient through cf_check_grad against the double
 * reference on the values the half type holds. Where a CPU multiplies bf16
 * natively, oneDNN runs all three convolution passes in bf16 (any channel
 * count, the first layer's single channel too) and batch norm reads bf16 a
 * channel at a time; elsewhere the widening paths run. The tolerance is
 * the type's (harness.h) times 20: the output, the gradients and the loss
 * weights flowing back are each rounded to the type once. */
#include <stdio.h>

#include "conformance.h"
#include "train_support.h"

typedef struct half_conv {
    ug_dtype dt;
    int64_t n, c, h, w, oc;
    int k, pad, stride, groups;
    bool bias;
} half_conv;

static ref_conv_geom geom_of(const half_conv *s)
{
    return (ref_conv_geom){s->n, s->c, s->h, s->w, s->oc, s->k, s->k, {s->stride, s->stride},
                           {s->pad, s->pad}, {1, 1}, s->groups};
}

static ug_status build_conv(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const half_conv *s = c->row;
    const ug_conv2d_params params = {.stride = {s->stride, s->stride}, .padding = {s->pad, s->pad},
                                     .groups = s->groups};
    ug_value *x = NULL, *w = NULL, *out = NULL;
    ug_status st = ug_g_cast(cg->g, p[0], s->dt, &x);
    if (st == UG_OK) st = ug_g_cast(cg->g, p[1], s->dt, &w);
    if (st == UG_OK) st = ug_g_conv2d(cg->g, x, w, s->bias ? p[2] : NULL, &params, &out);
    return st == UG_OK ? ug_g_cast(cg->g, out, UG_F32, y) : st;
}

/* The reference on x and the weight as the type holds them. */
static void ref_conv(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev,
                     double *y, double *const *grad)
{
    (void)y_dev;
    const half_conv *s = c->row;
    const ref_conv_geom g = geom_of(s);
    double *r[2];
    for (int i = 0; i < 2; i++)
        r[i] = th_rounded_copy(s->dt, p[i], cf_numel(&c->p[i].shape));
    ref_conv2d(&g, r[0], r[1], s->bias ? p[2] : NULL, y);
    ref_conv2d_backward(&g, r[0], r[1], w, grad[0], grad[1], s->bias ? grad[2] : NULL);
}

static void conv_cases(ug_device *dev)
{
    static const half_conv cases[] = {
        {UG_BF16, 2, 16, 9, 11, 24, 3, 1, 1, 1, true},  /* 144 products: oneDNN in f32 too */
        {UG_BF16, 3, 1, 12, 10, 8, 3, 1, 1, 1, true},   /* a first layer: one channel */
        {UG_BF16, 2, 8, 11, 9, 12, 3, 1, 2, 2, false},  /* groups 2, stride 2 */
        {UG_BF16, 2, 6, 7, 7, 6, 3, 1, 1, 6, true},     /* depthwise */
        {UG_BF16, 2, 32, 6, 6, 16, 1, 0, 1, 1, false},  /* 1x1 */
        {UG_F16, 2, 16, 9, 11, 24, 3, 1, 1, 1, true},   /* f16: widened on every CPU */
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        const half_conv *s = &cases[i];
        char name[128];
        snprintf(name, sizeof name, "conv2d %s x [%lld,%lld,%lld,%lld] w [%lld,%lld,%d,%d] stride %d groups %d%s",
                 ug_dtype_name(s->dt), (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w,
                 (long long)s->oc, (long long)(s->c / s->groups), s->k, s->k, s->stride, s->groups,
                 s->bias ? " bias" : "");
        const cf_shape xs = {4, {s->n, s->c, s->h, s->w}}, ws = {4, {s->oc, s->c / s->groups, s->k, s->k}};
        const cf_grad_case c = {.name = name, .count = s->bias ? 3 : 2,
                                .p = {{xs, -1, 1, 0}, {ws, -1, 1, 0}, {{1, {s->oc}}, -1, 1, 0}},
                                .build = build_conv, .ref = ref_conv, .row = s, .tol = 20 * th_tol(s->dt)};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
}

typedef struct half_bn {
    ug_dtype dt;
    int64_t n, c, h, w;
} half_bn;

static ug_status build_bn(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const half_bn *s = c->row;
    ug_model *m = ug_graph_model(cg->g);
    ug_tensor *stats[2] = {NULL};
    ug_value *running[2] = {NULL}, *x = NULL, *out = NULL;
    ug_status st = UG_OK;
    for (int k = 0; k < 2 && st == UG_OK; k++) {
        st = ug_model_param(m, k ? "bn.running_var" : "bn.running_mean", 1, &s->c, UG_INIT_CONSTANT,
                            k ? 1.0f : 0.0f, &stats[k]);
        if (st == UG_OK)
            st = ug_graph_param(cg->g, stats[k], &running[k]);
    }
    if (st == UG_OK) st = ug_g_cast(cg->g, p[0], s->dt, &x);
    if (st == UG_OK) st = ug_g_batch_norm(cg->g, x, p[1], p[2], running[0], running[1], 0.1f, 1e-5f, &out);
    return st == UG_OK ? ug_g_cast(cg->g, out, UG_F32, y) : st;
}

static void ref_bn(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev, double *y,
                   double *const *grad)
{
    (void)y_dev;
    const half_bn *s = c->row;
    const int64_t inner = s->h * s->w;
    const double *x = th_rounded_copy(s->dt, p[0], cf_numel(&c->p[0].shape));
    ref_batch_norm(x, s->n, s->c, inner, p[1], p[2], NULL, NULL, true, 0.1, 1e-5, y);
    ref_batch_norm_backward(x, s->n, s->c, inner, p[1], NULL, NULL, true, 1e-5, w, grad[0], grad[1], grad[2]);
}

static void bn_cases(ug_device *dev)
{
    static const half_bn cases[] = {
        {UG_BF16, 4, 8, 10, 12}, {UG_BF16, 64, 3, 33, 1}, {UG_F16, 4, 8, 10, 12},
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        const half_bn *s = &cases[i];
        char name[96];
        snprintf(name, sizeof name, "batch_norm %s x [%lld,%lld,%lld,%lld] training", ug_dtype_name(s->dt),
                 (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w);
        const cf_shape xs = {4, {s->n, s->c, s->h, s->w}}, cs = {1, {s->c}};
        const cf_grad_case c = {.name = name, .count = 3, .p = {{xs, -2, 2, 0}, {cs, 0.5, 1.5, 0}, {cs, -1, 1, 0}},
                                .build = build_bn, .ref = ref_bn, .row = s, .tol = 20 * th_tol(s->dt)};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
}

typedef struct half_pool {
    ug_dtype dt;
    int64_t n, c, h, w;
    int k, stride;
} half_pool;

static ug_status build_pool(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const half_pool *s = c->row;
    const ug_pool2d_params params = {.kernel = {s->k, s->k}, .stride = {s->stride, s->stride}};
    ug_value *x = NULL, *out = NULL;
    ug_status st = ug_g_cast(cg->g, p[0], s->dt, &x);
    if (st == UG_OK) st = ug_g_max_pool2d(cg->g, x, &params, &out);
    return st == UG_OK ? ug_g_cast(cg->g, out, UG_F32, y) : st;
}

/* On the rounded values, where ties are common (bf16 keeps 8 bits): the
 * first maximum in the window's order takes the gradient. */
static void ref_pool(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev, double *y,
                     double *const *grad)
{
    (void)y_dev;
    const half_pool *s = c->row;
    const double *x = th_rounded_copy(s->dt, p[0], cf_numel(&c->p[0].shape));
    const ref_pool_geom g = {s->n * s->c, s->h, s->w, {s->k, s->k}, {s->stride, s->stride}, {0, 0}};
    ref_max_pool2d(&g, x, y, NULL);
    ref_max_pool2d_backward(&g, x, w, grad[0]);
}

static void pool_cases(ug_device *dev)
{
    static const half_pool cases[] = {
        {UG_BF16, 2, 3, 8, 10, 2, 2}, /* windows apart: the gradient's bits copied */
        {UG_BF16, 2, 3, 9, 9, 3, 2},  /* overlapping windows: summed in f32 */
        {UG_F16, 2, 3, 8, 10, 2, 2},
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        const half_pool *s = &cases[i];
        char name[96];
        snprintf(name, sizeof name, "max_pool2d %s x [%lld,%lld,%lld,%lld] kernel %d stride %d",
                 ug_dtype_name(s->dt), (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w, s->k,
                 s->stride);
        const cf_grad_case c = {.name = name, .count = 1, .p = {{{4, {s->n, s->c, s->h, s->w}}, -1, 1, 0}},
                                .build = build_pool, .ref = ref_pool, .row = s, .tol = 20 * th_tol(s->dt)};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
}

void test_half_conv_grads(ug_device *dev)
{
    conv_cases(dev);
    bn_cases(dev);
    pool_cases(dev);
}
