/* Layout ops, eager and in graphs, each with its gradient: permute (any
 * order of the axes: a strided copy; transpose is one), slice and split
 * along an axis,
 * concat and stack (each input's rows placed by the gather family), and
 * broadcast_to. Any dtype; values move exactly. */
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/ops.h"

/* Parts of a split and inputs of a stack, as ops.h says. */
enum { UG_MAX_SPLIT = 1024 };

/* ---- permute ---- */

/* The op's order (layout.axis entries, negative counting from the end) for
 * x's ndim axes, checked to be a permutation. */
static ug_status permute_order(const ug_op *op, int ndim, int *order)
{
    if (op->p.layout.axis != ndim)
        return ug_set_error(UG_ERR_SHAPE, "%s: the order names %d axes; x has %d", op->name,
                            op->p.layout.axis, ndim);
    bool seen[UG_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) {
        UG_TRY(ug_resolve_axis(op, ndim, op->p.layout.order[i], &order[i]));
        if (seen[order[i]])
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: axis %d appears twice in the order; give each axis once", op->name,
                                order[i]);
        seen[order[i]] = true;
    }
    return UG_OK;
}

static ug_status permute_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    int order[UG_MAX_DIMS];
    UG_TRY(permute_order(op, in[0].ndim, order));
    out[0] = in[0];
    for (int i = 0; i < in[0].ndim; i++)
        out[0].shape[i] = in[0].shape[order[i]];
    return UG_OK;
}

static ug_status permute_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *x = in[0];
    if (x->ndim == 0)
        return ug_launch_unary(op->name, UG_UNARY_COPY, 1.0f, 0.0f, out[0], x);
    int order[UG_MAX_DIMS];
    UG_TRY(permute_order(op, x->ndim, order));
    int64_t contiguous[UG_MAX_DIMS], shape[UG_MAX_DIMS] = {0}, strides[UG_MAX_DIMS] = {0};
    int64_t stride = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        contiguous[i] = stride;
        stride *= x->shape[i];
    }
    for (int i = 0; i < x->ndim; i++) {
        shape[i] = x->shape[order[i]];
        strides[i] = contiguous[order[i]];
    }
    return ug_launch_strided_unary(op->name, UG_UNARY_COPY, 1.0f, 0.0f, out[0], x, x->ndim, shape, strides);
}

static ug_status permute_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    const int ndim = ug_value_ndim(n->in[0]);
    int order[UG_MAX_DIMS], inverse[UG_MAX_DIMS];
    UG_TRY(permute_order(n->op, ndim, order));
    for (int i = 0; i < ndim; i++)
        inverse[order[i]] = i;
    ug_value *gx = NULL;
    UG_TRY(ug_g_permute(g, gy, ndim, inverse, &gx));
    return ug_grad_give(g, n->in[0], gx);
}

static const ug_op_def permute = {.family = "permute", .infer = permute_infer, .launch = permute_launch,
                                  .backward = permute_backward};

static ug_status permute_op(const char *name, int naxes, const int *order, ug_op *op)
{
    if (naxes < 0 || naxes > UG_MAX_DIMS || (naxes > 0 && !order))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: an order of %d axes%s; give 0 to %d axes", name,
                            naxes, order ? "" : " at NULL", UG_MAX_DIMS);
    *op = (ug_op){.def = &permute, .name = name, .p.layout = {.axis = naxes}};
    if (naxes > 0)
        memcpy(op->p.layout.order, order, sizeof(int) * (size_t)naxes);
    return UG_OK;
}

ug_status ug_permute(const ug_tensor *x, int naxes, const int *order, ug_tensor **out)
{
    ug_op op;
    UG_TRY(permute_op("permute", naxes, order, &op));
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_permute(ug_graph *g, ug_value *x, int naxes, const int *order, ug_value **out)
{
    ug_op op;
    UG_TRY(permute_op("graph permute", naxes, order, &op));
    return ug_op_graph(g, &op, 1, &x, out);
}

/* The last two axes swapped: a permute named transpose. */
static ug_status transpose_op(const char *name, int ndim, const int64_t *shape, ug_op *op)
{
    char s[96];
    if (ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "%s: x is %s; it needs at least two axes", name,
                            ug_format_shape(ndim, shape, s, sizeof s));
    int order[UG_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        order[i] = i;
    order[ndim - 2] = ndim - 1;
    order[ndim - 1] = ndim - 2;
    return permute_op(name, ndim, order, op);
}

ug_status ug_transpose(const ug_tensor *x, ug_tensor **out)
{
    UG_TRY(ug_check_tensor(x, "transpose", "x"));
    ug_op op;
    UG_TRY(transpose_op("transpose", x->ndim, x->shape, &op));
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_transpose(ug_graph *g, ug_value *x, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "graph transpose"));
    UG_TRY(ug_graph_check_value(g, x, "graph transpose", "x"));
    ug_op op;
    const ug_meta m = ug_value_meta(x);
    UG_TRY(transpose_op("graph transpose", m.ndim, m.shape, &op));
    return ug_op_graph(g, &op, 1, &x, out);
}

/* ---- slice ---- */

/* layout.axis resolved for x, and [start, start + size) checked to lie
 * within it. */
static ug_status slice_axis(const ug_op *op, const ug_meta *x, int *axis)
{
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x is a scalar; it has no axis to slice", op->name);
    UG_TRY(ug_resolve_axis(op, x->ndim, op->p.layout.axis, axis));
    const int64_t dim = x->shape[*axis], start = op->p.layout.start, size = op->p.layout.size;
    if (start < 0 || size < 0 || start > dim || size > dim - start)
        return ug_set_error(UG_ERR_SHAPE, "%s: [%lld, %lld + %lld) is not within axis %d's %lld entries",
                            op->name, (long long)start, (long long)start, (long long)size, *axis,
                            (long long)dim);
    return UG_OK;
}

static ug_status slice_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    int axis = 0;
    UG_TRY(slice_axis(op, &in[0], &axis));
    out[0] = in[0];
    out[0].shape[axis] = op->p.layout.size;
    return UG_OK;
}

/* Places x's entries along axis into y's from y_start, or takes y's from
 * x's at x_start: the gather family without an index. */
static ug_status place_rows(const char *name, ug_tensor *y, const ug_tensor *x, int axis, int64_t x_start,
                            int64_t y_start)
{
    const int64_t count = y->shape[axis] < x->shape[axis] ? y->shape[axis] : x->shape[axis];
    const ug_tensor *outer = y->shape[axis] < x->shape[axis] ? y : x;
    ug_gather_args args = {.y = ug_kview_of(y), .x = ug_kview_of(x),
                           .outer = ug_shape_span(outer->shape, 0, axis),
                           .inner = ug_shape_span(outer->shape, axis + 1, outer->ndim), .count = count,
                           .x_len = x->shape[axis], .y_len = y->shape[axis], .x_start = x_start,
                           .y_start = y_start};
    if (args.outer * args.inner * count == 0)
        return UG_OK;
    return ug_dispatch(ug_dev(x), UG_KERNEL_GATHER, name, x->dtype, &args);
}

static ug_status slice_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    int axis = 0;
    const ug_meta x = ug_meta_of_tensor(in[0]);
    UG_TRY(slice_axis(op, &x, &axis));
    return place_rows(op->name, out[0], in[0], axis, op->p.layout.start, 0);
}

/* The gradient: zeros of x's shape (like's as bound now) with gy placed
 * from start along axis. */
static ug_status slice_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    out[0] = ug_value_meta_now(op->p.layout.like);
    out[0].dtype = in[0].dtype;
    return UG_OK;
}

static ug_status slice_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    UG_TRY(ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, 0.0f, out[0], NULL));
    return place_rows(op->name, out[0], in[0], op->p.layout.axis, 0, op->p.layout.start);
}

static const ug_op_def slice_grad = {.family = "slice gradient", .infer = slice_grad_infer,
                                     .launch = slice_grad_launch, .inputs = {"gy"}};

static ug_status slice_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0];
    if (!ug_grad_needed(x))
        return UG_OK;
    int axis = 0;
    const ug_meta xm = ug_value_meta(x);
    UG_TRY(slice_axis(n->op, &xm, &axis));
    ug_op op = {.def = &slice_grad, .name = "graph slice gradient",
                .p.layout = {.axis = axis, .start = n->op->p.layout.start, .like = x}};
    ug_value *gx = NULL;
    UG_TRY(ug_op_graph(g, &op, 1, &gy, &gx));
    return ug_grad_give(g, x, gx);
}

static const ug_op_def slice = {.family = "slice", .infer = slice_infer, .launch = slice_launch,
                                .backward = slice_backward};

static ug_op slice_op(const char *name, int axis, int64_t start, int64_t length)
{
    return (ug_op){.def = &slice, .name = name, .p.layout = {.axis = axis, .start = start, .size = length}};
}

ug_status ug_slice(const ug_tensor *x, int axis, int64_t start, int64_t length, ug_tensor **out)
{
    ug_op op = slice_op("slice", axis, start, length);
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_slice(ug_graph *g, ug_value *x, int axis, int64_t start, int64_t length, ug_value **out)
{
    ug_op op = slice_op("graph slice", axis, start, length);
    return ug_op_graph(g, &op, 1, &x, out);
}

/* ---- split: slices ---- */

/* sizes (NULL: count equal parts) checked against x's length along axis. */
static ug_status split_sizes(const char *name, int ndim, const int64_t *shape, int axis, int count,
                             const int64_t *sizes, int64_t *parts)
{
    if (count < 1 || !parts)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d parts%s; give at least one and where to put them",
                            name, count, parts ? "" : " into NULL");
    const ug_op named = {.name = name};
    int a = 0;
    if (ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x is a scalar; it has no axis to split", name);
    UG_TRY(ug_resolve_axis(&named, ndim, axis, &a));
    const int64_t dim = shape[a];
    int64_t total = 0;
    for (int i = 0; i < count; i++) {
        parts[i] = sizes ? sizes[i] : dim / count;
        if (parts[i] < 0 || parts[i] > dim - total)
            return ug_set_error(UG_ERR_SHAPE, "%s: part %d of %lld entries passes axis %d's %lld", name, i,
                                (long long)parts[i], a, (long long)dim);
        total += parts[i];
    }
    if (total != dim)
        return ug_set_error(UG_ERR_SHAPE, "%s: the parts hold %lld entries of axis %d's %lld%s", name,
                            (long long)total, a, (long long)dim,
                            sizes ? "; they must add up to it" : "; give sizes, or a count that divides it");
    return UG_OK;
}

ug_status ug_split(const ug_tensor *x, int axis, int count, const int64_t *sizes, ug_tensor **outs)
{
    UG_TRY(ug_check_tensor(x, "split", "x"));
    int64_t parts[UG_MAX_SPLIT];
    if (count > UG_MAX_SPLIT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "split: %d parts; the limit is %d", count, UG_MAX_SPLIT);
    UG_TRY(split_sizes("split", x->ndim, x->shape, axis, count, sizes, parts));
    int64_t start = 0;
    for (int i = 0; i < count; i++) {
        ug_status st = ug_slice(x, axis, start, parts[i], &outs[i]);
        if (st != UG_OK) {
            for (int k = 0; k < i; k++) {
                ug_tensor_free(outs[k]);
                outs[k] = NULL;
            }
            return st;
        }
        start += parts[i];
    }
    return UG_OK;
}

ug_status ug_g_split(ug_graph *g, ug_value *x, int axis, int count, const int64_t *sizes, ug_value **outs)
{
    UG_TRY(ug_graph_check_open(g, "graph split"));
    UG_TRY(ug_graph_check_value(g, x, "graph split", "x"));
    int64_t parts[UG_MAX_SPLIT];
    if (count > UG_MAX_SPLIT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph split: %d parts; the limit is %d", count,
                            UG_MAX_SPLIT);
    const ug_meta m = ug_value_meta(x);
    UG_TRY(split_sizes("graph split", m.ndim, m.shape, axis, count, sizes, parts));
    ug_graph_mark mark = ug_graph_mark_now(g);
    int64_t start = 0;
    for (int i = 0; i < count; i++) {
        ug_status st = ug_g_slice(g, x, axis, start, parts[i], &outs[i]);
        if (st != UG_OK) {
            ug_graph_rollback(g, mark);
            return st;
        }
        start += parts[i];
    }
    return UG_OK;
}

/* ---- concat and stack ---- */

static ug_status concat_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nout;
    if (in[0].ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: the inputs are scalars; stack them instead", op->name);
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, in[0].ndim, op->p.layout.axis, &axis));
    out[0] = in[0];
    for (int i = 1; i < nin; i++) {
        bool fits = in[i].ndim == in[0].ndim;
        for (int d = 0; fits && d < in[0].ndim; d++)
            fits = d == axis || in[i].shape[d] == in[0].shape[d];
        char s0[96], si[96];
        if (in[i].dtype != in[0].dtype)
            return ug_set_error(UG_ERR_DTYPE, "%s: input %d is %s and input 0 %s; cast one with ug_cast",
                                op->name, i, ug_dtype_name(in[i].dtype), ug_dtype_name(in[0].dtype));
        if (!fits)
            return ug_set_error(UG_ERR_SHAPE, "%s: input %d is %s and input 0 %s; all sizes but axis %d's must agree",
                                op->name, i, ug_format_shape(in[i].ndim, in[i].shape, si, sizeof si),
                                ug_format_shape(in[0].ndim, in[0].shape, s0, sizeof s0), axis);
        out[0].shape[axis] += in[i].shape[axis];
    }
    int64_t numel;
    return ug_checked_numel(out[0].ndim, out[0].shape, ug_dtype_size(out[0].dtype), op->name, &numel);
}

static int concat_input_count(const ug_tensor *const *in)
{
    int n = 0;
    while (n < UG_OP_MAX_INPUTS && in[n])
        n++;
    return n;
}

static ug_status concat_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    int axis = 0;
    UG_TRY(ug_resolve_axis(op, out[0]->ndim, op->p.layout.axis, &axis));
    int64_t at = 0;
    for (int i = 0; i < concat_input_count(in); i++) {
        UG_TRY(place_rows(op->name, out[0], in[i], axis, 0, at));
        at += in[i]->shape[axis];
    }
    return UG_OK;
}

static ug_status concat_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    int axis = 0;
    UG_TRY(ug_resolve_axis(n->op, ug_value_ndim(gy), n->op->p.layout.axis, &axis));
    int64_t at = 0;
    for (int i = 0; i < n->nin; i++) {
        const int64_t size = ug_value_meta(n->in[i]).shape[axis];
        if (ug_grad_needed(n->in[i])) {
            ug_value *part = NULL;
            UG_TRY(ug_g_slice(g, gy, axis, at, size, &part));
            UG_TRY(ug_grad_give(g, n->in[i], part));
        }
        at += size;
    }
    return UG_OK;
}

static const ug_op_def concat = {.family = "concat", .infer = concat_infer, .launch = concat_launch,
                                 .backward = concat_backward};

static ug_status check_count(const char *name, int count, const void *inputs, const void *out)
{
    if (count < 1 || !inputs || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d inputs%s%s; give at least one", name, count,
                            inputs ? "" : " at NULL", out ? "" : ", out NULL");
    return UG_OK;
}

/* Up to UG_OP_MAX_INPUTS inputs a node; more are joined in groups, each
 * group with the result so far. */
ug_status ug_concat(int count, const ug_tensor *const *xs, int axis, ug_tensor **out)
{
    UG_TRY(check_count("concat", count, xs, out));
    ug_op op = {.def = &concat, .name = "concat", .p.layout = {.axis = axis}};
    ug_tensor *joined = NULL;
    for (int done = 0; done < count;) {
        const ug_tensor *group[UG_OP_MAX_INPUTS];
        int n = 0;
        if (joined)
            group[n++] = joined;
        while (n < UG_OP_MAX_INPUTS && done < count)
            group[n++] = xs[done++];
        ug_tensor *next = NULL;
        ug_status st = ug_op_eager(&op, n, group, &next);
        ug_tensor_free(joined);
        if (st != UG_OK)
            return st;
        joined = next;
    }
    *out = joined;
    return UG_OK;
}

ug_status ug_g_concat(ug_graph *g, int count, ug_value *const *xs, int axis, ug_value **out)
{
    UG_TRY(check_count("graph concat", count, xs, out));
    ug_op op = {.def = &concat, .name = "graph concat", .p.layout = {.axis = axis}};
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *joined = NULL;
    for (int done = 0; done < count;) {
        ug_value *group[UG_OP_MAX_INPUTS];
        int n = 0;
        if (joined)
            group[n++] = joined;
        while (n < UG_OP_MAX_INPUTS && done < count)
            group[n++] = xs[done++];
        ug_status st = ug_op_graph(g, &op, n, group, &joined);
        if (st != UG_OK) {
            ug_graph_rollback(g, mark);
            return st;
        }
    }
    *out = joined;
    return UG_OK;
}

/* x's shape with a new axis of size 1 at axis (of ndim + 1). */
static ug_status unsqueezed(const char *name, int ndim, const int64_t *shape, int axis, int64_t *out, int *at)
{
    const ug_op named = {.name = name};
    if (ndim >= UG_MAX_DIMS)
        return ug_set_error(UG_ERR_SHAPE, "%s: the inputs have %d axes; stacking makes one more than the limit %d",
                            name, ndim, UG_MAX_DIMS);
    UG_TRY(ug_resolve_axis(&named, ndim + 1, axis, at));
    memcpy(out, shape, sizeof(int64_t) * (size_t)*at);
    out[*at] = 1;
    memcpy(out + *at + 1, shape + *at, sizeof(int64_t) * (size_t)(ndim - *at));
    return UG_OK;
}

ug_status ug_stack(int count, const ug_tensor *const *xs, int axis, ug_tensor **out)
{
    UG_TRY(check_count("stack", count, xs, out));
    if (count > UG_MAX_SPLIT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "stack: %d inputs; the limit is %d", count, UG_MAX_SPLIT);
    ug_tensor *views[UG_MAX_SPLIT] = {NULL};
    ug_status st = UG_OK;
    int at = 0;
    for (int i = 0; i < count && st == UG_OK; i++) {
        int64_t shape[UG_MAX_DIMS];
        st = ug_check_tensor(xs[i], "stack", "an input");
        if (st == UG_OK)
            st = unsqueezed("stack", xs[i]->ndim, xs[i]->shape, axis, shape, &at);
        if (st == UG_OK)
            st = ug_tensor_reshape(xs[i], xs[i]->ndim + 1, shape, &views[i]);
    }
    if (st == UG_OK)
        st = ug_concat(count, (const ug_tensor *const *)views, at, out);
    for (int i = 0; i < count; i++)
        ug_tensor_free(views[i]);
    return st;
}

ug_status ug_g_stack(ug_graph *g, int count, ug_value *const *xs, int axis, ug_value **out)
{
    UG_TRY(check_count("graph stack", count, xs, out));
    if (count > UG_MAX_SPLIT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph stack: %d inputs; the limit is %d", count,
                            UG_MAX_SPLIT);
    ug_value *views[UG_MAX_SPLIT];
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = UG_OK;
    int at = 0;
    for (int i = 0; i < count && st == UG_OK; i++) {
        int64_t shape[UG_MAX_DIMS];
        st = ug_graph_check_value(g, xs[i], "graph stack", "an input");
        const ug_meta m = st == UG_OK ? ug_value_meta(xs[i]) : (ug_meta){0};
        if (st == UG_OK)
            st = unsqueezed("graph stack", m.ndim, m.shape, axis, shape, &at);
        if (st == UG_OK)
            st = ug_g_reshape(g, xs[i], m.ndim + 1, shape, &views[i]);
    }
    if (st == UG_OK)
        st = ug_g_concat(g, count, views, at, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

/* ---- broadcast_to: the expand op ---- */

static ug_status broadcast_op(const char *name, int ndim, const int64_t *shape, ug_op *op)
{
    if (ndim < 0 || ndim > UG_MAX_DIMS || (ndim > 0 && !shape))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: a shape of %d axes%s; give 0 to %d", name, ndim,
                            shape ? "" : " at NULL", UG_MAX_DIMS);
    *op = (ug_op){.def = &ug_op_expand, .name = name, .p.expand = {.alpha = 1.0f, .ndim = ndim}};
    if (ndim > 0)
        memcpy(op->p.expand.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return UG_OK;
}

ug_status ug_broadcast_to(const ug_tensor *x, int ndim, const int64_t *shape, ug_tensor **out)
{
    ug_op op;
    UG_TRY(broadcast_op("broadcast_to", ndim, shape, &op));
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_broadcast_to(ug_graph *g, ug_value *x, int ndim, const int64_t *shape, ug_value **out)
{
    ug_op op;
    UG_TRY(broadcast_op("graph broadcast_to", ndim, shape, &op));
    return ug_op_graph(g, &op, 1, &x, out);
}
