/* Element types. f16 and bf16 are storage types on every device: arithmetic
 * runs in f32. */
#ifndef UNIGRAD_DTYPE_H
#define UNIGRAD_DTYPE_H

#include "unigrad/export.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ug_dtype {
    UG_F32 = 0,
    UG_F16 = 1,
    UG_I32 = 2,
    UG_U8 = 3,
    UG_BF16 = 4, /* bfloat16: f32's exponent range with 8 significant bits */
    UG_I64 = 5   /* indices and labels, as PyTorch's default integer type */
} ug_dtype;

#define UG_DTYPE_COUNT 6

/* Bytes per element; 0 for a value outside the enum. */
UG_API size_t ug_dtype_size(ug_dtype dtype);
/* "f32", "f16", "i32", "u8", "bf16", "i64", or "invalid". */
UG_API const char *ug_dtype_name(ug_dtype dtype);

/* IEEE 754 binary16 conversions on the host (round to nearest even). */
UG_API unsigned short ug_f32_to_f16(float value);
UG_API float ug_f16_to_f32(unsigned short value);
/* bfloat16 conversions on the host, as PyTorch's: round to nearest even
 * (past the largest finite value to infinity), any NaN to 0x7fc0. */
UG_API unsigned short ug_f32_to_bf16(float value);
UG_API float ug_bf16_to_f32(unsigned short value);

#ifdef __cplusplus
}
#endif
#endif
