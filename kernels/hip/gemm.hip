/* The module's own SGEMM, used when no vendor BLAS is loaded (or
 * UG_GEMM=own): row-major C = alpha op(A) op(B) + beta C, batched by
 * strides, any lda/ldb/ldc, offsets and edges.
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
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_k;

__global__ __launch_bounds__(256) void ug_gemm_kernel(gemm_k g)
{
    __shared__ float As[TK][TM + 4]; /* As[kk][i] = op(A)(row0 + i, k0 + kk) */
    __shared__ float Bs[TK][TN + 4]; /* Bs[kk][j] = op(B)(k0 + kk, col0 + j) */
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
    const int64_t tiles_m = (g.m + TM - 1) / TM;
    for (int64_t bz = blockIdx.z; bz < g.batch; bz += gridDim.z) {
        const float *A = g.a + bz * g.sa, *B = g.b + bz * g.sb;
        float *C = g.c + bz * g.sc;
        for (int64_t bm = blockIdx.y; bm < tiles_m; bm += gridDim.y) {
            const int64_t row0 = bm * TM, col0 = (int64_t)blockIdx.x * TN;
            float acc[4][4] = {{0.0f}};
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
                        v = g.ta ? A[gk * g.lda + gi] : A[gi * g.lda + gk];
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
                        v = g.tb ? B[gj * g.ldb + gk2] : B[gk2 * g.ldb + gj];
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
            for (int r = 0; r < 4; r++) {
                const int64_t gi = row0 + ty + 16 * r;
                if (gi >= g.m)
                    continue;
                for (int c = 0; c < 4; c++) {
                    const int64_t gj = col0 + tx + 16 * c;
                    if (gj >= g.n)
                        continue;
                    float *p = C + gi * g.ldc + gj;
                    /* beta == 0 never reads C (it may hold NaN), as in BLAS. */
                    *p = g.beta == 0.0f ? g.alpha * acc[r][c] : g.alpha * acc[r][c] + g.beta * *p;
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
    g.a = (const float *)ug_hip_ptr(&a->a);
    g.b = (const float *)ug_hip_ptr(&a->b);
    g.c = (float *)ug_hip_ptr(&a->c);
    const int64_t tiles_n = (a->n + TN - 1) / TN, tiles_m = (a->m + TM - 1) / TM;
    if (tiles_n > INT32_MAX / 256)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: gemm with n = %lld is too wide",
                                      UG_HIP_BACKEND, (long long)a->n);
    const dim3 grid((unsigned)tiles_n, (unsigned)(tiles_m < UG_HIP_MAX_GRID ? tiles_m : UG_HIP_MAX_GRID),
                    (unsigned)(a->batch < UG_HIP_MAX_GRID ? a->batch : UG_HIP_MAX_GRID));
    ug_gemm_kernel<<<grid, dim3(16, 16), 0, dev->stream>>>(g);
    return ug_hip_launched("gemm");
}
