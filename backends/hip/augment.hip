/* Launching the augment family (kernels/hip/augment.h): byte images into a
 * batch's values. */
#include "backends/hip/launchers.h"
#include "kernels/hip/augment.h"

ug_status ug_hip_augment(ug_bdev *dev, const ug_augment_args *a)
{
    if (a->x.dtype != UG_U8 || a->table.dtype != UG_F32 || (a->place.mem && a->place.dtype != UG_I32))
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s augment: x u8, table f32 and place i32", UG_HIP_BACKEND);
    if (a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    augment_k k;
    k.y = ug_hip_ptr(&a->y);
    k.t = a->y.dtype;
    k.x = (const unsigned char *)ug_hip_ptr(&a->x);
    k.table = (const float *)ug_hip_ptr(&a->table);
    k.place = (const int *)ug_hip_ptr(&a->place);
    k.n = a->n;
    k.c = a->c;
    k.h = a->h;
    k.w = a->w;
    k.pad = a->pad;
    const int64_t count = a->n * a->c * a->h * a->w;
    ug_augment_kernel<<<ug_hip_blocks(count, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("augment");
}
