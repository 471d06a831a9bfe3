/* Layers: helpers that create a layer's named parameters in the graph's
 * model (or reuse them, when another graph made them) and add its ops. */
#ifndef UNIGRAD_NN_H
#define UNIGRAD_NN_H

#include "unigrad/conv.h"
#include "unigrad/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x W^T + b with W [out, in] and b [out] named "<name>.weight" and
 * "<name>.bias", initialised as PyTorch's nn.Linear: Kaiming-uniform
 * weights (bound 1/sqrt(in)) and uniform bias in [-1/sqrt(in), 1/sqrt(in)].
 * x is [rows, in]. */
UG_API ug_status ug_nn_linear(ug_graph *g, const char *name, ug_value *x, int64_t out_features,
                       ug_value **out);
/* LayerNorm over the last axis: "<name>.weight" (ones), "<name>.bias" (zeros). */
UG_API ug_status ug_nn_layernorm(ug_graph *g, const char *name, ug_value *x, float eps, ug_value **out);
/* PyTorch's nn.Conv2d on x [N, in, H, W]: "<name>.weight"
 * [out, in / groups, kernel_h, kernel_w], Kaiming-uniform with a = sqrt(5)
 * (bound 1/sqrt(fan_in), fan_in = in / groups * kernel_h * kernel_w), and
 * "<name>.bias" [out] uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)]. params
 * NULL: stride 1, no padding, dilation 1, one group. */
UG_API ug_status ug_nn_conv2d(ug_graph *g, const char *name, ug_value *x, int64_t out_channels,
                              int kernel_h, int kernel_w, const ug_conv2d_params *params,
                              ug_value **out);
/* PyTorch's nn.BatchNorm1d (x [N, C] or [N, C, L]) and nn.BatchNorm2d
 * (x [N, C, H, W]):
 * "<name>.weight" (ones), "<name>.bias" (zeros), and the model state
 * "<name>.running_mean" (zeros) and "<name>.running_var" (ones); momentum
 * 0.1, eps 1e-5. */
UG_API ug_status ug_nn_batch_norm(ug_graph *g, const char *name, ug_value *x, ug_value **out);
/* [rows, d1, d2, ...] to [rows, d1*d2*...]. */
UG_API ug_status ug_nn_flatten(ug_graph *g, ug_value *x, ug_value **out);

#ifdef __cplusplus
}
#endif
#endif
