/* Elementwise ops, every row of op_table.c: large and odd sizes, 8-D
 * broadcasting, empty tensors, IEEE special values and scale_shift's
 * parameters, on f32 and f16, against the rows' double formulas (the
 * shapes and dtypes every op meets are in test_conformance). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_table.h"
#include "reference.h"

static const int64_t odd_sizes[] = {1, 3, 17, 1000, 4097, 65537};
#define N_ODD_SIZES (int)(sizeof odd_sizes / sizeof odd_sizes[0])
static const ug_dtype float_dtypes[] = {UG_F32, UG_F16};

/* An input tensor holding v (rounded in place to what dtype stores, so the
 * reference sees the same numbers), as a plain tensor or a guarded view. */
static ug_tensor *input(ug_device *dev, ug_dtype dt, int ndim, const int64_t *shape, double *v,
                        bool guarded, th_guard **g)
{
    th_round_to(dt, v, ref_numel(ndim, shape));
    *g = NULL;
    if (guarded)
        return th_guarded(dev, dt, ndim, shape, v, g);
    return th_tensor(dev, dt, ndim, shape, v);
}

/* Runs op on a and b and compares with the reference; returns false on a
 * failure so callers can stop early. */
static bool check_binary(ug_device *dev, const op_binary *op, ug_dtype dt, int na,
                         const int64_t *sa, double *a, int nb, const int64_t *sb, double *b,
                         bool guarded)
{
    char s1[128], s2[128];
    th_context("%s %s %s x %s%s", op->name, ug_dtype_name(dt),
               th_shape_str(na, sa, s1, sizeof s1), th_shape_str(nb, sb, s2, sizeof s2),
               guarded ? ", guarded views" : "");
    int before = th_failures();
    th_guard *ga = NULL, *gb = NULL;
    ug_tensor *ta = input(dev, dt, na, sa, a, guarded, &ga);
    ug_tensor *tb = input(dev, dt, nb, sb, b, guarded, &gb);
    if (!ta || !tb)
        return false;
    int no;
    int64_t so[REF_MAX_DIMS];
    if (!ref_broadcast_shape(na, sa, nb, sb, &no, so)) {
        th_fail(TH_LOC, "test bug: shapes do not broadcast");
        return false;
    }
    int64_t n = ref_numel(no, so);
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    ref_binary(op->f, na, sa, a, nb, sb, b, want);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status s = op->eager(ta, tb, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK))
        return false;
    if (th_check_tensor(out, dt, no, so))
        th_compare(op->name, th_download(out), want, n, th_tol(dt));
    th_guard_check(ga);
    th_guard_check(gb);
    return th_failures() == before;
}

static bool check_unary(ug_device *dev, const op_unary *op, ug_dtype dt, int ndim,
                        const int64_t *shape, double *x, bool guarded, double tol)
{
    char s1[128];
    th_context("%s %s %s%s", op->name, ug_dtype_name(dt),
               th_shape_str(ndim, shape, s1, sizeof s1), guarded ? ", guarded view" : "");
    int before = th_failures();
    th_guard *g = NULL;
    ug_tensor *tx = input(dev, dt, ndim, shape, x, guarded, &g);
    if (!tx)
        return false;
    int64_t n = ref_numel(ndim, shape);
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = op->f(x[i]);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status s = op->eager(tx, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK))
        return false;
    if (th_check_tensor(out, dt, ndim, shape))
        th_compare(op->name, th_download(out), want, n, tol);
    th_guard_check(g);
    return th_failures() == before;
}

/* Every binary op, both dtypes, awkward sizes, plain tensors and views. */
static void test_binary_sizes(ug_device *dev)
{
    for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
        for (int k = 0; k < 2; k++) {
            for (int s = 0; s < N_ODD_SIZES; s++) {
                for (int guarded = 0; guarded < 2; guarded++) {
                    int64_t n = odd_sizes[s];
                    double *a = th_random_values(n, -10, 10);
                    double *b = th_random_values(n, -10, 10);
                    if (op->baway > 0) /* keep divisors away from zero */
                        for (int64_t i = 0; i < n; i++)
                            b[i] = (b[i] < 0 ? -0.5 : 0.5) + b[i] * 0.2;
                    if (!check_binary(dev, op, float_dtypes[k], 1, &n, a, 1, &n, b,
                                      guarded != 0))
                        return;
                }
            }
        }
    }
}

/* Broadcasting edge cases, every op. */
static void test_binary_broadcast(ug_device *dev)
{
    static const struct {
        int na, nb;
        int64_t sa[8], sb[8];
    } cases[] = {
        {2, 2, {3, 1}, {1, 4}},
        {2, 1, {5, 4}, {4}},
        {1, 2, {4}, {5, 4}},
        {0, 2, {0}, {3, 5}},                 /* scalar x tensor */
        {2, 0, {3, 5}, {0}},                 /* tensor x scalar */
        {0, 0, {0}, {0}},                    /* scalar x scalar */
        {3, 2, {2, 1, 3}, {4, 1}},
        {2, 3, {4, 1}, {2, 1, 3}},
        {1, 1, {1}, {7}},
        {2, 2, {1, 1}, {1, 1}},
        {3, 3, {1, 6, 1}, {6, 1, 1}},
        {3, 1, {4, 3, 2}, {1}},
        {8, 8, {2, 1, 3, 1, 2, 1, 2, 3}, {1, 2, 1, 3, 1, 2, 1, 1}},
        {8, 3, {1, 2, 1, 2, 1, 2, 1, 3}, {2, 1, 1}},
        {2, 2, {1000, 1}, {1, 17}},
        {1, 1, {65537}, {1}},
        /* A row repeated, as a bias is: rows of at least a chunk (64) and
         * not a multiple of it, either side. */
        {2, 1, {7, 200}, {200}},
        {1, 2, {130}, {3, 130}},
        {3, 2, {2, 3, 70}, {3, 70}},
        {2, 2, {1, 100}, {5, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
            for (int k = 0; k < 2; k++) {
                /* f16 on a few cases is enough: the same kernel indexing. */
                if (k == 1 && c % 3 != 0)
                    continue;
                int64_t na = ref_numel(cases[c].na, cases[c].sa);
                int64_t nb = ref_numel(cases[c].nb, cases[c].sb);
                double *a = th_random_values(na, -4, 4);
                double *b = th_random_values(nb, 0.5, 4); /* positive: safe divisor */
                bool guarded = (c + (size_t)o) % 2 == 1;
                if (!check_binary(dev, op, float_dtypes[k], cases[c].na,
                                  cases[c].sa, a, cases[c].nb, cases[c].sb, b, guarded))
                    return;
            }
        }
    }
}

/* Zero-size dimensions broadcast to empty outputs without error. */
static void test_binary_zero_size(ug_device *dev)
{
    static const struct {
        int na, nb, no;
        int64_t sa[3], sb[3], so[3];
    } cases[] = {
        {2, 1, 2, {0, 4}, {4}, {0, 4}},
        {2, 2, 2, {3, 0}, {3, 1}, {3, 0}},
        {2, 2, 2, {1, 0}, {5, 1}, {5, 0}},
        {0, 1, 1, {0}, {0}, {0}},
        {3, 2, 3, {2, 0, 3}, {1, 3}, {2, 0, 3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
            char s1[64], s2[64];
            th_context("%s %s x %s", op->name,
                       th_shape_str(cases[c].na, cases[c].sa, s1, sizeof s1),
                       th_shape_str(cases[c].nb, cases[c].sb, s2, sizeof s2));
            double one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            ug_tensor *a = th_tensor(dev, UG_F32, cases[c].na, cases[c].sa, one);
            ug_tensor *b = th_tensor(dev, UG_F32, cases[c].nb, cases[c].sb, one);
            ug_tensor *out = NULL;
            if (!a || !b)
                return;
            if (CHECK_STATUS(op->eager(a, b, &out), UG_OK)) {
                th_track(out);
                th_check_tensor(out, UG_F32, cases[c].no, cases[c].so);
            }
        }
    }
    /* Unary ops and scale_shift on an empty tensor. */
    int64_t empty[] = {3, 0};
    ug_tensor *e = th_tensor(dev, UG_F32, 2, empty, NULL);
    REQUIRE(e);
    for (int o = 0; o < op_unary_count; o++) {
        const op_unary *op = &op_unaries[o];
        th_context("%s of [3,0]", op->name);
        ug_tensor *out = NULL;
        if (CHECK_STATUS(op->eager(e, &out), UG_OK)) {
            th_track(out);
            th_check_tensor(out, UG_F32, 2, empty);
        }
    }
    ug_tensor *out = NULL;
    if (CHECK_STATUS(ug_scale_shift(e, 2.0f, 1.0f, &out), UG_OK)) {
        th_track(out);
        th_check_tensor(out, UG_F32, 2, empty);
    }
}

/* IEEE special values propagate where the answer is unambiguous. */
static void test_binary_special_values(ug_device *dev)
{
    const double inf = INFINITY, nan = NAN;
    static double a[] = {0, 0, 0, 0, 1, -1, 0, 0, 0, 0, 2, 3e38, -3e38, 60000, 5};
    static double b[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3e38, 3e38, 60000, 0};
    a[0] = inf; b[0] = 1;      /* inf op 1 */
    a[1] = inf; b[1] = -inf;   /* inf + -inf = NaN */
    a[2] = nan; b[2] = 1;      /* NaN in, NaN out (for arithmetic) */
    a[3] = -inf; b[3] = 2;
    /* a[4] = 1, b[4] = 0: 1/0 = inf; a[5] = -1: -1/0 = -inf */
    a[6] = 0; b[6] = 0;        /* 0/0 = NaN */
    a[7] = inf; b[7] = 0;      /* inf * 0 = NaN */
    a[8] = 1; b[8] = inf;      /* 1 / inf = 0 */
    a[9] = -inf; b[9] = -inf;
    /* 3e38 + 3e38 overflows f32; 60000 + 60000 overflows f16. */
    int64_t n = (int64_t)(sizeof a / sizeof a[0]);
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
            double aa[32], bb[32]; /* rounded to the dtype in place */
            memcpy(aa, a, sizeof a);
            memcpy(bb, b, sizeof b);
            if (!check_binary(dev, op, float_dtypes[k], 1, &n, aa, 1, &n, bb, false))
                return;
        }
    }
}

/* equal on small integers, where ties are common, with broadcasting. */
static void test_equal_with_ties(ug_device *dev)
{
    static const int64_t shapes[][2][2] = {{{1000, 1}, {1000, 1}}, {{7, 1}, {1, 5}}};
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < 2; s++) {
            const int64_t *sa = shapes[s][0], *sb = shapes[s][1];
            double *a = th_random_values(ref_numel(2, sa), 0, 4);
            double *b = th_random_values(ref_numel(2, sb), 0, 4);
            for (int64_t i = 0; i < ref_numel(2, sa); i++)
                a[i] = floor(a[i]);
            for (int64_t i = 0; i < ref_numel(2, sb); i++)
                b[i] = floor(b[i]);
            if (!check_binary(dev, op_binary_named("equal"), float_dtypes[k], 2, sa, a, 2, sb, b, false))
                return;
        }
    }
}

static void test_unary_sizes(ug_device *dev)
{
    for (int o = 0; o < op_unary_count; o++) {
        const op_unary *op = &op_unaries[o];
        for (int k = 0; k < 2; k++) {
            for (int s = 0; s < N_ODD_SIZES; s++) {
                for (int guarded = 0; guarded < 2; guarded++) {
                    int64_t n = odd_sizes[s];
                    double *x = th_random_values(n, op->lo, op->hi);
                    if (!check_unary(dev, op, float_dtypes[k], 1, &n, x,
                                     guarded != 0, th_tol(float_dtypes[k])))
                        return;
                }
            }
        }
    }
}

/* Unary ops keep any shape: 8-D, scalar, size-1 dims. */
static void test_unary_shapes(ug_device *dev)
{
    static const struct {
        int ndim;
        int64_t shape[8];
    } cases[] = {
        {0, {0}}, {8, {2, 3, 1, 2, 3, 1, 2, 5}}, {3, {1, 1, 1}}, {2, {17, 33}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int o = 0; o < op_unary_count; o++) {
        const op_unary *op = &op_unaries[o];
            int64_t n = ref_numel(cases[c].ndim, cases[c].shape);
            double *x = th_random_values(n, op->lo, op->hi);
            if (!check_unary(dev, op, UG_F32, cases[c].ndim, cases[c].shape, x,
                             c % 2 == 1, TH_TOL_F32))
                return;
        }
    }
}

/* gelu must be the exact erf form: on [-3, -1] the tanh approximation is
 * off by an NMSE of 1.6e-5 and the sigmoid one by 4e-2. */
static void test_gelu_exact_form(ug_device *dev)
{
    int64_t n = 4097;
    double *x = th_alloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = -3.0 + 2.0 * (double)i / (double)(n - 1);
    check_unary(dev, op_unary_named("gelu"), UG_F32, 1, &n, x, false, TH_TOL_F32);
}

static void test_scale_shift(ug_device *dev)
{
    static const float params[][2] = {{2.0f, 1.0f}, {-0.5f, 0.0f}, {0.0f, 3.25f}, {1.0f, 0.0f},
                                      {1e-3f, -7.5f}, {3.0f, -1e4f}};
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < N_ODD_SIZES; s++) {
            ug_dtype dt = float_dtypes[k];
            int64_t n = odd_sizes[s];
            float scale = params[s][0], shift = params[s][1];
            if (dt == UG_F16 && fabsf(shift) > 1e3f)
                shift = -100.0f;
            th_context("%s, %lld elements, scale %g shift %g", ug_dtype_name(dt), (long long)n,
                       scale, shift);
            double *x = th_random_values(n, -10, 10);
            th_guard *g = NULL;
            ug_tensor *tx = input(dev, dt, 1, &n, x, s % 2 == 0, &g);
            if (!tx)
                return;
            double *want = th_alloc((size_t)n * sizeof *want);
            ref_scale_shift(x, want, n, scale, shift);
            th_round_to(dt, want, n);
            ug_tensor *out = NULL;
            if (!CHECK_STATUS(ug_scale_shift(tx, scale, shift, &out), UG_OK))
                return;
            th_track(out);
            if (th_check_tensor(out, dt, 1, &n))
                th_compare("scale_shift", th_download(out), want, n, th_tol(dt));
            th_guard_check(g);
        }
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(binary_sizes),
        TH_DEVICE_TEST(binary_broadcast),
        TH_DEVICE_TEST(binary_zero_size),
        TH_DEVICE_TEST(binary_special_values),
        TH_DEVICE_TEST(equal_with_ties),
        TH_DEVICE_TEST(unary_sizes),
        TH_DEVICE_TEST(unary_shapes),
        TH_DEVICE_TEST(gelu_exact_form),
        TH_DEVICE_TEST(scale_shift),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
