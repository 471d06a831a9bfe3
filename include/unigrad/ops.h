/* Eager operations. Each runs on its inputs' device, is queued
 * asynchronously, and returns a new tensor in *out (free it with
 * ug_tensor_free). A dtypes note in parentheses lists the dtypes an op
 * takes; the conformance suite runs each op in each of them and checks the
 * notes against its tables. Elementwise ops (dtypes: f32, f16, bf16) compute in
 * f32 and return their input's dtype. */
#ifndef UNIGRAD_OPS_H
#define UNIGRAD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elementwise binary with NumPy broadcasting; both operands have one dtype. */
UG_API ug_status ug_add(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
UG_API ug_status ug_sub(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
UG_API ug_status ug_mul(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
UG_API ug_status ug_div(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
UG_API ug_status ug_maximum(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
UG_API ug_status ug_minimum(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
/* 1 where a == b, else 0. */
UG_API ug_status ug_equal(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
/* value where mask is not 0, else x (torch.Tensor.masked_fill): mask in
 * x's dtype, the two broadcasting together; value may be -INFINITY. */
UG_API ug_status ug_masked_fill(const ug_tensor *x, const ug_tensor *mask, float value, ug_tensor **out);

/* Elementwise unary. gelu is the exact (erf) form; gelu_tanh its tanh
 * approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (PyTorch's gelu(approximate="tanh"), GPT-2's). */
UG_API ug_status ug_neg(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_abs(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_exp(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_log(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_sqrt(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_relu(const ug_tensor *x, ug_tensor **out);
/* min(max(x, 0), 6) (nn.ReLU6, MobileNet's activation). */
UG_API ug_status ug_relu6(const ug_tensor *x, ug_tensor **out);
/* min(max(x, low), high), NaN kept (torch.clamp); low <= high. */
UG_API ug_status ug_clamp(const ug_tensor *x, float low, float high, ug_tensor **out);
UG_API ug_status ug_sigmoid(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_tanh(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_gelu(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_gelu_tanh(const ug_tensor *x, ug_tensor **out);
/* x * sigmoid(x) (SiLU, also called swish). */
UG_API ug_status ug_silu(const ug_tensor *x, ug_tensor **out);
/* log(1 + exp(x)), x itself above 20 (torch.nn.functional.softplus). */
UG_API ug_status ug_softplus(const ug_tensor *x, ug_tensor **out);
/* scale * x + shift */
UG_API ug_status ug_scale_shift(const ug_tensor *x, float scale, float shift, ug_tensor **out);

/* Writes value into every element of x, in place (dtypes: f32, f16, bf16). */
UG_API ug_status ug_fill(ug_tensor *x, float value);

/* Counter-based (Philox 4x32-10) random numbers, in place into a float
 * tensor (dtypes: f32, f16, bf16). Element i takes counter offset + i, so
 * every device draws the same numbers for the same seed and offset. */
UG_API ug_status ug_random_uniform(ug_tensor *x, uint64_t seed, uint64_t offset,
                            float low, float high);
UG_API ug_status ug_random_normal(ug_tensor *x, uint64_t seed, uint64_t offset,
                           float mean, float stddev);

typedef enum ug_reduce_op {
    UG_REDUCE_SUM = 0,
    UG_REDUCE_MEAN,
    UG_REDUCE_MAX,
    UG_REDUCE_ARGMAX, /* i32 result: index of the first maximum */
    UG_REDUCE_SUMSQ   /* sum of squares */
} ug_reduce_op;

/* Reduces over one axis (negative counts from the end), or over every
 * element when all is true (a scalar result). keepdim keeps the reduced axis
 * as size 1. Sums accumulate in f32 with pairwise/tree order (dtypes: f32,
 * f16, bf16; the result has x's dtype, argmax's is i32). */
UG_API ug_status ug_reduce(const ug_tensor *x, ug_reduce_op op, int axis, bool all,
                    bool keepdim, ug_tensor **out);
UG_API ug_status ug_sum(const ug_tensor *x, int axis, ug_tensor **out);
UG_API ug_status ug_sum_all(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_mean(const ug_tensor *x, int axis, ug_tensor **out);
UG_API ug_status ug_mean_all(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_max(const ug_tensor *x, int axis, ug_tensor **out);
UG_API ug_status ug_argmax(const ug_tensor *x, int axis, ug_tensor **out);

/* Matrix product of the last two axes, optionally transposed: a is [..,M,K]
 * (or [..,K,M] with transpose_a), b is [..,K,N] (or [..,N,K]). Batched when
 * either has more than two axes; a 2-D operand is shared by every batch
 * (dtypes: f32, f16, bf16; the products accumulate in f32). */
UG_API ug_status ug_matmul(const ug_tensor *a, const ug_tensor *b, bool transpose_a,
                    bool transpose_b, ug_tensor **out);

/* Softmax and log-softmax over the last axis, computed in f32
 * (dtypes: f32, f16, bf16). */
UG_API ug_status ug_softmax(const ug_tensor *x, ug_tensor **out);
UG_API ug_status ug_log_softmax(const ug_tensor *x, ug_tensor **out);

/* numpy.take(x, index, axis): the entries of x along axis at the
 * positions index holds (i32 or i64, any shape), so y's shape is x's with
 * that axis replaced by index's (a [B, T] index of a [V, C] table, axis 0,
 * is [B, T, C]: an embedding lookup). Any dtype; the values are moved
 * exactly. An index outside [0, x's size along axis) is not checked on the
 * host (that would wait for the device): its entries come out with all
 * bits set, NaN in a float dtype, -1 in an integer one. */
UG_API ug_status ug_take(const ug_tensor *x, const ug_tensor *index, int axis, ug_tensor **out);

/* torch.index_copy: base with its entries index[j] along axis replaced by
 * source's entry j (index 1-D, i32 or i64; source base's shape with the
 * index's length along axis; any dtype, values moved exactly). An index
 * outside the axis is skipped; where indices repeat, one of their entries
 * lands, which one unspecified (as PyTorch's). A key-value cache's write. */
UG_API ug_status ug_index_copy(const ug_tensor *base, int axis, const ug_tensor *index, const ug_tensor *source,
                               ug_tensor **out);

/* Layout (any dtype; values move exactly; each result contiguous).
 * Axes count from the end when negative.
 * permute: y's axis i is x's axis order[i], for a permutation of x's naxes
 *   axes (torch.permute).
 * slice: entries [start, start + length) of axis.
 * split: x cut along axis into count parts (1 to 1024) of sizes[i] entries
 *   (NULL: equal parts, the count dividing the axis), each a new tensor in
 *   outs[i]; on failure none is left.
 * concat: the inputs joined along axis; all sizes but that axis's agree.
 * stack: count inputs of one shape (1 to 1024) along a new axis, which is
 *   axis of the result's ndim + 1.
 * broadcast_to: x broadcast to shape as NumPy does (a contiguous copy). */
UG_API ug_status ug_permute(const ug_tensor *x, int naxes, const int *order, ug_tensor **out);
UG_API ug_status ug_slice(const ug_tensor *x, int axis, int64_t start, int64_t length, ug_tensor **out);
UG_API ug_status ug_split(const ug_tensor *x, int axis, int count, const int64_t *sizes, ug_tensor **outs);
UG_API ug_status ug_concat(int count, const ug_tensor *const *xs, int axis, ug_tensor **out);
UG_API ug_status ug_stack(int count, const ug_tensor *const *xs, int axis, ug_tensor **out);
UG_API ug_status ug_broadcast_to(const ug_tensor *x, int ndim, const int64_t *shape, ug_tensor **out);

/* Swaps the last two axes (a contiguous copy). */
UG_API ug_status ug_transpose(const ug_tensor *x, ug_tensor **out);

/* Casts from any dtype to a float one (dtypes: f32, f16, bf16), rounding
 * through f32 (an i32 past 2^24 rounds there first), or to x's own dtype
 * (a copy of the bits). */
UG_API ug_status ug_cast(const ug_tensor *x, ug_dtype dtype, ug_tensor **out);

/* A contiguous copy on the same device. */
UG_API ug_status ug_clone(const ug_tensor *x, ug_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
