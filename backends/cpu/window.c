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
    const int32_t *index_in;
    int32_t *index_out;
} pool_job;

enum { CACHED_TAPS = 64 };

/* The valid output columns of the taps kx < CACHED_TAPS, worked out once per
 * task (each needs divisions that would cost more than the pooling). */
typedef struct tap_ranges {
    int64_t lo[CACHED_TAPS], hi[CACHED_TAPS];
} tap_ranges;

static void tap_ranges_init(tap_ranges *r, const ug_window2d *w)
{
    for (int kx = 0; kx < w->kw && kx < CACHED_TAPS; kx++)
        valid_range(w->w, w->ow, w->sw, (int64_t)kx - w->pw, &r->lo[kx], &r->hi[kx]);
}

/* Takes v (at pixel i) when it beats *best: greater, or NaN over a number
 * (not below or equal, and best not NaN).
 * Selected by masks, not branches: the maxima fall at random, so a branch
 * (what gcc makes of ?: here) mispredicts, and masks vectorise. */
static inline void take_max(float v, int32_t i, float *best, int32_t *at)
{
    const float b = *best;
    const int32_t take = -(int32_t)(!(v <= b) & (b == b));
    int32_t vbits, bbits;
    memcpy(&vbits, &v, sizeof v);
    memcpy(&bbits, &b, sizeof b);
    bbits = (vbits & take) | (bbits & ~take);
    memcpy(best, &bbits, sizeof bbits);
    *at = (i & take) | (*at & ~take);
}

/* best/at over ox in [lo, hi) against the pixels row[ox * stride], pixel
 * index first + ox * stride. Inlined with a constant stride, it vectorises. */
static inline void max_pool_taps(const float *row, int64_t stride, int32_t first, int64_t lo,
                                 int64_t hi, float *restrict best, int32_t *restrict at)
{
    for (int64_t ox = lo; ox < hi; ox++)
        take_max(row[ox * stride], first + (int32_t)(ox * stride), &best[ox], &at[ox]);
}

/* One output row of the common 2x2, stride 2, unpadded max pooling: the
 * four taps of each output in one loop (a loop per tap is too short to pay
 * for itself). */
static void max_pool_row_2x2(const float *img, int64_t width, int64_t oy, int64_t ow,
                             float *restrict best, int32_t *restrict at)
{
    const int32_t top = (int32_t)(2 * oy * width), below = top + (int32_t)width;
    const float *r0 = img + top, *r1 = r0 + width;
    for (int64_t ox = 0; ox < ow; ox++) {
        const int32_t x = (int32_t)(2 * ox);
        float b = r0[x];
        int32_t i = top + x;
        take_max(r0[x + 1], top + x + 1, &b, &i);
        take_max(r1[x], below + x, &b, &i);
        take_max(r1[x + 1], below + x + 1, &b, &i);
        best[ox] = b;
        at[ox] = i;
    }
}

/* One output row of max pooling: each window row and tap adds its column
 * range in a loop over ox with no per-element clipping, in the window's
 * row-major order, so the first maximum stays (NaN wins). */
static void max_pool_row(const float *img, const ug_window2d *w, const tap_ranges *ranges,
                         int64_t oy, float *best, int32_t *at)
{
    const int64_t ys = oy * w->sh - w->ph, stride = w->sw;
    const int64_t y0 = ys < 0 ? 0 : ys, y1 = ys + w->kh < w->h ? ys + w->kh : w->h;
    for (int64_t ox = 0; ox < w->ow; ox++) { /* the window's first pixel, for all -inf */
        const int64_t xs = ox * stride - w->pw;
        best[ox] = -INFINITY;
        at[ox] = (int32_t)(y0 * w->w + (xs < 0 ? 0 : xs));
    }
    for (int64_t y = y0; y < y1; y++)
        for (int kx = 0; kx < w->kw; kx++) {
            const int64_t shift = (int64_t)kx - w->pw;
            int64_t lo, hi;
            if (kx < CACHED_TAPS)
                lo = ranges->lo[kx], hi = ranges->hi[kx];
            else
                valid_range(w->w, w->ow, w->sw, shift, &lo, &hi);
            const float *row = img + y * w->w + shift;
            const int32_t first = (int32_t)(y * w->w + shift);
            if (stride == 1)
                max_pool_taps(row, 1, first, lo, hi, best, at);
            else if (stride == 2)
                max_pool_taps(row, 2, first, lo, hi, best, at);
            else
                max_pool_taps(row, stride, first, lo, hi, best, at);
        }
}

/* Whole planes per task. The gradients scatter each output's share into
 * its window, in output order, which adds to each pixel in the order the
 * other backends' gathers do. */
static void pool_planes(void *ctx, int64_t begin, int64_t end)
{
    const pool_job *j = ctx;
    const ug_pool_args *a = j->args;
    const ug_window2d *w = &a->win;
    const int64_t hw = w->h * w->w, ohw = w->oh * w->ow;
    const bool two_by_two = w->kh == 2 && w->kw == 2 && w->sh == 2 && w->sw == 2 && w->ph == 0 &&
                            w->pw == 0;
    tap_ranges ranges;
    if (a->kind == UG_POOL_MAX && !a->backward)
        tap_ranges_init(&ranges, w);
#define ARGS w->n, w->c, w->h, w->w, w->oh, w->ow, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, 1, 1
    for (int64_t plane = begin; plane < end; plane++) {
        if (!a->backward) {
            const float *img = j->in + plane * hw;
            float *y = j->out + plane * ohw;
            for (int64_t oy = 0; oy < w->oh; oy++)
                if (a->kind == UG_POOL_MAX && two_by_two)
                    max_pool_row_2x2(img, w->w, oy, w->ow, y + oy * w->ow,
                                     j->index_out + plane * ohw + oy * w->ow);
                else if (a->kind == UG_POOL_MAX)
                    max_pool_row(img, w, &ranges, oy, y + oy * w->ow, j->index_out + plane * ohw + oy * w->ow);
                else
                    for (int64_t ox = 0; ox < w->ow; ox++)
                        y[oy * w->ow + ox] = ug_avgpool_window(img, oy, ox, ARGS);
            continue;
        }
        const float *dy = j->in + plane * ohw;
        float *dx = j->out + plane * hw;
        memset(dx, 0, (size_t)hw * sizeof *dx);
        if (a->kind == UG_POOL_MAX) {
            const int32_t *index = j->index_in + plane * ohw;
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
        j.index_in = args->kind == UG_POOL_MAX ? (const int32_t *)ug_cpu_ptr(args->index) : NULL;
    } else {
        j.in = (const float *)ug_cpu_ptr(args->x);
        j.out = (float *)ug_cpu_ptr(args->y);
        j.index_out = args->kind == UG_POOL_MAX ? (int32_t *)ug_cpu_ptr(args->index) : NULL;
    }
    int64_t per_plane = w->h * w->w + w->oh * w->ow * w->kh * w->kw;
    ug_cpu_parallel_for(dev->pool, w->n * w->c, UG_CPU_MIN_PARALLEL / per_plane + 1, pool_planes, &j);
    return UG_OK;
}
