/* Matrix products of the last two axes, 2-D and batched. */
#include <string.h>

#include "core/exec.h"
#include "unigrad/ops.h"

static int64_t rows_of(const ug_tensor *t) { return t->shape[t->ndim - 2]; }
static int64_t cols_of(const ug_tensor *t) { return t->shape[t->ndim - 1]; }
static int64_t matrix_count(const ug_tensor *t) { return ug_shape_numel(t->ndim - 2, t->shape); }

ug_status ug_exec_matmul(ug_tensor *c, const ug_tensor *a, const ug_tensor *b, bool trans_a,
                         bool trans_b, float alpha, float beta)
{
    ug_device *d = ug_dev(c);
    if (ug_tensor_numel(c) == 0)
        return UG_OK;
    if (!d->backend->gemm)
        return ug_set_error(UG_ERR_UNSUPPORTED, "matmul: the %s backend does not implement GEMM",
                            d->backend->name);
    ug_gemm_args g = {.trans_a = trans_a, .trans_b = trans_b, .alpha = alpha, .beta = beta};
    g.a = ug_kview_of(a);
    g.b = ug_kview_of(b);
    g.c = ug_kview_of(c);
    g.m = rows_of(c);
    g.n = cols_of(c);
    g.k = trans_a ? rows_of(a) : cols_of(a);
    g.lda = cols_of(a);
    g.ldb = cols_of(b);
    g.ldc = g.n;
    g.stride_a = matrix_count(a) > 1 ? rows_of(a) * cols_of(a) : 0;
    g.stride_b = matrix_count(b) > 1 ? rows_of(b) * cols_of(b) : 0;
    g.stride_c = g.m * g.n;
    g.batch = matrix_count(c);
    if (g.batch > 1 && g.stride_b == 0 && !trans_a) {
        /* A stack of A matrices times one B is a single taller product. */
        g.m *= g.batch;
        g.batch = 1;
    }
    ug_status st = d->backend->gemm(d->bdev, &g);
    return st == UG_OK ? st : ug_kernel_failed(st, "matmul", d);
}

static ug_status check_matmul(const ug_tensor *a, const ug_tensor *b, bool ta, bool tb, int *ndim,
                              int64_t *shape)
{
    char sa[96], sb[96];
    ug_format_shape(a->ndim, a->shape, sa, sizeof sa);
    ug_format_shape(b->ndim, b->shape, sb, sizeof sb);
    if (a->ndim < 2 || b->ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "matmul: a is %s, b is %s; both need at least two axes", sa, sb);
    int64_t m = ta ? cols_of(a) : rows_of(a), ka = ta ? rows_of(a) : cols_of(a);
    int64_t kb = tb ? cols_of(b) : rows_of(b), n = tb ? rows_of(b) : cols_of(b);
    if (ka != kb) {
        const char *hint = "";
        if (!tb && ka == cols_of(b))
            hint = " (did you mean transpose_b?)";
        else if (!ta && rows_of(a) == kb)
            hint = " (did you mean transpose_a?)";
        else if (tb && ka == rows_of(b))
            hint = " (did you mean transpose_b = false?)";
        return ug_set_error(UG_ERR_SHAPE, "matmul: inner dimensions differ: a is %s%s, b is %s%s%s", sa,
                            ta ? " (transposed)" : "", sb, tb ? " (transposed)" : "", hint);
    }
    const ug_tensor *batched = a->ndim >= b->ndim ? a : b;
    if (a->ndim > 2 && b->ndim > 2 &&
        (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)(a->ndim - 2) * sizeof *a->shape) != 0))
        return ug_set_error(UG_ERR_SHAPE,
                            "matmul: batch axes differ: a is %s, b is %s (batch axes must be equal, "
                            "or one operand 2-D)",
                            sa, sb);
    *ndim = batched->ndim;
    memcpy(shape, batched->shape, sizeof(int64_t) * (size_t)(batched->ndim - 2));
    shape[*ndim - 2] = m;
    shape[*ndim - 1] = n;
    return UG_OK;
}

ug_status ug_matmul(const ug_tensor *a, const ug_tensor *b, bool transpose_a, bool transpose_b,
                    ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "matmul: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(a, "matmul", "a"));
    UG_TRY(ug_check_tensor(b, "matmul", "b"));
    UG_TRY(ug_check_same_device(a, b, "matmul"));
    UG_TRY(ug_check_float(a, "matmul", "a"));
    if (a->dtype != b->dtype)
        return ug_set_error(UG_ERR_DTYPE, "matmul: a is %s and b is %s; cast one with ug_cast",
                            ug_dtype_name(a->dtype), ug_dtype_name(b->dtype));
    int ndim = 0;
    int64_t shape[UG_MAX_DIMS];
    UG_TRY(check_matmul(a, b, transpose_a, transpose_b, &ndim, shape));
    UG_TRY(ug_tensor_new(ug_dev(a), a->dtype, ndim, shape, "matmul", out));
    ug_status st;
    if (a->dtype == UG_F32) {
        st = ug_exec_matmul(*out, a, b, transpose_a, transpose_b, 1.0f, 0.0f);
    } else {
        /* f16 is a storage type: the product runs in f32 on every device. */
        ug_tensor *a32 = NULL, *b32 = NULL, *c32 = NULL;
        st = ug_cast(a, UG_F32, &a32);
        if (st == UG_OK)
            st = ug_cast(b, UG_F32, &b32);
        if (st == UG_OK)
            st = ug_tensor_new(ug_dev(a), UG_F32, ndim, shape, "matmul", &c32);
        if (st == UG_OK)
            st = ug_exec_matmul(c32, a32, b32, transpose_a, transpose_b, 1.0f, 0.0f);
        if (st == UG_OK)
            st = ug_exec_unary(UG_UNARY_COPY, 1.0f, 0.0f, *out, c32);
        ug_tensor_free(a32);
        ug_tensor_free(b32);
        ug_tensor_free(c32);
    }
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}
