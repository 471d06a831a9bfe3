/* The optimizer's per-step scalars, decided on the device: the learning
 * rate from its schedule, the step count and Adam's bias corrections, the
 * gradients' clipping factor and dynamic loss scaling (torch.cuda.amp.
 * GradScaler's update). Written once for every dialect (the CPU backend,
 * OpenCL C after elementwise.h, and HIP/CUDA). One work-item runs it per
 * optimizer step, before any parameter is updated, so a step needs neither
 * a host synchronisation nor a value from the host: the same launches
 * replay every step (a captured CUDA or HIP graph). */
#ifndef UG_KERNELS_COMMON_OPTIM_STEP_H
#define UG_KERNELS_COMMON_OPTIM_STEP_H

#if !defined(__OPENCL_VERSION__)
#include "kernels/common/elementwise.h"
#endif

/* The optimizer's state, f32 on the device (its counts are exact up to
 * 2^24 and stay there after): the loss scale, clean steps since it last
 * changed and steps skipped (with loss scaling), the updates taken
 * (skipped ones not counted: Adam's t) and the steps made (skipped ones
 * counted: the schedule's position, as a PyTorch scheduler stepped every
 * iteration). */
enum { UG_STEP_SCALE = 0, UG_STEP_CLEAN, UG_STEP_SKIPPED, UG_STEP_TAKEN, UG_STEP_MADE, UG_STEP_STATE_SIZE };
/* The largest count f32 holds exactly. */
enum { UG_STEP_MAX_COUNT = 1 << 24 };
/* The scale stays a normal f32, so 1 / scale is finite: the smallest normal
 * (FLT_MIN, spelled out for every dialect). */
#define UG_STEP_MIN_SCALE 1.17549435e-38f
/* What each parameter's update reads: the factor that unscales and clips
 * its gradient, whether to skip, the update t it is (from 1), Adam's bias
 * corrections 1 - beta1^t and 1 - beta2^t at it, and the learning rate,
 * computed once here rather than by every element's update (where a pow
 * keeps POCL from vectorizing the kernel: 4x slower). */
enum { UG_GATE_FACTOR = 0, UG_GATE_SKIP, UG_GATE_STEP, UG_GATE_BC1, UG_GATE_BC2, UG_GATE_LR, UG_GATE_SIZE };
/* Schedules (ug_schedule's values). */
enum { UG_STEP_CONSTANT = 0, UG_STEP_DECAY, UG_STEP_COSINE };

#define UG_HALF_PI_F 1.57079632679489661923f

/* The learning rate at step `step` (from 0) of a schedule:
 *   decay:  lr * gamma^floor(step / step_size)
 *   cosine: warm-up lr * (step + 1) / warmup, then from lr down to min_lr
 *           over the steps up to total, as 0.5 (1 + cos(pi p)) with p the
 *           progress; written sin^2(pi/2 (1 - p)) with 1 - p from exact
 *           integers, which stays accurate to the last steps where the
 *           rate nears min_lr (cos(pi p) near -1 loses its digits). */
UG_MATH_FN float ug_schedule_lr(int schedule, float lr, float gamma, float step_size, float warmup,
                                float total, float min_lr, float step)
{
    if (schedule == UG_STEP_DECAY)
        return lr * ug_powf(gamma, ug_floorf(step / step_size));
    if (schedule != UG_STEP_COSINE)
        return lr;
    if (step < warmup)
        return lr * ((step + 1.0f) / warmup);
    const float left = step < total ? (total - step) / (total - warmup) : 0.0f;
    const float s = ug_sinf(UG_HALF_PI_F * left);
    return min_lr + (lr - min_lr) * (s * s);
}

/* The gate's update t (saturated at UG_STEP_MAX_COUNT) and the bias
 * corrections at it, 1 - beta^t as -expm1(t log beta): accurate to a few
 * ulps where 1 - pow loses digits (t small, beta near 1); beta 0 (SGD's)
 * gives 1. */
UG_MATH_FN void ug_step_gate_count(float *gate, float taken, float beta1, float beta2)
{
    gate[UG_GATE_STEP] = taken;
    gate[UG_GATE_BC1] = beta1 > 0.0f ? -ug_expm1f(taken * ug_logf(beta1)) : 1.0f;
    gate[UG_GATE_BC2] = beta2 > 0.0f ? -ug_expm1f(taken * ug_logf(beta2)) : 1.0f;
}

/* What one optimizer step decides from, constant across steps. */
typedef struct ug_step_rule {
    int schedule;
    float lr, gamma, step_size, warmup, total, min_lr;
    int scaling; /* dynamic loss scaling, with growth, backoff, interval */
    float growth, backoff, growth_interval;
    float max_norm; /* > 0: clip the gradients' global norm to it */
    float beta1, beta2;
} ug_step_rule;

/* One step: state and gate point to private copies (OpenCL C's default
 * address space). sum_squares is over the (scaled) gradients, read only
 * with clipping or scaling: inf - inf and NaN - NaN being NaN, one
 * non-finite gradient makes the norm non-finite. */
UG_MATH_FN void ug_optim_step(float *state, float *gate, float sum_squares, const ug_step_rule *r)
{
    const float made = state[UG_STEP_MADE];
    gate[UG_GATE_LR] = ug_schedule_lr(r->schedule, r->lr, r->gamma, r->step_size, r->warmup, r->total,
                                      r->min_lr, made);
    state[UG_STEP_MADE] = made + 1.0f;
    const float scale = r->scaling ? state[UG_STEP_SCALE] : 1.0f;
    /* The unscaled gradients' norm. GradScaler checks the gradients after
     * unscaling them, so a tiny scale can never turn finite gradients into
     * an infinite update. */
    const float norm = ug_sqrtf(sum_squares) * (1.0f / scale);
    if (r->scaling && norm - norm != 0.0f) {
        const float reduced = scale * r->backoff;
        state[UG_STEP_SCALE] = reduced >= UG_STEP_MIN_SCALE ? reduced : UG_STEP_MIN_SCALE;
        state[UG_STEP_CLEAN] = 0.0f;
        state[UG_STEP_SKIPPED] += 1.0f;
        gate[UG_GATE_FACTOR] = 0.0f;
        gate[UG_GATE_SKIP] = 1.0f;
        ug_step_gate_count(gate, state[UG_STEP_TAKEN], r->beta1, r->beta2);
        return;
    }
    float factor = 1.0f / scale;
    if (r->max_norm > 0.0f) { /* clip_grad_norm_: a NaN norm makes a NaN factor, as PyTorch's */
        const float coef = r->max_norm / (norm + 1e-6f);
        factor *= coef > 1.0f ? 1.0f : coef;
    }
    state[UG_STEP_TAKEN] += 1.0f;
    gate[UG_GATE_FACTOR] = factor;
    gate[UG_GATE_SKIP] = 0.0f;
    ug_step_gate_count(gate, state[UG_STEP_TAKEN], r->beta1, r->beta2);
    if (!r->scaling)
        return;
    const float clean = state[UG_STEP_CLEAN] + 1.0f;
    if (clean >= r->growth_interval) {
        const float grown = scale * r->growth;
        state[UG_STEP_SCALE] = grown - grown == 0.0f ? grown : scale; /* only to a finite scale */
        state[UG_STEP_CLEAN] = 0.0f;
    } else {
        state[UG_STEP_CLEAN] = clean;
    }
}

#endif
