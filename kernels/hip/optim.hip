/* One parameter's optimizer step, element-wise, following PyTorch's
 * single-tensor (foreach=False) implementations step by step:
 *   SGD:   g += wd p; buf = first ? g : momentum buf + (1 - dampening) g;
 *          g = nesterov ? g + momentum buf : buf; p -= lr g
 *   Adam:  g += wd p; m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g g;
 *          p -= (lr / bc1) (m / (sqrt(v) / sqrt(bc2) + eps))
 *   AdamW: p *= 1 - lr wd, then Adam without the L2 term.
 * With a copy, the new p is also stored there in f16 or bf16 (the half
 * weights a mixed-precision graph reads), rounded once from the f32 p. */
#include "kernels/hip/common.h"

typedef struct optim_k {
    int kind;
    bool nesterov;
    int copy_t;
    float *p, *s0, *s1;
    void *copy; /* NULL: no half copy */
    const float *g, *gate;
    int64_t n;
    float wd, momentum, dampening, beta1, beta2, eps;
} optim_k;

/* torch.lerp: the form depends on the weight, for accuracy at both ends. */
UG_DEV float ug_lerp(float a, float b, float w)
{
    return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

__global__ void ug_optim_kernel(optim_k k)
{
    if (k.gate[UG_GATE_SKIP] != 0.0f)
        return;
    const float scale = k.gate[UG_GATE_FACTOR], lr = k.gate[UG_GATE_LR];
    const bool first_step = k.gate[UG_GATE_STEP] == 1.0f;
    const float bc1 = k.gate[UG_GATE_BC1], bc2 = k.gate[UG_GATE_BC2];
    UG_FOR(i, k.n, int64_t) {
        float p = k.p[i], g = k.g[i] * scale;
        if (k.kind == UG_OPTIM_SGD) {
            if (k.wd != 0.0f)
                g += k.wd * p;
            if (k.momentum != 0.0f) {
                const float buf = first_step ? g : k.momentum * k.s0[i] + (1.0f - k.dampening) * g;
                k.s0[i] = buf;
                g = k.nesterov ? g + k.momentum * buf : buf;
            }
            p -= lr * g;
        } else {
            if (k.kind == UG_OPTIM_ADAMW)
                p *= 1.0f - lr * k.wd;
            else if (k.wd != 0.0f)
                g += k.wd * p;
            const float m = ug_lerp(k.s0[i], g, 1.0f - k.beta1);
            const float v = k.beta2 * k.s1[i] + (1.0f - k.beta2) * (g * g);
            k.s0[i] = m;
            k.s1[i] = v;
            const float denom = sqrtf(v) / sqrtf(bc2) + k.eps;
            p -= (lr / bc1) * (m / denom);
        }
        k.p[i] = p;
        if (k.copy)
            ug_st(k.copy, k.copy_t, i, p);
    }
}

/* One thread: kernels/common/optim_step.h on the state, the sum and the
 * gate. */
__global__ void ug_optim_step_kernel(float *state_out, float *gate_out, const float *sum_squares,
                                     ug_step_rule rule)
{
    float state[UG_STEP_STATE_SIZE], gate[UG_GATE_SIZE];
    for (int i = 0; i < UG_STEP_STATE_SIZE; i++)
        state[i] = state_out[i];
    ug_optim_step(state, gate, sum_squares ? sum_squares[0] : 0.0f, &rule);
    for (int i = 0; i < UG_STEP_STATE_SIZE; i++)
        state_out[i] = state[i];
    for (int i = 0; i < UG_GATE_SIZE; i++)
        gate_out[i] = gate[i];
}

ug_status ug_hip_optimizer(ug_bdev *dev, const ug_optim_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    if (a->kind == UG_OPTIM_STEP) {
        float *state = (float *)ug_hip_ptr(&a->state0), *gate = (float *)ug_hip_ptr(&a->param);
        const float *sum = (const float *)ug_hip_ptr(&a->grad);
        if (!state || !gate)
            return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer step buffers missing",
                                          UG_HIP_BACKEND);
        ug_optim_step_kernel<<<1, 1, 0, ug_hip_current(dev)->stream>>>(state, gate, sum, a->rule);
        return ug_hip_launched("optimizer step");
    }
    optim_k k;
    k.kind = a->kind;
    k.nesterov = a->nesterov;
    k.p = (float *)ug_hip_ptr(&a->param);
    k.g = (const float *)ug_hip_ptr(&a->grad);
    k.s0 = (float *)ug_hip_ptr(&a->state0);
    k.s1 = (float *)ug_hip_ptr(&a->state1);
    k.gate = (const float *)ug_hip_ptr(&a->gate);
    k.copy = ug_hip_ptr(&a->copy);
    k.copy_t = a->copy.dtype;
    k.n = a->n;
    k.wd = a->weight_decay;
    k.momentum = a->momentum;
    k.dampening = a->dampening;
    k.beta1 = a->beta1;
    k.beta2 = a->beta2;
    k.eps = a->eps;
    if (!k.gate || (a->kind == UG_OPTIM_SGD && a->momentum != 0.0f && !k.s0) ||
        (a->kind != UG_OPTIM_SGD && (!k.s0 || !k.s1)))
        return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer state missing",
                                      UG_HIP_BACKEND);
    ug_optim_kernel<<<ug_hip_blocks(a->n, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("optimizer");
}
