/* Byte images made into a batch's values (backend.h, ug_augment_args):
 * one work-item per value, the data set's table per byte, at each
 * sample's crop (dy, dx, padding pad) and flip; has_place 0: conversion
 * only. */
#define UG_AUGMENT_KERNEL(T)                                                                   \
    kernel void augment_##T(global UG_T_##T *y, ulong yoff, const global uchar *x, ulong xoff,  \
                            const global float *table, ulong table_off, const global int *place, \
                            ulong place_off, int has_place, long n, long c, long h, long w,     \
                            int pad)                                                           \
    {                                                                                          \
        const long v = get_global_id(0);                                                       \
        if (v >= n * c * h * w)                                                                \
            return;                                                                            \
        const long j = v % w, i = (v / w) % h, image = v / (h * w), s = image / c;             \
        long si = i, sj = j;                                                                   \
        if (has_place) {                                                                       \
            const global int *p = place + place_off + 3 * s;                                   \
            si = i + p[0] - pad;                                                               \
            sj = (p[2] ? w - 1 - j : j) + p[1] - pad;                                          \
        }                                                                                      \
        const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;                            \
        const uchar b = inside ? x[xoff + image * h * w + si * w + sj] : (uchar)0;             \
        UG_ST_##T(y, yoff + v, table[table_off + b]);                                          \
    }

UG_AUGMENT_KERNEL(f32)
UG_AUGMENT_KERNEL(f16)
UG_AUGMENT_KERNEL(bf16)
