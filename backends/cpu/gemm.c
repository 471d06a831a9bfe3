/* GEMM through OpenBLAS's cblas_sgemm, called in place on the buffers (no
 * copies), once per batch entry. OpenBLAS threads each call with the budget
 * set at device_open while our pool sleeps. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* cpu_set_t in OpenBLAS's cblas.h */
#endif
#include <cblas.h>
#include <limits.h>

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

ug_status ug_cpu_gemm(ug_bdev *dev, const ug_gemm_args *args)
{
    (void)dev;
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
        for (int64_t b = 0; b < g->batch; b++)
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
    const float *a = (const float *)ug_cpu_ptr(g->a);
    const float *bm = (const float *)ug_cpu_ptr(g->b);
    for (int64_t b = 0; b < g->batch; b++)
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, (blasint)g->m, (blasint)g->n,
                    (blasint)g->k, g->alpha, a + b * g->stride_a, (blasint)lda,
                    bm + b * g->stride_b, (blasint)ldb, g->beta, c + b * g->stride_c,
                    (blasint)ldc);
    return UG_OK;
}
