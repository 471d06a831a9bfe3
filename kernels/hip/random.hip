/* Counter-based random numbers, Philox 4x32-10 exactly as backend.h
 * defines it, so uniform draws are bitwise those of every other backend:
 * key (seed low, seed high), counter (c low, c high, 0, 0) with c =
 * offset + i, output words r0, r1. */
#include "kernels/hip/common.h"

typedef struct random_k {
    bool normal;
    int t;
    float p0, p1;
    uint32_t k0, k1;
    uint64_t offset;
    char *y;
    int64_t n;
} random_k;

UG_DEV void ug_philox(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* key schedule: bump before rounds 2..10 */
            k0 += UG_PHILOX_W0;
            k1 += UG_PHILOX_W1;
        }
        const uint64_t p0 = (uint64_t)UG_PHILOX_M0 * c[0], p1 = (uint64_t)UG_PHILOX_M1 * c[2];
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c[0] = hi1 ^ c[1] ^ k0;
        c[1] = lo1;
        c[2] = hi0 ^ c[3] ^ k1;
        c[3] = lo0;
    }
}

__global__ void ug_random_kernel(random_k k)
{
#ifdef __clang__
    /* clang (hipcc) fuses a*b+c into an FMA by default, which would round
     * uniform draws differently from the other backends; nvcc never fuses
     * the __fmul_rn/__fadd_rn intrinsics (HIP's are plain operators that
     * the pragma would not cover once inlined, hence two spellings). */
#pragma clang fp contract(off)
#endif
    UG_FOR(i, k.n, int64_t) {
        const uint64_t c = k.offset + (uint64_t)i;
        uint32_t w[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u};
        ug_philox(w, k.k0, k.k1);
        float v;
        if (!k.normal) {
            /* low + (high - low) * u, u = (r0 >> 8) * 2^-24 (exact, so the
             * order matches the CPU backend bit for bit, and cannot overflow) */
            const float u = (float)(w[0] >> 8) * 0x1p-24f;
#ifdef UG_CUDA
            v = __fadd_rn(k.p0, __fmul_rn(k.p1 - k.p0, u));
#else
            v = k.p0 + (k.p1 - k.p0) * u;
#endif
        } else {
            /* Box-Muller; u1 in (0, 1] so the log is finite */
            const float u1 = (float)((w[0] >> 8) + 1u) * 0x1p-24f;
            const float u2 = (float)(w[1] >> 8) * 0x1p-24f;
            v = k.p0 + k.p1 * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
        }
        ug_st(k.y, k.t, i, v);
    }
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
    k.y = ug_hip_ptr(&a->y);
    k.n = a->n;
    ug_random_kernel<<<ug_hip_blocks(a->n, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, dev->stream>>>(k);
    return ug_hip_launched("random");
}
