/* Launching the window families: im2col / col2im, pooling and upsampling,
 * one item per result element. */
#include "backends/opencl/internal.h"

/* The geometry arguments, in UG_WINDOW_PARAMS order. */
typedef struct ug_opencl_window {
    cl_long n, c, h, w, oh, ow;
    cl_int kh, kw, sh, sw, ph, pw, dh, dw;
} ug_opencl_window;

static ug_opencl_window window_of(const ug_window2d *w)
{
    return (ug_opencl_window){w->n,  w->c,  w->h,  w->w,  w->oh, w->ow, w->kh,
                              w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw};
}

enum { WINDOW_ARGS = 14 };

static void window_args(const ug_opencl_window *g, ug_opencl_arg *out)
{
    const ug_opencl_arg args[WINDOW_ARGS] = {UG_OPENCL_ARG(g->n),  UG_OPENCL_ARG(g->c),  UG_OPENCL_ARG(g->h),
                                             UG_OPENCL_ARG(g->w),  UG_OPENCL_ARG(g->oh), UG_OPENCL_ARG(g->ow),
                                             UG_OPENCL_ARG(g->kh), UG_OPENCL_ARG(g->kw), UG_OPENCL_ARG(g->sh),
                                             UG_OPENCL_ARG(g->sw), UG_OPENCL_ARG(g->ph), UG_OPENCL_ARG(g->pw),
                                             UG_OPENCL_ARG(g->dh), UG_OPENCL_ARG(g->dw)};
    for (int i = 0; i < WINDOW_ARGS; i++)
        out[i] = args[i];
}

/* Runs family over count items with the buffer arguments first. */
static ug_status launch_window(ug_bdev *dev, ug_opencl_family family, ug_dtype dtype, int64_t count,
                               const ug_opencl_window *g, const ug_opencl_arg *buffers, cl_uint nbuffers)
{
    if (count <= 0)
        return UG_OK;
    ug_opencl_arg args[8 + WINDOW_ARGS];
    for (cl_uint i = 0; i < nbuffers; i++)
        args[i] = buffers[i];
    window_args(g, args + nbuffers);
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, family, dtype, UG_F32, &k);
    return st != UG_OK ? st : ug_opencl_launch_1d(dev, k, (size_t)count, args, nbuffers + WINDOW_ARGS);
}

ug_status ug_opencl_im2col(ug_bdev *dev, const ug_im2col_args *a)
{
    const ug_window2d *w = &a->win;
    ug_opencl_window g = window_of(w);
    UG_OPENCL_VIEW(image, a->image);
    UG_OPENCL_VIEW(col, a->col);
    /* CPU devices (window.cl says why): col2im a row of the image per item,
     * im2col a plane of columns (image, channel, tap) per item; elsewhere an
     * element per item */
    if (a->to_image) {
        ug_opencl_arg buffers[] = {UG_OPENCL_ARG(image), UG_OPENCL_ARG(image_off), UG_OPENCL_ARG(col),
                                   UG_OPENCL_ARG(col_off)};
        return launch_window(dev, dev->is_cpu ? UG_OPENCL_COL2IM_ROWS : UG_OPENCL_COL2IM, a->image.dtype,
                             w->n * w->c * w->h * (dev->is_cpu ? 1 : w->w), &g, buffers, 4);
    }
    ug_opencl_arg buffers[] = {UG_OPENCL_ARG(col), UG_OPENCL_ARG(col_off), UG_OPENCL_ARG(image),
                               UG_OPENCL_ARG(image_off)};
    return launch_window(dev, dev->is_cpu ? UG_OPENCL_IM2COL_PLANES : UG_OPENCL_IM2COL, a->image.dtype,
                         w->n * w->c * w->kh * w->kw * (dev->is_cpu ? 1 : w->oh * w->ow), &g, buffers, 4);
}

ug_status ug_opencl_pool2d(ug_bdev *dev, const ug_pool2d_args *a)
{
    const ug_window2d *w = &a->win;
    ug_opencl_window g = window_of(w);
    const int64_t outputs = w->n * w->c * w->oh * w->ow, inputs = w->n * w->c * w->h * w->w;
    UG_OPENCL_VIEW(index, a->index);
    if (a->backward) {
        UG_OPENCL_VIEW(dx, a->dx);
        UG_OPENCL_VIEW(dy, a->dy);
        if (a->kind == UG_POOL_MAX) {
            ug_opencl_arg buffers[] = {UG_OPENCL_ARG(dx),    UG_OPENCL_ARG(dx_off),
                                       UG_OPENCL_ARG(dy),    UG_OPENCL_ARG(dy_off),
                                       UG_OPENCL_ARG(index), UG_OPENCL_ARG(index_off)};
            return launch_window(dev, UG_OPENCL_MAXPOOL_BWD, a->dx.dtype, inputs, &g, buffers, 6);
        }
        ug_opencl_arg buffers[] = {UG_OPENCL_ARG(dx), UG_OPENCL_ARG(dx_off), UG_OPENCL_ARG(dy),
                                   UG_OPENCL_ARG(dy_off)};
        return launch_window(dev, UG_OPENCL_AVGPOOL_BWD, a->dx.dtype, inputs, &g, buffers, 4);
    }
    UG_OPENCL_VIEW(y, a->y);
    UG_OPENCL_VIEW(x, a->x);
    if (a->kind == UG_POOL_MAX) {
        ug_opencl_arg buffers[] = {UG_OPENCL_ARG(y),         UG_OPENCL_ARG(y_off), UG_OPENCL_ARG(index),
                                   UG_OPENCL_ARG(index_off), UG_OPENCL_ARG(x),     UG_OPENCL_ARG(x_off)};
        return launch_window(dev, UG_OPENCL_MAXPOOL_FWD, a->x.dtype, outputs, &g, buffers, 6);
    }
    ug_opencl_arg buffers[] = {UG_OPENCL_ARG(y), UG_OPENCL_ARG(y_off), UG_OPENCL_ARG(x),
                               UG_OPENCL_ARG(x_off)};
    return launch_window(dev, UG_OPENCL_AVGPOOL_FWD, a->x.dtype, outputs, &g, buffers, 4);
}

ug_status ug_opencl_upsample2d(ug_bdev *dev, const ug_upsample2d_args *a)
{
    const ug_window2d *w = &a->win;
    ug_opencl_window g = window_of(w);
    if (a->backward) {
        UG_OPENCL_VIEW(dx, a->dx);
        UG_OPENCL_VIEW(dy, a->dy);
        ug_opencl_arg buffers[] = {UG_OPENCL_ARG(dx), UG_OPENCL_ARG(dx_off), UG_OPENCL_ARG(dy),
                                   UG_OPENCL_ARG(dy_off)};
        return launch_window(dev, UG_OPENCL_UPSAMPLE_BWD, a->dx.dtype, w->n * w->c * w->h * w->w, &g, buffers,
                             4);
    }
    UG_OPENCL_VIEW(y, a->y);
    UG_OPENCL_VIEW(x, a->x);
    ug_opencl_arg buffers[] = {UG_OPENCL_ARG(y), UG_OPENCL_ARG(y_off), UG_OPENCL_ARG(x),
                               UG_OPENCL_ARG(x_off)};
    return launch_window(dev, UG_OPENCL_UPSAMPLE_FWD, a->x.dtype, w->n * w->c * w->oh * w->ow, &g, buffers,
                         4);
}
