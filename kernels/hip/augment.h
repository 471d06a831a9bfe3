/* Byte images made into a batch's values (backend.h, ug_augment_args):
 * one thread per value, the data set's table per byte, at each sample's
 * crop and flip.
 * Device code: backends/hip/augment.hip launches it. */
#ifndef UG_KERNELS_HIP_AUGMENT_H
#define UG_KERNELS_HIP_AUGMENT_H

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

#endif
