/* Element-wise kernels (kernels/hip/elementwise.hip): unary with strides
 * and casts, binary with broadcasting, backward helpers and fused
 * activations; and the emulator's own f16 conversions, first, since the
 * f16 results of every kernel go through them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_control.h"
#include "emu_test.h"

/* ---- the emulator's f16 conversions against the suite's converter ---- */

static bool same_f16(float f)
{
    return ug_emu_f32_to_f16(f) == ref_f16_bits((double)f);
}

void test_f16_conversion(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const double want = ref_f16_value((uint16_t)h);
        const float f = ug_emu_f16_to_f32((uint16_t)h);
        if (isnan(want) ? !isnan(f) : ((double)f != want || !signbit(f) != !signbit(want))) {
            if (bad++ < 3)
                emu_fail(__FILE__, __LINE__, "f16 0x%04x decodes to %g, expected %g", h, f, want);
            continue;
        }
        if (isnan(want))
            continue;
        /* Every half survives the round trip; midpoints to the next half
         * (ties to even) and the floats either side round as the reference. */
        if (ug_emu_f32_to_f16(f) != h && bad++ < 3)
            emu_fail(__FILE__, __LINE__, "f16 0x%04x does not survive f32 and back", h);
        if ((h & 0x7fffu) < 0x7c00u) {
            const double next = ref_f16_value((uint16_t)(h + 1));
            const float mid = isinf(next) ? copysignf(65520.0f, f) : (float)((want + next) / 2);
            const float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 2 * mid)};
            for (int p = 0; p < 3; p++)
                if (!same_f16(probes[p]) && bad++ < 3)
                    emu_fail(__FILE__, __LINE__, "%.9g converts to 0x%04x, expected 0x%04x",
                             probes[p], ug_emu_f32_to_f16(probes[p]), ref_f16_bits(probes[p]));
        }
    }
    /* Floats of every magnitude, f32 subnormals and the special values. */
    for (int i = 0; i < 200000; i++) {
        const float f = (float)(ldexp(emu_uniform(1.0, 2.0), (int)emu_uniform(-150, 20)) *
                                (i % 2 ? -1.0 : 1.0));
        if (!same_f16(f) && bad++ < 3)
            emu_fail(__FILE__, __LINE__, "%.9g converts to 0x%04x, expected 0x%04x", f,
                     ug_emu_f32_to_f16(f), ref_f16_bits(f));
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, 65504.0f, 65519.99f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        EMU_CHECK(same_f16(special[i]), "%g converts to 0x%04x", special[i],
                  ug_emu_f32_to_f16(special[i]));
    EMU_CHECK(isnan(ug_emu_f16_to_f32(ug_emu_f32_to_f16(NAN))), "NaN must stay NaN");
}

/* ---- unary ---- */

static const ref_unary_op g_ref_unary[UG_UNARY_COUNT] = {
    [UG_UNARY_NEG] = REF_NEG,   [UG_UNARY_ABS] = REF_ABS,         [UG_UNARY_EXP] = REF_EXP,
    [UG_UNARY_LOG] = REF_LOG,   [UG_UNARY_SQRT] = REF_SQRT,       [UG_UNARY_RELU] = REF_RELU,
    [UG_UNARY_SIGMOID] = REF_SIGMOID, [UG_UNARY_TANH] = REF_TANH, [UG_UNARY_GELU] = REF_GELU,
    [UG_UNARY_SILU] = REF_SILU,
};

/* backend.h's definition; the suite's reference where it has the op. */
static double unary_ref(ug_unary_kind op, double x, double alpha, double beta)
{
    double y;
    switch (op) {
    case UG_UNARY_COPY: return x;
    case UG_UNARY_SCALE_SHIFT: ref_scale_shift(&x, &y, 1, alpha, beta); return y;
    case UG_UNARY_FILL: return beta;
    case UG_UNARY_SQUARE: return x * x;
    case UG_UNARY_RECIPROCAL: return 1.0 / x;
    case UG_UNARY_CLAMP: return isnan(x) ? x : x < alpha ? alpha : x > beta ? beta : x;
    default: return ref_unary_scalar(g_ref_unary[op], x);
    }
}

/* The op's domain, wide enough to saturate (tanh, sigmoid of +-60). */
static void unary_range(ug_unary_kind op, double *lo, double *hi)
{
    *lo = -10;
    *hi = 10;
    if (op == UG_UNARY_LOG) *lo = 1e-3, *hi = 100;
    if (op == UG_UNARY_SQRT) *lo = 0, *hi = 100;
    if (op == UG_UNARY_TANH || op == UG_UNARY_SIGMOID || op == UG_UNARY_SILU) *lo = -60, *hi = 60;
    if (op == UG_UNARY_GELU) *lo = -6, *hi = 6;
}

/* y = op(x) over n contiguous elements; the output, or NULL. */
static double *run_unary(ug_unary_kind op, ug_dtype xt, ug_dtype yt, const double *x, int64_t n,
                         float alpha, float beta)
{
    ug_kview xv = emu_upload(xt, x, n), yv = emu_upload(yt, NULL, n);
    ug_unary_args a;
    memset(&a, 0, sizeof a);
    a.op = op;
    a.alpha = alpha;
    a.beta = beta;
    a.x = xv;
    a.y = yv;
    a.ndim = 1;
    a.shape[0] = n;
    a.x_strides[0] = 1;
    if (op == UG_UNARY_FILL)
        a.x.mem = NULL; /* FILL does not read x */
    if (!EMU_OK(emu_backend->unary(emu_dev, &a)))
        return NULL;
    if (!emu_guards_intact(xv, n) || !emu_guards_intact(yv, n))
        return NULL;
    return emu_download(yv, n);
}

static bool check_unary(ug_unary_kind op, ug_dtype xt, ug_dtype yt, const double *x0, int64_t n)
{
    const float alpha = -0.75f, beta = 1.25f; /* scale-shift, clamp bounds, fill value */
    double *x = emu_alloc((size_t)n * sizeof *x), *want = emu_alloc((size_t)n * sizeof *want);
    memcpy(x, x0, (size_t)n * sizeof *x);
    emu_round_to(xt, x, n);
    for (int64_t i = 0; i < n; i++)
        want[i] = unary_ref(op, x[i], alpha, beta);
    emu_round_to(yt, want, n); /* as stored (as tests/test_elementwise.c) */
    const double *got = run_unary(op, xt, yt, x, n, alpha, beta);
    return got && EMU_COMPARE("unary", got, want, n, th_tol(yt));
}

void test_unary_ops(void)
{
    static const int64_t sizes[] = {1, 255, 256, 257, 3001};
    static const ug_dtype types[][2] = {
        {UG_F32, UG_F32}, {UG_F16, UG_F16}, {UG_F32, UG_F16}, {UG_F16, UG_F32}};
    for (int op = 0; op < UG_UNARY_COUNT; op++)
        for (int t = 0; t < 4; t++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                emu_context("op %d, dtype %d -> %d, %lld elements", op, (int)types[t][0],
                            (int)types[t][1], (long long)sizes[s]);
                double lo, hi;
                unary_range((ug_unary_kind)op, &lo, &hi);
                const double *x = emu_random_values(sizes[s], lo, hi);
                if (!check_unary((ug_unary_kind)op, types[t][0], types[t][1], x, sizes[s]))
                    return;
            }
}

/* IEEE special values where the answer is fixed, as tests/test_elementwise.c;
 * and the module's conventions: relu and clamp keep NaN (as PyTorch). */
void test_unary_special_values(void)
{
    const double common[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0, 50.0, -50.0, 12.0, 1e-30};
    for (int k = 0; k < 2; k++) {
        const ug_dtype t = k ? UG_F16 : UG_F32;
        for (int op = UG_UNARY_NEG; op <= UG_UNARY_GELU; op++) {
            double x[16];
            int64_t n = 0;
            for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
                if (op == UG_UNARY_RELU && isnan(common[i]))
                    continue;
                if (op == UG_UNARY_GELU && isinf(common[i]) && common[i] < 0)
                    continue;
                x[n++] = common[i];
            }
            if (op == UG_UNARY_LOG || op == UG_UNARY_SQRT)
                x[n++] = -1.0;
            if (op == UG_UNARY_EXP)
                x[n++] = 100.0;
            emu_context("op %d, dtype %d", op, (int)t);
            if (!check_unary((ug_unary_kind)op, t, t, x, n))
                return;
        }
    }
    emu_context("NaN conventions");
    const double x[] = {NAN, -1.0, 2.0};
    const double *relu = run_unary(UG_UNARY_RELU, UG_F32, UG_F32, x, 3, 0, 0);
    const double *clamp = run_unary(UG_UNARY_CLAMP, UG_F32, UG_F32, x, 3, -0.5f, 0.5f);
    EMU_CHECK(relu && isnan(relu[0]) && relu[1] == 0.0 && relu[2] == 2.0, "relu(NaN) must be NaN");
    EMU_CHECK(clamp && isnan(clamp[0]) && clamp[1] == -0.5 && clamp[2] == 0.5,
              "clamp(NaN) must be NaN");
}

/* x read through strides into a contiguous y: transpose, expand, an 8-D
 * permutation, negative strides (which take the 64-bit index path), and
 * more elements than one grid covers (the grid-stride loop). */
void test_unary_strided(void)
{
    static const struct {
        int ndim;
        int64_t shape[8], strides[8], first; /* first: x's element for y[0] */
    } cases[] = {
        {2, {5, 3}, {1, 5}, 0},                                 /* [3,5] transposed */
        {2, {4, 3}, {0, 1}, 0},                                 /* [3] expanded to [4,3] */
        {3, {2, 1, 7}, {7, 0, 1}, 0},                           /* a size-1 axis */
        {8, {2, 3, 1, 2, 3, 1, 2, 2}, {1, 2, 6, 6, 12, 36, 36, 72}, 0}, /* 8-D, reversed axes */
        {1, {300}, {-1}, 299},                                  /* reversed */
        {2, {4, 3}, {-3, 1}, 9},                                /* rows flipped */
        {2, {3, 70}, {-70, -1}, 209},                           /* both flipped */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = 1, span = 1; /* y elements; x elements (max offset + 1) */
        for (int d = 0; d < cases[c].ndim; d++) {
            n *= cases[c].shape[d];
            span += (cases[c].shape[d] - 1) * llabs(cases[c].strides[d]);
        }
        /* neg (arithmetic path), copy (bits moved), copy to the other
         * float dtype (the cast), from f32 and from f16. */
        for (int v = 0; v < 6; v++) {
            const ug_dtype t = v % 2 ? UG_F16 : UG_F32;
            const ug_dtype yt = v >= 4 ? (t == UG_F16 ? UG_F32 : UG_F16) : t;
            const ug_unary_kind op = v < 2 ? UG_UNARY_NEG : UG_UNARY_COPY;
            emu_context("case %zu, op %d, dtype %d -> %d", c, (int)op, (int)t, (int)yt);
            double *x = emu_random_values(span, -4, 4), *want = emu_alloc((size_t)n * 8);
            emu_round_to(t, x, span);
            for (int64_t i = 0; i < n; i++) {
                int64_t rest = i, off = cases[c].first;
                for (int d = cases[c].ndim - 1; d >= 0; d--) {
                    off += rest % cases[c].shape[d] * cases[c].strides[d];
                    rest /= cases[c].shape[d];
                }
                want[i] = op == UG_UNARY_NEG ? -x[off] : x[off];
            }
            emu_round_to(yt, want, n);
            ug_kview xv = emu_upload(t, x, span), yv = emu_upload(yt, NULL, n);
            ug_unary_args a;
            memset(&a, 0, sizeof a);
            a.op = op;
            a.x = xv;
            a.x.offset += cases[c].first;
            a.y = yv;
            a.ndim = cases[c].ndim;
            memcpy(a.shape, cases[c].shape, sizeof a.shape);
            memcpy(a.x_strides, cases[c].strides, sizeof a.x_strides);
            if (!EMU_OK(emu_backend->unary(emu_dev, &a)) || !emu_guards_intact(xv, span) ||
                !emu_guards_intact(yv, n))
                return;
            if (!EMU_COMPARE("strided", emu_download(yv, n), want, n, 0.0))
                return;
        }
    }
    /* More elements than 65535 blocks of 256 threads: u8 -> f16, checked
     * bit for bit (small types keep this affordable). */
    emu_context("grid-stride loop");
    const int64_t n = 65535LL * 256 + 777;
    uint8_t *x = emu_alloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint8_t)(i % 251);
    ug_kview xv = emu_upload_raw(UG_U8, x, n), yv = emu_upload(UG_F16, NULL, n);
    ug_unary_args a;
    memset(&a, 0, sizeof a);
    a.op = UG_UNARY_COPY;
    a.x = xv;
    a.y = yv;
    a.ndim = 1;
    a.shape[0] = n;
    a.x_strides[0] = 1;
    if (!EMU_OK(emu_backend->unary(emu_dev, &a)) || !emu_guards_intact(yv, n))
        return;
    const uint16_t *y = emu_download_raw(yv, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += y[i] != ref_f16_bits((double)(i % 251));
    EMU_CHECK(bad == 0, "%lld of %lld elements wrong", (long long)bad, (long long)n);
}

/* COPY between dtypes is the cast; with equal dtypes it moves the bits. */
void test_unary_casts(void)
{
    const double f[] = {1.0,  -2.5,  65504.0, 65520.0, 70000.0,
                        1e-8, -3e-5, 0.1,     2049.0,  1.0009765625};
    const int64_t nf = (int64_t)(sizeof f / sizeof f[0]);
    const int32_t iv[] = {(1 << 30) + 1, -7, 16777217, 0, 65519, -100000};
    const uint8_t uv[] = {0, 1, 127, 200, 255};
    const uint16_t hv[] = {0x3c00, 0x7e5b, 0xfd01, 0x0001, 0x8000, 0x7bff}; /* NaN payloads kept */

    emu_context("f32 -> f16 rounds to nearest even, overflows to inf");
    ug_kview xv = emu_upload(UG_F32, f, nf), yv = emu_upload(UG_F16, NULL, nf);
    ug_unary_args a;
    memset(&a, 0, sizeof a);
    a.op = UG_UNARY_COPY;
    a.ndim = 1;
    a.x_strides[0] = 1;
    a.x = xv;
    a.y = yv;
    a.shape[0] = nf;
    if (EMU_OK(emu_backend->unary(emu_dev, &a))) {
        uint16_t want[16];
        for (int64_t i = 0; i < nf; i++)
            want[i] = ref_f16_bits((float)f[i]);
        EMU_COMPARE_BITS("f32 -> f16", emu_download_raw(yv, nf), want, nf, 2);
    }

    emu_context("i32 -> f32 and f16, u8 -> f32 and f16");
    const struct {
        ug_dtype xt;
        const void *raw;
        int64_t n;
    } ins[] = {{UG_I32, iv, 6}, {UG_U8, uv, 5}};
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < 2; o++) {
            const ug_dtype yt = o ? UG_F16 : UG_F32;
            const int64_t n = ins[k].n;
            xv = emu_upload_raw(ins[k].xt, ins[k].raw, n);
            yv = emu_upload(yt, NULL, n);
            a.x = xv;
            a.y = yv;
            a.shape[0] = n;
            if (!EMU_OK(emu_backend->unary(emu_dev, &a)))
                return;
            const void *got = emu_download_raw(yv, n);
            for (int64_t i = 0; i < n; i++) {
                const double v = ins[k].xt == UG_I32 ? ((const int32_t *)ins[k].raw)[i]
                                                     : ((const uint8_t *)ins[k].raw)[i];
                const float fv = (float)v; /* the conversion a C cast does */
                const bool same = yt == UG_F32 ? memcmp((const float *)got + i, &fv, 4) == 0
                                               : ((const uint16_t *)got)[i] == ref_f16_bits(fv);
                EMU_CHECK(same, "element %lld of dtype %d -> %d", (long long)i, (int)ins[k].xt,
                          (int)yt);
            }
        }
    }

    emu_context("same dtype: the bits move unchanged");
    const struct {
        ug_dtype t;
        const void *raw;
        int64_t n;
    } same[] = {{UG_I32, iv, 6}, {UG_U8, uv, 5}, {UG_F16, hv, 6}};
    for (int k = 0; k < 3; k++) {
        xv = emu_upload_raw(same[k].t, same[k].raw, same[k].n);
        yv = emu_upload(same[k].t, NULL, same[k].n);
        a.x = xv;
        a.y = yv;
        a.shape[0] = same[k].n;
        if (EMU_OK(emu_backend->unary(emu_dev, &a)))
            EMU_COMPARE_BITS("copy", emu_download_raw(yv, same[k].n), same[k].raw, same[k].n,
                             emu_dtype_size(same[k].t));
    }

    emu_context("an op on integer input computes in f32");
    const double ints[] = {-7, 0, 3, 100000};
    xv = emu_upload(UG_I32, ints, 4);
    yv = emu_upload(UG_F32, NULL, 4);
    a.op = UG_UNARY_SQUARE;
    a.x = xv;
    a.y = yv;
    a.shape[0] = 4;
    if (EMU_OK(emu_backend->unary(emu_dev, &a))) {
        const double want[] = {49, 0, 9, 1e10};
        EMU_COMPARE("square of i32", emu_download(yv, 4), want, 4, TH_TOL_F32);
    }
}

/* ---- binary ---- */

static const ref_binary_op g_ref_binary[] = {
    [UG_BINARY_ADD] = REF_ADD, [UG_BINARY_SUB] = REF_SUB,         [UG_BINARY_MUL] = REF_MUL,
    [UG_BINARY_DIV] = REF_DIV, [UG_BINARY_MAXIMUM] = REF_MAXIMUM, [UG_BINARY_MINIMUM] = REF_MINIMUM,
};

/* Strides (0 on broadcast axes) of a contiguous operand of n dims, right-
 * aligned to an output of nout dims. */
static void broadcast_strides(int nout, int n, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = nout - 1; i >= 0; i--) {
        const int j = n - nout + i;
        strides[i] = j >= 0 && shape[j] != 1 ? s : 0;
        if (j >= 0)
            s *= shape[j];
    }
}

/* y = post(a op b) with broadcasting; the output (broadcast shape), or NULL. */
static double *run_binary(ug_binary_kind op, ug_unary_kind post, float alpha, ug_dtype t, int na,
                          const int64_t *sa, const double *a, int nb, const int64_t *sb,
                          const double *b, int64_t *n_out)
{
    ug_binary_args args;
    memset(&args, 0, sizeof args);
    if (!ref_broadcast_shape(na, sa, nb, sb, &args.ndim, args.shape)) {
        emu_fail(__FILE__, __LINE__, "test shapes do not broadcast");
        return NULL;
    }
    const int64_t n = ref_numel(args.ndim, args.shape), nav = ref_numel(na, sa),
                  nbv = ref_numel(nb, sb);
    broadcast_strides(args.ndim, na, sa, args.a_strides);
    broadcast_strides(args.ndim, nb, sb, args.b_strides);
    args.op = op;
    args.post = post;
    args.alpha = alpha;
    args.a = emu_upload(t, a, nav);
    args.b = emu_upload(t, b, nbv);
    args.y = emu_upload(t, NULL, n);
    *n_out = n;
    if (!EMU_OK(emu_backend->binary(emu_dev, &args)) || !emu_guards_intact(args.a, nav) ||
        !emu_guards_intact(args.b, nbv) || !emu_guards_intact(args.y, n))
        return NULL;
    return emu_download(args.y, n);
}

void test_binary_broadcast(void)
{
    static const struct {
        int na, nb;
        int64_t sa[8], sb[8];
    } cases[] = {
        {1, 1, {257}, {257}},
        {2, 1, {4, 3}, {3}},
        {3, 2, {2, 1, 5}, {3, 1}},
        {1, 2, {1}, {7, 5}},
        {3, 3, {6, 1, 40}, {6, 3, 1}},
        {8, 8, {2, 1, 2, 1, 2, 1, 2, 3}, {1, 2, 1, 2, 1, 2, 1, 3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int op = UG_BINARY_ADD; op <= UG_BINARY_MINIMUM; op++)
            for (int k = 0; k < 2; k++) {
                const ug_dtype t = k ? UG_F16 : UG_F32;
                emu_context("case %zu, op %d, dtype %d", c, op, (int)t);
                const int64_t nav = ref_numel(cases[c].na, cases[c].sa),
                              nbv = ref_numel(cases[c].nb, cases[c].sb);
                double *a = emu_random_values(nav, -2, 2), *b = emu_random_values(nbv, 0.25, 2);
                for (int64_t i = 0; i < nbv; i += 2)
                    b[i] = -b[i]; /* both signs, away from 0 (div) */
                emu_round_to(t, a, nav);
                emu_round_to(t, b, nbv);
                int64_t n;
                const double *got = run_binary((ug_binary_kind)op, UG_UNARY_COPY, 0, t,
                                               cases[c].na, cases[c].sa, a, cases[c].nb,
                                               cases[c].sb, b, &n);
                if (!got)
                    return;
                double *want = emu_alloc((size_t)n * sizeof *want);
                ref_binary(g_ref_binary[op], cases[c].na, cases[c].sa, a, cases[c].nb,
                           cases[c].sb, b, want);
                emu_round_to(t, want, n);
                if (!EMU_COMPARE("binary", got, want, n, th_tol(t)))
                    return;
            }
}

/* backend.h's definitions of the backward helpers. */
static double binary_ref(ug_binary_kind op, double a, double b, double alpha)
{
    const double pi = 3.14159265358979323846;
    switch (op) {
    case UG_BINARY_RELU_GRAD: return b > 0 ? a : 0.0;
    case UG_BINARY_SIGMOID_GRAD: return a * b * (1 - b);
    case UG_BINARY_TANH_GRAD: return a * (1 - b * b);
    case UG_BINARY_GELU_GRAD:
        return a * (0.5 * (1 + erf(b / sqrt(2.0))) + b * exp(-0.5 * b * b) / sqrt(2 * pi));
    case UG_BINARY_SILU_GRAD: {
        double s = 1 / (1 + exp(-b));
        return a * s * (1 + b * (1 - s));
    }
    case UG_BINARY_ABS_GRAD: return a * ((b > 0) - (b < 0));
    case UG_BINARY_SQRT_GRAD: return 0.5 * a / b;
    case UG_BINARY_GE_MASK: return a >= b ? 1.0 : 0.0;
    case UG_BINARY_DROPOUT: return b >= alpha ? a / (1 - alpha) : 0.0;
    default: return ref_binary_scalar(g_ref_binary[op], a, b);
    }
}

/* Every op with every fused activation, b broadcast along rows. */
void test_binary_grads_and_fused(void)
{
    static const ug_unary_kind posts[] = {UG_UNARY_COPY, UG_UNARY_RELU, UG_UNARY_GELU,
                                          UG_UNARY_SIGMOID, UG_UNARY_TANH};
    const int64_t sa[2] = {9, 37}, sb[1] = {37};
    const float alpha = 0.3f; /* dropout probability */
    for (int op = 0; op < UG_BINARY_COUNT; op++)
        for (size_t p = 0; p < sizeof posts / sizeof posts[0]; p++)
            for (int k = 0; k < 2; k++) {
                const ug_dtype t = k ? UG_F16 : UG_F32;
                emu_context("op %d, post %d, dtype %d", op, (int)posts[p], (int)t);
                double *a = emu_random_values(9 * 37, -2, 2), *b;
                if (op == UG_BINARY_SIGMOID_GRAD || op == UG_BINARY_DROPOUT)
                    b = emu_random_values(37, 0.02, 0.98); /* a sigmoid output; a uniform draw */
                else
                    b = emu_random_values(37, 0.25, 2);
                for (int64_t i = 1; op != UG_BINARY_SQRT_GRAD && i < 37; i += 2)
                    b[i] = -b[i];
                /* Ties at every threshold: b == alpha (dropout), b == 0
                 * (relu, abs), a == b (ge_mask). */
                b[0] = alpha;
                if (op != UG_BINARY_SQRT_GRAD)
                    b[1] = 0.0;
                a[2] = b[2];
                emu_round_to(t, a, 9 * 37);
                emu_round_to(t, b, 37);
                int64_t n;
                const double *got = run_binary((ug_binary_kind)op, posts[p], alpha, t, 2, sa, a,
                                               1, sb, b, &n);
                if (!got)
                    return;
                double *want = emu_alloc((size_t)n * sizeof *want);
                for (int64_t i = 0; i < n; i++) {
                    want[i] = binary_ref((ug_binary_kind)op, a[i], b[i % 37], (float)alpha);
                    if (posts[p] != UG_UNARY_COPY)
                        want[i] = ref_unary_scalar(g_ref_unary[posts[p]], want[i]);
                }
                emu_round_to(t, want, n);
                if (!EMU_COMPARE("binary", got, want, n, th_tol(t)))
                    return;
            }
}

/* NaN on either side of maximum/minimum gives NaN (as PyTorch); y may
 * alias a or b exactly (in-place ops). */
void test_binary_nan_and_alias(void)
{
    const int64_t n = 4;
    const double a[] = {NAN, 1.0, NAN, -2.0}, b[] = {1.0, NAN, NAN, 3.0};
    for (int op = UG_BINARY_ADD; op <= UG_BINARY_MINIMUM; op++) {
        emu_context("op %d", op);
        int64_t m;
        const double *y = run_binary((ug_binary_kind)op, UG_UNARY_COPY, 0, UG_F32, 1, &n, a, 1,
                                     &n, b, &m);
        if (!y)
            return;
        const double want3 = ref_round_f32(ref_binary_scalar(g_ref_binary[op], -2.0, 3.0));
        EMU_CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]) && y[3] == want3,
                  "got %g %g %g %g", y[0], y[1], y[2], y[3]);
    }
    /* relu's gradient masks: a NaN gradient where x <= 0 gives 0 (as PyTorch). */
    emu_context("relu_grad of NaN");
    int64_t m;
    const double g[] = {NAN, NAN, 1.0, NAN}, x[] = {-1.0, 0.0, NAN, 2.0};
    const double *y = run_binary(UG_BINARY_RELU_GRAD, UG_UNARY_COPY, 0, UG_F32, 1, &n, g, 1, &n,
                                 x, &m);
    EMU_CHECK(y && y[0] == 0.0 && y[1] == 0.0 && y[2] == 0.0 && isnan(y[3]),
              "relu_grad gave %g %g %g %g, expected 0 0 0 NaN", y ? y[0] : 0, y ? y[1] : 0,
              y ? y[2] : 0, y ? y[3] : 0);
    for (int k = 0; k < 2; k++) {
        const ug_dtype t = k ? UG_F16 : UG_F32;
        for (int alias_b = 0; alias_b < 2; alias_b++) {
            emu_context("in place, dtype %d, y aliases %s", (int)t, alias_b ? "b" : "a");
            const int64_t len = 1000;
            double *x = emu_random_values(len, -2, 2), *o = emu_random_values(len, -2, 2);
            emu_round_to(t, x, len);
            emu_round_to(t, o, len);
            ug_binary_args args;
            memset(&args, 0, sizeof args);
            args.op = UG_BINARY_SUB;
            args.post = UG_UNARY_COPY;
            args.ndim = 1;
            args.shape[0] = len;
            args.a_strides[0] = args.b_strides[0] = 1;
            ug_kview xv = emu_upload(t, x, len), ov = emu_upload(t, o, len);
            args.a = alias_b ? ov : xv;
            args.b = alias_b ? xv : ov;
            args.y = xv;
            if (!EMU_OK(emu_backend->binary(emu_dev, &args)) || !emu_guards_intact(xv, len))
                return;
            double *want = emu_alloc((size_t)len * sizeof *want);
            for (int64_t i = 0; i < len; i++)
                want[i] = alias_b ? o[i] - x[i] : x[i] - o[i];
            EMU_COMPARE("in place", emu_download(xv, len), want, len, th_tol(t));
        }
    }
}
