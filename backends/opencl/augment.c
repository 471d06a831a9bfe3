/* Launching the augment family: byte images into a batch's values. */
#include "backends/opencl/internal.h"

ug_status ocl_augment(ug_bdev *dev, const ug_augment_args *a)
{
    if (a->x.dtype != UG_U8 || a->table.dtype != UG_F32 || (a->place.mem && a->place.dtype != UG_I32))
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL augment: x u8, table f32 and place i32");
    if (a->n <= 0)
        return UG_OK;
    OCL_VIEW(y, a->y);
    OCL_VIEW(x, a->x);
    OCL_VIEW(table, a->table);
    /* Without places the table is bound in their stead: never read. */
    cl_mem place = a->place.mem ? (cl_mem)a->place.mem : table;
    cl_ulong place_off = a->place.mem ? (cl_ulong)a->place.offset : 0;
    cl_int has_place = a->place.mem != NULL, pad = a->pad;
    cl_long n = a->n, c = a->c, h = a->h, w = a->w;
    ocl_arg args[] = {OCL_ARG(y),     OCL_ARG(y_off),     OCL_ARG(x),         OCL_ARG(x_off),
                      OCL_ARG(table), OCL_ARG(table_off), OCL_ARG(place),     OCL_ARG(place_off),
                      OCL_ARG(has_place), OCL_ARG(n),     OCL_ARG(c),         OCL_ARG(h),
                      OCL_ARG(w),     OCL_ARG(pad)};
    const ocl_kernel *k;
    ug_status st = ocl_kernel_for(dev, OCL_AUGMENT, a->y.dtype, a->y.dtype, &k);
    return st != UG_OK ? st : ocl_launch_1d(dev, k, (size_t)(n * c * h * w), args, sizeof args / sizeof args[0]);
}
