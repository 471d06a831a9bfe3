/* Elementwise operations: broadcasting, unary and binary maps, casts,
 * transpose, fill and random numbers. */
#include <stdio.h>
#include <string.h>

#include "core/exec.h"
#include "unigrad/ops.h"

ug_status ug_kernel_failed(ug_status status, const char *op, const ug_device *device)
{
    return ug_prefix_error(status, "%s on %s", op, device->info.id);
}

static ug_status unsupported(const char *op, const ug_device *device)
{
    return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s backend of %s does not implement it", op,
                        device->backend->name, device->info.id);
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

/* Strides (in elements) of t read with ndim axes: 0 along its size-1 axes. */
static void broadcast_strides(const ug_tensor *t, int ndim, int64_t *strides)
{
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int it = t->ndim - ndim + i;
        int64_t d = it >= 0 ? t->shape[it] : 1;
        strides[i] = d == 1 ? 0 : stride;
        stride *= d;
    }
}

/* Drops size-1 axes and merges neighbours that are contiguous in every
 * operand, so most launches see one or two axes. */
static int collapse(int ndim, int64_t *shape, int64_t *s1, int64_t *s2)
{
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        if (n > 0 && s1[n - 1] == s1[i] * shape[i] && (!s2 || s2[n - 1] == s2[i] * shape[i])) {
            shape[n - 1] *= shape[i];
            s1[n - 1] = s1[i];
            if (s2)
                s2[n - 1] = s2[i];
            continue;
        }
        shape[n] = shape[i];
        s1[n] = s1[i];
        if (s2)
            s2[n] = s2[i];
        n++;
    }
    if (n == 0) {
        shape[0] = 1;
        s1[0] = 1;
        if (s2)
            s2[0] = 1;
        n = 1;
    }
    return n;
}

ug_status ug_exec_binary(ug_binary_kind op, ug_unary_kind post, float alpha, ug_tensor *y,
                         const ug_tensor *a, const ug_tensor *b)
{
    ug_device *d = ug_dev(y);
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    if (!d->backend->binary)
        return unsupported("binary op", d);
    ug_binary_args args = {.op = op, .post = post, .alpha = alpha};
    args.y = ug_kview_of(y);
    args.a = ug_kview_of(a);
    args.b = ug_kview_of(b);
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    broadcast_strides(a, y->ndim, args.a_strides);
    broadcast_strides(b, y->ndim, args.b_strides);
    int64_t sa[UG_MAX_DIMS], sb[UG_MAX_DIMS];
    memcpy(sa, args.a_strides, sizeof sa);
    memcpy(sb, args.b_strides, sizeof sb);
    args.ndim = collapse(y->ndim, shape, sa, sb);
    memcpy(args.shape, shape, sizeof shape);
    memcpy(args.a_strides, sa, sizeof sa);
    memcpy(args.b_strides, sb, sizeof sb);
    ug_status st = d->backend->binary(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "binary op", d);
}

static ug_status launch_unary(ug_unary_kind op, float alpha, float beta, ug_tensor *y,
                              const ug_tensor *x, int ndim, int64_t *shape, int64_t *strides)
{
    ug_device *d = ug_dev(y);
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    if (!d->backend->unary)
        return unsupported("unary op", d);
    ug_unary_args args = {.op = op, .alpha = alpha, .beta = beta};
    args.y = ug_kview_of(y);
    args.x = x ? ug_kview_of(x) : ug_kview_of(y);
    args.ndim = collapse(ndim, shape, strides, NULL);
    memcpy(args.shape, shape, sizeof args.shape);
    memcpy(args.x_strides, strides, sizeof args.x_strides);
    ug_status st = d->backend->unary(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "unary op", d);
}

ug_status ug_exec_unary(ug_unary_kind op, float alpha, float beta, ug_tensor *y, const ug_tensor *x)
{
    int64_t shape[UG_MAX_DIMS] = {ug_tensor_numel(y)};
    int64_t strides[UG_MAX_DIMS] = {1};
    return launch_unary(op, alpha, beta, y, x, 1, shape, strides);
}

ug_status ug_exec_expand(ug_tensor *y, const ug_tensor *x, float alpha)
{
    int64_t shape[UG_MAX_DIMS], strides[UG_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    broadcast_strides(x, y->ndim, strides);
    return launch_unary(UG_UNARY_SCALE_SHIFT, alpha, 0.0f, y, x, y->ndim, shape, strides);
}

ug_status ug_exec_transpose(ug_tensor *y, const ug_tensor *x)
{
    int n = x->ndim;
    int64_t shape[UG_MAX_DIMS] = {0}, contiguous[UG_MAX_DIMS] = {0}, strides[UG_MAX_DIMS] = {0};
    int64_t stride = 1;
    for (int i = n - 1; i >= 0; i--) {
        contiguous[i] = stride;
        stride *= x->shape[i];
    }
    memcpy(shape, x->shape, sizeof shape);
    memcpy(strides, contiguous, sizeof strides);
    shape[n - 2] = x->shape[n - 1];
    shape[n - 1] = x->shape[n - 2];
    strides[n - 2] = contiguous[n - 1];
    strides[n - 1] = contiguous[n - 2];
    return launch_unary(UG_UNARY_COPY, 1.0f, 0.0f, y, x, n, shape, strides);
}

/* ---- public binary ops ---- */

static ug_status binary_op(const char *name, ug_binary_kind op, const ug_tensor *a,
                           const ug_tensor *b, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    UG_TRY(ug_check_tensor(a, name, "a"));
    UG_TRY(ug_check_tensor(b, name, "b"));
    UG_TRY(ug_check_same_device(a, b, name));
    UG_TRY(ug_check_float(a, name, "a"));
    if (a->dtype != b->dtype)
        return ug_set_error(UG_ERR_DTYPE, "%s: a is %s and b is %s; cast one with ug_cast", name,
                            ug_dtype_name(a->dtype), ug_dtype_name(b->dtype));
    int ndim = 0;
    int64_t shape[UG_MAX_DIMS];
    UG_TRY(ug_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, name, &ndim, shape));
    UG_TRY(ug_tensor_new(ug_dev(a), a->dtype, ndim, shape, name, out));
    ug_status st = ug_exec_binary(op, UG_UNARY_COPY, 0.0f, *out, a, b);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_add(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("add", UG_BINARY_ADD, a, b, out);
}
ug_status ug_sub(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("sub", UG_BINARY_SUB, a, b, out);
}
ug_status ug_mul(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("mul", UG_BINARY_MUL, a, b, out);
}
ug_status ug_div(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("div", UG_BINARY_DIV, a, b, out);
}
ug_status ug_maximum(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("maximum", UG_BINARY_MAXIMUM, a, b, out);
}
ug_status ug_minimum(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)
{
    return binary_op("minimum", UG_BINARY_MINIMUM, a, b, out);
}

/* ---- public unary ops ---- */

static ug_status unary_op(const char *name, ug_unary_kind op, float alpha, float beta,
                          const ug_tensor *x, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    UG_TRY(ug_check_tensor(x, name, "x"));
    UG_TRY(ug_check_float(x, name, "x"));
    UG_TRY(ug_tensor_new(ug_dev(x), x->dtype, x->ndim, x->shape, name, out));
    ug_status st = ug_exec_unary(op, alpha, beta, *out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_neg(const ug_tensor *x, ug_tensor **out) { return unary_op("neg", UG_UNARY_NEG, 0, 0, x, out); }
ug_status ug_abs(const ug_tensor *x, ug_tensor **out) { return unary_op("abs", UG_UNARY_ABS, 0, 0, x, out); }
ug_status ug_exp(const ug_tensor *x, ug_tensor **out) { return unary_op("exp", UG_UNARY_EXP, 0, 0, x, out); }
ug_status ug_log(const ug_tensor *x, ug_tensor **out) { return unary_op("log", UG_UNARY_LOG, 0, 0, x, out); }
ug_status ug_sqrt(const ug_tensor *x, ug_tensor **out) { return unary_op("sqrt", UG_UNARY_SQRT, 0, 0, x, out); }
ug_status ug_relu(const ug_tensor *x, ug_tensor **out) { return unary_op("relu", UG_UNARY_RELU, 0, 0, x, out); }
ug_status ug_sigmoid(const ug_tensor *x, ug_tensor **out) { return unary_op("sigmoid", UG_UNARY_SIGMOID, 0, 0, x, out); }
ug_status ug_tanh(const ug_tensor *x, ug_tensor **out) { return unary_op("tanh", UG_UNARY_TANH, 0, 0, x, out); }
ug_status ug_gelu(const ug_tensor *x, ug_tensor **out) { return unary_op("gelu", UG_UNARY_GELU, 0, 0, x, out); }

ug_status ug_scale_shift(const ug_tensor *x, float scale, float shift, ug_tensor **out)
{
    return unary_op("scale_shift", UG_UNARY_SCALE_SHIFT, scale, shift, x, out);
}

ug_status ug_clone(const ug_tensor *x, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "clone: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(x, "clone", "x"));
    UG_TRY(ug_tensor_new(ug_dev(x), x->dtype, x->ndim, x->shape, "clone", out));
    ug_status st = ug_tensor_copy(*out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_fill(ug_tensor *x, float value)
{
    UG_TRY(ug_check_tensor(x, "fill", "x"));
    UG_TRY(ug_check_float(x, "fill", "x"));
    return ug_exec_unary(UG_UNARY_FILL, 0.0f, value, x, NULL);
}

ug_status ug_cast(const ug_tensor *x, ug_dtype dtype, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "cast: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(x, "cast", "x"));
    if (dtype != UG_F32 && dtype != UG_F16 && dtype != x->dtype)
        return ug_set_error(UG_ERR_DTYPE,
                            "cast: %s to %s is not supported: casts go to f32 or f16 (from f32, f16, "
                            "i32 or u8)",
                            ug_dtype_name(x->dtype), ug_dtype_size(dtype) ? ug_dtype_name(dtype) : "an invalid dtype");
    UG_TRY(ug_tensor_new(ug_dev(x), dtype, x->ndim, x->shape, "cast", out));
    ug_status st = ug_exec_unary(UG_UNARY_COPY, 1.0f, 0.0f, *out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_transpose(const ug_tensor *x, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "transpose: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(x, "transpose", "x"));
    if (x->ndim < 2) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE, "transpose: x is %s; it needs at least two axes",
                            ug_format_shape(x->ndim, x->shape, s, sizeof s));
    }
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 2] = x->shape[x->ndim - 1];
    shape[x->ndim - 1] = x->shape[x->ndim - 2];
    UG_TRY(ug_tensor_new(ug_dev(x), x->dtype, x->ndim, shape, "transpose", out));
    ug_status st = ug_exec_transpose(*out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* ---- random ---- */

ug_status ug_exec_random(bool normal, float p0, float p1, uint64_t seed, uint64_t offset,
                         ug_tensor *y)
{
    ug_device *d = ug_dev(y);
    int64_t n = ug_tensor_numel(y);
    if (n == 0)
        return UG_OK;
    if (!d->backend->random)
        return unsupported("random", d);
    ug_random_args args = {.normal = normal, .p0 = p0, .p1 = p1, .seed = seed, .offset = offset,
                           .y = ug_kview_of(y), .n = n};
    ug_status st = d->backend->random(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "random", d);
}

static ug_status random_op(const char *name, bool normal, float p0, float p1, ug_tensor *x,
                           uint64_t seed, uint64_t offset)
{
    UG_TRY(ug_check_tensor(x, name, "x"));
    UG_TRY(ug_check_float(x, name, "x"));
    if (!(p0 == p0) || !(p1 == p1) || (normal ? p1 < 0 : p1 < p0))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            normal ? "%s: stddev %g must be >= 0 (mean %g)" : "%s: high %g is below low %g",
                            name, (double)p1, (double)p0);
    return ug_exec_random(normal, p0, p1, seed, offset, x);
}

ug_status ug_random_uniform(ug_tensor *x, uint64_t seed, uint64_t offset, float low, float high)
{
    return random_op("random_uniform", false, low, high, x, seed, offset);
}

ug_status ug_random_normal(ug_tensor *x, uint64_t seed, uint64_t offset, float mean, float stddev)
{
    return random_op("random_normal", true, mean, stddev, x, seed, offset);
}
