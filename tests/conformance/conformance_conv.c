/* Conformance of the eager convolutional ops of conv.h (see
 * test_conformance.c): conv2d, max and average pooling, global average
 * pooling and batch normalisation on every device, each a table of cases
 * (odd image sizes, padding, stride, dilation, groups up to depthwise,
 * channel counts that divide no work-group size, batches of 1 and more,
 * guarded views at odd offsets) against the double references of
 * reference_conv.c, which test_reference.c checks by hand and by finite
 * differences.
 *
 * Tolerances: conv2d sums up to C/groups * KH * KW (here <= 150) f32
 * products per output in any order (a GEMM, or a direct loop), an NMSE
 * around 1e-13; CF_TOL_CONV = 1e-6 leaves room for fused multiply-adds
 * and any summation order while a wrong tap, border or group is off by
 * O(1e-2) or more. Pooling picks or averages a few values: TH_TOL_F32 (max
 * pool is exact). Batch normalisation: TH_TOL_F32 on y, and the running
 * statistics elementwise within CF_REL_STATS of the largest, tight enough to
 * tell the unbiased variance (a factor m / (m - 1)) from the biased one for
 * every case's m = N * H * W. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"

#define CF_TOL_CONV 1e-6
#define CF_REL_STATS 1e-5

/* Convolution and pooling take f16 and bf16 tensors (computing in f32). */
static const ug_dtype window_dtypes[] = {UG_F32, UG_F16, UG_BF16};

unsigned cf_window_dtype_mask(void) { return cf_dtype_mask(window_dtypes, CF_COUNT(window_dtypes)); }

static double window_tol(ug_dtype dt, double f32_tol) { return dt == UG_F32 ? f32_tol : th_tol(dt); }

/* ---- conv2d ---- */

typedef struct conv_case {
    int64_t n, c, h, w, oc;
    int kh, kw;
    ug_conv2d_params params;
    bool defaults; /* params NULL */
    bool bias, guarded;
} conv_case;

#define P(sh, sw, ph, pw, dh, dw, g) {{sh, sw}, {ph, pw}, {dh, dw}, g}

static const conv_case conv_cases[] = {
    /* n, c, h, w, oc, kh, kw, params (stride, padding, dilation, groups) */
    {1, 3, 7, 9, 5, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false, true, false},   /* 3x3 padding 1 */
    {3, 3, 7, 9, 5, 3, 3, P(1, 1, 0, 0, 1, 1, 1), false, true, true},    /* no padding */
    {1, 3, 5, 5, 2, 3, 3, P(1, 1, 2, 2, 1, 1, 1), false, true, false},   /* padding 2 > (k-1)/2 */
    {3, 5, 5, 5, 7, 5, 5, P(1, 1, 2, 2, 1, 1, 1), false, false, false},  /* 5x5 padding 2, no bias */
    {3, 5, 5, 5, 7, 5, 5, P(1, 1, 0, 0, 1, 1, 1), false, true, false},   /* 1x1 output */
    {1, 3, 7, 9, 6, 1, 1, P(2, 2, 0, 0, 1, 1, 1), false, true, true},    /* 1x1 kernel, stride 2 */
    {3, 3, 7, 9, 4, 1, 1, P(1, 1, 0, 0, 1, 1, 1), false, false, false},  /* 1x1 kernel */
    {3, 6, 9, 7, 4, 3, 3, P(2, 2, 1, 1, 1, 1, 2), false, true, false},   /* groups 2, stride 2 */
    {3, 6, 7, 9, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 2), false, false, true},   /* groups 2 */
    {3, 7, 7, 9, 7, 3, 3, P(1, 1, 1, 1, 1, 1, 7), false, true, false},   /* depthwise */
    {1, 7, 7, 9, 14, 3, 3, P(2, 2, 1, 1, 1, 1, 7), false, false, false}, /* depthwise x2, stride 2 */
    {1, 5, 5, 5, 5, 5, 5, P(1, 1, 2, 2, 1, 1, 5), false, true, true},    /* depthwise 5x5 */
    {3, 3, 9, 9, 5, 3, 3, P(1, 1, 2, 2, 2, 2, 1), false, true, false},   /* dilation 2 */
    {1, 3, 7, 9, 5, 3, 3, P(2, 2, 0, 0, 2, 2, 1), false, true, false},   /* dilation 2, stride 2 */
    {1, 6, 7, 9, 6, 3, 5, P(2, 1, 1, 2, 1, 2, 3), false, true, false},   /* all rectangular */
    {3, 3, 5, 5, 5, 3, 3, P(0, 0, 0, 0, 0, 0, 0), true, true, false},    /* params NULL */
    {1, 3, 5, 5, 5, 3, 3, P(0, 0, 1, 1, 0, 0, 0), false, true, false},   /* zero fields: defaults */
    {3, 5, 3, 3, 7, 3, 3, P(1, 1, 0, 0, 1, 1, 1), false, true, false},   /* kernel = image */
    {2, 16, 17, 19, 33, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false, true, false}, /* larger */
    {2, 16, 17, 19, 36, 3, 3, P(2, 2, 1, 1, 1, 1, 4), false, true, true},  /* larger, groups 4 */
    /* columns of about 0.9 and 0.3 MiB per image: CPU devices run these in
     * chunks of 1 and of 3 images (the last one short) */
    {3, 16, 40, 40, 8, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false, true, true},
    {5, 16, 24, 24, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 2), false, true, false},
    /* 144 products per output: the CPU runs these through oneDNN when it is
     * built in, the second with a window that stops short of the right edge */
    {2, 16, 9, 10, 32, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false, false, true},
    {2, 32, 11, 12, 32, 3, 3, P(2, 2, 1, 0, 2, 2, 2), false, true, false},
    /* padded frames of over 4 MiB: CPU devices' direct convolution in
     * chunks of 15 images */
    {16, 16, 64, 64, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 1), false, true, false},
};

/* params with PyTorch's defaults filled in. */
static ref_conv_geom conv_geom(const conv_case *k)
{
    const ug_conv2d_params *p = &k->params;
    ref_conv_geom r = {k->n, k->c, k->h, k->w, k->oc, k->kh, k->kw, {1, 1}, {0, 0}, {1, 1}, 1};
    if (k->defaults)
        return r;
    for (int a = 0; a < 2; a++) {
        r.stride[a] = p->stride[a] ? p->stride[a] : 1;
        r.padding[a] = p->padding[a];
        r.dilation[a] = p->dilation[a] ? p->dilation[a] : 1;
    }
    r.groups = p->groups ? p->groups : 1;
    return r;
}

static const char *conv_str(const conv_case *k, char *buf, size_t len)
{
    const ref_conv_geom g = conv_geom(k);
    snprintf(buf, len,
             "x [%lld,%lld,%lld,%lld], %lld out, kernel %dx%d, stride %d,%d, padding %d,%d, "
             "dilation %d,%d, groups %d%s%s%s",
             (long long)k->n, (long long)k->c, (long long)k->h, (long long)k->w, (long long)k->oc,
             k->kh, k->kw, g.stride[0], g.stride[1], g.padding[0], g.padding[1], g.dilation[0],
             g.dilation[1], g.groups, k->bias ? ", bias" : "", k->defaults ? ", params NULL" : "",
             k->guarded ? ", guarded views" : "");
    return buf;
}

void test_conv2d_ops(ug_device *dev)
{
    /* The output size rule, against the reference's. */
    static const int sizes[][5] = {{7, 3, 1, 1, 1}, {7, 3, 2, 1, 1}, {9, 3, 2, 2, 2}, {5, 5, 1, 2, 1},
                                   {5, 5, 3, 0, 1}, {1, 1, 1, 0, 1}, {17, 3, 2, 1, 3}, {6, 2, 2, 0, 1}};
    for (int i = 0; i < CF_COUNT(sizes); i++)
        CHECK_MSG(ug_conv_output_size(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4]) ==
                      ref_conv_out(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4]),
                  "ug_conv_output_size(%d, %d, %d, %d, %d) = %lld, expected %lld", sizes[i][0],
                  sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4],
                  (long long)ug_conv_output_size(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4]),
                  (long long)ref_conv_out(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], sizes[i][4]));
    /* Out of range: -1, never an overflow (UBSan's build checks). */
    CHECK_EQ_I64(ug_conv_output_size(INT64_MAX, 3, 1, INT_MAX, 1), -1);
    CHECK_EQ_I64(ug_conv_output_size(INT64_MAX - 1, 1, 1, 0, 1), INT64_MAX - 1);
    CHECK_EQ_I64(ug_conv_output_size(INT64_MAX, INT_MAX, INT_MAX, 0, INT_MAX),
                 (INT64_MAX - ((int64_t)INT_MAX * (INT_MAX - 1) + 1)) / INT_MAX + 1);
    CHECK_EQ_I64(ug_conv_output_size(5, INT_MAX, INT_MAX, INT_MAX, INT_MAX), 0);
    CHECK_EQ_I64(ug_conv_output_size(-1, 1, 1, 0, 1), -1);
    CHECK_EQ_I64(ug_conv_output_size(5, 0, 1, 0, 1), -1);
    CHECK_EQ_I64(ug_conv_output_size(5, 1, 1, -1, 1), -1);

    for (int i = 0; i < CF_COUNT(conv_cases); i++)
        for (int d = 0; d < CF_COUNT(window_dtypes); d++) {
            const ug_dtype dt = window_dtypes[d];
            const conv_case *k = &conv_cases[i];
            const ref_conv_geom g = conv_geom(k);
            char buf[256];
            th_context("conv2d %s %s", ug_dtype_name(dt), conv_str(k, buf, sizeof buf));
            const int before = th_failures();
            const cf_shape xs = {4, {k->n, k->c, k->h, k->w}};
            const cf_shape ws = {4, {k->oc, k->c / g.groups, k->kh, k->kw}};
            const cf_shape bs = {1, {k->oc}};
            const cf_shape ys = {4, {k->n, k->oc, ref_conv_out(k->h, k->kh, g.stride[0], g.padding[0], g.dilation[0]),
                                     ref_conv_out(k->w, k->kw, g.stride[1], g.padding[1], g.dilation[1])}};
            double *x = cf_values(cf_numel(&xs), -1, 1, 0);
            double *w = cf_values(cf_numel(&ws), -1, 1, 0);
            double *b = cf_values(cf_numel(&bs), -1, 1, 0);
            th_guard *gx = NULL, *gw = NULL, *gb = NULL;
            ug_tensor *tx = cf_input(dev, dt, &xs, x, k->guarded, &gx);
            ug_tensor *tw = cf_input(dev, dt, &ws, w, k->guarded, &gw);
            ug_tensor *tb = k->bias ? cf_input(dev, dt, &bs, b, k->guarded, &gb) : NULL;
            REQUIRE(tx && tw && (tb || !k->bias));
            double *want = th_alloc((size_t)cf_numel(&ys) * sizeof *want);
            ref_conv2d(&g, x, w, k->bias ? b : NULL, want);
            th_round_to(dt, want, cf_numel(&ys));
            ug_tensor *out = NULL;
            ug_status st = ug_conv2d(tx, tw, tb, k->defaults ? NULL : &k->params, &out);
            cf_check_result(st, out, dt, &ys, want, window_tol(dt, CF_TOL_CONV), "conv2d");
            th_guard_check(gx);
            th_guard_check(gw);
            th_guard_check(gb);
            if (th_failures() != before)
                return;
        }
}

/* ---- max and average pooling ---- */

typedef struct pool_case {
    int64_t n, c, h, w;
    ug_pool2d_params params;
    bool ties;    /* values from {-2, -1, 0, 1, 2}: windows with equal maxima */
    int nans;     /* NaNs at scattered positions */
    bool guarded;
} pool_case;

#define K(kh, kw, sh, sw, ph, pw) {{kh, kw}, {sh, sw}, {ph, pw}}

static const pool_case pool_cases[] = {
    {1, 3, 7, 9, K(2, 2, 0, 0, 0, 0), false, 0, false},  /* stride 0: the kernel's */
    {3, 5, 7, 9, K(2, 2, 2, 2, 0, 0), false, 0, true},
    {2, 3, 8, 10, K(2, 2, 2, 2, 0, 0), true, 3, false}, /* the common 2x2 with ties and NaNs */
    {3, 5, 7, 9, K(3, 3, 2, 2, 1, 1), false, 0, false},
    {2, 3, 5, 5, K(3, 3, 1, 1, 1, 1), true, 0, false},
    {2, 3, 5, 5, K(2, 2, 1, 1, 0, 0), true, 1, true},
    {1, 7, 9, 7, K(3, 2, 1, 2, 1, 0), false, 0, false},
    {3, 2, 6, 6, K(2, 2, 2, 2, 1, 1), true, 0, false},
    {2, 3, 8, 8, K(3, 3, 3, 3, 1, 1), false, 3, false},
    {1, 6, 5, 5, K(1, 1, 1, 1, 0, 0), false, 0, false},  /* identity */
    {2, 4, 17, 19, K(3, 3, 2, 2, 1, 1), true, 2, true},
    {2, 3, 3, 3, K(3, 3, 1, 1, 0, 0), false, 0, false},  /* one window */
};

static ref_pool_geom pool_geom(const pool_case *k)
{
    const ug_pool2d_params *p = &k->params;
    ref_pool_geom r = {k->n * k->c, k->h, k->w, {p->kernel[0], p->kernel[1]},
                       {p->stride[0] ? p->stride[0] : p->kernel[0], p->stride[1] ? p->stride[1] : p->kernel[1]},
                       {p->padding[0], p->padding[1]}};
    return r;
}

static double *pool_values(const pool_case *k, int64_t n)
{
    double *x = cf_values(n, -2, 2, 0);
    for (int64_t i = 0; k->ties && i < n; i++)
        x[i] = round(x[i]);
    for (int j = 0; j < k->nans; j++)
        x[(int64_t)(j + 1) * n / (k->nans + 1) - 1] = NAN;
    return x;
}

void test_pool_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(pool_cases); i++) {
        const pool_case *k = &pool_cases[i];
        const ref_pool_geom g = pool_geom(k);
        const cf_shape xs = {4, {k->n, k->c, k->h, k->w}};
        const cf_shape ys = {4, {k->n, k->c, ref_conv_out(k->h, g.kernel[0], g.stride[0], g.padding[0], 1),
                                 ref_conv_out(k->w, g.kernel[1], g.stride[1], g.padding[1], 1)}};
        for (int avg = 0; avg < 2; avg++)
            for (int d = 0; d < CF_COUNT(window_dtypes); d++) {
                const ug_dtype dt = window_dtypes[d];
                th_context("%s %s x [%lld,%lld,%lld,%lld] kernel %dx%d stride %d,%d (given %d,%d) padding %d,%d%s, %d NaN%s",
                           avg ? "avg_pool2d" : "max_pool2d", ug_dtype_name(dt), (long long)k->n, (long long)k->c,
                           (long long)k->h, (long long)k->w, g.kernel[0], g.kernel[1], g.stride[0],
                           g.stride[1], k->params.stride[0], k->params.stride[1], g.padding[0],
                           g.padding[1], k->ties ? ", ties" : "", k->nans, k->guarded ? ", guarded view" : "");
                const int before = th_failures();
                double *x = pool_values(k, cf_numel(&xs));
                th_guard *gx = NULL;
                ug_tensor *tx = cf_input(dev, dt, &xs, x, k->guarded, &gx);
                REQUIRE(tx);
                double *want = th_alloc((size_t)cf_numel(&ys) * sizeof *want);
                if (avg)
                    ref_avg_pool2d(&g, x, want);
                else
                    ref_max_pool2d(&g, x, want, NULL);
                th_round_to(dt, want, cf_numel(&ys));
                ug_tensor *out = NULL;
                ug_status st = avg ? ug_avg_pool2d(tx, &k->params, &out) : ug_max_pool2d(tx, &k->params, &out);
                cf_check_result(st, out, dt, &ys, want, avg ? window_tol(dt, TH_TOL_F32) : 0.0,
                                avg ? "avg_pool2d" : "max_pool2d");
                th_guard_check(gx);
                if (th_failures() != before)
                    return;
            }
    }
}

/* ---- global average pooling ---- */

void test_global_avg_pool_ops(ug_device *dev)
{
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {
        {{4, {1, 3, 7, 9}}, false}, {{4, {3, 5, 5, 5}}, true},    {{4, {2, 7, 1, 1}}, false},
        {{4, {2, 3, 33, 31}}, true}, {{4, {1, 1, 64, 64}}, false}, {{4, {5, 2, 1, 17}}, false},
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        const cf_shape *s = &cases[i].s;
        char buf[64];
        th_context("global_avg_pool2d %s%s", cf_shape_str(s, buf, sizeof buf),
                   cases[i].guarded ? ", guarded view" : "");
        const int before = th_failures();
        double *x = cf_values(cf_numel(s), -2, 2, 0);
        th_guard *gx = NULL;
        ug_tensor *tx = cf_input(dev, UG_F32, s, x, cases[i].guarded, &gx);
        REQUIRE(tx);
        /* The mean of each plane: an average pool whose window is the image. */
        const ref_pool_geom g = {s->d[0] * s->d[1], s->d[2], s->d[3], {(int)s->d[2], (int)s->d[3]},
                                 {1, 1}, {0, 0}};
        const cf_shape ys = {4, {s->d[0], s->d[1], 1, 1}};
        double *want = th_alloc((size_t)cf_numel(&ys) * sizeof *want);
        ref_avg_pool2d(&g, x, want);
        th_round_to(UG_F32, want, cf_numel(&ys));
        ug_tensor *out = NULL;
        ug_status st = ug_global_avg_pool2d(tx, &out);
        cf_check_result(st, out, UG_F32, &ys, want, TH_TOL_F32, "global_avg_pool2d");
        th_guard_check(gx);
        if (th_failures() != before)
            return;
    }
}

/* ---- batch normalisation ---- */

/* max |got - want| <= rel * max |want| over n values; false with a failure. */
static bool close_rel(const char *what, const double *got, const double *want, int64_t n, double rel)
{
    double diff = 0.0, scale = 0.0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - want[i]);
        if (d > diff || isnan(d)) {
            diff = isnan(d) ? INFINITY : d;
            worst = i;
        }
        scale = fmax(scale, fabs(want[i]));
    }
    if (diff <= rel * scale)
        return true;
    th_fail(TH_LOC, "%s: element %lld is %.9g, expected %.9g (max difference %.3g, %.3g relative)", what,
            (long long)worst, got[worst], want[worst], diff, scale > 0 ? diff / scale : diff);
    return false;
}

typedef struct bn_case {
    cf_shape s; /* [N, C] or [N, C, H, W] */
    float momentum, eps;
    double lo, hi; /* x's range */
    bool guarded;
} bn_case;

static const bn_case bn_cases[] = {
    {{2, {8, 5}}, 0.1f, 1e-5f, -2, 2, false},
    {{2, {3, 7}}, 0.1f, 1e-5f, -2, 2, true},
    {{2, {2, 33}}, 0.25f, 1e-3f, -2, 2, false},
    {{2, {64, 3}}, 0.1f, 1e-5f, 3, 5, false},     /* mean far from zero */
    {{4, {3, 5, 7, 9}}, 0.1f, 1e-5f, -2, 2, false},
    {{4, {1, 3, 5, 5}}, 0.1f, 1e-5f, -2, 2, true}, /* one image */
    {{4, {4, 6, 1, 1}}, 0.5f, 1e-5f, -2, 2, false},
    {{4, {2, 7, 3, 3}}, 0.1f, 1e-2f, 3, 5, false},
    {{4, {2, 33, 17, 19}}, 0.1f, 1e-5f, -2, 2, true},
    /* 3335 values a channel: a GPU's statistics in chunks, merged, their
     * edges inside a row; the mean far from zero */
    {{4, {5, 2, 23, 29}}, 0.1f, 1e-5f, 3, 5, false},
};

/* Training twice (the running statistics move twice, from random ones),
 * then eval with them; y each time and the running tensors after each
 * call against ref_batch_norm. */
void test_batch_norm_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(bn_cases); i++) {
        const bn_case *k = &bn_cases[i];
        const cf_shape *s = &k->s;
        const int64_t n = s->d[0], c = s->d[1], inner = cf_numel(s) / (n * c);
        const cf_shape cs = {1, {c}};
        char buf[64];
        const int before = th_failures();
        double *weight = cf_values(c, 0.5, 1.5, 0), *bias = cf_values(c, -1, 1, 0);
        double *rm = cf_values(c, -1, 1, 0), *rv = cf_values(c, 0.5, 2, 0);
        th_guard *gw = NULL, *gb = NULL, *gm = NULL, *gv = NULL;
        ug_tensor *tw = cf_input(dev, UG_F32, &cs, weight, k->guarded, &gw);
        ug_tensor *tb = cf_input(dev, UG_F32, &cs, bias, k->guarded, &gb);
        /* The running statistics are written in place: plain tensors, or
         * views whose surroundings must stay untouched. */
        ug_tensor *tm = cf_input(dev, UG_F32, &cs, rm, k->guarded, &gm);
        ug_tensor *tv = cf_input(dev, UG_F32, &cs, rv, k->guarded, &gv);
        REQUIRE(tw && tb && tm && tv);
        for (int step = 0; step < 3; step++) {
            const bool training = step < 2;
            th_context("batch_norm %s, %s, call %d, momentum %g, eps %g%s", cf_shape_str(s, buf, sizeof buf),
                       training ? "training" : "eval", step + 1, (double)k->momentum, (double)k->eps,
                       k->guarded ? ", guarded views" : "");
            double *x = cf_values(cf_numel(s), k->lo, k->hi, 0);
            th_guard *gx = NULL;
            ug_tensor *tx = cf_input(dev, UG_F32, s, x, k->guarded, &gx);
            REQUIRE(tx);
            double *want = th_alloc((size_t)cf_numel(s) * sizeof *want);
            ref_batch_norm(x, n, c, inner, weight, bias, rm, rv, training, (double)k->momentum,
                           (double)k->eps, want);
            th_round_to(UG_F32, want, cf_numel(s));
            ug_tensor *out = NULL;
            ug_status st = ug_batch_norm(tx, tw, tb, tm, tv, training, k->momentum, k->eps, &out);
            cf_check_result(st, out, UG_F32, s, want, TH_TOL_F32, "batch_norm");
            double *got_m = th_download(tm), *got_v = th_download(tv);
            REQUIRE(got_m && got_v);
            close_rel(training ? "running_mean after training" : "running_mean after eval (unchanged)",
                      got_m, rm, c, CF_REL_STATS);
            close_rel(training ? "running_var after training" : "running_var after eval (unchanged)",
                      got_v, rv, c, CF_REL_STATS);
            /* Continue from the device's statistics (as stored in f32). */
            memcpy(rm, got_m, (size_t)c * sizeof *rm);
            memcpy(rv, got_v, (size_t)c * sizeof *rv);
            th_guard_check(gx);
            if (th_failures() != before)
                return;
        }
        th_guard_check(gw);
        th_guard_check(gb);
        th_guard_check_outside(gm);
        th_guard_check_outside(gv);
        if (th_failures() != before)
            return;
    }
}
