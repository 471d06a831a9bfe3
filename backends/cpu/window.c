/* im2col, col2im, 2-D pooling and upsampling on the CPU backend. im2col
 * and col2im, the heavy ones of a convolution, walk whole rows (contiguous
 * copies when the stride is 1); pooling and upsampling compute each element
 * with the formulas of kernels/common/window.h that every backend shares. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/stage.h"
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

/* The valid output ranges of each tap along one axis, worked out once per
 * task for the first CACHED_TAPS taps (each needs divisions, which would
 * cost more than the copy or the pooling of a row). */
enum { CACHED_TAPS = 64 };

typedef struct tap_ranges {
    int64_t size, outs;
    int stride, pad, dilation;
    int64_t lo[CACHED_TAPS], hi[CACHED_TAPS];
} tap_ranges;

static void tap_range(const tap_ranges *r, int tap, int64_t *lo, int64_t *hi)
{
    if (tap < CACHED_TAPS) {
        *lo = r->lo[tap];
        *hi = r->hi[tap];
    } else {
        valid_range(r->size, r->outs, r->stride, (int64_t)tap * r->dilation - r->pad, lo, hi);
    }
}

static void tap_ranges_init(tap_ranges *r, int64_t size, int64_t outs, int stride, int pad,
                            int dilation, int taps)
{
    *r = (tap_ranges){size, outs, stride, pad, dilation, {0}, {0}};
    for (int t = 0; t < taps && t < CACHED_TAPS; t++)
        valid_range(size, outs, stride, (int64_t)t * dilation - pad, &r->lo[t], &r->hi[t]);
}

/* Rows (y) and columns (x) of a window's taps. */
static void window_ranges(const ug_window2d *w, tap_ranges *y, tap_ranges *x)
{
    tap_ranges_init(y, w->h, w->oh, w->sh, w->ph, w->dh, w->kh);
    tap_ranges_init(x, w->w, w->ow, w->sw, w->pw, w->dw, w->kw);
}

typedef struct im2col_job {
    const ug_window2d *win;
    float *image, *col;
} im2col_job;

static void zero(float *p, int64_t n)
{
    if (n > 0)
        memset(p, 0, (size_t)n * sizeof *p);
}

/* Rows of col: (n * c + ci) * taps + tap, each an oh x ow block of one
 * tap's pixels. With stride 1 and ow == w (a "same" convolution) the
 * block's inside rows follow each other in the image too, so they are one
 * copy, after which only the columns the tap moved across an edge are
 * zeroed; otherwise row by row. */
UG_CPU_WIDE
static void im2col_rows(void *ctx, int64_t begin, int64_t end)
{
    const im2col_job *j = ctx;
    const ug_window2d *w = j->win;
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    const bool runs = w->sh == 1 && w->sw == 1 && w->ow == w->w;
    tap_ranges rows, cols;
    window_ranges(w, &rows, &cols);
    int64_t plane = begin / taps; /* then counted, not divided, row by row */
    int ky = (int)(begin % taps / w->kw), kx = (int)(begin % w->kw);
    for (int64_t r = begin; r < end; r++) {
        const float *img = j->image + plane * w->h * w->w;
        float *out = j->col + r * ohw;
        const int64_t xshift = (int64_t)kx * w->dw - w->pw, yshift = (int64_t)ky * w->dh - w->ph;
        int64_t lo, hi, y0, y1;
        tap_range(&cols, kx, &lo, &hi);
        tap_range(&rows, ky, &y0, &y1);
        zero(out, y0 * w->ow);
        zero(out + y1 * w->ow, (w->oh - y1) * w->ow);
        if (y1 <= y0 || hi <= lo) {
            zero(out + y0 * w->ow, (y1 - y0) * w->ow);
        } else if (runs) {
            memcpy(out + y0 * w->ow + lo, img + (y0 + yshift) * w->w + lo + xshift,
                   (size_t)((y1 - y0 - 1) * w->ow + hi - lo) * sizeof *out);
            for (int64_t oy = y0; oy < y1; oy++) { /* a pixel or two a row */
                float *o = out + oy * w->ow;
                for (int64_t ox = 0; ox < lo; ox++)
                    o[ox] = 0.0f;
                for (int64_t ox = hi; ox < w->ow; ox++)
                    o[ox] = 0.0f;
            }
        } else {
            for (int64_t oy = y0; oy < y1; oy++) {
                float *o = out + oy * w->ow;
                const float *src = img + (oy * w->sh + yshift) * w->w + xshift;
                zero(o, lo);
                if (w->sw == 1)
                    memcpy(o + lo, src + lo, (size_t)(hi - lo) * sizeof *o);
                else
                    for (int64_t ox = lo; ox < hi; ox++)
                        o[ox] = src[ox * w->sw];
                zero(o + hi, w->ow - hi);
            }
        }
        if (++kx == w->kw) {
            kx = 0;
            if (++ky == w->kh) {
                ky = 0;
                plane++;
            }
        }
    }
}

/* dst[ox * stride] += src[ox] over [lo, hi); inlined with a constant
 * stride, it vectorises. */
static inline void add_taps(float *restrict dst, const float *restrict src, int64_t stride,
                            int64_t lo, int64_t hi)
{
    for (int64_t ox = lo; ox < hi; ox++)
        dst[ox * stride] += src[ox];
}

/* Planes of the image: each sums its own taps' rows, so planes are
 * independent. */
UG_CPU_WIDE
static void col2im_planes(void *ctx, int64_t begin, int64_t end)
{
    const im2col_job *j = ctx;
    const ug_window2d *w = j->win;
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    tap_ranges rows, cols;
    window_ranges(w, &rows, &cols);
    for (int64_t plane = begin; plane < end; plane++) {
        float *img = j->image + plane * w->h * w->w;
        zero(img, w->h * w->w);
        for (int64_t tap = 0; tap < taps; tap++) {
            const int ky = (int)(tap / w->kw), kx = (int)(tap % w->kw);
            const float *in = j->col + (plane * taps + tap) * ohw;
            const int64_t xshift = (int64_t)kx * w->dw - w->pw, yshift = (int64_t)ky * w->dh - w->ph;
            int64_t lo, hi, y0, y1;
            tap_range(&cols, kx, &lo, &hi);
            tap_range(&rows, ky, &y0, &y1);
            for (int64_t oy = y0; oy < y1; oy++) {
                float *dst = img + (oy * w->sh + yshift) * w->w + xshift;
                if (w->sw == 1)
                    add_taps(dst, in + oy * w->ow, 1, lo, hi);
                else
                    add_taps(dst, in + oy * w->ow, w->sw, lo, hi);
            }
        }
    }
}

ug_status ug_cpu_im2col(ug_bdev *dev, const ug_im2col_args *in)
{
    ug_im2col_args staged = *in, *args = &staged;
    const ug_window2d *w = &args->win;
    const int64_t taps = (int64_t)w->kh * w->kw, ohw = w->oh * w->ow;
    ug_cpu_stage stage = {0};
    ug_cpu_stage_add(&stage, &staged.image, w->n * w->c * w->h * w->w, args->to_image);
    ug_cpu_stage_add(&stage, &staged.col, w->n * w->c * taps * ohw, !args->to_image);
    ug_status st = ug_cpu_stage_begin(&stage, args->to_image ? "col2im" : "im2col");
    if (st != UG_OK)
        return st;
    im2col_job j = {w, (float *)ug_cpu_ptr(args->image), (float *)ug_cpu_ptr(args->col)};
    if (args->to_image)
        ug_cpu_parallel_for(dev->workers, w->n * w->c, UG_CPU_MIN_PARALLEL / (taps * ohw) + 1,
                            col2im_planes, &j);
    else
        ug_cpu_parallel_for(dev->workers, w->n * w->c * taps, UG_CPU_MIN_PARALLEL / ohw + 1,
                            im2col_rows, &j);
    ug_cpu_stage_end(&stage);
    return UG_OK;
}

/* in and out: x and y forward, dy and dx backward. */
typedef struct pool_job {
    const ug_pool2d_args *args;
    ug_kview in, out;
    const int32_t *index_in;
    int32_t *index_out;
    bool failed; /* a task's f32 copies of half planes could not be allocated */
} pool_job;

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

/* The common 2x2, stride 2, unpadded max pooling of an image of even
 * width, over output rows [oy0, oy1): each pair of neighbours in a row
 * first (one loop over all the rows' pairs, long enough to vectorise where
 * a row of outputs is not), then each output the better of its two pairs.
 * The first maximum in the window's order wins, as tap by tap. */
enum { POOL_PAIRS = 2048 };

UG_CPU_WIDE
static void max_pool_rows_2x2(const float *img, int64_t width, int64_t oy0, int64_t oy1, float *restrict best,
                              int32_t *restrict at)
{
    float pair[POOL_PAIRS];
    int32_t from[POOL_PAIRS];
    const int64_t ow = width / 2, pairs = 2 * (oy1 - oy0) * ow;
    const float *rows = img + 2 * oy0 * width;
    const int32_t first = (int32_t)(2 * oy0 * width);
    for (int64_t p = 0; p < pairs; p++) {
        float b = rows[2 * p];
        int32_t i = first + (int32_t)(2 * p);
        take_max(rows[2 * p + 1], i + 1, &b, &i);
        pair[p] = b;
        from[p] = i;
    }
    for (int64_t oy = 0; oy < oy1 - oy0; oy++) {
        const float *top = pair + 2 * oy * ow, *below = top + ow;
        const int32_t *top_at = from + 2 * oy * ow, *below_at = top_at + ow;
        for (int64_t ox = 0; ox < ow; ox++) {
            float b = top[ox];
            int32_t i = top_at[ox];
            take_max(below[ox], below_at[ox], &b, &i);
            best[oy * ow + ox] = b;
            at[oy * ow + ox] = i;
        }
    }
}

/* One output row of max pooling: each window row and tap adds its column
 * range in a loop over ox with no per-element clipping, in the window's
 * row-major order, so the first maximum stays (NaN wins). */
UG_CPU_WIDE
static void max_pool_row(const float *img, const ug_window2d *w, const tap_ranges *cols,
                         int64_t oy, float *best, int32_t *at)
{
    const int64_t ys = oy * w->sh - w->ph, stride = w->sw;
    const int64_t y0 = ys < 0 ? 0 : ys, y1 = ys + w->kh < w->h ? ys + w->kh : w->h;
    for (int64_t ox = 0; ox < w->ow; ox++) { /* the window's first pixel, for all -inf */
        const int64_t xs = ox * stride - w->pw;
        best[ox] = -INFINITY;
        at[ox] = (int32_t)(y0 * w->w + (xs < 0 ? 0 : xs));
    }
    /* Only the taps that reach the image for some output: a kernel far
     * larger than the image (padded to fit) costs no more than the image. */
    const int64_t first_tap = w->pw - (w->ow - 1) * stride > 0 ? w->pw - (w->ow - 1) * stride : 0;
    const int64_t end_tap = (int64_t)w->kw < w->pw + w->w ? w->kw : w->pw + w->w;
    for (int64_t y = y0; y < y1; y++)
        for (int kx = (int)first_tap; kx < end_tap; kx++) {
            const int64_t shift = (int64_t)kx - w->pw;
            int64_t lo, hi;
            tap_range(cols, kx, &lo, &hi);
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

/* One plane, in and out as f32. The gradients scatter each output's share
 * into its window, in output order, which adds to each pixel in the order
 * the other backends' gathers do. */
static void pool_plane(const pool_job *j, int64_t plane, const float *in, float *out, const tap_ranges *cols)
{
    const ug_pool2d_args *a = j->args;
    const ug_window2d *w = &a->win;
    const int64_t hw = w->h * w->w, ohw = w->oh * w->ow;
    const bool max_2x2 = a->kind == UG_POOL_MAX && w->kh == 2 && w->kw == 2 && w->sh == 2 && w->sw == 2 &&
                         w->ph == 0 && w->pw == 0 && w->w % 2 == 0 && w->w <= POOL_PAIRS;
    const int64_t rows_at_once = max_2x2 ? POOL_PAIRS / w->w : 0; /* output rows per call */
#define ARGS w->n, w->c, w->h, w->w, w->oh, w->ow, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, 1, 1
    if (!a->backward) {
        for (int64_t oy = 0; max_2x2 && oy < w->oh; oy += rows_at_once) {
            const int64_t stop = oy + rows_at_once < w->oh ? oy + rows_at_once : w->oh;
            max_pool_rows_2x2(in, w->w, oy, stop, out + oy * w->ow, j->index_out + plane * ohw + oy * w->ow);
        }
        for (int64_t oy = 0; !max_2x2 && oy < w->oh; oy++)
            if (a->kind == UG_POOL_MAX)
                max_pool_row(in, w, cols, oy, out + oy * w->ow, j->index_out + plane * ohw + oy * w->ow);
            else
                for (int64_t ox = 0; ox < w->ow; ox++)
                    out[oy * w->ow + ox] = ug_avgpool_window(in, oy, ox, ARGS);
        return;
    }
    memset(out, 0, (size_t)hw * sizeof *out);
    if (a->kind == UG_POOL_MAX) {
        const int32_t *index = j->index_in + plane * ohw;
        for (int64_t i = 0; i < ohw; i++)
            out[index[i]] += in[i];
        return;
    }
    for (int64_t oy = 0, i = 0; oy < w->oh; oy++)
        for (int64_t ox = 0; ox < w->ow; ox++, i++) {
            const int64_t ys = oy * w->sh - w->ph, xs = ox * w->sw - w->pw;
            const int64_t y0 = ys < 0 ? 0 : ys, x0 = xs < 0 ? 0 : xs;
            const int64_t y1 = ys + w->kh < w->h ? ys + w->kh : w->h;
            const int64_t x1 = xs + w->kw < w->w ? xs + w->kw : w->w;
            const float share = in[i] / ug_avgpool_count(oy, ox, ARGS);
            for (int64_t y = y0; y < y1; y++)
                for (int64_t x = x0; x < x1; x++)
                    out[y * w->w + x] += share;
        }
#undef ARGS
}

/* The gradient of a max pooling whose windows do not overlap, in a half
 * dtype: each pixel takes at most one output's gradient, so the half bits
 * are copied, no conversion (-0 becomes +0, as 0 + -0 in f32). */
static void half_max_pool_grad(const pool_job *j, int64_t begin, int64_t end)
{
    const ug_window2d *w = &j->args->win;
    const int64_t hw = w->h * w->w, ohw = w->oh * w->ow;
    const uint16_t *dy = (const uint16_t *)(const void *)ug_cpu_ptr(j->in);
    uint16_t *dx = (uint16_t *)(void *)ug_cpu_ptr(j->out);
    for (int64_t plane = begin; plane < end; plane++) {
        const int32_t *index = j->index_in + plane * ohw;
        const uint16_t *g = dy + plane * ohw;
        uint16_t *d = dx + plane * hw;
        memset(d, 0, (size_t)hw * sizeof *d);
        for (int64_t i = 0; i < ohw; i++)
            d[index[i]] = g[i] == 0x8000u ? 0 : g[i];
    }
}

/* Whole planes per task, half ones converted by the task (stage.h's
 * pieces) while they are in its cache. */
static void pool_planes(void *ctx, int64_t begin, int64_t end)
{
    pool_job *j = ctx;
    const ug_pool2d_args *a = j->args;
    const ug_window2d *w = &a->win;
    const int64_t hw = w->h * w->w, ohw = w->oh * w->ow;
    if (a->backward && a->kind == UG_POOL_MAX && w->sh >= w->kh && w->sw >= w->kw && j->in.dtype != UG_F32 &&
        j->in.dtype == j->out.dtype) {
        half_max_pool_grad(j, begin, end);
        return;
    }
    const int64_t in_size = a->backward ? ohw : hw, out_size = a->backward ? hw : ohw;
    tap_ranges rows, cols;
    if (a->kind == UG_POOL_MAX && !a->backward)
        window_ranges(w, &rows, &cols);
    float *copies = NULL;
    if (j->in.dtype != UG_F32 || j->out.dtype != UG_F32) {
        copies = malloc((size_t)(in_size + out_size) * sizeof *copies);
        if (!copies) {
            __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
            return;
        }
    }
    for (int64_t plane = begin; plane < end; plane++) {
        float *out = ug_cpu_piece_at(j->out, plane * out_size, copies ? copies + in_size : NULL);
        pool_plane(j, plane, ug_cpu_piece_in(j->in, plane * in_size, in_size, copies), out, &cols);
        ug_cpu_piece_out(j->out, plane * out_size, out_size, out);
    }
    free(copies);
}

ug_status ug_cpu_pool2d(ug_bdev *dev, const ug_pool2d_args *args)
{
    const ug_window2d *w = &args->win;
    pool_job j = {.args = args, .in = args->backward ? args->dy : args->x, .out = args->backward ? args->dx : args->y};
    if (args->kind == UG_POOL_MAX) {
        if (args->backward)
            j.index_in = (const int32_t *)ug_cpu_ptr(args->index);
        else
            j.index_out = (int32_t *)ug_cpu_ptr(args->index);
    }
    /* The work per plane, counting only taps that can reach the image. */
    const int64_t rows = w->kh < w->h ? w->kh : w->h, cols = w->kw < w->w ? w->kw : w->w;
    int64_t per_plane = w->h * w->w + w->oh * w->ow * rows * cols;
    ug_cpu_parallel_for(dev->workers, w->n * w->c, UG_CPU_MIN_PARALLEL / per_plane + 1, pool_planes, &j);
    if (j.failed)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu pool2d: no host memory for the f32 copies of a %s "
                            "plane of %lldx%lld", ug_dtype_name(j.in.dtype), (long long)w->h, (long long)w->w);
    return UG_OK;
}

typedef struct upsample_job {
    const ug_upsample2d_args *args;
    const float *in;
    float *out;
} upsample_job;

UG_CPU_WIDE
static void upsample_range(void *ctx, int64_t begin, int64_t end)
{
    const upsample_job *j = ctx;
    const ug_window2d *w = &j->args->win;
#define ARGS w->n, w->c, w->h, w->w, w->oh, w->ow, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw, w->dh, w->dw
    if (j->args->backward)
        for (int64_t i = begin; i < end; i++)
            j->out[i] = ug_upsample_grad_at(j->in, i, ARGS);
    else
        for (int64_t i = begin; i < end; i++)
            j->out[i] = ug_upsample_at(j->in, i, ARGS);
#undef ARGS
}

ug_status ug_cpu_upsample2d(ug_bdev *dev, const ug_upsample2d_args *in)
{
    ug_upsample2d_args staged = *in, *args = &staged;
    const ug_window2d *w = &args->win;
    const int64_t image = w->n * w->c * w->h * w->w, upsampled = w->n * w->c * w->oh * w->ow;
    ug_cpu_stage stage = {0};
    if (args->backward) {
        ug_cpu_stage_add(&stage, &staged.dy, upsampled, false);
        ug_cpu_stage_add(&stage, &staged.dx, image, true);
    } else {
        ug_cpu_stage_add(&stage, &staged.x, image, false);
        ug_cpu_stage_add(&stage, &staged.y, upsampled, true);
    }
    ug_status st = ug_cpu_stage_begin(&stage, "upsample2d");
    if (st != UG_OK)
        return st;
    upsample_job j = {.args = args};
    j.in = (const float *)ug_cpu_ptr(args->backward ? args->dy : args->x);
    j.out = (float *)ug_cpu_ptr(args->backward ? args->dx : args->y);
    const int64_t outputs = args->backward ? image : upsampled;
    const int64_t per_output = args->backward ? (int64_t)w->sh * w->sw : 1;
    ug_cpu_parallel_for(dev->workers, outputs, UG_CPU_MIN_PARALLEL / per_output + 1, upsample_range, &j);
    ug_cpu_stage_end(&stage);
    return UG_OK;
}
