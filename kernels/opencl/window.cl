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

/* For CPU devices (POCL): im2col a plane of outputs per item (image,
 * channel, tap), and col2im a row of the image per item, so the index
 * arithmetic, 64-bit divisions, runs once a plane or row instead of once
 * an element (element by element im2col moved 0.65 GB/s on two cores; a
 * row's divisions took longer than copying its 32 values); col2im
 * divides by a stride only when it is not 1 (64-bit divisions for each
 * tap took it 11.6 ms on a ResNet's 16-channel layer), and in f32 adds
 * tap by tap along the output row, loops the compiler vectorises (8.8 ->
 * 2.2 ms there). col2im sums the taps in
 * ug_col2im_at's order: the same bits. */
#define UG_WINDOW_ROW_KERNELS(T)                                                           \
    kernel void im2col_planes_##T(global UG_T_##T *col, ulong coff, const global UG_T_##T *x, \
                                  ulong xoff, UG_WINDOW_PARAMS)                            \
    {                                                                                      \
        UG_WINDOW_ITEM(n * c * kh * kw)                                                    \
        const long taps = (long)kh * kw, kx = i % kw, ky = i / kw % kh;                   \
        const long ci = i / taps % c, img = i / (taps * c), x0 = kx * dw - pw;            \
        const global UG_BITS_##T *plane = (const global UG_BITS_##T *)(x + xoff) + (img * c + ci) * h * w; \
        global UG_BITS_##T *o = (global UG_BITS_##T *)(col + coff) + i * oh * ow;         \
        /* a row's outputs [lo, hi) read inside the image, the rest are padding */ \
        const long lo = x0 >= 0 ? 0 : min(ow, (sw - 1 - x0) / sw);                         \
        const long hi = x0 > w - 1 ? lo : max(lo, min(ow, (w - 1 - x0) / sw + 1));         \
        for (long oy = 0; oy < oh; oy++, o += ow) {                                        \
            const long iy = oy * sh - ph + ky * dh;                                        \
            const bool inside = iy >= 0 && iy < h;                                         \
            const long l = inside ? lo : ow, r = inside ? hi : ow;                         \
            const global UG_BITS_##T *s = plane + (inside ? iy : 0) * w;                  \
            long ox = 0;                                                                   \
            for (; ox + 8 <= l; ox += 8)                                                   \
                vstore8((UG_BITS8_##T)(0), 0, o + ox);                                     \
            for (; ox < l; ox++)                                                           \
                o[ox] = 0;                                                                 \
            if (sw == 1)                                                                   \
                for (; ox + 8 <= r; ox += 8)                                               \
                    vstore8(vload8(0, s + ox + x0), 0, o + ox);                            \
            for (; ox < r; ox++)                                                           \
                o[ox] = s[ox * sw + x0];                                                   \
            for (; ox + 8 <= ow; ox += 8)                                                  \
                vstore8((UG_BITS8_##T)(0), 0, o + ox);                                     \
            for (; ox < ow; ox++)                                                          \
                o[ox] = 0;                                                                 \
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
/* Each dtype's bits, which im2col copies. */
#define UG_BITS_f32 uint
#define UG_BITS_f16 ushort
#define UG_BITS_bf16 ushort
#define UG_BITS8_f32 uint8
#define UG_BITS8_f16 ushort8
#define UG_BITS8_bf16 ushort8
#define UG_SUMS_IN_PLACE_f16 0
#define UG_SUMS_IN_PLACE_bf16 0
UG_WINDOW_ROW_KERNELS(f32)
UG_WINDOW_ROW_KERNELS(f16)
UG_WINDOW_ROW_KERNELS(bf16)
