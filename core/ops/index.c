/* Picking along an axis by index (numpy's take, an embedding's lookup),
 * eager and in graphs, with its gradient: the rows of the result's
 * gradient summed by index, in index order, so the same bits on every
 * device and every run (kernel family gather). */
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/ops.h"

static ug_status check_index(const ug_op *op, const ug_meta *index)
{
    if (index->dtype != UG_I32 && index->dtype != UG_I64)
        return ug_set_error(UG_ERR_DTYPE, "%s: index is %s; indices are i32 or i64", op->name,
                            ug_dtype_name(index->dtype));
    return UG_OK;
}

/* y's shape: x's with axis replaced by the index's shape (x.shape[:axis] +
 * index.shape + x.shape[axis + 1:]), so a [B, T] index of a [V, C] table
 * is [B, T, C]. */
static ug_status take_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    const ug_meta *x = &in[0], *index = &in[1];
    UG_TRY(check_index(op, index));
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x is a scalar; it needs an axis to take from", op->name);
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, x->ndim, op->p.layout.axis, &axis));
    const int ndim = x->ndim - 1 + index->ndim;
    if (ndim > UG_MAX_DIMS)
        return ug_set_error(UG_ERR_SHAPE, "%s: x's %d axes with the index's %d make %d; the limit is %d",
                            op->name, x->ndim, index->ndim, ndim, UG_MAX_DIMS);
    out[0] = (ug_meta){.dtype = x->dtype, .ndim = ndim};
    memcpy(out[0].shape, x->shape, sizeof(int64_t) * (size_t)axis);
    memcpy(out[0].shape + axis, index->shape, sizeof(int64_t) * (size_t)index->ndim);
    memcpy(out[0].shape + axis + index->ndim, x->shape + axis + 1, sizeof(int64_t) * (size_t)(x->ndim - axis - 1));
    if (x->shape[axis] == 0 && ug_shape_numel(index->ndim, index->shape) > 0)
        return ug_set_error(UG_ERR_SHAPE, "%s: x has no entries along axis %d to take", op->name, axis);
    int64_t numel;
    return ug_checked_numel(ndim, out[0].shape, ug_dtype_size(x->dtype), op->name, &numel);
}

static ug_status take_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *x = in[0], *index = in[1];
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, x->ndim, op->p.layout.axis, &axis));
    const int64_t count = ug_tensor_numel(index);
    ug_gather_args args = {.y = ug_kview_of(out[0]), .x = ug_kview_of(x), .index = ug_kview_of(index),
                           .outer = ug_shape_span(x->shape, 0, axis), .inner = ug_shape_span(x->shape, axis + 1, x->ndim),
                           .count = count, .x_len = x->shape[axis], .y_len = count};
    if (ug_tensor_numel(out[0]) == 0)
        return UG_OK;
    return ug_dispatch(ug_dev(x), UG_KERNEL_GATHER, op->name, x->dtype, &args);
}

/* The gradient: gy [x.shape[:axis] + index.shape + x.shape[axis + 1:]]
 * summed by index into f32 [x's shape]; layout.size is x's length along
 * the (resolved) axis. */
static ug_status take_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    const ug_meta *gy = &in[0], *index = &in[1];
    UG_TRY(ug_infer_float(op, gy, "gy"));
    UG_TRY(check_index(op, index));
    const int axis = op->p.layout.axis;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = gy->ndim - index->ndim + 1};
    memcpy(out[0].shape, gy->shape, sizeof(int64_t) * (size_t)axis);
    out[0].shape[axis] = op->p.layout.size;
    memcpy(out[0].shape + axis + 1, gy->shape + axis + index->ndim,
           sizeof(int64_t) * (size_t)(gy->ndim - axis - index->ndim));
    return UG_OK;
}

static ug_status take_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *gy = in[0], *index = in[1];
    const int axis = op->p.layout.axis;
    ug_gather_args args = {.accumulate = true, .y = ug_kview_of(out[0]), .x = ug_kview_of(gy),
                           .index = ug_kview_of(index), .outer = ug_shape_span(gy->shape, 0, axis),
                           .inner = ug_shape_span(gy->shape, axis + index->ndim, gy->ndim),
                           .count = ug_tensor_numel(index), .x_len = ug_tensor_numel(index),
                           .y_len = op->p.layout.size};
    if (ug_tensor_numel(out[0]) == 0)
        return UG_OK;
    return ug_dispatch(ug_dev(gy), UG_KERNEL_GATHER, op->name, gy->dtype, &args);
}

static const ug_op_def take_grad = {.family = "take gradient", .infer = take_grad_infer,
                                    .launch = take_grad_launch, .inputs = {"gy", "index"}};

static ug_status take_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *index = n->in[1];
    if (!ug_grad_needed(x))
        return UG_OK;
    const ug_meta xm = ug_value_meta(x);
    int axis = 0;
    UG_TRY(ug_resolve_axis(n->op, xm.ndim, n->op->p.layout.axis, &axis));
    ug_op op = {.def = &take_grad, .name = "graph take gradient",
                .p.layout = {.axis = axis, .size = xm.shape[axis]}};
    ug_value *gx = NULL;
    ug_value *args[2] = {gy, index};
    UG_TRY(ug_op_graph(g, &op, 2, args, &gx));
    if (xm.dtype != UG_F32)
        UG_TRY(ug_g_cast(g, gx, xm.dtype, &gx));
    return ug_grad_give(g, x, gx);
}

static const ug_op_def take = {.family = "take", .infer = take_infer, .launch = take_launch,
                               .backward = take_backward, .inputs = {"x", "index"}};

ug_status ug_take(const ug_tensor *x, const ug_tensor *index, int axis, ug_tensor **out)
{
    ug_op op = {.def = &take, .name = "take", .p.layout = {.axis = axis}};
    const ug_tensor *in[2] = {x, index};
    return ug_op_eager(&op, 2, in, out);
}

ug_status ug_g_take(ug_graph *g, ug_value *x, ug_value *index, int axis, ug_value **out)
{
    ug_op op = {.def = &take, .name = "graph take", .p.layout = {.axis = axis}};
    ug_value *in[2] = {x, index};
    return ug_op_graph(g, &op, 2, in, out);
}

/* ---- index_copy: rows replaced by index ---- */

/* base [..., n, ...] with its rows index[j] along axis replaced by
 * source's row j: index 1-D, source base's shape with index's length
 * along axis. */
static ug_status index_copy_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    const ug_meta *base = &in[0], *index = &in[1], *source = &in[2];
    UG_TRY(check_index(op, index));
    if (base->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: base is a scalar; it needs an axis to copy into", op->name);
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, base->ndim, op->p.layout.axis, &axis));
    if (source->dtype != base->dtype)
        return ug_set_error(UG_ERR_DTYPE, "%s: source is %s and base %s; cast one with ug_cast", op->name,
                            ug_dtype_name(source->dtype), ug_dtype_name(base->dtype));
    bool fits = index->ndim == 1 && source->ndim == base->ndim && source->shape[axis] == index->shape[0];
    for (int d = 0; fits && d < base->ndim; d++)
        fits = d == axis || source->shape[d] == base->shape[d];
    if (!fits) {
        char sb[96], si[96], ss[96];
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: base %s, index %s, source %s; the index is 1-D and source base's shape "
                            "with the index's length along axis %d",
                            op->name, ug_format_shape(base->ndim, base->shape, sb, sizeof sb),
                            ug_format_shape(index->ndim, index->shape, si, sizeof si),
                            ug_format_shape(source->ndim, source->shape, ss, sizeof ss), axis);
    }
    out[0] = *base;
    return UG_OK;
}

static ug_status index_copy_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *base = in[0], *index = in[1], *source = in[2];
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, base->ndim, op->p.layout.axis, &axis));
    UG_TRY(ug_tensor_copy(out[0], base));
    ug_gather_args args = {.scatter = true, .y = ug_kview_of(out[0]), .x = ug_kview_of(source),
                           .index = ug_kview_of(index), .outer = ug_shape_span(base->shape, 0, axis),
                           .inner = ug_shape_span(base->shape, axis + 1, base->ndim),
                           .count = ug_tensor_numel(index), .x_len = ug_tensor_numel(index),
                           .y_len = base->shape[axis]};
    if (ug_tensor_numel(source) == 0)
        return UG_OK;
    return ug_dispatch(ug_dev(base), UG_KERNEL_GATHER, op->name, base->dtype, &args);
}

static ug_op index_copy_op(const char *name, int axis);

/* base's gradient: gy with the replaced rows zeroed; source's: those rows
 * of gy. */
static ug_status index_copy_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *base = n->in[0], *index = n->in[1], *source = n->in[2];
    if (ug_grad_needed(base)) {
        const ug_meta s = ug_value_meta(source);
        ug_value *zeros = NULL, *gbase = NULL;
        UG_TRY(ug_g_fill(g, 0.0f, s.ndim, s.shape, &zeros));
        if (ug_value_dtype(zeros) != ug_value_dtype(gy))
            UG_TRY(ug_g_cast(g, zeros, ug_value_dtype(gy), &zeros));
        ug_op op = index_copy_op("graph index_copy gradient", n->op->p.layout.axis);
        ug_value *in[3] = {gy, index, zeros};
        UG_TRY(ug_op_graph(g, &op, 3, in, &gbase));
        UG_TRY(ug_grad_give(g, base, gbase));
    }
    if (!ug_grad_needed(source))
        return UG_OK;
    ug_value *gsource = NULL;
    UG_TRY(ug_g_take(g, gy, index, n->op->p.layout.axis, &gsource));
    return ug_grad_give(g, source, gsource);
}

static const ug_op_def index_copy = {.family = "index_copy", .infer = index_copy_infer,
                                     .launch = index_copy_launch, .backward = index_copy_backward,
                                     .inputs = {"base", "index", "source"}};

static ug_op index_copy_op(const char *name, int axis)
{
    return (ug_op){.def = &index_copy, .name = name, .p.layout = {.axis = axis}};
}

ug_status ug_index_copy(const ug_tensor *base, int axis, const ug_tensor *index, const ug_tensor *source,
                        ug_tensor **out)
{
    ug_op op = index_copy_op("index_copy", axis);
    const ug_tensor *in[3] = {base, index, source};
    return ug_op_eager(&op, 3, in, out);
}

ug_status ug_g_index_copy(ug_graph *g, ug_value *base, int axis, ug_value *index, ug_value *source,
                          ug_value **out)
{
    ug_op op = index_copy_op("graph index_copy", axis);
    ug_value *in[3] = {base, index, source};
    return ug_op_graph(g, &op, 3, in, out);
}
