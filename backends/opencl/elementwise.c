/* Launching the elementwise families: unary (also the cast, transpose and
 * expand) and binary with broadcasting and a fused activation. Each entry
 * picks the kernel variant for the dtypes and a contiguous fast path where
 * the strides allow it. */
#include <string.h>

#include "backends/collapse_axes.h"
#include "backends/opencl/internal.h"

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d)
        n *= shape[d];
    return n;
}

/* Work-items of the chunked kernels (elementwise.cl's UG_CHUNK each). */
enum { CHUNK = 64 };
static size_t work_items(int64_t n) { return (size_t)((n + CHUNK - 1) / CHUNK); }

/* Row-major contiguous strides for shape (axes of size 1 match anything). */
static bool is_contiguous(int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        if (shape[d] != 1 && strides[d] != expect)
            return false;
        expect *= shape[d];
    }
    return true;
}

/* Mirrors of the kernels' by-value layout structs (common.cl): all
 * cl_long, so host and device agree on the layout. */
typedef struct ug_opencl_layout1 {
    cl_long shape[8];
    cl_long xs[8];
} ug_opencl_layout1;

typedef struct ug_opencl_layout2 {
    cl_long shape[8];
    cl_long as[8];
    cl_long bs[8];
} ug_opencl_layout2;

static void fill8(cl_long *out, int ndim, const int64_t *values, int64_t pad)
{
    for (int d = 0; d < 8; ++d)
        out[d] = d < ndim ? (cl_long)values[d] : (cl_long)pad;
}

/* The layout rows kernels take: the axes collapsed (ug_collapse_axes),
 * the innermost split off as the row (inner, and each operand's step along
 * it), the outer ones left in shape and strides (at least one axis, of
 * size 1, when there are none). */
typedef struct rows_layout {
    int outer;
    int64_t shape[UG_KERNEL_MAX_DIMS], strides[2][UG_KERNEL_MAX_DIMS];
    int64_t inner, step[2];
} rows_layout;

static void rows_layout_of(int ndim, const int64_t *shape, int operands, const int64_t *const *strides,
                           rows_layout *r)
{
    memset(r, 0, sizeof *r);
    const int nd = ug_collapse_axes(ndim, shape, operands, strides, r->shape, r->strides);
    r->inner = r->shape[nd - 1];
    for (int k = 0; k < operands; k++)
        r->step[k] = r->strides[k][nd - 1];
    r->outer = nd > 1 ? nd - 1 : 1;
    if (nd == 1) {
        r->shape[0] = 1;
        r->strides[0][0] = r->strides[1][0] = 0;
    }
}

/* Work-items of the rows kernels: each row's chunks. */
static size_t row_items(int64_t n, int64_t inner) { return (size_t)(n / inner) * work_items(inner); }

ug_status ug_opencl_unary(ug_bdev *dev, const ug_unary_args *a)
{
    int64_t n = numel_of(a->ndim, a->shape);
    if (n <= 0)
        return UG_OK;
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_long cn = n;
    cl_int ndim = a->ndim;
    ug_opencl_layout1 lay;
    fill8(lay.shape, a->ndim, a->shape, 1);
    fill8(lay.xs, a->ndim, a->x_strides, 0);
    bool contig = is_contiguous(a->ndim, a->shape, a->x_strides);

    if (a->op == UG_UNARY_COPY && a->x.dtype == a->y.dtype) {
        /* Same dtype: move raw bits (exact for i32 past 2^24 and NaN payloads). */
        size_t es = ug_dtype_size(a->x.dtype);
        if (contig)
            return ug_opencl_copy(dev, a->y.mem, (size_t)yoff * es, a->x.mem, (size_t)xoff * es,
                                  (size_t)n * es);
        const ug_opencl_kernel *k;
        if (dev->is_cpu) { /* a permutation or slice: a row at a time */
            rows_layout r;
            const int64_t *strides[1] = {a->x_strides};
            rows_layout_of(a->ndim, a->shape, 1, strides, &r);
            ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_COPY_ROWS, a->x.dtype, a->x.dtype, &k);
            if (st != UG_OK)
                return st;
            cl_long inner = r.inner, step = r.step[0];
            cl_int outer = r.outer;
            fill8(lay.shape, r.outer, r.shape, 1);
            fill8(lay.xs, r.outer, r.strides[0], 0);
            ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(yoff),  UG_OPENCL_ARG(x),
                                    UG_OPENCL_ARG(xoff),  UG_OPENCL_ARG(cn),    UG_OPENCL_ARG(inner),
                                    UG_OPENCL_ARG(step),  UG_OPENCL_ARG(outer), UG_OPENCL_ARG(lay)};
            return ug_opencl_launch_1d(dev, k, row_items(n, r.inner), args, 9);
        }
        ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_COPY_STRIDED, a->x.dtype, a->x.dtype, &k);
        if (st != UG_OK)
            return st;
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),    UG_OPENCL_ARG(yoff), UG_OPENCL_ARG(x),
                                UG_OPENCL_ARG(xoff), UG_OPENCL_ARG(cn),   UG_OPENCL_ARG(ndim),
                                UG_OPENCL_ARG(lay)};
        return ug_opencl_launch_1d(dev, k, (size_t)n, args, 7);
    }

    ug_dtype xdt = a->x.dtype;
    if (a->op == UG_UNARY_FILL) {
        /* x is not read (and may be absent): bind y in its place. */
        x = y;
        xoff = yoff;
        xdt = a->y.dtype;
        contig = true;
    }
    const bool chunked = contig && dev->is_cpu && xdt == UG_F32 && a->y.dtype == UG_F32;
    const ug_opencl_kernel *k;
    ug_status st = chunked
                       ? ug_opencl_kernel_for(dev, UG_OPENCL_UNARY_CHUNKED, UG_F32, UG_F32, &k)
                       : ug_opencl_kernel_for(dev, contig ? UG_OPENCL_UNARY_CONTIG : UG_OPENCL_UNARY_STRIDED,
                                              xdt, a->y.dtype, &k);
    if (st != UG_OK)
        return st;
    cl_int op = a->op;
    cl_float alpha = a->alpha, beta = a->beta;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(yoff), UG_OPENCL_ARG(x),
                            UG_OPENCL_ARG(xoff),  UG_OPENCL_ARG(cn),   UG_OPENCL_ARG(op),
                            UG_OPENCL_ARG(alpha), UG_OPENCL_ARG(beta), UG_OPENCL_ARG(ndim),
                            UG_OPENCL_ARG(lay)};
    return ug_opencl_launch_1d(dev, k, chunked ? work_items(n) : (size_t)n, args, contig ? 8 : 10);
}

/* The period with which an operand's elements repeat along a row-major
 * walk of shape: the trailing axes it is contiguous on, after leading axes
 * it is broadcast on (stride 0); n when contiguous throughout; 0 when
 * neither (a transposed view, a column broadcast). */
static int64_t repeat_period(int ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t period = 1;
    int d = ndim - 1;
    for (; d >= 0 && (shape[d] == 1 || strides[d] == period); --d)
        period *= shape[d];
    for (; d >= 0; --d)
        if (shape[d] != 1 && strides[d] != 0)
            return 0;
    return period;
}

ug_status ug_opencl_binary(ug_bdev *dev, const ug_binary_args *a)
{
    int64_t n = numel_of(a->ndim, a->shape);
    if (n <= 0)
        return UG_OK;
    if (a->a.dtype != a->y.dtype || a->b.dtype != a->y.dtype)
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: binary ops take one dtype, not %s, %s -> %s",
                                         ug_dtype_name(a->a.dtype), ug_dtype_name(a->b.dtype),
                                         ug_dtype_name(a->y.dtype));
    cl_mem y = (cl_mem)a->y.mem, am = (cl_mem)a->a.mem, bm = (cl_mem)a->b.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, aoff = (cl_ulong)a->a.offset,
             boff = (cl_ulong)a->b.offset;
    cl_long cn = n;
    cl_int op = a->op, post = a->epi.post, ndim = a->ndim;
    cl_float alpha = a->alpha;
    const ug_opencl_kernel *k;
    ug_status st;

    /* On CPU devices: full operands, or one repeating each row (a bias),
     * rows long enough to fill chunks. */
    int64_t pa = repeat_period(a->ndim, a->shape, a->a_strides);
    int64_t pb = repeat_period(a->ndim, a->shape, a->b_strides);
    cl_long period = pa < pb ? pa : pb;
    if (dev->is_cpu && a->y.dtype == UG_F32 && (period == n || period >= CHUNK) &&
        (pa == n || pa == period) && (pb == n || pb == period)) {
        if ((st = ug_opencl_kernel_for(dev, UG_OPENCL_BINARY_CHUNKED, UG_F32, UG_F32, &k)) != UG_OK)
            return st;
        cl_int a_full = pa == n, b_full = pb == n;
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),      UG_OPENCL_ARG(yoff),   UG_OPENCL_ARG(am),
                                UG_OPENCL_ARG(aoff),   UG_OPENCL_ARG(bm),     UG_OPENCL_ARG(boff),
                                UG_OPENCL_ARG(cn),     UG_OPENCL_ARG(period), UG_OPENCL_ARG(a_full),
                                UG_OPENCL_ARG(b_full), UG_OPENCL_ARG(op),     UG_OPENCL_ARG(post),
                                UG_OPENCL_ARG(alpha)};
        return ug_opencl_launch_1d(dev, k, (size_t)(n / period) * work_items(period), args, 13);
    }

    bool contig = is_contiguous(a->ndim, a->shape, a->a_strides) &&
                  is_contiguous(a->ndim, a->shape, a->b_strides);
    if (dev->is_cpu && a->y.dtype == UG_F32 && !contig) { /* any other strides: a row at a time */
        rows_layout r;
        const int64_t *strides[2] = {a->a_strides, a->b_strides};
        rows_layout_of(a->ndim, a->shape, 2, strides, &r);
        if ((st = ug_opencl_kernel_for(dev, UG_OPENCL_BINARY_ROWS, UG_F32, UG_F32, &k)) != UG_OK)
            return st;
        ug_opencl_layout2 lay;
        fill8(lay.shape, r.outer, r.shape, 1);
        fill8(lay.as, r.outer, r.strides[0], 0);
        fill8(lay.bs, r.outer, r.strides[1], 0);
        cl_long inner = r.inner, a_step = r.step[0], b_step = r.step[1];
        cl_int outer = r.outer;
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),      UG_OPENCL_ARG(yoff),   UG_OPENCL_ARG(am),
                                UG_OPENCL_ARG(aoff),   UG_OPENCL_ARG(bm),     UG_OPENCL_ARG(boff),
                                UG_OPENCL_ARG(cn),     UG_OPENCL_ARG(inner),  UG_OPENCL_ARG(a_step),
                                UG_OPENCL_ARG(b_step), UG_OPENCL_ARG(op),     UG_OPENCL_ARG(post),
                                UG_OPENCL_ARG(alpha),  UG_OPENCL_ARG(outer),  UG_OPENCL_ARG(lay)};
        return ug_opencl_launch_1d(dev, k, row_items(n, r.inner), args, 15);
    }
    st = ug_opencl_kernel_for(dev, contig ? UG_OPENCL_BINARY_CONTIG : UG_OPENCL_BINARY_STRIDED, a->y.dtype,
                              a->y.dtype, &k);
    if (st != UG_OK)
        return st;
    ug_opencl_layout2 lay;
    fill8(lay.shape, a->ndim, a->shape, 1);
    fill8(lay.as, a->ndim, a->a_strides, 0);
    fill8(lay.bs, a->ndim, a->b_strides, 0);
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(yoff), UG_OPENCL_ARG(am),
                            UG_OPENCL_ARG(aoff),  UG_OPENCL_ARG(bm),   UG_OPENCL_ARG(boff),
                            UG_OPENCL_ARG(cn),    UG_OPENCL_ARG(op),   UG_OPENCL_ARG(post),
                            UG_OPENCL_ARG(alpha), UG_OPENCL_ARG(ndim), UG_OPENCL_ARG(lay)};
    return ug_opencl_launch_1d(dev, k, (size_t)n, args, contig ? 10 : 12);
}
