/* Launching the random family (Philox 4x32-10, see backend.h). */
#include "backends/opencl/internal.h"

ug_status ug_opencl_random(ug_bdev *dev, const ug_random_args *a)
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
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),      UG_OPENCL_ARG(yoff),     UG_OPENCL_ARG(n),
                            UG_OPENCL_ARG(k0),     UG_OPENCL_ARG(k1),       UG_OPENCL_ARG(offset),
                            UG_OPENCL_ARG(runs),   UG_OPENCL_ARG(runs_off), UG_OPENCL_ARG(has_runs),
                            UG_OPENCL_ARG(normal), UG_OPENCL_ARG(p0),       UG_OPENCL_ARG(p1)};
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_RANDOM, a->y.dtype, a->y.dtype, &k);
    if (st != UG_OK)
        return st;
    return ug_opencl_launch_1d(dev, k, (size_t)a->n, args, sizeof args / sizeof args[0]);
}
