/* Softmax and log-softmax of each row: one work-group per row, three sweeps
 * over the row (max, sum of exp(x - max), write), so large logits never
 * overflow. A row holding NaN gives NaN, as in PyTorch. y may alias x:
 * each item reads its element before writing it in the last sweep. */
#define UG_SOFTMAX_KERNEL(T)                                                             \
    kernel void softmax_##T(global UG_T_##T *y, ulong yoff, const global UG_T_##T *x,    \
                            ulong xoff, long cols, int log_mode)                         \
    {                                                                                    \
        local float buf[UG_WG];                                                          \
        const long r = get_group_id(0);                                                  \
        const int lid = get_local_id(0), L = get_local_size(0);                          \
        const long xb = xoff + r * cols, yb = yoff + r * cols;                           \
        float m = -INFINITY;                                                             \
        for (long c = lid; c < cols; c += L)                                             \
            m = ug_max_nan(m, UG_LD_##T(x, xb + c));                                     \
        m = ug_wg_max(buf, m);                                                           \
        float s = 0.0f;                                                                  \
        for (long c = lid; c < cols; c += L)                                             \
            s += exp(UG_LD_##T(x, xb + c) - m);                                          \
        s = ug_wg_sum(buf, s);                                                           \
        if (log_mode) {                                                                  \
            const float ls = log(s);                                                     \
            for (long c = lid; c < cols; c += L)                                         \
                UG_ST_##T(y, yb + c, (UG_LD_##T(x, xb + c) - m) - ls);                   \
        } else {                                                                         \
            for (long c = lid; c < cols; c += L)                                         \
                UG_ST_##T(y, yb + c, exp(UG_LD_##T(x, xb + c) - m) / s);                 \
        }                                                                                \
    }

UG_SOFTMAX_KERNEL(f32)
UG_SOFTMAX_KERNEL(f16)
UG_SOFTMAX_KERNEL(bf16)


/* Training kernels: cross-entropy (forward and backward), layer
 * normalisation (forward and backward), and the optimizer updates (one
 * kernel per parameter update). All f32. Row kernels use one work-group per
 * row. */

/* Cross-entropy of logits [rows, cols] against i32 labels with label
 * smoothing sm (target = (1 - sm) onehot + sm / cols):
 *   loss[r] = -(1 - sm) logp[label] - (sm / cols) sum_c logp[c],
 * logp = x - max - log(sum exp(x - max)). A label outside [0, cols) gives a
 * NaN loss. */
kernel void xent_fwd(global float *loss, ulong loff, const global float *x, ulong xoff,
                     const global int *labels, ulong laboff, long cols, float sm, UG_CHECK_PARAMS)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols;
    float m = -INFINITY;
    bool bad = false; /* the check of the logits */
    for (long c = lid; c < cols; c += L) {
        m = ug_max_nan(m, x[xb + c]);
        bad |= ug_nonfinite(x[xb + c]);
    }
    ug_check_flag(check, check_off, check_on, bad);
    m = ug_wg_max(buf, m);
    float s = 0.0f, sxm = 0.0f;
    for (long c = lid; c < cols; c += L) {
        const float d = x[xb + c] - m;
        s += exp(d);
        sxm += d;
    }
    s = ug_wg_sum(buf, s);
    /* sum_c (x_c - max) is needed only with smoothing; skipping it keeps a
     * -inf (masked) logit from turning 0 * -inf into NaN. */
    if (sm != 0.0f)
        sxm = ug_wg_sum(buf, sxm);
    if (lid != 0)
        return;
    const int label = labels[laboff + r];
    float v;
    if (label < 0 || label >= cols) {
        v = NAN;
    } else {
        const float ls = log(s);
        v = -(1.0f - sm) * (x[xb + label] - m - ls);
        if (sm != 0.0f)
            v -= sm / (float)cols * (sxm - (float)cols * ls);
    }
    loss[loff + r] = v;
}

/* grad[r, c] = (softmax(x_r)_c - target_c) * scale * dloss[0] (1 when
 * dloss_on is 0); a row with an invalid label gets zeros. */
kernel void xent_bwd(global float *grad, ulong goff, const global float *x, ulong xoff,
                     const global int *labels, ulong laboff, long cols, float sm, float scale,
                     const global float *dloss, ulong doff, int dloss_on)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, gb = goff + r * cols;
    float m = -INFINITY;
    for (long c = lid; c < cols; c += L)
        m = ug_max_nan(m, x[xb + c]);
    m = ug_wg_max(buf, m);
    float s = 0.0f;
    for (long c = lid; c < cols; c += L)
        s += exp(x[xb + c] - m);
    s = ug_wg_sum(buf, s);
    const int label = labels[laboff + r];
    const bool valid = label >= 0 && label < cols;
    const float k = scale * (dloss_on ? dloss[doff] : 1.0f);
    const float off_target = sm / (float)cols;
    for (long c = lid; c < cols; c += L) {
        float g = 0.0f;
        if (valid) {
            const float t = (c == label ? 1.0f - sm : 0.0f) + off_target;
            g = (exp(x[xb + c] - m) / s - t) * k;
        }
        grad[gb + c] = g;
    }
}

/* LayerNorm over each row: mean, biased variance by a second sweep (no
 * cancellation), rstd = 1 / sqrt(var + eps), y = (x - mean) rstd gamma +
 * beta. flags: UG_LN_GAMMA, UG_LN_BETA given; UG_LN_MEAN, UG_LN_RSTD written. */
kernel void layernorm_fwd(global float *y, ulong yoff, const global float *x, ulong xoff,
                          const global float *gamma, ulong gmoff, const global float *beta,
                          ulong btoff, global float *mean, ulong moff, global float *rstd,
                          ulong roff, long cols, float eps, int flags)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, yb = yoff + r * cols;
    float s = 0.0f;
    for (long c = lid; c < cols; c += L)
        s += x[xb + c];
    const float mu = ug_wg_sum(buf, s) / (float)cols;
    float q = 0.0f;
    for (long c = lid; c < cols; c += L) {
        const float d = x[xb + c] - mu;
        q += d * d;
    }
    const float var = ug_wg_sum(buf, q) / (float)cols;
    const float rs = 1.0f / sqrt(var + eps);
    for (long c = lid; c < cols; c += L) {
        float v = (x[xb + c] - mu) * rs;
        if (flags & UG_LN_GAMMA)
            v = v * gamma[gmoff + c];
        if (flags & UG_LN_BETA)
            v = v + beta[btoff + c];
        y[yb + c] = v;
    }
    if (lid == 0) {
        if (flags & UG_LN_MEAN)
            mean[moff + r] = mu;
        if (flags & UG_LN_RSTD)
            rstd[roff + r] = rs;
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma,
 * xhat = (x - mean) rstd. flags: UG_LN_GAMMA given. */
kernel void layernorm_bwd(global float *dx, ulong dxoff, const global float *dy, ulong dyoff,
                          const global float *x, ulong xoff, const global float *mean,
                          ulong moff, const global float *rstd, ulong roff,
                          const global float *gamma, ulong gmoff, long cols, int flags)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, dyb = dyoff + r * cols, dxb = dxoff + r * cols;
    const float mu = mean[moff + r], rs = rstd[roff + r];
    float sg = 0.0f, sgx = 0.0f;
    for (long c = lid; c < cols; c += L) {
        const float g = (flags & UG_LN_GAMMA) ? dy[dyb + c] * gamma[gmoff + c] : dy[dyb + c];
        sg += g;
        sgx += g * ((x[xb + c] - mu) * rs);
    }
    const float mg = ug_wg_sum(buf, sg) / (float)cols;
    const float mgx = ug_wg_sum(buf, sgx) / (float)cols;
    for (long c = lid; c < cols; c += L) {
        const float g = (flags & UG_LN_GAMMA) ? dy[dyb + c] * gamma[gmoff + c] : dy[dyb + c];
        const float xhat = (x[xb + c] - mu) * rs;
        dx[dxb + c] = rs * (g - mg - xhat * mgx);
    }
}
