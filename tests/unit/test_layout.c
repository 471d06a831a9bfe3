/* Layout and type ops: transpose (swap the last two axes) and casts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

static void test_transpose(ug_device *dev)
{
    static const struct {
        int ndim;
        int64_t shape[8];
    } cases[] = {
        {2, {3, 5}},       {3, {2, 3, 4}},   {2, {1, 1}},     {2, {17, 1000}}, {2, {1, 7}},
        {2, {4097, 3}},    {4, {2, 3, 33, 65}}, {8, {2, 1, 2, 1, 2, 1, 3, 5}}, {2, {0, 4}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int k = 0; k < 2; k++) {
            ug_dtype dt = k ? UG_F16 : UG_F32;
            int nd = cases[c].ndim;
            char s1[128];
            bool guarded = c % 2 == 0;
            th_context("%s %s%s", ug_dtype_name(dt), th_shape_str(nd, cases[c].shape, s1, sizeof s1),
                       guarded ? ", guarded view" : "");
            int64_t n = ref_numel(nd, cases[c].shape);
            double *x = th_random_values(n, -100, 100);
            th_round_to(dt, x, n);
            th_guard *g = NULL;
            ug_tensor *t = guarded ? th_guarded(dev, dt, nd, cases[c].shape, x, &g)
                                   : th_tensor(dev, dt, nd, cases[c].shape, x);
            if (!t)
                return;
            int64_t oshape[8];
            memcpy(oshape, cases[c].shape, sizeof oshape);
            oshape[nd - 1] = cases[c].shape[nd - 2];
            oshape[nd - 2] = cases[c].shape[nd - 1];
            double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
            if (n)
                ref_transpose(nd, cases[c].shape, x, want);
            ug_tensor *out = NULL;
            if (!CHECK_STATUS(ug_transpose(t, &out), UG_OK))
                return;
            th_track(out);
            if (th_check_tensor(out, dt, nd, oshape))
                th_compare("transpose", th_download(out), want, n, 0.0); /* a pure copy */
            th_guard_check(g);
        }
    }
}

/* Runs a cast and compares bitwise with the expected raw bytes. */
static void check_cast(ug_device *dev, ug_dtype from, ug_dtype to, const void *src, int64_t n,
                       const void *want, bool guarded)
{
    th_context("cast %s -> %s, %lld elements%s", ug_dtype_name(from), ug_dtype_name(to),
               (long long)n, guarded ? ", guarded view" : "");
    /* Source values as doubles for the tensor helpers. */
    double *v = th_alloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        switch (from) {
        case UG_F32: v[i] = ((const float *)src)[i]; break;
        case UG_F16: v[i] = ref_f16_value(((const uint16_t *)src)[i]); break;
        case UG_I32: v[i] = ((const int32_t *)src)[i]; break;
        case UG_U8: v[i] = ((const uint8_t *)src)[i]; break;
        case UG_BF16: v[i] = ref_bf16_value(((const uint16_t *)src)[i]); break;
        case UG_I64: v[i] = (double)((const int64_t *)src)[i]; break;
        }
    }
    th_guard *g = NULL;
    ug_tensor *t = guarded ? th_guarded(dev, from, 1, &n, v, &g) : th_tensor(dev, from, 1, &n, v);
    if (!t)
        return;
    ug_tensor *out = NULL;
    if (!CHECK_STATUS(ug_cast(t, to, &out), UG_OK))
        return;
    th_track(out);
    if (!th_check_tensor(out, to, 1, &n))
        return;
    void *got = th_download_raw(out);
    if (to == UG_F32 || to == UG_F16 || to == UG_BF16) {
        /* NaN payloads may differ: compare NaN positions, the rest bitwise. */
        size_t es = ug_dtype_size(to);
        for (int64_t i = 0; got && i < n; i++) {
            double gv = to == UG_F32   ? ((float *)got)[i]
                        : to == UG_F16 ? ref_f16_value(((uint16_t *)got)[i])
                                       : ref_bf16_value(((uint16_t *)got)[i]);
            double wv = to == UG_F32   ? ((const float *)want)[i]
                        : to == UG_F16 ? ref_f16_value(((const uint16_t *)want)[i])
                                       : ref_bf16_value(((const uint16_t *)want)[i]);
            if (isnan(gv) && isnan(wv))
                memcpy((unsigned char *)got + (size_t)i * es,
                       (const unsigned char *)want + (size_t)i * es, es);
        }
        th_compare_bits("cast", got, want, n, es);
    }
    th_guard_check(g);
}

static void test_cast_f32_f16(ug_device *dev)
{
    static const int64_t sizes[] = {1, 17, 4097, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *f = th_alloc((size_t)n * 4);
        uint16_t *h = th_alloc((size_t)n * 2);
        /* Special values first, then bit patterns over the whole range
         * (ties, subnormals, overflow), all rounded to nearest even. */
        const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e10f,
                                 INFINITY, -INFINITY, NAN, 5.9604645e-08f, 2.9802322e-08f,
                                 1.00048828125f, 1.00146484375f, 2049.0f, -2051.0f, 0.1f};
        for (int64_t i = 0; i < n; i++) {
            if ((size_t)i < sizeof special / sizeof special[0]) {
                f[i] = special[i];
            } else {
                uint32_t bits = (uint32_t)i * 2654435761u;
                /* Keep the exponent within reach of f16 most of the time. */
                bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (i % 52)) << 23);
                memcpy(&f[i], &bits, 4);
            }
            h[i] = ref_f16_bits(f[i]);
        }
        check_cast(dev, UG_F32, UG_F16, f, n, h, s % 2 == 1);
        /* f16 -> f32 is exact. */
        float *back = th_alloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            back[i] = (float)ref_f16_value(h[i]);
        check_cast(dev, UG_F16, UG_F32, h, n, back, s % 2 == 0);
    }
    /* Every half value converts exactly to f32. */
    int64_t n = 65536;
    uint16_t *all = th_alloc((size_t)n * 2);
    float *want = th_alloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        all[i] = (uint16_t)i;
        want[i] = (float)ref_f16_value((uint16_t)i);
    }
    check_cast(dev, UG_F16, UG_F32, all, n, want, false);
}

/* bf16 casts: from f32 rounded to nearest even (to infinity past the
 * largest finite value; NaN stays NaN), back to f32 exactly, and to and
 * from f16 through f32 with one rounding; integers through f32. */
static void test_cast_bf16(ug_device *dev)
{
    static const int64_t sizes[] = {1, 17, 4097, 65537};
    const float special[] = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie, to 1 */,
                             1.01171875f /* tie, to 1.015625 */, 1.0039063f, 3.3895314e38f,
                             3.4028235e38f, -3.4028235e38f, INFINITY, -INFINITY, NAN, -NAN,
                             1e-40f /* subnormal */, 9.2e-41f, 0.1f, 65504.0f, 1e-8f};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *f = th_alloc((size_t)n * 4), *back = th_alloc((size_t)n * 4);
        uint16_t *b = th_alloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) {
            if ((size_t)i < sizeof special / sizeof special[0]) {
                f[i] = special[i];
            } else {
                uint32_t bits = (uint32_t)i * 2654435761u; /* any pattern: bf16 has f32's range */
                memcpy(&f[i], &bits, 4);
            }
            b[i] = ref_bf16_bits(f[i]);
            back[i] = (float)ref_bf16_value(b[i]);
        }
        check_cast(dev, UG_F32, UG_BF16, f, n, b, s % 2 == 1);
        check_cast(dev, UG_BF16, UG_F32, b, n, back, s % 2 == 0);
    }
    /* Every bf16 value to f32 (exact) and to f16 (one rounding). */
    int64_t n = 65536;
    uint16_t *all = th_alloc((size_t)n * 2), *half = th_alloc((size_t)n * 2);
    float *want = th_alloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        all[i] = (uint16_t)i;
        want[i] = (float)ref_bf16_value((uint16_t)i);
        half[i] = ref_f16_bits(ref_bf16_value((uint16_t)i));
    }
    check_cast(dev, UG_BF16, UG_F32, all, n, want, false);
    check_cast(dev, UG_BF16, UG_F16, all, n, half, true);
    /* Every f16 value to bf16 (one rounding from the exact value). */
    uint16_t *from_half = th_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        from_half[i] = ref_bf16_bits(ref_f16_value((uint16_t)i));
    check_cast(dev, UG_F16, UG_BF16, all, n, from_half, false);
    /* i32 through f32, as PyTorch: bf16(f32(i)); u8 is exact. */
    int64_t m = 4097;
    int32_t *iv = th_alloc((size_t)m * 4);
    uint8_t *uv = th_alloc((size_t)m);
    uint16_t *ib = th_alloc((size_t)m * 2), *ub = th_alloc((size_t)m * 2);
    for (int64_t i = 0; i < m; i++) {
        iv[i] = (int32_t)((uint32_t)i * 2654435761u) >> (i % 24);
        uv[i] = (uint8_t)(i * 37);
        ib[i] = ref_bf16_bits(ref_round_f32((double)iv[i]));
        ub[i] = ref_bf16_bits((double)uv[i]);
    }
    check_cast(dev, UG_I32, UG_BF16, iv, m, ib, true);
    check_cast(dev, UG_U8, UG_BF16, uv, m, ub, false);
}

static void test_cast_integers(ug_device *dev)
{
    int64_t n = 4097;
    int32_t *iv = th_alloc((size_t)n * 4);
    uint8_t *uv = th_alloc((size_t)n);
    const int32_t special[] = {0, -1, 1, 2049, 2051, 65504, 65519, -65504, 16777217,
                               -16777217, 2147483647, -2147483647 - 1, 4097, 123456789};
    for (int64_t i = 0; i < n; i++) {
        iv[i] = (size_t)i < sizeof special / sizeof special[0]
                    ? special[i]
                    : (int32_t)((uint32_t)i * 2654435761u) >> (i % 24);
        uv[i] = (uint8_t)(i * 37);
    }
    /* i32 -> f32 rounds to nearest even (16777217 -> 16777216). */
    float *f = th_alloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)ref_round_f32((double)iv[i]);
    check_cast(dev, UG_I32, UG_F32, iv, n, f, false);
    check_cast(dev, UG_I32, UG_F32, iv, n, f, true);
    /* i32 -> f16 for values within the f16 range. */
    int32_t *small = th_alloc((size_t)n * 4);
    uint16_t *h = th_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        small[i] = iv[i] % 65504;
        h[i] = ref_f16_bits((double)small[i]);
    }
    check_cast(dev, UG_I32, UG_F16, small, n, h, true);
    /* u8 -> f32 and f16: every byte value is exact. */
    float *uf = th_alloc((size_t)n * 4);
    uint16_t *uh = th_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        uf[i] = (float)uv[i];
        uh[i] = ref_f16_bits((double)uv[i]);
    }
    check_cast(dev, UG_U8, UG_F32, uv, n, uf, false);
    check_cast(dev, UG_U8, UG_F16, uv, n, uh, true);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(transpose),
        TH_DEVICE_TEST(cast_f32_f16),
        TH_DEVICE_TEST(cast_bf16),
        TH_DEVICE_TEST(cast_integers),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
