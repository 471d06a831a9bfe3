/* GEMM: the vendor BLAS when its library is present at run time (found
 * with dlopen, so the module needs no BLAS at build or load time), else the
 * module's own kernels (kernels/hip/gemm.h, launched by gemm_own.hip: two
 * tiles, and a dot kernel for a small C).
 * Each shape runs on whichever was fastest at its first product
 * (gemm_choice.cpp).
 * UG_GEMM=own forces the own kernels (the fastest of them per shape), and
 * UG_GEMM=own64, own128, own-dot or own-split that one kernel for every
 * product; it is read on every call so one process can test each path.
 *
 * f16 and bf16 operands go to the library's mixed-precision call (cuBLAS
 * cublasGemmEx, rocBLAS rocblas_gemm_ex, hipBLAS hipblasGemmEx_v2 and their
 * strided batched forms) with f32 compute, as the own kernel sums; those
 * symbols are optional, and without them half GEMMs run the own kernel
 * while f32 keeps the library.
 *
 * The vendor libraries are column-major: a row-major C = op(A) op(B) is the
 * column-major C^T = op(B)^T op(A)^T, so the call swaps A and B, m and n. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/internal.h"
#include "backends/gemm_helpers.h"

/* The few entry points used. Enums are passed as int (same ABI); status 0
 * is success in rocBLAS, hipBLAS and cuBLAS alike. */
typedef int (*create_fn)(void **handle);
typedef int (*destroy_fn)(void *handle);
typedef int (*set_stream_fn)(void *handle, hipStream_t stream);
typedef int (*set_math_fn)(void *handle, int mode);
typedef int (*set_workspace_fn)(void *handle, void *workspace, size_t bytes);
typedef int (*sgemm_fn)(void *handle, int ta, int tb, int m, int n, int k, const float *alpha,
                        const float *a, int lda, const float *b, int ldb, const float *beta,
                        float *c, int ldc);
typedef int (*sgemm_batched_fn)(void *handle, int ta, int tb, int m, int n, int k,
                                const float *alpha, const float *a, int lda, long long sa,
                                const float *b, int ldb, long long sb, const float *beta, float *c,
                                int ldc, long long sc, int batch);
/* Mixed precision, cuBLAS's form (hipBLAS's _v2 is the same): alpha and
 * beta point to floats with f32 compute. */
typedef int (*gemm_ex_fn)(void *handle, int ta, int tb, int m, int n, int k, const void *alpha,
                          const void *a, int a_type, int lda, const void *b, int b_type, int ldb,
                          const void *beta, void *c, int c_type, int ldc, int compute, int algo);
typedef int (*gemm_ex_batched_fn)(void *handle, int ta, int tb, int m, int n, int k,
                                  const void *alpha, const void *a, int a_type, int lda,
                                  long long sa, const void *b, int b_type, int ldb, long long sb,
                                  const void *beta, void *c, int c_type, int ldc, long long sc,
                                  int batch, int compute, int algo);
/* rocBLAS's form: D = alpha op(A) op(B) + beta C, then a solution index and
 * flags; C is passed as D too (in place, which rocBLAS allows). */
typedef int (*rocblas_ex_fn)(void *handle, int ta, int tb, int m, int n, int k, const void *alpha,
                             const void *a, int a_type, int lda, const void *b, int b_type, int ldb,
                             const void *beta, const void *c, int c_type, int ldc, void *d,
                             int d_type, int ldd, int compute, int algo, int32_t solution,
                             uint32_t flags);
typedef int (*rocblas_ex_batched_fn)(void *handle, int ta, int tb, int m, int n, int k,
                                     const void *alpha, const void *a, int a_type, int lda,
                                     int64_t sa, const void *b, int b_type, int ldb, int64_t sb,
                                     const void *beta, const void *c, int c_type, int ldc,
                                     int64_t sc, void *d, int d_type, int ldd, int64_t sd,
                                     int batch, int compute, int algo, int32_t solution,
                                     uint32_t flags);

typedef struct vendor {
    const char *label;      /* "rocBLAS" */
    const char *libs[4];    /* file names tried in order */
    const char *syms[5];    /* create, destroy, set_stream, sgemm, strided batched */
    int op_n, op_t;         /* values of the no-transpose / transpose enums */
    /* Mixed precision (optional): GEMM and strided batched, NULL for none;
     * rocblas_form: the rocblas_ex_fn signatures, else the gemm_ex_fn ones. */
    const char *ex_syms[2];
    bool rocblas_form;
    int type_f32, type_f16, type_bf16; /* the library's data type enum */
    int compute_f32, algo;             /* f32 compute, default algorithm */
    /* Optional, set on each handle: the math mode that keeps every partial
     * sum in f32 (cuBLAS may otherwise reduce split-K partials in a half
     * C's type); NULL where the library always does. */
    const char *math_sym;
    int math_mode;
    /* Optional: a workspace of the given bytes set on each handle, so the
     * library allocates nothing while a stream is captured (a CUDA graph
     * capture fails on an allocation); NULL where it keeps its own. */
    const char *workspace_sym;
    size_t workspace_bytes;
} vendor;

/* Enum values as in the vendors' headers: cuBLAS library_types.h
 * (CUDA_R_32F 0, CUDA_R_16F 2, CUDA_R_16BF 14) and cublas_api.h
 * (CUBLAS_COMPUTE_32F 68, CUBLAS_GEMM_DEFAULT -1, CUBLAS_DEFAULT_MATH 0 |
 * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION 16); rocBLAS rocblas-types.h
 * (rocblas_datatype_f32_r 151, f16_r 150, bf16_r 168, the compute type
 * being a datatype; rocblas_gemm_algo_standard 0); hipBLAS hipDataType
 * (HIP_R_32F 0, HIP_R_16F 2, HIP_R_16BF 14), hipblas-common.h
 * (HIPBLAS_COMPUTE_32F 2) and hipblas.h (HIPBLAS_GEMM_DEFAULT 160). */
static const vendor g_vendors[] = {
#ifdef UG_CUDA
    {"cuBLAS",
     {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL},
     {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSgemm_v2",
      "cublasSgemmStridedBatched"},
     0, 1, {"cublasGemmEx", "cublasGemmStridedBatchedEx"}, false, 0, 2, 14, 68, -1,
     "cublasSetMathMode", 0 | 16, "cublasSetWorkspace_v2", (size_t)8 << 20},
#else
    {"rocBLAS",
     {"librocblas.so", "librocblas.so.4", "librocblas.so.0", NULL},
     {"rocblas_create_handle", "rocblas_destroy_handle", "rocblas_set_stream", "rocblas_sgemm",
      "rocblas_sgemm_strided_batched"},
     111, 112, {"rocblas_gemm_ex", "rocblas_gemm_strided_batched_ex"}, true, 151, 150, 168, 151,
     0, NULL, 0, NULL, 0},
    /* Only the _v2 names (hipBLAS 2.x, ROCm 6), whose types are certain:
     * the plain hipblasGemmEx takes hipblasDatatype_t (150, 151, 168) up
     * to hipBLAS 2.x but hipDataType from 3.0 (ROCm 7), and nothing in the
     * library tells the two apart, so a hipBLAS without _v2 runs half
     * GEMMs on the own kernel. */
    {"hipBLAS",
     {"libhipblas.so", "libhipblas.so.2", "libhipblas.so.0", NULL},
     {"hipblasCreate", "hipblasDestroy", "hipblasSetStream", "hipblasSgemm",
      "hipblasSgemmStridedBatched"},
     111, 112, {"hipblasGemmEx_v2", "hipblasGemmStridedBatchedEx_v2"}, false, 0, 2, 14, 2, 160,
     NULL, 0, NULL, 0},
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
    void *ex[2];  /* mixed precision GEMM, strided batched: both or none */
    set_math_fn set_math; /* NULL: none */
    set_workspace_fn set_workspace; /* NULL: none */
    char why[96]; /* why the own kernel runs */
    char version[96]; /* "cuBLAS 13.1.0", for the GEMM choices' cache key */
} g_blas;

/* The library's version where it tells it (cuBLAS cublasGetProperty:
 * MAJOR_VERSION 0, MINOR 1, PATCH 2; rocBLAS rocblas_get_version_string),
 * else the file name it was loaded from. */
static void read_version(void *lib, const char *file)
{
    int parts[3] = {0, 0, 0};
    void *property = dlsym(lib, "cublasGetProperty");
    void *text = dlsym(lib, "rocblas_get_version_string");
    int (*get_property)(int, int *);
    int (*get_text)(char *, size_t);
    memcpy(&get_property, &property, sizeof property);
    memcpy(&get_text, &text, sizeof text);
    char version[64] = "";
    if (property && get_property(0, &parts[0]) == 0 && get_property(1, &parts[1]) == 0 &&
        get_property(2, &parts[2]) == 0)
        snprintf(version, sizeof version, "%d.%d.%d", parts[0], parts[1], parts[2]);
    else if (!text || get_text(version, sizeof version) != 0)
        snprintf(version, sizeof version, "(%s)", file);
    snprintf(g_blas.version, sizeof g_blas.version, "%s %s", g_blas.v->label, version);
}

const char *ug_hip_blas_version(void) { return g_blas.lib ? g_blas.version : "none"; }

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
    g_blas.ex[0] = dlsym(lib, v->ex_syms[0]);
    g_blas.ex[1] = dlsym(lib, v->ex_syms[1]);
    if (!g_blas.ex[0] || !g_blas.ex[1])
        g_blas.ex[0] = g_blas.ex[1] = NULL;
    void *math = v->math_sym ? dlsym(lib, v->math_sym) : NULL;
    memcpy(&g_blas.set_math, &math, sizeof math);
    void *workspace = v->workspace_sym ? dlsym(lib, v->workspace_sym) : NULL;
    memcpy(&g_blas.set_workspace, &workspace, sizeof workspace);
    g_blas.v = v;
    return true;
}

/* Loads once per process. The library is never closed (shutdown keeps it
 * and a later discovery reuses it): cuBLAS and rocBLAS carry runtimes with
 * exit handlers of their own, which would run on unmapped code at exit after
 * a dlclose (core/runtime/module.c keeps modules open for the same reason). */
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
                read_version(lib, g_vendors[i].libs[j]);
                return;
            }
            snprintf(g_blas.why, sizeof g_blas.why, "%s lacks %s", g_vendors[i].libs[j],
                     g_vendors[i].syms[0]);
            dlclose(lib);
        }
    }
}


void ug_hip_blas_open(ug_hip_queue *q)
{
    q->blas = NULL;
    if (!g_blas.lib)
        return;
    void *h = NULL;
    int rc = g_blas.create(&h);
    if (rc != 0 || !h) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s handle creation returned %d", g_blas.v->label,
                 rc);
        return;
    }
    rc = g_blas.set_stream(h, q->stream);
    const char *call = "set_stream";
    if (rc == 0 && g_blas.set_math) {
        rc = g_blas.set_math(h, g_blas.v->math_mode);
        call = g_blas.v->math_sym;
    }
    /* Without the memory the library uses its own, as before. */
    if (rc == 0 && g_blas.set_workspace &&
        hipMalloc(&q->blas_workspace, g_blas.v->workspace_bytes) == hipSuccess) {
        rc = g_blas.set_workspace(h, q->blas_workspace, g_blas.v->workspace_bytes);
        call = g_blas.v->workspace_sym;
    }
    (void)hipGetLastError();
    if (rc != 0) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s %s returned %d", g_blas.v->label, call, rc);
        g_blas.destroy(h);
        ug_hip_blas_close(q);
        return;
    }
    q->blas = h;
}

void ug_hip_blas_close(ug_hip_queue *q)
{
    if (q->blas && g_blas.lib)
        g_blas.destroy(q->blas);
    q->blas = NULL;
    if (q->blas_workspace)
        (void)hipFree(q->blas_workspace);
    q->blas_workspace = NULL;
}

static bool forced_own(void)
{
    const char *e = getenv("UG_GEMM");
    return e && (strcmp(e, "own") == 0 || ug_hip_gemm_forced_path() >= 0);
}

const char *ug_hip_blas_path(const ug_bdev *dev)
{
    static char text[112];
    if (forced_own()) {
        snprintf(text, sizeof text, "own (UG_GEMM=%s)", getenv("UG_GEMM"));
        return text;
    }
    if (g_blas.lib && (!dev || dev->main.blas)) {
        if (g_blas.ex[0])
            return g_blas.v->label;
        snprintf(text, sizeof text, "%s (f16/bf16: own, no %s)", g_blas.v->label,
                 g_blas.v->ex_syms[0]);
        return text;
    }
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

/* The library's enum value of an f32, f16 or bf16 matrix. */
static int vendor_type(const vendor *v, ug_dtype t)
{
    return t == UG_F16 ? v->type_f16 : t == UG_BF16 ? v->type_bf16 : v->type_f32;
}

/* A GEMM with f16 or bf16 A and B through the mixed-precision call, with
 * the f32 call's column-major mapping (B first, n and m swapped). */
static int vendor_gemm_ex(ug_bdev *dev, const ug_gemm_args *a)
{
    const vendor *v = g_blas.v;
    const void *A = ug_hip_ptr(&a->a), *B = ug_hip_ptr(&a->b);
    void *C = ug_hip_ptr(&a->c);
    const int tb = a->trans_b ? v->op_t : v->op_n, ta = a->trans_a ? v->op_t : v->op_n;
    const int ab = vendor_type(v, a->a.dtype), c = vendor_type(v, a->c.dtype);
    const int m = (int)a->m, n = (int)a->n, k = (int)a->k, batch = (int)a->batch;
    const int lda = (int)a->lda, ldb = (int)a->ldb, ldc = (int)a->ldc;
    if (v->rocblas_form && batch == 1) {
        rocblas_ex_fn f;
        memcpy(&f, &g_blas.ex[0], sizeof f);
        return f(ug_hip_current(dev)->blas, tb, ta, n, m, k, &a->alpha, B, ab, ldb, A, ab, lda, &a->beta, C, c,
                 ldc, C, c, ldc, v->compute_f32, v->algo, 0, 0);
    }
    if (v->rocblas_form) {
        rocblas_ex_batched_fn f;
        memcpy(&f, &g_blas.ex[1], sizeof f);
        return f(ug_hip_current(dev)->blas, tb, ta, n, m, k, &a->alpha, B, ab, ldb, a->stride_b, A, ab, lda,
                 a->stride_a, &a->beta, C, c, ldc, a->stride_c, C, c, ldc, a->stride_c, batch,
                 v->compute_f32, v->algo, 0, 0);
    }
    if (batch == 1) {
        gemm_ex_fn f;
        memcpy(&f, &g_blas.ex[0], sizeof f);
        return f(ug_hip_current(dev)->blas, tb, ta, n, m, k, &a->alpha, B, ab, ldb, A, ab, lda, &a->beta, C, c,
                 ldc, v->compute_f32, v->algo);
    }
    gemm_ex_batched_fn f;
    memcpy(&f, &g_blas.ex[1], sizeof f);
    return f(ug_hip_current(dev)->blas, tb, ta, n, m, k, &a->alpha, B, ab, ldb, a->stride_b, A, ab, lda,
             a->stride_a, &a->beta, C, c, ldc, a->stride_c, batch, v->compute_f32, v->algo);
}

/* a through the vendor library (which it fits). */
static ug_status vendor_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    const vendor *v = g_blas.v;
    if (a->a.dtype != UG_F32) {
        const int rc = vendor_gemm_ex(dev, a);
        if (rc != 0)
            return ug_hip_host->set_error(UG_ERR_BACKEND, "%s: %s %s (%s) returned status %d",
                                          UG_HIP_BACKEND, v->label,
                                          v->ex_syms[a->batch == 1 ? 0 : 1],
                                          a->a.dtype == UG_F16 ? "f16" : "bf16", rc);
        return UG_OK;
    }
    const float *A = (const float *)ug_hip_ptr(&a->a), *B = (const float *)ug_hip_ptr(&a->b);
    float *C = (float *)ug_hip_ptr(&a->c);
    const int tb = a->trans_b ? v->op_t : v->op_n, ta = a->trans_a ? v->op_t : v->op_n;
    int rc;
    if (a->batch == 1)
        rc = g_blas.sgemm(ug_hip_current(dev)->blas, tb, ta, (int)a->n, (int)a->m, (int)a->k, &a->alpha, B,
                          (int)a->ldb, A, (int)a->lda, &a->beta, C, (int)a->ldc);
    else
        rc = g_blas.sgemm_batched(ug_hip_current(dev)->blas, tb, ta, (int)a->n, (int)a->m, (int)a->k, &a->alpha, B,
                                  (int)a->ldb, a->stride_b, A, (int)a->lda, a->stride_a, &a->beta,
                                  C, (int)a->ldc, a->stride_c, (int)a->batch);
    if (rc != 0)
        return ug_hip_host->set_error(UG_ERR_BACKEND, "%s: %s %s returned status %d",
                                      UG_HIP_BACKEND, v->label,
                                      a->batch == 1 ? v->syms[3] : v->syms[4], rc);
    return UG_OK;
}

/* The library's product, then an epilogue folded in (which no library
 * call takes) as a launch of its own; the own kernels apply it as they
 * store C, so the timing of the paths weighs this launch too. */
static ug_status vendor_with_epilogue(ug_bdev *dev, const ug_gemm_args *a)
{
    ug_status st = vendor_gemm(dev, a);
    return st == UG_OK ? ug_gemm_epilogue_by_binary(dev, a, ug_hip_binary) : st;
}

ug_status ug_hip_gemm(ug_bdev *dev, const ug_gemm_args *a)
{
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0)
        return UG_OK;
    /* One GEMM per entry adds each product to an f32 C; a half C would be
     * rounded at every entry, so the own kernel sums them all first. */
    if (a->sum_batch && a->c.dtype != UG_F32)
        return ug_hip_gemm_own(dev, a);
    if (a->sum_batch)
        return ug_gemm_sum_batch_by_loop(dev, a, ug_hip_gemm);
    const bool half = a->a.dtype != UG_F32;
    const bool vendor = ug_hip_current(dev)->blas && !forced_own() && vendor_fits(a) && (!half || g_blas.ex[0]);
    const int path = ug_hip_gemm_path(dev, a, vendor ? vendor_with_epilogue : NULL);
    return path == UG_HIP_GEMM_VENDOR ? vendor_with_epilogue(dev, a) : ug_hip_gemm_own_path(dev, a, path);
}
