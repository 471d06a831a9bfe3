/* A stand-in libcudnn.so.9 for the emulated module: the legacy convolution
 * API backends/hip/conv_cudnn.cpp resolves with dlsym, on host memory (the
 * emulator's device memory), with cuDNN 9's status codes.
 *
 * It exists to test the module's use of a convolution library: the
 * descriptors it builds (every call checks them against each other as
 * cuDNN does, and counts what it refuses, which the module must never
 * cause), the algorithm search and the choice made from its results, the
 * workspace each algorithm needs, and the passes' results, computed
 * directly (no im2col) with sums in double, so any error is the module's.
 *
 * The search reports, per pass, four algorithms in cuDNN's order (timed
 * ones fastest first, failures last): one faster than the rest that needs
 * 1 GiB of workspace (more than the module accepts), the "chosen" one, a
 * deterministic one (number 1 in every pass, which deterministic mode
 * takes), and one that failed. UG_FAKE_CUDNN_PREFER=deterministic swaps
 * the times of the chosen and deterministic ones, so a search would then
 * choose 1: a test tells a cached choice from a new search by it. Each run
 * overwrites the whole workspace its algorithm needs, so a too-small one
 * shows under AddressSanitizer and nothing may rely on its contents.
 *
 * Like the stand-in cuBLAS, the passes are work on the handle's stream
 * (ug_emu_stream_work), so a captured stream records them. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fake_stream_work.h"

#define ST_SUCCESS 0
#define ST_BAD_PARAM 2000
#define ST_NOT_SUPPORTED 3000
#define FAKE_VERSION 91900 /* 9.19.0 */
#define FAKE_FLOAT 0
#define FAKE_NCHW 0
#define FAKE_CROSS_CORRELATION 1
#define FAKE_FMA_MATH 3
#define FAKE_HUGE ((size_t)1 << 30)

enum { FORWARD, DATA, FILTER, PASSES };
enum { NEEDS_NONE, NEEDS_SOME, NEEDS_HUGE };

/* ---- what a test reads (not in cuDNN) ---- */
static int g_finds, g_workspace_queries, g_refused, g_live, g_runs[PASSES], g_last_algo[PASSES];
int ug_fake_cudnn_finds(void) { return g_finds; }
int ug_fake_cudnn_workspace_queries(void) { return g_workspace_queries; }
/* Calls refused for their arguments (descriptors that disagree, a small
 * workspace, an algorithm the search did not offer). */
int ug_fake_cudnn_refused(void) { return g_refused; }
/* Handles and descriptors not yet destroyed. */
int ug_fake_cudnn_live(void) { return g_live; }
int ug_fake_cudnn_runs(int pass) { return pass >= 0 && pass < PASSES ? g_runs[pass] : -1; }
/* The algorithm of the pass's last run, -1 before any. */
int ug_fake_cudnn_last_algo(int pass) { return pass >= 0 && pass < PASSES ? g_last_algo[pass] - 1 : -1; }

static int refuse(void)
{
    g_refused++;
    return ST_BAD_PARAM;
}

/* ---- objects ---- */
typedef enum { HANDLE = 0x4844, TENSOR = 0x5445, FILTER_DESC = 0x4649, CONV = 0x434f } kind;
typedef struct object {
    kind kind;
    void *stream;                    /* HANDLE */
    int n, c, h, w;                  /* TENSOR; FILTER_DESC: k, c, h, w */
    bool set;
    int ph, pw, sh, sw, dh, dw, groups, math; /* CONV */
} object;

static int create(void **out, kind k)
{
    object *o = calloc(1, sizeof *o);
    if (!o)
        return 4000;
    o->kind = k;
    o->groups = 1;
    *out = o;
    g_live++;
    return ST_SUCCESS;
}

static int destroy(void *p, kind k)
{
    object *o = p;
    if (!o || o->kind != k)
        return refuse();
    free(o);
    g_live--;
    return ST_SUCCESS;
}

static object *as(void *p, kind k)
{
    object *o = p;
    return o && o->kind == k && (k == HANDLE || o->set) ? o : NULL;
}

size_t cudnnGetVersion(void) { return FAKE_VERSION; }
const char *cudnnGetErrorString(int status)
{
    return status == ST_SUCCESS ? "CUDNN_STATUS_SUCCESS"
           : status == ST_BAD_PARAM ? "CUDNN_STATUS_BAD_PARAM"
           : status == ST_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED" : "CUDNN_STATUS_INTERNAL_ERROR";
}
int cudnnCreate(void **handle) { return create(handle, HANDLE); }
int cudnnDestroy(void *handle) { return destroy(handle, HANDLE); }
int cudnnSetStream(void *handle, void *stream)
{
    object *h = as(handle, HANDLE);
    if (!h)
        return refuse();
    h->stream = stream;
    return ST_SUCCESS;
}
/* For the graph API (fake_cudnn_graph.c). */
bool ug_fake_cudnn_stream_of(void *handle, void **stream)
{
    const object *h = as(handle, HANDLE);
    if (h)
        *stream = h->stream;
    return h != NULL;
}

int cudnnCreateTensorDescriptor(void **d) { return create(d, TENSOR); }
int cudnnDestroyTensorDescriptor(void *d) { return destroy(d, TENSOR); }
int cudnnCreateFilterDescriptor(void **d) { return create(d, FILTER_DESC); }
int cudnnDestroyFilterDescriptor(void *d) { return destroy(d, FILTER_DESC); }
int cudnnCreateConvolutionDescriptor(void **d) { return create(d, CONV); }
int cudnnDestroyConvolutionDescriptor(void *d) { return destroy(d, CONV); }

static int set4(void *d, kind k, int format, int type, int n, int c, int h, int w)
{
    object *o = d;
    if (!o || o->kind != k || format != FAKE_NCHW || type != FAKE_FLOAT || n < 1 || c < 1 ||
        h < 1 || w < 1)
        return refuse();
    o->n = n, o->c = c, o->h = h, o->w = w, o->set = true;
    return ST_SUCCESS;
}
int cudnnSetTensor4dDescriptor(void *d, int format, int type, int n, int c, int h, int w)
{
    return set4(d, TENSOR, format, type, n, c, h, w);
}
int cudnnSetFilter4dDescriptor(void *d, int type, int format, int k, int c, int h, int w)
{
    return set4(d, FILTER_DESC, format, type, k, c, h, w);
}
int cudnnSetConvolution2dDescriptor(void *d, int ph, int pw, int sh, int sw, int dh, int dw,
                                    int mode, int type)
{
    object *o = d;
    if (!o || o->kind != CONV || ph < 0 || pw < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1 ||
        mode != FAKE_CROSS_CORRELATION || type != FAKE_FLOAT)
        return refuse();
    o->ph = ph, o->pw = pw, o->sh = sh, o->sw = sw, o->dh = dh, o->dw = dw, o->set = true;
    return ST_SUCCESS;
}
int cudnnSetConvolutionGroupCount(void *d, int groups)
{
    object *o = as(d, CONV);
    if (!o || groups < 1)
        return refuse();
    o->groups = groups;
    return ST_SUCCESS;
}
int cudnnSetConvolutionMathType(void *d, int math)
{
    object *o = as(d, CONV);
    if (!o || math < 0 || math > 3)
        return refuse();
    o->math = math;
    return ST_SUCCESS;
}

/* ---- a problem: x, the filter, y and the convolution, checked together ---- */
typedef struct problem {
    const object *x, *w, *y, *conv;
} problem;

static long long out_size(int in, int k, int s, int p, int d)
{
    return ((long long)in + 2LL * p - (long long)d * (k - 1) - 1) / s + 1;
}

static bool consistent(const problem *p)
{
    const object *x = p->x, *w = p->w, *y = p->y, *c = p->conv;
    if (!x || !w || !y || !c)
        return false;
    return x->c % c->groups == 0 && w->n % c->groups == 0 && w->c * c->groups == x->c &&
           y->n == x->n && y->c == w->n && y->h == out_size(x->h, w->h, c->sh, c->ph, c->dh) &&
           y->w == out_size(x->w, w->w, c->sw, c->pw, c->dw);
}

static problem make_problem(void *x, void *w, void *y, void *conv)
{
    return (problem){as(x, TENSOR), as(w, FILTER_DESC), as(y, TENSOR), as(conv, CONV)};
}

/* The algorithms of each pass, in the search's order. */
typedef struct fake_algo {
    int algo, status, needs;
    float ms;
} fake_algo;
enum { ALGOS = 4, CHOSEN = 1, DETERMINISTIC = 2 };
static const fake_algo g_algos[PASSES][ALGOS] = {
    {{7, ST_SUCCESS, NEEDS_HUGE, 0.1f}, {2, ST_SUCCESS, NEEDS_SOME, 0.4f},
     {1, ST_SUCCESS, NEEDS_SOME, 0.9f}, {5, ST_NOT_SUPPORTED, NEEDS_NONE, -1.0f}},
    {{5, ST_SUCCESS, NEEDS_HUGE, 0.1f}, {0, ST_SUCCESS, NEEDS_SOME, 0.4f},
     {1, ST_SUCCESS, NEEDS_NONE, 0.9f}, {2, ST_NOT_SUPPORTED, NEEDS_NONE, -1.0f}},
    {{5, ST_SUCCESS, NEEDS_HUGE, 0.1f}, {3, ST_SUCCESS, NEEDS_SOME, 0.4f},
     {1, ST_SUCCESS, NEEDS_SOME, 0.9f}, {2, ST_NOT_SUPPORTED, NEEDS_NONE, -1.0f}},
};

/* The workspace an algorithm needs for the problem: shape-dependent, so a
 * workspace planned for another shape would be caught; for a batch of one
 * more than for larger ones (1 MiB), as cuDNN's choices on an H100 need for
 * a graph planned at a larger batch and run with one row. */
static size_t need(const fake_algo *a, const problem *p, int pass)
{
    if (a->needs == NEEDS_HUGE)
        return FAKE_HUGE;
    if (a->needs == NEEDS_NONE)
        return 0;
    if (p->y->n == 1)
        return ((size_t)1 << 20) + (size_t)a->algo;
    return (size_t)4 * p->y->n * p->y->h * p->y->w + 64 * (size_t)(pass + 1) + (size_t)a->algo;
}

static const fake_algo *find_algo(int pass, int algo)
{
    for (int i = 0; i < ALGOS; i++)
        if (g_algos[pass][i].algo == algo && g_algos[pass][i].status == ST_SUCCESS)
            return &g_algos[pass][i];
    return NULL;
}

typedef struct perf {
    int algo, status;
    float time;
    size_t memory;
    int determinism, math_type, reserved[3];
} perf;

static int find(int pass, const problem *p, int requested, int *returned, perf *out)
{
    g_finds++;
    if (!consistent(p) || requested < 1 || !returned || !out)
        return refuse();
    const char *prefer = getenv("UG_FAKE_CUDNN_PREFER");
    const bool swap = prefer && strcmp(prefer, "deterministic") == 0;
    int n = 0;
    for (int i = 0; i < ALGOS && n < requested; i++) {
        /* Swapped: the deterministic one is reported second, faster. */
        int at = swap && i == CHOSEN ? DETERMINISTIC : swap && i == DETERMINISTIC ? CHOSEN : i;
        const fake_algo *a = &g_algos[pass][at];
        float ms = swap && (at == CHOSEN || at == DETERMINISTIC) ? g_algos[pass][i].ms : a->ms;
        out[n++] = (perf){.algo = a->algo, .status = a->status, .time = ms,
                          .memory = a->status == ST_SUCCESS ? need(a, p, pass) : 0,
                          .determinism = a->algo == 1, .math_type = p->conv->math};
    }
    *returned = n;
    return ST_SUCCESS;
}

int cudnnFindConvolutionForwardAlgorithm(void *h, void *x, void *w, void *conv, void *y,
                                         int requested, int *returned, perf *out)
{
    problem p = make_problem(x, w, y, conv);
    return as(h, HANDLE) ? find(FORWARD, &p, requested, returned, out) : refuse();
}
int cudnnFindConvolutionBackwardDataAlgorithm(void *h, void *w, void *dy, void *conv, void *dx,
                                              int requested, int *returned, perf *out)
{
    problem p = make_problem(dx, w, dy, conv);
    return as(h, HANDLE) ? find(DATA, &p, requested, returned, out) : refuse();
}
int cudnnFindConvolutionBackwardFilterAlgorithm(void *h, void *x, void *dy, void *conv, void *dw,
                                                int requested, int *returned, perf *out)
{
    problem p = make_problem(x, dw, dy, conv);
    return as(h, HANDLE) ? find(FILTER, &p, requested, returned, out) : refuse();
}

static int workspace(void *h, int pass, const problem *p, int algo, size_t *bytes)
{
    g_workspace_queries++;
    const fake_algo *a = find_algo(pass, algo);
    if (!as(h, HANDLE) || !consistent(p) || !bytes)
        return refuse();
    if (!a)
        return ST_NOT_SUPPORTED;
    *bytes = need(a, p, pass);
    return ST_SUCCESS;
}
int cudnnGetConvolutionForwardWorkspaceSize(void *h, void *x, void *w, void *conv, void *y, int algo,
                                            size_t *bytes)
{
    problem p = make_problem(x, w, y, conv);
    return workspace(h, FORWARD, &p, algo, bytes);
}
int cudnnGetConvolutionBackwardDataWorkspaceSize(void *h, void *w, void *dy, void *conv, void *dx,
                                                 int algo, size_t *bytes)
{
    problem p = make_problem(dx, w, dy, conv);
    return workspace(h, DATA, &p, algo, bytes);
}
int cudnnGetConvolutionBackwardFilterWorkspaceSize(void *h, void *x, void *dy, void *conv, void *dw,
                                                   int algo, size_t *bytes)
{
    problem p = make_problem(x, dw, dy, conv);
    return workspace(h, FILTER, &p, algo, bytes);
}

/* ---- the passes, as work on the stream ---- */
typedef struct conv_job {
    int pass;
    int n, c, h, w, oc, cg, ocg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups;
    float alpha, beta;
    const float *x, *wt, *y; /* inputs of the pass: y is dy for the backward ones */
    float *out;              /* y, dx or dw */
    unsigned char *workspace;
    size_t workspace_bytes;
} conv_job;

/* Every (image, output, tap) product of the convolution calls visit with
 * the flat indices of x, the filter and y it joins. */
static void for_each_product(const conv_job *j, void (*visit)(const conv_job *, long long, long long,
                                                                 long long, double *), double *acc)
{
    for (int b = 0; b < j->n; b++)
        for (int o = 0; o < j->oc; o++) {
            const int g = o / j->ocg;
            for (int oy = 0; oy < j->oh; oy++)
                for (int ox = 0; ox < j->ow; ox++)
                    for (int ci = 0; ci < j->cg; ci++)
                        for (int ky = 0; ky < j->kh; ky++) {
                            const int iy = oy * j->sh - j->ph + ky * j->dh;
                            if (iy < 0 || iy >= j->h)
                                continue;
                            for (int kx = 0; kx < j->kw; kx++) {
                                const int ix = ox * j->sw - j->pw + kx * j->dw;
                                if (ix < 0 || ix >= j->w)
                                    continue;
                                const long long xi =
                                    (((long long)b * j->c + g * j->cg + ci) * j->h + iy) * j->w + ix;
                                const long long wi = (((long long)o * j->cg + ci) * j->kh + ky) * j->kw + kx;
                                const long long yi = (((long long)b * j->oc + o) * j->oh + oy) * j->ow + ox;
                                visit(j, xi, wi, yi, acc);
                            }
                        }
        }
}

static void visit_forward(const conv_job *j, long long xi, long long wi, long long yi, double *acc)
{
    acc[yi] += (double)j->x[xi] * j->wt[wi];
}
static void visit_data(const conv_job *j, long long xi, long long wi, long long yi, double *acc)
{
    acc[xi] += (double)j->y[yi] * j->wt[wi];
}
static void visit_filter(const conv_job *j, long long xi, long long wi, long long yi, double *acc)
{
    acc[wi] += (double)j->y[yi] * j->x[xi];
}

static void run_conv(const void *ctx)
{
    const conv_job *j = ctx;
    memset(j->workspace, 0xA5, j->workspace_bytes);
    const long long count = j->pass == FORWARD ? (long long)j->n * j->oc * j->oh * j->ow
                            : j->pass == DATA  ? (long long)j->n * j->c * j->h * j->w
                                               : (long long)j->oc * j->cg * j->kh * j->kw;
    double *acc = calloc((size_t)count, sizeof *acc);
    if (!acc)
        return;
    for_each_product(j, j->pass == FORWARD ? visit_forward : j->pass == DATA ? visit_data : visit_filter,
                     acc);
    for (long long i = 0; i < count; i++) /* beta 0: out is not read, as in cuDNN */
        j->out[i] = (float)(j->alpha * acc[i] + (j->beta != 0.0f ? (double)j->beta * j->out[i] : 0.0));
    free(acc);
}

static int submit(const object *h, void (*fn)(const void *), const void *job, size_t bytes)
{
    stream_work_fn *work = stream_work();
    if (!work)
        fn(job);
    else if (work(h->stream, fn, job, bytes) != 0)
        return 5000; /* CUDNN_STATUS_EXECUTION_FAILED */
    return ST_SUCCESS;
}

static int convolve(void *handle, int pass, const problem *p, int algo, const float *alpha,
                    const float *beta, const void *x, const void *w, const void *y, void *out,
                    void *ws, size_t ws_bytes)
{
    const object *h = as(handle, HANDLE);
    const fake_algo *a = find_algo(pass, algo);
    if (!h || !consistent(p) || !a || !alpha || !beta || !x || !w || !y || !out)
        return refuse();
    const size_t needed = need(a, p, pass);
    if (ws_bytes < needed || (needed && !ws))
        return refuse();
    const object *X = p->x, *W = p->w, *Y = p->y, *C = p->conv;
    conv_job job = {pass, X->n, X->c, X->h, X->w, W->n, W->c, W->n / C->groups, W->h, W->w, Y->h, Y->w,
                    C->sh, C->sw, C->ph, C->pw, C->dh, C->dw, C->groups, *alpha, *beta,
                    x, w, y, out, ws, needed};
    g_runs[pass]++;
    g_last_algo[pass] = algo + 1;
    return submit(h, run_conv, &job, sizeof job);
}

int cudnnConvolutionForward(void *h, const float *alpha, void *xd, const void *x, void *wd,
                            const void *w, void *conv, int algo, void *ws, size_t ws_bytes,
                            const float *beta, void *yd, void *y)
{
    problem p = make_problem(xd, wd, yd, conv);
    return convolve(h, FORWARD, &p, algo, alpha, beta, x, w, x, y, ws, ws_bytes);
}
int cudnnConvolutionBackwardData(void *h, const float *alpha, void *wd, const void *w, void *dyd,
                                 const void *dy, void *conv, int algo, void *ws, size_t ws_bytes,
                                 const float *beta, void *dxd, void *dx)
{
    problem p = make_problem(dxd, wd, dyd, conv);
    return convolve(h, DATA, &p, algo, alpha, beta, dx, w, dy, dx, ws, ws_bytes);
}
int cudnnConvolutionBackwardFilter(void *h, const float *alpha, void *xd, const void *x, void *dyd,
                                   const void *dy, void *conv, int algo, void *ws, size_t ws_bytes,
                                   const float *beta, void *dwd, void *dw)
{
    problem p = make_problem(xd, dwd, dyd, conv);
    return convolve(h, FILTER, &p, algo, alpha, beta, x, dw, dy, dw, ws, ws_bytes);
}

/* C = alpha A + beta C with A [1, C, 1, 1] broadcast over C [n, C, h, w]. */
typedef struct add_job {
    int n, c, hw;
    float alpha, beta;
    const float *a;
    float *out;
} add_job;

static void run_add(const void *ctx)
{
    const add_job *j = ctx;
    for (int b = 0; b < j->n; b++)
        for (int ch = 0; ch < j->c; ch++)
            for (int i = 0; i < j->hw; i++) {
                float *v = &j->out[((long long)b * j->c + ch) * j->hw + i];
                *v = j->alpha * j->a[ch] + (j->beta != 0.0f ? j->beta * *v : 0.0f);
            }
}

int cudnnAddTensor(void *handle, const float *alpha, void *ad, const void *a, const float *beta,
                   void *cd, void *c)
{
    const object *h = as(handle, HANDLE), *A = as(ad, TENSOR), *C = as(cd, TENSOR);
    if (!h || !A || !C || !alpha || !beta || !a || !c || A->n != 1 || A->c != C->c || A->h != 1 ||
        A->w != 1)
        return refuse();
    add_job job = {C->n, C->c, C->h * C->w, *alpha, *beta, a, c};
    return submit(h, run_add, &job, sizeof job);
}
