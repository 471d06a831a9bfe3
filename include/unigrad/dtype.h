/* Element types. f16 is a storage type on every device: arithmetic runs in f32. */
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
    UG_U8 = 3
} ug_dtype;

#define UG_DTYPE_COUNT 4

/* Bytes per element; 0 for a value outside the enum. */
UG_API size_t ug_dtype_size(ug_dtype dtype);
/* "f32", "f16", "i32", "u8", or "invalid". */
UG_API const char *ug_dtype_name(ug_dtype dtype);

/* IEEE 754 binary16 conversions on the host (round to nearest even). */
UG_API unsigned short ug_f32_to_f16(float value);
UG_API float ug_f16_to_f32(unsigned short value);

#ifdef __cplusplus
}
#endif
#endif
