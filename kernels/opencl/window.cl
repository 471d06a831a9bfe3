/* Convolution and pooling kernels: one item per result element, computed
 * with kernels/common/window.h; batch normalisation with one work-group per
 * channel. All f32. */

#define UG_WINDOW_ITEM(count)         \
    const long i = get_global_id(0);  \
    if (i >= (count))                 \
        return;

kernel void im2col(global float *col, ulong coff, const global float *x, ulong xoff,
                   UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * kh * kw * oh * ow)
    col[coff + i] = ug_im2col_at(x + xoff, i, UG_WINDOW_ARGS);
}

kernel void col2im(global float *x, ulong xoff, const global float *col, ulong coff,
                   UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * h * w)
    x[xoff + i] = ug_col2im_at(col + coff, i, UG_WINDOW_ARGS);
}

kernel void maxpool_fwd(global float *y, ulong yoff, global int *index, ulong ioff,
                        const global float *x, ulong xoff, UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * oh * ow)
    int at;
    y[yoff + i] = ug_maxpool_at(x + xoff, i, &at, UG_WINDOW_ARGS);
    index[ioff + i] = at;
}

kernel void maxpool_bwd(global float *dx, ulong dxoff, const global float *dy, ulong dyoff,
                        const global int *index, ulong ioff, UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * h * w)
    dx[dxoff + i] = ug_maxpool_grad_at(dy + dyoff, index + ioff, i, UG_WINDOW_ARGS);
}

kernel void avgpool_fwd(global float *y, ulong yoff, const global float *x, ulong xoff,
                        UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * oh * ow)
    y[yoff + i] = ug_avgpool_at(x + xoff, i, UG_WINDOW_ARGS);
}

kernel void avgpool_bwd(global float *dx, ulong dxoff, const global float *dy, ulong dyoff,
                        UG_WINDOW_PARAMS)
{
    UG_WINDOW_ITEM(n * c * h * w)
    dx[dxoff + i] = ug_avgpool_grad_at(dy + dyoff, i, UG_WINDOW_ARGS);
}

/* Element j of channel ch in x [n, c, inner]. */
#define UG_BN_AT(j) (((j) / inner * c + ch) * inner + (j) % inner)

/* See ug_batchnorm_args. */
kernel void batchnorm_fwd(global float *y, ulong yoff, const global float *x, ulong xoff,
                          const global float *weight, ulong woff, const global float *bias,
                          ulong boff, global float *mean, ulong moff, global float *rstd,
                          ulong roff, global float *rmean, ulong rmoff, global float *rvar,
                          ulong rvoff, long n, long c, long inner, float eps, float momentum,
                          int training, int update_running)
{
    local float buf[UG_WG];
    const long ch = get_group_id(0), count = n * inner;
    const int lid = get_local_id(0), L = get_local_size(0);
    float mu, rs, unbiased = 0.0f;
    if (training) {
        float s = 0.0f;
        for (long j = lid; j < count; j += L)
            s += x[xoff + UG_BN_AT(j)];
        mu = ug_wg_sum(buf, s) / (float)count;
        float q = 0.0f;
        for (long j = lid; j < count; j += L) {
            const float d = x[xoff + UG_BN_AT(j)] - mu;
            q += d * d;
        }
        q = ug_wg_sum(buf, q);
        rs = 1.0f / sqrt(q / (float)count + eps);
        unbiased = q / (float)(count - 1);
    } else {
        mu = rmean[rmoff + ch];
        rs = 1.0f / sqrt(rvar[rvoff + ch] + eps);
    }
    /* One nested condition: POCL 3.1 ran a lid == 0 && flag block on every
     * item of the group. */
    if (lid == 0) {
        mean[moff + ch] = mu;
        rstd[roff + ch] = rs;
        if (training && update_running) {
            rmean[rmoff + ch] = (1.0f - momentum) * rmean[rmoff + ch] + momentum * mu;
            rvar[rvoff + ch] = (1.0f - momentum) * rvar[rvoff + ch] + momentum * unbiased;
        }
    }
    const float scale = rs * weight[woff + ch], shift = bias[boff + ch] - mu * scale;
    for (long j = lid; j < count; j += L) {
        const long at = UG_BN_AT(j);
        y[yoff + at] = x[xoff + at] * scale + shift;
    }
}

kernel void batchnorm_bwd(global float *dx, ulong dxoff, const global float *dy, ulong dyoff,
                          const global float *x, ulong xoff, const global float *mean, ulong moff,
                          const global float *rstd, ulong roff, const global float *weight,
                          ulong woff, global float *dweight, ulong dwoff, global float *dbias,
                          ulong dboff, long n, long c, long inner, int training)
{
    local float buf[UG_WG];
    const long ch = get_group_id(0), count = n * inner;
    const int lid = get_local_id(0), L = get_local_size(0);
    const float mu = mean[moff + ch], rs = rstd[roff + ch];
    float s = 0.0f, sx = 0.0f;
    for (long j = lid; j < count; j += L) {
        const long at = UG_BN_AT(j);
        const float g = dy[dyoff + at];
        s += g;
        sx += g * ((x[xoff + at] - mu) * rs);
    }
    s = ug_wg_sum(buf, s);
    sx = ug_wg_sum(buf, sx);
    if (lid == 0) {
        dweight[dwoff + ch] = sx;
        dbias[dboff + ch] = s;
    }
    const float k = rs * weight[woff + ch];
    const float mean_dy = training ? s / (float)count : 0.0f;
    const float mean_dy_xhat = training ? sx / (float)count : 0.0f;
    for (long j = lid; j < count; j += L) {
        const long at = UG_BN_AT(j);
        const float xhat = (x[xoff + at] - mu) * rs;
        dx[dxoff + at] = k * (dy[dyoff + at] - mean_dy - xhat * mean_dy_xhat);
    }
}
