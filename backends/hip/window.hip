/* Launching the window families (kernels/hip/window.h): im2col / col2im,
 * pooling and upsampling, one thread per result element, a kernel per data
 * type. */
#include "backends/hip/launchers.h"
#include "kernels/hip/window.h"

/* dtype: the type of in and out. */
static ug_status launch_window(ug_bdev *dev, window_k *k, ug_dtype dtype, const char *name)
{
    if (k->count <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    const unsigned g = ug_hip_blocks(k->count, UG_HIP_BLOCK);
    return ug_with_type(dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        ug_window_kernel<T><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(*k);
        return ug_hip_launched(name);
    });
}

ug_status ug_hip_im2col(ug_bdev *dev, const ug_im2col_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    if (a->to_image) {
        k.kind = COL2IM;
        k.in = ug_hip_ptr(&a->col);
        k.out = ug_hip_ptr(&a->image);
        k.count = w.n * w.c * w.h * w.w;
        return launch_window(dev, &k, a->col.dtype, "col2im");
    }
    k.kind = IM2COL;
    k.in = ug_hip_ptr(&a->image);
    k.out = ug_hip_ptr(&a->col);
    k.count = w.n * w.c * w.kh * w.kw * w.oh * w.ow;
    return launch_window(dev, &k, a->image.dtype, "im2col");
}

ug_status ug_hip_pool2d(ug_bdev *dev, const ug_pool2d_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    const bool max = a->kind == UG_POOL_MAX;
    /* The data's type from the view read (x may be unset going backward). */
    const ug_kview *in;
    if (a->backward) {
        k.kind = max ? MAXPOOL_BWD : AVGPOOL_BWD;
        in = &a->dy;
        k.index_in = max ? (const int *)ug_hip_ptr(&a->index) : NULL;
        k.out = ug_hip_ptr(&a->dx);
        k.count = w.n * w.c * w.h * w.w;
    } else {
        k.kind = max ? MAXPOOL_FWD : AVGPOOL_FWD;
        in = &a->x;
        k.out = ug_hip_ptr(&a->y);
        k.index_out = max ? (int *)ug_hip_ptr(&a->index) : NULL;
        k.count = w.n * w.c * w.oh * w.ow;
    }
    k.in = ug_hip_ptr(in);
    return launch_window(dev, &k, in->dtype, max ? "max pool" : "average pool");
}

ug_status ug_hip_upsample2d(ug_bdev *dev, const ug_upsample2d_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    const ug_kview *in = a->backward ? &a->dy : &a->x;
    k.kind = a->backward ? UPSAMPLE_BWD : UPSAMPLE_FWD;
    k.in = ug_hip_ptr(in);
    k.out = ug_hip_ptr(a->backward ? &a->dx : &a->y);
    k.count = a->backward ? w.n * w.c * w.h * w.w : w.n * w.c * w.oh * w.ow;
    return launch_window(dev, &k, in->dtype, "upsample");
}
