/* Conformance of the eager ops other than the elementwise maps (see
 * test_conformance.c): reductions, matmul, softmax, transpose, casts, fill,
 * clone and random numbers, each a table driven through its dtypes and
 * shapes against reference.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"

static const ug_dtype float_dtypes[] = {UG_F32, UG_F16, UG_BF16};
static const ug_dtype all_dtypes[] = {UG_F32, UG_F16, UG_I32, UG_U8, UG_BF16, UG_I64};

unsigned cf_dtype_mask(const ug_dtype *dtypes, int count)
{
    unsigned mask = 0;
    for (int i = 0; i < count; i++)
        mask |= 1u << (unsigned)dtypes[i];
    return mask;
}

/* Reductions, matmul, softmax, fill, random numbers, and the targets of
 * casts all run through float_dtypes below. */
unsigned cf_float_dtype_mask(void) { return cf_dtype_mask(float_dtypes, CF_COUNT(float_dtypes)); }

/* ---- reductions ---- */

static const struct {
    const char *name;
    ug_reduce_op op;
    ref_reduce_op ref;
} reduce_ops[] = {
    {"sum", UG_REDUCE_SUM, REF_RSUM},       {"mean", UG_REDUCE_MEAN, REF_RMEAN},
    {"max", UG_REDUCE_MAX, REF_RMAX},       {"argmax", UG_REDUCE_ARGMAX, REF_RARGMAX},
    {"sumsq", UG_REDUCE_SUMSQ, REF_RSUMSQ},
};

typedef struct reduce_case {
    cf_shape s;
    int axis; /* may be negative */
    bool all, keepdim, guarded;
} reduce_case;

static const reduce_case reduce_cases[] = {
    {{1, {1}}, 0, true, false, false},
    {{1, {7}}, 0, false, false, true},
    {{1, {257}}, -1, false, true, false},
    {{1, {1031}}, 0, true, false, true},
    {{0, {0}}, 0, true, false, false},           /* a scalar */
    {{2, {33, 31}}, 0, false, false, false},
    {{2, {33, 31}}, 1, false, false, true},
    {{2, {33, 31}}, -1, false, true, false},
    {{2, {33, 31}}, 0, true, true, false},
    {{3, {2, 3, 257}}, 1, false, false, false},
    {{3, {2, 3, 257}}, 0, false, true, true},
    {{3, {2, 1031, 1}}, -2, false, false, false},
    {{2, {0, 5}}, 1, false, false, false},       /* nothing to reduce into */
    {{2, {5, 0}}, 1, false, false, false},       /* an empty reduced axis */
    {{1, {0}}, 0, true, false, false},
};

/* The result's shape. */
static cf_shape reduced_shape(const cf_shape *s, int axis, bool all, bool keepdim)
{
    cf_shape o = {0, {0}};
    for (int i = 0; i < s->ndim; i++) {
        if (!all && i != axis)
            o.d[o.ndim++] = s->d[i];
        else if (keepdim)
            o.d[o.ndim++] = 1;
    }
    return o;
}

/* op over x of shape s: the reference (or the error an empty reduced axis
 * must give) against the device. */
static bool check_reduce(ug_device *dev, int op, ug_dtype dt, const cf_shape *s, double *x,
                         int axis, bool all, bool keepdim, bool guarded)
{
    char buf[64];
    th_context("%s %s %s, %s%s%s", reduce_ops[op].name, ug_dtype_name(dt),
               cf_shape_str(s, buf, sizeof buf), all ? "all" : "axis", keepdim ? ", keepdim" : "",
               guarded ? ", guarded view" : "");
    const int before = th_failures();
    th_guard *g = NULL;
    ug_tensor *t = cf_input(dev, dt, s, x, guarded, &g);
    if (!t)
        return false;
    const int a = axis < 0 ? axis + s->ndim : axis;
    const cf_shape o = reduced_shape(s, a, all, keepdim);
    const int64_t len = all ? cf_numel(s) : s->d[a], n = cf_numel(&o);
    const ug_reduce_op rop = reduce_ops[op].op;
    ug_tensor *out = NULL;
    ug_status st = ug_reduce(t, rop, axis, all, keepdim, &out);
    if (len == 0 && n > 0 && (rop == UG_REDUCE_MEAN || rop == UG_REDUCE_MAX || rop == UG_REDUCE_ARGMAX)) {
        th_track(out);
        CHECK_STATUS(st, UG_ERR_SHAPE); /* no mean or maximum of nothing */
        return th_failures() == before;
    }
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    if (len == 0)
        memset(want, 0, (size_t)(n ? n : 1) * sizeof *want); /* sums of nothing */
    else if (n > 0)
        ref_reduce(reduce_ops[op].ref, s->ndim, s->d, x, a, all, want);
    const ug_dtype ot = rop == UG_REDUCE_ARGMAX ? UG_I32 : dt;
    th_round_to(ot, want, n);
    /* max and argmax are exact; sums are f32 trees. */
    const bool exact = rop == UG_REDUCE_MAX || rop == UG_REDUCE_ARGMAX;
    cf_check_result(st, out, ot, &o, want, exact ? 0.0 : th_tol(dt), reduce_ops[op].name);
    th_guard_check(g);
    return th_failures() == before;
}

void test_reduce_ops(ug_device *dev)
{
    for (int op = 0; op < CF_COUNT(reduce_ops); op++)
        for (int k = 0; k < CF_COUNT(float_dtypes); k++)
            for (int c = 0; c < CF_COUNT(reduce_cases); c++) {
                const reduce_case *rc = &reduce_cases[c];
                double *x = cf_values(cf_numel(&rc->s), -2, 2, 0);
                if (!check_reduce(dev, op, float_dtypes[k], &rc->s, x, rc->axis, rc->all,
                                  rc->keepdim, rc->guarded))
                    return;
            }
}

/* NaN and infinities, ties, and rows long enough to be split across
 * blocks: a NaN is the maximum and argmax gives the first NaN (torch.max). */
void test_reduce_special(ug_device *dev)
{
    const cf_shape small = {2, {4, 37}}, big = {2, {2, 70001}};
    for (int op = 0; op < CF_COUNT(reduce_ops); op++)
        for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
            double *x = cf_values(4 * 37, -2, 2, 0);
            x[0 * 37 + 5] = NAN;
            x[1 * 37 + 3] = x[1 * 37 + 30] = NAN;
            x[2 * 37 + 10] = INFINITY;
            x[2 * 37 + 20] = -INFINITY;
            x[3 * 37 + 0] = -INFINITY;
            x[3 * 37 + 8] = x[3 * 37 + 9] = 3.0; /* a tie: argmax 8 */
            for (int axis = 0; axis < 3; axis++) {
                double *copy = th_alloc(4 * 37 * sizeof *copy);
                memcpy(copy, x, 4 * 37 * sizeof *copy);
                if (!check_reduce(dev, op, float_dtypes[k], &small, copy, axis % 2, axis == 2,
                                  false, axis == 1))
                    return;
            }
            double *y = cf_values(2 * 70001, -2, 2, 0);
            y[60000] = y[65000] = 5.0;             /* row 0: argmax 60000 */
            y[70001 + 50000] = NAN;                /* row 1 */
            y[70001 + 69000] = NAN;
            if (!check_reduce(dev, op, float_dtypes[k], &big, y, 1, false, false, false))
                return;
        }
}

/* The shorthands of ug_reduce. */
void test_reduce_wrappers(ug_device *dev)
{
    static const struct {
        const char *name;
        ug_status (*axis_fn)(const ug_tensor *, int, ug_tensor **);
        ug_status (*all_fn)(const ug_tensor *, ug_tensor **);
        int op; /* row of reduce_ops */
    } wrappers[] = {
        {"ug_sum", ug_sum, NULL, 0},         {"ug_mean", ug_mean, NULL, 1},
        {"ug_max", ug_max, NULL, 2},         {"ug_argmax", ug_argmax, NULL, 3},
        {"ug_sum_all", NULL, ug_sum_all, 0}, {"ug_mean_all", NULL, ug_mean_all, 1},
    };
    const cf_shape s = {2, {7, 33}};
    for (int w = 0; w < CF_COUNT(wrappers); w++)
        for (int k = 0; k < CF_COUNT(float_dtypes); k++)
            for (int axis = -2; axis < 2; axis += 3) { /* -2 and 1 */
                const ug_dtype dt = float_dtypes[k];
                th_context("%s %s, axis %d", wrappers[w].name, ug_dtype_name(dt), axis);
                double *x = cf_values(cf_numel(&s), -2, 2, 0);
                th_guard *g = NULL;
                ug_tensor *t = cf_input(dev, dt, &s, x, false, &g);
                REQUIRE(t);
                const bool all = wrappers[w].all_fn != NULL;
                const int a = axis < 0 ? axis + 2 : axis;
                const cf_shape o = reduced_shape(&s, a, all, false);
                double *want = th_alloc((size_t)cf_numel(&o) * sizeof *want);
                const int op = wrappers[w].op;
                ref_reduce(reduce_ops[op].ref, s.ndim, s.d, x, a, all, want);
                const ug_dtype ot = reduce_ops[op].op == UG_REDUCE_ARGMAX ? UG_I32 : dt;
                th_round_to(ot, want, cf_numel(&o));
                ug_tensor *out = NULL;
                ug_status st = all ? wrappers[w].all_fn(t, &out) : wrappers[w].axis_fn(t, axis, &out);
                const bool exact = op == 2 || op == 3;
                cf_check_result(st, out, ot, &o, want, exact ? 0.0 : th_tol(dt), wrappers[w].name);
            }
}

/* ---- matmul ---- */

static const struct {
    cf_shape a, b;
    bool ta, tb, guarded;
} matmul_cases[] = {
    {{2, {1, 1}}, {2, {1, 1}}, false, false, false},
    {{2, {7, 5}}, {2, {5, 3}}, false, false, true},
    {{2, {5, 7}}, {2, {5, 3}}, true, false, false},
    {{2, {7, 5}}, {2, {3, 5}}, false, true, true},
    {{2, {5, 7}}, {2, {3, 5}}, true, true, false},
    {{2, {33, 65}}, {2, {65, 17}}, false, false, false},   /* tile edges */
    {{2, {65, 33}}, {2, {17, 65}}, true, true, true},
    {{2, {1, 257}}, {2, {257, 1}}, false, false, false},   /* a long dot product */
    {{2, {3, 1031}}, {2, {2, 1031}}, false, true, false},
    {{2, {3, 0}}, {2, {0, 4}}, false, false, false},        /* K = 0: zeros */
    {{2, {0, 5}}, {2, {5, 3}}, false, false, false},        /* M = 0: empty */
    {{3, {3, 7, 5}}, {2, {5, 4}}, false, false, true},      /* b shared by the batch */
    {{2, {7, 5}}, {3, {3, 5, 4}}, false, false, false},     /* a shared */
    {{3, {2, 5, 7}}, {3, {2, 4, 5}}, true, true, false},
    {{4, {2, 2, 7, 5}}, {4, {2, 2, 5, 3}}, false, false, true},
};

/* Besides the NMSE, every element must be within the error bound of an f32
 * sum of k products in any order (plus the rounding to f16 or bf16), which catches
 * one misplaced element that the NMSE would average away. */
void test_matmul_ops(ug_device *dev)
{
    for (int c = 0; c < CF_COUNT(matmul_cases); c++)
        for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
            const ug_dtype dt = float_dtypes[k];
            const cf_shape *sa = &matmul_cases[c].a, *sb = &matmul_cases[c].b;
            const bool ta = matmul_cases[c].ta, tb = matmul_cases[c].tb;
            char b1[64], b2[64];
            th_context("matmul %s %s%s x %s%s", ug_dtype_name(dt), cf_shape_str(sa, b1, sizeof b1),
                       ta ? "^T" : "", cf_shape_str(sb, b2, sizeof b2), tb ? "^T" : "");
            const int64_t na = cf_numel(sa), nb = cf_numel(sb);
            double *a = cf_values(na, -1, 1, 0), *b = cf_values(nb, -1, 1, 0);
            th_guard *ga = NULL, *gb = NULL;
            ug_tensor *A = cf_input(dev, dt, sa, a, matmul_cases[c].guarded, &ga);
            ug_tensor *B = cf_input(dev, dt, sb, b, matmul_cases[c].guarded, &gb);
            REQUIRE(A && B);
            cf_shape o;
            /* Elements of the result: batch * m * n. */
            const int64_t m = ta ? sa->d[sa->ndim - 1] : sa->d[sa->ndim - 2];
            const int64_t cols = tb ? sb->d[sb->ndim - 2] : sb->d[sb->ndim - 1];
            const int64_t batch = sa->ndim > 2 ? ref_numel(sa->ndim - 2, sa->d)
                                               : ref_numel(sb->ndim - 2, sb->d);
            const int64_t cap = batch * m * cols + 1;
            double *want = th_alloc((size_t)cap * sizeof *want), *mag = th_alloc((size_t)cap * sizeof *mag);
            double *abs_a = th_alloc((size_t)(na + 1) * sizeof *abs_a), *abs_b = th_alloc((size_t)(nb + 1) * sizeof *abs_b);
            for (int64_t i = 0; i < na; i++)
                abs_a[i] = fabs(a[i]);
            for (int64_t i = 0; i < nb; i++)
                abs_b[i] = fabs(b[i]);
            REQUIRE(ref_matmul(sa->ndim, sa->d, a, sb->ndim, sb->d, b, ta, tb, want, &o.ndim, o.d));
            ref_matmul(sa->ndim, sa->d, abs_a, sb->ndim, sb->d, abs_b, ta, tb, mag, &o.ndim, o.d);
            const int64_t n = cf_numel(&o), kk = ta ? sa->d[sa->ndim - 2] : sa->d[sa->ndim - 1];
            double *exact = th_alloc((size_t)(n + 1) * sizeof *exact);
            memcpy(exact, want, (size_t)n * sizeof *exact);
            th_round_to(dt, want, n);
            ug_tensor *out = NULL;
            ug_status st = ug_matmul(A, B, ta, tb, &out);
            if (cf_check_result(st, out, dt, &o, want, TH_TOL_MATMUL, "matmul")) {
                const double *got = th_download(out);
                int64_t bad = 0, first = 0;
                for (int64_t i = 0; got && i < n; i++) {
                    double bound = (double)(kk + 4) * ldexp(1.0, -23) * mag[i];
                    if (dt == UG_F16)
                        bound += ldexp(1.0, -11) * fabs(exact[i]) + ldexp(1.0, -24);
                    else if (dt == UG_BF16)
                        bound += ldexp(1.0, -8) * fabs(exact[i]) + ldexp(1.0, -133);
                    if (!(fabs(got[i] - exact[i]) <= bound) && bad++ == 0)
                        first = i;
                }
                CHECK_MSG(bad == 0, "%lld of %lld elements beyond the error bound of the sum; "
                          "element %lld is %.9g, exactly %.9g", (long long)bad, (long long)n,
                          (long long)first, got ? got[first] : 0.0, exact[first]);
            }
            th_guard_check(ga);
            th_guard_check(gb);
            if (th_failures())
                return;
        }
}

/* ---- softmax and log-softmax over the last axis ---- */

static const struct {
    const char *name;
    ug_status (*fn)(const ug_tensor *, ug_tensor **);
    bool log;
} softmax_ops[] = {{"softmax", ug_softmax, false}, {"log_softmax", ug_log_softmax, true}};

static bool check_softmax(ug_device *dev, int op, ug_dtype dt, const cf_shape *s, double *x,
                          bool guarded)
{
    char buf[64];
    th_context("%s %s %s%s", softmax_ops[op].name, ug_dtype_name(dt),
               cf_shape_str(s, buf, sizeof buf), guarded ? ", guarded view" : "");
    const int before = th_failures();
    th_guard *g = NULL;
    ug_tensor *t = cf_input(dev, dt, s, x, guarded, &g);
    if (!t)
        return false;
    const int64_t n = cf_numel(s), cols = s->ndim ? s->d[s->ndim - 1] : 1;
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    if (n > 0)
        ref_softmax(x, want, n / cols, cols, softmax_ops[op].log);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status st = softmax_ops[op].fn(t, &out);
    cf_check_result(st, out, dt, s, want, th_tol(dt), softmax_ops[op].name);
    th_guard_check(g);
    return th_failures() == before;
}

void test_softmax_ops(ug_device *dev)
{
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {
        {{2, {1, 1}}, false},      {{1, {5}}, true},       {{2, {7, 257}}, true},
        {{2, {3, 1031}}, false},   {{3, {2, 3, 7}}, false}, {{2, {0, 5}}, false},
    };
    for (int op = 0; op < CF_COUNT(softmax_ops); op++)
        for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
            for (int c = 0; c < CF_COUNT(cases); c++) {
                double *x = cf_values(cf_numel(&cases[c].s), -8, 8, 0);
                if (!check_softmax(dev, op, float_dtypes[k], &cases[c].s, x, cases[c].guarded))
                    return;
            }
            /* A row holding NaN is NaN (torch.softmax); -inf is a masked
             * entry (probability 0); large logits must not overflow exp. */
            const cf_shape s = {2, {4, 6}};
            double x[] = {1, NAN, 2, 3, 0, -1,
                          -INFINITY, 1, 2, -INFINITY, 0.5, 3,
                          100, 101, 99, 100.5, 98, 60,
                          -100, -101, -99, -100.5, -98, -60};
            if (!check_softmax(dev, op, float_dtypes[k], &s, x, false))
                return;
        }
}

/* ---- transpose (any dtype: values move exactly) ---- */

/* Values that dtype holds exactly. */
static double *dtype_values(ug_dtype dt, int64_t n)
{
    switch (dt) {
    case UG_I32: {
        double *v = cf_values(n, -2e9, 2e9, 0);
        for (int64_t i = 0; i < n; i++)
            v[i] = trunc(v[i]);
        return v;
    }
    case UG_I64: { /* past i32's range: the copy moves all eight bytes */
        double *v = cf_values(n, -9e15, 9e15, 0);
        for (int64_t i = 0; i < n; i++)
            v[i] = trunc(v[i]);
        return v;
    }
    case UG_U8: {
        double *v = cf_values(n, 0, 256, 0);
        for (int64_t i = 0; i < n; i++)
            v[i] = floor(v[i]) > 255 ? 255 : floor(v[i]);
        return v;
    }
    default: return cf_values(n, -100, 100, 0);
    }
}

void test_transpose_ops(ug_device *dev)
{
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {
        {{2, {1, 1}}, false},   {{2, {7, 33}}, true},   {{2, {257, 3}}, false},
        {{3, {2, 3, 5}}, true}, {{3, {4, 1, 7}}, false}, {{2, {1, 1031}}, false},
        {{2, {0, 3}}, false},   {{4, {2, 3, 4, 5}}, false},
    };
    for (int k = 0; k < CF_COUNT(all_dtypes); k++)
        for (int c = 0; c < CF_COUNT(cases); c++) {
            const ug_dtype dt = all_dtypes[k];
            const cf_shape *s = &cases[c].s;
            char buf[64];
            th_context("transpose %s %s%s", ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf),
                       cases[c].guarded ? ", guarded view" : "");
            const int64_t n = cf_numel(s);
            double *x = dtype_values(dt, n);
            th_guard *g = NULL;
            ug_tensor *t = cf_input(dev, dt, s, x, cases[c].guarded, &g);
            REQUIRE(t);
            cf_shape o = *s;
            o.d[o.ndim - 2] = s->d[s->ndim - 1];
            o.d[o.ndim - 1] = s->d[s->ndim - 2];
            double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
            if (n > 0)
                ref_transpose(s->ndim, s->d, x, want);
            ug_tensor *out = NULL;
            ug_status st = ug_transpose(t, &out);
            cf_check_result(st, out, dt, &o, want, 0.0, "transpose");
            th_guard_check(g);
            if (th_failures())
                return;
        }
}

/* ---- casts ---- */

/* n values of dtype from: its special values first (ties, subnormals,
 * overflow of f16, NaN, integers past 2^24), then random bit patterns. */
static double *cast_values(ug_dtype from, int64_t n)
{
    static const double f_special[] = {0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, 1e10,
                                       INFINITY, -INFINITY, NAN, 5.9604645e-08, 2.9802322e-08,
                                       1.00048828125, 1.00146484375, 2049.0, -2051.0, 0.1};
    static const double i_special[] = {0, -1, 1, 2049, 2051, 65504, 65519, 65520, -65504,
                                       16777217, -16777217, 2147483647, -2147483648.0, 123456789};
    double *v = th_alloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)(i + 1) * 2654435761u;
        switch (from) {
        case UG_F32: {
            /* Exponents mostly within reach of f16, some beyond. */
            const uint32_t f = (bits & 0x807fffffu) | ((uint32_t)(100 + (i % 52)) << 23);
            float x;
            memcpy(&x, &f, 4);
            v[i] = i < CF_COUNT(f_special) ? f_special[i] : x;
            break;
        }
        case UG_F16: v[i] = ref_f16_value((uint16_t)(bits >> 16)); break;
        case UG_BF16: v[i] = ref_bf16_value((uint16_t)(bits >> 16)); break;
        case UG_I32:
            v[i] = i < CF_COUNT(i_special) ? i_special[i] : (double)((int32_t)bits >> (i % 24));
            break;
        case UG_U8: v[i] = (double)(i % 256); break;
        case UG_I64: /* past f32's and i32's ranges, within a double's exact integers */
            v[i] = i < CF_COUNT(i_special) ? i_special[i] * 4099.0
                                           : (double)((int64_t)(int32_t)bits * (int64_t)(1 + i % 4096));
            break;
        }
    }
    return v;
}

/* Casts go to f32, f16 or bf16 from every dtype, computing in f32 (an i32 is
 * rounded to f32 first), or keep the dtype (a copy of the bits). */
void test_cast_ops(ug_device *dev)
{
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {
        {{1, {1}}, false}, {{1, {257}}, true}, {{1, {1031}}, false}, {{1, {0}}, false},
        {{2, {7, 33}}, true},
    };
    for (int f = 0; f < CF_COUNT(all_dtypes); f++)
        for (int t = 0; t < CF_COUNT(all_dtypes); t++) {
            const ug_dtype from = all_dtypes[f], to = all_dtypes[t];
            if (to != UG_F32 && to != UG_F16 && to != UG_BF16 && to != from)
                continue;
            for (int c = 0; c < CF_COUNT(cases); c++) {
                const cf_shape *s = &cases[c].s;
                char buf[64];
                th_context("cast %s -> %s %s%s", ug_dtype_name(from), ug_dtype_name(to),
                           cf_shape_str(s, buf, sizeof buf), cases[c].guarded ? ", guarded view" : "");
                const int64_t n = cf_numel(s);
                double *x = cast_values(from, n);
                th_guard *g = NULL;
                ug_tensor *in = cf_input(dev, from, s, x, cases[c].guarded, &g);
                REQUIRE(in);
                double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
                for (int64_t i = 0; i < n; i++)
                    want[i] = to == from ? x[i] : ref_round_f32(x[i]);
                th_round_to(to, want, n);
                ug_tensor *out = NULL;
                ug_status st = ug_cast(in, to, &out);
                cf_check_result(st, out, to, s, want, 0.0, "cast");
                th_guard_check(g);
                if (th_failures())
                    return;
            }
        }
    /* Within one float dtype the bits move: NaN payloads survive. */
    for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
        const ug_dtype dt = float_dtypes[k];
        th_context("cast %s -> %s keeps NaN payloads", ug_dtype_name(dt), ug_dtype_name(dt));
        const uint32_t f32[] = {0x7fc00001u, 0xffa5a5a5u, 0x7f800001u, 0x3f800000u};
        const uint16_t f16[] = {0x7e01, 0xfd5a, 0x7c01, 0x3c00}, bf16[] = {0x7fc1, 0xffa5, 0x7f81, 0x3f80};
        const void *bits = dt == UG_F32 ? (const void *)f32 : dt == UG_F16 ? (const void *)f16 : (const void *)bf16;
        const int64_t n = 4;
        ug_tensor *in = NULL, *out = NULL;
        REQUIRE_OK(ug_tensor_from_host(dev, dt, 1, &n, bits, &in));
        th_track(in);
        REQUIRE_OK(ug_cast(in, dt, &out));
        th_track(out);
        th_compare_bits("cast", th_download_raw(out), bits, n, ug_dtype_size(dt));
    }
}

/* ---- fill ---- */

void test_fill_ops(ug_device *dev)
{
    static const double values[] = {0.0, -0.0, 1.5, -3e5, NAN, 1e-8, 65504.0, INFINITY};
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {
        {{1, {1}}, false}, {{1, {257}}, true}, {{0, {0}}, false}, {{1, {0}}, false},
        {{2, {7, 33}}, true}, {{1, {1031}}, false},
    };
    for (int k = 0; k < CF_COUNT(float_dtypes); k++)
        for (int v = 0; v < CF_COUNT(values); v++)
            for (int c = 0; c < CF_COUNT(cases); c++) {
                const ug_dtype dt = float_dtypes[k];
                const cf_shape *s = &cases[c].s;
                char buf[64];
                th_context("fill %s %s with %g%s", ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf),
                           values[v], cases[c].guarded ? ", guarded view" : "");
                th_guard *g = NULL;
                ug_tensor *t = cases[c].guarded ? th_guarded_output(dev, dt, s->ndim, s->d, &g)
                                                : th_tensor(dev, dt, s->ndim, s->d, NULL);
                REQUIRE(t);
                const int64_t n = cf_numel(s);
                double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
                for (int64_t i = 0; i < n; i++)
                    want[i] = ref_round_f32(values[v]); /* the float argument */
                th_round_to(dt, want, n);
                if (CHECK_STATUS(ug_fill(t, (float)values[v]), UG_OK))
                    th_compare("fill", th_download(t), want, n, 0.0);
                th_guard_check_outside(g);
                if (th_failures())
                    return;
            }
}

/* ---- clone: a contiguous copy of the bits ---- */

void test_clone_ops(ug_device *dev)
{
    static const cf_shape shapes[] = {{1, {1}}, {1, {257}}, {2, {7, 33}}, {2, {3, 0}}, {0, {0}}};
    for (int k = 0; k < CF_COUNT(all_dtypes); k++)
        for (int c = 0; c < CF_COUNT(shapes); c++) {
            const ug_dtype dt = all_dtypes[k];
            const cf_shape *s = &shapes[c];
            char buf[64];
            th_context("clone %s %s", ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf));
            const int64_t n = cf_numel(s);
            const size_t es = ug_dtype_size(dt);
            /* Any bits at all (NaNs with payloads included). */
            unsigned char *raw = th_alloc((size_t)n * es + 1);
            for (size_t i = 0; i < (size_t)n * es; i++)
                raw[i] = (unsigned char)(th_uniform(0, 256));
            ug_tensor *t = NULL, *out = NULL;
            REQUIRE_OK(ug_tensor_from_host(dev, dt, s->ndim, s->d, raw, &t));
            th_track(t);
            ug_status st = ug_clone(t, &out);
            th_track(out);
            if (CHECK_STATUS(st, UG_OK) && th_check_tensor(out, dt, s->ndim, s->d))
                th_compare_bits("clone", th_download_raw(out), raw, n, es);
            /* A view at an odd offset, left as it was. */
            th_context("clone of a guarded %s view %s", ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf));
            double *x = dtype_values(dt, n);
            th_guard *g = NULL;
            ug_tensor *v = cf_input(dev, dt, s, x, true, &g);
            REQUIRE(v);
            out = NULL;
            st = ug_clone(v, &out);
            cf_check_result(st, out, dt, s, x, 0.0, "clone");
            th_guard_check(g);
            if (th_failures())
                return;
        }
}

/* ---- random numbers: the reference Philox, on every device ---- */

void test_random_ops(ug_device *dev)
{
    static const struct {
        uint64_t seed, offset;
        float p0, p1;
    } draws[] = {
        {0, 0, 0.0f, 1.0f},
        {0x123456789abcdef0ull, 1000, -2.0f, 2.0f}, /* the key's high word matters */
        {7, 0x00000001fffffff0ull, 0.0f, 1.0f},     /* counters cross 2^32 */
    };
    static const struct {
        cf_shape s;
        bool guarded;
    } cases[] = {{{1, {1}}, false}, {{1, {7}}, true}, {{1, {257}}, false}, {{2, {3, 1031}}, true},
                 {{1, {0}}, false}};
    for (int k = 0; k < CF_COUNT(float_dtypes); k++)
        for (int d = 0; d < CF_COUNT(draws); d++)
            for (int c = 0; c < CF_COUNT(cases); c++)
                for (int normal = 0; normal < 2; normal++) {
                    const ug_dtype dt = float_dtypes[k];
                    const cf_shape *s = &cases[c].s;
                    char buf[64];
                    th_context("%s %s %s, seed 0x%llx offset 0x%llx%s", normal ? "normal" : "uniform",
                               ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf),
                               (unsigned long long)draws[d].seed, (unsigned long long)draws[d].offset,
                               cases[c].guarded ? ", guarded view" : "");
                    th_guard *g = NULL;
                    ug_tensor *t = cases[c].guarded ? th_guarded_output(dev, dt, s->ndim, s->d, &g)
                                                    : th_tensor(dev, dt, s->ndim, s->d, NULL);
                    REQUIRE(t);
                    const int64_t n = cf_numel(s);
                    const uint64_t seed = draws[d].seed, off = draws[d].offset;
                    ug_status st = normal ? ug_random_normal(t, seed, off, draws[d].p0, draws[d].p1)
                                          : ug_random_uniform(t, seed, off, draws[d].p0, draws[d].p1);
                    if (!CHECK_STATUS(st, UG_OK))
                        return;
                    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
                    for (int64_t i = 0; i < n; i++)
                        want[i] = normal ? ref_random_normal(seed, off + (uint64_t)i, draws[d].p0, draws[d].p1)
                                         : ref_random_uniform(seed, off + (uint64_t)i, draws[d].p0, draws[d].p1);
                    /* uniform: low + (high - low) u is exact in f32 on these
                     * ranges, so the draw is the reference bit for bit. */
                    th_round_to(dt, want, n);
                    th_compare(normal ? "normal" : "uniform", th_download(t), want, n,
                               normal ? th_tol(dt) : 0.0);
                    th_guard_check_outside(g);
                    if (th_failures())
                        return;
                }
}
