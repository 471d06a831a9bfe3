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

/* C = alpha op(A) B + beta C in f32 for CPU devices (POCL), where
 * CLBlast's kernels, made for GPUs' local memory and work-groups, reach a
 * quarter of this: each work-item alone computes an 8 x 32 tile of C in
 * sixteen 16-wide registers, B's row read as two vectors and A's element
 * broadcast, K times (the outer-product microkernel of CPU BLAS). N is at
 * least 32: the last column tile is moved back inside C and stores only
 * the columns the tile before it left (gathering B's columns up to C's
 * edge instead made the MLP's 500 x 784 x 64 weight gradient about 15%
 * slower); rows past C's edge read a clamped address and store nothing.
 * One work-item a work-group: nothing to share, no barriers. Named
 * registers and pointers, not arrays indexed by row: POCL kept arrays of
 * them in memory (93 against 305 GFLOP/s at 512^3). */
#define UG_TILED_ROW(r)                                                                   \
    {                                                                                     \
        const float16 x = (float16)(a##r[p * ps]);                                        \
        lo##r = fma(x, b0, lo##r);                                                        \
        hi##r = fma(x, b1, hi##r);                                                        \
    }
#define UG_TILED_STORE(r)                                                                 \
    if (r0 + r < m) {                                                                     \
        global float *cr = ce + (r0 + r) * ldc + c0;                                      \
        if (skip == 0) {                                                                  \
            vstore16(beta == 0.0f ? alpha * lo##r : alpha * lo##r + beta * vload16(0, cr), 0, cr); \
            vstore16(beta == 0.0f ? alpha * hi##r : alpha * hi##r + beta * vload16(0, cr + 16), 0, cr + 16); \
        } else {                                                                          \
            float out[32];                                                                \
            vstore16(lo##r, 0, out);                                                      \
            vstore16(hi##r, 1, out);                                                      \
            for (int j = skip; j < 32; j++)                                               \
                cr[j] = beta == 0.0f ? alpha * out[j] : alpha * out[j] + beta * cr[j];    \
        }                                                                                 \
    }
kernel void gemm_f32_tiled(global float *c, ulong coff, const global float *a, ulong aoff,
                           const global float *b, ulong boff, long m, long n, long k, long lda,
                           long ldb, long ldc, long sa, long sb, long sc, long entries, int ta,
                           float alpha, float beta)
{
    const long first = (long)get_global_id(0) * 32, r0 = (long)get_global_id(1) * 8;
    const long c0 = min(first, n - 32), skip = first - c0;
    const long e = get_global_id(2);
    const long rs = ta ? 1 : lda, ps = ta ? lda : 1;
    float16 lo0 = 0.0f, lo1 = 0.0f, lo2 = 0.0f, lo3 = 0.0f, lo4 = 0.0f, lo5 = 0.0f, lo6 = 0.0f, lo7 = 0.0f;
    float16 hi0 = 0.0f, hi1 = 0.0f, hi2 = 0.0f, hi3 = 0.0f, hi4 = 0.0f, hi5 = 0.0f, hi6 = 0.0f, hi7 = 0.0f;
    for (long t = 0; t < entries; t++) { /* entries summed into one C (sum_batch), or 1 */
        const global float *ae = a + aoff + (e + t) * sa, *be = b + boff + (e + t) * sb;
        const global float *a0 = ae + min(r0 + 0, m - 1) * rs, *a1 = ae + min(r0 + 1, m - 1) * rs,
                           *a2 = ae + min(r0 + 2, m - 1) * rs, *a3 = ae + min(r0 + 3, m - 1) * rs,
                           *a4 = ae + min(r0 + 4, m - 1) * rs, *a5 = ae + min(r0 + 5, m - 1) * rs,
                           *a6 = ae + min(r0 + 6, m - 1) * rs, *a7 = ae + min(r0 + 7, m - 1) * rs;
        for (long p = 0; p < k; p++) {
            const global float *bp = be + p * ldb + c0;
            const float16 b0 = vload16(0, bp), b1 = vload16(0, bp + 16);
            UG_TILED_ROW(0) UG_TILED_ROW(1) UG_TILED_ROW(2) UG_TILED_ROW(3)
            UG_TILED_ROW(4) UG_TILED_ROW(5) UG_TILED_ROW(6) UG_TILED_ROW(7)
        }
    }
    global float *ce = c + coff + e * sc;
    UG_TILED_STORE(0) UG_TILED_STORE(1) UG_TILED_STORE(2) UG_TILED_STORE(3)
    UG_TILED_STORE(4) UG_TILED_STORE(5) UG_TILED_STORE(6) UG_TILED_STORE(7)
}

/* C = alpha A B^T + beta C in f32 for CPU devices, B's rows being C's
 * columns (a linear layer's forward, weights [out, in]): each work-item a
 * 4 x 4 tile of dot products along K, 16 at a time in sixteen 16-wide
 * registers summed across at the end. Named registers, not arrays: POCL
 * kept a [4][4] array of them in memory (69 against 153 GFLOP/s). Rows
 * and columns past C's edge read clamped addresses and store nothing.
 * Rows of C vary fastest between work-items: the ones that run one after
 * another on a core then share B's four rows (a layer's weights), which
 * stay in its cache, where columns first streamed the whole of B once
 * per row tile (64 x 500 x 784: 15-28% slower). */
#define UG_NT_ROW(i)                                                                      \
    {                                                                                     \
        const float16 x = vload16(0, a##i + p);                                           \
        acc##i##0 = fma(x, w0, acc##i##0);                                                \
        acc##i##1 = fma(x, w1, acc##i##1);                                                \
        acc##i##2 = fma(x, w2, acc##i##2);                                                \
        acc##i##3 = fma(x, w3, acc##i##3);                                                \
    }
kernel void gemm_f32_nt(global float *c, ulong coff, const global float *a, ulong aoff,
                        const global float *b, ulong boff, long m, long n, long k, long lda,
                        long ldb, long ldc, long sa, long sb, long sc, long entries, int ta,
                        float alpha, float beta)
{
    (void)ta; /* A is never transposed here */
    const long r0 = (long)get_global_id(0) * 4, c0 = (long)get_global_id(1) * 4;
    const long e = get_global_id(2);
    float16 acc00 = 0.0f, acc01 = 0.0f, acc02 = 0.0f, acc03 = 0.0f, acc10 = 0.0f, acc11 = 0.0f,
            acc12 = 0.0f, acc13 = 0.0f, acc20 = 0.0f, acc21 = 0.0f, acc22 = 0.0f, acc23 = 0.0f,
            acc30 = 0.0f, acc31 = 0.0f, acc32 = 0.0f, acc33 = 0.0f;
    /* entries > 1 (summed into one C) only with K a multiple of 16: the
     * scalar tail below reads the last entry's rows */
    const global float *a0, *a1, *a2, *a3, *b0, *b1, *b2, *b3;
    long p = 0;
    for (long t = 0; t < entries; t++) {
        const global float *ae = a + aoff + (e + t) * sa, *be = b + boff + (e + t) * sb;
        a0 = ae + min(r0, m - 1) * lda;
        a1 = ae + min(r0 + 1, m - 1) * lda;
        a2 = ae + min(r0 + 2, m - 1) * lda;
        a3 = ae + min(r0 + 3, m - 1) * lda;
        b0 = be + min(c0, n - 1) * ldb;
        b1 = be + min(c0 + 1, n - 1) * ldb;
        b2 = be + min(c0 + 2, n - 1) * ldb;
        b3 = be + min(c0 + 3, n - 1) * ldb;
        for (p = 0; p + 16 <= k; p += 16) {
            const float16 w0 = vload16(0, b0 + p), w1 = vload16(0, b1 + p), w2 = vload16(0, b2 + p),
                          w3 = vload16(0, b3 + p);
            UG_NT_ROW(0)
            UG_NT_ROW(1)
            UG_NT_ROW(2)
            UG_NT_ROW(3)
        }
    }
    const float16 sums[16] = {acc00, acc01, acc02, acc03, acc10, acc11, acc12, acc13,
                              acc20, acc21, acc22, acc23, acc30, acc31, acc32, acc33};
    const global float *rows[4] = {a0, a1, a2, a3}, *cols[4] = {b0, b1, b2, b3};
    global float *ce = c + coff + e * sc;
    for (int i = 0; i < 4 && r0 + i < m; i++)
        for (int j = 0; j < 4 && c0 + j < n; j++) {
            const float16 v = sums[i * 4 + j];
            const float8 h8 = v.lo + v.hi;
            const float4 h4 = h8.lo + h8.hi;
            float s = (h4.x + h4.y) + (h4.z + h4.w);
            for (long q = p; q < k; q++)
                s = fma(rows[i][q], cols[j][q], s);
            global float *cp = ce + (r0 + i) * ldc + c0 + j;
            *cp = beta == 0.0f ? alpha * s : alpha * s + beta * *cp;
        }
}
