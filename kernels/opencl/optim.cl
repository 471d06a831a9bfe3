/* Optimizer updates, one element per work-item. */

/* PyTorch SGD on one element (flags: UG_OPTIM_NESTEROV,
 * UG_OPTIM_FIRST_STEP), g already scaled:
 *   if wd: g += wd * p
 *   if momentum: buf = first ? g : momentum * buf + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g */
inline float ug_sgd_element(float pv, float g, global float *buf, float lr, float wd, float momentum,
                            float dampening, int flags)
{
    if (wd != 0.0f)
        g = g + wd * pv;
    if (momentum != 0.0f) {
        const float b = (flags & UG_OPTIM_FIRST_STEP) ? g : momentum * *buf + (1.0f - dampening) * g;
        *buf = b;
        g = (flags & UG_OPTIM_NESTEROV) ? g + momentum * b : b;
    }
    return pv - lr * g;
}

/* PyTorch Adam / AdamW on one element (flags: UG_OPTIM_DECOUPLED for
 * AdamW's weight decay), g already scaled:
 *   AdamW: p *= 1 - lr * wd          Adam: g += wd * p
 *   m = lerp(m, g, 1 - beta1)        (torch's exp_avg.lerp_)
 *   v = v * beta2 + (1 - beta2) * g * g
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps) */
inline float ug_adam_element(float pv, float g, global float *m, global float *v, float lr, float wd,
                             float beta1, float beta2, float eps, float bc1, float bc2, int flags)
{
    if (flags & UG_OPTIM_DECOUPLED)
        pv = pv * (1.0f - lr * wd);
    else if (wd != 0.0f)
        g = g + wd * pv;
    /* torch.lerp(start, end, w): start + w (end - start) for w < 0.5, else
     * end - (end - start) (1 - w). */
    const float w = 1.0f - beta1;
    float mv = *m;
    mv = w < 0.5f ? mv + w * (g - mv) : g - (g - mv) * (1.0f - w);
    const float vv = *v * beta2 + (1.0f - beta2) * g * g;
    *m = mv;
    *v = vv;
    const float denom = sqrt(vv) / sqrt(bc2) + eps;
    return pv - (lr / bc1) * (mv / denom);
}

/* The updates, one element per work-item, in two kernels each with one
 * argument list (flags in backend.h's terms, and UG_OPTIM_GRAD_SCALE when
 * gscale holds a clipping factor):
 *   ..._plain: no gate and no half copy, the common case. On POCL the
 *     general kernel's per-element reads of the gate and its store to the
 *     copy keep the work-group loop from being vectorized: Adam over 392k
 *     parameters took 0.93 ms against 0.2 ms for the plain kernel.
 *   the general kernel: UG_OPTIM_GATED when gscale is the loss scaler's
 *     gate (skip, or the step and its bias corrections), UG_OPTIM_COPY when
 *     the result also goes to the half copy in cdt. */
#define UG_SGD_PARAMS                                                                              \
    global float *p, ulong poff, const global float *grad, ulong goff, global float *mbuf, ulong boff, \
        const global float *gscale, ulong soff, global uchar *copy, ulong coff, int cdt, long n,     \
        float lr, float wd, float momentum, float dampening, int flags
#define UG_ADAM_PARAMS                                                                             \
    global float *p, ulong poff, const global float *grad, ulong goff, global float *m, ulong moff,   \
        global float *v, ulong voff, const global float *gscale, ulong soff, global uchar *copy,     \
        ulong coff, int cdt, long n, float lr, float wd, float beta1, float beta2, float eps,        \
        float bc1, float bc2, int flags

/* The element's gradient, times the clipping (or unscaling) factor when
 * there is one. */
inline float ug_optim_grad(const global float *grad, const global float *gscale, int flags)
{
    return (flags & UG_OPTIM_GRAD_SCALE) ? *grad * gscale[UG_GATE_FACTOR] : *grad;
}

kernel void optim_sgd_plain(UG_SGD_PARAMS)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    const float g = ug_optim_grad(grad + goff + i, gscale + soff, flags);
    p[poff + i] = ug_sgd_element(p[poff + i], g, mbuf + boff + i, lr, wd, momentum, dampening, flags);
}

kernel void optim_sgd(UG_SGD_PARAMS)
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
    const float g = ug_optim_grad(grad + goff + i, gscale + soff, flags);
    const float result = ug_sgd_element(p[poff + i], g, mbuf + boff + i, lr, wd, momentum, dampening, flags);
    p[poff + i] = result;
    if (flags & UG_OPTIM_COPY)
        ug_store_dt(copy, (long)coff + i, cdt, result);
}

kernel void optim_adam_plain(UG_ADAM_PARAMS)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    const float g = ug_optim_grad(grad + goff + i, gscale + soff, flags);
    p[poff + i] = ug_adam_element(p[poff + i], g, m + moff + i, v + voff + i, lr, wd, beta1, beta2, eps, bc1,
                                  bc2, flags);
}

kernel void optim_adam(UG_ADAM_PARAMS)
{
    const long i = get_global_id(0);
    if (i >= n)
        return;
    if (flags & UG_OPTIM_GATED) {
        if (gscale[soff + UG_GATE_SKIP] != 0.0f)
            return;
        bc1 = gscale[soff + UG_GATE_BC1];
        bc2 = gscale[soff + UG_GATE_BC2];
    }
    const float g = ug_optim_grad(grad + goff + i, gscale + soff, flags);
    const float result = ug_adam_element(p[poff + i], g, m + moff + i, v + voff + i, lr, wd, beta1, beta2, eps,
                                         bc1, bc2, flags);
    p[poff + i] = result;
    if (flags & UG_OPTIM_COPY)
        ug_store_dt(copy, (long)coff + i, cdt, result);
}

/* The loss scaler's update (kernels/common/scaler.h), one work-item. */
kernel void optim_scaler(global float *state, ulong state_off, global float *gate, ulong gate_off,
                         const global float *sum, ulong sum_off, float growth, float backoff,
                         float growth_interval, float max_norm, float beta1, float beta2)
{
    if (get_global_id(0) != 0)
        return;
    float s[UG_SCALER_SIZE], g[UG_GATE_SIZE];
    for (int i = 0; i < UG_SCALER_SIZE; i++)
        s[i] = state[state_off + i];
    ug_scaler_update(s, g, sum[sum_off], growth, backoff, growth_interval, max_norm, beta1, beta2);
    for (int i = 0; i < UG_SCALER_SIZE; i++)
        state[state_off + i] = s[i];
    for (int i = 0; i < UG_GATE_SIZE; i++)
        gate[gate_off + i] = g[i];
}
