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
