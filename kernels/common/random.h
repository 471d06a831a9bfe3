/* Counter-based random numbers for every dialect (C11, OpenCL C, HIP/CUDA):
 * Philox 4x32-10 and the uniform and normal transforms of backend.h, written
 * once. Element i of a draw encrypts the counter (c low, c high, 0, 0),
 * c = offset + i, under the key (seed low, seed high), and uses words r0, r1.
 *
 * Bitwise the same on every device: the transforms use only f32 add,
 * subtract and multiply (each correctly rounded by IEEE 754, never fused
 * into an fma: UG_ADD/UG_MUL below) and integer operations. The normal
 * transform (Box-Muller) does not call the device's log, cos or sqrt, whose
 * last bits differ between math libraries: it computes them here from
 * series and Newton steps, accurate to a few units in the last place. */
#ifndef UG_KERNELS_COMMON_RANDOM_H
#define UG_KERNELS_COMMON_RANDOM_H

#if defined(__OPENCL_VERSION__)
/* The host embeds kernels/common/elementwise.h (UG_MATH_FN) before this. */
typedef uint ug_u32;
typedef ulong ug_u64;
#else
#include <stdint.h>

#include "kernels/common/elementwise.h"
typedef uint32_t ug_u32;
typedef uint64_t ug_u64;
#endif

/* Where a graph's run count enters the counter (dropout masks: bits 40-63
 * the run modulo 2^24, bits 32-39 the mask, bits 0-31 the element). */
#define UG_RANDOM_RUN_SHIFT 40
#define UG_RANDOM_RUN_PERIOD (1u << 24)
#define UG_PHILOX_M0 0xD2511F53u
#define UG_PHILOX_M1 0xCD9E8D57u
#define UG_PHILOX_W0 0x9E3779B9u
#define UG_PHILOX_W1 0xBB67AE85u

/* Unfused f32 arithmetic: nvcc fuses a*b+c unless told per operation;
 * clang (hipcc, and C with clang) follows the pragma; gcc in ISO C mode and
 * OpenCL C (FP_CONTRACT OFF in common.cl) do not fuse. */
#if defined(__CUDACC__)
#define UG_ADD(a, b) __fadd_rn((a), (b))
#define UG_MUL(a, b) __fmul_rn((a), (b))
#else
#define UG_ADD(a, b) ((a) + (b))
#define UG_MUL(a, b) ((a) * (b))
#endif
#if defined(__clang__) && !defined(__OPENCL_VERSION__)
#define UG_NO_FMA _Pragma("clang fp contract(off)")
#else
#define UG_NO_FMA
#endif

/* Words r0, r1 of Philox 4x32-10 for one counter. */
UG_MATH_FN void ug_philox_words(ug_u64 seed, ug_u64 counter, ug_u32 *r0, ug_u32 *r1)
{
    ug_u32 c0 = (ug_u32)counter, c1 = (ug_u32)(counter >> 32), c2 = 0u, c3 = 0u;
    ug_u32 k0 = (ug_u32)seed, k1 = (ug_u32)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* the key is bumped before rounds 2..10 */
            k0 += UG_PHILOX_W0;
            k1 += UG_PHILOX_W1;
        }
        const ug_u64 p0 = (ug_u64)UG_PHILOX_M0 * c0, p1 = (ug_u64)UG_PHILOX_M1 * c2;
        const ug_u32 n0 = (ug_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (ug_u32)(p0 >> 32) ^ c3 ^ k1;
        c1 = (ug_u32)p1;
        c3 = (ug_u32)p0;
        c0 = n0;
        c2 = n2;
    }
    *r0 = c0;
    *r1 = c1;
}

/* ln(k * 2^-24) for an integer k in [1, 2^24]. */
UG_MATH_FN float ug_random_log(ug_u32 k)
{
    UG_NO_FMA
    int e = 0; /* k = m 2^e, m in [1, 2) */
    while ((k >> (e + 1)) != 0u)
        e++;
    float m = (float)k;
    for (int i = 0; i < e; i++)
        m = UG_MUL(m, 0.5f); /* exact */
    if (m >= 1.5f) { /* m in [0.75, 1.5): the series below converges fast */
        m = UG_MUL(m, 0.5f);
        e++;
    }
    /* ln m = 2 atanh(s), s = (m - 1) / (m + 1); 1 / (m + 1) by Newton. */
    const float t = m - 1.0f, d = UG_ADD(2.0f, t);
    float r = 0.47058824f;
    for (int i = 0; i < 4; i++)
        r = UG_MUL(r, 2.0f - UG_MUL(d, r));
    const float s = UG_MUL(t, r), s2 = UG_MUL(s, s);
    float p = 0.07692308f; /* 1/13, then Horner down to 1 */
    p = UG_ADD(UG_MUL(p, s2), 0.09090909f);
    p = UG_ADD(UG_MUL(p, s2), 0.11111111f);
    p = UG_ADD(UG_MUL(p, s2), 0.14285715f);
    p = UG_ADD(UG_MUL(p, s2), 0.2f);
    p = UG_ADD(UG_MUL(p, s2), 0.33333334f);
    p = UG_ADD(UG_MUL(p, s2), 1.0f);
    const float ln_m = UG_MUL(2.0f, UG_MUL(s, p));
    /* (e - 24) ln 2 in two parts: the first product is exact. */
    const float n = (float)(e - 24);
    return UG_ADD(UG_MUL(n, 0.693145751953125f), UG_ADD(UG_MUL(n, 1.4286068e-06f), ln_m));
}

/* sqrt(v) for v >= 0 by Newton steps on 1/sqrt. */
UG_MATH_FN float ug_random_sqrt(float v)
{
    UG_NO_FMA
    if (v == 0.0f)
        return 0.0f;
    float w = v, scale = 1.0f; /* w = v 4^-k in [1, 4), scale = 2^k */
    while (w >= 4.0f) {
        w = UG_MUL(w, 0.25f);
        scale = UG_MUL(scale, 2.0f);
    }
    while (w < 1.0f) {
        w = UG_MUL(w, 4.0f);
        scale = UG_MUL(scale, 0.5f);
    }
    float y = w < 2.0f ? 1.3f - UG_MUL(0.3f, w) : 0.92f - UG_MUL(0.105f, w);
    for (int i = 0; i < 4; i++)
        y = UG_MUL(y, 1.5f - UG_MUL(UG_MUL(0.5f, w), UG_MUL(y, y)));
    return UG_MUL(UG_MUL(w, y), scale);
}

/* cos(2 pi j 2^-24) for an integer j in [0, 2^24). */
UG_MATH_FN float ug_random_cos(ug_u32 j)
{
    UG_NO_FMA
    const ug_u32 quadrant = j >> 22, f = j & 0x3FFFFFu; /* angle = quadrant pi/2 + theta */
    const int complement = f > 0x200000u;           /* theta = pi/2 - x */
    const float x = UG_MUL((float)(complement ? 0x400000u - f : f), 3.7450702e-07f); /* pi/2 / 2^22 */
    const float x2 = UG_MUL(x, x);
    float c = -1.1470745e-11f; /* cos x: Horner in x^2 from -1/12! */
    c = UG_ADD(UG_MUL(c, x2), 2.0876757e-09f);
    c = UG_ADD(UG_MUL(c, x2), -2.755732e-07f);
    c = UG_ADD(UG_MUL(c, x2), 2.4801588e-05f);
    c = UG_ADD(UG_MUL(c, x2), -0.0013888889f);
    c = UG_ADD(UG_MUL(c, x2), 0.041666668f);
    c = UG_ADD(UG_MUL(c, x2), -0.5f);
    c = UG_ADD(UG_MUL(c, x2), 1.0f);
    float s = 1.6059044e-10f; /* sin x / x: from 1/13! */
    s = UG_ADD(UG_MUL(s, x2), -2.5052108e-08f);
    s = UG_ADD(UG_MUL(s, x2), 2.7557319e-06f);
    s = UG_ADD(UG_MUL(s, x2), -0.0001984127f);
    s = UG_ADD(UG_MUL(s, x2), 0.008333334f);
    s = UG_ADD(UG_MUL(s, x2), -0.16666667f);
    s = UG_ADD(UG_MUL(s, x2), 1.0f);
    s = UG_MUL(s, x);
    const float cos_theta = complement ? s : c, sin_theta = complement ? c : s;
    switch (quadrant) {
    case 0: return cos_theta;
    case 1: return -sin_theta;
    case 2: return -cos_theta;
    default: return sin_theta;
    }
}

/* Element `counter` of a draw: uniform p0 + (p1 - p0) u, u = (r0 >> 8) 2^-24
 * in [0, 1); normal p0 + p1 sqrt(-2 ln u1) cos(2 pi u2), u1 = ((r0 >> 8) + 1)
 * 2^-24 in (0, 1], u2 = (r1 >> 8) 2^-24. */
UG_MATH_FN float ug_random_value(ug_u64 seed, ug_u64 counter, int normal, float p0, float p1)
{
    UG_NO_FMA
    ug_u32 r0, r1;
    ug_philox_words(seed, counter, &r0, &r1);
    if (!normal)
        return UG_ADD(p0, UG_MUL(p1 - p0, UG_MUL((float)(r0 >> 8), 0x1p-24f)));
    const float radius = ug_random_sqrt(UG_MUL(-2.0f, ug_random_log((r0 >> 8) + 1u)));
    return UG_ADD(p0, UG_MUL(p1, UG_MUL(radius, ug_random_cos(r1 >> 8))));
}

/* Dropout's factor for element `counter` of a draw: 0 where its uniform
 * (ug_random_value's, from 0 to 1) is below p, keep elsewhere; the rule
 * of the DROPOUT binary op on a mask of such draws, so fused attention
 * drops what the composed path's ug_g_dropout would. */
UG_MATH_FN float ug_dropout_keep(ug_u64 seed, ug_u64 counter, float p, float keep)
{
    ug_u32 r0, r1;
    ug_philox_words(seed, counter, &r0, &r1);
    return UG_MUL((float)(r0 >> 8), 0x1p-24f) >= p ? keep : 0.0f;
}

#endif
