/* The loss ops of graphs: cross-entropy with label smoothing and an ignored
 * label, and the op its gradient uses, defined once (inference, launch,
 * gradient). They compute in f32. */
#include <stdint.h>
#include <string.h>

#include "core/ops/op.h"

/* ---- cross-entropy: in logits [..., classes], labels [...] (i32 or i64);
 * results: the loss (f32 []), then saved the row losses (f32 [rows]) and
 * the count of rows not ignored (f32 [], the mean's divisor, which the
 * gradient reads), both written by the forward's one call ---- */

static ug_status xent_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    const ug_meta *logits = &in[0], *labels = &in[1];
    UG_TRY(ug_infer_f32(op, logits, "logits"));
    char sl[96], sy[96];
    if (labels->dtype != UG_I32 && labels->dtype != UG_I64)
        return ug_set_error(UG_ERR_DTYPE, "%s: labels are %s; they must be i32 or i64 class indices",
                            op->name, ug_dtype_name(labels->dtype));
    bool same = logits->ndim >= 1 && labels->ndim == logits->ndim - 1;
    for (int i = 0; same && i < labels->ndim; i++)
        same = labels->shape[i] == logits->shape[i];
    if (!same)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: logits are %s and labels %s; expected logits [..., classes] and "
                            "labels [...], the logits' shape without its last axis",
                            op->name, ug_format_shape(logits->ndim, logits->shape, sl, sizeof sl),
                            ug_format_shape(labels->ndim, labels->shape, sy, sizeof sy));
    if (logits->shape[logits->ndim - 1] < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: logits are %s, with no classes on their last axis",
                            op->name, ug_format_shape(logits->ndim, logits->shape, sl, sizeof sl));
    float s = op->p.xent.smoothing;
    if (!(s >= 0.0f && s < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: label smoothing %g must be in [0, 1)",
                            op->name, (double)s);
    const int64_t ignore_index = op->p.xent.ignore_index;
    if (op->p.xent.ignore && labels->dtype == UG_I32 && (ignore_index < INT32_MIN || ignore_index > INT32_MAX))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: the ignore index %lld is no i32 value, and the labels are i32: no "
                            "label could equal it (give i64 labels, or an index in i32's range)",
                            op->name, (long long)ignore_index);
    int64_t rows = 1; /* within the logits' element count, which was checked */
    for (int i = 0; i < labels->ndim; i++)
        rows *= labels->shape[i];
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = 0};
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {rows}}; /* row losses */
    out[2] = (ug_meta){.dtype = UG_F32, .ndim = 0};                  /* rows counted */
    *nout = 3;
    return UG_OK;
}

static ug_xent_args xent_args(const ug_op *op, const ug_tensor *logits, const ug_tensor *labels)
{
    return (ug_xent_args){.logits = ug_kview_of(logits), .labels = ug_kview_of(labels),
                          .rows = ug_tensor_numel(labels), .cols = logits->shape[logits->ndim - 1],
                          .smoothing = op->p.xent.smoothing, .ignore = op->p.xent.ignore,
                          .ignore_index = op->p.xent.ignore_index};
}

static ug_status xent_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_xent_args args = xent_args(op, in[0], in[1]);
    if (args.rows == 0) /* an empty batch: loss 0, like a sum over no rows */
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, 0.0f, out[0], NULL);
    args.loss = ug_kview_of(out[1]);
    args.count = ug_kview_of(out[2]);
    if (in[2])
        args.epi.check = ug_kview_of(in[2]);
    /* The loss, the row losses' mean, in the same call: a backend whose
     * row kernel can also take the mean saves a launch. */
    const ug_reduce_folds folds = {.check = in[3], .sum = in[2 + UG_OP_SUM_INPUT], .sum_alpha = op->sum_alpha};
    args.mean = ug_reduce_args_of(UG_RKERNEL_MEAN, out[0], out[1], 1, args.rows, 1, &folds);
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_CROSS_ENTROPY, op->name, UG_F32, &args);
}

/* The loss into a running sum, as its mean is written; checks of the
 * logits as the row kernel reads them (slot 0) and of the loss as its
 * mean is written (slot 1). */
static bool xent_absorb(ug_op *op, const ug_fold *f)
{
    (void)op;
    if (f->kind == UG_FOLD_SUM)
        return true;
    if (f->kind != UG_FOLD_CHECK || (f->input != 0 && f->input != UG_CHECKED_OPERAND_RESULT))
        return false;
    *f->slot = f->input == 0 ? 0 : 1;
    return true;
}

static ug_status xent_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_op op = {.def = &ug_op_cross_entropy_grad, .name = "cross_entropy backward",
                .p.xent = n->op->p.xent};
    ug_value *in[4] = {n->in[0], n->in[1], gy, n->saved[1]}, *gx = NULL;
    UG_TRY(ug_op_graph(g, &op, 4, in, &gx));
    return ug_grad_give(g, n->in[0], gx);
}

const ug_op_def ug_op_cross_entropy = {.family = "cross_entropy", .infer = xent_infer, .launch = xent_launch,
                                       .backward = xent_backward, .autocast = ug_autocast_f32,
                                       .check_role = UG_CHECKED_LOGITS, .absorb = xent_absorb};

ug_status ug_g_cross_entropy_with(ug_graph *g, ug_value *logits, ug_value *labels,
                                  const ug_cross_entropy_options *options, ug_value **out)
{
    const ug_cross_entropy_options none = {0};
    const ug_cross_entropy_options *o = options ? options : &none;
    ug_op op = {.def = &ug_op_cross_entropy, .name = "graph cross_entropy",
                .p.xent = {.smoothing = o->label_smoothing, .ignore = o->ignore,
                           .ignore_index = o->ignore_index}};
    ug_value *in[2] = {logits, labels};
    return ug_op_graph(g, &op, 2, in, out);
}

ug_status ug_g_cross_entropy(ug_graph *g, ug_value *logits, ug_value *labels, float smoothing,
                             ug_value **out)
{
    const ug_cross_entropy_options options = {.label_smoothing = smoothing};
    return ug_g_cross_entropy_with(g, logits, labels, &options, out);
}

/* d loss / d logits; in: logits, labels, dloss (one element), and the
 * forward's count of rows not ignored (one element). */
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
    /* The mean's divisor as the forward counted it on the device. */
    args.count = ug_kview_of(in[3]);
    args.scale = 1.0f;
    if (op->p.xent.seed) { /* the backward pass's first gradient, taken in */
        const ug_run_state *run = op->p.xent.seed;
        args.dloss = run->loss_scale ? ug_kview_of(run->loss_scale) : (ug_kview){0};
        args.scale = run->seed_weight;
    } else {
        args.dloss = ug_kview_of(in[2]);
    }
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_CROSS_ENTROPY, op->name, UG_F32, &args);
}

/* The loss's gradient (input 2), when it is the backward pass's first:
 * the loss scale read where the kernel reads dloss, the rows' weight in
 * its scale. */
static bool xent_grad_absorb(ug_op *op, const ug_fold *f)
{
    if (f->kind != UG_FOLD_SEED || f->input != 2 || op->p.xent.seed)
        return false;
    op->p.xent.seed = f->run;
    return true;
}

const ug_op_def ug_op_cross_entropy_grad = {.family = "cross_entropy backward", .infer = xent_grad_infer,
                                            .launch = xent_grad_launch, .absorb = xent_grad_absorb};

/* The backward pass's first gradient, d loss / d loss: 1, or the loss
 * scale when the graph's optimizer scales the loss (read on the device).
 * A micro-batch accumulated (ug_graph_run_backward) weights it by its
 * share of a full batch's rows, so that gradients of unequal batches add
 * up as one batch of all their rows; a full batch's gradient stays that
 * of ug_graph_run bit for bit. */
static ug_status seed_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin, (void)in, (void)nout;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = op->p.seed.ndim};
    memcpy(out[0].shape, op->p.seed.shape, sizeof(int64_t) * (size_t)op->p.seed.ndim);
    return UG_OK;
}

static ug_status seed_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)in;
    const ug_run_state *run = op->p.seed.run;
    if (!run->loss_scale)
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, run->seed_weight, out[0], NULL);
    ug_unary_args scaled = {.op = UG_UNARY_SCALE_SHIFT, .alpha = run->seed_weight, .y = ug_kview_of(out[0]),
                            .x = ug_kview_of(run->loss_scale),
                            .ndim = 1, .shape = {ug_tensor_numel(out[0])}, .x_strides = {0}};
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_UNARY, op->name, UG_F32, &scaled);
}

/* The op reading the seed may make it itself (UG_FOLD_SEED). */
static bool seed_fold(const ug_op *op, ug_fold *f)
{
    *f = (ug_fold){.kind = UG_FOLD_SEED, .run = op->p.seed.run};
    return true;
}

const ug_op_def ug_op_loss_seed = {.family = "loss seed", .infer = seed_infer, .launch = seed_launch,
                                   .fold = seed_fold};
