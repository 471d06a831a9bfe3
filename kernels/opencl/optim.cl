/* Optimizer updates, one element per work-item. */

/* PyTorch SGD, one element per item (flags: UG_OPTIM_NESTEROV,
 * UG_OPTIM_FIRST_STEP, UG_OPTIM_GRAD_SCALE when gscale is given,
 * UG_OPTIM_GATED when it is the loss scaler's gate, and UG_OPTIM_COPY when
 * the result also goes to the half copy in cdt, backend.h):
 *   g = grad * scale; if wd: g += wd * p
 *   if momentum: buf = first ? g : momentum * buf + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g */
kernel void optim_sgd(global float *p, ulong poff, const global float *grad, ulong goff,
                      global float *mbuf, ulong boff, const global float *gscale, ulong soff,
                      global uchar *copy, ulong coff, int cdt,
                      long n, float lr, float wd, float momentum, float dampening, int flags)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    if (flags & UG_OPTIM_GATED) {
        if (gscale[soff + UG_GATE_SKIP] != 0.0f)
            return;
        if (gscale[soff + UG_GATE_STEP] == 1.0f)
            flags |= UG_OPTIM_FIRST_STEP;
    }
    const float pv = p[poff + i];
    float g = grad[goff + i];
    if (flags & UG_OPTIM_GRAD_SCALE)
        g = g * gscale[soff + UG_GATE_FACTOR];
    if (wd != 0.0f)
        g = g + wd * pv;
    if (momentum != 0.0f) {
        const float b = (flags & UG_OPTIM_FIRST_STEP) ? g : momentum * mbuf[boff + i] + (1.0f - dampening) * g;
        mbuf[boff + i] = b;
        g = (flags & UG_OPTIM_NESTEROV) ? g + momentum * b : b;
    }
    const float result = pv - lr * g;
    p[poff + i] = result;
    if (flags & UG_OPTIM_COPY)
        ug_store_dt(copy, (long)coff + i, cdt, result);
}

/* PyTorch Adam / AdamW (flags: UG_OPTIM_DECOUPLED for AdamW's weight decay,
 * UG_OPTIM_GRAD_SCALE when gscale is given, UG_OPTIM_GATED as SGD's):
 *   AdamW: p *= 1 - lr * wd          Adam: g += wd * p
 *   m = lerp(m, g, 1 - beta1)        (torch's exp_avg.lerp_)
 *   v = v * beta2 + (1 - beta2) * g * g
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps) */
kernel void optim_adam(global float *p, ulong poff, const global float *grad, ulong goff,
                       global float *m, ulong moff, global float *v, ulong voff,
                       const global float *gscale, ulong soff, global uchar *copy, ulong coff,
                       int cdt, long n, float lr, float wd,
                       float beta1, float beta2, float eps, float bc1, float bc2, int flags)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    if (flags & UG_OPTIM_GATED) {
        if (gscale[soff + UG_GATE_SKIP] != 0.0f)
            return;
        const float t = gscale[soff + UG_GATE_STEP];
        bc1 = 1.0f - pow(beta1, t);
        bc2 = 1.0f - pow(beta2, t);
    }
    float pv = p[poff + i];
    float g = grad[goff + i];
    if (flags & UG_OPTIM_GRAD_SCALE)
        g = g * gscale[soff + UG_GATE_FACTOR];
    if (flags & UG_OPTIM_DECOUPLED)
        pv = pv * (1.0f - lr * wd);
    else if (wd != 0.0f)
        g = g + wd * pv;
    /* torch.lerp(start, end, w): start + w (end - start) for w < 0.5, else
     * end - (end - start) (1 - w). */
    const float w = 1.0f - beta1;
    float mv = m[moff + i];
    mv = w < 0.5f ? mv + w * (g - mv) : g - (g - mv) * (1.0f - w);
    const float vv = v[voff + i] * beta2 + (1.0f - beta2) * g * g;
    m[moff + i] = mv;
    v[voff + i] = vv;
    const float denom = sqrt(vv) / sqrt(bc2) + eps;
    const float result = pv - (lr / bc1) * (mv / denom);
    p[poff + i] = result;
    if (flags & UG_OPTIM_COPY)
        ug_store_dt(copy, (long)coff + i, cdt, result);
}

/* The loss scaler's update (kernels/common/scaler.h), one work-item. */
kernel void optim_scaler(global float *state, ulong state_off, global float *gate, ulong gate_off,
                         const global float *sum, ulong sum_off, float growth, float backoff,
                         float growth_interval, float max_norm)
{
    if (get_global_id(0) != 0)
        return;
    float s[UG_SCALER_SIZE], g[UG_GATE_SIZE];
    for (int i = 0; i < UG_SCALER_SIZE; i++)
        s[i] = state[state_off + i];
    ug_scaler_update(s, g, sum[sum_off], growth, backoff, growth_interval, max_norm);
    for (int i = 0; i < UG_SCALER_SIZE; i++)
        state[state_off + i] = s[i];
    for (int i = 0; i < UG_GATE_SIZE; i++)
        gate[gate_off + i] = g[i];
}
