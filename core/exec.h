/* Launching kernels into tensors that already exist. The eager ops allocate
 * their result and call these; the training graph calls them on memory it
 * planned. Arguments are assumed valid (the callers check them). */
#ifndef UG_CORE_EXEC_H
#define UG_CORE_EXEC_H

#include "core/internal.h"

/* NumPy broadcast of two shapes into out (ndim in *ndim); op names the caller. */
ug_status ug_broadcast_shape(int a_ndim, const int64_t *a_shape, int b_ndim, const int64_t *b_shape,
                             const char *op, int *ndim, int64_t *out);

/* y = post(a op b) with broadcasting; y has the broadcast shape. */
ug_status ug_exec_binary(ug_binary_kind op, ug_unary_kind post, float alpha, ug_tensor *y,
                         const ug_tensor *a, const ug_tensor *b);
/* y = f(x), same element count, contiguous. */
ug_status ug_exec_unary(ug_unary_kind op, float alpha, float beta, ug_tensor *y, const ug_tensor *x);
/* y = alpha * x broadcast to y's shape. */
ug_status ug_exec_expand(ug_tensor *y, const ug_tensor *x, float alpha);
/* y = x with its last two axes swapped. */
ug_status ug_exec_transpose(ug_tensor *y, const ug_tensor *x);
/* x [outer, len, inner] reduced over len into y. */
ug_status ug_exec_reduce(ug_reduce_kind op, ug_tensor *y, const ug_tensor *x, int64_t outer,
                         int64_t len, int64_t inner);
/* Row-major GEMM on the tensors' last two axes; see ug_gemm_args. */
ug_status ug_exec_matmul(ug_tensor *c, const ug_tensor *a, const ug_tensor *b, bool trans_a,
                         bool trans_b, float alpha, float beta);
ug_status ug_exec_softmax(bool log, ug_tensor *y, const ug_tensor *x);
ug_status ug_exec_random(bool normal, float p0, float p1, uint64_t seed, uint64_t offset,
                         ug_tensor *y);

/* Launch helpers that report the failing op and device. */
ug_status ug_kernel_failed(ug_status status, const char *op, const ug_device *device);

#endif
