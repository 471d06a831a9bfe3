/* Launching the window families: im2col / col2im, pooling and upsampling,
 * one item per result element. */
#include "backends/opencl/internal.h"

/* The geometry arguments, in UG_WINDOW_PARAMS order. */
typedef struct ocl_window {
    cl_long n, c, h, w, oh, ow;
    cl_int kh, kw, sh, sw, ph, pw, dh, dw;
} ocl_window;

static ocl_window window_of(const ug_window2d *w)
{
    return (ocl_window){w->n, w->c, w->h, w->w, w->oh, w->ow, w->kh, w->kw,
                        w->sh, w->sw, w->ph, w->pw, w->dh, w->dw};
}

enum { WINDOW_ARGS = 14 };

static void window_args(const ocl_window *g, ocl_arg *out)
{
    const ocl_arg args[WINDOW_ARGS] = {OCL_ARG(g->n),  OCL_ARG(g->c),  OCL_ARG(g->h),  OCL_ARG(g->w),
                                       OCL_ARG(g->oh), OCL_ARG(g->ow), OCL_ARG(g->kh), OCL_ARG(g->kw),
                                       OCL_ARG(g->sh), OCL_ARG(g->sw), OCL_ARG(g->ph), OCL_ARG(g->pw),
                                       OCL_ARG(g->dh), OCL_ARG(g->dw)};
    for (int i = 0; i < WINDOW_ARGS; i++)
        out[i] = args[i];
}

/* Runs family over count items with the buffer arguments first. */
static ug_status launch_window(ug_bdev *dev, ocl_family family, ug_dtype dtype, int64_t count,
                               const ocl_window *g, const ocl_arg *buffers, cl_uint nbuffers)
{
    if (count <= 0)
        return UG_OK;
    ocl_arg args[8 + WINDOW_ARGS];
    for (cl_uint i = 0; i < nbuffers; i++)
        args[i] = buffers[i];
    window_args(g, args + nbuffers);
    const ocl_kernel *k;
    ug_status st = ocl_kernel_for(dev, family, dtype, UG_F32, &k);
    return st != UG_OK ? st : ocl_launch_1d(dev, k, (size_t)count, args, nbuffers + WINDOW_ARGS);
}

ug_status ocl_im2col(ug_bdev *dev, const ug_im2col_args *a)
{
    const ug_window2d *w = &a->win;
    ocl_window g = window_of(w);
    OCL_VIEW(image, a->image);
    OCL_VIEW(col, a->col);
    if (a->to_image) {
        ocl_arg buffers[] = {OCL_ARG(image), OCL_ARG(image_off), OCL_ARG(col), OCL_ARG(col_off)};
        return launch_window(dev, OCL_COL2IM, a->image.dtype, w->n * w->c * w->h * w->w, &g, buffers, 4);
    }
    ocl_arg buffers[] = {OCL_ARG(col), OCL_ARG(col_off), OCL_ARG(image), OCL_ARG(image_off)};
    return launch_window(dev, OCL_IM2COL, a->image.dtype, w->n * w->c * w->kh * w->kw * w->oh * w->ow, &g,
                         buffers, 4);
}

ug_status ocl_pool2d(ug_bdev *dev, const ug_pool2d_args *a)
{
    const ug_window2d *w = &a->win;
    ocl_window g = window_of(w);
    const int64_t outputs = w->n * w->c * w->oh * w->ow, inputs = w->n * w->c * w->h * w->w;
    OCL_VIEW(index, a->index);
    if (a->backward) {
        OCL_VIEW(dx, a->dx);
        OCL_VIEW(dy, a->dy);
        if (a->kind == UG_POOL_MAX) {
            ocl_arg buffers[] = {OCL_ARG(dx), OCL_ARG(dx_off), OCL_ARG(dy), OCL_ARG(dy_off),
                                 OCL_ARG(index), OCL_ARG(index_off)};
            return launch_window(dev, OCL_MAXPOOL_BWD, a->dx.dtype, inputs, &g, buffers, 6);
        }
        ocl_arg buffers[] = {OCL_ARG(dx), OCL_ARG(dx_off), OCL_ARG(dy), OCL_ARG(dy_off)};
        return launch_window(dev, OCL_AVGPOOL_BWD, a->dx.dtype, inputs, &g, buffers, 4);
    }
    OCL_VIEW(y, a->y);
    OCL_VIEW(x, a->x);
    if (a->kind == UG_POOL_MAX) {
        ocl_arg buffers[] = {OCL_ARG(y), OCL_ARG(y_off), OCL_ARG(index), OCL_ARG(index_off),
                             OCL_ARG(x), OCL_ARG(x_off)};
        return launch_window(dev, OCL_MAXPOOL_FWD, a->x.dtype, outputs, &g, buffers, 6);
    }
    ocl_arg buffers[] = {OCL_ARG(y), OCL_ARG(y_off), OCL_ARG(x), OCL_ARG(x_off)};
    return launch_window(dev, OCL_AVGPOOL_FWD, a->x.dtype, outputs, &g, buffers, 4);
}

ug_status ocl_upsample2d(ug_bdev *dev, const ug_upsample2d_args *a)
{
    const ug_window2d *w = &a->win;
    ocl_window g = window_of(w);
    if (a->backward) {
        OCL_VIEW(dx, a->dx);
        OCL_VIEW(dy, a->dy);
        ocl_arg buffers[] = {OCL_ARG(dx), OCL_ARG(dx_off), OCL_ARG(dy), OCL_ARG(dy_off)};
        return launch_window(dev, OCL_UPSAMPLE_BWD, a->dx.dtype, w->n * w->c * w->h * w->w, &g,
                             buffers, 4);
    }
    OCL_VIEW(y, a->y);
    OCL_VIEW(x, a->x);
    ocl_arg buffers[] = {OCL_ARG(y), OCL_ARG(y_off), OCL_ARG(x), OCL_ARG(x_off)};
    return launch_window(dev, OCL_UPSAMPLE_FWD, a->x.dtype, w->n * w->c * w->oh * w->ow, &g,
                         buffers, 4);
}
