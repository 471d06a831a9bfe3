/* oneDNN's convolution on the host (bench_onednn.h), through its 2.x C API:
 * operation descriptors with every layout left to the library (format_tag
 * any), each primitive's arguments reordered into the layouts it chose once,
 * then the primitives alone timed, as a framework that keeps its tensors in
 * oneDNN's layouts runs them. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "bench.h"
#include "bench_onednn.h"

static const char *status_name(dnnl_status_t st)
{
    switch (st) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    default: return "unknown status";
    }
}

/* True on success; otherwise prints the failed call and returns false. */
static bool dnnl_ok(dnnl_status_t st, const char *call)
{
    if (st == dnnl_success)
        return true;
    fprintf(stderr, "ug-bench conv: %s: oneDNN error: %s\n", call, status_name(st));
    return false;
}

enum { MAX_ARGS = 4, ALGORITHM_COUNT = 2 };

/* A primitive and its arguments, each in the layout the primitive chose. */
typedef struct dnnl_call {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t primitive;
    int nargs;
    dnnl_exec_arg_t args[MAX_ARGS];
} dnnl_call;

/* An argument of a primitive: the user's data in the plain layout (NCHW,
 * OIHW or a vector), or NULL for an output. */
typedef struct user_arg {
    int arg;
    const float *data;
} user_arg;

/* One convolution's training step with one algorithm. */
typedef struct conv_step {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_call forward, backward_data, backward_weights;
} conv_step;

/* Copies the user's plain data into memory, whatever its layout, or out
 * of it (to_user), through a reorder primitive. */
static bool reorder_user(const conv_step *s, dnnl_memory_t memory, float *data, bool to_user)
{
    const dnnl_memory_desc_t *md = NULL;
    if (!dnnl_ok(dnnl_memory_get_memory_desc(memory, &md), "dnnl_memory_get_memory_desc"))
        return false;
    if (md->ndims != 1 && md->ndims != 4) {
        fprintf(stderr, "ug-bench conv: oneDNN argument of %d dimensions\n", md->ndims);
        return false;
    }
    dnnl_memory_desc_t user_md;
    dnnl_memory_t user = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t reorder = NULL;
    bool ok = dnnl_ok(dnnl_memory_desc_init_by_tag(&user_md, md->ndims, md->dims, dnnl_f32,
                                                   md->ndims == 1 ? dnnl_a : dnnl_abcd),
                      "dnnl_memory_desc_init_by_tag") &&
              dnnl_ok(dnnl_memory_create(&user, &user_md, s->engine, data), "dnnl_memory_create") &&
              dnnl_ok(dnnl_reorder_primitive_desc_create(&pd, to_user ? md : &user_md, s->engine,
                                                         to_user ? &user_md : md, s->engine, NULL),
                      "dnnl_reorder_primitive_desc_create") &&
              dnnl_ok(dnnl_primitive_create(&reorder, pd), "dnnl_primitive_create (reorder)");
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, to_user ? memory : user},
                                   {DNNL_ARG_TO, to_user ? user : memory}};
        ok = dnnl_ok(dnnl_primitive_execute(reorder, s->stream, 2, args), "dnnl_primitive_execute (reorder)") &&
             dnnl_ok(dnnl_stream_wait(s->stream), "dnnl_stream_wait");
    }
    if (reorder)
        ok = dnnl_ok(dnnl_primitive_destroy(reorder), "dnnl_primitive_destroy") && ok;
    if (pd)
        ok = dnnl_ok(dnnl_primitive_desc_destroy(pd), "dnnl_primitive_desc_destroy") && ok;
    if (user)
        ok = dnnl_ok(dnnl_memory_destroy(user), "dnnl_memory_destroy") && ok;
    return ok;
}

/* call->pd's primitive and a memory for each argument in the layout the pd
 * chose, an input's filled from the user's data. */
static bool make_call(const conv_step *s, dnnl_call *call, const user_arg *args, int nargs)
{
    if (!dnnl_ok(dnnl_primitive_create(&call->primitive, call->pd), "dnnl_primitive_create"))
        return false;
    for (int i = 0; i < nargs; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(call->pd, dnnl_query_exec_arg_md, args[i].arg);
        if (!md) {
            fprintf(stderr, "ug-bench conv: oneDNN has no layout for argument %d\n", args[i].arg);
            return false;
        }
        dnnl_memory_t memory = NULL;
        if (!dnnl_ok(dnnl_memory_create(&memory, md, s->engine, DNNL_MEMORY_ALLOCATE), "dnnl_memory_create"))
            return false;
        call->args[call->nargs++] = (dnnl_exec_arg_t){args[i].arg, memory};
        if (args[i].data && !reorder_user(s, memory, (float *)args[i].data, false))
            return false;
    }
    return true;
}

static bool free_call(dnnl_call *call)
{
    bool ok = true;
    for (int i = 0; i < call->nargs; i++)
        ok = dnnl_ok(dnnl_memory_destroy(call->args[i].memory), "dnnl_memory_destroy") && ok;
    if (call->primitive)
        ok = dnnl_ok(dnnl_primitive_destroy(call->primitive), "dnnl_primitive_destroy") && ok;
    if (call->pd)
        ok = dnnl_ok(dnnl_primitive_desc_destroy(call->pd), "dnnl_primitive_desc_destroy") && ok;
    memset(call, 0, sizeof *call);
    return ok;
}

static bool free_step(conv_step *s)
{
    bool ok = free_call(&s->forward);
    ok = free_call(&s->backward_data) && ok;
    return free_call(&s->backward_weights) && ok;
}

/* The three primitives of the layer's step with algorithm, the backward
 * ones hinted by the forward one, as oneDNN requires. */
static bool make_step(conv_step *s, const conv_layer *l, dnnl_alg_kind_t algorithm, const float *x,
                      const float *weight, const float *bias, const float *dy)
{
    int64_t out_h = (l->height + 2 * l->padding - l->kernel) / l->stride + 1;
    int64_t out_w = (l->width + 2 * l->padding - l->kernel) / l->stride + 1;
    const dnnl_dims_t x_dims = {l->batch, l->channels, l->height, l->width};
    const dnnl_dims_t w_dims = {l->out_channels, l->channels, l->kernel, l->kernel};
    const dnnl_dims_t b_dims = {l->out_channels};
    const dnnl_dims_t y_dims = {l->batch, l->out_channels, out_h, out_w};
    const dnnl_dims_t strides = {l->stride, l->stride}, padding = {l->padding, l->padding};
    dnnl_memory_desc_t x_md, w_md, b_md, y_md;
    dnnl_convolution_desc_t forward_d, data_d, weights_d;
    const char *init = "dnnl_memory_desc_init_by_tag";
    bool ok = dnnl_ok(dnnl_memory_desc_init_by_tag(&x_md, 4, x_dims, dnnl_f32, dnnl_format_tag_any), init) &&
              dnnl_ok(dnnl_memory_desc_init_by_tag(&w_md, 4, w_dims, dnnl_f32, dnnl_format_tag_any), init) &&
              dnnl_ok(dnnl_memory_desc_init_by_tag(&b_md, 1, b_dims, dnnl_f32, dnnl_format_tag_any), init) &&
              dnnl_ok(dnnl_memory_desc_init_by_tag(&y_md, 4, y_dims, dnnl_f32, dnnl_format_tag_any), init);
    ok = ok &&
         dnnl_ok(dnnl_convolution_forward_desc_init(&forward_d, dnnl_forward_training, algorithm, &x_md, &w_md,
                                                    &b_md, &y_md, strides, padding, padding),
                 "dnnl_convolution_forward_desc_init") &&
         dnnl_ok(dnnl_primitive_desc_create(&s->forward.pd, &forward_d, NULL, s->engine, NULL),
                 "dnnl_primitive_desc_create (forward)");
    ok = ok &&
         dnnl_ok(dnnl_convolution_backward_data_desc_init(&data_d, algorithm, &x_md, &w_md, &y_md, strides,
                                                          padding, padding),
                 "dnnl_convolution_backward_data_desc_init") &&
         dnnl_ok(dnnl_primitive_desc_create(&s->backward_data.pd, &data_d, NULL, s->engine, s->forward.pd),
                 "dnnl_primitive_desc_create (backward data)");
    ok = ok &&
         dnnl_ok(dnnl_convolution_backward_weights_desc_init(&weights_d, algorithm, &x_md, &w_md, &b_md, &y_md,
                                                             strides, padding, padding),
                 "dnnl_convolution_backward_weights_desc_init") &&
         dnnl_ok(dnnl_primitive_desc_create(&s->backward_weights.pd, &weights_d, NULL, s->engine, s->forward.pd),
                 "dnnl_primitive_desc_create (backward weights)");
    const user_arg forward_args[] = {
        {DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, weight}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, NULL}};
    const user_arg data_args[] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, weight}, {DNNL_ARG_DIFF_SRC, NULL}};
    const user_arg weights_args[] = {
        {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, NULL}, {DNNL_ARG_DIFF_BIAS, NULL}};
    return ok && make_call(s, &s->forward, forward_args, 4) && make_call(s, &s->backward_data, data_args, 3) &&
           make_call(s, &s->backward_weights, weights_args, 4);
}

static bool execute(const conv_step *s, const dnnl_call *call, const char *what)
{
    return dnnl_ok(dnnl_primitive_execute(call->primitive, s->stream, call->nargs, call->args), what);
}

static bool run_forward(void *ctx)
{
    const conv_step *s = ctx;
    return execute(s, &s->forward, "dnnl_primitive_execute (forward)");
}

static bool run_step(void *ctx)
{
    const conv_step *s = ctx;
    return execute(s, &s->forward, "dnnl_primitive_execute (forward)") &&
           execute(s, &s->backward_data, "dnnl_primitive_execute (backward data)") &&
           execute(s, &s->backward_weights, "dnnl_primitive_execute (backward weights)");
}

/* CPU primitives on an in-order stream have finished when execute returns;
 * the wait keeps the timing right should that change. */
static bool wait_stream(void *ctx)
{
    return dnnl_ok(dnnl_stream_wait(((const conv_step *)ctx)->stream), "dnnl_stream_wait");
}

/* The forward primitive's last result, in NCHW. */
static bool read_forward(const conv_step *s, float *y)
{
    for (int i = 0; i < s->forward.nargs; i++)
        if (s->forward.args[i].arg == DNNL_ARG_DST)
            return reorder_user(s, s->forward.args[i].memory, y, true);
    return false;
}

static const char *algorithm_name(dnnl_alg_kind_t algorithm)
{
    switch (algorithm) {
    case dnnl_convolution_direct: return "direct";
    case dnnl_convolution_winograd: return "winograd";
    case dnnl_convolution_auto: return "auto";
    default: return "?";
    }
}

/* The algorithm the forward pd settled on: auto resolves to direct or
 * winograd. */
static bool chosen_algorithm(const_dnnl_primitive_desc_t pd, dnnl_alg_kind_t *algorithm)
{
    const dnnl_convolution_desc_t *d = NULL;
    if (!dnnl_ok(dnnl_primitive_desc_query(pd, dnnl_query_convolution_d, 0, &d), "dnnl_primitive_desc_query"))
        return false;
    *algorithm = d->alg_kind;
    return true;
}

static bool implementation(const_dnnl_primitive_desc_t pd, const char **name)
{
    return dnnl_ok(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, name), "dnnl_primitive_desc_query");
}

/* One algorithm's step: what it resolved to, its primitives, its times. */
typedef struct algorithm_run {
    char label[24];  /* "direct", "auto (winograd)" */
    char impls[160]; /* forward, backward data, backward weights */
    double forward_s, step_s;
    bool timed;      /* false: the same primitives as the direct run */
} algorithm_run;

static bool time_algorithm(conv_step *s, const conv_layer *l, dnnl_alg_kind_t algorithm, const float *x,
                           const float *weight, const float *bias, const float *dy, double target,
                           const algorithm_run *direct, float *y, algorithm_run *r)
{
    dnnl_alg_kind_t chosen = algorithm;
    const char *names[3] = {NULL, NULL, NULL};
    if (!make_step(s, l, algorithm, x, weight, bias, dy) || !chosen_algorithm(s->forward.pd, &chosen) ||
        !implementation(s->forward.pd, &names[0]) || !implementation(s->backward_data.pd, &names[1]) ||
        !implementation(s->backward_weights.pd, &names[2]))
        return false;
    if (algorithm == dnnl_convolution_auto)
        snprintf(r->label, sizeof r->label, "auto (%s)", algorithm_name(chosen));
    else
        snprintf(r->label, sizeof r->label, "%s", algorithm_name(chosen));
    snprintf(r->impls, sizeof r->impls, "%s, %s, %s", names[0], names[1], names[2]);
    /* auto mostly settles on the primitives direct chose: no need to time them twice. */
    if (direct && chosen == dnnl_convolution_direct && !strcmp(r->impls, direct->impls)) {
        r->timed = false;
        return true;
    }
    long reps = 0;
    r->timed = bench_time(run_forward, wait_stream, s, 3, target, &r->forward_s, &reps) &&
               bench_time(run_step, wait_stream, s, 3, target, &r->step_s, &reps);
    return r->timed && (!y || read_forward(s, y));
}

/* The result's algorithm and details from the runs. */
static void summarise(const algorithm_run *runs, onednn_conv_result *result)
{
    int fwd = 0, step = 0;
    for (int a = 1; a < ALGORITHM_COUNT; a++) {
        if (!runs[a].timed)
            continue;
        fwd = runs[a].forward_s < runs[fwd].forward_s ? a : fwd;
        step = runs[a].step_s < runs[step].step_s ? a : step;
    }
    result->forward_s = runs[fwd].forward_s;
    result->step_s = runs[step].step_s;
    if (fwd == step)
        snprintf(result->algorithm, sizeof result->algorithm, "%s", runs[fwd].label);
    else
        snprintf(result->algorithm, sizeof result->algorithm, "fwd %s, step %s", runs[fwd].label,
                 runs[step].label);
    size_t n = 0, size = sizeof result->details;
    for (int a = 0; a < ALGORITHM_COUNT && n < size; a++) {
        int written;
        if (runs[a].timed)
            written = snprintf(result->details + n, size - n, "%s%s: %s (fwd %.3f ms, step %.3f ms)",
                               a ? "; " : "", runs[a].label, runs[a].impls, runs[a].forward_s * 1e3,
                               runs[a].step_s * 1e3);
        else
            written = snprintf(result->details + n, size - n, "; %s: the same", runs[a].label);
        if (written < 0)
            break;
        n += (size_t)written;
    }
}

bool onednn_conv_time(const conv_layer *layer, const float *x, const float *weight, const float *bias,
                      const float *dy, double target_seconds, float *y, onednn_conv_result *result)
{
    static const dnnl_alg_kind_t algorithms[ALGORITHM_COUNT] = {dnnl_convolution_direct, dnnl_convolution_auto};
    memset(result, 0, sizeof *result);
    /* oneDNN threads with OpenMP: the same budget as the CPU device and
     * OpenBLAS, given back afterwards. */
    int threads_before = omp_get_max_threads();
    omp_set_num_threads(bench_cpu_threads());
    conv_step s = {0};
    bool ok = dnnl_ok(dnnl_engine_create(&s.engine, dnnl_cpu, 0), "dnnl_engine_create") &&
              dnnl_ok(dnnl_stream_create(&s.stream, s.engine, dnnl_stream_default_flags), "dnnl_stream_create");
    algorithm_run runs[ALGORITHM_COUNT];
    memset(runs, 0, sizeof runs);
    for (int a = 0; a < ALGORITHM_COUNT && ok; a++) {
        ok = time_algorithm(&s, layer, algorithms[a], x, weight, bias, dy, target_seconds, a ? &runs[0] : NULL,
                            a ? NULL : y, &runs[a]);
        ok = free_step(&s) && ok;
    }
    if (ok)
        summarise(runs, result);
    if (s.stream)
        ok = dnnl_ok(dnnl_stream_destroy(s.stream), "dnnl_stream_destroy") && ok;
    if (s.engine)
        ok = dnnl_ok(dnnl_engine_destroy(s.engine), "dnnl_engine_destroy") && ok;
    omp_set_num_threads(threads_before);
    return ok;
}

void onednn_describe(char *text, size_t size)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(text, size, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "CPU runtime not OpenMP");
}
