/* Batch normalisation, one work-group per channel, with the formulas of
 * kernels/common/batchnorm.h. Data in f32, f16 or bf16 (a kernel per
 * dtype); weights, statistics and arithmetic in f32. Two ways through a
 * channel's values (each loop gives `at`, an element's offset): for GPUs
 * the work-items take neighbouring elements (coalesced reads); for CPU
 * devices (the _rows kernels) each takes whole runs of `inner`, an image
 * at a time, since the element-wise offsets' 64-bit divisions held POCL to
 * 1 GB/s. */

#define UG_BN_EACH_ELEMENT(at)                            \
    for (long j_ = lid; j_ < count; j_ += L)              \
        for (long at = ug_bn_index(j_, ch, c, inner), once_ = 1; once_; once_ = 0)
#define UG_BN_EACH_RUN(at)                                \
    for (long r_ = lid; r_ < n; r_ += L)                  \
        for (long at = (r_ * c + ch) * inner, end_ = at + inner; at < end_; at++)

#define UG_BATCHNORM_KERNELS(T, SUFFIX, EACH)                                                       \
/* See ug_batchnorm_args. */                                                                        \
kernel void batchnorm_fwd##SUFFIX##_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x, ulong xoff, \
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
        EACH(at)                                                                                    \
            s += UG_LD_##T(x, xoff + at);                                                           \
        mu = ug_wg_sum(buf, s) / (float)count;                                                      \
        float q = 0.0f;                                                                             \
        EACH(at) {                                                                                  \
            const float d = UG_LD_##T(x, xoff + at) - mu;                                           \
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
    EACH(at) {                                                                                      \
        UG_ST_##T(y, yoff + at, ug_bn_output(UG_LD_##T(x, xoff + at), scale, shift, relu));        \
    }                                                                                               \
}                                                                                                   \
                                                                                                    \
kernel void batchnorm_bwd##SUFFIX##_##T(global UG_T_##T *dx, ulong dxoff, const global UG_T_##T *dy, ulong dyoff, \
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
    EACH(at) {                                                                                      \
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
    EACH(at) {                                                                                      \
        const float xhat = (UG_LD_##T(x, xoff + at) - mu) * rs;                                     \
        UG_ST_##T(dx, dxoff + at, ug_bn_input_grad(k, UG_LD_##T(dy, dyoff + at), xhat, mean_dy, mean_dy_xhat)); \
    }                                                                                               \
}

UG_BATCHNORM_KERNELS(f32, , UG_BN_EACH_ELEMENT)
UG_BATCHNORM_KERNELS(f16, , UG_BN_EACH_ELEMENT)
UG_BATCHNORM_KERNELS(bf16, , UG_BN_EACH_ELEMENT)
UG_BATCHNORM_KERNELS(f32, _rows, UG_BN_EACH_RUN)
UG_BATCHNORM_KERNELS(f16, _rows, UG_BN_EACH_RUN)
UG_BATCHNORM_KERNELS(bf16, _rows, UG_BN_EACH_RUN)
