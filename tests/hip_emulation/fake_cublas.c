/* A stand-in libcublas.so.13 for the emulated module: the five cuBLAS
 * entry points backends/hip/gemm.cpp resolves with dlsym, with cuBLAS's
 * column-major semantics, on host memory (the emulator's device memory).
 *
 * It exists to test the module's row-major to column-major mapping (swap A
 * and B, m and n, and the transposes) against the suite's row-major
 * reference; it sums in double, so any error is the mapping's. Like cuBLAS
 * it rejects a leading dimension below the rows of the stored matrix
 * (CUBLAS_STATUS_INVALID_VALUE), which the module must never pass. */
#include <stddef.h>

#define FAKE_STATUS_SUCCESS 0
#define FAKE_STATUS_INVALID_VALUE 7
#define FAKE_OP_N 0
#define FAKE_OP_T 1

static int g_calls, g_live_handles;
static char g_handle; /* the one handle: its address */

/* Not in cuBLAS: the test finds these to know this library was loaded. */
int ug_fake_cublas_calls(void) { return g_calls; }
int ug_fake_cublas_live_handles(void) { return g_live_handles; }

int cublasCreate_v2(void **handle)
{
    *handle = &g_handle;
    g_live_handles++;
    return FAKE_STATUS_SUCCESS;
}

int cublasDestroy_v2(void *handle)
{
    if (handle != &g_handle || g_live_handles == 0)
        return FAKE_STATUS_INVALID_VALUE;
    g_live_handles--;
    return FAKE_STATUS_SUCCESS;
}

int cublasSetStream_v2(void *handle, void *stream)
{
    (void)stream;
    return handle == &g_handle ? FAKE_STATUS_SUCCESS : FAKE_STATUS_INVALID_VALUE;
}

static int max1(int v) { return v > 1 ? v : 1; }

/* C[b] = alpha op(A[b]) op(B[b]) + beta C[b], column-major: op(A) is m x k,
 * element (i, p) of A at i + p lda (transposed: p + i lda). */
int cublasSgemmStridedBatched(void *handle, int ta, int tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, long long sa,
                              const float *B, int ldb, long long sb, const float *beta, float *C,
                              int ldc, long long sc, int batch)
{
    g_calls++;
    if (handle != &g_handle || (ta != FAKE_OP_N && ta != FAKE_OP_T) ||
        (tb != FAKE_OP_N && tb != FAKE_OP_T) || m < 0 || n < 0 || k < 0 || batch < 0 ||
        lda < max1(ta == FAKE_OP_T ? k : m) || ldb < max1(tb == FAKE_OP_T ? n : k) ||
        ldc < max1(m))
        return FAKE_STATUS_INVALID_VALUE;
    for (long long b = 0; b < batch; b++) {
        const float *Ab = A + b * sa, *Bb = B + b * sb;
        float *Cb = C + b * sc;
        for (long long j = 0; j < n; j++) {
            for (long long i = 0; i < m; i++) {
                double s = 0.0;
                for (long long p = 0; p < k; p++) {
                    const double a = ta == FAKE_OP_T ? Ab[p + i * lda] : Ab[i + p * lda];
                    const double v = tb == FAKE_OP_T ? Bb[j + p * ldb] : Bb[p + j * ldb];
                    s += a * v;
                }
                float *c = &Cb[i + j * ldc];
                /* beta == 0: C is not read (it may hold NaN), as in BLAS. */
                *c = (float)(*alpha * s + (*beta == 0.0f ? 0.0 : (double)*beta * *c));
            }
        }
    }
    return FAKE_STATUS_SUCCESS;
}

int cublasSgemm_v2(void *handle, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                   int ldc)
{
    return cublasSgemmStridedBatched(handle, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta,
                                     C, ldc, 0, 1);
}
