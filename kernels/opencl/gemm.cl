/* C = beta * C for a GEMM with K == 0, which CLBlast rejects. beta == 0
 * writes zeros without reading C (BLAS rule: C may hold NaN garbage). */
kernel void gemm_scale_c(global float *c, ulong coff, long m, long n, long ldc, long stride,
                         long total, float beta)
{
    const long i = get_global_id(0);
    if (i >= total)
        return;
    const long mn = m * n;
    const long bt = i / mn;
    const long r = i - bt * mn;
    const long row = r / n;
    const long p = coff + bt * stride + row * ldc + (r - row * n);
    c[p] = beta == 0.0f ? 0.0f : beta * c[p];
}

/* C = alpha op(A) op(B) + beta C for f16 or bf16 A and B, the sum in f32
 * and C (f32, f16 or bf16) rounded once. One 16 x 16 work-group per tile
 * of C, the operands' tiles staged as f32 in local memory; with sum_batch
 * the one C sums every batch entry before it is stored. Devices without
 * cl_khr_fp16 (POCL) take it through vload_half, like every other kernel. */
#define UG_GEMM_TS 16
#define UG_GEMM_HALF_KERNEL(TI, TO)                                                          \
    kernel void gemm_##TI##_##TO(global UG_T_##TO *c, ulong coff, const global UG_T_##TI *a, \
                                 ulong aoff, const global UG_T_##TI *b, ulong boff, long m,  \
                                 long n, long k, long lda, long ldb, long ldc, long sa,      \
                                 long sb, long sc, long batch, int ta, int tb, int sum_batch, \
                                 float alpha, float beta)                                    \
    {                                                                                        \
        local float at[UG_GEMM_TS][UG_GEMM_TS + 1], bt[UG_GEMM_TS][UG_GEMM_TS + 1];          \
        const int lr = get_local_id(1), lc = get_local_id(0);                                \
        const long row = (long)get_group_id(1) * UG_GEMM_TS + lr;                            \
        const long col = (long)get_group_id(0) * UG_GEMM_TS + lc;                            \
        const long entry = get_global_id(2);                                                 \
        const long first = sum_batch ? 0 : entry, last = sum_batch ? batch : entry + 1;      \
        float acc = 0.0f;                                                                    \
        for (long e = first; e < last; e++) {                                                \
            const long ao = aoff + e * sa, bo = boff + e * sb;                               \
            for (long k0 = 0; k0 < k; k0 += UG_GEMM_TS) {                                    \
                const long ka = k0 + lc, kb = k0 + lr;                                       \
                at[lr][lc] = row < m && ka < k                                               \
                                 ? UG_LD_##TI(a, ao + (ta ? ka * lda + row : row * lda + ka)) \
                                 : 0.0f;                                                     \
                bt[lr][lc] = col < n && kb < k                                               \
                                 ? UG_LD_##TI(b, bo + (tb ? col * ldb + kb : kb * ldb + col)) \
                                 : 0.0f;                                                     \
                barrier(CLK_LOCAL_MEM_FENCE);                                                \
                for (int kk = 0; kk < UG_GEMM_TS; kk++)                                      \
                    acc = fma(at[lr][kk], bt[kk][lc], acc);                                  \
                barrier(CLK_LOCAL_MEM_FENCE);                                                \
            }                                                                                \
        }                                                                                    \
        if (row >= m || col >= n)                                                            \
            return;                                                                          \
        const long p = coff + (sum_batch ? 0 : entry * sc) + row * ldc + col;                \
        /* beta == 0 never reads C (it may hold NaN), as in BLAS. */                         \
        UG_ST_##TO(c, p, beta == 0.0f ? alpha * acc : alpha * acc + beta * UG_LD_##TO(c, p)); \
    }

UG_GEMM_HALF_KERNEL(f16, f32)
UG_GEMM_HALF_KERNEL(f16, f16)
UG_GEMM_HALF_KERNEL(f16, bf16)
UG_GEMM_HALF_KERNEL(bf16, f32)
UG_GEMM_HALF_KERNEL(bf16, f16)
UG_GEMM_HALF_KERNEL(bf16, bf16)
