/* Convolution, pooling and upsampling kernels: one item per result element, computed
 * with kernels/common/window.h. Data in f32, f16 or bf16 (a kernel per
 * dtype), arithmetic in f32. */

#define UG_WINDOW_ITEM(count)         \
    const long i = get_global_id(0);  \
    if (i >= (count))                 \
        return;

UG_WINDOW_FUNCTIONS(_f16, half, UG_LD_f16)
UG_WINDOW_FUNCTIONS(_bf16, ushort, UG_LD_bf16)
#define UG_WINDOW_FN_f32(name) name
#define UG_WINDOW_FN_f16(name) name##_f16
#define UG_WINDOW_FN_bf16(name) name##_bf16

/* One set per dtype T of the data (f32, f16, bf16); index stays int. */
#define UG_WINDOW_KERNELS(T)                                                               \
    kernel void im2col_##T(global UG_T_##T *col, ulong coff, const global UG_T_##T *x,    \
                           ulong xoff, UG_WINDOW_PARAMS)                                   \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * kh * kw * oh * ow)                                          \
        UG_ST_##T(col, coff + i, UG_WINDOW_FN_##T(ug_im2col_at)(x + xoff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void col2im_##T(global UG_T_##T *x, ulong xoff, const global UG_T_##T *col,    \
                           ulong coff, UG_WINDOW_PARAMS)                                   \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * h * w)                                                      \
        UG_ST_##T(x, xoff + i, UG_WINDOW_FN_##T(ug_col2im_at)(col + coff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void maxpool_fwd_##T(global UG_T_##T *y, ulong yoff, global int *index,        \
                                ulong ioff, const global UG_T_##T *x, ulong xoff,          \
                                UG_WINDOW_PARAMS)                                          \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * oh * ow)                                                    \
        int at;                                                                            \
        UG_ST_##T(y, yoff + i, UG_WINDOW_FN_##T(ug_maxpool_at)(x + xoff, i, &at, UG_WINDOW_ARGS)); \
        index[ioff + i] = at;                                                              \
    }                                                                                      \
    kernel void maxpool_bwd_##T(global UG_T_##T *dx, ulong dxoff,                         \
                                const global UG_T_##T *dy, ulong dyoff,                    \
                                const global int *index, ulong ioff, UG_WINDOW_PARAMS)     \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * h * w)                                                      \
        UG_ST_##T(dx, dxoff + i,                                                           \
                  UG_WINDOW_FN_##T(ug_maxpool_grad_at)(dy + dyoff, index + ioff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void avgpool_fwd_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x, \
                                ulong xoff, UG_WINDOW_PARAMS)                              \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * oh * ow)                                                    \
        UG_ST_##T(y, yoff + i, UG_WINDOW_FN_##T(ug_avgpool_at)(x + xoff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void avgpool_bwd_##T(global UG_T_##T *dx, ulong dxoff,                         \
                                const global UG_T_##T *dy, ulong dyoff, UG_WINDOW_PARAMS)  \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * h * w)                                                      \
        UG_ST_##T(dx, dxoff + i, UG_WINDOW_FN_##T(ug_avgpool_grad_at)(dy + dyoff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void upsample_fwd_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x,\
                                 ulong xoff, UG_WINDOW_PARAMS)                             \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * oh * ow)                                                    \
        UG_ST_##T(y, yoff + i, UG_WINDOW_FN_##T(ug_upsample_at)(x + xoff, i, UG_WINDOW_ARGS)); \
    }                                                                                      \
    kernel void upsample_bwd_##T(global UG_T_##T *dx, ulong dxoff,                        \
                                 const global UG_T_##T *dy, ulong dyoff, UG_WINDOW_PARAMS) \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * h * w)                                                      \
        UG_ST_##T(dx, dxoff + i, UG_WINDOW_FN_##T(ug_upsample_grad_at)(dy + dyoff, i, UG_WINDOW_ARGS)); \
    }

UG_WINDOW_KERNELS(f32)
UG_WINDOW_KERNELS(f16)
UG_WINDOW_KERNELS(bf16)

/* For CPU devices (POCL): im2col a row of outputs per item (image, channel,
 * tap, output row), and col2im a row of the image per item, so the index
 * arithmetic, 64-bit divisions, runs once a row instead of once an element
 * (element by element im2col moved 0.65 GB/s on two cores); col2im
 * divides by a stride only when it is not 1 (64-bit divisions for each
 * tap took it 11.6 ms on a ResNet's 16-channel layer), and in f32 adds
 * tap by tap along the output row, loops the compiler vectorises (8.8 ->
 * 2.2 ms there). col2im sums the taps in
 * ug_col2im_at's order: the same bits. */
#define UG_WINDOW_ROW_KERNELS(T)                                                           \
    kernel void im2col_rows_##T(global UG_T_##T *col, ulong coff, const global UG_T_##T *x, \
                                ulong xoff, UG_WINDOW_PARAMS)                              \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * kh * kw * oh)                                               \
        const long oy = i % oh, row = i / oh, taps = (long)kh * kw;                        \
        const long kx = row % kw, ky = row / kw % kh, ci = row / taps % c, img = row / (taps * c); \
        const long iy = oy * sh - ph + ky * dh, x0 = kx * dw - pw;                         \
        global UG_T_##T *out = col + coff + i * ow;                                        \
        const global UG_T_##T *src = x + xoff + ((img * c + ci) * h + (iy < 0 ? 0 : iy)) * w; \
        const bool inside = iy >= 0 && iy < h;                                             \
        for (long ox = 0; ox < ow; ox++) {                                                 \
            const long ix = ox * sw + x0;                                                  \
            UG_ST_##T(out, ox, inside && ix >= 0 && ix < w ? UG_LD_##T(src, ix) : 0.0f);   \
        }                                                                                  \
    }                                                                                      \
    kernel void col2im_rows_##T(global UG_T_##T *x, ulong xoff, const global UG_T_##T *col, \
                                ulong coff, UG_WINDOW_PARAMS)                              \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * h)                                                          \
        const long iy = i % h, ohw = oh * ow, taps = (long)kh * kw;                        \
        const global UG_T_##T *base = col + coff + i / h * taps * ohw;                     \
        global UG_T_##T *out = x + xoff + i * w;                                           \
        if (UG_SUMS_IN_PLACE_##T) { /* f32: tap by tap along the row */                   \
            for (long ix = 0; ix < w; ix++)                                                \
                UG_ST_##T(out, ix, 0.0f);                                                  \
            for (int ky = 0; ky < kh; ky++) {                                              \
                const long ty = iy + ph - (long)ky * dh;                                   \
                if (ty < 0 || (sh > 1 && ty % sh != 0) || (sh > 1 ? ty / sh : ty) >= oh)  \
                    continue;                                                              \
                const global UG_T_##T *r = base + (long)ky * kw * ohw + (sh > 1 ? ty / sh : ty) * ow; \
                for (int kx = 0; kx < kw; kx++) {                                          \
                    /* output ox adds to pixel ox * sw + at, for the ox that land in the row */ \
                    const long at = (long)kx * dw - pw;                                    \
                    const long lo = at >= 0 ? 0 : (sw - 1 - at) / sw;                      \
                    const long hi = at > w - 1 ? 0 : min(ow, (w - 1 - at) / sw + 1);       \
                    const global UG_T_##T *src = r + (long)kx * ohw;                       \
                    for (long ox = lo; ox < hi; ox++)                                      \
                        UG_ST_##T(out, ox * sw + at, UG_LD_##T(out, ox * sw + at) + UG_LD_##T(src, ox)); \
                }                                                                          \
            }                                                                              \
            return;                                                                        \
        }                                                                                  \
        for (long ix = 0; ix < w; ix++) {                                                  \
            float sum = 0.0f;                                                              \
            for (int ky = 0; ky < kh; ky++) {                                              \
                const long ty = iy + ph - (long)ky * dh;                                   \
                if (ty < 0 || (sh > 1 && ty % sh != 0))                                    \
                    continue;                                                              \
                const long oy = sh > 1 ? ty / sh : ty;                                     \
                if (oy >= oh)                                                              \
                    continue;                                                              \
                const global UG_T_##T *r = base + (long)ky * kw * ohw + oy * ow;           \
                for (int kx = 0; kx < kw; kx++) {                                          \
                    const long tx = ix + pw - (long)kx * dw;                               \
                    if (tx < 0 || (sw > 1 && tx % sw != 0))                                \
                        continue;                                                          \
                    const long ox = sw > 1 ? tx / sw : tx;                                 \
                    if (ox < ow)                                                           \
                        sum += UG_LD_##T(r, (long)kx * ohw + ox);                          \
                }                                                                          \
            }                                                                              \
            UG_ST_##T(out, ix, sum);                                                       \
        }                                                                                  \
    }

/* Whether col2im_rows may sum in the output row itself: f32 (the same
 * additions in the same order as a sum in a register). */
#define UG_SUMS_IN_PLACE_f32 1
#define UG_SUMS_IN_PLACE_f16 0
#define UG_SUMS_IN_PLACE_bf16 0
UG_WINDOW_ROW_KERNELS(f32)
UG_WINDOW_ROW_KERNELS(f16)
UG_WINDOW_ROW_KERNELS(bf16)
