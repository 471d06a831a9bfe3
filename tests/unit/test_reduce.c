/* Reductions (sum, mean, max, argmax, sum of squares) over an axis or
 * everything, up to 2^24+ elements, and softmax / log-softmax. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

static const char *const reduce_names[] = {"sum", "mean", "max", "argmax", "sumsq"};
static const int64_t odd_sizes[] = {1, 3, 17, 1000, 4097, 65537};
#define N_ODD_SIZES (int)(sizeof odd_sizes / sizeof odd_sizes[0])

/* Accumulating 2^24 values in f32 with a tree keeps the relative error
 * near log2(n) * 2^-24 ~ 1.4e-6 at worst; a serial f32 sum is off by 1e-4
 * on uniform data and by 25% on 0.1s. NMSE 1e-9 is relative error 3e-5. */
#define TOL_BIG_SUM 1e-9

/* Expected output shape of reducing shape over axis (or all). */
static int reduced_shape(int ndim, const int64_t *shape, int axis, bool all, bool keepdim,
                         int64_t *out)
{
    if (all)
        return 0;
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (i != axis)
            out[n++] = shape[i];
        else if (keepdim)
            out[n++] = 1;
    }
    return n;
}

/* Runs ug_reduce and compares; x already rounded to dt. */
static bool check_reduce(ug_device *dev, ug_reduce_op op, ug_dtype dt, int ndim,
                         const int64_t *shape, const double *x, int axis, bool all, bool keepdim,
                         bool guarded)
{
    char s1[128];
    th_context("%s %s %s axis %d%s%s%s", reduce_names[op], ug_dtype_name(dt),
               th_shape_str(ndim, shape, s1, sizeof s1), axis, all ? " all" : "",
               keepdim ? " keepdim" : "", guarded ? ", guarded view" : "");
    int before = th_failures();
    th_guard *g = NULL;
    ug_tensor *tx = guarded ? th_guarded(dev, dt, ndim, shape, x, &g)
                            : th_tensor(dev, dt, ndim, shape, x);
    if (!tx)
        return false;
    int pos_axis = axis < 0 ? axis + ndim : axis;
    int64_t oshape[REF_MAX_DIMS];
    int ondim = reduced_shape(ndim, shape, pos_axis, all, keepdim, oshape);
    int64_t n = ref_numel(ondim, oshape);
    double *want = th_alloc((size_t)n * sizeof *want);
    ref_reduce((ref_reduce_op)op, ndim, shape, x, pos_axis, all, want);
    ug_tensor *out = NULL;
    ug_status s = ug_reduce(tx, op, axis, all, keepdim, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK))
        return false;
    /* argmax gives i32; f32 stays f32; an f16 input may give f16 or f32. */
    ug_dtype odt = op == UG_REDUCE_ARGMAX ? UG_I32 : dt;
    if (out && dt == UG_F16 && op != UG_REDUCE_ARGMAX && ug_tensor_dtype(out) == UG_F32)
        odt = UG_F32;
    if (!th_check_tensor(out, odt, ondim, oshape))
        return false;
    th_round_to(odt, want, n);
    double *got = th_download(out);
    /* max and argmax are exact in any precision. */
    double tol = (op == UG_REDUCE_MAX || op == UG_REDUCE_ARGMAX) ? 0.0 : th_tol(odt);
    th_compare(reduce_names[op], got, want, n, tol);
    th_guard_check(g);
    return th_failures() == before;
}

/* Every op over every axis (negative too), with and without keepdim. */
static void test_reduce_axes(ug_device *dev)
{
    static const struct {
        int ndim;
        int64_t shape[4];
    } cases[] = {{2, {7, 9}}, {3, {3, 4, 5}}, {4, {2, 3, 1, 17}}, {1, {33}}};
    th_guard_sentinel(3e38); /* a huge finite sentinel changes sums and maxima */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nd = cases[c].ndim;
        int64_t n = ref_numel(nd, cases[c].shape);
        for (int k = 0; k < 2; k++) {
            ug_dtype dt = k ? UG_F16 : UG_F32;
            double *x = th_random_values(n, -4, 4);
            th_round_to(dt, x, n);
            for (int op = 0; op <= UG_REDUCE_SUMSQ; op++) {
                for (int axis = -nd; axis < nd; axis++) {
                    for (int keep = 0; keep < 2; keep++) {
                        bool guarded = (axis + keep + op) % 2 == 0;
                        if (!check_reduce(dev, (ug_reduce_op)op, dt, nd, cases[c].shape, x, axis,
                                          false, keep != 0, guarded))
                            return;
                    }
                }
            }
        }
    }
}

/* Over everything, at awkward sizes: a scalar result. */
static void test_reduce_all(ug_device *dev)
{
    th_guard_sentinel(3e38);
    for (int s = 0; s < N_ODD_SIZES; s++) {
        for (int k = 0; k < 2; k++) {
            ug_dtype dt = k ? UG_F16 : UG_F32;
            int64_t n = odd_sizes[s];
            double *x = th_random_values(n, -1, 1.5);
            th_round_to(dt, x, n);
            for (int op = 0; op <= UG_REDUCE_SUMSQ; op++) {
                /* sumsq of 65537 f16 values stays below 65504 on average. */
                if (!check_reduce(dev, (ug_reduce_op)op, dt, 1, &n, x, 0, true, false,
                                  (s + op) % 2 == 1))
                    return;
                /* A 1-D axis-0 reduction also gives a scalar, or [1] with keepdim. */
                if (!check_reduce(dev, (ug_reduce_op)op, dt, 1, &n, x, 0, false, s % 2 == 0,
                                  false))
                    return;
            }
        }
    }
    /* Long axis in the middle: [3, 4097, 5] over axis 1. */
    int64_t shape[] = {3, 4097, 5};
    int64_t n = ref_numel(3, shape);
    double *x = th_random_values(n, -1, 1);
    th_round_to(UG_F32, x, n);
    for (int op = 0; op <= UG_REDUCE_SUMSQ; op++)
        if (!check_reduce(dev, (ug_reduce_op)op, UG_F32, 3, shape, x, 1, false, false, true))
            return;
}

/* The convenience wrappers equal ug_reduce without keepdim. */
static void test_reduce_wrappers(ug_device *dev)
{
    int64_t shape[] = {7, 9};
    double *x = th_random_values(63, -3, 3);
    th_round_to(UG_F32, x, 63);
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, x);
    REQUIRE(t);
    for (int axis = -2; axis < 2; axis++) {
        int pa = axis < 0 ? axis + 2 : axis;
        int64_t oshape[1] = {shape[1 - pa]};
        double want[9];
        struct {
            ug_status (*fn)(const ug_tensor *, int, ug_tensor **);
            ref_reduce_op op;
            ug_dtype dt;
            const char *name;
        } w[] = {{ug_sum, REF_RSUM, UG_F32, "sum"}, {ug_mean, REF_RMEAN, UG_F32, "mean"},
                 {ug_max, REF_RMAX, UG_F32, "max"}, {ug_argmax, REF_RARGMAX, UG_I32, "argmax"}};
        for (int i = 0; i < 4; i++) {
            th_context("ug_%s axis %d", w[i].name, axis);
            ug_tensor *out = NULL;
            if (!CHECK_STATUS(w[i].fn(t, axis, &out), UG_OK))
                continue;
            th_track(out);
            ref_reduce(w[i].op, 2, shape, x, pa, false, want);
            if (th_check_tensor(out, w[i].dt, 1, oshape))
                th_compare(w[i].name, th_download(out), want, oshape[0],
                           w[i].op == REF_RMAX || w[i].op == REF_RARGMAX ? 0.0 : TH_TOL_F32);
        }
    }
    th_context("ug_sum_all / ug_mean_all");
    ug_tensor *s = NULL, *m = NULL;
    double want;
    if (CHECK_STATUS(ug_sum_all(t, &s), UG_OK)) {
        th_track(s);
        ref_reduce(REF_RSUM, 2, shape, x, 0, true, &want);
        if (th_check_tensor(s, UG_F32, 0, NULL))
            th_compare("sum_all", th_download(s), &want, 1, TH_TOL_F32);
    }
    if (CHECK_STATUS(ug_mean_all(t, &m), UG_OK)) {
        th_track(m);
        ref_reduce(REF_RMEAN, 2, shape, x, 0, true, &want);
        if (th_check_tensor(m, UG_F32, 0, NULL))
            th_compare("mean_all", th_download(m), &want, 1, TH_TOL_F32);
    }
}

/* argmax picks the first index of the maximum. */
static void test_argmax_ties(ug_device *dev)
{
    const double ninf = -INFINITY;
    double x[] = {
        2, 2, 2, 2, 2, 2,          /* all equal: 0 */
        1, 5, 5, 2, 5, 0,          /* 1 */
        ninf, ninf, -3, -3, ninf, -4, /* 2 */
        -1, -1, -1, -1, -1, 0,     /* 5 */
    };
    int64_t shape[] = {4, 6};
    for (int k = 0; k < 2; k++) {
        ug_dtype dt = k ? UG_F16 : UG_F32;
        if (!check_reduce(dev, UG_REDUCE_ARGMAX, dt, 2, shape, x, 1, false, false, k == 1))
            return;
        /* Down the columns: column 0 ties rows... */
        if (!check_reduce(dev, UG_REDUCE_ARGMAX, dt, 2, shape, x, 0, false, true, k == 0))
            return;
        /* Whole tensor: 5 at flat 7, 8, 10: first is 7. */
        if (!check_reduce(dev, UG_REDUCE_ARGMAX, dt, 2, shape, x, 0, true, false, false))
            return;
    }
    /* Many equal values across work-groups: 65537 zeros give 0, and a tie
     * between a far and a near element gives the near one. */
    int64_t n = 65537;
    double *z = th_alloc((size_t)n * sizeof *z);
    if (!check_reduce(dev, UG_REDUCE_ARGMAX, UG_F32, 1, &n, z, 0, true, false, false))
        return;
    z[40000] = 1.0;
    z[65536] = 1.0;
    z[30001] = 1.0;
    check_reduce(dev, UG_REDUCE_ARGMAX, UG_F32, 1, &n, z, 0, false, false, true);
}

/* NaN anywhere in a long row makes its max and sum NaN, also when a
 * larger value comes after it (a device may sum a row's pieces in lanes of
 * 8: row 0's NaN and the 50 after it share one, row 1's NaN is the last
 * term), and an infinity makes the max and sum infinite. Row 3 is plain. */
static void test_reduce_special_in_long_rows(ug_device *dev)
{
    enum { ROWS = 4, COLS = 40003 };
    int64_t shape[2] = {ROWS, COLS};
    double *x = th_random_values(ROWS * COLS, -1, 1);
    x[0 * COLS + 5] = NAN;
    x[0 * COLS + 13] = 50.0;
    x[1 * COLS + COLS - 1] = NAN;
    x[2 * COLS + 17] = INFINITY;
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, x);
    REQUIRE(t);
    const ug_reduce_op ops[3] = {UG_REDUCE_MAX, UG_REDUCE_SUM, UG_REDUCE_MEAN};
    for (int k = 0; k < 3; k++) {
        th_context("%s over rows of %d with NaN and inf", reduce_names[ops[k]], COLS);
        ug_tensor *out = NULL;
        if (!CHECK_STATUS(ug_reduce(t, ops[k], 1, false, false, &out), UG_OK))
            continue;
        th_track(out);
        double *got = th_download(out), want[ROWS];
        ref_reduce((ref_reduce_op)ops[k], 2, shape, x, 1, false, want);
        REQUIRE(got);
        CHECK_MSG(isnan(got[0]) && isnan(got[1]), "rows with NaN gave %g and %g", got[0], got[1]);
        CHECK_MSG(isinf(got[2]) && got[2] > 0, "the row with +inf gave %g", got[2]);
        th_compare(reduce_names[ops[k]], got + 3, want + 3, 1, 1e-5);
    }
    th_release(t);
}

/* Reductions over 2^24 and more elements. */
static void test_reduce_large(ug_device *dev)
{
    const int64_t big = (int64_t)1 << 24;
    /* The sum of 2^24 ones is exactly 16777216, and their mean exactly 1. */
    {
        th_context("2^24 ones");
        ug_tensor *t = NULL, *s = NULL, *m = NULL;
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, &big, &t));
        th_track(t);
        REQUIRE_OK(ug_fill(t, 1.0f));
        if (CHECK_STATUS(ug_sum_all(t, &s), UG_OK)) {
            th_track(s);
            double *v = th_download(s);
            CHECK_MSG(v && v[0] == 16777216.0, "sum of 2^24 ones is %.9g", v ? v[0] : NAN);
        }
        if (CHECK_STATUS(ug_mean_all(t, &m), UG_OK)) {
            th_track(m);
            double *v = th_download(m);
            CHECK_MSG(v && v[0] == 1.0, "mean of 2^24 ones is %.9g", v ? v[0] : NAN);
        }
        th_release(t);
    }
    /* 2^24 copies of 0.1f: a serial f32 sum stalls near 2^21. */
    {
        th_context("2^24 x 0.1f");
        ug_tensor *t = NULL, *s = NULL;
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, &big, &t));
        th_track(t);
        REQUIRE_OK(ug_fill(t, 0.1f));
        if (CHECK_STATUS(ug_sum_all(t, &s), UG_OK)) {
            th_track(s);
            double want = (double)0.1f * (double)big;
            th_compare("sum of 0.1f", th_download(s), &want, 1, TOL_BIG_SUM);
        }
        th_release(t);
    }
    /* Random data, 2^24 + 3 elements, every op. */
    double *x = th_random_values(big + 3, 0, 1);
    {
        int64_t n = big + 3;
        th_round_to(UG_F32, x, n);
        x[n - 7] = 5.0; /* the maximum, twice: argmax is the first */
        x[n - 2] = 5.0;
        x[12345] = -3.0;
        ug_tensor *t = th_tensor(dev, UG_F32, 1, &n, x);
        REQUIRE(t);
        for (int op = 0; op <= UG_REDUCE_SUMSQ; op++) {
            th_context("%s of 2^24+3 uniform values", reduce_names[op]);
            ug_tensor *out = NULL;
            if (!CHECK_STATUS(ug_reduce(t, (ug_reduce_op)op, 0, true, false, &out), UG_OK))
                continue;
            th_track(out);
            double want;
            ref_reduce((ref_reduce_op)op, 1, &n, x, 0, true, &want);
            double *got = th_download(out);
            th_compare(reduce_names[op], got, &want, 1,
                       op == UG_REDUCE_MAX || op == UG_REDUCE_ARGMAX ? 0.0 : TOL_BIG_SUM);
        }
        th_release(t);
    }
    /* Along an axis: [4097, 4096] over axis 0 (strided) and [4, 2^22] over
     * axis 1 (long rows). */
    {
        th_context("[4097,4096] ones over axis 0");
        int64_t shape[] = {4097, 4096};
        ug_tensor *t = NULL, *s = NULL;
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, shape, &t));
        th_track(t);
        REQUIRE_OK(ug_fill(t, 1.0f));
        if (CHECK_STATUS(ug_sum(t, 0, &s), UG_OK)) {
            th_track(s);
            double *v = th_download(s);
            int bad = 0;
            for (int64_t i = 0; v && i < 4096; i++)
                bad += v[i] != 4097.0;
            CHECK_MSG(v && bad == 0, "%d column sums differ from 4097 (first: %g)", bad,
                      v ? v[0] : NAN);
        }
        th_release(t);
    }
    {
        th_context("[4, 2^22] uniform over axis 1");
        int64_t shape[] = {4, (int64_t)1 << 22};
        ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, x); /* the first 2^24 values again */
        REQUIRE(t);
        ug_tensor *s = NULL;
        if (CHECK_STATUS(ug_reduce(t, UG_REDUCE_SUM, 1, false, false, &s), UG_OK)) {
            th_track(s);
            double want[4];
            ref_reduce(REF_RSUM, 2, shape, x, 1, false, want);
            th_compare("row sums", th_download(s), want, 4, TOL_BIG_SUM);
        }
        th_release(t);
    }
}

/* Reducing an empty axis-other-than-reduced gives an empty result. */
static void test_reduce_zero_size(ug_device *dev)
{
    int64_t shape[] = {0, 5}, want_shape[] = {0};
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, NULL);
    REQUIRE(t);
    for (int op = 0; op <= UG_REDUCE_SUMSQ; op++) {
        th_context("%s of [0,5] over axis 1", reduce_names[op]);
        ug_tensor *out = NULL;
        if (CHECK_STATUS(ug_reduce(t, (ug_reduce_op)op, 1, false, false, &out), UG_OK)) {
            th_track(out);
            th_check_tensor(out, op == UG_REDUCE_ARGMAX ? UG_I32 : UG_F32, 1, want_shape);
        }
    }
}

static bool check_softmax(ug_device *dev, bool log_form, ug_dtype dt, int ndim,
                          const int64_t *shape, double *x, bool guarded)
{
    char s1[128];
    th_context("%s %s %s%s", log_form ? "log_softmax" : "softmax", ug_dtype_name(dt),
               th_shape_str(ndim, shape, s1, sizeof s1), guarded ? ", guarded view" : "");
    int before = th_failures();
    int64_t n = ref_numel(ndim, shape), cols = shape[ndim - 1];
    th_round_to(dt, x, n);
    th_guard *g = NULL;
    ug_tensor *tx = guarded ? th_guarded(dev, dt, ndim, shape, x, &g)
                            : th_tensor(dev, dt, ndim, shape, x);
    if (!tx)
        return false;
    double *want = th_alloc((size_t)n * sizeof *want);
    ref_softmax(x, want, n / cols, cols, log_form);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status s = log_form ? ug_log_softmax(tx, &out) : ug_softmax(tx, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK))
        return false;
    if (th_check_tensor(out, dt, ndim, shape))
        th_compare(log_form ? "log_softmax" : "softmax", th_download(out), want, n, th_tol(dt));
    th_guard_check(g);
    return th_failures() == before;
}

static void test_softmax(ug_device *dev)
{
    static const struct {
        int ndim;
        int64_t shape[3];
    } cases[] = {{2, {1, 1}}, {2, {7, 1}}, {2, {3, 17}}, {2, {5, 1000}}, {3, {2, 3, 4097}},
                 {1, {65537}}, {3, {4, 1, 33}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int k = 0; k < 2; k++) {
            for (int lf = 0; lf < 2; lf++) {
                ug_dtype dt = k ? UG_F16 : UG_F32;
                int64_t n = ref_numel(cases[c].ndim, cases[c].shape);
                double *x = th_random_values(n, -8, 8);
                if (!check_softmax(dev, lf != 0, dt, cases[c].ndim, cases[c].shape, x,
                                   (c + (size_t)k) % 2 == 0))
                    return;
            }
        }
    }
}

/* Stability and special values: logits near 1000 (exp overflows unless the
 * row maximum is subtracted), -inf logits (probability 0, log-prob -inf). */
static void test_softmax_special(ug_device *dev)
{
    int64_t shape[] = {3, 5};
    const double ninf = -INFINITY;
    for (int lf = 0; lf < 2; lf++) {
        double x[] = {1000, 1001, 999, 1000.5, 998,
                      -1000, -1001, -999, -1000.5, -998,
                      ninf, 0, ninf, 1, 2};
        if (!check_softmax(dev, lf != 0, UG_F32, 2, shape, x, false))
            return;
        double y[] = {80, 85, 70, 88, 60, 1, 2, 3, 4, 5, ninf, ninf, ninf, ninf, 0};
        if (!check_softmax(dev, lf != 0, UG_F16, 2, shape, y, false))
            return;
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(reduce_axes),
        TH_DEVICE_TEST(reduce_all),
        TH_DEVICE_TEST(reduce_wrappers),
        TH_DEVICE_TEST(argmax_ties),
        TH_DEVICE_TEST(reduce_special_in_long_rows),
        TH_DEVICE_TEST(reduce_large),
        TH_DEVICE_TEST(reduce_zero_size),
        TH_DEVICE_TEST(softmax),
        TH_DEVICE_TEST(softmax_special),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
