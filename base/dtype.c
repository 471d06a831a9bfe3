/* Element type facts, and the exported host binary16 and bfloat16
 * conversion (base/half.h). */
#include "half.h" /* beside this file: also built alone by tests/hip_emulation */
#include "unigrad/dtype.h"

size_t ug_dtype_size(ug_dtype dtype)
{
    switch (dtype) {
    case UG_F32: return 4;
    case UG_F16: return 2;
    case UG_I32: return 4;
    case UG_U8: return 1;
    case UG_BF16: return 2;
    case UG_I64: return 8;
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
    case UG_I64: return "i64";
    }
    return "invalid";
}

unsigned short ug_f32_to_f16(float value) { return ug_half_from_f32(value); }
float ug_f16_to_f32(unsigned short value) { return ug_half_to_f32(value); }
unsigned short ug_f32_to_bf16(float value) { return ug_bfloat_from_f32(value); }
float ug_bf16_to_f32(unsigned short value) { return ug_bfloat_to_f32(value); }
