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
/* What each parameter's update reads: the factor that unscales (and clips)
 * its gradient, whether to skip, and the optimizer step it is (from 1).
 * The factor comes first, where the update kernels read a clipping factor. */
enum { UG_GATE_FACTOR = 0, UG_GATE_SKIP, UG_GATE_STEP, UG_GATE_SIZE };

/* state and gate point to private copies (OpenCL C's default address
 * space). sum_squares is over the scaled gradients: inf - inf and
 * NaN - NaN being NaN, one non-finite gradient makes it non-finite. */
UG_MATH_FN void ug_scaler_update(float *state, float *gate, float sum_squares, float growth,
                                 float backoff, float growth_interval, float max_norm)
{
    const float scale = state[UG_SCALER_SCALE];
    if (sum_squares - sum_squares != 0.0f) {
        state[UG_SCALER_SCALE] = scale * backoff;
        state[UG_SCALER_TRACKER] = 0.0f;
        state[UG_SCALER_SKIPPED] += 1.0f;
        gate[UG_GATE_FACTOR] = 0.0f;
        gate[UG_GATE_SKIP] = 1.0f;
        gate[UG_GATE_STEP] = state[UG_SCALER_STEPS];
        return;
    }
    float factor = 1.0f / scale;
    if (max_norm > 0.0f) { /* clip_grad_norm_ of the unscaled gradients */
        const float coef = max_norm / (ug_sqrtf(sum_squares) * factor + 1e-6f);
        factor *= coef < 1.0f ? coef : 1.0f;
    }
    state[UG_SCALER_STEPS] += 1.0f;
    gate[UG_GATE_FACTOR] = factor;
    gate[UG_GATE_SKIP] = 0.0f;
    gate[UG_GATE_STEP] = state[UG_SCALER_STEPS];
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
