/* GEMM through OpenBLAS's cblas_sgemm, or oneDNN's dnnl_sgemm where the
 * library is built with oneDNN, called in place on f32 buffers (no
 * copies). Either runs single-threaded inside our workers' tasks, each on a
 * tile of C, so one thread budget covers every op: OpenBLAS's own threads
 * would spin beside ours between calls and oversubscribe the cores.
 * oneDNN's kernels are generated for the processor at hand (AVX-512 where
 * it has it), where Debian's OpenBLAS 0.3.21 falls back to its Haswell
 * kernels on processors newer than it knows: the MLP's products at batch
 * 64 took 2x as long through OpenBLAS on an AVX-512 Zen 5.
 *
 * bf16 operands on a processor with native bf16 products (AVX512-BF16,
 * AMX): each tile through oneDNN's matmul (matmul_bf16.c). f16 operands,
 * and bf16 elsewhere: each task widens the panels of A and B its tile
 * reads (and C's tile when it is half) to f32, multiplies with sgemm and
 * rounds C once (Debian's OpenBLAS is built without its bf16 kernels). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* cpu_set_t in OpenBLAS's cblas.h */
#endif
#include <cblas.h>
#include <limits.h>
#ifdef UG_CPU_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif
#include <stdbool.h>
#include <stdlib.h>

#include "backends/cpu/internal.h"
#include "backends/cpu/matmul_bf16.h"
#include "backends/gemm_helpers.h"

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

/* Row-major C = alpha op(A) op(B) + beta C on f32, sizes checked, on the
 * calling thread alone: the tiles are the parallelism. */
static void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                  int64_t ldc)
{
#ifdef UG_CPU_ONEDNN
    dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc);
#else
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
#endif
}

/* k == 0: the product is empty, C = beta * C (beta == 0 writes zeros
 * without reading C, as BLAS does). */
static void scale_c(char *c, ug_dtype dtype, int64_t m, int64_t n, int64_t ldc, float beta,
                    float *row)
{
    for (int64_t i = 0; i < m; i++) {
        char *dst = c + i * ldc * (int64_t)ug_dtype_size(dtype);
        if (beta == 1.0f)
            continue;
        if (beta == 0.0f)
            for (int64_t j = 0; j < n; j++)
                row[j] = 0.0f;
        else
            ug_cpu_load(dst, dtype, 1, n, row);
        for (int64_t j = 0; beta != 0.0f && j < n; j++)
            row[j] *= beta;
        ug_cpu_store(dst, dtype, n, row);
    }
}

/* Smallest tile, in multiply-adds, worth a thread of its own. */
#define UG_CPU_GEMM_MIN_TILE_WORK (64 * 64 * 64)

typedef struct gemm_job {
    ug_bdev *dev;
    const ug_gemm_args *g;
    const char *a, *b;
    char *c;
    size_t a_size, c_size;   /* element bytes: A's and B's, C's */
    int64_t lda, ldb, ldc;
    bool split_rows;     /* tiles are rows of C (else columns) */
    bool tile_epilogue;  /* each tile applies the epilogue to its rows */
    bool failed;         /* a tile's f32 copies or scratchpad could not be allocated */
    ug_status epilogue;  /* a tile's epilogue's refusal, its message set (atomic) */
    int64_t tile, tiles; /* tile length, tiles per batch entry */
} gemm_job;

/* A stored rows x cols matrix (row stride ld) of dtype as dense f32. */
static void widen(const char *src, ug_dtype dtype, int64_t rows, int64_t cols, int64_t ld,
                  float *dst)
{
    for (int64_t r = 0; r < rows; r++)
        ug_cpu_load(src + r * ld * (int64_t)ug_dtype_size(dtype), dtype, 1, cols, dst + r * cols);
}

/* One tile of C (m x n): C = alpha sum over batch entries [first, last) of
 * op(A[b]) op(B[b]) + beta C, the sum in order (so no partial results
 * meet). f32 runs in place; halves through f32 copies of the tile's panels,
 * C rounded once after the whole sum. a, b and c point at the tile in
 * entry first; entry b's operands are stride_a and stride_b further. */
static bool tile_gemm(const gemm_job *j, int64_t first, int64_t last, int64_t m, int64_t n,
                      const char *a, const char *b, char *c)
{
    const ug_gemm_args *g = j->g;
    const int64_t k = g->k, as = (int64_t)j->a_size;
#ifdef UG_CPU_ONEDNN
    if (g->a.dtype == UG_BF16 && ug_cpu_native_bf16()) {
        const ug_cpu_product p = {.trans_a = g->trans_a, .trans_b = g->trans_b, .m = m, .n = n, .k = k,
                                  .lda = j->lda, .ldb = j->ldb, .ldc = j->ldc, .stride_a = g->stride_a,
                                  .stride_b = g->stride_b, .entries = last - first, .alpha = g->alpha,
                                  .beta = g->beta, .a = a, .b = b, .c = c, .c_dtype = g->c.dtype};
        ug_cpu_product_result r = ug_cpu_matmul_bf16(j->dev->matmuls, &p);
        if (r != UG_CPU_PRODUCT_NOT_TAKEN)
            return r == UG_CPU_PRODUCT_DONE;
    }
#endif
    if (g->a.dtype == UG_F32 && g->c.dtype == UG_F32) {
        for (int64_t e = first; e < last; e++)
            sgemm(g->trans_a, g->trans_b, m, n, k, g->alpha,
                  (const float *)a + (e - first) * g->stride_a, j->lda,
                  (const float *)b + (e - first) * g->stride_b, j->ldb, e > first ? 1.0f : g->beta,
                  (float *)c, j->ldc);
        return true;
    }
    /* Stored shapes: A is m x k (k x m transposed), B is k x n (n x k). */
    const int64_t a_rows = g->trans_a ? k : m, a_cols = g->trans_a ? m : k;
    const int64_t b_rows = g->trans_b ? n : k, b_cols = g->trans_b ? k : n;
    const bool half_c = g->c.dtype != UG_F32;
    float *wa = malloc((size_t)(a_rows * a_cols + b_rows * b_cols + (half_c ? m * n : 0)) *
                       sizeof(float));
    if (!wa)
        return false;
    float *wb = wa + a_rows * a_cols, *wc = half_c ? wb + b_rows * b_cols : (float *)c;
    const int64_t ldc = half_c ? n : j->ldc;
    if (half_c && g->beta != 0.0f)
        widen(c, g->c.dtype, m, n, j->ldc, wc);
    for (int64_t e = first; e < last; e++) {
        widen(a + (e - first) * g->stride_a * as, g->a.dtype, a_rows, a_cols, j->lda, wa);
        widen(b + (e - first) * g->stride_b * as, g->b.dtype, b_rows, b_cols, j->ldb, wb);
        sgemm(g->trans_a, g->trans_b, m, n, k, g->alpha, wa, a_cols, wb, b_cols,
              e > first ? 1.0f : g->beta, wc, ldc);
    }
    if (half_c)
        for (int64_t r = 0; r < m; r++)
            ug_cpu_store(c + r * j->ldc * (int64_t)j->c_size, g->c.dtype, n, wc + r * n);
    free(wa);
    return true;
}

/* tile_gemm with oneDNN on the calling thread alone. Inside a parallel
 * region (a job on OpenMP's team, threads.c) it runs so by itself. Outside
 * one (the device's own workers, or a tile run inline) it would start a
 * team of every CPU's size: one thread for the tile, the thread's setting
 * given back after. */
static bool single_threaded_tile(const gemm_job *j, int64_t first, int64_t last, int64_t m,
                                 int64_t n, const char *a, const char *b, char *c)
{
#ifdef UG_CPU_ONEDNN
    const bool outside = !omp_in_parallel();
    const int before = outside ? omp_get_max_threads() : 1;
    if (outside)
        omp_set_num_threads(1);
    bool ok = tile_gemm(j, first, last, m, n, a, b, c);
    if (outside)
        omp_set_num_threads(before);
    return ok;
#else
    return tile_gemm(j, first, last, m, n, a, b, c);
#endif
}

/* Task u: one tile of C[b] (b = u / tiles), or with sum_batch one tile of
 * the one C, summed over every b. A half tile whose f32 copies cannot be
 * allocated sets failed. */
static void gemm_range(void *ctx, int64_t begin, int64_t end)
{
    gemm_job *j = ctx;
    const ug_gemm_args *g = j->g;
    const int64_t as = (int64_t)j->a_size, cs = (int64_t)j->c_size;
    for (int64_t u = begin; u < end; u++) {
        const int64_t start = u % j->tiles * j->tile;
        const int64_t first = g->sum_batch ? 0 : u / j->tiles;
        const int64_t last = g->sum_batch ? g->batch : first + 1;
        const char *a = j->a + first * g->stride_a * as, *bm = j->b + first * g->stride_b * as;
        char *c = j->c + (g->sum_batch ? 0 : first * g->stride_c * cs);
        int64_t m = g->m, n = g->n;
        if (j->split_rows) {
            m = g->m - start < j->tile ? g->m - start : j->tile;
            a += (g->trans_a ? start : start * j->lda) * as; /* A is k x m when transposed */
            c += start * j->ldc * cs;
        } else {
            n = g->n - start < j->tile ? g->n - start : j->tile;
            bm += (g->trans_b ? start * j->ldb : start) * as; /* B is n x k when transposed */
            c += start * cs;
        }
        if (!single_threaded_tile(j, first, last, m, n, a, bm, c))
            __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
        else if (j->tile_epilogue) { /* on the rows still in this core's cache; nested: runs inline */
            ug_binary_args op;
            ug_gemm_epilogue_rows(g, first * g->m + start, m, &op);
            const ug_status st = ug_cpu_binary(j->dev, &op);
            if (st != UG_OK)
                __atomic_store_n(&j->epilogue, st, __ATOMIC_RELAXED);
        }
    }
}

/* The product, with the epilogue too where its tiles are C's rows. */
static ug_status gemm_product(ug_bdev *dev, const ug_gemm_args *args, bool *epilogue_done)
{
    const ug_gemm_args *g = args;
    if (!ug_cpu_float_dtype(g->a.dtype) || g->b.dtype != g->a.dtype ||
        (g->c.dtype != UG_F32 && g->c.dtype != g->a.dtype))
        return UG_CPU_ERROR(UG_ERR_DTYPE,
                            "cpu gemm: A and B must share f32, f16 or bf16 and C be f32 or A's "
                            "dtype (got %s, %s -> %s)",
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
    char *c = ug_cpu_ptr(g->c);
    const size_t c_size = ug_dtype_size(g->c.dtype);
    int64_t ldc = g->ldc;
    ug_status st = fix_ld("ldc", g->m, g->n, &ldc);
    if (st != UG_OK)
        return st;
    if (g->k == 0) {
        float *row = malloc((size_t)g->n * sizeof(float));
        if (!row)
            return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu gemm: no host memory for a row of %lld",
                                (long long)g->n);
        for (int64_t b = 0; b < (g->sum_batch ? 1 : g->batch); b++)
            scale_c(c + b * g->stride_c * (int64_t)c_size, g->c.dtype, g->m, g->n, ldc, g->beta,
                    row);
        free(row);
        return UG_OK;
    }
    /* Stored shapes: A is m x k (k x m transposed), B is k x n (n x k). */
    int64_t lda = g->lda, ldb = g->ldb;
    st = fix_ld("lda", g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, &lda);
    if (st == UG_OK)
        st = fix_ld("ldb", g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, &ldb);
    if (st != UG_OK)
        return st;
    gemm_job job = {.dev = dev, .g = g, .a = ug_cpu_ptr(g->a), .b = ug_cpu_ptr(g->b), .c = c,
                    .a_size = ug_dtype_size(g->a.dtype), .c_size = c_size,
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
    job.tile_epilogue = *epilogue_done = g->epi.operand.mem && job.split_rows;
    ug_cpu_parallel_for(dev->workers, (g->sum_batch ? 1 : g->batch) * job.tiles, 1, gemm_range, &job);
    if (job.epilogue != UG_OK)
        return job.epilogue;
    if (job.failed)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY,
                            "cpu gemm: no host memory for the f32 copies or the scratchpad of a "
                            "%s tile (m=%lld n=%lld k=%lld); free memory or use smaller batches",
                            ug_dtype_name(g->a.dtype), (long long)g->m, (long long)g->n,
                            (long long)g->k);
    return UG_OK;
}

/* The product, then a graph's epilogue folded in (ug_gemm_args): by each
 * tile of rows as it finishes, or in a pass of its own. */
ug_status ug_cpu_gemm(ug_bdev *dev, const ug_gemm_args *args)
{
    bool epilogue_done = false;
    ug_status st = gemm_product(dev, args, &epilogue_done);
    return st == UG_OK && !epilogue_done ? ug_gemm_epilogue_by_binary(dev, args, ug_cpu_binary) : st;
}
