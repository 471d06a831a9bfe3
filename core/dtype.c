/* Element type facts and host-side binary16 and bfloat16 conversion. */
#include <string.h>

#include "unigrad/dtype.h"

size_t ug_dtype_size(ug_dtype dtype)
{
    switch (dtype) {
    case UG_F32: return 4;
    case UG_F16: return 2;
    case UG_I32: return 4;
    case UG_U8: return 1;
    case UG_BF16: return 2;
    }
    return 0;
}

const char *ug_dtype_name(ug_dtype dtype)
{
    switch (dtype) {
    case UG_F32: return "f32";
    case UG_F16: return "f16";
    case UG_I32: return "i32";
    case UG_U8: return "u8";
    case UG_BF16: return "bf16";
    }
    return "invalid";
}

unsigned short ug_f32_to_f16(float value)
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

float ug_f16_to_f32(unsigned short value)
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

unsigned short ug_f32_to_bf16(float value)
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

float ug_bf16_to_f32(unsigned short value)
{
    unsigned int x = (unsigned int)value << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
