/* Conformance of adaptive average pooling (conv.h: ug_adaptive_avg_pool2d,
 * graph ug_g_adaptive_avg_pool2d) against a reference written here from
 * PyTorch's definition of the bins: gradients through graphs
 * (cf_check_grad), eager values in every dtype on plain tensors and
 * guarded views, and what it refuses. Sizes that divide (an average pool),
 * that do not (overlapping bins), an output larger than the input
 * (repeated cells) and a 1x1 output. */
#include <string.h>

#include "conformance.h"
#include "train_support.h"

#define S4(a, b, c, d) {4, {a, b, c, d}}

typedef struct adaptive_spec {
    int64_t oh, ow;
} adaptive_spec;

static ug_status build_adaptive(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const adaptive_spec *s = c->row;
    return ug_g_adaptive_avg_pool2d(cg->g, p[0], s->oh, s->ow, y);
}

/* Cell (i, j) averages rows floor(i H / oh) .. ceil((i + 1) H / oh) - 1 and
 * the columns likewise; each input's gradient sums w / count over the
 * cells whose bins hold it. */
static void ref_adaptive(const cf_shape *x, const adaptive_spec *s, const double *in, double *y, const double *w,
                         double *grad)
{
    const int64_t planes = x->d[0] * x->d[1], h = x->d[2], wd = x->d[3];
    if (grad)
        memset(grad, 0, (size_t)(planes * h * wd) * sizeof *grad);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < s->oh; i++)
            for (int64_t j = 0; j < s->ow; j++) {
                const int64_t r0 = i * h / s->oh, r1 = ((i + 1) * h + s->oh - 1) / s->oh;
                const int64_t c0 = j * wd / s->ow, c1 = ((j + 1) * wd + s->ow - 1) / s->ow;
                const double count = (double)((r1 - r0) * (c1 - c0));
                const int64_t dst = (p * s->oh + i) * s->ow + j;
                double sum = 0.0;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++) {
                        sum += in[(p * h + r) * wd + c];
                        if (grad)
                            grad[(p * h + r) * wd + c] += w[dst] / count;
                    }
                y[dst] = sum / count;
            }
}

static void ref_adaptive_grad(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev,
                              double *y, double *const *grad)
{
    (void)y_dev;
    ref_adaptive(&c->p[0].shape, c->row, p[0], y, w, grad[0]);
}

static const adaptive_spec half = {4, 3}, uneven = {3, 4}, larger = {5, 4}, one = {1, 1};

#define ADAPTIVE(nm, xs, spec)                                                                      \
    {.name = nm, .count = 1, .p = {{xs, -2, 2, 0}}, .build = build_adaptive,                        \
     .ref = ref_adaptive_grad, .row = spec}

static const cf_grad_case adaptive_cases[] = {
    ADAPTIVE("adaptive_avg_pool2d [2,3,8,6] to 4x3 (an average pool)", S4(2, 3, 8, 6), &half),
    ADAPTIVE("adaptive_avg_pool2d [1,2,7,5] to 3x4 (overlapping bins)", S4(1, 2, 7, 5), &uneven),
    ADAPTIVE("adaptive_avg_pool2d [1,1,3,2] to 5x4 (repeated cells)", S4(1, 1, 3, 2), &larger),
    ADAPTIVE("adaptive_avg_pool2d [2,2,5,5] to 1x1", S4(2, 2, 5, 5), &one),
};

static void check_adaptive_eager(ug_device *dev)
{
    static const ug_dtype dtypes[] = {UG_F32, UG_F16, UG_BF16};
    static const struct {
        cf_shape x;
        adaptive_spec s;
    } cases[] = {{S4(2, 3, 8, 6), {4, 3}}, {S4(1, 2, 7, 5), {3, 4}}, {S4(1, 1, 3, 2), {5, 4}}, {S4(2, 2, 9, 7), {2, 3}}};
    for (int d = 0; d < CF_COUNT(dtypes); d++)
        for (int i = 0; i < CF_COUNT(cases); i++) {
            const cf_shape *xs = &cases[i].x;
            const adaptive_spec *s = &cases[i].s;
            const bool guarded = i % 2 == 1;
            th_context("adaptive_avg_pool2d %s case %d%s", ug_dtype_name(dtypes[d]), i, guarded ? ", guarded" : "");
            double *x = cf_values(cf_numel(xs), -3, 3, 0);
            th_guard *g = NULL;
            ug_tensor *tx = cf_input(dev, dtypes[d], xs, x, guarded, &g);
            if (!tx)
                return;
            const cf_shape ys = S4(xs->d[0], xs->d[1], s->oh, s->ow);
            double *want = th_alloc((size_t)cf_numel(&ys) * sizeof *want);
            ref_adaptive(xs, s, x, want, NULL, NULL);
            th_round_to(dtypes[d], want, cf_numel(&ys));
            ug_tensor *out = NULL;
            const ug_status st = ug_adaptive_avg_pool2d(tx, s->oh, s->ow, &out);
            cf_check_result(st, out, dtypes[d], &ys, want, dtypes[d] == UG_F32 ? 1e-12 : th_tol(dtypes[d]),
                            "adaptive_avg_pool2d");
            th_guard_check(g);
        }
    th_context("adaptive_avg_pool2d errors");
    const cf_shape s4 = S4(1, 2, 3, 3), s3 = {3, {2, 3, 3}};
    double v[18] = {0};
    th_guard *unused = NULL;
    ug_tensor *x = cf_input(dev, UG_F32, &s4, v, false, &unused);
    ug_tensor *flat = cf_input(dev, UG_F32, &s3, v, false, &unused);
    ug_tensor *ints = NULL, *out = NULL;
    REQUIRE(x && flat);
    REQUIRE_OK(ug_tensor_create(dev, UG_I32, 4, s4.d, &ints));
    th_track(ints);
    if (CHECK_STATUS(ug_adaptive_avg_pool2d(x, 0, 2, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("adaptive_avg_pool2d", "0x2");
    CHECK_STATUS(ug_adaptive_avg_pool2d(flat, 2, 2, &out), UG_ERR_SHAPE);
    if (CHECK_STATUS(ug_adaptive_avg_pool2d(ints, 2, 2, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32");
    CHECK(out == NULL);
}

void test_adaptive_pool_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(adaptive_cases); i++) {
        cf_check_grad(dev, &adaptive_cases[i]);
        ts_cleanup();
    }
    check_adaptive_eager(dev);
}
