/* Convolutions through oneDNN (built when CMake finds libdnnl-dev).
 *
 * oneDNN's direct kernels work in blocked layouts (nChw16c, OIhw16i16o, ...)
 * while unigrad's tensors are NCHW: each call reorders its inputs into the
 * layouts the primitive chose, runs it and reorders its output back, all in
 * the workspace the core planned (oneDNN's scratchpad too, so it allocates
 * nothing per call). The reorders cost a pass over each tensor, which the
 * kernels repay only when every output sums enough products: below
 * UG_ONEDNN_MIN_PRODUCTS, and wherever oneDNN offers only its own im2col +
 * GEMM, the core's chunked im2col runs instead (docs/ARCHITECTURE.md has the
 * measurements).
 *
 * bf16 convolutions run here too where the processor multiplies bf16
 * natively (ug_cpu_native_bf16: AVX512-BF16 or AMX), the bias f32 or bf16,
 * the weight gradient summed in f32 by oneDNN and rounded once; elsewhere
 * oneDNN would emulate them, and im2col with widened GEMM tiles runs.
 *
 * Threads: Debian's oneDNN runs on OpenMP. Its team is set to the device's
 * budget for each call, and the device's next jobs run on the same team
 * while its threads spin (ug_cpu_workers_used_openmp), so two pools never
 * hold the cores at once. An OpenMP region ends at a barrier that waits for
 * every thread of its team, so on a machine whose cores other processes
 * hold, a convolution still waits for descheduled threads (the device's
 * own jobs move off OpenMP there; a convolution's team stays the budget's
 * size, since oneDNN's sums, the weight gradient's, may split by thread). */
#include "backends/cpu/convs.h"
#include "backends/cpu/matmul_bf16.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "base/error.h"
#include "base/fault.h"

/* Products per output (input channels per group times kernel taps) from
 * which oneDNN's kernels win over im2col + OpenBLAS despite the reorders,
 * in f32. In bf16 they win at any size (measured on the CNN's first
 * convolution, 9 products: 0.38 against 1.07 ms forward at batch 64), as
 * im2col's products there go through a matmul primitive per image's tile. */
#define UG_ONEDNN_MIN_PRODUCTS 64

enum { CACHE_SIZE = 64, MAX_ARGS = 3 };

/* What identifies a convolution pass: the plan's arguments less the views. */
typedef struct conv_key {
    ug_conv_pass pass;
    ug_dtype dtype, out_dtype, bias_dtype;
    bool with_bias;
    int groups;
    int64_t oc;
    ug_window2d win;
} conv_key;

/* One tensor argument: unigrad's layout, the primitive's, and when they
 * differ the reorder between them and where the copy lives in the workspace. */
typedef struct conv_arg {
    int arg;     /* DNNL_ARG_SRC, ... */
    bool output;
    dnnl_memory_desc_t plain, library;
    dnnl_primitive_t reorder; /* NULL: the primitive reads the plain layout */
    size_t offset;
} conv_arg;

/* A planned pass: its primitive, arguments and workspace. */
typedef struct conv_entry {
    conv_key key;
    bool runs;
    dnnl_primitive_t primitive;
    conv_arg args[MAX_ARGS];
    int nargs;
    dnnl_memory_desc_t bias, scratchpad;
    size_t scratchpad_offset, scratchpad_bytes, workspace_bytes;
} conv_entry;

struct ug_cpu_convs {
    dnnl_engine_t engine;
    pthread_mutex_t mutex; /* the cache and the stream */
    dnnl_stream_t stream;
    conv_entry *entries[CACHE_SIZE];
    int count;
};

static const char *status_text(dnnl_status_t st)
{
    switch (st) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_runtime_error: return "runtime error";
    default: return "error";
    }
}

#define DNNL_TRY(call)                                                                       \
    do {                                                                                     \
        dnnl_status_t st_ = (call);                                                          \
        if (st_ != dnnl_success)                                                             \
            return UG_CPU_ERROR(st_ == dnnl_out_of_memory ? UG_ERR_OUT_OF_MEMORY             \
                                                          : UG_ERR_BACKEND,                  \
                                "cpu: oneDNN %s returned %s", #call, status_text(st_));      \
    } while (0)

ug_status ug_cpu_convs_create(ug_cpu_convs **out)
{
    *out = NULL;
    ug_cpu_convs *c = ug_calloc(1, sizeof *c);
    if (!c)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory opening the device");
    dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st == dnnl_success)
        st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        if (c->engine)
            dnnl_engine_destroy(c->engine);
        free(c);
        return UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: oneDNN's CPU engine: %s", status_text(st));
    }
    pthread_mutex_init(&c->mutex, NULL);
    *out = c;
    return UG_OK;
}

static void free_entry(conv_entry *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nargs; i++)
        if (e->args[i].reorder)
            dnnl_primitive_destroy(e->args[i].reorder);
    if (e->primitive)
        dnnl_primitive_destroy(e->primitive);
    free(e);
}

void ug_cpu_convs_destroy(ug_cpu_convs *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->count; i++)
        free_entry(c->entries[i]);
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
    pthread_mutex_destroy(&c->mutex);
    free(c);
}

static conv_key key_of(const ug_conv_args *a)
{
    conv_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.pass = a->pass;
    k.with_bias = a->with_bias && a->pass == UG_CONV_FORWARD;
    k.dtype = a->dtype;
    k.out_dtype = a->out_dtype;
    k.bias_dtype = k.with_bias ? a->bias_dtype : UG_F32;
    k.groups = a->groups;
    k.oc = a->oc;
    k.win = a->win;
    return k;
}

static size_t align_up(size_t n) { return (n + 63) / 64 * 64; }

static dnnl_data_type_t library_dtype(ug_dtype dtype)
{
    return dtype == UG_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* The plain descriptors: NCHW images, [oc, c, kh, kw] or, with groups,
 * [groups, oc / groups, c / groups, kh, kw] weights. */
static ug_status plain_descs(const conv_key *k, ug_conv_pass pass, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w,
                             dnnl_memory_desc_t *bias, dnnl_memory_desc_t *y)
{
    const ug_window2d *v = &k->win;
    dnnl_dims_t xd = {v->n, v->c, v->h, v->w}, yd = {v->n, k->oc, v->oh, v->ow};
    dnnl_dims_t wd = {k->groups, k->oc / k->groups, v->c / k->groups, v->kh, v->kw}, bd = {k->oc};
    bool grouped = k->groups > 1;
    /* k's pass's output may be f32 for half inputs (the forward pass that
     * hints a backward one takes its inputs' dtype throughout) */
    dnnl_data_type_t in = library_dtype(k->dtype), out = pass == k->pass ? library_dtype(k->out_dtype) : in;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(x, 4, xd, pass == UG_CONV_BACKWARD_DATA ? out : in, dnnl_nchw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(y, 4, yd, pass == UG_CONV_FORWARD ? out : in, dnnl_nchw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(w, grouped ? 5 : 4, grouped ? wd : wd + 1,
                                          pass == UG_CONV_BACKWARD_WEIGHTS ? out : in,
                                          grouped ? dnnl_goihw : dnnl_oihw));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(bias, 1, bd, library_dtype(k->bias_dtype), dnnl_a));
    return UG_OK;
}

/* The same shapes with the layout left to the library. */
static ug_status any_layout(const dnnl_memory_desc_t *plain, dnnl_memory_desc_t *any)
{
    DNNL_TRY(dnnl_memory_desc_init_by_tag(any, plain->ndims, plain->dims, plain->data_type,
                                          dnnl_format_tag_any));
    return UG_OK;
}

/* The descriptor of the pass, in any layout, for the geometry of k. */
static ug_status pass_desc(const conv_key *k, ug_conv_pass pass, dnnl_convolution_desc_t *d)
{
    dnnl_memory_desc_t px, pw, pb, py, x, w, y;
    UG_TRY(plain_descs(k, pass, &px, &pw, &pb, &py));
    UG_TRY(any_layout(&px, &x));
    UG_TRY(any_layout(&pw, &w));
    UG_TRY(any_layout(&py, &y));
    const ug_window2d *v = &k->win;
    /* oneDNN counts dilation from 0 and wants the right padding that
     * yields the output size; PyTorch's floor can leave it negative, where
     * 0 gives the same size. */
    int64_t span_h = (int64_t)v->dh * (v->kh - 1) + 1, span_w = (int64_t)v->dw * (v->kw - 1) + 1;
    int64_t right_h = (v->oh - 1) * v->sh + span_h - v->h - v->ph;
    int64_t right_w = (v->ow - 1) * v->sw + span_w - v->w - v->pw;
    dnnl_dims_t strides = {v->sh, v->sw}, dilates = {v->dh - 1, v->dw - 1};
    dnnl_dims_t left = {v->ph, v->pw}, right = {right_h > 0 ? right_h : 0, right_w > 0 ? right_w : 0};
    const dnnl_alg_kind_t direct = dnnl_convolution_direct;
    switch (pass) {
    case UG_CONV_FORWARD:
        DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(d, dnnl_forward_training, direct, &x, &w,
                                                            k->with_bias ? &pb : NULL, &y, strides,
                                                            dilates, left, right));
        break;
    case UG_CONV_BACKWARD_DATA:
        DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(d, direct, &x, &w, &y, strides,
                                                                  dilates, left, right));
        break;
    case UG_CONV_BACKWARD_WEIGHTS:
        DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(d, direct, &x, &w, NULL, &y,
                                                                     strides, dilates, left, right));
        break;
    }
    return UG_OK;
}

/* The pass's primitive descriptor, or NULL when oneDNN has no
 * implementation for it. Backward passes are hinted by the forward pass,
 * as oneDNN requires. */
static ug_status make_pd(ug_cpu_convs *c, const conv_key *k, dnnl_primitive_desc_t *pd)
{
    *pd = NULL;
    dnnl_convolution_desc_t d, fd;
    UG_TRY(pass_desc(k, k->pass, &d));
    if (k->pass != UG_CONV_FORWARD)
        UG_TRY(pass_desc(k, UG_CONV_FORWARD, &fd));
    dnnl_primitive_attr_t attr = NULL;
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_primitive_desc_t hint = NULL;
    bool hinted = k->pass == UG_CONV_FORWARD ||
                  dnnl_primitive_desc_create(&hint, &fd, NULL, c->engine, NULL) == dnnl_success;
    /* No implementation (dnnl_unimplemented and the like) leaves *pd NULL:
     * the core's im2col runs the pass. */
    if (st == dnnl_success && hinted && dnnl_primitive_desc_create(pd, &d, attr, c->engine, hint) != dnnl_success)
        *pd = NULL;
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    dnnl_primitive_attr_destroy(attr);
    DNNL_TRY(st);
    return UG_OK;
}

/* Adds a tensor argument with its reorder when the layouts differ. */
static ug_status add_arg(ug_cpu_convs *c, conv_entry *e, dnnl_primitive_desc_t pd, int arg,
                         bool output, const dnnl_memory_desc_t *plain)
{
    conv_arg *a = &e->args[e->nargs++];
    a->arg = arg;
    a->output = output;
    a->plain = *plain;
    const dnnl_memory_desc_t *library = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    if (!library)
        return UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: oneDNN's convolution has no layout for argument %d", arg);
    a->library = *library;
    if (dnnl_memory_desc_equal(&a->plain, &a->library))
        return UG_OK;
    dnnl_primitive_desc_t rpd = NULL;
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, output ? &a->library : &a->plain, c->engine,
                                                output ? &a->plain : &a->library, c->engine, NULL));
    dnnl_status_t st = dnnl_primitive_create(&a->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    DNNL_TRY(st);
    a->offset = e->workspace_bytes;
    e->workspace_bytes += align_up(dnnl_memory_desc_get_size(&a->library));
    return UG_OK;
}

/* Whether the primitive oneDNN picked is one of its own kernels, not its
 * im2col + GEMM ("gemm:jit"), which the core's chunked im2col matches. */
static bool own_kernel(dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && !strstr(impl, "gemm") && !strstr(impl, "ref");
}

/* Whether oneDNN computes in dtype here: f32 always, bf16 where the
 * processor multiplies it natively (elsewhere oneDNN would convert in
 * reference code, slower than im2col in f32). */
static bool takes(ug_dtype dtype)
{
    return dtype == UG_F32 || (dtype == UG_BF16 && ug_cpu_native_bf16());
}

static ug_status fill_entry(ug_cpu_convs *c, conv_entry *e)
{
    const conv_key *k = &e->key;
    const ug_window2d *v = &k->win;
    const int64_t products = (int64_t)(v->c / k->groups) * v->kh * v->kw;
    if ((k->dtype == UG_F32 && products < UG_ONEDNN_MIN_PRODUCTS) || !takes(k->dtype) ||
        (k->out_dtype != k->dtype && k->out_dtype != UG_F32) ||
        (k->with_bias && k->bias_dtype != UG_F32 && k->bias_dtype != k->dtype))
        return UG_OK;
    dnnl_primitive_desc_t pd = NULL;
    UG_TRY(make_pd(c, k, &pd));
    if (!pd || !own_kernel(pd)) {
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        return UG_OK;
    }
    dnnl_memory_desc_t x, w, bias, y;
    ug_status st = plain_descs(k, k->pass, &x, &w, &bias, &y);
    bool fwd = k->pass == UG_CONV_FORWARD, data = k->pass == UG_CONV_BACKWARD_DATA;
    if (st == UG_OK)
        st = add_arg(c, e, pd, fwd ? DNNL_ARG_SRC : data ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, data, &x);
    if (st == UG_OK)
        st = add_arg(c, e, pd, k->pass == UG_CONV_BACKWARD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS,
                     k->pass == UG_CONV_BACKWARD_WEIGHTS, &w);
    if (st == UG_OK)
        st = add_arg(c, e, pd, fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, fwd, &y);
    e->bias = bias;
    if (st == UG_OK) {
        const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (pad) {
            e->scratchpad = *pad;
            e->scratchpad_bytes = dnnl_memory_desc_get_size(pad);
        }
        e->scratchpad_offset = e->workspace_bytes;
        e->workspace_bytes += align_up(e->scratchpad_bytes);
        dnnl_status_t dst = dnnl_primitive_create(&e->primitive, pd);
        if (dst != dnnl_success)
            st = UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: oneDNN dnnl_primitive_create returned %s",
                              status_text(dst));
    }
    dnnl_primitive_desc_destroy(pd);
    e->runs = st == UG_OK;
    return st;
}

/* The cached entry of args' pass, made on first use. Called with the mutex
 * held. */
static ug_status find_entry(ug_cpu_convs *c, const ug_conv_args *args, conv_entry **out)
{
    conv_key k = key_of(args);
    for (int i = 0; i < c->count; i++)
        if (!memcmp(&c->entries[i]->key, &k, sizeof k)) {
            *out = c->entries[i];
            return UG_OK;
        }
    if (c->count == CACHE_SIZE) { /* a model with this many shapes: keep the newest */
        free_entry(c->entries[0]);
        memmove(c->entries, c->entries + 1, (CACHE_SIZE - 1) * sizeof c->entries[0]);
        c->count--;
    }
    conv_entry *e = ug_calloc(1, sizeof *e);
    if (!e)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory planning a convolution");
    e->key = k;
    ug_status st = fill_entry(c, e);
    if (st != UG_OK) {
        free_entry(e);
        return st;
    }
    c->entries[c->count++] = e;
    *out = e;
    return UG_OK;
}

ug_status ug_cpu_conv_plan(ug_bdev *dev, const ug_conv_args *args, bool *runs, size_t *workspace_bytes)
{
    *runs = false;
    *workspace_bytes = 0;
    ug_cpu_convs *c = dev->convs;
    pthread_mutex_lock(&c->mutex);
    conv_entry *e = NULL;
    ug_status st = find_entry(c, args, &e);
    if (st == UG_OK && e->runs) {
        *runs = true;
        *workspace_bytes = e->workspace_bytes;
    }
    pthread_mutex_unlock(&c->mutex);
    return st;
}

/* A memory over user data or the workspace; NULL data for none. */
static ug_status wrap(ug_cpu_convs *c, const dnnl_memory_desc_t *md, void *data, dnnl_memory_t *out)
{
    DNNL_TRY(dnnl_memory_create(out, md, c->engine, data));
    return UG_OK;
}

static ug_status reorder(ug_cpu_convs *c, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DNNL_TRY(dnnl_primitive_execute(r, c->stream, 2, args));
    return UG_OK;
}

/* The user's tensor of argument a. */
static void *user_data(const conv_arg *a, const ug_conv_args *args)
{
    switch (a->arg) {
    case DNNL_ARG_SRC: return ug_cpu_ptr(args->x);
    case DNNL_ARG_DIFF_SRC: return ug_cpu_ptr(args->dx);
    case DNNL_ARG_WEIGHTS: return ug_cpu_ptr(args->w);
    case DNNL_ARG_DIFF_WEIGHTS: return ug_cpu_ptr(args->dw);
    case DNNL_ARG_DST: return ug_cpu_ptr(args->y);
    default: return ug_cpu_ptr(args->dy);
    }
}

/* Runs entry e: inputs reordered in, the primitive, the output out. */
static ug_status run_entry(ug_cpu_convs *c, const conv_entry *e, const ug_conv_args *args)
{
    char *workspace = ug_cpu_ptr(args->workspace);
    dnnl_memory_t user[MAX_ARGS] = {NULL}, library[MAX_ARGS] = {NULL}, bias = NULL, pad = NULL;
    dnnl_exec_arg_t exec[MAX_ARGS + 2];
    int nexec = 0;
    ug_status st = UG_OK;
    for (int i = 0; i < e->nargs && st == UG_OK; i++) {
        const conv_arg *a = &e->args[i];
        st = wrap(c, &a->plain, user_data(a, args), &user[i]);
        if (st == UG_OK && a->reorder)
            st = wrap(c, &a->library, workspace + a->offset, &library[i]);
        if (st == UG_OK && a->reorder && !a->output)
            st = reorder(c, a->reorder, user[i], library[i]);
        if (st == UG_OK)
            exec[nexec++] = (dnnl_exec_arg_t){a->arg, a->reorder ? library[i] : user[i]};
    }
    if (st == UG_OK && e->key.with_bias && (st = wrap(c, &e->bias, ug_cpu_ptr(args->bias), &bias)) == UG_OK)
        exec[nexec++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
    if (st == UG_OK && e->scratchpad_bytes &&
        (st = wrap(c, &e->scratchpad, workspace + e->scratchpad_offset, &pad)) == UG_OK)
        exec[nexec++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    if (st == UG_OK) {
        dnnl_status_t dst = dnnl_primitive_execute(e->primitive, c->stream, nexec, exec);
        if (dst != dnnl_success)
            st = UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: oneDNN's convolution returned %s", status_text(dst));
    }
    for (int i = 0; i < e->nargs && st == UG_OK; i++)
        if (e->args[i].reorder && e->args[i].output)
            st = reorder(c, e->args[i].reorder, library[i], user[i]);
    for (int i = 0; i < e->nargs; i++) {
        if (user[i])
            dnnl_memory_destroy(user[i]);
        if (library[i])
            dnnl_memory_destroy(library[i]);
    }
    if (bias)
        dnnl_memory_destroy(bias);
    if (pad)
        dnnl_memory_destroy(pad);
    return st;
}

ug_status ug_cpu_conv2d(ug_bdev *dev, const ug_conv_args *args)
{
    ug_cpu_convs *c = dev->convs;
    pthread_mutex_lock(&c->mutex);
    conv_entry *e = NULL;
    ug_status st = find_entry(c, args, &e);
    if (st == UG_OK && (!e->runs || args->workspace_bytes < e->workspace_bytes))
        st = UG_CPU_ERROR(UG_ERR_STATE,
                          "cpu: a convolution planned for oneDNN got %zu bytes of workspace, not the "
                          "%zu it needs (or oneDNN no longer runs it)",
                          args->workspace_bytes, e->runs ? e->workspace_bytes : 0);
    if (st == UG_OK) { /* the caller's own OpenMP setting is given back */
        int before = omp_get_max_threads();
        omp_set_num_threads(dev->threads);
        st = run_entry(c, e, args);
        omp_set_num_threads(before);
        ug_cpu_workers_used_openmp(dev->workers);
    }
    pthread_mutex_unlock(&c->mutex);
    return st;
}
