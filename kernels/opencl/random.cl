/* Counter-based random numbers: element i is ug_random_value (Philox
 * 4x32-10 and the uniform or normal transform of
 * kernels/common/random.h, embedded ahead of this file) of counter
 * offset + i (plus a graph's run count, read here, when has_runs) under
 * the key (k0, k1), so every device draws the same bits. */
#define UG_RANDOM_KERNEL(T)                                                              \
    kernel void random_##T(global UG_T_##T *y, ulong yoff, long n, uint k0, uint k1,     \
                           ulong offset, const global float *runs, ulong runs_off,       \
                           int has_runs, int normal, float p0, float p1)                 \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const ulong seed = (ulong)k1 << 32 | k0;                                         \
        const ulong base =                                                               \
            offset + (has_runs ? (ulong)runs[runs_off] << UG_RANDOM_RUN_SHIFT : 0);      \
        UG_ST_##T(y, yoff + i, ug_random_value(seed, base + (ulong)i, normal, p0, p1));  \
    }

UG_RANDOM_KERNEL(f32)
UG_RANDOM_KERNEL(f16)
UG_RANDOM_KERNEL(bf16)
