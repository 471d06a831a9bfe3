/* Tensor handles: creation, views, transfers between host and devices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"

int64_t ug_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

const char *ug_format_shape(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                                 (long long)shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

ug_status ug_check_tensor(const ug_tensor *tensor, const char *op, const char *arg)
{
    if (!tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, arg);
    return UG_OK;
}

ug_status ug_check_same_device(const ug_tensor *a, const ug_tensor *b, const char *op)
{
    if (ug_dev(a) != ug_dev(b))
        return ug_set_error(UG_ERR_DEVICE,
                            "%s: operands are on different devices (%s and %s); move one with "
                            "ug_tensor_to_device",
                            op, ug_dev(a)->info.id, ug_dev(b)->info.id);
    return UG_OK;
}

ug_status ug_check_float(const ug_tensor *tensor, const char *op, const char *arg)
{
    if (!ug_dtype_is_float(tensor->dtype))
        return ug_set_error(UG_ERR_DTYPE, "%s: %s has dtype %s; this op takes f32, f16 or bf16 (use ug_cast)",
                            op, arg, ug_dtype_name(tensor->dtype));
    return UG_OK;
}

ug_status ug_checked_numel(int ndim, const int64_t *shape, size_t elem_bytes, const char *op,
                           int64_t *numel)
{
    if (ndim < 0 || ndim > UG_MAX_DIMS)
        return ug_set_error(UG_ERR_SHAPE, "%s: %d axes is outside 0..%d", op, ndim, UG_MAX_DIMS);
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ug_set_error(UG_ERR_SHAPE, "%s: axis %d has negative size %lld", op, i,
                                (long long)shape[i]);
        empty |= shape[i] == 0;
    }
    /* A zero anywhere makes the count 0, whatever the other sizes. */
    int64_t n = empty ? 0 : 1;
    bool overflow = false;
    for (int i = 0; i < ndim && !empty && !overflow; i++)
        overflow = __builtin_mul_overflow(n, shape[i], &n);
    int64_t bytes;
    if (overflow || __builtin_mul_overflow(n, (int64_t)(elem_bytes ? elem_bytes : 1), &bytes)) {
        char s[160];
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: shape %s has more elements than a tensor can address (2^63 bytes)",
                            op, ug_format_shape(ndim, shape, s, sizeof s));
    }
    *numel = n;
    return UG_OK;
}

static ug_status check_shape(int ndim, const int64_t *shape, ug_dtype dtype, const char *op)
{
    if (ndim > 0 && ndim <= UG_MAX_DIMS && !shape)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: shape is NULL", op);
    int64_t numel;
    return ug_checked_numel(ndim, shape, ug_dtype_size(dtype), op, &numel);
}

ug_status ug_tensor_new(ug_device *device, ug_dtype dtype, int ndim, const int64_t *shape,
                        const char *op, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: device is NULL", op);
    if (ug_dtype_size(dtype) == 0)
        return ug_set_error(UG_ERR_DTYPE, "%s: dtype %d is not a ug_dtype", op, (int)dtype);
    UG_TRY(check_shape(ndim, shape, dtype, op));
    ug_tensor *t = ug_calloc(1, sizeof *t);
    if (!t)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    size_t bytes = (size_t)ug_shape_numel(ndim, shape) * ug_dtype_size(dtype);
    char purpose[128];
    char dims[96];
    snprintf(purpose, sizeof purpose, "a %s %s tensor (%s)", ug_dtype_name(dtype),
             ug_format_shape(ndim, shape, dims, sizeof dims), op);
    ug_status st = ug_pool_alloc(device, bytes, purpose, &t->storage);
    if (st != UG_OK) {
        free(t);
        return st;
    }
    *out = t;
    return UG_OK;
}

ug_status ug_tensor_create(ug_device *device, ug_dtype dtype, int ndim, const int64_t *shape,
                           ug_tensor **out)
{
    return ug_tensor_new(device, dtype, ndim, shape, "ug_tensor_create", out);
}

ug_status ug_tensor_from_host(ug_device *device, ug_dtype dtype, int ndim, const int64_t *shape,
                              const void *data, ug_tensor **out)
{
    UG_TRY(ug_tensor_new(device, dtype, ndim, shape, "ug_tensor_from_host", out));
    ug_status st = ug_tensor_upload(*out, data, ug_tensor_nbytes(*out));
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

void ug_tensor_free(ug_tensor *tensor)
{
    if (!tensor)
        return;
    ug_storage_release(tensor->storage);
    free(tensor);
}

ug_device *ug_tensor_device(const ug_tensor *t) { return t ? ug_dev(t) : NULL; }
ug_dtype ug_tensor_dtype(const ug_tensor *t) { return t ? t->dtype : UG_F32; }
int ug_tensor_ndim(const ug_tensor *t) { return t ? t->ndim : 0; }

int64_t ug_tensor_dim(const ug_tensor *t, int axis)
{
    if (!t)
        return -1;
    if (axis < 0)
        axis += t->ndim;
    return axis >= 0 && axis < t->ndim ? t->shape[axis] : -1;
}

void ug_tensor_shape(const ug_tensor *t, int64_t *shape)
{
    if (t && shape && t->ndim)
        memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
}

int64_t ug_tensor_numel(const ug_tensor *t) { return t ? ug_shape_numel(t->ndim, t->shape) : 0; }

size_t ug_tensor_nbytes(const ug_tensor *t)
{
    return t ? (size_t)ug_tensor_numel(t) * ug_dtype_size(t->dtype) : 0;
}

const char *ug_tensor_shape_string(const ug_tensor *t, char *buf, size_t len)
{
    if (!buf || !len)
        return "";
    if (!t) {
        snprintf(buf, len, "(null)");
        return buf;
    }
    return ug_format_shape(t->ndim, t->shape, buf, len);
}

ug_kview ug_kview_of(const ug_tensor *t)
{
    return (ug_kview){t->storage->mem, t->offset, t->dtype};
}

static size_t byte_offset(const ug_tensor *t) { return (size_t)t->offset * ug_dtype_size(t->dtype); }

static ug_status check_transfer(const ug_tensor *t, const void *data, size_t bytes, const char *op)
{
    UG_TRY(ug_check_tensor(t, op, "tensor"));
    char dims[96];
    if (bytes != ug_tensor_nbytes(t))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %zu bytes given, but the %s %s tensor holds %zu bytes", op, bytes,
                            ug_dtype_name(t->dtype), ug_format_shape(t->ndim, t->shape, dims, sizeof dims),
                            ug_tensor_nbytes(t));
    if (!data && bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: data is NULL", op);
    return UG_OK;
}

static ug_status upload(ug_tensor *t, const void *data, size_t bytes, bool blocking, const char *op)
{
    UG_TRY(check_transfer(t, data, bytes, op));
    if (!bytes)
        return UG_OK;
    return ug_call_write(ug_dev(t), t->storage->mem, byte_offset(t), data, bytes, blocking, op);
}

static ug_status download(const ug_tensor *t, void *data, size_t bytes, bool blocking, const char *op)
{
    UG_TRY(check_transfer(t, data, bytes, op));
    if (!bytes)
        return UG_OK;
    return ug_call_read(ug_dev(t), data, t->storage->mem, byte_offset(t), bytes, blocking, op);
}

ug_status ug_tensor_upload(ug_tensor *t, const void *data, size_t bytes)
{
    return upload(t, data, bytes, true, "ug_tensor_upload");
}

ug_status ug_tensor_upload_async(ug_tensor *t, const void *data, size_t bytes)
{
    return upload(t, data, bytes, false, "ug_tensor_upload_async");
}

ug_status ug_tensor_download(const ug_tensor *t, void *data, size_t bytes)
{
    return download(t, data, bytes, true, "ug_tensor_download");
}

ug_status ug_tensor_download_async(const ug_tensor *t, void *data, size_t bytes)
{
    return download(t, data, bytes, false, "ug_tensor_download_async");
}

ug_status ug_tensor_copy(ug_tensor *dst, const ug_tensor *src) { return ug_tensor_copy_direct(dst, src, NULL); }

ug_status ug_tensor_copy_direct(ug_tensor *dst, const ug_tensor *src, bool *direct)
{
    if (direct)
        *direct = true;
    UG_TRY(ug_check_tensor(dst, "ug_tensor_copy", "dst"));
    UG_TRY(ug_check_tensor(src, "ug_tensor_copy", "src"));
    char a[96], b[96];
    if (dst->dtype != src->dtype || ug_tensor_numel(dst) != ug_tensor_numel(src))
        return ug_set_error(UG_ERR_SHAPE,
                            "ug_tensor_copy: dst is %s %s, src is %s %s; they must have one dtype "
                            "and the same element count",
                            ug_dtype_name(dst->dtype), ug_format_shape(dst->ndim, dst->shape, a, sizeof a),
                            ug_dtype_name(src->dtype), ug_format_shape(src->ndim, src->shape, b, sizeof b));
    size_t bytes = ug_tensor_nbytes(src);
    if (!bytes)
        return UG_OK;
    ug_device *dd = ug_dev(dst), *sd = ug_dev(src);
    if (dd == sd) {
        size_t d0 = byte_offset(dst), s0 = byte_offset(src);
        if (dst->storage == src->storage && d0 == s0)
            return UG_OK;
        if (dst->storage == src->storage && d0 < s0 + bytes && s0 < d0 + bytes) {
            /* Overlapping views of one buffer copy like memmove on every
             * backend (OpenCL refuses overlapping copies): through a
             * temporary. */
            ug_tensor *tmp = NULL;
            UG_TRY(ug_tensor_new(dd, src->dtype, src->ndim, src->shape, "ug_tensor_copy (overlapping views)",
                                 &tmp));
            ug_status st = ug_tensor_copy(tmp, src);
            if (st == UG_OK)
                st = ug_tensor_copy(dst, tmp);
            ug_tensor_free(tmp);
            return st;
        }
        return ug_call_copy(dd, dst->storage->mem, d0, src->storage->mem, s0, bytes, "ug_tensor_copy");
    }
    /* Across devices of one backend that copies between them, device to
     * device; else through host memory, pinned where the source offers it. */
    if (ug_call_copy_peer(dd, dst->storage->mem, byte_offset(dst), sd, src->storage->mem, byte_offset(src), bytes,
                          "ug_tensor_copy") == UG_OK)
        return UG_OK;
    if (direct)
        *direct = false;
    void *staging = NULL;
    UG_TRY(ug_host_alloc(sd, bytes, &staging));
    ug_status st = download(src, staging, bytes, true, "ug_tensor_copy");
    if (st == UG_OK)
        st = upload(dst, staging, bytes, true, "ug_tensor_copy");
    ug_host_free(sd, staging);
    return st;
}

ug_status ug_tensor_to_device(const ug_tensor *src, ug_device *device, ug_tensor **out)
{
    UG_TRY(ug_check_tensor(src, "ug_tensor_to_device", "src"));
    UG_TRY(ug_tensor_new(device, src->dtype, src->ndim, src->shape, "ug_tensor_to_device", out));
    ug_status st = ug_tensor_copy(*out, src);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

ug_status ug_tensor_over_storage(ug_storage *storage, ug_dtype dtype, int ndim,
                                 const int64_t *shape, int64_t offset, ug_tensor **out)
{
    ug_tensor *t = ug_calloc(1, sizeof *t);
    if (!t)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor handle");
    t->storage = storage;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->offset = offset;
    ug_storage_retain(storage);
    *out = t;
    return UG_OK;
}

static ug_status make_view(const ug_tensor *t, int ndim, const int64_t *shape, int64_t offset,
                           ug_tensor **out)
{
    ug_tensor *v = ug_calloc(1, sizeof *v);
    if (!v)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory for a view");
    *v = *t;
    v->ndim = ndim;
    memset(v->shape, 0, sizeof v->shape);
    if (ndim)
        memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    v->offset = offset;
    ug_storage_retain(t->storage);
    *out = v;
    return UG_OK;
}

ug_status ug_tensor_slice(const ug_tensor *t, int64_t start, int64_t count, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensor_slice: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(t, "ug_tensor_slice", "tensor"));
    char dims[96];
    if (t->ndim == 0)
        return ug_set_error(UG_ERR_SHAPE, "ug_tensor_slice: a scalar has no axis to slice");
    if (start < 0 || count < 0 || start > t->shape[0] || count > t->shape[0] - start)
        return ug_set_error(UG_ERR_SHAPE,
                            "ug_tensor_slice: %lld rows from row %lld are outside the first axis "
                            "of %s (size %lld)",
                            (long long)count, (long long)start,
                            ug_format_shape(t->ndim, t->shape, dims, sizeof dims), (long long)t->shape[0]);
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = count;
    int64_t row = ug_shape_numel(t->ndim - 1, t->shape + 1);
    return make_view(t, t->ndim, shape, t->offset + start * row, out);
}

ug_status ug_resolve_reshape(int from_ndim, const int64_t *from_shape, int ndim, const int64_t *shape,
                             const char *op, int64_t *resolved)
{
    if (ndim < 0 || ndim > UG_MAX_DIMS)
        return ug_set_error(UG_ERR_SHAPE, "%s: ndim %d is outside 0..%d", op, ndim, UG_MAX_DIMS);
    if (ndim && !shape)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: shape is NULL", op);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        resolved[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0)
                return ug_set_error(UG_ERR_SHAPE, "%s: more than one size is -1", op);
            infer = i;
        } else if (shape[i] < 0) {
            return ug_set_error(UG_ERR_SHAPE, "%s: size %lld at axis %d is negative", op,
                                (long long)shape[i], i);
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            char to[96];
            return ug_set_error(UG_ERR_SHAPE, "%s: %s has more elements than a tensor can address",
                                op, ug_format_shape(ndim, shape, to, sizeof to));
        }
    }
    int64_t numel = ug_shape_numel(from_ndim, from_shape);
    char from[96], to[96];
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return ug_set_error(UG_ERR_SHAPE,
                                "%s: cannot infer the -1 size: %lld elements do not divide into %s", op,
                                (long long)numel, ug_format_shape(ndim, shape, to, sizeof to));
        resolved[infer] = numel / known;
    }
    if (ug_shape_numel(ndim, resolved) != numel)
        return ug_set_error(UG_ERR_SHAPE, "%s: %s has %lld elements, %s has %lld", op,
                            ug_format_shape(from_ndim, from_shape, from, sizeof from), (long long)numel,
                            ug_format_shape(ndim, resolved, to, sizeof to),
                            (long long)ug_shape_numel(ndim, resolved));
    return UG_OK;
}

ug_status ug_tensor_reshape(const ug_tensor *t, int ndim, const int64_t *shape, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensor_reshape: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(t, "ug_tensor_reshape", "tensor"));
    int64_t resolved[UG_MAX_DIMS];
    UG_TRY(ug_resolve_reshape(t->ndim, t->shape, ndim, shape, "ug_tensor_reshape", resolved));
    return make_view(t, ndim, resolved, t->offset, out);
}
