/* Unary (with strides: also transpose, expand and cast) and binary (with
 * broadcasting strides and a fused activation) kernels. One kernel per
 * family with the op switched at run time: the switch is uniform across
 * the grid, cheap next to memory traffic, and keeps compile time low. The
 * formulas are kernels/common/elementwise.h's (through backend.h).
 * Device code: backends/hip/elementwise.hip launches it. */
#ifndef UG_KERNELS_HIP_ELEMENTWISE_H
#define UG_KERNELS_HIP_ELEMENTWISE_H

#include "kernels/hip/common.h"

typedef struct unary_k {
    int op, xt, yt;
    float alpha, beta;
    const char *x;
    char *y;
    int64_t n;
    ug_kshape sh;
    int64_t xs[UG_KERNEL_MAX_DIMS];
} unary_k;

template <typename I>
__global__ void ug_unary_kernel(unary_k k)
{
    UG_FOR(i, k.n, I) {
        if (k.op == UG_UNARY_FILL) {
            ug_st(k.y, k.yt, i, k.beta);
            continue;
        }
        const I xo = ug_offset<I>(i, k.sh, k.xs);
        if (k.op == UG_UNARY_COPY && k.xt == k.yt) {
            /* Same dtype: move the bits (an i32 through f32 would round). */
            switch (k.xt) {
            case UG_F16:
            case UG_BF16: ((uint16_t *)k.y)[i] = ((const uint16_t *)k.x)[xo]; break;
            case UG_U8: ((uint8_t *)k.y)[i] = ((const uint8_t *)k.x)[xo]; break;
            case UG_I64: ((uint64_t *)k.y)[i] = ((const uint64_t *)k.x)[xo]; break;
            default: ((uint32_t *)k.y)[i] = ((const uint32_t *)k.x)[xo]; break;
            }
            continue;
        }
        ug_st(k.y, k.yt, i, ug_unary_op(k.op, ug_ld(k.x, k.xt, xo), k.alpha, k.beta));
    }
}

typedef struct binary_k {
    int op, post, t;
    float alpha;
    const char *a, *b;
    char *y;
    int64_t n;
    ug_kshape sh;
    int64_t as[UG_KERNEL_MAX_DIMS], bs[UG_KERNEL_MAX_DIMS];
} binary_k;

template <typename I>
__global__ void ug_binary_kernel(binary_k k)
{
    UG_FOR(i, k.n, I) {
        const float a = ug_ld(k.a, k.t, ug_offset<I>(i, k.sh, k.as));
        const float b = ug_ld(k.b, k.t, ug_offset<I>(i, k.sh, k.bs));
        ug_st(k.y, k.t, i, ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, k.post, ug_binary_op(k.op, a, b, k.alpha)));
    }
}

/* Does nothing; its attributes exist only where the module has code for
 * the device (see module.cpp). */
__global__ void ug_probe_kernel(int *p)
{
    if (p)
        *p = 0;
}

#endif
