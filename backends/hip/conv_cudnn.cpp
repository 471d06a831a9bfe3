/* cuDNN (libcudnn.so.9), the CUDA flavour's convolution library
 * (conv_library.h), through its legacy convolution API, which cuDNN 9 keeps
 * in libcudnn_cnn behind the libcudnn.so shim: descriptors, cudnnFind*
 * (times every algorithm on buffers it allocates), the Get*WorkspaceSize
 * calls and the three passes. Resolved with dlsym: enums are passed as int
 * (same ABI), handles and descriptors as void *.
 *
 * Math: CUDNN_FMA_MATH on every convolution, so f32 stays f32 (no TF32
 * rounding on tensor cores), as the module's cuBLAS GEMMs do and as the
 * im2col path it replaces computed. */
#ifdef UG_CUDA
#include <stdio.h>

#include "backends/hip/conv_library.h"

/* cudnn.h's values (cuDNN 9: statuses in categories of a thousand). */
enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_TENSOR_OP_MATH = 1,
    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
    CUDNN_DATA_FLOAT = 0,
    CUDNN_TENSOR_NCHW = 0,
    CUDNN_CROSS_CORRELATION = 1,
    CUDNN_FMA_MATH = 3,
    /* The deterministic algorithms (no atomic accumulation) deterministic
     * mode takes: forward IMPLICIT_PRECOMP_GEMM, backward ALGO_1. */
    FIXED_FORWARD = 1,
    FIXED_BACKWARD_DATA = 1,
    FIXED_BACKWARD_FILTER = 1,
};

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout. */
typedef struct cudnn_perf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
} cudnn_perf;

typedef void *desc;
static struct {
    size_t (*get_version)(void);
    const char *(*error_string)(int);
    int (*create)(void **);
    int (*destroy)(void *);
    int (*set_stream)(void *, cudaStream_t);
    int (*create_tensor)(desc *);
    int (*set_tensor)(desc, int format, int type, int n, int c, int h, int w);
    int (*destroy_tensor)(desc);
    int (*create_filter)(desc *);
    int (*set_filter)(desc, int type, int format, int k, int c, int h, int w);
    int (*destroy_filter)(desc);
    int (*create_conv)(desc *);
    int (*set_conv)(desc, int ph, int pw, int sh, int sw, int dh, int dw, int mode, int type);
    int (*set_groups)(desc, int groups);
    int (*set_math)(desc, int math);
    int (*destroy_conv)(desc);
    /* Find: handle, the three descriptors in the pass's order, conv,
     * requested count, returned count, results. */
    int (*find[3])(void *, desc, desc, desc, desc, int, int *, cudnn_perf *);
    int (*workspace[3])(void *, desc, desc, desc, desc, int, size_t *);
    int (*forward)(void *, const void *, desc, const void *, desc, const void *, desc, int, void *,
                   size_t, const void *, desc, void *);
    int (*backward_data)(void *, const void *, desc, const void *, desc, const void *, desc, int,
                         void *, size_t, const void *, desc, void *);
    int (*backward_filter)(void *, const void *, desc, const void *, desc, const void *, desc, int,
                           void *, size_t, const void *, desc, void *);
    int (*add_tensor)(void *, const void *, desc, const void *, const void *, desc, void *);
} g;

static bool bind(void *lib)
{
    const ug_hip_symbol syms[] = {
        {&g.get_version, "cudnnGetVersion"},
        {&g.error_string, "cudnnGetErrorString"},
        {&g.create, "cudnnCreate"},
        {&g.destroy, "cudnnDestroy"},
        {&g.set_stream, "cudnnSetStream"},
        {&g.create_tensor, "cudnnCreateTensorDescriptor"},
        {&g.set_tensor, "cudnnSetTensor4dDescriptor"},
        {&g.destroy_tensor, "cudnnDestroyTensorDescriptor"},
        {&g.create_filter, "cudnnCreateFilterDescriptor"},
        {&g.set_filter, "cudnnSetFilter4dDescriptor"},
        {&g.destroy_filter, "cudnnDestroyFilterDescriptor"},
        {&g.create_conv, "cudnnCreateConvolutionDescriptor"},
        {&g.set_conv, "cudnnSetConvolution2dDescriptor"},
        {&g.set_groups, "cudnnSetConvolutionGroupCount"},
        {&g.set_math, "cudnnSetConvolutionMathType"},
        {&g.destroy_conv, "cudnnDestroyConvolutionDescriptor"},
        {&g.find[UG_CONV_FORWARD], "cudnnFindConvolutionForwardAlgorithm"},
        {&g.find[UG_CONV_BACKWARD_DATA], "cudnnFindConvolutionBackwardDataAlgorithm"},
        {&g.find[UG_CONV_BACKWARD_WEIGHTS], "cudnnFindConvolutionBackwardFilterAlgorithm"},
        {&g.workspace[UG_CONV_FORWARD], "cudnnGetConvolutionForwardWorkspaceSize"},
        {&g.workspace[UG_CONV_BACKWARD_DATA], "cudnnGetConvolutionBackwardDataWorkspaceSize"},
        {&g.workspace[UG_CONV_BACKWARD_WEIGHTS], "cudnnGetConvolutionBackwardFilterWorkspaceSize"},
        {&g.forward, "cudnnConvolutionForward"},
        {&g.backward_data, "cudnnConvolutionBackwardData"},
        {&g.backward_filter, "cudnnConvolutionBackwardFilter"},
        {&g.add_tensor, "cudnnAddTensor"},
    };
    return ug_hip_bind_symbols(lib, syms, sizeof syms / sizeof syms[0]);
}

static bool load(char *version, size_t version_len, char *why, size_t why_len)
{
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "no cuDNN: %s", dlerror());
        return false;
    }
    if (!bind(lib)) {
        snprintf(why, why_len, "libcudnn.so.9 lacks the legacy convolution API");
        dlclose(lib);
        return false;
    }
    /* 9.x encodes major * 10000 + minor * 100 + patch. */
    size_t v = g.get_version();
    snprintf(version, version_len, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    return true; /* stays loaded: handles live until the devices close */
}

static int open_handle(void **handle, cudaStream_t stream)
{
    int rc = g.create(handle);
    if (rc == CUDNN_STATUS_SUCCESS && (rc = g.set_stream(*handle, stream)) != CUDNN_STATUS_SUCCESS)
        g.destroy(*handle);
    return rc;
}

static void close_handle(void *handle) { g.destroy(handle); }

/* The descriptors of a shape: x, the filter, y (dy) and the convolution. */
typedef struct descs {
    desc x, w, y, bias, conv;
} descs;

static void descs_free(descs *d)
{
    if (d->x)
        g.destroy_tensor(d->x);
    if (d->y)
        g.destroy_tensor(d->y);
    if (d->bias)
        g.destroy_tensor(d->bias);
    if (d->w)
        g.destroy_filter(d->w);
    if (d->conv)
        g.destroy_conv(d->conv);
}

static ug_status failed(int rc, const char *what)
{
    const bool unsupported = rc / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000;
    return ug_hip_host->set_error(unsupported ? UG_ERR_UNSUPPORTED : UG_ERR_BACKEND,
                                  "cuda: cuDNN's %s returned %s (%d)", what, g.error_string(rc), rc);
}

static ug_status descs_make(const ug_hip_conv_shape *s, descs *d)
{
    *d = descs{};
    int rc = g.create_tensor(&d->x);
    if (rc == 0)
        rc = g.set_tensor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->n, s->c, s->h, s->w);
    if (rc == 0 && (rc = g.create_tensor(&d->y)) == 0)
        rc = g.set_tensor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->n, s->oc, s->oh, s->ow);
    if (rc == 0 && s->bias && (rc = g.create_tensor(&d->bias)) == 0)
        rc = g.set_tensor(d->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s->oc, 1, 1);
    if (rc == 0 && (rc = g.create_filter(&d->w)) == 0)
        rc = g.set_filter(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->oc, s->c / s->groups, s->kh,
                          s->kw);
    if (rc == 0 && (rc = g.create_conv(&d->conv)) == 0)
        rc = g.set_conv(d->conv, s->ph, s->pw, s->sh, s->sw, s->dh, s->dw, CUDNN_CROSS_CORRELATION,
                        CUDNN_DATA_FLOAT);
    if (rc == 0)
        rc = g.set_groups(d->conv, s->groups);
    if (rc == 0)
        rc = g.set_math(d->conv, CUDNN_FMA_MATH);
    if (rc != 0) {
        descs_free(d);
        return failed(rc, "descriptor setup");
    }
    return UG_OK;
}

/* The pass's three tensor descriptors in the order its calls take them:
 * forward x, w, y; backward data w, dy, dx; backward filter x, dy, dw. */
static void pass_order(const ug_hip_conv_shape *s, const descs *d, desc out[3])
{
    if (s->pass == UG_CONV_FORWARD) {
        out[0] = d->x, out[1] = d->w, out[2] = d->y;
    } else if (s->pass == UG_CONV_BACKWARD_DATA) {
        out[0] = d->w, out[1] = d->y, out[2] = d->x;
    } else {
        out[0] = d->x, out[1] = d->y, out[2] = d->w;
    }
}

static ug_status search(void *handle, const ug_hip_conv_shape *s, size_t workspace_limit,
                        ug_hip_conv_algo *out, int max, int *count)
{
    descs d;
    UG_BACKEND_TRY(descs_make(s, &d));
    desc t[3];
    pass_order(s, &d, t);
    cudnn_perf perf[UG_HIP_CONV_MAX_ALGOS];
    int returned = 0;
    int rc = g.find[s->pass](handle, t[0], t[1], d.conv, t[2], UG_HIP_CONV_MAX_ALGOS, &returned, perf);
    (void)hipGetLastError();
    descs_free(&d);
    if (rc != CUDNN_STATUS_SUCCESS)
        return failed(rc, "algorithm search");
    /* Sorted by time already; keep the ones that ran within the limit, in
     * f32 math (a tensor-op result was not asked for). */
    *count = 0;
    for (int i = 0; i < returned && *count < max; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= workspace_limit &&
            perf[i].math_type != CUDNN_TENSOR_OP_MATH &&
            perf[i].math_type != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            out[(*count)++] = ug_hip_conv_algo{perf[i].algo, perf[i].time, perf[i].memory};
    if (*count == 0)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED,
                                      "cuda: none of cuDNN's %d algorithms ran the shape in f32 "
                                      "math within %zu bytes of workspace",
                                      returned, workspace_limit);
    return UG_OK;
}

static ug_status fixed(void *handle, const ug_hip_conv_shape *s, ug_hip_conv_algo *out)
{
    static const int algos[3] = {FIXED_FORWARD, FIXED_BACKWARD_DATA, FIXED_BACKWARD_FILTER};
    descs d;
    UG_BACKEND_TRY(descs_make(s, &d));
    desc t[3];
    pass_order(s, &d, t);
    *out = ug_hip_conv_algo{algos[s->pass], -1.0f, 0};
    int rc = g.workspace[s->pass](handle, t[0], t[1], d.conv, t[2], out->algo, &out->workspace);
    descs_free(&d);
    return rc == CUDNN_STATUS_SUCCESS ? UG_OK : failed(rc, "workspace query");
}

static ug_status run(void *handle, const ug_hip_conv_shape *s, int algo, const ug_conv_args *a)
{
    descs d;
    UG_BACKEND_TRY(descs_make(s, &d));
    const float one = 1.0f, zero = 0.0f;
    void *ws = ug_hip_ptr(&a->workspace);
    const size_t ws_bytes = a->workspace_bytes;
    int rc;
    const char *what;
    if (s->pass == UG_CONV_FORWARD) {
        what = "cudnnConvolutionForward";
        rc = g.forward(handle, &one, d.x, ug_hip_ptr(&a->x), d.w, ug_hip_ptr(&a->w), d.conv, algo,
                       ws, ws_bytes, &zero, d.y, ug_hip_ptr(&a->y));
        if (rc == CUDNN_STATUS_SUCCESS && s->bias) {
            what = "cudnnAddTensor";
            rc = g.add_tensor(handle, &one, d.bias, ug_hip_ptr(&a->bias), &one, d.y, ug_hip_ptr(&a->y));
        }
    } else if (s->pass == UG_CONV_BACKWARD_DATA) {
        what = "cudnnConvolutionBackwardData";
        rc = g.backward_data(handle, &one, d.w, ug_hip_ptr(&a->w), d.y, ug_hip_ptr(&a->dy), d.conv,
                             algo, ws, ws_bytes, &zero, d.x, ug_hip_ptr(&a->dx));
    } else {
        what = "cudnnConvolutionBackwardFilter";
        rc = g.backward_filter(handle, &one, d.x, ug_hip_ptr(&a->x), d.y, ug_hip_ptr(&a->dy), d.conv,
                               algo, ws, ws_bytes, &zero, d.w, ug_hip_ptr(&a->dw));
    }
    descs_free(&d);
    return rc == CUDNN_STATUS_SUCCESS ? UG_OK : failed(rc, what);
}

static const char *algo_name(ug_conv_pass pass, int algo)
{
    static const char *const forward[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",
                                          "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
                                          "WINOGRAD_NONFUSED"};
    static const char *const data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                       "WINOGRAD_NONFUSED"};
    static const char *const filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                         "WINOGRAD_NONFUSED", "FFT_TILING"};
    if (pass == UG_CONV_FORWARD)
        return algo >= 0 && algo < 8 ? forward[algo] : "unknown";
    if (pass == UG_CONV_BACKWARD_DATA)
        return algo >= 0 && algo < 6 ? data[algo] : "unknown";
    return algo >= 0 && algo < 7 ? filter[algo] : "unknown";
}

static const ug_hip_conv_library g_cudnn = {"cuDNN", "cudnn-conv", load, open_handle,
                                            close_handle, search, fixed, run, algo_name};

const ug_hip_conv_library *ug_hip_conv_vendor(void) { return &g_cudnn; }
#endif
