/* The row-wise training ops of graphs: cross-entropy and layer norm, with
 * the ops their gradients use. Each is defined once (inference, launch,
 * gradient). They compute in f32. */
#include "core/graph_internal.h"

static ug_status need_f32(const ug_op *op, const ug_meta *m, const char *arg)
{
    if (m->dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; this op computes in f32 (cast the input)",
                            op->name, arg, ug_dtype_name(m->dtype));
    return UG_OK;
}

/* ---- cross-entropy: in logits [rows, classes], labels [rows] (i32) ---- */

static ug_status xent_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    const ug_meta *logits = &in[0], *labels = &in[1];
    UG_TRY(need_f32(op, logits, "logits"));
    char sl[96], sy[96];
    if (labels->dtype != UG_I32)
        return ug_set_error(UG_ERR_DTYPE, "%s: labels are %s; they must be i32 class indices",
                            op->name, ug_dtype_name(labels->dtype));
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0])
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: logits are %s and labels %s; expected [rows, classes] and [rows]",
                            op->name, ug_format_shape(logits->ndim, logits->shape, sl, sizeof sl),
                            ug_format_shape(labels->ndim, labels->shape, sy, sizeof sy));
    float s = op->p.xent.smoothing;
    if (!(s >= 0.0f && s < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: label smoothing %g must be in [0, 1)",
                            op->name, (double)s);
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = 0};
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {logits->shape[0]}}; /* row losses */
    *nout = 2;
    return UG_OK;
}

static ug_xent_args xent_args(const ug_op *op, const ug_tensor *logits, const ug_tensor *labels)
{
    return (ug_xent_args){.logits = ug_kview_of(logits), .labels = ug_kview_of(labels),
                          .rows = logits->shape[0], .cols = logits->shape[1],
                          .smoothing = op->p.xent.smoothing};
}

static ug_status xent_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_xent_args args = xent_args(op, in[0], in[1]);
    if (args.rows == 0) /* an empty batch: loss 0, like a sum over no rows */
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, 0.0f, out[0], NULL);
    args.loss = ug_kview_of(out[1]);
    UG_TRY(ug_dispatch(ug_dev(in[0]), UG_KERNEL_CROSS_ENTROPY, op->name, UG_F32, &args));
    return ug_launch_reduce(op->name, UG_RKERNEL_MEAN, out[0], out[1], 1, args.rows, 1);
}

static ug_status xent_backward(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_op op = {.def = &ug_op_cross_entropy_grad, .name = "cross_entropy backward",
                .p.xent = n->op.p.xent};
    ug_value *in[3] = {n->in[0], n->in[1], gy}, *gx = NULL;
    UG_TRY(ug_op_graph(g, &op, 3, in, &gx));
    return ug_grad_give(g, n->in[0], gx);
}

const ug_op_def ug_op_cross_entropy = {.family = "cross_entropy", .infer = xent_infer, .launch = xent_launch,
                                       .backward = xent_backward, .autocast = ug_autocast_f32,
                                       .check_role = UG_CHECKED_LOGITS};

ug_status ug_g_cross_entropy(ug_graph *g, ug_value *logits, ug_value *labels, float smoothing,
                             ug_value **out)
{
    ug_op op = {.def = &ug_op_cross_entropy, .name = "graph cross_entropy",
                .p.xent.smoothing = smoothing};
    ug_value *in[2] = {logits, labels};
    return ug_op_graph(g, &op, 2, in, out);
}

/* d loss / d logits; in: logits, labels, dloss (one element). */
static ug_status xent_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                 int *nout)
{
    (void)op;
    (void)nin;
    (void)nout;
    out[0] = in[0];
    return UG_OK;
}

static ug_status xent_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_xent_args args = xent_args(op, in[0], in[1]);
    if (args.rows == 0)
        return UG_OK;
    args.grad = ug_kview_of(out[0]);
    args.dloss = ug_kview_of(in[2]);
    args.scale = 1.0f / (float)args.rows;
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_CROSS_ENTROPY, op->name, UG_F32, &args);
}

const ug_op_def ug_op_cross_entropy_grad = {.family = "cross_entropy backward", .infer = xent_grad_infer,
                                            .launch = xent_grad_launch};

/* ---- layer norm over the last axis: in x, gamma [cols], beta [cols] ---- */

static ug_status layernorm_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                 int *nout)
{
    (void)nin;
    const ug_meta *x = &in[0];
    UG_TRY(need_f32(op, x, "x"));
    UG_TRY(need_f32(op, &in[1], "gamma"));
    UG_TRY(need_f32(op, &in[2], "beta"));
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x needs at least one axis", op->name);
    int64_t cols = x->shape[x->ndim - 1];
    if (ug_shape_numel(in[1].ndim, in[1].shape) != cols ||
        ug_shape_numel(in[2].ndim, in[2].shape) != cols)
        return ug_set_error(UG_ERR_SHAPE, "%s: gamma and beta need %lld elements (x's last axis)",
                            op->name, (long long)cols);
    if (!(op->p.layernorm.eps > 0.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: eps %g must be positive", op->name,
                            (double)op->p.layernorm.eps);
    int64_t rows = cols ? ug_shape_numel(x->ndim, x->shape) / cols : 0;
    out[0] = *x;
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {rows}}; /* mean */
    out[2] = out[1];                                                  /* rstd */
    *nout = 3;
    return UG_OK;
}

/* Forward (in: x, gamma, beta; out: y, mean, rstd) and backward (in: dy, x,
 * mean, rstd, gamma; out: dx) share the kernel. */
static ug_status layernorm_run(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in,
                               bool backward)
{
    const ug_tensor *x = in[backward ? 1 : 0];
    int64_t cols = x->shape[x->ndim - 1];
    ug_layernorm_args args = {.x = ug_kview_of(x), .cols = cols, .eps = op->p.layernorm.eps};
    args.rows = cols ? ug_tensor_numel(x) / cols : 0;
    if (args.rows == 0)
        return UG_OK;
    if (backward) {
        args.dy = ug_kview_of(in[0]);
        args.mean = ug_kview_of(in[2]);
        args.rstd = ug_kview_of(in[3]);
        args.gamma = ug_kview_of(in[4]);
        args.dx = ug_kview_of(out[0]);
    } else {
        args.gamma = ug_kview_of(in[1]);
        args.beta = ug_kview_of(in[2]);
        args.y = ug_kview_of(out[0]);
        args.mean = ug_kview_of(out[1]);
        args.rstd = ug_kview_of(out[2]);
    }
    return ug_dispatch(ug_dev(x), UG_KERNEL_LAYERNORM, op->name, UG_F32, &args);
}

static ug_status layernorm_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return layernorm_run(op, out, in, false);
}

static ug_status layernorm_grad_launch(const ug_op *op, ug_tensor *const *out,
                                       const ug_tensor *const *in)
{
    return layernorm_run(op, out, in, true);
}

static ug_status layernorm_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                      int *nout)
{
    (void)op;
    (void)nin;
    (void)nout;
    out[0] = in[1];
    return UG_OK;
}

const ug_op_def ug_op_layernorm_grad = {.family = "layernorm backward", .infer = layernorm_grad_infer,
                                        .launch = layernorm_grad_launch};

static ug_status layernorm_backward(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    ug_value *mean = n->scratch[0], *rstd = n->scratch[1];
    int64_t cols = x->shape[x->ndim - 1];
    if (cols == 0)
        return UG_OK; /* no elements, and gamma and beta have none: nothing to give */
    int64_t rows = ug_shape_numel(x->ndim, x->shape) / cols;
    int64_t flat[2] = {rows, cols}, column[2] = {rows, 1};
    if (ug_grad_needed(x)) {
        ug_op op = {.def = &ug_op_layernorm_grad, .name = "layernorm backward",
                    .p.layernorm = n->op.p.layernorm};
        ug_value *in[5] = {gy, x, mean, rstd, gamma}, *dx = NULL;
        UG_TRY(ug_op_graph(g, &op, 5, in, &dx));
        UG_TRY(ug_grad_give(g, x, dx));
    }
    /* dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy. */
    ug_value *gy2 = NULL, *x2 = NULL, *m2 = NULL, *r2 = NULL, *centered = NULL, *xhat = NULL;
    ug_value *prod = NULL, *dgamma = NULL, *dbeta = NULL;
    UG_TRY(ug_g_reshape(g, gy, 2, flat, &gy2));
    if (ug_grad_needed(gamma)) {
        UG_TRY(ug_g_reshape(g, x, 2, flat, &x2));
        UG_TRY(ug_g_reshape(g, mean, 2, column, &m2));
        UG_TRY(ug_g_reshape(g, rstd, 2, column, &r2));
        UG_TRY(ug_g_sub(g, x2, m2, &centered));
        UG_TRY(ug_g_mul(g, centered, r2, &xhat));
        UG_TRY(ug_g_mul(g, gy2, xhat, &prod));
        UG_TRY(ug_g_reduce_axes(g, prod, UG_RKERNEL_SUM, 0, false, false, &dgamma));
        UG_TRY(ug_grad_give(g, gamma, dgamma));
    }
    if (ug_grad_needed(beta)) {
        UG_TRY(ug_g_reduce_axes(g, gy2, UG_RKERNEL_SUM, 0, false, false, &dbeta));
        UG_TRY(ug_grad_give(g, beta, dbeta));
    }
    return UG_OK;
}

const ug_op_def ug_op_layernorm = {.family = "layernorm", .infer = layernorm_infer,
                                   .launch = layernorm_launch, .backward = layernorm_backward,
                                   .autocast = ug_autocast_f32};

ug_status ug_g_layernorm(ug_graph *g, ug_value *x, ug_value *gamma, ug_value *beta, float eps,
                         ug_value **out)
{
    ug_op op = {.def = &ug_op_layernorm, .name = "graph layernorm", .p.layernorm.eps = eps};
    ug_value *in[3] = {x, gamma, beta};
    return ug_op_graph(g, &op, 3, in, out);
}
