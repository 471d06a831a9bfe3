/* Host binary16 and bfloat16 conversion, inline so that the CPU backend's
 * loops over half tensors inline it (base/dtype.c exports it as
 * ug_f32_to_f16 and friends). Round to nearest even; f16: NaN stays a quiet
 * NaN, overflow gives infinity; bf16: any NaN gives 0x7fc0. */
#ifndef UG_CORE_HALF_H
#define UG_CORE_HALF_H

#include <string.h>

static inline unsigned short ug_half_from_f32(float value)
{
    unsigned int x;
    memcpy(&x, &value, sizeof x);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int exponent = (x >> 23) & 0xffu;
    unsigned int mantissa = x & 0x7fffffu;
    if (exponent == 0xffu) /* inf stays inf; NaN stays a quiet NaN */
        return (unsigned short)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    int e = (int)exponent - 127 + 15;
    if (e >= 31)
        return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (unsigned short)sign;
        /* Subnormal: shift the implicit bit in, round to nearest even. */
        mantissa |= 0x800000u;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int half = mantissa >> shift;
        unsigned int rest = mantissa & ((1u << shift) - 1u);
        unsigned int halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (half & 1u)))
            half++;
        return (unsigned short)(sign | half);
    }
    unsigned int half = sign | ((unsigned int)e << 10) | (mantissa >> 13);
    unsigned int rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++; /* a carry into the exponent is the correct rounding */
    return (unsigned short)half;
}

static inline float ug_half_to_f32(unsigned short value)
{
    unsigned int sign = ((unsigned int)value & 0x8000u) << 16;
    unsigned int exponent = ((unsigned int)value >> 10) & 0x1fu;
    unsigned int mantissa = (unsigned int)value & 0x3ffu;
    unsigned int x;
    if (exponent == 0x1fu) {
        x = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent == 0) {
        if (mantissa == 0) {
            x = sign;
        } else {
            int e = -1;
            do {
                mantissa <<= 1;
                e++;
            } while (!(mantissa & 0x400u));
            x = sign | ((unsigned int)(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static inline unsigned short ug_bfloat_from_f32(float value)
{
    unsigned int x;
    memcpy(&x, &value, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u;
    /* Adding 0x7fff, plus 1 when the kept half is odd, carries exactly when
     * the dropped half rounds up; a carry out of the largest finite value
     * gives infinity. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

static inline float ug_bfloat_to_f32(unsigned short value)
{
    unsigned int x = (unsigned int)value << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

#endif
