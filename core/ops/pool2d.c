/* Max and average pooling, global and adaptive average pooling over NCHW
 * tensors, eager and in graphs, each defined once with its gradient (the
 * last two composed of other ops). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/ops/op.h"
#include "unigrad/conv.h"
#include "unigrad/ops.h"

/* ---- pooling: in x [N, C, H, W] ---- */

static ug_op pool_op(const char *name, ug_pool2d_kind kind, const ug_pool2d_params *p)
{
    ug_pool2d_params d = p ? *p : (ug_pool2d_params){0};
    ug_op op = {.def = &ug_op_pool, .name = name};
    op.p.window.kind = kind;
    op.p.window.win = (ug_window2d){.kh = d.kernel[0], .kw = d.kernel[1],
                                  .sh = d.stride[0] ? d.stride[0] : d.kernel[0],
                                  .sw = d.stride[1] ? d.stride[1] : d.kernel[1],
                                  .ph = d.padding[0], .pw = d.padding[1], .dh = 1, .dw = 1};
    return op;
}

static ug_status pool_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    UG_TRY(ug_infer_images(op, &in[0]));
    ug_window2d win = op->p.window.win;
    if (win.kh < 1 || win.kw < 1 || win.sh < 1 || win.sw < 1 || win.ph < 0 || win.pw < 0 ||
        2 * (int64_t)win.ph > win.kh || 2 * (int64_t)win.pw > win.kw)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: kernel %dx%d, stride %dx%d, padding %dx%d: the kernel and stride "
                            "must be positive and the padding at most half the kernel",
                            op->name, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw);
    ug_window_take_image(&win, in[0].shape);
    UG_TRY(ug_window_outputs(op, &win));
    out[0] = (ug_meta){.dtype = in[0].dtype, .ndim = 4, .shape = {win.n, win.c, win.oh, win.ow}};
    if (op->p.window.kind == UG_POOL_MAX) { /* where each maximum was, for the gradient */
        out[1] = out[0];
        out[1].dtype = UG_I32;
        *nout = 2;
    }
    return UG_OK;
}

static ug_status pool_run(const ug_op *op, const ug_tensor *image, const ug_tensor *pooled,
                          ug_pool2d_args *args)
{
    if (ug_tensor_numel(image) == 0 || ug_tensor_numel(pooled) == 0)
        return UG_OK;
    args->kind = op->p.window.kind;
    args->win = op->p.window.win;
    ug_window_take_image(&args->win, image->shape);
    args->win.oh = pooled->shape[2];
    args->win.ow = pooled->shape[3];
    return ug_dispatch(ug_dev(image), UG_KERNEL_POOL2D, op->name, UG_F32, args);
}

static ug_status pool_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_pool2d_args args = {.x = ug_kview_of(in[0]), .y = ug_kview_of(out[0])};
    if (op->p.window.kind == UG_POOL_MAX)
        args.index = ug_kview_of(out[1]);
    return pool_run(op, in[0], out[0], &args);
}

/* dx: in gy (and the max's index); the image size is the op's. */
static ug_status pool_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                 int *nout)
{
    (void)nin;
    (void)nout;
    const ug_window2d *win = &op->p.window.win;
    out[0] = (ug_meta){.dtype = in[0].dtype, .ndim = 4,
                       .shape = {in[0].shape[0], in[0].shape[1], win->h, win->w}};
    return UG_OK;
}

static ug_status pool_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_pool2d_args args = {.backward = true, .dy = ug_kview_of(in[0]), .dx = ug_kview_of(out[0])};
    if (op->p.window.kind == UG_POOL_MAX)
        args.index = ug_kview_of(in[1]);
    return pool_run(op, out[0], in[0], &args);
}

const ug_op_def ug_op_pool_grad = {.family = "pool2d gradient", .infer = pool_grad_infer,
                                   .launch = pool_grad_launch};

static ug_status pool_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_op op = *n->op;
    op.def = &ug_op_pool_grad;
    op.name = op.p.window.kind == UG_POOL_MAX ? "max_pool2d gradient" : "avg_pool2d gradient";
    op.p.window.win.h = ug_value_dim(n->in[0], 2);
    op.p.window.win.w = ug_value_dim(n->in[0], 3);
    ug_value *in[2] = {gy, n->nsaved ? n->saved[0] : NULL}, *dx = NULL;
    UG_TRY(ug_op_graph(g, &op, n->nsaved ? 2 : 1, in, &dx));
    return ug_grad_give(g, n->in[0], dx);
}

const ug_op_def ug_op_pool = {.family = "pool2d", .infer = pool_infer, .launch = pool_launch,
                              .backward = pool_backward, .autocast = ug_autocast_follow};

ug_status ug_max_pool2d(const ug_tensor *x, const ug_pool2d_params *params, ug_tensor **out)
{
    ug_op op = pool_op("max_pool2d", UG_POOL_MAX, params);
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_avg_pool2d(const ug_tensor *x, const ug_pool2d_params *params, ug_tensor **out)
{
    ug_op op = pool_op("avg_pool2d", UG_POOL_AVG, params);
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_max_pool2d(ug_graph *g, ug_value *x, const ug_pool2d_params *params, ug_value **out)
{
    ug_op op = pool_op("graph max_pool2d", UG_POOL_MAX, params);
    return ug_op_graph(g, &op, 1, &x, out);
}

ug_status ug_g_avg_pool2d(ug_graph *g, ug_value *x, const ug_pool2d_params *params, ug_value **out)
{
    ug_op op = pool_op("graph avg_pool2d", UG_POOL_AVG, params);
    return ug_op_graph(g, &op, 1, &x, out);
}

/* Global average pooling is the mean over each plane: a reduction. */
static ug_status global_pool_shapes(const char *name, ug_dtype dtype, int ndim, const int64_t *shape,
                                    int64_t *planes, int64_t *pooled)
{
    if (!ug_dtype_is_float(dtype))
        return ug_set_error(UG_ERR_DTYPE, "%s: x is %s; this op takes f32, f16 or bf16 (cast it with ug_cast)",
                            name, ug_dtype_name(dtype));
    if (ndim != 4) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE, "%s: x is %s; expected images [N, C, H, W]", name,
                            ug_format_shape(ndim, shape, s, sizeof s));
    }
    int64_t p[3] = {shape[0], shape[1], shape[2] * shape[3]}, q[4] = {shape[0], shape[1], 1, 1};
    memcpy(planes, p, sizeof p);
    memcpy(pooled, q, sizeof q);
    return UG_OK;
}

ug_status ug_global_avg_pool2d(const ug_tensor *x, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "global_avg_pool2d: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(x, "global_avg_pool2d", "x"));
    int64_t planes[3], pooled[4];
    UG_TRY(global_pool_shapes("global_avg_pool2d", x->dtype, x->ndim, x->shape, planes, pooled));
    ug_tensor *flat = NULL, *mean = NULL;
    UG_TRY(ug_tensor_reshape(x, 3, planes, &flat));
    ug_status st = ug_mean(flat, 2, &mean);
    ug_tensor_free(flat);
    if (st == UG_OK)
        st = ug_tensor_reshape(mean, 4, pooled, out);
    ug_tensor_free(mean);
    return st;
}

ug_status ug_g_global_avg_pool2d(ug_graph *g, ug_value *x, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "graph global_avg_pool2d"));
    UG_TRY(ug_graph_check_value(g, x, "graph global_avg_pool2d", "x"));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph global_avg_pool2d: out is NULL");
    int64_t planes[3], pooled[4];
    const ug_meta m = ug_value_meta(x);
    UG_TRY(global_pool_shapes("graph global_avg_pool2d", m.dtype, m.ndim, m.shape, planes, pooled));
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *flat = NULL, *mean = NULL;
    ug_status st = ug_g_reshape(g, x, 3, planes, &flat);
    if (st == UG_OK)
        st = ug_g_mean(g, flat, 2, false, &mean);
    if (st == UG_OK)
        st = ug_g_reshape(g, mean, 4, pooled, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

/* ---- adaptive average pooling ----
 * PyTorch's rule: output cell i of an axis of `in` averages inputs
 * floor(i in / out) to ceil((i + 1) in / out) - 1. Where the sizes divide
 * the bins are equal and tile the image: an average pool with that kernel
 * and stride. Otherwise it is separable, rows then columns: each bin a
 * slice and its mean, the bins concatenated (out + out nodes an axis). */

static ug_status adaptive_check(const char *name, ug_dtype dtype, int ndim, const int64_t *shape, int64_t out_h,
                                int64_t out_w)
{
    if (!ug_dtype_is_float(dtype))
        return ug_set_error(UG_ERR_DTYPE, "%s: x is %s; this op takes f32, f16 or bf16 (cast it with ug_cast)",
                            name, ug_dtype_name(dtype));
    if (ndim != 4 || shape[2] < 1 || shape[3] < 1 || out_h < 1 || out_w < 1 || out_h > INT32_MAX ||
        out_w > INT32_MAX) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE, "%s: x is %s and the output %lldx%lld; expected images [N, C, H, W] with "
                            "H and W at least 1, and a positive output size",
                            name, ug_format_shape(ndim, shape, s, sizeof s), (long long)out_h, (long long)out_w);
    }
    return UG_OK;
}

static int64_t bin_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
static int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

/* Whether the bins of both axes are equal and tile them: then ug_pool2d_params. */
static bool adaptive_tiles(const int64_t *shape, int64_t out_h, int64_t out_w, ug_pool2d_params *p)
{
    if (shape[2] % out_h || shape[3] % out_w || shape[2] / out_h > INT32_MAX || shape[3] / out_w > INT32_MAX)
        return false;
    const int kh = (int)(shape[2] / out_h), kw = (int)(shape[3] / out_w);
    *p = (ug_pool2d_params){.kernel = {kh, kw}, .stride = {kh, kw}};
    return true;
}

/* x's axis (2 or 3) pooled into out bins. */
static ug_status adaptive_axis_g(ug_graph *g, ug_value *x, int axis, int64_t out, ug_value **y)
{
    const ug_meta m = ug_value_meta(x);
    const int64_t in = m.shape[axis];
    if (in == out) {
        *y = x;
        return UG_OK;
    }
    ug_value **bins = ug_calloc((size_t)out, sizeof *bins);
    if (!bins)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph adaptive_avg_pool2d: out of host memory");
    int64_t kept[4];
    memcpy(kept, m.shape, sizeof kept);
    kept[axis] = 1;
    ug_status st = UG_OK;
    for (int64_t i = 0; i < out && st == UG_OK; i++) {
        const int64_t start = bin_start(i, in, out);
        ug_value *slice = NULL, *mean = NULL;
        st = ug_g_slice(g, x, axis, start, bin_end(i, in, out) - start, &slice);
        if (st == UG_OK)
            st = ug_g_mean(g, slice, axis, false, &mean);
        if (st == UG_OK)
            st = ug_g_reshape(g, mean, 4, kept, &bins[i]);
    }
    if (st == UG_OK)
        st = out == 1 ? (*y = bins[0], UG_OK) : ug_g_concat(g, (int)out, bins, axis, y);
    free(bins);
    return st;
}

ug_status ug_g_adaptive_avg_pool2d(ug_graph *g, ug_value *x, int64_t out_h, int64_t out_w, ug_value **out)
{
    const char *name = "graph adaptive_avg_pool2d";
    UG_TRY(ug_graph_check_open(g, name));
    UG_TRY(ug_graph_check_value(g, x, name, "x"));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    const ug_meta m = ug_value_meta(x);
    UG_TRY(adaptive_check(name, m.dtype, m.ndim, m.shape, out_h, out_w));
    ug_pool2d_params tiles;
    if (adaptive_tiles(m.shape, out_h, out_w, &tiles))
        return ug_g_avg_pool2d(g, x, &tiles, out);
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *rows = NULL;
    ug_status st = adaptive_axis_g(g, x, 2, out_h, &rows);
    if (st == UG_OK)
        st = adaptive_axis_g(g, rows, 3, out_w, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

/* The eager form of adaptive_axis_g. */
static ug_status adaptive_axis(const ug_tensor *x, int axis, int64_t out, ug_tensor **y)
{
    const int64_t in = x->shape[axis];
    ug_tensor **bins = ug_calloc((size_t)out, sizeof *bins);
    if (!bins)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "adaptive_avg_pool2d: out of host memory");
    int64_t kept[4];
    memcpy(kept, x->shape, sizeof kept);
    kept[axis] = 1;
    ug_status st = UG_OK;
    for (int64_t i = 0; i < out && st == UG_OK; i++) {
        const int64_t start = bin_start(i, in, out);
        ug_tensor *slice = NULL, *mean = NULL;
        st = ug_slice(x, axis, start, bin_end(i, in, out) - start, &slice);
        if (st == UG_OK)
            st = ug_mean(slice, axis, &mean);
        if (st == UG_OK)
            st = ug_tensor_reshape(mean, 4, kept, &bins[i]);
        ug_tensor_free(mean);
        ug_tensor_free(slice);
    }
    if (st == UG_OK)
        st = ug_concat((int)out, (const ug_tensor *const *)bins, axis, y);
    for (int64_t i = 0; i < out; i++)
        ug_tensor_free(bins[i]);
    free(bins);
    return st;
}

ug_status ug_adaptive_avg_pool2d(const ug_tensor *x, int64_t out_h, int64_t out_w, ug_tensor **out)
{
    const char *name = "adaptive_avg_pool2d";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    UG_TRY(ug_check_tensor(x, name, "x"));
    UG_TRY(adaptive_check(name, x->dtype, x->ndim, x->shape, out_h, out_w));
    ug_pool2d_params tiles;
    if (adaptive_tiles(x->shape, out_h, out_w, &tiles))
        return ug_avg_pool2d(x, &tiles, out);
    ug_tensor *rows = NULL;
    UG_TRY(adaptive_axis(x, 2, out_h, &rows));
    const ug_status st = adaptive_axis(rows, 3, out_w, out);
    ug_tensor_free(rows);
    return st;
}
