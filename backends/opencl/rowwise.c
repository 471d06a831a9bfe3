/* Launching the row-wise family: softmax, cross-entropy and layernorm, one
 * work-group per row. */
#include "backends/opencl/internal.h"

/* One work-group per row: 32 items for short rows, else the kernel's
 * limit (few local sizes, for POCL's per-size compiles). On CPU devices a
 * short row is one item's: 32 items meeting at barriers for a row of 10
 * logits took 27 us for a batch of 64. */
static ug_status launch_rows(ug_bdev *dev, ocl_family family, ug_dtype dtype, int64_t rows,
                             int64_t cols, const ocl_arg *args, cl_uint nargs)
{
    const ocl_kernel *kernel;
    ug_status st = ocl_kernel_for(dev, family, dtype, dtype, &kernel);
    if (st != UG_OK)
        return st;
    size_t local = kernel->wg;
    if (cols <= 32 && local > 32)
        local = dev->is_cpu ? 1 : 32;
    size_t global = (size_t)rows * local;
    return ocl_launch(dev, kernel, 1, &global, &local, args, nargs);
}

ug_status ocl_softmax(ug_bdev *dev, const ug_softmax_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    if (a->y.dtype != a->x.dtype)
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: softmax does not take %s -> %s",
                                   ug_dtype_name(a->x.dtype), ug_dtype_name(a->y.dtype));
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_long cols = a->cols;
    cl_int log_mode = a->log;
    ocl_arg args[] = {OCL_ARG(y), OCL_ARG(yoff), OCL_ARG(x), OCL_ARG(xoff), OCL_ARG(cols),
                      OCL_ARG(log_mode)};
    return launch_rows(dev, OCL_SOFTMAX, a->x.dtype, a->rows,
                       a->cols, args, 6);
}

static ug_status cross_entropy_rows(ug_bdev *dev, const ug_xent_args *a)
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
        if (a->check.mem && a->check.dtype != UG_F32)
            return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: cross-entropy's check flag must be f32");
        OCL_CHECK(check, a->check, loss);
        ocl_arg args[] = {OCL_ARG(loss),  OCL_ARG(loff),      OCL_ARG(x),       OCL_ARG(xoff),
                          OCL_ARG(lab),   OCL_ARG(laboff),    OCL_ARG(cols),    OCL_ARG(sm),
                          OCL_ARG(check), OCL_ARG(check_off), OCL_ARG(check_on)};
        return launch_rows(dev, OCL_XENT_FWD, UG_F32, a->rows, a->cols, args, sizeof args / sizeof args[0]);
    }
    cl_mem grad = (cl_mem)a->grad.mem;
    cl_ulong goff = (cl_ulong)a->grad.offset;
    cl_float scale = a->scale;
    OCL_CHECK(dloss, a->dloss, grad); /* absent: 1 */
    ocl_arg args[] = {OCL_ARG(grad), OCL_ARG(goff),   OCL_ARG(x),    OCL_ARG(xoff),
                      OCL_ARG(lab),  OCL_ARG(laboff), OCL_ARG(cols), OCL_ARG(sm),
                      OCL_ARG(scale), OCL_ARG(dloss), OCL_ARG(dloss_off), OCL_ARG(dloss_on)};
    return launch_rows(dev, OCL_XENT_BWD, UG_F32, a->rows, a->cols, args, sizeof args / sizeof args[0]);
}

ug_status ocl_cross_entropy(ug_bdev *dev, const ug_xent_args *a)
{
    const ug_status st = cross_entropy_rows(dev, a);
    return st == UG_OK && a->mean.y.mem ? ocl_reduce(dev, &a->mean) : st;
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
        cl_int flags = (a->gamma.mem ? OCL_LN_GAMMA : 0) | (a->beta.mem ? OCL_LN_BETA : 0) |
                       (a->mean.mem ? OCL_LN_MEAN : 0) | (a->rstd.mem ? OCL_LN_RSTD : 0);
        ocl_arg args[] = {OCL_ARG(y),    OCL_ARG(yoff),  OCL_ARG(x),     OCL_ARG(xoff),
                          OCL_ARG(gamma), OCL_ARG(gmoff), OCL_ARG(beta), OCL_ARG(btoff),
                          OCL_ARG(mean), OCL_ARG(moff),  OCL_ARG(rstd),  OCL_ARG(roff),
                          OCL_ARG(cols), OCL_ARG(eps),   OCL_ARG(flags)};
        return launch_rows(dev, OCL_LAYERNORM_FWD, UG_F32, a->rows, a->cols, args, 15);
    }
    if (!a->dy.mem || !a->mean.mem || !a->rstd.mem)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                   "OpenCL: layernorm backward needs dy, mean and rstd");
    cl_mem dx = (cl_mem)a->dx.mem, dy = (cl_mem)a->dy.mem;
    cl_ulong dxoff = (cl_ulong)a->dx.offset, dyoff = (cl_ulong)a->dy.offset;
    cl_int flags = a->gamma.mem ? OCL_LN_GAMMA : 0;
    ocl_arg args[] = {OCL_ARG(dx),   OCL_ARG(dxoff), OCL_ARG(dy),    OCL_ARG(dyoff),
                      OCL_ARG(x),    OCL_ARG(xoff),  OCL_ARG(mean),  OCL_ARG(moff),
                      OCL_ARG(rstd), OCL_ARG(roff),  OCL_ARG(gamma), OCL_ARG(gmoff),
                      OCL_ARG(cols), OCL_ARG(flags)};
    return launch_rows(dev, OCL_LAYERNORM_BWD, UG_F32, a->rows, a->cols, args, 14);
}
