/* Counter-based random numbers: element i is ug_random_value (Philox
 * 4x32-10 and the transforms of kernels/common/random.h, through
 * backend.h) of counter offset + i, so every device draws the same bits. */
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

ug_status ug_hip_random(ug_bdev *dev, const ug_random_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    random_k k;
    k.normal = a->normal;
    k.t = a->y.dtype;
    k.p0 = a->p0;
    k.p1 = a->p1;
    k.k0 = (uint32_t)a->seed;
    k.k1 = (uint32_t)(a->seed >> 32);
    k.offset = a->offset;
    k.runs = (const float *)ug_hip_ptr(&a->runs);
    k.y = ug_hip_ptr(&a->y);
    k.n = a->n;
    ug_random_kernel<<<ug_hip_blocks(a->n, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("random");
}
