/* Launching: the shared launch helper and the elementwise families (unary,
 * binary, random, optimizer). Each entry picks the kernel variant for the
 * dtypes, a contiguous fast path where the strides allow it, and rounds the
 * global size up to the work-group size (the kernels check bounds). An
 * explicit local size also keeps POCL from compiling one work-group
 * function per global size it sees. */
#include <string.h>

#include "backends/opencl/ocl_internal.h"

size_t ocl_round_up(size_t n, size_t multiple)
{
    return (n + multiple - 1) / multiple * multiple;
}

ug_status ocl_launch_locked(ug_bdev *dev, ocl_kernel_id kernel, cl_uint dims,
                            const size_t *global, const size_t *local, const ocl_arg *args,
                            cl_uint nargs)
{
    cl_kernel k = dev->kernels[kernel];
    for (cl_uint i = 0; i < nargs; ++i) {
        cl_int err = clSetKernelArg(k, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            char what[96];
            size_t len = 0;
            if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof what, what, &len) != CL_SUCCESS)
                strcpy(what, "?");
            return ocl_host->set_error(UG_ERR_BACKEND,
                                       "OpenCL: clSetKernelArg(%s, argument %u) failed: %d %s",
                                       what, (unsigned)i, (int)err, ocl_error_name(err));
        }
    }
    cl_int err = clEnqueueNDRangeKernel(dev->queue, k, dims, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char what[96];
        if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof what, what, NULL) != CL_SUCCESS)
            strcpy(what, "?");
        return ocl_host->set_error(ocl_status_of(err),
                                   "OpenCL: clEnqueueNDRangeKernel(%s, global %zu x %zu, local "
                                   "%zu x %zu) failed: %d %s",
                                   what, global[0], dims > 1 ? global[1] : (size_t)1,
                                   local ? local[0] : (size_t)0,
                                   (local && dims > 1) ? local[1] : (size_t)1, (int)err,
                                   ocl_error_name(err));
    }
    return UG_OK;
}

ug_status ocl_launch(ug_bdev *dev, ocl_kernel_id kernel, cl_uint dims, const size_t *global,
                     const size_t *local, const ocl_arg *args, cl_uint nargs)
{
    pthread_mutex_lock(&dev->launch_lock);
    ug_status st = ocl_launch_locked(dev, kernel, dims, global, local, args, nargs);
    pthread_mutex_unlock(&dev->launch_lock);
    return st;
}

/* A 1-D launch over n items with the kernel's work-group size. */
static ug_status launch_1d(ug_bdev *dev, ocl_kernel_id kernel, size_t n, const ocl_arg *args,
                           cl_uint nargs)
{
    size_t local = dev->kernel_wg[kernel];
    size_t global = ocl_round_up(n, local);
    return ocl_launch(dev, kernel, 1, &global, &local, args, nargs);
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d)
        n *= shape[d];
    return n;
}

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
typedef struct ocl_layout1 {
    cl_long shape[8];
    cl_long xs[8];
} ocl_layout1;

typedef struct ocl_layout2 {
    cl_long shape[8];
    cl_long as[8];
    cl_long bs[8];
} ocl_layout2;

static void fill8(cl_long *out, int ndim, const int64_t *values, int64_t pad)
{
    for (int d = 0; d < 8; ++d)
        out[d] = d < ndim ? (cl_long)values[d] : (cl_long)pad;
}

static ug_status bad_dtype(const char *what, ug_dtype a, ug_dtype b)
{
    return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: %s does not take dtypes %s -> %s", what,
                               ug_dtype_name(a), ug_dtype_name(b));
}

ug_status ocl_unary(ug_bdev *dev, const ug_unary_args *a)
{
    int64_t n = numel_of(a->ndim, a->shape);
    if (n <= 0)
        return UG_OK;
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_long cn = n;
    cl_int ndim = a->ndim;
    ocl_layout1 lay;
    fill8(lay.shape, a->ndim, a->shape, 1);
    fill8(lay.xs, a->ndim, a->x_strides, 0);
    bool contig = is_contiguous(a->ndim, a->shape, a->x_strides);

    if (a->op == UG_UNARY_COPY && a->x.dtype == a->y.dtype) {
        /* Same dtype: move raw bits (exact for i32 past 2^24 and NaN payloads). */
        size_t es = ug_dtype_size(a->x.dtype);
        if (contig)
            return ocl_copy(dev, a->y.mem, (size_t)yoff * es, a->x.mem, (size_t)xoff * es,
                            (size_t)n * es);
        int k = OCL_K_COPY_STRIDED + (es == 1 ? 0 : es == 2 ? 1 : 2);
        ocl_arg args[] = {OCL_ARG(y), OCL_ARG(yoff), OCL_ARG(x), OCL_ARG(xoff), OCL_ARG(cn),
                          OCL_ARG(ndim), OCL_ARG(lay)};
        return launch_1d(dev, (ocl_kernel_id)k, (size_t)n, args, 7);
    }

    ug_dtype xdt = a->x.dtype;
    if (a->op == UG_UNARY_FILL) {
        /* x is not read (and may be absent): bind y in its place. */
        x = y;
        xoff = yoff;
        xdt = a->y.dtype;
        contig = true;
    }
    if ((a->y.dtype != UG_F32 && a->y.dtype != UG_F16) || (int)xdt < 0 || (int)xdt > UG_U8)
        return bad_dtype("unary", xdt, a->y.dtype);
    int k = (contig ? OCL_K_UNARY_CONTIG : OCL_K_UNARY_STRIDED) + 2 * (int)xdt +
            (a->y.dtype == UG_F16 ? 1 : 0);
    cl_int op = a->op;
    cl_float alpha = a->alpha, beta = a->beta;
    ocl_arg args[] = {OCL_ARG(y),  OCL_ARG(yoff),  OCL_ARG(x),    OCL_ARG(xoff),
                      OCL_ARG(cn), OCL_ARG(op),    OCL_ARG(alpha), OCL_ARG(beta),
                      OCL_ARG(ndim), OCL_ARG(lay)};
    return launch_1d(dev, (ocl_kernel_id)k, (size_t)n, args, contig ? 8 : 10);
}

ug_status ocl_binary(ug_bdev *dev, const ug_binary_args *a)
{
    int64_t n = numel_of(a->ndim, a->shape);
    if (n <= 0)
        return UG_OK;
    if ((a->y.dtype != UG_F32 && a->y.dtype != UG_F16) || a->a.dtype != a->y.dtype ||
        a->b.dtype != a->y.dtype)
        return bad_dtype("binary", a->a.dtype, a->y.dtype);
    cl_mem y = (cl_mem)a->y.mem, am = (cl_mem)a->a.mem, bm = (cl_mem)a->b.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, aoff = (cl_ulong)a->a.offset,
             boff = (cl_ulong)a->b.offset;
    cl_long cn = n;
    cl_int op = a->op, post = a->post, ndim = a->ndim;
    cl_float alpha = a->alpha;
    ocl_layout2 lay;
    fill8(lay.shape, a->ndim, a->shape, 1);
    fill8(lay.as, a->ndim, a->a_strides, 0);
    fill8(lay.bs, a->ndim, a->b_strides, 0);
    bool contig = is_contiguous(a->ndim, a->shape, a->a_strides) &&
                  is_contiguous(a->ndim, a->shape, a->b_strides);
    int k = (contig ? OCL_K_BINARY_CONTIG : OCL_K_BINARY_STRIDED) + (a->y.dtype == UG_F16);
    ocl_arg args[] = {OCL_ARG(y),  OCL_ARG(yoff), OCL_ARG(am),    OCL_ARG(aoff),
                      OCL_ARG(bm), OCL_ARG(boff), OCL_ARG(cn),    OCL_ARG(op),
                      OCL_ARG(post), OCL_ARG(alpha), OCL_ARG(ndim), OCL_ARG(lay)};
    return launch_1d(dev, (ocl_kernel_id)k, (size_t)n, args, contig ? 10 : 12);
}

ug_status ocl_random(ug_bdev *dev, const ug_random_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    if (a->y.dtype != UG_F32 && a->y.dtype != UG_F16)
        return bad_dtype("random", a->y.dtype, a->y.dtype);
    cl_mem y = (cl_mem)a->y.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, offset = a->offset;
    cl_long n = a->n;
    cl_uint k0 = (cl_uint)(a->seed & 0xffffffffu), k1 = (cl_uint)(a->seed >> 32);
    cl_int normal = a->normal;
    cl_float p0 = a->p0, p1 = a->p1;
    ocl_arg args[] = {OCL_ARG(y),      OCL_ARG(yoff), OCL_ARG(n),  OCL_ARG(k0), OCL_ARG(k1),
                      OCL_ARG(offset), OCL_ARG(normal), OCL_ARG(p0), OCL_ARG(p1)};
    return launch_1d(dev, (ocl_kernel_id)(OCL_K_RANDOM + (a->y.dtype == UG_F16)), (size_t)a->n,
                     args, 9);
}

ug_status ocl_optimizer(ug_bdev *dev, const ug_optim_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    cl_mem p = (cl_mem)a->param.mem, g = (cl_mem)a->grad.mem;
    cl_ulong poff = (cl_ulong)a->param.offset, goff = (cl_ulong)a->grad.offset;
    /* Absent buffers are bound to the parameter: never read (flags say so). */
    cl_mem s = a->grad_scale.mem ? (cl_mem)a->grad_scale.mem : p;
    cl_ulong soff = a->grad_scale.mem ? (cl_ulong)a->grad_scale.offset : 0;
    cl_long n = a->n;
    cl_float lr = a->lr, wd = a->weight_decay;
    cl_int flags = a->grad_scale.mem ? 4 : 0;

    if (a->kind == UG_OPTIM_SGD) {
        cl_mem b = a->state0.mem ? (cl_mem)a->state0.mem : p;
        cl_ulong boff = a->state0.mem ? (cl_ulong)a->state0.offset : 0;
        cl_float momentum = a->momentum, dampening = a->dampening;
        if (momentum != 0.0f && !a->state0.mem)
            return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                       "OpenCL: SGD with momentum needs a momentum buffer");
        flags |= (a->nesterov ? 1 : 0) | (a->first_step ? 2 : 0);
        ocl_arg args[] = {OCL_ARG(p),  OCL_ARG(poff), OCL_ARG(g),  OCL_ARG(goff),
                          OCL_ARG(b),  OCL_ARG(boff), OCL_ARG(s),  OCL_ARG(soff),
                          OCL_ARG(n),  OCL_ARG(lr),   OCL_ARG(wd), OCL_ARG(momentum),
                          OCL_ARG(dampening), OCL_ARG(flags)};
        return launch_1d(dev, OCL_K_OPTIM_SGD, (size_t)n, args, 14);
    }
    if (a->kind != UG_OPTIM_ADAM && a->kind != UG_OPTIM_ADAMW)
        return ocl_host->set_error(UG_ERR_UNSUPPORTED, "OpenCL: unknown optimizer kind %d",
                                   (int)a->kind);
    if (!a->state0.mem || !a->state1.mem)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                   "OpenCL: Adam needs both moment buffers");
    cl_mem m = (cl_mem)a->state0.mem, v = (cl_mem)a->state1.mem;
    cl_ulong moff = (cl_ulong)a->state0.offset, voff = (cl_ulong)a->state1.offset;
    cl_float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
    cl_float bc1 = a->bias_correction1, bc2 = a->bias_correction2;
    flags |= a->kind == UG_OPTIM_ADAMW ? 1 : 0;
    ocl_arg args[] = {OCL_ARG(p),  OCL_ARG(poff), OCL_ARG(g),   OCL_ARG(goff), OCL_ARG(m),
                      OCL_ARG(moff), OCL_ARG(v),  OCL_ARG(voff), OCL_ARG(s),   OCL_ARG(soff),
                      OCL_ARG(n),  OCL_ARG(lr),   OCL_ARG(wd),   OCL_ARG(b1),  OCL_ARG(b2),
                      OCL_ARG(eps), OCL_ARG(bc1), OCL_ARG(bc2),  OCL_ARG(flags)};
    return launch_1d(dev, OCL_K_OPTIM_ADAM, (size_t)n, args, 19);
}
