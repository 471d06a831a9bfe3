/* Launching the random family (Philox 4x32-10, see backend.h). */
#include "backends/opencl/internal.h"

ug_status ocl_random(ug_bdev *dev, const ug_random_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    cl_mem y = (cl_mem)a->y.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, offset = a->offset;
    cl_long n = a->n;
    cl_uint k0 = (cl_uint)(a->seed & 0xffffffffu), k1 = (cl_uint)(a->seed >> 32);
    cl_int normal = a->normal;
    cl_float p0 = a->p0, p1 = a->p1;
    /* Without a run count y is bound in its place: never read. */
    cl_mem runs = a->runs.mem ? (cl_mem)a->runs.mem : y;
    cl_ulong runs_off = a->runs.mem ? (cl_ulong)a->runs.offset : 0;
    cl_int has_runs = a->runs.mem != NULL;
    ocl_arg args[] = {OCL_ARG(y),        OCL_ARG(yoff),     OCL_ARG(n),      OCL_ARG(k0),
                      OCL_ARG(k1),       OCL_ARG(offset),   OCL_ARG(runs),   OCL_ARG(runs_off),
                      OCL_ARG(has_runs), OCL_ARG(normal),   OCL_ARG(p0),     OCL_ARG(p1)};
    const ocl_kernel *k;
    ug_status st = ocl_kernel_for(dev, OCL_RANDOM, a->y.dtype, a->y.dtype, &k);
    if (st != UG_OK)
        return st;
    return ocl_launch_1d(dev, k, (size_t)a->n, args, sizeof args / sizeof args[0]);
}
