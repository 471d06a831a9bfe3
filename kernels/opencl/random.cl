/* Counter-based random numbers: Philox 4x32-10 (Salmon et al., SC'11) with
 * key (seed low 32, seed high 32); element i encrypts the counter
 * (c low 32, c high 32, 0, 0) with c = offset + i and uses words r0, r1.
 * Every backend computes exactly this, so a seed draws the same numbers on
 * every device; the uniform path is bitwise equal to the host's (no fma
 * contraction, see common.cl). */
#define UG_PHILOX_M0 0xD2511F53u
#define UG_PHILOX_M1 0xCD9E8D57u
#define UG_PHILOX_W0 0x9E3779B9u
#define UG_PHILOX_W1 0xBB67AE85u

inline uint4 ug_philox4x32_10(uint4 c, uint2 k)
{
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k.x += UG_PHILOX_W0;
            k.y += UG_PHILOX_W1;
        }
        const uint hi0 = mul_hi(UG_PHILOX_M0, c.x), lo0 = UG_PHILOX_M0 * c.x;
        const uint hi1 = mul_hi(UG_PHILOX_M1, c.z), lo1 = UG_PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

/* uniform: p0 + (p1 - p0) * (r0 >> 8) * 2^-24 in [p0, p1).
 * normal:  Box-Muller with u1 = ((r0 >> 8) + 1) * 2^-24 in (0, 1] (log
 *          never sees 0) and u2 = (r1 >> 8) * 2^-24; p0 + p1 * z. */
#define UG_RANDOM_KERNEL(T)                                                              \
    kernel void random_##T(global UG_T_##T *y, ulong yoff, long n, uint k0, uint k1,     \
                           ulong offset, int normal, float p0, float p1)                 \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const ulong c = offset + (ulong)i;                                               \
        const uint4 r = ug_philox4x32_10((uint4)((uint)c, (uint)(c >> 32), 0u, 0u),      \
                                         (uint2)(k0, k1));                               \
        float v;                                                                         \
        if (normal) {                                                                    \
            const float u1 = (float)((r.x >> 8) + 1u) * 0x1p-24f;                        \
            const float u2 = (float)(r.y >> 8) * 0x1p-24f;                               \
            v = p0 + p1 * (sqrt(-2.0f * log(u1)) * cos(2.0f * M_PI_F * u2));             \
        } else {                                                                         \
            v = p0 + (p1 - p0) * (float)(r.x >> 8) * 0x1p-24f;                           \
        }                                                                                \
        UG_ST_##T(y, yoff + i, v);                                                       \
    }

UG_RANDOM_KERNEL(f32)
UG_RANDOM_KERNEL(f16)
