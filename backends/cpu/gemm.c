/* GEMM through OpenBLAS's cblas_sgemm, called in place on the buffers (no
 * copies). OpenBLAS runs single-threaded inside our pool's tasks, each on a
 * tile of C, so one thread budget covers every op: OpenBLAS's own threads
 * would spin beside ours between calls and oversubscribe the cores. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* cpu_set_t in OpenBLAS's cblas.h */
#endif
#include <cblas.h>
#include <limits.h>
#include <stdbool.h>

#include "backends/cpu/internal.h"

/* cblas checks its arguments and prints to stderr when one is bad, so every
 * value is made valid here first. A leading dimension only matters with more
 * than one row; with one row any value is fine, and cblas still wants at
 * least the row length. */
static ug_status fix_ld(const char *name, int64_t rows, int64_t cols, int64_t *ld)
{
    int64_t need = cols > 1 ? cols : 1;
    if (rows <= 1 && *ld < need)
        *ld = need;
    if (*ld < need)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT,
                            "cpu gemm: %s = %lld is less than the row length %lld", name,
                            (long long)*ld, (long long)cols);
    if (*ld > INT_MAX)
        return UG_CPU_ERROR(UG_ERR_UNSUPPORTED,
                            "cpu gemm: %s = %lld exceeds OpenBLAS's 32-bit integer range", name,
                            (long long)*ld);
    return UG_OK;
}

/* k == 0: the product is empty, C = beta * C (beta == 0 writes zeros
 * without reading C, as BLAS does). */
static void scale_c(float *c, int64_t m, int64_t n, int64_t ldc, float beta)
{
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (beta == 0.0f)
            for (int64_t j = 0; j < n; j++)
                row[j] = 0.0f;
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++)
                row[j] *= beta;
    }
}

/* Smallest tile, in multiply-adds, worth a thread of its own. */
#define UG_CPU_GEMM_MIN_TILE_WORK (64 * 64 * 64)

typedef struct gemm_job {
    const ug_gemm_args *g;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    bool split_rows;     /* tiles are rows of C (else columns) */
    int64_t tile, tiles; /* tile length, tiles per batch entry */
} gemm_job;

/* Task u: one tile of C[b] (b = u / tiles), or with sum_batch one tile of
 * the one C, summed over every b in order (so no partial results meet). */
static void gemm_range(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *j = ctx;
    const ug_gemm_args *g = j->g;
    for (int64_t u = begin; u < end; u++) {
        const int64_t start = u % j->tiles * j->tile;
        const int64_t first = g->sum_batch ? 0 : u / j->tiles;
        const int64_t last = g->sum_batch ? g->batch : first + 1;
        for (int64_t b = first; b < last; b++) {
            const float *a = j->a + b * g->stride_a, *bm = j->b + b * g->stride_b;
            float *c = j->c + (g->sum_batch ? 0 : b * g->stride_c);
            int64_t m = g->m, n = g->n;
            if (j->split_rows) {
                m = g->m - start < j->tile ? g->m - start : j->tile;
                a += g->trans_a ? start : start * j->lda; /* A is k x m when transposed */
                c += start * j->ldc;
            } else {
                n = g->n - start < j->tile ? g->n - start : j->tile;
                bm += g->trans_b ? start * j->ldb : start; /* B is n x k when transposed */
                c += start;
            }
            cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                        g->trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
                        (blasint)g->k, g->alpha, a, (blasint)j->lda, bm, (blasint)j->ldb,
                        b > first ? 1.0f : g->beta, c, (blasint)j->ldc);
        }
    }
}

ug_status ug_cpu_gemm(ug_bdev *dev, const ug_gemm_args *args)
{
    const ug_gemm_args *g = args;
    if (g->a.dtype != UG_F32 || g->b.dtype != UG_F32 || g->c.dtype != UG_F32)
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu gemm: only f32 is supported (got %s, %s -> %s)",
                            ug_dtype_name(g->a.dtype), ug_dtype_name(g->b.dtype),
                            ug_dtype_name(g->c.dtype));
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT,
                            "cpu gemm: negative size m=%lld n=%lld k=%lld batch=%lld",
                            (long long)g->m, (long long)g->n, (long long)g->k,
                            (long long)g->batch);
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return UG_OK;
    if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX)
        return UG_CPU_ERROR(UG_ERR_UNSUPPORTED,
                            "cpu gemm: m=%lld n=%lld k=%lld exceed OpenBLAS's 32-bit integer range",
                            (long long)g->m, (long long)g->n, (long long)g->k);
    float *c = (float *)ug_cpu_ptr(g->c);
    int64_t ldc = g->ldc;
    ug_status st = fix_ld("ldc", g->m, g->n, &ldc);
    if (st != UG_OK)
        return st;
    if (g->k == 0) {
        for (int64_t b = 0; b < (g->sum_batch ? 1 : g->batch); b++)
            scale_c(c + b * g->stride_c, g->m, g->n, ldc, g->beta);
        return UG_OK;
    }
    /* Stored shapes: A is m x k (k x m transposed), B is k x n (n x k). */
    int64_t lda = g->lda, ldb = g->ldb;
    st = fix_ld("lda", g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, &lda);
    if (st == UG_OK)
        st = fix_ld("ldb", g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, &ldb);
    if (st != UG_OK)
        return st;
    gemm_job job = {.g = g, .a = (const float *)ug_cpu_ptr(g->a),
                    .b = (const float *)ug_cpu_ptr(g->b), .c = c,
                    .lda = lda, .ldb = ldb, .ldc = ldc};
    /* Split C's longer side so every thread has a tile even for one GEMM,
     * in multiples of 16 (whole SIMD panels), and only while a tile keeps
     * enough work to pay for its packing. */
    job.split_rows = g->m >= g->n;
    int64_t side = job.split_rows ? g->m : g->n;
    int64_t work = g->m * g->n * g->k * (g->sum_batch ? g->batch : 1), parts = 1;
    if (g->sum_batch || g->batch < dev->threads) {
        parts = dev->threads;
        while (parts > 1 && (work / parts < UG_CPU_GEMM_MIN_TILE_WORK || side / parts < 16))
            parts--;
    }
    job.tile = (side + parts - 1) / parts;
    job.tile = (job.tile + 15) / 16 * 16;
    job.tiles = (side + job.tile - 1) / job.tile;
    ug_cpu_parallel_for(dev->pool, (g->sum_batch ? 1 : g->batch) * job.tiles, 1, gemm_range, &job);
    return UG_OK;
}
