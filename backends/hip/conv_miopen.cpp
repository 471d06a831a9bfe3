/* MIOpen (libMIOpen.so.1), the HIP flavour's convolution library
 * (conv_library.h), through its classic convolution API: descriptors,
 * miopenFind* (which MIOpen wants called for a problem before it runs it,
 * and which times its solvers on the buffers given: the search allocates
 * its own for the shape) and the three passes. Resolved with dlsym: enums
 * are passed as int (same ABI), handles and descriptors as void *.
 *
 * Deterministic mode sets MIOpen's deterministic attribute on the
 * convolution and takes the first result of a find without the exhaustive
 * search (MIOpen has no untimed way to name an algorithm it has not found).
 * No AMD GPU or MIOpen test double exists where CI runs: this file is built
 * there (hipcc) but only exercised on a machine with MIOpen. */
#ifndef UG_CUDA
#include <stdio.h>

#include "backends/hip/conv_library.h"

enum {
    MIOPEN_SUCCESS = 0,
    MIOPEN_NOT_IMPLEMENTED = 6,
    MIOPEN_FLOAT = 1,
    MIOPEN_CONVOLUTION = 0,          /* cross-correlation */
    MIOPEN_ATTRIB_DETERMINISTIC = 1, /* miopenConvolutionAttrib_t */
};

/* miopenConvAlgoPerf_t: the pass's algorithm (a union of three enums), its
 * time and workspace. */
typedef struct miopen_perf {
    int algo;
    float time;
    size_t memory;
} miopen_perf;

typedef void *desc;
static struct {
    int (*get_version)(size_t *, size_t *, size_t *);
    const char *(*error_string)(int);
    int (*create_with_stream)(void **, hipStream_t);
    int (*destroy)(void *);
    int (*create_tensor)(desc *);
    int (*set_tensor)(desc, int type, int n, int c, int h, int w);
    int (*destroy_tensor)(desc);
    int (*create_conv)(desc *);
    int (*init_conv)(desc, int mode, int ph, int pw, int sh, int sw, int dh, int dw);
    int (*set_groups)(desc, int groups);
    int (*set_attribute)(desc, int attribute, int value);
    int (*destroy_conv)(desc);
    /* Workspace size: handle, the pass's first two tensors, conv, the
     * third (forward w, x, y; data dy, w, dx; weights dy, x, dw). */
    int (*workspace[3])(void *, desc, desc, desc, desc, size_t *);
    /* Find: handle, (desc, buffer) twice, conv, (desc, buffer), requested,
     * returned, results, workspace, its size, exhaustive. */
    int (*find[3])(void *, desc, const void *, desc, const void *, desc, desc, void *, int, int *,
                   miopen_perf *, void *, size_t, bool);
    int (*forward)(void *, const void *, desc, const void *, desc, const void *, desc, int,
                   const void *, desc, void *, void *, size_t);
    int (*backward_data)(void *, const void *, desc, const void *, desc, const void *, desc, int,
                         const void *, desc, void *, void *, size_t);
    int (*backward_weights)(void *, const void *, desc, const void *, desc, const void *, desc,
                            int, const void *, desc, void *, void *, size_t);
    int (*forward_bias)(void *, const void *, desc, const void *, const void *, desc, void *);
} g;

static bool bind(void *lib)
{
    const ug_hip_symbol syms[] = {
        {&g.get_version, "miopenGetVersion"},
        {&g.error_string, "miopenGetErrorString"},
        {&g.create_with_stream, "miopenCreateWithStream"},
        {&g.destroy, "miopenDestroy"},
        {&g.create_tensor, "miopenCreateTensorDescriptor"},
        {&g.set_tensor, "miopenSet4dTensorDescriptor"},
        {&g.destroy_tensor, "miopenDestroyTensorDescriptor"},
        {&g.create_conv, "miopenCreateConvolutionDescriptor"},
        {&g.init_conv, "miopenInitConvolutionDescriptor"},
        {&g.set_groups, "miopenSetConvolutionGroupCount"},
        {&g.set_attribute, "miopenSetConvolutionAttribute"},
        {&g.destroy_conv, "miopenDestroyConvolutionDescriptor"},
        {&g.workspace[UG_CONV_FORWARD], "miopenConvolutionForwardGetWorkSpaceSize"},
        {&g.workspace[UG_CONV_BACKWARD_DATA], "miopenConvolutionBackwardDataGetWorkSpaceSize"},
        {&g.workspace[UG_CONV_BACKWARD_WEIGHTS], "miopenConvolutionBackwardWeightsGetWorkSpaceSize"},
        {&g.find[UG_CONV_FORWARD], "miopenFindConvolutionForwardAlgorithm"},
        {&g.find[UG_CONV_BACKWARD_DATA], "miopenFindConvolutionBackwardDataAlgorithm"},
        {&g.find[UG_CONV_BACKWARD_WEIGHTS], "miopenFindConvolutionBackwardWeightsAlgorithm"},
        {&g.forward, "miopenConvolutionForward"},
        {&g.backward_data, "miopenConvolutionBackwardData"},
        {&g.backward_weights, "miopenConvolutionBackwardWeights"},
        {&g.forward_bias, "miopenConvolutionForwardBias"},
    };
    return ug_hip_bind_symbols(lib, syms, sizeof syms / sizeof syms[0]);
}

static bool load(char *version, size_t version_len, char *why, size_t why_len)
{
    void *lib = dlopen("libMIOpen.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_len, "no MIOpen: %s", dlerror());
        return false;
    }
    if (!bind(lib)) {
        snprintf(why, why_len, "libMIOpen.so.1 lacks the convolution API");
        dlclose(lib);
        return false;
    }
    size_t major = 0, minor = 0, patch = 0;
    g.get_version(&major, &minor, &patch);
    snprintf(version, version_len, "%zu.%zu.%zu", major, minor, patch);
    return true;
}

static int open_handle(void **handle, hipStream_t stream) { return g.create_with_stream(handle, stream); }

static void close_handle(void *handle) { g.destroy(handle); }

typedef struct descs {
    desc x, w, y, bias, conv;
} descs;

static void descs_free(descs *d)
{
    desc tensors[] = {d->x, d->w, d->y, d->bias};
    for (desc t : tensors)
        if (t)
            g.destroy_tensor(t);
    if (d->conv)
        g.destroy_conv(d->conv);
}

static ug_status failed(int rc, const char *what)
{
    return ug_hip_host->set_error(rc == MIOPEN_NOT_IMPLEMENTED ? UG_ERR_UNSUPPORTED : UG_ERR_BACKEND,
                                  "hip: MIOpen's %s returned %s (%d)", what, g.error_string(rc), rc);
}

static int tensor(desc *out, int n, int c, int h, int w)
{
    int rc = g.create_tensor(out);
    return rc ? rc : g.set_tensor(*out, MIOPEN_FLOAT, n, c, h, w);
}

static ug_status descs_make(const ug_hip_conv_shape *s, bool deterministic, descs *d)
{
    *d = descs{};
    int rc = tensor(&d->x, s->n, s->c, s->h, s->w);
    if (rc == 0)
        rc = tensor(&d->y, s->n, s->oc, s->oh, s->ow);
    if (rc == 0)
        rc = tensor(&d->w, s->oc, s->c / s->groups, s->kh, s->kw);
    if (rc == 0 && s->bias)
        rc = tensor(&d->bias, 1, s->oc, 1, 1);
    if (rc == 0 && (rc = g.create_conv(&d->conv)) == 0)
        rc = g.init_conv(d->conv, MIOPEN_CONVOLUTION, s->ph, s->pw, s->sh, s->sw, s->dh, s->dw);
    if (rc == 0)
        rc = g.set_groups(d->conv, s->groups);
    if (rc == 0 && deterministic)
        rc = g.set_attribute(d->conv, MIOPEN_ATTRIB_DETERMINISTIC, 1);
    if (rc != 0) {
        descs_free(d);
        return failed(rc, "descriptor setup");
    }
    return UG_OK;
}

/* The pass's tensors in its calls' order: forward x, w, y (workspace query
 * w, x, y); data dy, w, dx; weights dy, x, dw. */
static void pass_order(const ug_hip_conv_shape *s, const descs *d, desc out[3])
{
    if (s->pass == UG_CONV_FORWARD) {
        out[0] = d->x, out[1] = d->w, out[2] = d->y;
    } else if (s->pass == UG_CONV_BACKWARD_DATA) {
        out[0] = d->y, out[1] = d->w, out[2] = d->x;
    } else {
        out[0] = d->y, out[1] = d->x, out[2] = d->w;
    }
}

/* Finds with buffers of the shape's sizes, made and freed here. */
static ug_status find(void *handle, const ug_hip_conv_shape *s, bool deterministic,
                      size_t workspace_limit, ug_hip_conv_algo *out, int max, int *count)
{
    descs d;
    UG_BACKEND_TRY(descs_make(s, deterministic, &d));
    desc t[3];
    pass_order(s, &d, t);
    size_t ws = 0;
    const desc q0 = s->pass == UG_CONV_FORWARD ? d.w : t[0], q1 = s->pass == UG_CONV_FORWARD ? d.x : t[1];
    int rc = g.workspace[s->pass](handle, q0, q1, d.conv, t[2], &ws);
    ws = ws < workspace_limit ? ws : workspace_limit;
    const size_t f = sizeof(float);
    const size_t bytes[3] = {(size_t)s->n * s->c * s->h * s->w * f,
                             (size_t)s->oc * (s->c / s->groups) * s->kh * s->kw * f,
                             (size_t)s->n * s->oc * s->oh * s->ow * f};
    /* Buffers for x, w, y in the order of t. */
    const size_t order[3][3] = {{0, 1, 2}, {2, 1, 0}, {2, 0, 1}};
    void *buf[3] = {NULL, NULL, NULL}, *space = NULL;
    hipError_t e = hipSuccess;
    for (int i = 0; i < 3 && e == hipSuccess; i++)
        e = hipMalloc(&buf[i], bytes[order[s->pass][i]]);
    if (e == hipSuccess && ws)
        e = hipMalloc(&space, ws);
    miopen_perf perf[UG_HIP_CONV_MAX_ALGOS];
    int returned = 0;
    if (rc == MIOPEN_SUCCESS && e == hipSuccess)
        rc = g.find[s->pass](handle, t[0], buf[0], t[1], buf[1], d.conv, t[2], buf[2],
                             UG_HIP_CONV_MAX_ALGOS, &returned, perf, space, ws, !deterministic);
    for (void *b : buf)
        if (b)
            (void)hipFree(b);
    if (space)
        (void)hipFree(space);
    (void)hipGetLastError();
    descs_free(&d);
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_OUT_OF_MEMORY, e, "hipMalloc (buffers for MIOpen's search)");
    if (rc != MIOPEN_SUCCESS)
        return failed(rc, "algorithm search");
    *count = 0;
    for (int i = 0; i < returned && *count < max; i++)
        if (perf[i].memory <= ws)
            out[(*count)++] = ug_hip_conv_algo{perf[i].algo, deterministic ? -1.0f : perf[i].time,
                                               perf[i].memory};
    if (*count == 0)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "hip: MIOpen found no algorithm for the "
                                      "shape within %zu bytes of workspace", ws);
    return UG_OK;
}

static ug_status search(void *handle, const ug_hip_conv_shape *s, size_t workspace_limit,
                        ug_hip_conv_algo *out, int max, int *count)
{
    return find(handle, s, false, workspace_limit, out, max, count);
}

static ug_status fixed(void *handle, const ug_hip_conv_shape *s, ug_hip_conv_algo *out)
{
    int count = 0;
    return find(handle, s, true, UG_HIP_CONV_WORKSPACE_LIMIT, out, 1, &count);
}

static ug_status run(void *handle, const ug_hip_conv_shape *s, int algo, const ug_conv_args *a)
{
    descs d;
    UG_BACKEND_TRY(descs_make(s, a->deterministic, &d));
    const float one = 1.0f, zero = 0.0f;
    void *ws = ug_hip_ptr(&a->workspace);
    const size_t ws_bytes = a->workspace_bytes;
    int rc;
    const char *what;
    if (s->pass == UG_CONV_FORWARD) {
        what = "miopenConvolutionForward";
        rc = g.forward(handle, &one, d.x, ug_hip_ptr(&a->x), d.w, ug_hip_ptr(&a->w), d.conv, algo,
                       &zero, d.y, ug_hip_ptr(&a->y), ws, ws_bytes);
        if (rc == MIOPEN_SUCCESS && s->bias) {
            what = "miopenConvolutionForwardBias";
            rc = g.forward_bias(handle, &one, d.bias, ug_hip_ptr(&a->bias), &one, d.y, ug_hip_ptr(&a->y));
        }
    } else if (s->pass == UG_CONV_BACKWARD_DATA) {
        what = "miopenConvolutionBackwardData";
        rc = g.backward_data(handle, &one, d.y, ug_hip_ptr(&a->dy), d.w, ug_hip_ptr(&a->w), d.conv,
                             algo, &zero, d.x, ug_hip_ptr(&a->dx), ws, ws_bytes);
    } else {
        what = "miopenConvolutionBackwardWeights";
        rc = g.backward_weights(handle, &one, d.y, ug_hip_ptr(&a->dy), d.x, ug_hip_ptr(&a->x), d.conv,
                                algo, &zero, d.w, ug_hip_ptr(&a->dw), ws, ws_bytes);
    }
    descs_free(&d);
    return rc == MIOPEN_SUCCESS ? UG_OK : failed(rc, what);
}

static const char *algo_name(ug_conv_pass pass, int algo)
{
    static const char *const names[] = {"GEMM", "Direct", "FFT", "Winograd", "TransposeGEMM",
                                        "ImplicitGEMM"};
    (void)pass; /* the three enums share these values */
    return algo >= 0 && algo < 6 ? names[algo] : "unknown";
}

static const ug_hip_conv_library g_miopen = {"MIOpen", "miopen-conv", load, open_handle,
                                             close_handle, search, fixed, run, algo_name};

const ug_hip_conv_library *ug_hip_conv_vendor(void) { return &g_miopen; }
#endif
