/* The module's own GEMM, used when no vendor BLAS is loaded (or
 * UG_GEMM=own, or the library lacks a mixed-precision call): row-major
 * C = alpha op(A) op(B) + beta C, batched by strides, any lda/ldb/ldc,
 * offsets and edges. A and B are f32, f16 or bf16, C f32 or A's type; the
 * tiles are staged as f32 and the sum is f32 whatever the types, C rounded
 * once. With sum_batch, one C sums the products of every batch entry in
 * registers before it is stored.
 *
 * 64x64 tile of C per block of 16x16 threads, 4x4 outputs per thread held
 * in registers; K advances 16 at a time through shared memory. A thread's
 * outputs are strided by 16 rows/columns so shared-memory reads are
 * conflict-free and the stores to C coalesce. Tiles are loaded with the
 * stored matrix's contiguous axis across threads, for either transpose. */
#include "kernels/hip/common.h"

#define TM 64 /* tile rows (M) */
#define TN 64 /* tile columns (N) */
#define TK 16 /* depth per step */

typedef struct gemm_k {
    bool ta, tb, sum_batch;
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    float alpha, beta;
    const void *a, *b; /* TA */
    void *c;           /* TC */
} gemm_k;

/* Adds op(A) op(B) of one batch entry, all of K, to a thread's outputs of
 * the tile at (row0, col0), staging the operands' tiles in As and Bs. */
template <typename TA>
UG_DEV void gemm_tile(const gemm_k &g, const TA *A, const TA *B, int64_t row0, int64_t col0,
                      float (*As)[TM + 4], float (*Bs)[TN + 4], float (&acc)[4][4])
{
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
    for (int64_t k0 = 0; k0 < g.k; k0 += TK) {
        /* 1024 elements per tile, 4 per thread. */
        for (int r = 0; r < 4; r++) {
            int i, kk;
            if (!g.ta) { /* A is [m, k]: k contiguous */
                kk = t % TK;
                i = t / TK + r * 16;
            } else {     /* A is [k, m]: m contiguous */
                i = t % TM;
                kk = t / TM + r * 4;
            }
            const int64_t gi = row0 + i, gk = k0 + kk;
            float v = 0.0f;
            if (gi < g.m && gk < g.k)
                v = ug_widen(g.ta ? A[gk * g.lda + gi] : A[gi * g.lda + gk]);
            As[kk][i] = v;
            int j;
            if (!g.tb) { /* B is [k, n]: n contiguous */
                j = t % TN;
                kk = t / TN + r * 4;
            } else {     /* B is [n, k]: k contiguous */
                kk = t % TK;
                j = t / TK + r * 16;
            }
            const int64_t gj = col0 + j, gk2 = k0 + kk;
            v = 0.0f;
            if (gj < g.n && gk2 < g.k)
                v = ug_widen(g.tb ? B[gj * g.ldb + gk2] : B[gk2 * g.ldb + gj]);
            Bs[kk][j] = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                av[r] = As[kk][ty + 16 * r];
                bv[r] = Bs[kk][tx + 16 * r];
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    acc[r][c] += av[r] * bv[c];
        }
        __syncthreads();
    }
}

/* TA: the type of A and B; TC: C's (float, or TA). */
template <typename TA, typename TC>
__global__ __launch_bounds__(256) void ug_gemm_kernel(gemm_k g)
{
    __shared__ float As[TK][TM + 4]; /* As[kk][i] = op(A)(row0 + i, k0 + kk) */
    __shared__ float Bs[TK][TN + 4]; /* Bs[kk][j] = op(B)(k0 + kk, col0 + j) */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles_m = (g.m + TM - 1) / TM;
    const int64_t outputs = g.sum_batch ? 1 : g.batch; /* matrices of C */
    for (int64_t bz = blockIdx.z; bz < outputs; bz += gridDim.z) {
        const int64_t first = g.sum_batch ? 0 : bz, last = g.sum_batch ? g.batch : bz + 1;
        TC *C = (TC *)g.c + bz * g.sc;
        for (int64_t bm = blockIdx.y; bm < tiles_m; bm += gridDim.y) {
            const int64_t row0 = bm * TM, col0 = (int64_t)blockIdx.x * TN;
            float acc[4][4] = {{0.0f}};
            for (int64_t e = first; e < last; e++)
                gemm_tile<TA>(g, (const TA *)g.a + e * g.sa, (const TA *)g.b + e * g.sb, row0,
                              col0, As, Bs, acc);
            for (int r = 0; r < 4; r++) {
                const int64_t gi = row0 + ty + 16 * r;
                if (gi >= g.m)
                    continue;
                for (int c = 0; c < 4; c++) {
                    const int64_t gj = col0 + tx + 16 * c;
                    if (gj >= g.n)
                        continue;
                    TC *p = C + gi * g.ldc + gj;
                    /* beta == 0 never reads C (it may hold NaN), as in BLAS. */
                    *p = ug_narrow<TC>(g.beta == 0.0f
                                           ? g.alpha * acc[r][c]
                                           : g.alpha * acc[r][c] + g.beta * ug_widen(*p));
                }
            }
        }
    }
}

ug_status ug_hip_gemm_own(ug_bdev *dev, const ug_gemm_args *a)
{
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    gemm_k g;
    g.ta = a->trans_a;
    g.tb = a->trans_b;
    g.sum_batch = a->sum_batch;
    g.m = a->m;
    g.n = a->n;
    g.k = a->k;
    g.lda = a->lda;
    g.ldb = a->ldb;
    g.ldc = a->ldc;
    g.sa = a->stride_a;
    g.sb = a->stride_b;
    g.sc = a->stride_c;
    g.batch = a->batch;
    g.alpha = a->alpha;
    g.beta = a->beta;
    g.a = ug_hip_ptr(&a->a);
    g.b = ug_hip_ptr(&a->b);
    g.c = ug_hip_ptr(&a->c);
    const int64_t tiles_n = (a->n + TN - 1) / TN, tiles_m = (a->m + TM - 1) / TM;
    const int64_t outputs = a->sum_batch ? 1 : a->batch;
    if (tiles_n > INT32_MAX / 256)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: gemm with n = %lld is too wide",
                                      UG_HIP_BACKEND, (long long)a->n);
    const dim3 grid((unsigned)tiles_n, (unsigned)(tiles_m < UG_HIP_MAX_GRID ? tiles_m : UG_HIP_MAX_GRID),
                    (unsigned)(outputs < UG_HIP_MAX_GRID ? outputs : UG_HIP_MAX_GRID));
    return ug_with_type(a->a.dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        if (a->c.dtype == UG_F32)
            ug_gemm_kernel<T, float><<<grid, dim3(16, 16), 0, ug_hip_current(dev)->stream>>>(g);
        else
            ug_gemm_kernel<T, T><<<grid, dim3(16, 16), 0, ug_hip_current(dev)->stream>>>(g);
        return ug_hip_launched("gemm");
    });
}
