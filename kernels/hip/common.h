/* Device helpers shared by the kernel files: dtype loads and stores (f16
 * and bf16 are storage only: arithmetic in f32), strided positions, NaN-propagating
 * max, and block-wide reductions through shared memory (no warp
 * intrinsics, whose names and widths differ between HIP and CUDA).
 *
 * Device code only, like every file here: the module's launchers
 * (backends/hip/ *.hip) include these files, never the other way round.
 * The kernels read the runtime's device language (the same names in HIP
 * and CUDA) and backends/backend.h for the argument types they take by
 * value (ug_window2d, the op and optimizer kinds, UG_KERNEL_MAX_DIMS) and
 * the formulas of kernels/common/. */
#ifndef UG_KERNELS_HIP_COMMON_H
#define UG_KERNELS_HIP_COMMON_H

#include <string.h>

/* The runtime's headers, in the order backends/hip/internal.h includes
 * them (the CUDA flavour: hip_to_cuda.h's). */
#ifdef UG_CUDA
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#else
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif

#include "backends/backend.h"

/* Threads per block of every 1-D kernel, which sizes the kernels' shared
 * arrays: a multiple of both wavefront sizes (32 on NVIDIA, 64 on AMD). */
#define UG_HIP_BLOCK 256

#define UG_DEV __device__ __forceinline__

UG_DEV float ug_h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
/* Round to nearest even, as the host conversion and the other backends. */
UG_DEV unsigned short ug_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* bfloat16 by integer operations, exactly as the host's ug_f32_to_bf16
 * (the vendors' intrinsics differ on NaN). */
UG_DEV float ug_bf2f(unsigned short b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
UG_DEV unsigned short ug_f2bf(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

/* Element i of p (already offset) as f32. */
UG_DEV float ug_ld(const void *p, int dtype, int64_t i)
{
    switch (dtype) {
    case UG_F16: return ug_h2f(((const unsigned short *)p)[i]);
    case UG_BF16: return ug_bf2f(((const unsigned short *)p)[i]);
    case UG_I32: return (float)((const int32_t *)p)[i];
    case UG_U8: return (float)((const uint8_t *)p)[i];
    case UG_I64: return (float)((const int64_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* Stores to an f32, f16 or bf16 element. */
UG_DEV void ug_st(void *p, int dtype, int64_t i, float v)
{
    if (dtype == UG_F16)
        ((unsigned short *)p)[i] = ug_f2h(v);
    else if (dtype == UG_BF16)
        ((unsigned short *)p)[i] = ug_f2bf(v);
    else
        ((float *)p)[i] = v;
}

/* Element types of kernels templated on their data (float, __half,
 * ug_bf16), for families whose dtype is fixed per call. bf16 is a type of
 * its own so that overloads tell it from f16 (both are 16-bit storage). */
struct ug_bf16 {
    unsigned short bits;
};

/* An element as f32, and f32 rounded once (to nearest even) to T, with the
 * helpers above: for float, both are the identity. */
UG_DEV float ug_widen(float v) { return v; }
UG_DEV float ug_widen(__half v) { return ug_h2f(__half_as_ushort(v)); }
UG_DEV float ug_widen(ug_bf16 v) { return ug_bf2f(v.bits); }
template <typename T> UG_DEV T ug_narrow(float v);
template <> UG_DEV float ug_narrow<float>(float v) { return v; }
template <> UG_DEV __half ug_narrow<__half>(float v) { return __ushort_as_half(ug_f2h(v)); }
template <> UG_DEV ug_bf16 ug_narrow<ug_bf16>(float v) { return ug_bf16{ug_f2bf(v)}; }

UG_DEV bool ug_isnan(float x) { return x != x; }

/* A numeric check folded into a kernel (backend.h's check views): the
 * flag (NULL: none) goes to NaN when a value the kernel read or wrote was
 * NaN or infinite (v - v is NaN exactly then). */
UG_DEV void ug_check_flag(float *check, bool bad)
{
    if (check && bad)
        *check = __int_as_float(0x7fc00000);
}

/* max that returns NaN when either side is NaN (as PyTorch). */
UG_DEV float ug_max_nan(float a, float b)
{
    return ug_isnan(a) ? a : ug_isnan(b) ? b : (b > a ? b : a);
}

/* Shape and strides of a strided operand, passed to kernels by value. */
typedef struct ug_kshape {
    int ndim;
    int64_t shape[UG_KERNEL_MAX_DIMS];
} ug_kshape;

/* Offset of linear (row-major) index i in an operand with strides s. I is
 * uint32_t when every index and offset fits (cheap division), else int64_t. */
template <typename I>
UG_DEV I ug_offset(I i, const ug_kshape &sh, const int64_t *s)
{
    if (sh.ndim == 1)
        return i * (I)s[0];
    I off = 0;
    for (int d = sh.ndim - 1; d >= 0; d--) {
        const I n = (I)sh.shape[d];
        off += (i % n) * (I)s[d];
        i /= n;
    }
    return off;
}

/* Block-wide reductions over blockDim.x threads (a power of two); sh holds
 * blockDim.x floats. Every thread gets the result. */
UG_DEV float ug_block_sum(float v, float *sh)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h)
            sh[t] += sh[t + h];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

UG_DEV float ug_block_max(float v, float *sh)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h)
            sh[t] = ug_max_nan(sh[t], sh[t + h]);
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

/* Whether the calling block (1-D) is the last of `blocks` to get here,
 * counted in *count: every block calls it, and the last sets the count
 * back to 0 for the next launch. What each block wrote before the call,
 * the last one sees after it: the work of a kernel whose last block
 * finishes what the others began, with no second launch. */
UG_DEV bool ug_last_block(unsigned *count, unsigned blocks)
{
    __shared__ bool last;
    __threadfence(); /* this thread's writes visible to the whole GPU before the count */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, 1u) == blocks - 1;
        if (last)
            *count = 0; /* every other block has counted itself */
    }
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

/* Grid-stride loop over [0, n). */
#define UG_FOR(i, n, I)                                                              \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(n);                 \
         i += (I)blockDim.x * gridDim.x)

#endif
