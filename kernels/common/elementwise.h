/* The scalar math of every elementwise op, written once for every dialect.
 *
 * The CPU backend (C11), the OpenCL kernels (OpenCL C; the host puts this
 * file ahead of the .cl sources) and the HIP/CUDA kernels include it,
 * and backends/backend.h takes the op enums from it, so the op numbers and
 * formulas exist once. A new unary op is one line in UG_UNARY_OPS (and its
 * gradient, if it needs a kernel of its own, one line in UG_BINARY_OPS),
 * its gradient rule and calls in core/ops/elementwise.c, its declarations
 * in ops.h and graph.h, and its row in tests/op_table.c.
 *
 * Each op is X(NAME, expression). Unary expressions read x, alpha, beta;
 * binary ones read a, b, alpha. Arithmetic is f32 everywhere. NaN checks are
 * written v != v, which every dialect keeps without fast-math. */
#ifndef UG_KERNELS_COMMON_ELEMENTWISE_H
#define UG_KERNELS_COMMON_ELEMENTWISE_H

#if defined(__OPENCL_VERSION__)
#define UG_MATH_FN inline
#define ug_expf exp
#define ug_logf log
#define ug_sqrtf sqrt
#define ug_fabsf fabs
#define ug_tanhf tanh
#define ug_erff ug_lane_erff /* kernels/common/lane_math.h, embedded before this */
#define ug_erf_given_exp ug_lane_erf_given_exp
#define ug_log1pf log1p
#define ug_powf pow
#define ug_floorf floor
#define ug_sinf sin
#define ug_expm1f expm1
#else
#include <math.h>
#if defined(__device__) /* HIP or CUDA, the runtime header included first */
#define UG_MATH_FN static __device__ __forceinline__
#define ug_expf expf
#define ug_erff erff
#define ug_erf_given_exp(z, e) erff(z)
#define ug_tanhf tanhf
#else /* the CPU backend: calls to these would keep its loops scalar */
#include "kernels/common/lane_math.h"
#define UG_MATH_FN static inline
#define ug_expf ug_lane_expf
#define ug_erff ug_lane_erff
#define ug_erf_given_exp ug_lane_erf_given_exp
#define ug_tanhf ug_lane_tanhf
#endif
#define ug_logf logf
#define ug_sqrtf sqrtf
#define ug_fabsf fabsf
#define ug_log1pf log1pf
#define ug_powf powf
#define ug_floorf floorf
#define ug_sinf sinf
#define ug_expm1f expm1f
#endif

#define UG_SQRT1_2_F 0.70710678118654752440f
#define UG_INV_SQRT_2PI_F 0.39894228040143267794f
#define UG_SQRT_8_PI_F 1.59576912160573071175f /* 2 sqrt(2 / pi) */

/* y = f(x). COPY with differing dtypes is the cast; FILL does not read x. */
#define UG_UNARY_OPS(X)                                                        \
    X(COPY, x)                                                                 \
    X(NEG, -x)                                                                 \
    X(ABS, ug_fabsf(x))                                                        \
    X(EXP, ug_expf(x))                                                         \
    X(LOG, ug_logf(x))                                                         \
    X(SQRT, ug_sqrtf(x))                                                       \
    /* x < 0 rather than a max, so NaN stays NaN as in PyTorch */              \
    X(RELU, x < 0.0f ? 0.0f : x)                                               \
    /* min(max(x, 0), 6), PyTorch's ReLU6 (NaN kept) */                         \
    X(RELU6, ug_math_clamp(x, 0.0f, 6.0f))                                     \
    X(SIGMOID, ug_math_sigmoid(x))                                                  \
    X(TANH, ug_tanhf(x))                                                       \
    /* the exact (erf) form */                                                 \
    X(GELU, 0.5f * x * (1.0f + ug_erff(x * UG_SQRT1_2_F)))                     \
    /* the tanh approximation (PyTorch's approximate="tanh") */                \
    X(GELU_TANH, ug_math_gelu_tanh(x))                                         \
    /* x sigmoid(x), PyTorch's SiLU (swish) */                                 \
    X(SILU, x * ug_math_sigmoid(x))                                            \
    X(SCALE_SHIFT, alpha * x + beta)                                           \
    X(FILL, beta)                                                              \
    X(SQUARE, x * x)                                                           \
    X(RECIPROCAL, 1.0f / x)                                                    \
    /* min(max(x, alpha), beta), NaN kept as PyTorch's clamp */                \
    X(CLAMP, ug_math_clamp(x, alpha, beta))                                    \
    /* log(1 + e^x), linear above 20 as torch.nn.functional.softplus */        \
    X(SOFTPLUS, x > 20.0f ? x : ug_log1pf(ug_expf(x)))

/* y = a op b. The backward helpers take the incoming gradient as a and
 * what the comment names as b. */
#define UG_BINARY_OPS(X)                                                       \
    X(ADD, a + b)                                                              \
    X(SUB, a - b)                                                              \
    X(MUL, a * b)                                                              \
    X(DIV, a / b)                                                              \
    /* NaN on either side propagates, as torch.maximum/minimum */              \
    X(MAXIMUM, (a != a || a > b) ? a : b)                                      \
    X(MINIMUM, (a != a || a < b) ? a : b)                                      \
    /* b = x or relu(x); a masked NaN gives 0, as PyTorch */                   \
    X(RELU_GRAD, b > 0.0f ? a : 0.0f)                                          \
    /* b = relu6(x): PyTorch's (hardtanh's) open interval (0, 6) */            \
    X(RELU6_GRAD, b > 0.0f && b < 6.0f ? a : 0.0f)                             \
    /* b = sigmoid(x) */                                                       \
    X(SIGMOID_GRAD, a * b * (1.0f - b))                                        \
    /* b = tanh(x) */                                                          \
    X(TANH_GRAD, a * (1.0f - b * b))                                           \
    /* b = x */                                                                \
    X(GELU_GRAD, a * ug_math_gelu_grad(b))                                          \
    /* b = x */                                                                \
    X(GELU_TANH_GRAD, a * ug_math_gelu_tanh_grad(b))                           \
    /* b = x */                                                                \
    X(SILU_GRAD, a * ug_math_silu_grad(b))                                     \
    /* b = x */                                                                \
    X(ABS_GRAD, a * (float)((b > 0.0f) - (b < 0.0f)))                          \
    /* b = sqrt(x) */                                                          \
    X(SQRT_GRAD, 0.5f * a / b)                                                 \
    X(GE_MASK, a >= b ? 1.0f : 0.0f)                                           \
    X(EQUAL, a == b ? 1.0f : 0.0f)                                             \
    /* b a mask: alpha where it is not 0 */                                    \
    X(MASKED_FILL, b != 0.0f ? alpha : a)                                      \
    X(ADD_SCALED, a + alpha * b)                                               \
    /* b uniform in [0, 1), alpha the drop probability */                      \
    X(DROPOUT, b >= alpha ? a / (1.0f - alpha) : 0.0f)

#define UG_ENUM_UNARY_(NAME, EXPR) UG_UNARY_##NAME,
#define UG_ENUM_BINARY_(NAME, EXPR) UG_BINARY_##NAME,
typedef enum ug_unary_kind { UG_UNARY_OPS(UG_ENUM_UNARY_) UG_UNARY_COUNT } ug_unary_kind;
typedef enum ug_binary_kind { UG_BINARY_OPS(UG_ENUM_BINARY_) UG_BINARY_COUNT } ug_binary_kind;
#undef UG_ENUM_UNARY_
#undef UG_ENUM_BINARY_

UG_MATH_FN float ug_math_sigmoid(float x) { return 1.0f / (1.0f + ug_expf(-x)); }

UG_MATH_FN float ug_math_clamp(float x, float low, float high)
{
    const float y = x < low ? low : x;
    return y > high ? high : y;
}

/* d/dx [x Phi(x)] = Phi(x) + x phi(x); phi's exponential is the one erf's
 * tail needs, computed once where the dialect's erf can take it. */
UG_MATH_FN float ug_math_gelu_grad(float x)
{
    const float z = x * UG_SQRT1_2_F, e = ug_expf(-z * z);
    const float cdf = 0.5f * (1.0f + ug_erf_given_exp(z, e));
    return cdf + x * (UG_INV_SQRT_2PI_F * e);
}

/* GELU's tanh approximation, 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x +
 * 0.044715 x^3), computed as x sigmoid(2u), the same function: in f32 the
 * tanh form cancels where tanh u nears -1 (30% off at x = -5, 0 below
 * -5.5, where the result is -6e-9), the sigmoid form keeps f32's
 * precision down to x = -10 (-1.2e-37). */
UG_MATH_FN float ug_math_gelu_tanh(float x)
{
    return x * ug_math_sigmoid(UG_SQRT_8_PI_F * (x + 0.044715f * x * x * x));
}

/* d/dx [x s(2u)] = s + x s (1 - s) 2u' with 2u' = sqrt(8/pi) (1 + 3 *
 * 0.044715 x^2). Where s (1 - s) is 0 the second term is too, even where
 * x^2 overflows (0 * inf would be NaN). */
UG_MATH_FN float ug_math_gelu_tanh_grad(float x)
{
    const float s = ug_math_sigmoid(UG_SQRT_8_PI_F * (x + 0.044715f * x * x * x));
    const float t = s * (1.0f - s);
    return t == 0.0f ? s : s + x * t * UG_SQRT_8_PI_F * (1.0f + 0.134145f * x * x);
}

/* d/dx [x s(x)] = s(x) (1 + x (1 - s(x))) */
UG_MATH_FN float ug_math_silu_grad(float x)
{
    const float s = ug_math_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* One op chosen at run time: the GPU kernels switch on a launch-uniform op,
 * which costs little next to the memory traffic. */
UG_MATH_FN float ug_unary_op(int op, float x, float alpha, float beta)
{
    switch (op) {
#define UG_CASE_(NAME, EXPR) \
    case UG_UNARY_##NAME: return (EXPR);
        UG_UNARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
    return x;
}

UG_MATH_FN float ug_binary_op(int op, float a, float b, float alpha)
{
    switch (op) {
#define UG_CASE_(NAME, EXPR) \
    case UG_BINARY_##NAME: return (EXPR);
        UG_BINARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
    return a;
}

#endif
