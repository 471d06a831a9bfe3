/* Conformance of nearest upsampling (conv.h: ug_upsample2d, graph
 * ug_g_upsample2d) against a reference written here from the definition:
 * gradients through graphs (cf_check_grad), eager values in every dtype on
 * plain tensors and guarded views, an empty batch, and the scales, shapes
 * and dtypes it refuses. Copies are exact, so eager values must match
 * exactly. */
#include <string.h>

#include "conformance.h"
#include "train_support.h"

#define S4(a, b, c, d) {4, {a, b, c, d}}
#define S2D(a, b) {2, {a, b}}

typedef struct upsample_spec {
    int sh, sw;
} upsample_spec;

static ug_status build_upsample(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const upsample_spec *s = c->row;
    return ug_g_upsample2d(cg->g, p[0], s->sh, s->sw, y);
}

/* y(n, c, oy, ox) = x(n, c, oy / sh, ox / sw), written from the definition;
 * so each x element's gradient sums w over its sh x sw block. */
static void ref_upsample(const cf_shape *x, const upsample_spec *s, const double *in, double *y,
                         const double *w, double *grad)
{
    const int64_t planes = x->d[0] * x->d[1], h = x->d[2], wd = x->d[3];
    const int64_t oh = h * s->sh, ow = wd * s->sw;
    if (grad)
        memset(grad, 0, (size_t)(planes * h * wd) * sizeof *grad);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t src = (p * h + oy / s->sh) * wd + ox / s->sw, dst = (p * oh + oy) * ow + ox;
                y[dst] = in[src];
                if (grad)
                    grad[src] += w[dst];
            }
}

static void ref_upsample_grad(const cf_grad_case *c, const double *const *p, const double *w,
                              const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_upsample(&c->p[0].shape, c->row, p[0], y, w, grad[0]);
}

static const upsample_spec up2 = {2, 2}, up31 = {3, 1}, up1 = {1, 1}, up_wide = {1, 4};

#define UPSAMPLE(nm, xs, spec)                                                                      \
    {.name = nm, .count = 1, .p = {{xs, -2, 2, 0}}, .build = build_upsample,                        \
     .ref = ref_upsample_grad, .row = spec}

static const cf_grad_case upsample_cases[] = {
    UPSAMPLE("upsample2d [2,3,4,5] scale 2", S4(2, 3, 4, 5), &up2),
    UPSAMPLE("upsample2d [1,2,3,3] scale 3,1", S4(1, 2, 3, 3), &up31),
    UPSAMPLE("upsample2d [3,1,2,7] scale 1,4", S4(3, 1, 2, 7), &up_wide),
    UPSAMPLE("upsample2d [2,2,5,1] scale 1 (a copy)", S4(2, 2, 5, 1), &up1),
};

/* Eagerly in every dtype, on plain tensors and guarded views, an empty
 * batch, and what it refuses. */
static void check_upsample_eager(ug_device *dev)
{
    static const ug_dtype dtypes[] = {UG_F32, UG_F16, UG_BF16};
    static const struct {
        cf_shape x;
        upsample_spec s;
    } cases[] = {{S4(2, 3, 4, 5), {2, 2}}, {S4(1, 4, 33, 17), {3, 2}}, {S4(1, 1, 1, 1), {5, 7}},
                 {S4(0, 3, 4, 4), {2, 2}}};
    for (int d = 0; d < CF_COUNT(dtypes); d++)
        for (int i = 0; i < CF_COUNT(cases); i++) {
            const cf_shape *xs = &cases[i].x;
            const upsample_spec *s = &cases[i].s;
            const bool guarded = i % 2 == 1;
            th_context("upsample2d %s case %d%s", ug_dtype_name(dtypes[d]), i, guarded ? ", guarded" : "");
            double *x = cf_values(cf_numel(xs), -3, 3, 0);
            th_guard *g = NULL;
            ug_tensor *tx = cf_input(dev, dtypes[d], xs, x, guarded, &g);
            if (!tx)
                return;
            const cf_shape ys = S4(xs->d[0], xs->d[1], xs->d[2] * s->sh, xs->d[3] * s->sw);
            double *want = th_alloc((size_t)(cf_numel(&ys) + 1) * sizeof *want);
            ref_upsample(xs, s, x, want, NULL, NULL);
            ug_tensor *out = NULL;
            const ug_status st = ug_upsample2d(tx, s->sh, s->sw, &out);
            cf_check_result(st, out, dtypes[d], &ys, want, 0.0, "upsample2d");
            th_guard_check(g);
        }
    th_context("upsample2d errors");
    const cf_shape s4 = S4(1, 2, 3, 3), s2 = S2D(3, 3);
    double v[18] = {0};
    th_guard *unused = NULL;
    ug_tensor *x = cf_input(dev, UG_F32, &s4, v, false, &unused);
    ug_tensor *flat = cf_input(dev, UG_F32, &s2, v, false, &unused);
    ug_tensor *ints = NULL, *out = NULL;
    REQUIRE(x && flat);
    REQUIRE_OK(ug_tensor_create(dev, UG_I32, 4, s4.d, &ints));
    th_track(ints);
    if (CHECK_STATUS(ug_upsample2d(x, 0, 2, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("upsample2d", "scale 0x2");
    if (CHECK_STATUS(ug_upsample2d(x, 2, 1 << 20, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("upsample2d", "1 to 65536");
    CHECK_STATUS(ug_upsample2d(flat, 2, 2, &out), UG_ERR_SHAPE);
    if (CHECK_STATUS(ug_upsample2d(ints, 2, 2, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32");
    CHECK(out == NULL);
}

void test_upsample_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(upsample_cases); i++) {
        cf_check_grad(dev, &upsample_cases[i]);
        ts_cleanup();
    }
    cf_rows_ran(CF_ROWS_UPSAMPLE);
    check_upsample_eager(dev);
}
