/* Launching the augment family: byte images into a batch's values. */
#include "backends/opencl/internal.h"

ug_status ug_opencl_augment(ug_bdev *dev, const ug_augment_args *a)
{
    if (a->x.dtype != UG_U8 || a->table.dtype != UG_F32 || (a->place.mem && a->place.dtype != UG_I32))
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL augment: x u8, table f32 and place i32");
    if (a->n <= 0)
        return UG_OK;
    UG_OPENCL_VIEW(y, a->y);
    UG_OPENCL_VIEW(x, a->x);
    UG_OPENCL_VIEW(table, a->table);
    /* Without places the table is bound in their stead: never read. */
    cl_mem place = a->place.mem ? (cl_mem)a->place.mem : table;
    cl_ulong place_off = a->place.mem ? (cl_ulong)a->place.offset : 0;
    cl_int has_place = a->place.mem != NULL, pad = a->pad;
    cl_long n = a->n, c = a->c, h = a->h, w = a->w;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(y_off),     UG_OPENCL_ARG(x),
                            UG_OPENCL_ARG(x_off), UG_OPENCL_ARG(table),     UG_OPENCL_ARG(table_off),
                            UG_OPENCL_ARG(place), UG_OPENCL_ARG(place_off), UG_OPENCL_ARG(has_place),
                            UG_OPENCL_ARG(n),     UG_OPENCL_ARG(c),         UG_OPENCL_ARG(h),
                            UG_OPENCL_ARG(w),     UG_OPENCL_ARG(pad)};
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_AUGMENT, a->y.dtype, a->y.dtype, &k);
    return st != UG_OK
               ? st
               : ug_opencl_launch_1d(dev, k, (size_t)(n * c * h * w), args, sizeof args / sizeof args[0]);
}
