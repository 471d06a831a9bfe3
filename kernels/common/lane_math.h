/* exp, erf and tanh in f32 for the CPU backend, in plain arithmetic with no
 * branches or calls, so a loop calling them vectorises (glibc's expf and
 * erff are calls gcc keeps scalar without -ffast-math: GELU and its
 * gradient were a quarter of a GPT step). The OpenCL kernels take erf from
 * here too (with the builtin exp): POCL's erf made GELU a quarter of the
 * step there. With contraction into FMA off, every vector width rounds each
 * operation alike: SSE2, AVX2 and AVX-512 give the same bits, and so do the
 * machines a run moves between.
 *
 * Against double (tests/unit/test_lane_math.c): exp within 1.5 ulp over
 * its whole range, denormal results included; erf and tanh within 3 ulp.
 * Coefficients: Chebyshev fits in double, written out to f32. */
#ifndef UG_KERNELS_COMMON_LANE_MATH_H
#define UG_KERNELS_COMMON_LANE_MATH_H

#if defined(__OPENCL_VERSION__) /* embedded in the OpenCL program ahead of elementwise.h: erf only */
#define UG_LANE_FN inline
#else
#include <stdint.h>
#include <string.h>
#define UG_LANE_FN static inline

/* 2^n for n in [-126, 127], from its bits. */
UG_LANE_FN float ug_lane_pow2i(int32_t n)
{
    const int32_t bits = (n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, r found in two
 * parts (Cody and Waite) so that n ln 2 is exact; exp(r) by its Taylor
 * series to r^7 (truncation 5e-9 relative). 2^n is applied as two factors,
 * so results down in the denormals and up to overflow come out rounded
 * once. NaN stays NaN (r is), +inf gives inf, below -104 gives 0. */
UG_LANE_FN float ug_lane_expf(float x)
{
    float xc = x > -104.0f ? x : -104.0f; /* NaN takes -104 here, only for n */
    xc = xc < 89.0f ? xc : 89.0f;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float k = (xc * 1.44269504088896341f + shifter) - shifter;
    const int32_t n = (int32_t)k;
    const float r = (x - k * 0.693145751953125f) - k * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t n1 = n >> 1;
    const float y = p * ug_lane_pow2i(n1) * ug_lane_pow2i(n - n1);
    return x < -104.0f ? 0.0f : y;
}

/* tanh(x): for |x| < 0.625, x + x u Q(u) with u = x^2 (a Chebyshev fit of
 * tanh(x) / x); beyond, 1 - 2 / (exp(2|x|) + 1) with x's sign, which is
 * 1 once exp overflows. */
UG_LANE_FN float ug_lane_tanhf(float x)
{
    const float u = x * x, a = x < 0.0f ? -x : x;
    float q = 2.1303085391e-03f;
    q = q * u - 8.1612306791e-03f;
    q = q * u + 2.1692755056e-02f;
    q = q * u - 5.3944887842e-02f;
    q = q * u + 1.3333184541e-01f;
    q = q * u - 3.3333329757e-01f;
    const float tail = 1.0f - 2.0f / (ug_lane_expf(a + a) + 1.0f);
    return a < 0.625f ? x + x * (u * q) : (x < 0.0f ? -tail : tail);
}
#endif

/* erf(x) given e = exp(-x^2) (GELU's gradient has it already): for
 * |x| < 0.921875, x P(x^2); beyond, 1 - e Q(w) with w = 1 / (1 + |x|), Q
 * fitting erfc(a) exp(a^2) on [0.921875, 3.9375] (past it erf rounds to 1
 * in f32, and e Q stays below half an ulp of 1). Both are computed and one
 * is picked, which is cheaper in vectors than a branch. */
UG_LANE_FN float ug_lane_erf_given_exp(float x, float e)
{
    const float u = x * x, a = x < 0.0f ? -x : x;
    float p = 8.392696602618409e-05f;
    p = p * u - 8.148506065724094e-04f;
    p = p * u + 5.201591807319163e-03f;
    p = p * u - 2.685964751459863e-02f;
    p = p * u + 1.128370052910508e-01f;
    p = p * u - 3.761263410892139e-01f;
    p = p * u + 1.128379166682764e+00f;
    const float w = 1.0f / (1.0f + a);
    float q = -5.141673665e-01f;
    q = q * w + 1.085795398e+00f;
    q = q * w - 3.936919701e-01f;
    q = q * w - 7.567595343e-01f;
    q = q * w + 4.695740678e-01f;
    q = q * w + 5.266244940e-01f;
    q = q * w + 5.681021832e-01f;
    q = q * w - 1.686711844e-04f;
    const float tail = 1.0f - e * q;
    const float big = x < 0.0f ? -tail : tail;
    return a < 0.921875f ? x * p : big;
}

#if defined(__OPENCL_VERSION__) /* POCL's exp vectorises, and this one does not there */
UG_LANE_FN float ug_lane_erff(float x) { return ug_lane_erf_given_exp(x, exp(-(x * x))); }
#else
UG_LANE_FN float ug_lane_erff(float x) { return ug_lane_erf_given_exp(x, ug_lane_expf(-(x * x))); }
#endif

#endif
