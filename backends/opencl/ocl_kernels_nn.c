/* Launching the reduction and row-wise families: reduce, softmax,
 * cross-entropy and layernorm. Row kernels run one work-group per row. */
#include "backends/opencl/ocl_internal.h"

/* Work-group shape for a reduction of [outer, len, inner]: TX along inner,
 * TY along len, TX * TY <= wg. Only a few shapes are used, because POCL
 * compiles a work-group function for every local size it meets (about a
 * second each): (1, 32) and (1, wg) for rows, (8, wg/8) and (32, wg/32)
 * for inner axes. Items beyond len or inner just skip their loads. */
static void reduce_shape(size_t wg, int64_t len, int64_t inner, size_t *tx, size_t *ty)
{
    *tx = inner == 1 ? 1 : inner <= 8 ? 8 : 32;
    if (*tx > wg)
        *tx = wg;
    *ty = wg / *tx;
    if (inner == 1 && len <= 32 && *ty > 32)
        *ty = 32;
}

/* One pass of reduce_<dtype>; the caller holds launch_lock. */
static ug_status reduce_pass(ug_bdev *dev, int kernel, cl_mem y, cl_ulong yoff, cl_int ydt,
                             cl_mem x, cl_ulong xoff, cl_long outer, cl_long len, cl_long inner,
                             cl_long splits, cl_int op, cl_int stage, cl_float count)
{
    size_t tx, ty;
    reduce_shape(dev->kernel_wg[kernel], len, inner, &tx, &ty);
    cl_long chunk = (len + splits - 1) / splits;
    size_t global[2] = {ocl_round_up((size_t)inner, tx), (size_t)(outer * splits) * ty};
    size_t local[2] = {tx, ty};
    cl_mem xidx = dev->scratch_i, pv = dev->scratch_v, pi = dev->scratch_i;
    ocl_arg args[] = {OCL_ARG(y),     OCL_ARG(yoff),   OCL_ARG(ydt),   OCL_ARG(x),
                      OCL_ARG(xoff),  OCL_ARG(xidx),   OCL_ARG(len),   OCL_ARG(inner),
                      OCL_ARG(splits), OCL_ARG(chunk), OCL_ARG(op),    OCL_ARG(stage),
                      OCL_ARG(count), OCL_ARG(pv),     OCL_ARG(pi)};
    return ocl_launch_locked(dev, (ocl_kernel_id)kernel, 2, global, local, args, 15);
}

ug_status ocl_reduce(ug_bdev *dev, const ug_reduce_args *a)
{
    if (a->outer <= 0 || a->inner <= 0 || a->len <= 0)
        return UG_OK;
    if (a->x.dtype != UG_F32 && a->x.dtype != UG_F16)
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: reduce does not take %s input",
                                   ug_dtype_name(a->x.dtype));
    bool argmax = a->op == UG_RKERNEL_ARGMAX;
    if (argmax ? a->y.dtype != UG_I32 : (a->y.dtype != UG_F32 && a->y.dtype != UG_F16))
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: reduce does not write %s here",
                                   ug_dtype_name(a->y.dtype));
    int kernel = OCL_K_REDUCE + (a->x.dtype == UG_F16);
    size_t tx, ty;
    reduce_shape(dev->kernel_wg[kernel], a->len, a->inner, &tx, &ty);

    /* Split len when the output alone gives too few work-groups to fill the
     * device and each split still has a few dozen terms per item; the
     * partials ([outer, splits, inner]) must fit the scratch. */
    int64_t groups = (a->inner + (int64_t)tx - 1) / (int64_t)tx * a->outer;
    int64_t splits = 1;
    if (groups < (int64_t)dev->target_groups && a->len >= (int64_t)ty * 64) {
        splits = ((int64_t)dev->target_groups + groups - 1) / groups;
        int64_t by_len = a->len / ((int64_t)ty * 32);
        if (splits > by_len)
            splits = by_len;
        int64_t by_scratch = (int64_t)dev->scratch_elems / (a->outer * a->inner);
        if (splits > by_scratch)
            splits = by_scratch;
        if (splits < 2)
            splits = 1;
    }

    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_int ydt = a->y.dtype == UG_F16 ? 1 : 0, op = a->op;
    cl_float count = (cl_float)a->len;
    /* Both passes under one lock: the scratch belongs to this reduction
     * until its second pass is queued. */
    pthread_mutex_lock(&dev->launch_lock);
    ug_status st = reduce_pass(dev, kernel, y, yoff, ydt, x, xoff, a->outer, a->len, a->inner,
                               splits, op, 0, count);
    if (st == UG_OK && splits > 1)
        st = reduce_pass(dev, OCL_K_REDUCE, y, yoff, ydt, dev->scratch_v, 0, a->outer, splits,
                         a->inner, 1, op, 1, count);
    pthread_mutex_unlock(&dev->launch_lock);
    return st;
}

/* One work-group per row: 32 items for short rows, else the kernel's
 * limit (two local sizes only, for POCL's per-size compiles). */
static ug_status launch_rows(ug_bdev *dev, ocl_kernel_id kernel, int64_t rows, int64_t cols,
                             const ocl_arg *args, cl_uint nargs)
{
    size_t local = dev->kernel_wg[kernel];
    if (cols <= 32 && local > 32)
        local = 32;
    size_t global = (size_t)rows * local;
    return ocl_launch(dev, kernel, 1, &global, &local, args, nargs);
}

ug_status ocl_softmax(ug_bdev *dev, const ug_softmax_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    if ((a->x.dtype != UG_F32 && a->x.dtype != UG_F16) || a->y.dtype != a->x.dtype)
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: softmax does not take %s -> %s",
                                   ug_dtype_name(a->x.dtype), ug_dtype_name(a->y.dtype));
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_long cols = a->cols;
    cl_int log_mode = a->log;
    ocl_arg args[] = {OCL_ARG(y), OCL_ARG(yoff), OCL_ARG(x), OCL_ARG(xoff), OCL_ARG(cols),
                      OCL_ARG(log_mode)};
    return launch_rows(dev, (ocl_kernel_id)(OCL_K_SOFTMAX + (a->x.dtype == UG_F16)), a->rows,
                       a->cols, args, 6);
}

ug_status ocl_cross_entropy(ug_bdev *dev, const ug_xent_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    if (a->logits.dtype != UG_F32 || a->labels.dtype != UG_I32)
        return ocl_host->set_error(UG_ERR_DTYPE,
                                   "OpenCL: cross-entropy takes f32 logits and i32 labels");
    cl_mem x = (cl_mem)a->logits.mem, lab = (cl_mem)a->labels.mem;
    cl_ulong xoff = (cl_ulong)a->logits.offset, laboff = (cl_ulong)a->labels.offset;
    cl_long cols = a->cols;
    cl_float sm = a->smoothing;
    if (!a->grad.mem) {
        cl_mem loss = (cl_mem)a->loss.mem;
        cl_ulong loff = (cl_ulong)a->loss.offset;
        ocl_arg args[] = {OCL_ARG(loss), OCL_ARG(loff),   OCL_ARG(x),    OCL_ARG(xoff),
                          OCL_ARG(lab),  OCL_ARG(laboff), OCL_ARG(cols), OCL_ARG(sm)};
        return launch_rows(dev, OCL_K_XENT_FWD, a->rows, a->cols, args, 8);
    }
    if (!a->dloss.mem)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                   "OpenCL: cross-entropy backward needs dloss");
    cl_mem grad = (cl_mem)a->grad.mem, dloss = (cl_mem)a->dloss.mem;
    cl_ulong goff = (cl_ulong)a->grad.offset, doff = (cl_ulong)a->dloss.offset;
    cl_float scale = a->scale;
    ocl_arg args[] = {OCL_ARG(grad), OCL_ARG(goff),   OCL_ARG(x),    OCL_ARG(xoff),
                      OCL_ARG(lab),  OCL_ARG(laboff), OCL_ARG(cols), OCL_ARG(sm),
                      OCL_ARG(scale), OCL_ARG(dloss), OCL_ARG(doff)};
    return launch_rows(dev, OCL_K_XENT_BWD, a->rows, a->cols, args, 11);
}

ug_status ocl_layernorm(ug_bdev *dev, const ug_layernorm_args *a)
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
        cl_int flags = (a->gamma.mem ? 1 : 0) | (a->beta.mem ? 2 : 0) | (a->mean.mem ? 4 : 0) |
                       (a->rstd.mem ? 8 : 0);
        ocl_arg args[] = {OCL_ARG(y),    OCL_ARG(yoff),  OCL_ARG(x),     OCL_ARG(xoff),
                          OCL_ARG(gamma), OCL_ARG(gmoff), OCL_ARG(beta), OCL_ARG(btoff),
                          OCL_ARG(mean), OCL_ARG(moff),  OCL_ARG(rstd),  OCL_ARG(roff),
                          OCL_ARG(cols), OCL_ARG(eps),   OCL_ARG(flags)};
        return launch_rows(dev, OCL_K_LAYERNORM_FWD, a->rows, a->cols, args, 15);
    }
    if (!a->dy.mem || !a->mean.mem || !a->rstd.mem)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                   "OpenCL: layernorm backward needs dy, mean and rstd");
    cl_mem dx = (cl_mem)a->dx.mem, dy = (cl_mem)a->dy.mem;
    cl_ulong dxoff = (cl_ulong)a->dx.offset, dyoff = (cl_ulong)a->dy.offset;
    cl_int flags = a->gamma.mem ? 1 : 0;
    ocl_arg args[] = {OCL_ARG(dx),   OCL_ARG(dxoff), OCL_ARG(dy),    OCL_ARG(dyoff),
                      OCL_ARG(x),    OCL_ARG(xoff),  OCL_ARG(mean),  OCL_ARG(moff),
                      OCL_ARG(rstd), OCL_ARG(roff),  OCL_ARG(gamma), OCL_ARG(gmoff),
                      OCL_ARG(cols), OCL_ARG(flags)};
    return launch_rows(dev, OCL_K_LAYERNORM_BWD, a->rows, a->cols, args, 14);
}
