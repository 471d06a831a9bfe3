/* GEMM: the vendor BLAS when its library is present at run time (found
 * with dlopen, so the module needs no BLAS at build or load time), else the
 * module's own kernel (kernels/hip/gemm.hip). UG_GEMM=own forces the own
 * kernel; it is read on every call so one process can test both paths.
 *
 * The vendor libraries are column-major: a row-major C = op(A) op(B) is the
 * column-major C^T = op(B)^T op(A)^T, so the call swaps A and B, m and n. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/internal.h"

/* The few entry points used. Enums are passed as int (same ABI); status 0
 * is success in rocBLAS, hipBLAS and cuBLAS alike. */
typedef int (*create_fn)(void **handle);
typedef int (*destroy_fn)(void *handle);
typedef int (*set_stream_fn)(void *handle, hipStream_t stream);
typedef int (*sgemm_fn)(void *handle, int ta, int tb, int m, int n, int k, const float *alpha,
                        const float *a, int lda, const float *b, int ldb, const float *beta,
                        float *c, int ldc);
typedef int (*sgemm_batched_fn)(void *handle, int ta, int tb, int m, int n, int k,
                                const float *alpha, const float *a, int lda, long long sa,
                                const float *b, int ldb, long long sb, const float *beta, float *c,
                                int ldc, long long sc, int batch);

typedef struct vendor {
    const char *label;      /* "rocBLAS" */
    const char *libs[4];    /* file names tried in order */
    const char *syms[5];    /* create, destroy, set_stream, sgemm, strided batched */
    int op_n, op_t;         /* values of the no-transpose / transpose enums */
} vendor;

static const vendor g_vendors[] = {
#ifdef UG_CUDA
    {"cuBLAS",
     {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL},
     {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSgemm_v2",
      "cublasSgemmStridedBatched"},
     0, 1},
#else
    {"rocBLAS",
     {"librocblas.so", "librocblas.so.4", "librocblas.so.0", NULL},
     {"rocblas_create_handle", "rocblas_destroy_handle", "rocblas_set_stream", "rocblas_sgemm",
      "rocblas_sgemm_strided_batched"},
     111, 112},
    {"hipBLAS",
     {"libhipblas.so", "libhipblas.so.2", "libhipblas.so.0", NULL},
     {"hipblasCreate", "hipblasDestroy", "hipblasSetStream", "hipblasSgemm",
      "hipblasSgemmStridedBatched"},
     111, 112},
#endif
};

static struct {
    void *lib;
    const vendor *v;
    create_fn create;
    destroy_fn destroy;
    set_stream_fn set_stream;
    sgemm_fn sgemm;
    sgemm_batched_fn sgemm_batched;
    char why[96]; /* why the own kernel runs */
} g_blas;

/* Resolves one vendor's symbols from an opened library. */
static bool bind(void *lib, const vendor *v)
{
    void *s[5];
    for (int i = 0; i < 5; i++)
        if (!(s[i] = dlsym(lib, v->syms[i])))
            return false;
    /* dlsym returns void*; the casts go through memcpy to stay warning-free. */
    memcpy(&g_blas.create, &s[0], sizeof s[0]);
    memcpy(&g_blas.destroy, &s[1], sizeof s[1]);
    memcpy(&g_blas.set_stream, &s[2], sizeof s[2]);
    memcpy(&g_blas.sgemm, &s[3], sizeof s[3]);
    memcpy(&g_blas.sgemm_batched, &s[4], sizeof s[4]);
    g_blas.v = v;
    return true;
}

/* Loads once per process. The library is never closed (shutdown keeps it
 * and a later discovery reuses it): cuBLAS and rocBLAS carry runtimes with
 * exit handlers of their own, which would run on unmapped code at exit after
 * a dlclose (core/module.c keeps modules open for the same reason). */
static bool forced_own(void);

void ug_hip_blas_load(void)
{
    if (g_blas.lib)
        return;
    /* UG_GEMM=own at discovery: do not even load the library (it is large,
     * and a rocBLAS lacking code for a GPU here would abort on ROCm 5.x). */
    if (forced_own()) {
        snprintf(g_blas.why, sizeof g_blas.why, "UG_GEMM=own at start");
        return;
    }
    snprintf(g_blas.why, sizeof g_blas.why, "no %s found", g_vendors[0].label);
    for (size_t i = 0; i < sizeof g_vendors / sizeof g_vendors[0]; i++) {
        for (int j = 0; g_vendors[i].libs[j]; j++) {
            void *lib = dlopen(g_vendors[i].libs[j], RTLD_NOW | RTLD_LOCAL);
            if (!lib)
                continue;
            if (bind(lib, &g_vendors[i])) {
                g_blas.lib = lib;
                return;
            }
            snprintf(g_blas.why, sizeof g_blas.why, "%s lacks %s", g_vendors[i].libs[j],
                     g_vendors[i].syms[0]);
            dlclose(lib);
        }
    }
}


void ug_hip_blas_open(ug_bdev *dev)
{
    dev->blas = NULL;
    if (!g_blas.lib)
        return;
    void *h = NULL;
    int rc = g_blas.create(&h);
    if (rc != 0 || !h) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s handle creation returned %d", g_blas.v->label,
                 rc);
        return;
    }
    rc = g_blas.set_stream(h, dev->stream);
    if (rc != 0) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s set_stream returned %d", g_blas.v->label, rc);
        g_blas.destroy(h);
        return;
    }
    dev->blas = h;
}

void ug_hip_blas_close(ug_bdev *dev)
{
    if (dev->blas && g_blas.lib)
        g_blas.destroy(dev->blas);
    dev->blas = NULL;
}

static bool forced_own(void)
{
    const char *e = getenv("UG_GEMM");
    return e && strcmp(e, "own") == 0;
}

const char *ug_hip_blas_path(const ug_bdev *dev)
{
    static char text[112];
    if (forced_own())
        return "own (UG_GEMM=own)";
    if (g_blas.lib && (!dev || dev->blas))
        return g_blas.v->label;
    snprintf(text, sizeof text, "own (%s)", g_blas.why[0] ? g_blas.why : "no vendor BLAS");
    return text;
}

/* The vendor API takes int sizes and needs ld >= rows (column-major). */
static bool vendor_fits(const ug_gemm_args *a)
{
    const int64_t need_a = a->trans_a ? a->m : a->k, need_b = a->trans_b ? a->k : a->n;
    const int64_t vals[] = {a->m, a->n, a->k, a->lda, a->ldb, a->ldc, a->batch};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] > INT_MAX)
            return false;
    return a->lda >= (need_a > 1 ? need_a : 1) && a->ldb >= (need_b > 1 ? need_b : 1) &&
           a->ldc >= (a->n > 1 ? a->n : 1);
}

ug_status ug_hip_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0)
        return UG_OK;
    if (a->sum_batch)
        return ug_gemm_sum_batch_by_loop(dev, a, ug_hip_gemm);
    if (!dev->blas || forced_own() || !vendor_fits(a))
        return ug_hip_gemm_own(dev, a);
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    const vendor *v = g_blas.v;
    const float *A = (const float *)ug_hip_ptr(&a->a), *B = (const float *)ug_hip_ptr(&a->b);
    float *C = (float *)ug_hip_ptr(&a->c);
    const int tb = a->trans_b ? v->op_t : v->op_n, ta = a->trans_a ? v->op_t : v->op_n;
    int rc;
    if (a->batch == 1)
        rc = g_blas.sgemm(dev->blas, tb, ta, (int)a->n, (int)a->m, (int)a->k, &a->alpha, B,
                          (int)a->ldb, A, (int)a->lda, &a->beta, C, (int)a->ldc);
    else
        rc = g_blas.sgemm_batched(dev->blas, tb, ta, (int)a->n, (int)a->m, (int)a->k, &a->alpha, B,
                                  (int)a->ldb, a->stride_b, A, (int)a->lda, a->stride_a, &a->beta,
                                  C, (int)a->ldc, a->stride_c, (int)a->batch);
    if (rc != 0)
        return ug_hip_host->set_error(UG_ERR_BACKEND, "%s: %s %s returned status %d",
                                      UG_HIP_BACKEND, v->label,
                                      a->batch == 1 ? v->syms[3] : v->syms[4], rc);
    return UG_OK;
}
