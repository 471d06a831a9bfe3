/* im2col, col2im and 2-D pooling on the CPU backend. im2col and col2im,
 * the heavy ones of a convolution, walk whole rows (contiguous copies when
 * the stride is 1); pooling computes each element with the formulas of
 * kernels/common/window.h that every backend shares. */
#include <string.h>

#include "backends/cpu/internal.h"
#include "kernels/common/window.h"

/* The valid output columns [*lo, *hi) of a row whose tap sits at offset
 * `shift` (ix = ox * stride + shift inside [0, size)). */
static void valid_range(int64_t size, int64_t outs, int stride, int64_t shift, int64_t *lo,
                        int64_t *hi)
{
    int64_t a = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
    int64_t b = size - shift <= 0 ? 0 : (size - shift + stride - 1) / stride;
    *lo = a < outs ? a : outs;
    *hi = b < outs ? b : outs;
    if (*hi < *lo)
        *hi = *lo;
}

typedef struct im2col_job {
    const ug_window2d *win;
    float *image, *col;
} im2col_job;

/* Rows of col: (n * c + ci) * taps + tap. */
static void im2col_rows(void *ctx, int64_t begin, int64_t end)
{
    const im2col_job *j = ctx;
    const ug_window2d *w = j->win;
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    for (int64_t r = begin; r < end; r++) {
        const int64_t plane = r / taps;
        const int ky = (int)(r % taps / w->kw), kx = (int)(r % w->kw);
        const float *img = j->image + plane * w->h * w->w;
        float *out = j->col + r * ohw;
        const int64_t xshift = (int64_t)kx * w->dw - w->pw;
        int64_t lo, hi;
        valid_range(w->w, w->ow, w->sw, xshift, &lo, &hi);
        for (int64_t oy = 0; oy < w->oh; oy++) {
            float *o = out + oy * w->ow;
            const int64_t iy = oy * w->sh - w->ph + (int64_t)ky * w->dh;
            if (iy < 0 || iy >= w->h) {
                memset(o, 0, (size_t)w->ow * sizeof *o);
                continue;
            }
            const float *src = img + iy * w->w;
            for (int64_t ox = 0; ox < lo; ox++)
                o[ox] = 0.0f;
            if (w->sw == 1)
                memcpy(o + lo, src + lo + xshift, (size_t)(hi - lo) * sizeof *o);
            else
                for (int64_t ox = lo; ox < hi; ox++)
                    o[ox] = src[ox * w->sw + xshift];
            for (int64_t ox = hi; ox < w->ow; ox++)
                o[ox] = 0.0f;
        }
    }
}

/* Planes of the image: each sums its own taps' rows, so planes are
 * independent. */
static void col2im_planes(void *ctx, int64_t begin, int64_t end)
{
    const im2col_job *j = ctx;
    const ug_window2d *w = j->win;
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    for (int64_t plane = begin; plane < end; plane++) {
        float *img = j->image + plane * w->h * w->w;
        memset(img, 0, (size_t)(w->h * w->w) * sizeof *img);
        for (int64_t tap = 0; tap < taps; tap++) {
            const int ky = (int)(tap / w->kw), kx = (int)(tap % w->kw);
            const float *in = j->col + (plane * taps + tap) * ohw;
            const int64_t xshift = (int64_t)kx * w->dw - w->pw;
            int64_t lo, hi;
            valid_range(w->w, w->ow, w->sw, xshift, &lo, &hi);
            for (int64_t oy = 0; oy < w->oh; oy++) {
                const int64_t iy = oy * w->sh - w->ph + (int64_t)ky * w->dh;
                if (iy < 0 || iy >= w->h)
                    continue;
                float *dst = img + iy * w->w;
                const float *src = in + oy * w->ow;
                for (int64_t ox = lo; ox < hi; ox++)
                    dst[ox * w->sw + xshift] += src[ox];
            }
        }
    }
}

ug_status ug_cpu_im2col(ug_bdev *dev, const ug_im2col_args *args)
{
    const ug_window2d *w = &args->win;
    im2col_job j = {w, (float *)ug_cpu_ptr(args->image), (float *)ug_cpu_ptr(args->col)};
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    if (args->to_image)
        ug_cpu_parallel_for(dev->pool, w->n * w->c, UG_CPU_MIN_PARALLEL / (taps * ohw) + 1,
                            col2im_planes, &j);
    else
        ug_cpu_parallel_for(dev->pool, w->n * w->c * taps, UG_CPU_MIN_PARALLEL / ohw + 1,
                            im2col_rows, &j);
    return UG_OK;
}

typedef struct pool_job {
    const ug_pool_args *args;
    const float *in;
    float *out;
    const int *index_in;
    int *index_out;
} pool_job;

/* Whole planes per task, output by output: no index arithmetic per element
 * (a 64-bit division costs more than the pooling itself). The gradients
 * scatter each output's share into its window, in output order, which adds
 * to each pixel in the order the other backends' gathers do. */
static void pool_planes(void *ctx, int64_t begin, int64_t end)
{
    const pool_job *j = ctx;
    const ug_pool_args *a = j->args;
    const ug_window2d *w = &a->win;
    const int64_t hw = w->h * w->w, ohw = w->oh * w->ow;
#define ARGS w->n, w->c, w->h, w->w, w->oh, w->ow, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, 1, 1
    for (int64_t plane = begin; plane < end; plane++) {
        if (!a->backward) {
            const float *img = j->in + plane * hw;
            float *y = j->out + plane * ohw;
            int *index = a->kind == UG_POOL_MAX ? j->index_out + plane * ohw : NULL;
            for (int64_t oy = 0, i = 0; oy < w->oh; oy++)
                for (int64_t ox = 0; ox < w->ow; ox++, i++)
                    y[i] = index ? ug_maxpool_window(img, oy, ox, &index[i], ARGS)
                                 : ug_avgpool_window(img, oy, ox, ARGS);
            continue;
        }
        const float *dy = j->in + plane * ohw;
        float *dx = j->out + plane * hw;
        memset(dx, 0, (size_t)hw * sizeof *dx);
        if (a->kind == UG_POOL_MAX) {
            const int *index = j->index_in + plane * ohw;
            for (int64_t i = 0; i < ohw; i++)
                dx[index[i]] += dy[i];
            continue;
        }
        for (int64_t oy = 0, i = 0; oy < w->oh; oy++)
            for (int64_t ox = 0; ox < w->ow; ox++, i++) {
                const int64_t ys = oy * w->sh - w->ph, xs = ox * w->sw - w->pw;
                const int64_t y0 = ys < 0 ? 0 : ys, x0 = xs < 0 ? 0 : xs;
                const int64_t y1 = ys + w->kh < w->h ? ys + w->kh : w->h;
                const int64_t x1 = xs + w->kw < w->w ? xs + w->kw : w->w;
                const float share = dy[i] / ug_avgpool_count(oy, ox, ARGS);
                for (int64_t y = y0; y < y1; y++)
                    for (int64_t x = x0; x < x1; x++)
                        dx[y * w->w + x] += share;
            }
    }
#undef ARGS
}

ug_status ug_cpu_pool2d(ug_bdev *dev, const ug_pool_args *args)
{
    const ug_window2d *w = &args->win;
    pool_job j = {.args = args};
    if (args->backward) {
        j.in = (const float *)ug_cpu_ptr(args->dy);
        j.out = (float *)ug_cpu_ptr(args->dx);
        j.index_in = args->kind == UG_POOL_MAX ? (const int *)ug_cpu_ptr(args->index) : NULL;
    } else {
        j.in = (const float *)ug_cpu_ptr(args->x);
        j.out = (float *)ug_cpu_ptr(args->y);
        j.index_out = args->kind == UG_POOL_MAX ? (int *)ug_cpu_ptr(args->index) : NULL;
    }
    int64_t per_plane = w->h * w->w + w->oh * w->ow * w->kh * w->kw;
    ug_cpu_parallel_for(dev->pool, w->n * w->c, UG_CPU_MIN_PARALLEL / per_plane + 1, pool_planes, &j);
    return UG_OK;
}
