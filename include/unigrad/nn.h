/* Layers: helpers that create a layer's named parameters in the graph's
 * model (or reuse them, when another graph made them) and add its ops. */
#ifndef UNIGRAD_NN_H
#define UNIGRAD_NN_H

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
/* [rows, d1, d2, ...] to [rows, d1*d2*...]. */
UG_API ug_status ug_nn_flatten(ug_graph *g, ug_value *x, ug_value **out);

#ifdef __cplusplus
}
#endif
#endif
