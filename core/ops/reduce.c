/* Reductions over an axis or over everything, and softmax over the last
 * axis: each defined once and wrapped for eager use and graphs. */
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/ops.h"

ug_reduce_args ug_reduce_args_of(ug_reduce_kind kind, ug_tensor *y, const ug_tensor *x, int64_t outer,
                                 int64_t len, int64_t inner, const ug_reduce_folds *folds)
{
    ug_reduce_args args = {.op = kind, .y = ug_kview_of(y), .x = ug_kview_of(x), .outer = outer, .len = len,
                           .inner = inner};
    if (folds) {
        args.epi.sum_alpha = folds->sum_alpha;
        args.epi.post = folds->post;
        if (folds->check)
            args.epi.check = ug_kview_of(folds->check);
        if (folds->sum)
            args.epi.sum = ug_kview_of(folds->sum);
        if (folds->match)
            args.epi.match = ug_kview_of(folds->match);
    }
    return args;
}

ug_status ug_launch_reduce(const char *op, ug_reduce_kind kind, ug_tensor *y, const ug_tensor *x,
                           int64_t outer, int64_t len, int64_t inner, const ug_reduce_folds *folds)
{
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    if (len == 0) /* sums over nothing are zero: finite, nothing to check or add (argmax refuses it) */
        return ug_launch_unary(op, UG_UNARY_FILL, 0.0f, 0.0f, y, NULL);
    const ug_reduce_args args = ug_reduce_args_of(kind, y, x, outer, len, inner, folds);
    return ug_dispatch(ug_dev(y), UG_KERNEL_REDUCE, op, x->dtype, &args);
}

/* x viewed as [outer, len, inner] for the op's axis (all: one row). */
static void reduce_extent(const ug_op *op, int ndim, const int64_t *shape, int64_t *outer,
                          int64_t *len, int64_t *inner)
{
    *outer = *inner = 1;
    *len = ug_shape_numel(ndim, shape);
    if (op->p.reduce.all)
        return;
    int a = op->p.reduce.axis < 0 ? op->p.reduce.axis + ndim : op->p.reduce.axis;
    for (int i = 0; i < ndim; i++) {
        if (i < a)
            *outer *= shape[i];
        else if (i > a)
            *inner *= shape[i];
        else
            *len = shape[i];
    }
}

static ug_status reduce_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    const ug_meta *x = &in[0];
    ug_reduce_kind kind = op->p.reduce.op;
    UG_TRY(ug_infer_float(op, x, "x"));
    if ((unsigned)kind > UG_RKERNEL_SUMSQ)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: op %d is not a ug_reduce_op", op->name,
                            (int)kind);
    char dims[96];
    int a = op->p.reduce.axis < 0 ? op->p.reduce.axis + x->ndim : op->p.reduce.axis;
    if (!op->p.reduce.all && (a < 0 || a >= x->ndim))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: axis %d is out of range for %s (%d axes)",
                            op->name, op->p.reduce.axis,
                            ug_format_shape(x->ndim, x->shape, dims, sizeof dims), x->ndim);
    out[0].dtype = kind == UG_RKERNEL_ARGMAX ? UG_I32 : x->dtype;
    out[0].ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        bool reduced = op->p.reduce.all || i == a;
        if (!reduced || op->p.reduce.keepdim)
            out[0].shape[out[0].ndim++] = reduced ? 1 : x->shape[i];
    }
    int64_t outer, len, inner;
    reduce_extent(op, x->ndim, x->shape, &outer, &len, &inner);
    bool needs_terms = kind == UG_RKERNEL_MAX || kind == UG_RKERNEL_ARGMAX || kind == UG_RKERNEL_MEAN;
    if (len == 0 && outer * inner > 0 && needs_terms)
        return ug_set_error(UG_ERR_SHAPE, "%s: the reduced axis of %s is empty", op->name,
                            ug_format_shape(x->ndim, x->shape, dims, sizeof dims));
    return UG_OK;
}

static ug_status reduce_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    int64_t outer, len, inner;
    reduce_extent(op, in[0]->ndim, in[0]->shape, &outer, &len, &inner);
    const ug_reduce_folds folds = {.check = in[1], .sum = in[1 + UG_OP_SUM_INPUT], .match = in[1 + UG_OP_MATCH_INPUT],
                                   .sum_alpha = op->sum_alpha, .post = op->p.reduce.post};
    return ug_launch_reduce(op->name, op->p.reduce.op, out[0], in[0], outer, len, inner, &folds);
}


static ug_status reduce_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *kept = gy, *gx = NULL;
    bool mean = n->op->p.reduce.op == UG_RKERNEL_MEAN;
    if (!mean && n->op->p.reduce.op != UG_RKERNEL_SUM)
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: max/argmax reductions have no gradient here");
    /* Put the reduced axes back as size 1 so the expand broadcasts along them. */
    int a = n->op->p.reduce.axis < 0 ? n->op->p.reduce.axis + ug_value_ndim(x) : n->op->p.reduce.axis;
    int64_t shape[UG_MAX_DIMS];
    for (int i = 0; i < ug_value_ndim(x); i++)
        shape[i] = n->op->p.reduce.all || i == a ? 1 : ug_value_dim(x, i);
    UG_TRY(ug_g_reshape(g, gy, ug_value_ndim(x), shape, &kept));
    UG_TRY(ug_g_expand(g, kept, x, mean, &gx));
    return ug_grad_give(g, x, gx);
}


/* Sums and means widen half operands; max and argmax stay exact in any. */
static ug_autocast_class reduce_autocast(const ug_op *op)
{
    return op->p.reduce.op == UG_RKERNEL_MAX || op->p.reduce.op == UG_RKERNEL_ARGMAX
               ? UG_AUTOCAST_FOLLOW
               : UG_AUTOCAST_F32;
}

/* A cast of the result (argmax's index too: a metric's cast of the
 * predicted class); an activation of the results (a norm's square root,
 * sqrt(mean(x^2)), or a pooled feature's activation), argmax's index
 * excepted; a check of the results as they are written (f32
 * ones: graph/check.c sees to it) and a running sum of them, argmax's
 * index excepted; argmax's index against the labels: a metric's count of
 * correct predictions, equal(argmax(logits), labels), in one launch. */
static bool reduce_absorb(ug_op *op, const ug_fold *f)
{
    const bool argmax = op->p.reduce.op == UG_RKERNEL_ARGMAX;
    switch (f->kind) {
    case UG_FOLD_CAST: return true;
    case UG_FOLD_ACTIVATION:
        if (argmax || op->p.reduce.post != UG_UNARY_COPY)
            return false;
        op->p.reduce.post = f->pair.post;
        return true;
    case UG_FOLD_SUM: return !argmax;
    case UG_FOLD_CHECK:
        if (f->input != UG_CHECKED_OPERAND_RESULT || argmax)
            return false;
        *f->slot = 0;
        return true;
    case UG_FOLD_EQUALITY:
        if (!argmax || op->p.reduce.compares)
            return false;
        op->p.reduce.compares = true;
        return true;
    default: return false;
    }
}

/* "argmax+equal" once it compares, "mean+sqrt" with an activation; else the name. */
static void reduce_describe(const ug_op *op, char *out, size_t len)
{
    const char *name = strncmp(op->name, "graph ", 6) ? op->name : op->name + 6;
    char post[24] = "";
    if (op->p.reduce.post != UG_UNARY_COPY) { /* "mean+sqrt", as the unary op names itself */
        const ug_op act = {.def = &ug_op_unary, .p.unary = {.op = op->p.reduce.post}};
        ug_op_unary.describe(&act, post, sizeof post);
    }
    snprintf(out, len, "%s%s%s%s", name, op->p.reduce.compares ? "+equal" : "", post[0] ? "+" : "", post);
}

const ug_op_def ug_op_reduce = {.family = "reduce", .infer = reduce_infer, .launch = reduce_launch,
                                .backward = reduce_backward, .autocast = reduce_autocast,
                                .absorb = reduce_absorb, .describe = reduce_describe};

static const char *reduce_name(ug_reduce_op op, bool graph)
{
    static const char *const eager[] = {"sum", "mean", "max", "argmax", "sumsq"};
    static const char *const graphs[] = {"graph sum", "graph mean", "graph max", "graph argmax",
                                         "graph sumsq"};
    if ((unsigned)op > UG_REDUCE_SUMSQ)
        return graph ? "graph reduce" : "reduce";
    return graph ? graphs[op] : eager[op];
}

static ug_op reduce_op(ug_reduce_op kind, int axis, bool all, bool keepdim, bool graph)
{
    return (ug_op){.def = &ug_op_reduce, .name = reduce_name(kind, graph),
                   .p.reduce = {.op = (ug_reduce_kind)kind, .axis = axis, .all = all, .keepdim = keepdim}};
}

ug_status ug_reduce(const ug_tensor *x, ug_reduce_op op, int axis, bool all, bool keepdim,
                    ug_tensor **out)
{
    ug_op o = reduce_op(op, axis, all, keepdim, false);
    return ug_op_eager(&o, 1, &x, out);
}

ug_status ug_g_reduce_axes(ug_graph *g, ug_value *x, ug_reduce_kind kind, int axis, bool all,
                           bool keepdim, ug_value **out)
{
    ug_op o = reduce_op((ug_reduce_op)kind, axis, all, keepdim, true);
    return ug_op_graph(g, &o, 1, &x, out);
}

ug_status ug_sum(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_SUM, axis, false, false, out); }
ug_status ug_sum_all(const ug_tensor *x, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_SUM, 0, true, false, out); }
ug_status ug_mean(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MEAN, axis, false, false, out); }
ug_status ug_mean_all(const ug_tensor *x, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MEAN, 0, true, false, out); }
ug_status ug_max(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MAX, axis, false, false, out); }
ug_status ug_argmax(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_ARGMAX, axis, false, false, out); }

ug_status ug_g_sum(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out)
{
    return ug_g_reduce_axes(g, x, UG_RKERNEL_SUM, axis, all, false, out);
}

ug_status ug_g_mean(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out)
{
    return ug_g_reduce_axes(g, x, UG_RKERNEL_MEAN, axis, all, false, out);
}

ug_status ug_g_argmax(ug_graph *g, ug_value *x, int axis, ug_value **out)
{
    return ug_g_reduce_axes(g, x, UG_RKERNEL_ARGMAX, axis, false, false, out);
}

/* ---- softmax ---- */

static ug_status softmax_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_float(op, &in[0], "x"));
    out[0] = in[0];
    return UG_OK;
}

static ug_status softmax_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *x = in[0];
    int64_t cols = x->ndim ? x->shape[x->ndim - 1] : 1;
    int64_t numel = ug_tensor_numel(x);
    if (numel == 0)
        return UG_OK;
    ug_softmax_args args = {.log = op->p.softmax.log, .y = ug_kview_of(out[0]), .x = ug_kview_of(x),
                            .rows = numel / cols, .cols = cols};
    return ug_dispatch(ug_dev(x), UG_KERNEL_SOFTMAX, op->name, x->dtype, &args);
}

static ug_status softmax_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *y = n->out, *x = n->in[0], *s = NULL, *t = NULL, *gx = NULL;
    if (n->op->p.softmax.log) { /* gx = gy - exp(y) * sum(gy) */
        ug_value *p = NULL;
        UG_TRY(ug_g_reduce_axes(g, gy, UG_RKERNEL_SUM, -1, false, true, &s));
        UG_TRY(ug_g_exp(g, y, &p));
        UG_TRY(ug_g_mul(g, p, s, &t));
        UG_TRY(ug_g_sub(g, gy, t, &gx));
    } else { /* gx = y * (gy - sum(gy * y)) */
        ug_value *gyy = NULL;
        UG_TRY(ug_g_mul(g, gy, y, &gyy));
        UG_TRY(ug_g_reduce_axes(g, gyy, UG_RKERNEL_SUM, -1, false, true, &s));
        UG_TRY(ug_g_sub(g, gy, s, &t));
        UG_TRY(ug_g_mul(g, y, t, &gx));
    }
    return ug_grad_give(g, x, gx);
}

const ug_op_def ug_op_softmax = {.family = "softmax", .infer = softmax_infer, .launch = softmax_launch,
                                 .backward = softmax_backward, .autocast = ug_autocast_f32};

ug_status ug_softmax(const ug_tensor *x, ug_tensor **out)
{
    ug_op op = {.def = &ug_op_softmax, .name = "softmax", .p.softmax.log = false};
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_log_softmax(const ug_tensor *x, ug_tensor **out)
{
    ug_op op = {.def = &ug_op_softmax, .name = "log_softmax", .p.softmax.log = true};
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_softmax(ug_graph *g, ug_value *x, ug_value **out)
{
    ug_op op = {.def = &ug_op_softmax, .name = "graph softmax", .p.softmax.log = false};
    return ug_op_graph(g, &op, 1, &x, out);
}

ug_status ug_g_log_softmax(ug_graph *g, ug_value *x, ug_value **out)
{
    ug_op op = {.def = &ug_op_softmax, .name = "graph log_softmax", .p.softmax.log = true};
    return ug_op_graph(g, &op, 1, &x, out);
}
