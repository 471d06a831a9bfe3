/* The half-precision conversions the module's kernels use, in integer
 * arithmetic (no compiler _Float16 needed): IEEE binary16, f32 -> f16
 * rounding to nearest even as __float2half_rn does on the GPU. The test
 * checks them against the suite's reference converter (f16_conversion). */
#ifndef UG_EMU_CUDA_FP16_H
#define UG_EMU_CUDA_FP16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

struct __half {
    unsigned short bits;
};

inline __half __ushort_as_half(unsigned short u)
{
    __half h;
    h.bits = u;
    return h;
}

inline unsigned short __half_as_ushort(__half h) { return h.bits; }

inline float __half2float(__half h)
{
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
    uint32_t bits;
    if (exponent == 0) {
        /* Zero or subnormal: mantissa * 2^-24 is exact in f32. */
        const float v = ldexpf((float)mantissa, -24);
        return sign ? -v : v;
    }
    if (exponent == 0x1f)
        bits = sign | 0x7f800000u | (mantissa << 13); /* inf, or NaN keeping its payload */
    else
        bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

inline __half __float2half_rn(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: the canonical quiet NaN */
        return __ushort_as_half((unsigned short)(sign | 0x7e00u));
    if (x >= 0x47800000u) /* >= 2^16 (and inf): inf */
        return __ushort_as_half((unsigned short)(sign | 0x7c00u));
    if (x < 0x38800000u) {
        /* Below 2^-14: a multiple of 2^-24. Scaling by 2^24 is exact, and
         * nearbyintf rounds to nearest even (the default mode); 1024 units
         * become the smallest normal, whose encoding is the same integer. */
        const float units = nearbyintf(fabsf(f) * 16777216.0f);
        return __ushort_as_half((unsigned short)(sign | (unsigned short)units));
    }
    /* Normal: rebias the exponent, keep 10 mantissa bits, round the 13
     * dropped ones to nearest even; a carry may step into the exponent
     * (65520 and up become inf, encoded 0x7c00). */
    uint32_t h = ((((x >> 23) - 127u + 15u) << 10) | ((x >> 13) & 0x3ffu));
    const uint32_t rest = x & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return __ushort_as_half((unsigned short)(sign | h));
}

#endif
