/* The per-channel math of batch normalisation, written once for every
 * dialect (C11, OpenCL C, HIP/CUDA), like elementwise.h. Backends differ
 * only in how they sum a channel (the CPU adds blocks in double; the GPUs
 * reduce a work-group or block in f32) and call these for the rest, so
 * the formulas, PyTorch's, exist once.
 *
 * Layout: x is [n, c, inner]; a channel's count = n * inner values are n
 * runs of `inner` contiguous elements. */
#ifndef UG_KERNELS_COMMON_BATCHNORM_H
#define UG_KERNELS_COMMON_BATCHNORM_H

#if defined(__OPENCL_VERSION__) /* elementwise.h comes first in the program */
typedef long ug_bn_i64;
#else
#include <stdint.h>

#include "kernels/common/elementwise.h" /* UG_MATH_FN, ug_sqrtf */
typedef int64_t ug_bn_i64;
#endif

/* The offset of the channel's j-th value (0 <= j < count). */
UG_MATH_FN ug_bn_i64 ug_bn_index(ug_bn_i64 j, ug_bn_i64 channel, ug_bn_i64 channels,
                                 ug_bn_i64 inner)
{
    return (j / inner * channels + channel) * inner + j % inner;
}

/* 1 / sqrt(var + eps): var is the biased variance in training (the sum of
 * squared deviations over count), the running variance in evaluation. */
UG_MATH_FN float ug_bn_rstd(float var, float eps) { return 1.0f / ug_sqrtf(var + eps); }

/* A running statistic's update; the running variance takes the unbiased
 * batch variance (squared deviations over count - 1), as PyTorch. */
UG_MATH_FN float ug_bn_running(float running, float momentum, float batch)
{
    return (1.0f - momentum) * running + momentum * batch;
}

/* y = x * scale + shift, the normalisation and the affine step in one. */
UG_MATH_FN float ug_bn_scale(float rstd, float weight) { return rstd * weight; }
UG_MATH_FN float ug_bn_shift(float mean, float scale, float bias) { return bias - mean * scale; }

/* The output, with the ReLU the graph fused into it applied as
 * elementwise.h's RELU does (x < 0 ? 0 : x: NaN passes). */
UG_MATH_FN float ug_bn_output(float x, float scale, float shift, bool relu)
{
    const float y = x * scale + shift;
    return relu && y < 0.0f ? 0.0f : y;
}

/* dx from dy and xhat = (x - mean) rstd, with k = rstd * weight. In
 * training the batch's statistics depend on x: dx = k (dy - mean(dy) - xhat
 * mean(dy xhat)); in evaluation they are constants and both means are 0.
 * The weight's gradient is the channel's sum of dy xhat, the bias's of dy. */
UG_MATH_FN float ug_bn_input_grad(float k, float dy, float xhat, float mean_dy, float mean_dy_xhat)
{
    return k * (dy - mean_dy - xhat * mean_dy_xhat);
}

#endif
