/* The per-element math of im2col, col2im, 2-D pooling and upsampling, written once for
 * every dialect (C11, OpenCL C, HIP/CUDA), like elementwise.h. Each
 * function computes one element of its result from a global index i, so a
 * backend only maps indices to threads. Pointers are already offset to the
 * view's first element. The backward passes gather (each pixel sums what
 * read it) rather than scatter, so no backend needs atomics and results do
 * not depend on thread order. */
#ifndef UG_KERNELS_COMMON_WINDOW_H
#define UG_KERNELS_COMMON_WINDOW_H

#if defined(__OPENCL_VERSION__) /* elementwise.h comes first in the program */
#define UG_GLOBAL global
typedef long ug_i64;
#else
#include <stdbool.h>
#include <stdint.h>

#include "kernels/common/elementwise.h" /* UG_MATH_FN */
#define UG_GLOBAL
typedef int64_t ug_i64;
#endif

/* The geometry as plain integers (kernel arguments of every dialect). */
#define UG_WINDOW_PARAMS                                                                 \
    ug_i64 n, ug_i64 c, ug_i64 h, ug_i64 w, ug_i64 oh, ug_i64 ow, int kh, int kw, int sh, \
        int sw, int ph, int pw, int dh, int dw
#define UG_WINDOW_ARGS n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw

/* The window of output (oy, ox) clipped to the image: rows [*y0, *y1),
 * columns [*x0, *x1). */
#define UG_POOL_WINDOW(oy, ox)                                                   \
    const ug_i64 ys = (oy) * sh - ph, xs = (ox) * sw - pw;                       \
    const ug_i64 y0 = ys < 0 ? 0 : ys, x0 = xs < 0 ? 0 : xs;                     \
    const ug_i64 y1 = ys + kh < h ? ys + kh : h, x1 = xs + kw < w ? xs + kw : w;

/* The outputs whose window (stride s, padding p, size k) covers input
 * position t: [*lo, *hi). */
#define UG_POOL_COVER(t, s, p, k, o, lo, hi)                                      \
    const ug_i64 lo = (t) + (p) - (k) < 0 ? 0 : ((t) + (p) - (k)) / (s) + 1;      \
    const ug_i64 hi##_all = ((t) + (p)) / (s) + 1;                                \
    const ug_i64 hi = hi##_all < (o) ? hi##_all : (o);

/* The divisor of output (oy, ox): its window clipped to the padded image
 * (count_include_pad). */
UG_MATH_FN float ug_avgpool_count(ug_i64 oy, ug_i64 ox, UG_WINDOW_PARAMS)
{
    (void)n, (void)c, (void)oh, (void)ow, (void)dh, (void)dw;
    const ug_i64 ys = oy * sh - ph, xs = ox * sw - pw;
    const ug_i64 ye = ys + kh < h + ph ? ys + kh : h + ph;
    const ug_i64 xe = xs + kw < w + pw ? xs + kw : w + pw;
    return (float)((ye - ys) * (xe - xs));
}

/* The functions that read data, for element type T loaded as f32 by
 * LD(pointer, index), named with suffix S. */
#define UG_WINDOW_FUNCTIONS(S, T, LD)                                                               \
/* col [n, c*kh*kw, oh*ow], element i. */                                                           \
UG_MATH_FN float ug_im2col_at##S(const UG_GLOBAL T *x, ug_i64 i, UG_WINDOW_PARAMS)                  \
{                                                                                                   \
    (void)n;                                                                                        \
    const ug_i64 ohw = oh * ow, taps = (ug_i64)kh * kw;                                             \
    const ug_i64 p = i % ohw, row = i / ohw % (c * taps), img = i / (ohw * c * taps);               \
    const ug_i64 ci = row / taps;                                                                   \
    const int ky = (int)(row % taps / kw), kx = (int)(row % kw);                                    \
    const ug_i64 iy = p / ow * sh - ph + (ug_i64)ky * dh;                                           \
    const ug_i64 ix = p % ow * sw - pw + (ug_i64)kx * dw;                                           \
    if (iy < 0 || iy >= h || ix < 0 || ix >= w)                                                     \
        return 0.0f;                                                                                \
    return LD(x, ((img * c + ci) * h + iy) * w + ix);                                               \
}                                                                                                   \
                                                                                                    \
/* image [n, c, h, w], element i: the sum of the col entries that read it. */                       \
UG_MATH_FN float ug_col2im_at##S(const UG_GLOBAL T *col, ug_i64 i, UG_WINDOW_PARAMS)                \
{                                                                                                   \
    (void)n;                                                                                        \
    const ug_i64 ix = i % w, iy = i / w % h, plane = i / (h * w); /* img * c + ci */                \
    const ug_i64 ci = plane % c, img = plane / c;                                                   \
    const ug_i64 ohw = oh * ow, taps = (ug_i64)kh * kw;                                             \
    const UG_GLOBAL T *base = col + (img * c * taps + ci * taps) * ohw;                             \
    float sum = 0.0f;                                                                               \
    for (int ky = 0; ky < kh; ky++) {                                                               \
        const ug_i64 ty = iy + ph - (ug_i64)ky * dh;                                                \
        if (ty < 0 || ty % sh != 0 || ty / sh >= oh)                                                \
            continue;                                                                               \
        for (int kx = 0; kx < kw; kx++) {                                                           \
            const ug_i64 tx = ix + pw - (ug_i64)kx * dw;                                            \
            if (tx < 0 || tx % sw != 0 || tx / sw >= ow)                                            \
                continue;                                                                           \
            sum += LD(base, ((ug_i64)ky * kw + kx) * ohw + ty / sh * ow + tx / sw);                 \
        }                                                                                           \
    }                                                                                               \
    return sum;                                                                                     \
}                                                                                                   \
                                                                                                    \
/* Output (oy, ox) of the plane img: the window's maximum, and in *index                            \
 * its h*w offset (the first maximum; NaN wins, as in PyTorch). */                                  \
UG_MATH_FN float ug_maxpool_window##S(const UG_GLOBAL T *img, ug_i64 oy, ug_i64 ox, int *index,     \
                                   UG_WINDOW_PARAMS)                                                \
{                                                                                                   \
    (void)n, (void)c, (void)oh, (void)ow, (void)dh, (void)dw;                                       \
    UG_POOL_WINDOW(oy, ox)                                                                          \
    float best = -INFINITY;                                                                         \
    ug_i64 at = y0 * w + x0;                                                                        \
    /* Branch-free (maxima fall at random): a NaN is taken while best is                            \
     * not NaN, so the first NaN stays. */                                                          \
    for (ug_i64 y = y0; y < y1; y++)                                                                \
        for (ug_i64 xx = x0; xx < x1; xx++) {                                                       \
            const float v = LD(img, y * w + xx);                                                    \
            const bool take = v > best || (v != v && best == best);                                 \
            best = take ? v : best;                                                                 \
            at = take ? y * w + xx : at;                                                            \
        }                                                                                           \
    *index = (int)at;                                                                               \
    return best;                                                                                    \
}                                                                                                   \
                                                                                                    \
/* y [n, c, oh, ow], element i. */                                                                  \
UG_MATH_FN float ug_maxpool_at##S(const UG_GLOBAL T *x, ug_i64 i, int *index, UG_WINDOW_PARAMS)     \
{                                                                                                   \
    const ug_i64 ox = i % ow, oy = i / ow % oh, plane = i / (oh * ow);                              \
    return ug_maxpool_window##S(x + plane * h * w, oy, ox, index, UG_WINDOW_ARGS);                  \
}                                                                                                   \
                                                                                                    \
/* dx [n, c, h, w], element i: the gradients of the outputs whose maximum it was. */                \
UG_MATH_FN float ug_maxpool_grad_at##S(const UG_GLOBAL T *dy, const UG_GLOBAL int *index,           \
                                    ug_i64 i, UG_WINDOW_PARAMS)                                     \
{                                                                                                   \
    (void)n, (void)c, (void)dh, (void)dw;                                                           \
    const ug_i64 ix = i % w, iy = i / w % h, plane = i / (h * w);                                   \
    const ug_i64 base = plane * oh * ow, self = iy * w + ix;                                        \
    UG_POOL_COVER(iy, sh, ph, kh, oh, oy0, oy1)                                                     \
    UG_POOL_COVER(ix, sw, pw, kw, ow, ox0, ox1)                                                     \
    float sum = 0.0f;                                                                               \
    for (ug_i64 oy = oy0; oy < oy1; oy++)                                                           \
        for (ug_i64 ox = ox0; ox < ox1; ox++)                                                       \
            if (index[base + oy * ow + ox] == self)                                                 \
                sum += LD(dy, base + oy * ow + ox);                                                 \
    return sum;                                                                                     \
}                                                                                                   \
                                                                                                    \
/* Output (oy, ox) of the plane img: the window's mean. */                                          \
UG_MATH_FN float ug_avgpool_window##S(const UG_GLOBAL T *img, ug_i64 oy, ug_i64 ox,                 \
                                   UG_WINDOW_PARAMS)                                                \
{                                                                                                   \
    UG_POOL_WINDOW(oy, ox)                                                                          \
    float sum = 0.0f;                                                                               \
    for (ug_i64 y = y0; y < y1; y++)                                                                \
        for (ug_i64 xx = x0; xx < x1; xx++)                                                         \
            sum += LD(img, y * w + xx);                                                             \
    return sum / ug_avgpool_count(oy, ox, UG_WINDOW_ARGS);                                          \
}                                                                                                   \
                                                                                                    \
UG_MATH_FN float ug_avgpool_at##S(const UG_GLOBAL T *x, ug_i64 i, UG_WINDOW_PARAMS)                 \
{                                                                                                   \
    const ug_i64 ox = i % ow, oy = i / ow % oh, plane = i / (oh * ow);                              \
    return ug_avgpool_window##S(x + plane * h * w, oy, ox, UG_WINDOW_ARGS);                         \
}                                                                                                   \
                                                                                                    \
UG_MATH_FN float ug_avgpool_grad_at##S(const UG_GLOBAL T *dy, ug_i64 i, UG_WINDOW_PARAMS)           \
{                                                                                                   \
    const ug_i64 ix = i % w, iy = i / w % h, plane = i / (h * w);                                   \
    const ug_i64 base = plane * oh * ow;                                                            \
    UG_POOL_COVER(iy, sh, ph, kh, oh, oy0, oy1)                                                     \
    UG_POOL_COVER(ix, sw, pw, kw, ow, ox0, ox1)                                                     \
    float sum = 0.0f;                                                                               \
    for (ug_i64 oy = oy0; oy < oy1; oy++)                                                           \
        for (ug_i64 ox = ox0; ox < ox1; ox++)                                                       \
            sum += LD(dy, base + oy * ow + ox) / ug_avgpool_count(oy, ox, UG_WINDOW_ARGS);          \
    return sum;                                                                                     \
}                                                                                                   \
                                                                                                    \
/* Nearest upsampling by (sh, sw): y [n, c, oh, ow], element i. */                                  \
UG_MATH_FN float ug_upsample_at##S(const UG_GLOBAL T *x, ug_i64 i, UG_WINDOW_PARAMS)                \
{                                                                                                   \
    (void)n, (void)c, (void)kh, (void)kw, (void)ph, (void)pw, (void)dh, (void)dw;                   \
    const ug_i64 ox = i % ow, oy = i / ow % oh, plane = i / (oh * ow);                              \
    return LD(x, (plane * h + oy / sh) * w + ox / sw);                                              \
}                                                                                                   \
                                                                                                    \
/* dx [n, c, h, w], element i: the sum of the sh x sw outputs copied from it. */                    \
UG_MATH_FN float ug_upsample_grad_at##S(const UG_GLOBAL T *dy, ug_i64 i, UG_WINDOW_PARAMS)          \
{                                                                                                   \
    (void)n, (void)c, (void)kh, (void)kw, (void)ph, (void)pw, (void)dh, (void)dw;                   \
    const ug_i64 ix = i % w, iy = i / w % h, plane = i / (h * w);                                   \
    const ug_i64 first = (plane * oh + iy * sh) * ow + ix * sw;                                     \
    float sum = 0.0f;                                                                               \
    for (int a = 0; a < sh; a++)                                                                    \
        for (int b = 0; b < sw; b++)                                                                \
            sum += LD(dy, first + (ug_i64)a * ow + b);                                              \
    return sum;                                                                                     \
}

/* f32 under the plain names, which every dialect uses; OpenCL adds _f16
 * and _bf16 (kernels/opencl/window.cl). */
#define UG_WINDOW_LD_F32(p, i) ((p)[i])
UG_WINDOW_FUNCTIONS(, float, UG_WINDOW_LD_F32)

#endif
