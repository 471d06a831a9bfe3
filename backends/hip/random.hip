/* Launching the random family (kernels/hip/random.h; Philox 4x32-10, see
 * backend.h). */
#include "backends/hip/launchers.h"
#include "kernels/hip/random.h"

ug_status ug_hip_random(ug_bdev *dev, const ug_random_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    random_k k;
    k.normal = a->normal;
    k.t = a->y.dtype;
    k.p0 = a->p0;
    k.p1 = a->p1;
    k.k0 = (uint32_t)a->seed;
    k.k1 = (uint32_t)(a->seed >> 32);
    k.offset = a->offset;
    k.runs = (const float *)ug_hip_ptr(&a->runs);
    k.y = ug_hip_ptr(&a->y);
    k.n = a->n;
    ug_random_kernel<<<ug_hip_blocks(a->n, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("random");
}
