/* Optimizer updates: a chunk of elements per work-item (UG_OPTIM_LOOP). */

/* Each update's arithmetic is defined once for T = float and float16 (one
 * element, or sixteen as one vector on CPU devices), its state passed in
 * and out through m (and v). */

/* PyTorch SGD (flags: UG_OPTIM_NESTEROV), g already scaled:
 *   if wd: g += wd * p
 *   if momentum: buf = first ? g : momentum * buf + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g */
#define UG_SGD_FN(T)                                                                               \
    inline T ug_sgd_##T(T pv, T g, T *buf, float lr, float wd, float momentum, float dampening,     \
                        bool first, int flags)                                                      \
    {                                                                                               \
        if (wd != 0.0f)                                                                             \
            g = g + wd * pv;                                                                        \
        if (momentum != 0.0f) {                                                                     \
            const T b = first ? g : momentum * *buf + (1.0f - dampening) * g;                       \
            *buf = b;                                                                               \
            g = (flags & UG_OPTIM_NESTEROV) ? g + momentum * b : b;                                 \
        }                                                                                           \
        return pv - lr * g;                                                                         \
    }

/* PyTorch Adam / AdamW (flags: UG_OPTIM_DECOUPLED for AdamW's weight
 * decay), g already scaled:
 *   AdamW: p *= 1 - lr * wd          Adam: g += wd * p
 *   m = lerp(m, g, 1 - beta1)        (torch's exp_avg.lerp_)
 *   v = v * beta2 + (1 - beta2) * g * g
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps) */
#define UG_ADAM_FN(T)                                                                              \
    inline T ug_adam_##T(T pv, T g, T *m, T *v, float lr, float wd, float beta1, float beta2,      \
                         float eps, float bc1, float bc2, int flags)                               \
    {                                                                                               \
        if (flags & UG_OPTIM_DECOUPLED)                                                             \
            pv = pv * (1.0f - lr * wd);                                                             \
        else if (wd != 0.0f)                                                                        \
            g = g + wd * pv;                                                                        \
        /* torch.lerp(start, end, w): start + w (end - start) for w < 0.5,                          \
         * else end - (end - start) (1 - w). */                                                     \
        const float w = 1.0f - beta1;                                                               \
        const T mv = w < 0.5f ? *m + w * (g - *m) : g - (g - *m) * (1.0f - w);                      \
        const T vv = *v * beta2 + (1.0f - beta2) * g * g;                                           \
        *m = mv;                                                                                    \
        *v = vv;                                                                                    \
        const T denom = sqrt(vv) / sqrt(bc2) + eps;                                                 \
        return pv - (lr / bc1) * (mv / denom);                                                      \
    }

UG_SGD_FN(float)
UG_SGD_FN(float16)
UG_ADAM_FN(float)
UG_ADAM_FN(float16)

/* The updates, each reading the step's gate
 * (kernels/common/optim_step.h) for its rate (times the parameter group's
 * lr_scale), step and scaling, in two kernels each with one argument list
 * (flags in backend.h's terms):
 *   ..._plain: no half copy, the common case. On POCL the general kernel's
 *     store to the copy keeps the work-group loop from being vectorized.
 *   the general kernel: UG_OPTIM_COPY, the result also goes to the half
 *     copy in cdt. */
#define UG_SGD_PARAMS                                                                              \
    global float *restrict p, ulong poff, const global float *restrict grad, ulong goff,           \
        global float *restrict mbuf, ulong boff, const global float *restrict gate, ulong gate_off, \
        global uchar *restrict copy, ulong coff, int cdt, long n, float wd, float lr_scale,        \
        float momentum, float dampening, int flags, long chunk, global float *check, ulong check_off
#define UG_ADAM_PARAMS                                                                             \
    global float *restrict p, ulong poff, const global float *restrict grad, ulong goff,           \
        global float *restrict m, ulong moff, global float *restrict v, ulong voff,                 \
        const global float *restrict gate, ulong gate_off, global uchar *restrict copy, ulong coff, \
        int cdt, long n, float wd, float lr_scale, float beta1, float beta2, float eps, int flags, \
        long chunk, global float *check, ulong check_off

/* A work-item updates `chunk` elements: one on GPUs, whose neighbouring
 * work-items then read neighbouring elements; 64 on CPU devices, sixteen
 * at a time as float16 vectors (POCL's vectorizer would use 8 lanes, and
 * Adam's divisions and square roots take 16 in the time of 8 on AVX-512:
 * 56 us against 77 over 397,510 parameters; one element a work-item took
 * 570). The gate is read once; a skipped step changes nothing. UPDATE(W,
 * T) updates W elements from i as type T, leaving the result in r; with
 * UG_OPTIM_COPY each result also goes to the half copy, one by one. With
 * UG_OPTIM_CHECK, a NaN or infinite gradient sets check (a graph's numeric
 * check folded in). */
#define UG_LOAD_1(ptr) (*(ptr))
#define UG_LOAD_16(ptr) vload16(0, ptr)
#define UG_NONFINITE_1(v) ug_nonfinite(v)
#define UG_NONFINITE_16(v) any((v) - (v) != (float16)(0.0f))
#define UG_STORE_1(value, ptr) (*(ptr) = (value))
#define UG_STORE_16(value, ptr) vstore16(value, 0, ptr)
#define UG_OPTIM_LOOP(UPDATE)                                                                      \
    const long begin = get_global_id(0) * chunk, end = min(begin + chunk, n);                     \
    const global float *gt = gate + gate_off;                                                     \
    if (begin >= n || gt[UG_GATE_SKIP] != 0.0f)                                                   \
        return;                                                                                   \
    const float factor = gt[UG_GATE_FACTOR], lr = gt[UG_GATE_LR] * lr_scale;                     \
    long i = begin;                                                                               \
    bool bad = false;                                                                             \
    if (!(flags & UG_OPTIM_COPY))                                                                 \
        for (; i + 16 <= end; i += 16) {                                                          \
            UPDATE(16, float16)                                                                   \
        }                                                                                         \
    for (; i < end; i++) {                                                                        \
        UPDATE(1, float)                                                                          \
        if (flags & UG_OPTIM_COPY)                                                                \
            ug_store_dt(copy, (long)coff + i, cdt, r);                                            \
    }                                                                                             \
    ug_check_flag(check, check_off, flags & UG_OPTIM_CHECK, bad);
#define UG_SGD_UPDATE(W, T)                                                                        \
    T b = momentum != 0.0f ? UG_LOAD_##W(mbuf + boff + i) : (T)0.0f;                              \
    const T gr = UG_LOAD_##W(grad + goff + i);                                                    \
    bad |= UG_NONFINITE_##W(gr);                                                                  \
    const T r = ug_sgd_##T(UG_LOAD_##W(p + poff + i), gr * factor, &b,                            \
                           lr, wd, momentum, dampening, first, flags);                            \
    if (momentum != 0.0f)                                                                         \
        UG_STORE_##W(b, mbuf + boff + i);                                                         \
    UG_STORE_##W(r, p + poff + i);
#define UG_ADAM_UPDATE(W, T)                                                                       \
    T mv = UG_LOAD_##W(m + moff + i), vv = UG_LOAD_##W(v + voff + i);                             \
    const T gr = UG_LOAD_##W(grad + goff + i);                                                    \
    bad |= UG_NONFINITE_##W(gr);                                                                  \
    const T r = ug_adam_##T(UG_LOAD_##W(p + poff + i), gr * factor,                               \
                            &mv, &vv, lr, wd, beta1, beta2, eps, bc1, bc2, flags);                \
    UG_STORE_##W(mv, m + moff + i);                                                               \
    UG_STORE_##W(vv, v + voff + i);                                                               \
    UG_STORE_##W(r, p + poff + i);
#define UG_SGD_BODY                                                                                \
    const bool first = gate[gate_off + UG_GATE_STEP] == 1.0f;                                     \
    UG_OPTIM_LOOP(UG_SGD_UPDATE)
#define UG_ADAM_BODY                                                                               \
    const float bc1 = gate[gate_off + UG_GATE_BC1], bc2 = gate[gate_off + UG_GATE_BC2];           \
    UG_OPTIM_LOOP(UG_ADAM_UPDATE)

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
