/* Counter-based random numbers: element i is ug_random_value (Philox
 * 4x32-10 and the transforms of kernels/common/random.h, through
 * backend.h) of counter offset + i, so every device draws the same bits.
 * Device code: backends/hip/random.hip launches it. */
#ifndef UG_KERNELS_HIP_RANDOM_H
#define UG_KERNELS_HIP_RANDOM_H

#include "kernels/hip/common.h"

typedef struct random_k {
    bool normal;
    int t;
    float p0, p1;
    uint32_t k0, k1;
    uint64_t offset;
    const float *runs; /* NULL: none */
    char *y;
    int64_t n;
} random_k;

__global__ void ug_random_kernel(random_k k)
{
    const uint64_t seed = (uint64_t)k.k1 << 32 | k.k0;
    const uint64_t base = k.offset + (k.runs ? (uint64_t)k.runs[0] << UG_RANDOM_RUN_SHIFT : 0);
    UG_FOR(i, k.n, int64_t)
        ug_st(k.y, k.t, i, ug_random_value(seed, base + (uint64_t)i, k.normal, k.p0, k.p1));
}

#endif
