/* The launch helper every OpenCL family uses: sets a kernel's arguments
 * and enqueues it under the device's launch lock. */
#include <string.h>

#include "backends/opencl/internal.h"

size_t ug_opencl_round_up(size_t n, size_t multiple)
{
    return (n + multiple - 1) / multiple * multiple;
}

ug_status ug_opencl_launch_locked(ug_bdev *dev, const ug_opencl_kernel *kernel, cl_uint dims,
                                  const size_t *global, const size_t *local, const ug_opencl_arg *args,
                                  cl_uint nargs)
{
    ug_opencl_drain_at_exit();
    cl_kernel k = kernel->kernel;
    for (cl_uint i = 0; i < nargs; ++i) {
        cl_int err = clSetKernelArg(k, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            char what[96];
            size_t len = 0;
            if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof what, what, &len) != CL_SUCCESS)
                strcpy(what, "?");
            return ug_opencl_host->set_error(UG_ERR_BACKEND,
                                             "OpenCL: clSetKernelArg(%s, argument %u) failed: %d %s", what,
                                             (unsigned)i, (int)err, ug_opencl_error_name(err));
        }
    }
    cl_int err =
        clEnqueueNDRangeKernel(ug_opencl_current(dev)->queue, k, dims, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        char what[96];
        if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof what, what, NULL) != CL_SUCCESS)
            strcpy(what, "?");
        return ug_opencl_host->set_error(
            ug_opencl_status_of(err),
            "OpenCL: clEnqueueNDRangeKernel(%s, global %zu x %zu, local "
            "%zu x %zu) failed: %d %s",
            what, global[0], dims > 1 ? global[1] : (size_t)1, local ? local[0] : (size_t)0,
            (local && dims > 1) ? local[1] : (size_t)1, (int)err, ug_opencl_error_name(err));
    }
    return UG_OK;
}

ug_status ug_opencl_launch(ug_bdev *dev, const ug_opencl_kernel *kernel, cl_uint dims, const size_t *global,
                           const size_t *local, const ug_opencl_arg *args, cl_uint nargs)
{
    pthread_mutex_lock(&dev->launch_lock);
    ug_status st = ug_opencl_launch_locked(dev, kernel, dims, global, local, args, nargs);
    pthread_mutex_unlock(&dev->launch_lock);
    return st;
}

ug_status ug_opencl_launch_1d(ug_bdev *dev, const ug_opencl_kernel *kernel, size_t n,
                              const ug_opencl_arg *args, cl_uint nargs)
{
    size_t local = kernel->wg;
    size_t global = ug_opencl_round_up(n, local);
    return ug_opencl_launch(dev, kernel, 1, &global, &local, args, nargs);
}
