/* Reductions and softmax over an axis. */
#include <string.h>

#include "core/exec.h"
#include "unigrad/ops.h"

ug_status ug_exec_reduce(ug_reduce_kind op, ug_tensor *y, const ug_tensor *x, int64_t outer,
                         int64_t len, int64_t inner)
{
    ug_device *d = ug_dev(y);
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    if (!d->backend->reduce)
        return ug_set_error(UG_ERR_UNSUPPORTED, "reduce: the %s backend does not implement it",
                            d->backend->name);
    ug_reduce_args args = {.op = op, .y = ug_kview_of(y), .x = ug_kview_of(x),
                           .outer = outer, .len = len, .inner = inner};
    ug_status st = d->backend->reduce(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "reduce", d);
}

static const char *reduce_name(ug_reduce_op op)
{
    switch (op) {
    case UG_REDUCE_SUM: return "sum";
    case UG_REDUCE_MEAN: return "mean";
    case UG_REDUCE_MAX: return "max";
    case UG_REDUCE_ARGMAX: return "argmax";
    case UG_REDUCE_SUMSQ: return "sumsq";
    }
    return "reduce";
}

ug_status ug_reduce(const ug_tensor *x, ug_reduce_op op, int axis, bool all, bool keepdim,
                    ug_tensor **out)
{
    const char *name = reduce_name(op);
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    UG_TRY(ug_check_tensor(x, name, "x"));
    UG_TRY(ug_check_float(x, name, "x"));
    if ((unsigned)op > UG_REDUCE_SUMSQ)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "reduce: op %d is not a ug_reduce_op", (int)op);
    char dims[96];
    int64_t shape[UG_MAX_DIMS];
    int ndim = 0;
    int64_t outer = 1, len, inner = 1;
    if (all) {
        len = ug_tensor_numel(x);
        if (keepdim) {
            ndim = x->ndim;
            for (int i = 0; i < ndim; i++)
                shape[i] = 1;
        }
    } else {
        int a = axis < 0 ? axis + x->ndim : axis;
        if (a < 0 || a >= x->ndim)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: axis %d is out of range for %s (%d axes)", name, axis,
                                ug_format_shape(x->ndim, x->shape, dims, sizeof dims), x->ndim);
        len = x->shape[a];
        for (int i = 0; i < x->ndim; i++) {
            if (i < a)
                outer *= x->shape[i];
            if (i > a)
                inner *= x->shape[i];
            if (i != a)
                shape[ndim++] = x->shape[i];
            else if (keepdim)
                shape[ndim++] = 1;
        }
    }
    if (len == 0 && outer * inner > 0 && (op == UG_REDUCE_MAX || op == UG_REDUCE_ARGMAX || op == UG_REDUCE_MEAN))
        return ug_set_error(UG_ERR_SHAPE, "%s: the reduced axis of %s is empty", name,
                            ug_format_shape(x->ndim, x->shape, dims, sizeof dims));
    ug_dtype dtype = op == UG_REDUCE_ARGMAX ? UG_I32 : x->dtype;
    UG_TRY(ug_tensor_new(ug_dev(x), dtype, ndim, shape, name, out));
    ug_status st;
    if (len == 0) /* sums over nothing are zero */
        st = ug_exec_unary(UG_UNARY_FILL, 0.0f, 0.0f, *out, NULL);
    else
        st = ug_exec_reduce((ug_reduce_kind)op, *out, x, outer, len, inner);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_sum(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_SUM, axis, false, false, out); }
ug_status ug_sum_all(const ug_tensor *x, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_SUM, 0, true, false, out); }
ug_status ug_mean(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MEAN, axis, false, false, out); }
ug_status ug_mean_all(const ug_tensor *x, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MEAN, 0, true, false, out); }
ug_status ug_max(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_MAX, axis, false, false, out); }
ug_status ug_argmax(const ug_tensor *x, int axis, ug_tensor **out) { return ug_reduce(x, UG_REDUCE_ARGMAX, axis, false, false, out); }

ug_status ug_exec_softmax(bool log, ug_tensor *y, const ug_tensor *x)
{
    ug_device *d = ug_dev(y);
    int64_t cols = x->ndim ? x->shape[x->ndim - 1] : 1;
    int64_t numel = ug_tensor_numel(x);
    if (numel == 0)
        return UG_OK;
    if (!d->backend->softmax)
        return ug_set_error(UG_ERR_UNSUPPORTED, "softmax: the %s backend does not implement it",
                            d->backend->name);
    ug_softmax_args args = {.log = log, .y = ug_kview_of(y), .x = ug_kview_of(x),
                            .rows = numel / cols, .cols = cols};
    ug_status st = d->backend->softmax(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, log ? "log_softmax" : "softmax", d);
}

static ug_status softmax_op(bool log, const ug_tensor *x, ug_tensor **out)
{
    const char *name = log ? "log_softmax" : "softmax";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    UG_TRY(ug_check_tensor(x, name, "x"));
    UG_TRY(ug_check_float(x, name, "x"));
    UG_TRY(ug_tensor_new(ug_dev(x), x->dtype, x->ndim, x->shape, name, out));
    ug_status st = ug_exec_softmax(log, *out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_softmax(const ug_tensor *x, ug_tensor **out) { return softmax_op(false, x, out); }
ug_status ug_log_softmax(const ug_tensor *x, ug_tensor **out) { return softmax_op(true, x, out); }
