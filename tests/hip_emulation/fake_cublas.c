/* A stand-in libcublas.so.13 for the emulated module: the cuBLAS entry
 * points backends/hip/gemm.cpp resolves with dlsym, with cuBLAS's
 * column-major semantics, on host memory (the emulator's device memory).
 *
 * It exists to test the module's row-major to column-major mapping (swap A
 * and B, m and n, and the transposes) against the suite's row-major
 * reference. The f32 GEMMs sum in double, so any error is the mapping's;
 * the mixed-precision ones (GemmEx, GemmStridedBatchedEx: f16 or bf16 A
 * and B, C f32 or theirs) sum in f32 as cuBLAS's CUBLAS_COMPUTE_32F does,
 * converting with the library's host conversions (base/dtype.c). Like
 * cuBLAS it rejects a leading dimension below the rows of the stored
 * matrix (CUBLAS_STATUS_INVALID_VALUE), which the module must never pass,
 * and type combinations cuBLAS does not run (CUBLAS_STATUS_NOT_SUPPORTED).
 *
 * A GEMM is work on its handle's stream (cublasSetStream), handed to the
 * emulated runtime (ug_emu_stream_work, found in the emulated module that
 * loaded this library), so that a captured stream records it for its
 * graph's replays as it does the kernels, as cuBLAS's work is captured. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "fake_stream_work.h"
#include "unigrad/dtype.h"

#define FAKE_STATUS_SUCCESS 0
#define FAKE_STATUS_INVALID_VALUE 7
#define FAKE_STATUS_NOT_SUPPORTED 15
#define FAKE_OP_N 0
#define FAKE_OP_T 1
/* cudaDataType (library_types.h) and cuBLAS's compute type and algorithm. */
#define FAKE_R_32F 0
#define FAKE_R_16F 2
#define FAKE_R_16BF 14
#define FAKE_COMPUTE_32F 68
#define FAKE_GEMM_DEFAULT (-1)

static int g_calls, g_ex_calls, g_live_handles, g_math_mode;

/* Handles: their streams (each of the module's queues creates one). */
enum { MAX_HANDLES = 64 };
typedef struct fake_handle {
    bool live;
    void *stream;
    size_t workspace_bytes; /* cublasSetWorkspace's, 0: none */
} fake_handle;
static fake_handle g_handles[MAX_HANDLES];

static fake_handle *handle_of(void *handle)
{
    fake_handle *h = handle;
    return h >= g_handles && h < g_handles + MAX_HANDLES && h->live ? h : NULL;
}

/* Not in cuBLAS: the test finds these to know this library was loaded,
 * and which calls the module made (ex: the mixed-precision ones; the math
 * mode last set, which these GEMMs do not emulate: they always sum in the
 * compute type). */
int ug_fake_cublas_calls(void) { return g_calls; }
int ug_fake_cublas_ex_calls(void) { return g_ex_calls; }
int ug_fake_cublas_live_handles(void) { return g_live_handles; }
int ug_fake_cublas_math_mode(void) { return g_math_mode; }
/* Live handles given a workspace (cublasSetWorkspace) of at least 4 MiB,
 * which a captured stream's GEMMs need to allocate nothing. */
int ug_fake_cublas_workspace_handles(void)
{
    int n = 0;
    for (int i = 0; i < MAX_HANDLES; i++)
        n += g_handles[i].live && g_handles[i].workspace_bytes >= ((size_t)4 << 20);
    return n;
}

int cublasCreate_v2(void **handle)
{
    for (int i = 0; i < MAX_HANDLES; i++)
        if (!g_handles[i].live) {
            g_handles[i] = (fake_handle){.live = true};
            *handle = &g_handles[i];
            g_live_handles++;
            return FAKE_STATUS_SUCCESS;
        }
    return FAKE_STATUS_INVALID_VALUE;
}

int cublasDestroy_v2(void *handle)
{
    fake_handle *h = handle_of(handle);
    if (!h)
        return FAKE_STATUS_INVALID_VALUE;
    h->live = false;
    g_live_handles--;
    return FAKE_STATUS_SUCCESS;
}

int cublasSetStream_v2(void *handle, void *stream)
{
    fake_handle *h = handle_of(handle);
    if (!h)
        return FAKE_STATUS_INVALID_VALUE;
    h->stream = stream;
    return FAKE_STATUS_SUCCESS;
}

int cublasSetWorkspace_v2(void *handle, void *workspace, size_t bytes)
{
    fake_handle *h = handle_of(handle);
    if (!h || (bytes && !workspace))
        return FAKE_STATUS_INVALID_VALUE;
    h->workspace_bytes = bytes;
    return FAKE_STATUS_SUCCESS;
}

int cublasSetMathMode(void *handle, int mode)
{
    if (!handle_of(handle))
        return FAKE_STATUS_INVALID_VALUE;
    g_math_mode = mode;
    return FAKE_STATUS_SUCCESS;
}

static int max1(int v) { return v > 1 ? v : 1; }

static float load(const void *p, int type, long long i)
{
    switch (type) {
    case FAKE_R_16F: return ug_f16_to_f32(((const unsigned short *)p)[i]);
    case FAKE_R_16BF: return ug_bf16_to_f32(((const unsigned short *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store(void *p, int type, long long i, float v)
{
    if (type == FAKE_R_16F)
        ((unsigned short *)p)[i] = ug_f32_to_f16(v);
    else if (type == FAKE_R_16BF)
        ((unsigned short *)p)[i] = ug_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* One GEMM's arguments, alpha and beta by value (read at the call, as
 * cuBLAS's host pointer mode does). */
typedef struct gemm_job {
    int ta, tb, m, n, k, lda, ldb, ldc, batch, ab_type, c_type;
    long long sa, sb, sc;
    float alpha, beta;
    const void *A, *B;
    void *C;
    bool exact;
} gemm_job;

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b], column-major: op(A) is m x k,
 * element (i, p) of A at i + p lda (transposed: p + i lda). A and B of
 * ab_type, C of c_type; the sum in double (exact) or in f32. */
static void run_gemm(const void *ctx)
{
    const gemm_job *g = ctx;
    /* UG_FAKE_CUBLAS_DELAY_US: a slower library, for the GEMM choice. */
    const char *delay = getenv("UG_FAKE_CUBLAS_DELAY_US");
    if (delay && atoi(delay) > 0) {
        const long us = atol(delay);
        const struct timespec pause = {us / 1000000, us % 1000000 * 1000};
        nanosleep(&pause, NULL);
    }
    const int ta = g->ta, tb = g->tb, m = g->m, n = g->n, k = g->k, lda = g->lda, ldb = g->ldb,
              ldc = g->ldc, batch = g->batch, ab_type = g->ab_type, c_type = g->c_type;
    const long long sa = g->sa, sb = g->sb, sc = g->sc;
    const float alpha = g->alpha, beta = g->beta;
    const void *A = g->A, *B = g->B;
    void *C = g->C;
    const bool exact = g->exact;
    for (long long b = 0; b < batch; b++) {
        for (long long j = 0; j < n; j++) {
            for (long long i = 0; i < m; i++) {
                double sum = 0.0;
                float sum32 = 0.0f;
                for (long long p = 0; p < k; p++) {
                    const long long ai = ta == FAKE_OP_T ? p + i * lda : i + p * lda;
                    const long long bi = tb == FAKE_OP_T ? j + p * ldb : p + j * ldb;
                    const float a = load(A, ab_type, b * sa + ai);
                    const float v = load(B, ab_type, b * sb + bi);
                    if (exact)
                        sum += (double)a * v;
                    else
                        sum32 += a * v;
                }
                const long long at = b * sc + i + j * ldc;
                /* beta == 0: C is not read (it may hold NaN), as in BLAS. */
                const bool read = beta != 0.0f;
                const float c = read ? beta * load(C, c_type, at) : 0.0f;
                const double c64 = read ? (double)beta * load(C, c_type, at) : 0.0;
                store(C, c_type, at, exact ? (float)(alpha * sum + c64) : alpha * sum32 + c);
            }
        }
    }
}

static int gemm(void *handle, int ta, int tb, int m, int n, int k, float alpha, const void *A,
                int lda, long long sa, const void *B, int ldb, long long sb, float beta, void *C,
                int ldc, long long sc, int batch, int ab_type, int c_type, bool exact)
{
    fake_handle *h = handle_of(handle);
    if (!h || (ta != FAKE_OP_N && ta != FAKE_OP_T) || (tb != FAKE_OP_N && tb != FAKE_OP_T) || m < 0 ||
        n < 0 || k < 0 || batch < 0 || lda < max1(ta == FAKE_OP_T ? k : m) ||
        ldb < max1(tb == FAKE_OP_T ? n : k) || ldc < max1(m))
        return FAKE_STATUS_INVALID_VALUE;
    const gemm_job job = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                          .batch = batch, .ab_type = ab_type, .c_type = c_type, .sa = sa, .sb = sb,
                          .sc = sc, .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .exact = exact};
    stream_work_fn *work = stream_work();
    if (!work)
        run_gemm(&job);
    else if (work(h->stream, run_gemm, &job, sizeof job) != 0)
        return FAKE_STATUS_INVALID_VALUE; /* cuBLAS: CUBLAS_STATUS_EXECUTION_FAILED */
    return FAKE_STATUS_SUCCESS;
}

int cublasSgemmStridedBatched(void *handle, int ta, int tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, long long sa,
                              const float *B, int ldb, long long sb, const float *beta, float *C,
                              int ldc, long long sc, int batch)
{
    g_calls++;
    return gemm(handle, ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch,
                FAKE_R_32F, FAKE_R_32F, true);
}

int cublasSgemm_v2(void *handle, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                   int ldc)
{
    return cublasSgemmStridedBatched(handle, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta,
                                     C, ldc, 0, 1);
}

/* With CUBLAS_COMPUTE_32F (alpha and beta f32), cuBLAS runs A and B of one
 * type among f32, f16 and bf16 with C f32 or of A's type. */
int cublasGemmStridedBatchedEx(void *handle, int ta, int tb, int m, int n, int k,
                               const void *alpha, const void *A, int a_type, int lda, long long sa,
                               const void *B, int b_type, int ldb, long long sb, const void *beta,
                               void *C, int c_type, int ldc, long long sc, int batch, int compute,
                               int algo)
{
    g_calls++;
    g_ex_calls++;
    if (compute != FAKE_COMPUTE_32F || algo != FAKE_GEMM_DEFAULT || a_type != b_type ||
        (a_type != FAKE_R_32F && a_type != FAKE_R_16F && a_type != FAKE_R_16BF) ||
        (c_type != FAKE_R_32F && c_type != a_type))
        return FAKE_STATUS_NOT_SUPPORTED;
    return gemm(handle, ta, tb, m, n, k, *(const float *)alpha, A, lda, sa, B, ldb, sb,
                *(const float *)beta, C, ldc, sc, batch, a_type, c_type, false);
}

int cublasGemmEx(void *handle, int ta, int tb, int m, int n, int k, const void *alpha,
                 const void *A, int a_type, int lda, const void *B, int b_type, int ldb,
                 const void *beta, void *C, int c_type, int ldc, int compute, int algo)
{
    return cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, alpha, A, a_type, lda, 0, B, b_type,
                                      ldb, 0, beta, C, c_type, ldc, 0, 1, compute, algo);
}
