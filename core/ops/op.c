/* Running op definitions eagerly, and what the definitions share: names,
 * inference checks, autocast classes. Graphs add them in
 * core/graph/add_op.c. */
#include <stdint.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/ops.h"

const char *ug_op_name(const ug_op *op) { return op->name ? op->name : op->def->family; }

/* How messages name input i of an op with nin inputs. */
const char *ug_op_input_name(const ug_op *op, int nin, int i)
{
    static const char *const generic[UG_OP_MAX_INPUTS] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    if (op->def->inputs[i])
        return op->def->inputs[i];
    return nin == 1 ? "x" : generic[i];
}

ug_autocast_class ug_autocast_half(const ug_op *op)
{
    (void)op;
    return UG_AUTOCAST_HALF;
}

ug_autocast_class ug_autocast_f32(const ug_op *op)
{
    (void)op;
    return UG_AUTOCAST_F32;
}

ug_autocast_class ug_autocast_follow(const ug_op *op)
{
    (void)op;
    return UG_AUTOCAST_FOLLOW;
}

bool ug_absorbs_cast(ug_op *op, const ug_fold *f)
{
    (void)op;
    return f->kind == UG_FOLD_CAST;
}

ug_meta ug_meta_of_tensor(const ug_tensor *t)
{
    ug_meta m = {.dtype = t->dtype, .ndim = t->ndim};
    memcpy(m.shape, t->shape, sizeof m.shape);
    return m;
}

ug_status ug_infer_float(const ug_op *op, const ug_meta *m, const char *arg)
{
    if (!ug_dtype_is_float(m->dtype))
        return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; this op takes f32, f16 or bf16 (cast with ug_cast)",
                            ug_op_name(op), arg, ug_dtype_name(m->dtype));
    return UG_OK;
}

ug_status ug_infer_f32(const ug_op *op, const ug_meta *m, const char *arg)
{
    if (m->dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; this op computes in f32 (cast the input)",
                            ug_op_name(op), arg, ug_dtype_name(m->dtype));
    return UG_OK;
}

ug_status ug_infer_same_dtype(const ug_op *op, const ug_meta *a, const ug_meta *b)
{
    if (a->dtype != b->dtype)
        return ug_set_error(UG_ERR_DTYPE, "%s: a is %s and b is %s; cast one with ug_cast",
                            ug_op_name(op), ug_dtype_name(a->dtype), ug_dtype_name(b->dtype));
    return UG_OK;
}

ug_status ug_broadcast_shape(int a_ndim, const int64_t *a_shape, int b_ndim, const int64_t *b_shape,
                             const char *op, int *ndim, int64_t *out)
{
    int n = a_ndim > b_ndim ? a_ndim : b_ndim;
    for (int i = 0; i < n; i++) {
        int ia = a_ndim - n + i, ib = b_ndim - n + i;
        int64_t da = ia >= 0 ? a_shape[ia] : 1;
        int64_t db = ib >= 0 ? b_shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            return ug_set_error(UG_ERR_SHAPE,
                                "%s: shapes %s and %s do not broadcast: axis %d has sizes %lld and "
                                "%lld (each pair must be equal or 1)",
                                op, ug_format_shape(a_ndim, a_shape, sa, sizeof sa),
                                ug_format_shape(b_ndim, b_shape, sb, sizeof sb), i, (long long)da,
                                (long long)db);
        }
        out[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return UG_OK;
}

ug_status ug_resolve_axis(const ug_op *op, int ndim, int axis, int *out)
{
    if (axis < -ndim || axis >= ndim)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: axis %d is out of range for %d axes",
                            ug_op_name(op), axis, ndim);
    *out = axis < 0 ? axis + ndim : axis;
    return UG_OK;
}

int64_t ug_shape_span(const int64_t *shape, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= shape[i];
    return n;
}

ug_status ug_op_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    *nout = 1;
    UG_TRY(op->def->infer(op, nin, in, out, nout));
    for (int k = 0; k < *nout; k++) {
        int64_t numel;
        UG_TRY(ug_checked_numel(out[k].ndim, out[k].shape, ug_dtype_size(out[k].dtype), ug_op_name(op),
                                &numel));
    }
    return UG_OK;
}

ug_status ug_op_eager(const ug_op *op, int nin, const ug_tensor *const *in, ug_tensor **out)
{
    const char *name = ug_op_name(op);
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    ug_meta metas[UG_OP_MAX_INPUTS], results[UG_OP_MAX_OUTPUTS];
    for (int i = 0; i < nin; i++) {
        UG_TRY(ug_check_tensor(in[i], name, ug_op_input_name(op, nin, i)));
        if (i > 0)
            UG_TRY(ug_check_same_device(in[0], in[i], name));
        metas[i] = ug_meta_of_tensor(in[i]);
    }
    int nout = 1;
    UG_TRY(ug_op_infer(op, nin, metas, results, &nout));
    ug_tensor *made[UG_OP_MAX_OUTPUTS] = {NULL};
    ug_status st = UG_OK;
    for (int k = 0; k < nout && st == UG_OK; k++)
        st = ug_tensor_new(ug_dev(in[0]), results[k].dtype, results[k].ndim, results[k].shape, name,
                           &made[k]);
    const ug_tensor *inputs[UG_OP_MAX_INPUTS] = {NULL}; /* no folded checks or running sum */
    for (int i = 0; i < nin; i++)
        inputs[i] = in[i];
    if (st == UG_OK)
        st = op->def->launch(op, made, inputs);
    for (int k = 1; k < nout; k++) /* scratch and saved values live only for the call */
        ug_tensor_free(made[k]);
    if (st != UG_OK) {
        ug_tensor_free(made[0]);
        return st;
    }
    *out = made[0];
    return UG_OK;
}

bool ug_needs_cast(ug_dtype have, ug_dtype want)
{
    return want != UG_AS_GIVEN && have != want && ug_dtype_is_float(have);
}

ug_status ug_op_eager_cast(const ug_op *op, int nin, const ug_tensor *const *in,
                           const ug_dtype *want, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", ug_op_name(op));
    *out = NULL;
    const ug_tensor *args[UG_OP_MAX_INPUTS] = {NULL};
    ug_tensor *cast[UG_OP_MAX_INPUTS] = {NULL};
    for (int i = 0; i < nin; i++)
        UG_TRY(ug_check_tensor(in[i], ug_op_name(op), ug_op_input_name(op, nin, i)));
    ug_status st = UG_OK;
    for (int i = 0; i < nin; i++) {
        args[i] = in[i];
        if (st == UG_OK && ug_needs_cast(in[i]->dtype, want[i])) {
            st = ug_cast(in[i], want[i], &cast[i]);
            args[i] = cast[i];
        }
    }
    ug_tensor *result = NULL;
    if (st == UG_OK)
        st = ug_op_eager(op, nin, args, &result);
    if (st == UG_OK && result->dtype != in[0]->dtype) {
        st = ug_cast(result, in[0]->dtype, out);
        ug_tensor_free(result);
    } else if (st == UG_OK) {
        *out = result;
    }
    for (int i = 0; i < nin; i++)
        ug_tensor_free(cast[i]);
    return st;
}
