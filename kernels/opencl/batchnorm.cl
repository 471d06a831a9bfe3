/* Batch normalisation, one work-group per channel, with the formulas of
 * kernels/common/batchnorm.h. Data in f32, f16 or bf16 (a kernel per
 * dtype); weights, statistics and arithmetic in f32. */

#define UG_BN_AT(j) ug_bn_index((j), ch, c, inner)

#define UG_BATCHNORM_KERNELS(T)                                                                     \
/* See ug_batchnorm_args. */                                                                        \
kernel void batchnorm_fwd_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x, ulong xoff, \
                          const global float *weight, ulong woff, const global float *bias,         \
                          ulong boff, global float *mean, ulong moff, global float *rstd,           \
                          ulong roff, global float *rmean, ulong rmoff, global float *rvar,         \
                          ulong rvoff, long n, long c, long inner, float eps, float momentum,       \
                          int training, int update_running, int relu)                               \
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
        rs = ug_bn_rstd(q / (float)count, eps);                                                     \
        unbiased = q / (float)(count - 1);                                                          \
    } else {                                                                                        \
        mu = rmean[rmoff + ch];                                                                     \
        rs = ug_bn_rstd(rvar[rvoff + ch], eps);                                                     \
    }                                                                                               \
    /* One nested condition: POCL 3.1 ran a lid == 0 && flag block on every                         \
     * item of the group. */                                                                        \
    if (lid == 0) {                                                                                 \
        mean[moff + ch] = mu;                                                                       \
        rstd[roff + ch] = rs;                                                                       \
        if (training && update_running) {                                                           \
            rmean[rmoff + ch] = ug_bn_running(rmean[rmoff + ch], momentum, mu);                     \
            rvar[rvoff + ch] = ug_bn_running(rvar[rvoff + ch], momentum, unbiased);                 \
        }                                                                                           \
    }                                                                                               \
    const float scale = ug_bn_scale(rs, weight[woff + ch]);                                         \
    const float shift = ug_bn_shift(mu, scale, bias[boff + ch]);                                    \
    for (long j = lid; j < count; j += L) {                                                         \
        const long at = UG_BN_AT(j);                                                                \
        UG_ST_##T(y, yoff + at, ug_bn_output(UG_LD_##T(x, xoff + at), scale, shift, relu));        \
    }                                                                                               \
}                                                                                                   \
                                                                                                    \
kernel void batchnorm_bwd_##T(global UG_T_##T *dx, ulong dxoff, const global UG_T_##T *dy, ulong dyoff, \
                          const global UG_T_##T *x, ulong xoff, const global float *mean, ulong moff, \
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
    const float k = ug_bn_scale(rs, weight[woff + ch]);                                             \
    const float mean_dy = training ? s / (float)count : 0.0f;                                       \
    const float mean_dy_xhat = training ? sx / (float)count : 0.0f;                                 \
    for (long j = lid; j < count; j += L) {                                                         \
        const long at = UG_BN_AT(j);                                                                \
        const float xhat = (UG_LD_##T(x, xoff + at) - mu) * rs;                                     \
        UG_ST_##T(dx, dxoff + at, ug_bn_input_grad(k, UG_LD_##T(dy, dyoff + at), xhat, mean_dy, mean_dy_xhat)); \
    }                                                                                               \
}

UG_BATCHNORM_KERNELS(f32)
UG_BATCHNORM_KERNELS(f16)
UG_BATCHNORM_KERNELS(bf16)
