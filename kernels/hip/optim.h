/* One parameter's optimizer step, element-wise, following PyTorch's
 * single-tensor (foreach=False) implementations step by step:
 *   SGD:   g += wd p; buf = first ? g : momentum buf + (1 - dampening) g;
 *          g = nesterov ? g + momentum buf : buf; p -= lr g
 *   Adam:  g += wd p; m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g g;
 *          p -= (lr / bc1) (m / (sqrt(v) / sqrt(bc2) + eps))
 *   AdamW: p *= 1 - lr wd, then Adam without the L2 term.
 * With a copy, the new p is also stored there in f16 or bf16 (the half
 * weights a mixed-precision graph reads), rounded once from the f32 p.
 * Device code: backends/hip/optim.hip launches it. */
#ifndef UG_KERNELS_HIP_OPTIM_H
#define UG_KERNELS_HIP_OPTIM_H

#include "kernels/hip/common.h"

/* What every tensor's update shares. */
typedef struct optim_k {
    int kind;
    bool nesterov;
    const float *gate;
    float momentum, dampening, beta1, beta2, eps;
} optim_k;

/* Up to UG_OPTIM_TENSORS parameters updated by one launch (PyTorch's
 * multi-tensor apply), passed by value: tensor t takes blocks
 * first_block[t] to first_block[t + 1] - 1, one element a thread. */
enum { UG_OPTIM_TENSORS = 16 };
typedef struct optim_tensors {
    int count;
    float *p[UG_OPTIM_TENSORS], *s0[UG_OPTIM_TENSORS], *s1[UG_OPTIM_TENSORS];
    const float *g[UG_OPTIM_TENSORS];
    void *copy[UG_OPTIM_TENSORS]; /* NULL: no half copy */
    float *check[UG_OPTIM_TENSORS]; /* a numeric check of the gradient, NULL: none */
    int copy_t[UG_OPTIM_TENSORS];
    int64_t n[UG_OPTIM_TENSORS];
    /* Each tensor's parameter group's weight decay and rate scale (the
     * rate is the gate's times it). */
    float wd[UG_OPTIM_TENSORS], lr_scale[UG_OPTIM_TENSORS];
    unsigned first_block[UG_OPTIM_TENSORS + 1];
} optim_tensors;

/* torch.lerp: the form depends on the weight, for accuracy at both ends. */
UG_DEV float ug_lerp(float a, float b, float w)
{
    return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

__global__ void ug_optim_kernel(optim_k k, optim_tensors t)
{
    if (k.gate[UG_GATE_SKIP] != 0.0f)
        return;
    int ti = 0;
    while (blockIdx.x >= t.first_block[ti + 1])
        ti++;
    const int64_t i = (int64_t)(blockIdx.x - t.first_block[ti]) * blockDim.x + threadIdx.x;
    if (i >= t.n[ti])
        return;
    float *P = t.p[ti], *S0 = t.s0[ti], *S1 = t.s1[ti];
    const float scale = k.gate[UG_GATE_FACTOR], lr = k.gate[UG_GATE_LR] * t.lr_scale[ti], wd = t.wd[ti];
    const float raw = t.g[ti][i];
    ug_check_flag(t.check[ti], ug_nonfinite(raw));
    float p = P[i], g = raw * scale;
    if (k.kind == UG_OPTIM_SGD) {
        if (wd != 0.0f)
            g += wd * p;
        if (k.momentum != 0.0f) {
            const bool first_step = k.gate[UG_GATE_STEP] == 1.0f;
            const float buf = first_step ? g : k.momentum * S0[i] + (1.0f - k.dampening) * g;
            S0[i] = buf;
            g = k.nesterov ? g + k.momentum * buf : buf;
        }
        p -= lr * g;
    } else {
        if (k.kind == UG_OPTIM_ADAMW)
            p *= 1.0f - lr * wd;
        else if (wd != 0.0f)
            g += wd * p;
        const float m = ug_lerp(S0[i], g, 1.0f - k.beta1);
        const float v = k.beta2 * S1[i] + (1.0f - k.beta2) * (g * g);
        S0[i] = m;
        S1[i] = v;
        const float denom = sqrtf(v) / sqrtf(k.gate[UG_GATE_BC2]) + k.eps;
        p -= (lr / k.gate[UG_GATE_BC1]) * (m / denom);
    }
    P[i] = p;
    if (t.copy[ti])
        ug_st(t.copy[ti], t.copy_t[ti], i, p);
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

#endif
