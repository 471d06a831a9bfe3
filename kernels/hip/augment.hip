/* Byte images made into a batch's values (backend.h, ug_augment_args):
 * one thread per value, the data set's table per byte, at each sample's
 * crop and flip. */
#include "kernels/hip/common.h"

typedef struct augment_k {
    char *y;
    int t;
    const unsigned char *x;
    const float *table;
    const int *place; /* NULL: conversion only */
    int64_t n, c, h, w;
    int pad;
} augment_k;

__global__ void ug_augment_kernel(augment_k k)
{
    UG_FOR(v, k.n * k.c * k.h * k.w, int64_t) {
        const int64_t j = v % k.w, i = (v / k.w) % k.h, image = v / (k.h * k.w), s = image / k.c;
        int64_t si = i, sj = j;
        if (k.place) {
            const int *p = k.place + 3 * s;
            si = i + p[0] - k.pad;
            sj = (p[2] ? k.w - 1 - j : j) + p[1] - k.pad;
        }
        const bool inside = si >= 0 && si < k.h && sj >= 0 && sj < k.w;
        const unsigned char b = inside ? k.x[image * k.h * k.w + si * k.w + sj] : 0;
        ug_st(k.y, k.t, v, k.table[b]);
    }
}

ug_status ug_hip_augment(ug_bdev *dev, const ug_augment_args *a)
{
    if (a->x.dtype != UG_U8 || a->table.dtype != UG_F32 || (a->place.mem && a->place.dtype != UG_I32))
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s augment: x u8, table f32 and place i32", UG_HIP_BACKEND);
    if (a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    augment_k k;
    k.y = ug_hip_ptr(&a->y);
    k.t = a->y.dtype;
    k.x = (const unsigned char *)ug_hip_ptr(&a->x);
    k.table = (const float *)ug_hip_ptr(&a->table);
    k.place = (const int *)ug_hip_ptr(&a->place);
    k.n = a->n;
    k.c = a->c;
    k.h = a->h;
    k.w = a->w;
    k.pad = a->pad;
    const int64_t count = a->n * a->c * a->h * a->w;
    ug_augment_kernel<<<ug_hip_blocks(count, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("augment");
}
