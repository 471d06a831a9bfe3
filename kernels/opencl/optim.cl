/* Optimizer updates: a chunk of elements per work-item (UG_OPTIM_LOOP). */

/* PyTorch SGD on one element (flags: UG_OPTIM_NESTEROV), g already
 * scaled:
 *   if wd: g += wd * p
 *   if momentum: buf = first ? g : momentum * buf + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g */
inline float ug_sgd_element(float pv, float g, global float *buf, float lr, float wd, float momentum,
                            float dampening, bool first, int flags)
{
    if (wd != 0.0f)
        g = g + wd * pv;
    if (momentum != 0.0f) {
        const float b = first ? g : momentum * *buf + (1.0f - dampening) * g;
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

/* The updates, each reading the step's gate
 * (kernels/common/optim_step.h) for its rate, step and scaling, in two
 * kernels each with one argument list (flags in backend.h's terms):
 *   ..._plain: no half copy, the common case. On POCL the general kernel's
 *     store to the copy keeps the work-group loop from being vectorized.
 *   the general kernel: UG_OPTIM_COPY, the result also goes to the half
 *     copy in cdt. */
#define UG_SGD_PARAMS                                                                              \
    global float *restrict p, ulong poff, const global float *restrict grad, ulong goff,           \
        global float *restrict mbuf, ulong boff, const global float *restrict gate, ulong gate_off, \
        global uchar *restrict copy, ulong coff, int cdt, long n, float wd, float momentum,        \
        float dampening, int flags, long chunk
#define UG_ADAM_PARAMS                                                                             \
    global float *restrict p, ulong poff, const global float *restrict grad, ulong goff,           \
        global float *restrict m, ulong moff, global float *restrict v, ulong voff,                 \
        const global float *restrict gate, ulong gate_off, global uchar *restrict copy, ulong coff, \
        int cdt, long n, float wd, float beta1, float beta2, float eps, int flags, long chunk

/* A work-item updates `chunk` elements (one on GPUs, whose neighbouring
 * work-items then read neighbouring elements; 64 on CPU devices, where
 * POCL vectorizes the loop: one element a work-item took 0.57 ms for
 * Adam over 397,510 parameters, 10x the CPU backend). The gate is read
 * once; a skipped step changes nothing. With UG_OPTIM_COPY each result
 * also goes to the half copy. */
#define UG_OPTIM_LOOP(UPDATE)                                                                      \
    const long begin = get_global_id(0) * chunk, end = min(begin + chunk, n);                     \
    const global float *gt = gate + gate_off;                                                     \
    if (begin >= n || gt[UG_GATE_SKIP] != 0.0f)                                                   \
        return;                                                                                   \
    const float factor = gt[UG_GATE_FACTOR], lr = gt[UG_GATE_LR];                                 \
    for (long i = begin; i < end; i++) {                                                          \
        const float result = (UPDATE);                                                            \
        p[poff + i] = result;                                                                     \
        if (flags & UG_OPTIM_COPY)                                                                \
            ug_store_dt(copy, (long)coff + i, cdt, result);                                       \
    }
#define UG_SGD_BODY                                                                                \
    const bool first = gate[gate_off + UG_GATE_STEP] == 1.0f;                                     \
    UG_OPTIM_LOOP(ug_sgd_element(p[poff + i], grad[goff + i] * factor, mbuf + boff + i, lr, wd,  \
                                 momentum, dampening, first, flags))
#define UG_ADAM_BODY                                                                               \
    const float bc1 = gate[gate_off + UG_GATE_BC1], bc2 = gate[gate_off + UG_GATE_BC2];           \
    UG_OPTIM_LOOP(ug_adam_element(p[poff + i], grad[goff + i] * factor, m + moff + i,            \
                                  v + voff + i, lr, wd, beta1, beta2, eps, bc1, bc2, flags))

kernel void optim_sgd_plain(UG_SGD_PARAMS)
{
    flags &= ~UG_OPTIM_COPY;
    UG_SGD_BODY
}

kernel void optim_sgd(UG_SGD_PARAMS) { UG_SGD_BODY }

kernel void optim_adam_plain(UG_ADAM_PARAMS)
{
    flags &= ~UG_OPTIM_COPY;
    UG_ADAM_BODY
}

kernel void optim_adam(UG_ADAM_PARAMS) { UG_ADAM_BODY }

/* The step's scalars (kernels/common/optim_step.h), one work-item. */
kernel void optim_step(global float *state, ulong state_off, global float *gate, ulong gate_off,
                       const global float *sum, ulong sum_off, int has_sum, int schedule, float lr,
                       float gamma, float step_size, float warmup, float total, float min_lr,
                       int scaling, float growth, float backoff, float growth_interval,
                       float max_norm, float beta1, float beta2)
{
    if (get_global_id(0) != 0)
        return;
    const ug_step_rule r = {schedule, lr,      gamma,           step_size, warmup, total, min_lr,
                            scaling,  growth,  backoff,         growth_interval,  max_norm, beta1, beta2};
    float s[UG_STEP_STATE_SIZE], g[UG_GATE_SIZE];
    for (int k = 0; k < UG_STEP_STATE_SIZE; k++)
        s[k] = state[state_off + k];
    ug_optim_step(s, g, has_sum ? sum[sum_off] : 0.0f, &r);
    for (int k = 0; k < UG_STEP_STATE_SIZE; k++)
        state[state_off + k] = s[k];
    for (int k = 0; k < UG_GATE_SIZE; k++)
        gate[gate_off + k] = g[k];
}
