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

/* Cross-entropy of logits [rows, cols] against labels, i32 or i64 (lab64),
 * with label smoothing sm (target = (1 - sm) onehot + sm / cols):
 *   loss[r] = -(1 - sm) logp[label] - (sm / cols) sum_c logp[c],
 * logp = x - max - log(sum exp(x - max)). A row whose label is
 * ignore_index (when ignore) has loss 0; a label outside [0, cols) not
 * ignored gives a NaN loss. */
inline long ug_xent_label(const global uchar *labels, ulong laboff, int lab64, long r)
{
    return lab64 ? ((const global long *)labels)[laboff + r] : (long)((const global int *)labels)[laboff + r];
}

#define UG_XENT_LABEL_PARAMS const global uchar *labels, ulong laboff, int lab64, int ignore, long ignore_index

kernel void xent_fwd(global float *loss, ulong loff, const global float *x, ulong xoff,
                     UG_XENT_LABEL_PARAMS, long cols, float sm, UG_CHECK_PARAMS)
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
    const long label = ug_xent_label(labels, laboff, lab64, r);
    float v;
    if (ignore && label == ignore_index) {
        v = 0.0f;
    } else if (label < 0 || label >= cols) {
        v = NAN;
    } else {
        const float ls = log(s);
        v = -(1.0f - sm) * (x[xb + label] - m - ls);
        if (sm != 0.0f)
            v -= sm / (float)cols * (sxm - (float)cols * ls);
    }
    loss[loff + r] = v;
}

/* The loss: the mean of loss[0, rows) over the n rows not ignored, with n
 * written to counted (when counted_on; an f32, exact to 2^24 rows) and
 * the epilogue's post, check and running sum on the mean as it is stored
 * (y f32). One work-group: each item sums its share pairwise, then a
 * tree. */
kernel void xent_mean(global float *y, ulong yoff, const global float *loss, ulong loff,
                      UG_XENT_LABEL_PARAMS, long rows, global float *counted, ulong coff, int counted_on,
                      UG_CHECK_PARAMS, UG_SUM_PARAMS, int post)
{
    local float buf[UG_WG];
    const int lid = get_local_id(0), L = get_local_size(0);
    ug_pw pw;
    ug_pw_init(&pw);
    long mine = 0;
    for (long r = lid; r < rows; r += L) {
        ug_pw_add(&pw, loss[loff + r]);
        mine += !(ignore && ug_xent_label(labels, laboff, lab64, r) == ignore_index);
    }
    const float total = ug_wg_sum(buf, ug_pw_total(&pw));
    const float n = ug_wg_sum(buf, (float)mine);
    if (lid != 0)
        return;
    const float v = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, total / n);
    ug_check_flag(check, check_off, check_on, ug_nonfinite(v));
    y[yoff] = v;
    ug_sum_add(sum, sum_off, sum_on, sum_alpha, 0, v);
    if (counted_on)
        counted[coff] = n;
}

/* grad[r, c] = (softmax(x_r)_c - target_c) * scale * dloss[0] / counted[0]
 * (dloss and counted 1 when not on); an ignored row and a row with an
 * invalid label get zeros. */
kernel void xent_bwd(global float *grad, ulong goff, const global float *x, ulong xoff,
                     UG_XENT_LABEL_PARAMS, long cols, float sm, float scale,
                     const global float *dloss, ulong doff, int dloss_on,
                     const global float *counted, ulong coff, int counted_on)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, gb = goff + r * cols;
    const long label = ug_xent_label(labels, laboff, lab64, r);
    if ((ignore && label == ignore_index) || label < 0 || label >= cols) {
        for (long c = lid; c < cols; c += L) /* the whole group takes this branch */
            grad[gb + c] = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (long c = lid; c < cols; c += L)
        m = ug_max_nan(m, x[xb + c]);
    m = ug_wg_max(buf, m);
    float s = 0.0f;
    for (long c = lid; c < cols; c += L)
        s += exp(x[xb + c] - m);
    s = ug_wg_sum(buf, s);
    const float k = scale * (dloss_on ? dloss[doff] : 1.0f) / (counted_on ? counted[coff] : 1.0f);
    const float off_target = sm / (float)cols;
    for (long c = lid; c < cols; c += L) {
        const float t = (c == label ? 1.0f - sm : 0.0f) + off_target;
        grad[gb + c] = (exp(x[xb + c] - m) / s - t) * k;
    }
}

/* LayerNorm over each row: mean, biased variance by a second sweep (no
 * cancellation), rstd = 1 / sqrt(var + eps), y = (x - mean) rstd gamma +
 * beta. flags: UG_LN_GAMMA, UG_LN_BETA given; UG_LN_MEAN, UG_LN_RSTD
 * written; UG_LN_RMS: RMSNorm, the mean taken as 0 (not computed). */
kernel void layernorm_fwd(global float *y, ulong yoff, const global float *x, ulong xoff,
                          const global float *gamma, ulong gmoff, const global float *beta,
                          ulong btoff, global float *mean, ulong moff, global float *rstd,
                          ulong roff, long cols, float eps, int flags)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, yb = yoff + r * cols;
    float mu = 0.0f;
    if (!(flags & UG_LN_RMS)) {
        float s = 0.0f;
        for (long c = lid; c < cols; c += L)
            s += x[xb + c];
        mu = ug_wg_sum(buf, s) / (float)cols;
    }
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
 * xhat = (x - mean) rstd; with has_terms, terms = dy xhat too. flags:
 * UG_LN_GAMMA given; UG_LN_RMS: RMSNorm, mean 0 (not read) and no mean(g)
 * term. */
kernel void layernorm_bwd(global float *dx, ulong dxoff, const global float *dy, ulong dyoff,
                          const global float *x, ulong xoff, const global float *mean,
                          ulong moff, const global float *rstd, ulong roff,
                          const global float *gamma, ulong gmoff, long cols, int flags,
                          global float *terms, ulong toff, int has_terms)
{
    local float buf[UG_WG];
    const long r = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long xb = xoff + r * cols, dyb = dyoff + r * cols, dxb = dxoff + r * cols;
    const bool rms = (flags & UG_LN_RMS) != 0;
    const float mu = rms ? 0.0f : mean[moff + r], rs = rstd[roff + r];
    float sg = 0.0f, sgx = 0.0f;
    for (long c = lid; c < cols; c += L) {
        const float g = (flags & UG_LN_GAMMA) ? dy[dyb + c] * gamma[gmoff + c] : dy[dyb + c];
        sg += g;
        sgx += g * ((x[xb + c] - mu) * rs);
    }
    const float mg = rms ? 0.0f : ug_wg_sum(buf, sg) / (float)cols;
    const float mgx = ug_wg_sum(buf, sgx) / (float)cols;
    for (long c = lid; c < cols; c += L) {
        const float g = (flags & UG_LN_GAMMA) ? dy[dyb + c] * gamma[gmoff + c] : dy[dyb + c];
        const float xhat = (x[xb + c] - mu) * rs;
        dx[dxb + c] = rs * (g - mg - xhat * mgx);
        if (has_terms)
            terms[toff + r * cols + c] = dy[dyb + c] * xhat;
    }
}
