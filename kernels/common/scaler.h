/* Dynamic loss scaling, torch.cuda.amp.GradScaler's update, written once
 * for every dialect (the CPU backend, OpenCL C after elementwise.h, and
 * HIP/CUDA). One work-item runs it per optimizer step, once the gradients'
 * sum of squares is known and before any parameter is updated, so the step
 * needs no host synchronisation. */
#ifndef UG_KERNELS_COMMON_SCALER_H
#define UG_KERNELS_COMMON_SCALER_H

#if !defined(__OPENCL_VERSION__)
#include "kernels/common/elementwise.h"
#endif

/* The scaler's state, f32 on the device (its counts are exact up to 2^24):
 * the loss scale, clean steps since it last changed, steps skipped, and
 * the optimizer steps taken (skipped ones not counted). */
enum { UG_SCALER_SCALE = 0, UG_SCALER_TRACKER, UG_SCALER_SKIPPED, UG_SCALER_STEPS, UG_SCALER_SIZE };
/* The largest count f32 holds exactly. */
enum { UG_SCALER_MAX_COUNT = 1 << 24 };
/* The scale stays a normal f32, so 1 / scale is finite: the smallest normal
 * (FLT_MIN, spelled out for every dialect). */
#define UG_SCALER_MIN_SCALE 1.17549435e-38f
/* What each parameter's update reads: the factor that unscales (and clips)
 * its gradient, whether to skip, the optimizer step t it is (from 1), and
 * Adam's bias corrections 1 - beta1^t and 1 - beta2^t at it, computed once
 * here rather than by every element's update (where a pow keeps POCL from
 * vectorizing the kernel: 4x slower). The factor comes first, where the
 * update kernels read a clipping factor. */
enum { UG_GATE_FACTOR = 0, UG_GATE_SKIP, UG_GATE_STEP, UG_GATE_BC1, UG_GATE_BC2, UG_GATE_SIZE };

/* The gate's step and the bias corrections at it (beta 0: SGD's, unused). */
UG_MATH_FN void ug_scaler_gate_step(float *gate, float step, float beta1, float beta2)
{
    gate[UG_GATE_STEP] = step;
    gate[UG_GATE_BC1] = 1.0f - ug_powf(beta1, step);
    gate[UG_GATE_BC2] = 1.0f - ug_powf(beta2, step);
}

/* state and gate point to private copies (OpenCL C's default address
 * space). sum_squares is over the scaled gradients: inf - inf and
 * NaN - NaN being NaN, one non-finite gradient makes the norm non-finite. */
UG_MATH_FN void ug_scaler_update(float *state, float *gate, float sum_squares, float growth,
                                 float backoff, float growth_interval, float max_norm, float beta1,
                                 float beta2)
{
    const float scale = state[UG_SCALER_SCALE];
    /* The unscaled gradients' norm: the step is skipped when it is not
     * finite, as GradScaler checks the gradients after unscaling them, so
     * a tiny scale can never turn finite gradients into an infinite update. */
    const float norm = ug_sqrtf(sum_squares) * (1.0f / scale);
    if (norm - norm != 0.0f) {
        const float reduced = scale * backoff;
        state[UG_SCALER_SCALE] = reduced >= UG_SCALER_MIN_SCALE ? reduced : UG_SCALER_MIN_SCALE;
        state[UG_SCALER_TRACKER] = 0.0f;
        state[UG_SCALER_SKIPPED] += 1.0f;
        gate[UG_GATE_FACTOR] = 0.0f;
        gate[UG_GATE_SKIP] = 1.0f;
        ug_scaler_gate_step(gate, state[UG_SCALER_STEPS], beta1, beta2);
        return;
    }
    float factor = 1.0f / scale;
    if (max_norm > 0.0f) { /* clip_grad_norm_ of the unscaled gradients */
        const float coef = max_norm / (norm + 1e-6f);
        factor *= coef < 1.0f ? coef : 1.0f;
    }
    state[UG_SCALER_STEPS] += 1.0f;
    gate[UG_GATE_FACTOR] = factor;
    gate[UG_GATE_SKIP] = 0.0f;
    ug_scaler_gate_step(gate, state[UG_SCALER_STEPS], beta1, beta2);
    const float clean = state[UG_SCALER_TRACKER] + 1.0f;
    if (clean >= growth_interval) {
        const float grown = scale * growth;
        state[UG_SCALER_SCALE] = grown - grown == 0.0f ? grown : scale; /* only to a finite scale */
        state[UG_SCALER_TRACKER] = 0.0f;
    } else {
        state[UG_SCALER_TRACKER] = clean;
    }
}

#endif
