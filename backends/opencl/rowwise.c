/* Launching the row-wise family: softmax, cross-entropy and layernorm, one
 * work-group per row. */
#include "backends/opencl/internal.h"

/* One work-group per row: 32 items for short rows, else the kernel's
 * limit (few local sizes, for POCL's per-size compiles). On CPU devices a
 * short row is one item's: 32 items meeting at barriers for a row of 10
 * logits took 27 us for a batch of 64. */
static ug_status launch_rows(ug_bdev *dev, ug_opencl_family family, ug_dtype dtype, int64_t rows,
                             int64_t cols, const ug_opencl_arg *args, cl_uint nargs)
{
    const ug_opencl_kernel *kernel;
    ug_status st = ug_opencl_kernel_for(dev, family, dtype, dtype, &kernel);
    if (st != UG_OK)
        return st;
    /* A CPU device (POCL) runs a row's work-group on one thread either way,
     * and there the barriers cost far more than the row's arithmetic (layer
     * norm of [768, 128]: 9.5 ms a launch in groups of 256, 0.2 ms with one
     * item a row). */
    size_t local = kernel->wg;
    if (dev->is_cpu)
        local = 1;
    else if (cols <= 32 && local > 32)
        local = 32;
    size_t global = (size_t)rows * local;
    return ug_opencl_launch(dev, kernel, 1, &global, &local, args, nargs);
}

ug_status ug_opencl_softmax(ug_bdev *dev, const ug_softmax_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    if (a->y.dtype != a->x.dtype)
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: softmax does not take %s -> %s",
                                         ug_dtype_name(a->x.dtype), ug_dtype_name(a->y.dtype));
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_long cols = a->cols;
    cl_int log_mode = a->log;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),    UG_OPENCL_ARG(yoff), UG_OPENCL_ARG(x),
                            UG_OPENCL_ARG(xoff), UG_OPENCL_ARG(cols), UG_OPENCL_ARG(log_mode)};
    return launch_rows(dev, UG_OPENCL_SOFTMAX, a->x.dtype, a->rows, a->cols, args, 6);
}

/* The labels' arguments of the cross-entropy kernels (UG_XENT_LABEL_PARAMS). */
#define XENT_LABEL_ARGS(a)                                                        \
    cl_mem lab = (cl_mem)(a)->labels.mem;                                         \
    cl_ulong laboff = (cl_ulong)(a)->labels.offset;                               \
    cl_int lab64 = (a)->labels.dtype == UG_I64, ignore = (a)->ignore;             \
    cl_long ignore_index = (a)->ignore_index
#define XENT_LABEL_LIST                                                           \
    UG_OPENCL_ARG(lab), UG_OPENCL_ARG(laboff), UG_OPENCL_ARG(lab64), UG_OPENCL_ARG(ignore), \
        UG_OPENCL_ARG(ignore_index)

static ug_status cross_entropy_rows(ug_bdev *dev, const ug_xent_args *a)
{
    cl_mem x = (cl_mem)a->logits.mem;
    cl_ulong xoff = (cl_ulong)a->logits.offset;
    XENT_LABEL_ARGS(a);
    cl_long cols = a->cols;
    cl_float sm = a->smoothing;
    if (!a->grad.mem) {
        cl_mem loss = (cl_mem)a->loss.mem;
        cl_ulong loff = (cl_ulong)a->loss.offset;
        UG_OPENCL_CHECK(check, a->epi.check, loss);
        ug_opencl_arg args[] = {UG_OPENCL_ARG(loss), UG_OPENCL_ARG(loff),  UG_OPENCL_ARG(x),
                                UG_OPENCL_ARG(xoff), XENT_LABEL_LIST,      UG_OPENCL_ARG(cols),
                                UG_OPENCL_ARG(sm),   UG_OPENCL_ARG(check), UG_OPENCL_ARG(check_off),
                                UG_OPENCL_ARG(check_on)};
        return launch_rows(dev, UG_OPENCL_XENT_FWD, UG_F32, a->rows, a->cols, args,
                           sizeof args / sizeof args[0]);
    }
    cl_mem grad = (cl_mem)a->grad.mem;
    cl_ulong goff = (cl_ulong)a->grad.offset;
    cl_float scale = a->scale;
    UG_OPENCL_CHECK(dloss, a->dloss, grad);     /* absent: 1 */
    UG_OPENCL_CHECK(counted, a->count, grad);   /* absent: 1 */
    ug_opencl_arg args[] = {UG_OPENCL_ARG(grad),      UG_OPENCL_ARG(goff),     UG_OPENCL_ARG(x),
                            UG_OPENCL_ARG(xoff),      XENT_LABEL_LIST,         UG_OPENCL_ARG(cols),
                            UG_OPENCL_ARG(sm),        UG_OPENCL_ARG(scale),    UG_OPENCL_ARG(dloss),
                            UG_OPENCL_ARG(dloss_off), UG_OPENCL_ARG(dloss_on), UG_OPENCL_ARG(counted),
                            UG_OPENCL_ARG(counted_off), UG_OPENCL_ARG(counted_on)};
    return launch_rows(dev, UG_OPENCL_XENT_BWD, UG_F32, a->rows, a->cols, args, sizeof args / sizeof args[0]);
}

/* The mean over the rows not ignored and their count: one work-group of
 * the kernel's size (one local size: one compile on POCL). */
static ug_status cross_entropy_mean(ug_bdev *dev, const ug_xent_args *a)
{
    const ug_reduce_args *m = &a->mean;
    if (m->y.dtype != UG_F32 || (m->epi.check.mem && m->epi.check.dtype != UG_F32) ||
        (m->epi.sum.mem && m->epi.sum.dtype != UG_F32))
        return ug_opencl_host->set_error(UG_ERR_DTYPE,
                                         "OpenCL: cross-entropy's mean, its check and its sum must be f32");
    const ug_opencl_kernel *kernel;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_XENT_MEAN, UG_F32, UG_F32, &kernel);
    if (st != UG_OK)
        return st;
    cl_mem y = (cl_mem)m->y.mem, loss = (cl_mem)a->loss.mem;
    cl_ulong yoff = (cl_ulong)m->y.offset, loff = (cl_ulong)a->loss.offset;
    XENT_LABEL_ARGS(a);
    cl_long rows = a->rows;
    UG_OPENCL_CHECK(counted, a->count, y);
    UG_OPENCL_CHECK(check, m->epi.check, y);
    UG_OPENCL_SUM(sum, m->epi.sum, m->epi.sum_alpha, y);
    cl_int post = m->epi.post;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),           UG_OPENCL_ARG(yoff),       UG_OPENCL_ARG(loss),
                            UG_OPENCL_ARG(loff),        XENT_LABEL_LIST,           UG_OPENCL_ARG(rows),
                            UG_OPENCL_ARG(counted),     UG_OPENCL_ARG(counted_off), UG_OPENCL_ARG(counted_on),
                            UG_OPENCL_ARG(check),       UG_OPENCL_ARG(check_off),  UG_OPENCL_ARG(check_on),
                            UG_OPENCL_ARG(sum),         UG_OPENCL_ARG(sum_off),    UG_OPENCL_ARG(sum_on),
                            UG_OPENCL_ARG(sum_alpha),   UG_OPENCL_ARG(post)};
    size_t local = kernel->wg;
    return ug_opencl_launch(dev, kernel, 1, &local, &local, args, sizeof args / sizeof args[0]);
}

ug_status ug_opencl_cross_entropy(ug_bdev *dev, const ug_xent_args *a)
{
    if (a->rows <= 0 || a->cols <= 0) /* the core gives neither */
        return UG_OK;
    if (a->logits.dtype != UG_F32 || (a->labels.dtype != UG_I32 && a->labels.dtype != UG_I64) ||
        (a->count.mem && a->count.dtype != UG_F32) || (a->epi.check.mem && a->epi.check.dtype != UG_F32))
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: cross-entropy takes f32 logits, i32 or i64 "
                                                       "labels, and an f32 count and check flag");
    const ug_status st = cross_entropy_rows(dev, a);
    return st == UG_OK && a->mean.y.mem && !a->grad.mem ? cross_entropy_mean(dev, a) : st;
}

ug_status ug_opencl_layernorm(ug_bdev *dev, const ug_layernorm_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    cl_mem x = (cl_mem)a->x.mem;
    cl_ulong xoff = (cl_ulong)a->x.offset;
    /* Optional buffers absent: bind x, which the flags keep unread. */
    cl_mem gamma = a->gamma.mem ? (cl_mem)a->gamma.mem : x;
    cl_ulong gmoff = a->gamma.mem ? (cl_ulong)a->gamma.offset : 0;
    cl_mem mean = a->mean.mem ? (cl_mem)a->mean.mem : x;
    cl_ulong moff = a->mean.mem ? (cl_ulong)a->mean.offset : 0;
    cl_mem rstd = a->rstd.mem ? (cl_mem)a->rstd.mem : x;
    cl_ulong roff = a->rstd.mem ? (cl_ulong)a->rstd.offset : 0;
    cl_long cols = a->cols;

    if (!a->dx.mem) {
        cl_mem y = (cl_mem)a->y.mem;
        cl_ulong yoff = (cl_ulong)a->y.offset;
        cl_mem beta = a->beta.mem ? (cl_mem)a->beta.mem : x;
        cl_ulong btoff = a->beta.mem ? (cl_ulong)a->beta.offset : 0;
        cl_float eps = a->eps;
        cl_int flags = (a->gamma.mem ? UG_OPENCL_LN_GAMMA : 0) | (a->beta.mem ? UG_OPENCL_LN_BETA : 0) |
                       (a->mean.mem && !a->rms ? UG_OPENCL_LN_MEAN : 0) |
                       (a->rstd.mem ? UG_OPENCL_LN_RSTD : 0) | (a->rms ? UG_OPENCL_LN_RMS : 0);
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),    UG_OPENCL_ARG(yoff),  UG_OPENCL_ARG(x),
                                UG_OPENCL_ARG(xoff), UG_OPENCL_ARG(gamma), UG_OPENCL_ARG(gmoff),
                                UG_OPENCL_ARG(beta), UG_OPENCL_ARG(btoff), UG_OPENCL_ARG(mean),
                                UG_OPENCL_ARG(moff), UG_OPENCL_ARG(rstd),  UG_OPENCL_ARG(roff),
                                UG_OPENCL_ARG(cols), UG_OPENCL_ARG(eps),   UG_OPENCL_ARG(flags)};
        return launch_rows(dev, UG_OPENCL_LAYERNORM_FWD, UG_F32, a->rows, a->cols, args, 15);
    }
    if (!a->dy.mem || (!a->mean.mem && !a->rms) || !a->rstd.mem)
        return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT, "OpenCL: layernorm backward needs dy, %s",
                                         a->rms ? "and rstd" : "mean and rstd");
    cl_mem dx = (cl_mem)a->dx.mem, dy = (cl_mem)a->dy.mem;
    cl_ulong dxoff = (cl_ulong)a->dx.offset, dyoff = (cl_ulong)a->dy.offset;
    cl_int flags = (a->gamma.mem ? UG_OPENCL_LN_GAMMA : 0) | (a->rms ? UG_OPENCL_LN_RMS : 0);
    cl_int has_terms = a->terms.mem != NULL;
    cl_mem terms = has_terms ? (cl_mem)a->terms.mem : dx; /* dx bound in its place, never written */
    cl_ulong toff = has_terms ? (cl_ulong)a->terms.offset : 0;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(dx),    UG_OPENCL_ARG(dxoff), UG_OPENCL_ARG(dy),
                            UG_OPENCL_ARG(dyoff), UG_OPENCL_ARG(x),     UG_OPENCL_ARG(xoff),
                            UG_OPENCL_ARG(mean),  UG_OPENCL_ARG(moff),  UG_OPENCL_ARG(rstd),
                            UG_OPENCL_ARG(roff),  UG_OPENCL_ARG(gamma), UG_OPENCL_ARG(gmoff),
                            UG_OPENCL_ARG(cols),  UG_OPENCL_ARG(flags), UG_OPENCL_ARG(terms),
                            UG_OPENCL_ARG(toff),  UG_OPENCL_ARG(has_terms)};
    return launch_rows(dev, UG_OPENCL_LAYERNORM_BWD, UG_F32, a->rows, a->cols, args, 17);
}
