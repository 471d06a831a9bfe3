/* Convolution and pooling kernels: one item per result element, computed
 * with kernels/common/window.h; batch normalisation with one work-group per
 * channel. Data in f32, f16 or bf16 (a kernel per dtype), arithmetic in
 * f32. */

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
    }

UG_WINDOW_KERNELS(f32)
UG_WINDOW_KERNELS(f16)
UG_WINDOW_KERNELS(bf16)

/* Element j of channel ch in x [n, c, inner]. */
#define UG_BN_AT(j) (((j) / inner * c + ch) * inner + (j) % inner)

#define UG_BATCHNORM_KERNELS(T)                                                                     \
/* See ug_batchnorm_args. */                                                                        \
kernel void batchnorm_fwd_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x, ulong xoff, \
                          const global float *weight, ulong woff, const global float *bias,         \
                          ulong boff, global float *mean, ulong moff, global float *rstd,           \
                          ulong roff, global float *rmean, ulong rmoff, global float *rvar,         \
                          ulong rvoff, long n, long c, long inner, float eps, float momentum,       \
                          int training, int update_running)                                         \
{                                                                                                   \
    local float buf[UG_WG];                                                                         \
    const long ch = get_group_id(0), count = n * inner;                                             \
    const int lid = get_local_id(0), L = get_local_size(0);                                         \
    float mu, rs, unbiased = 0.0f;                                                                  \
    if (training) {                                                                                 \
        float s = 0.0f;                                                                             \
        for (long j = lid; j < count; j += L)                                                       \
            s += UG_LD_##T(x, xoff + UG_BN_AT(j));                                                  \
        mu = ug_wg_sum(buf, s) / (float)count;                                                      \
        float q = 0.0f;                                                                             \
        for (long j = lid; j < count; j += L) {                                                     \
            const float d = UG_LD_##T(x, xoff + UG_BN_AT(j)) - mu;                                  \
            q += d * d;                                                                             \
        }                                                                                           \
        q = ug_wg_sum(buf, q);                                                                      \
        rs = 1.0f / sqrt(q / (float)count + eps);                                                   \
        unbiased = q / (float)(count - 1);                                                          \
    } else {                                                                                        \
        mu = rmean[rmoff + ch];                                                                     \
        rs = 1.0f / sqrt(rvar[rvoff + ch] + eps);                                                   \
    }                                                                                               \
    /* One nested condition: POCL 3.1 ran a lid == 0 && flag block on every                         \
     * item of the group. */                                                                        \
    if (lid == 0) {                                                                                 \
        mean[moff + ch] = mu;                                                                       \
        rstd[roff + ch] = rs;                                                                       \
        if (training && update_running) {                                                           \
            rmean[rmoff + ch] = (1.0f - momentum) * rmean[rmoff + ch] + momentum * mu;              \
            rvar[rvoff + ch] = (1.0f - momentum) * rvar[rvoff + ch] + momentum * unbiased;          \
        }                                                                                           \
    }                                                                                               \
    const float scale = rs * weight[woff + ch], shift = bias[boff + ch] - mu * scale;               \
    for (long j = lid; j < count; j += L) {                                                         \
        const long at = UG_BN_AT(j);                                                                \
        UG_ST_##T(y, yoff + at, UG_LD_##T(x, xoff + at) * scale + shift);                           \
    }                                                                                               \
}                                                                                                   \
                                                                                                    \
kernel void batchnorm_bwd_##T(global UG_T_##T *dx, ulong dxoff, const global UG_T_##T *dy, ulong dyoff,\
                          const global UG_T_##T *x, ulong xoff, const global float *mean, ulong moff,\
                          const global float *rstd, ulong roff, const global float *weight,         \
                          ulong woff, global float *dweight, ulong dwoff, global float *dbias,      \
                          ulong dboff, long n, long c, long inner, int training)                    \
{                                                                                                   \
    local float buf[UG_WG];                                                                         \
    const long ch = get_group_id(0), count = n * inner;                                             \
    const int lid = get_local_id(0), L = get_local_size(0);                                         \
    const float mu = mean[moff + ch], rs = rstd[roff + ch];                                         \
    float s = 0.0f, sx = 0.0f;                                                                      \
    for (long j = lid; j < count; j += L) {                                                         \
        const long at = UG_BN_AT(j);                                                                \
        const float g = UG_LD_##T(dy, dyoff + at);                                                  \
        s += g;                                                                                     \
        sx += g * ((UG_LD_##T(x, xoff + at) - mu) * rs);                                            \
    }                                                                                               \
    s = ug_wg_sum(buf, s);                                                                          \
    sx = ug_wg_sum(buf, sx);                                                                        \
    if (lid == 0) {                                                                                 \
        dweight[dwoff + ch] = sx;                                                                   \
        dbias[dboff + ch] = s;                                                                      \
    }                                                                                               \
    const float k = rs * weight[woff + ch];                                                         \
    const float mean_dy = training ? s / (float)count : 0.0f;                                       \
    const float mean_dy_xhat = training ? sx / (float)count : 0.0f;                                 \
    for (long j = lid; j < count; j += L) {                                                         \
        const long at = UG_BN_AT(j);                                                                \
        const float xhat = (UG_LD_##T(x, xoff + at) - mu) * rs;                                     \
        UG_ST_##T(dx, dxoff + at, k * (UG_LD_##T(dy, dyoff + at) - mean_dy - xhat * mean_dy_xhat)); \
    }                                                                                               \
}

UG_BATCHNORM_KERNELS(f32)
UG_BATCHNORM_KERNELS(f16)
UG_BATCHNORM_KERNELS(bf16)
