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
 * x is [rows, in] or [rows, ..., in] (a sequence's positions), y
 * [rows, ..., out]. */
UG_API ug_status ug_nn_linear(ug_graph *g, const char *name, ug_value *x, int64_t out_features,
                       ug_value **out);
/* What a linear or convolutional layer learns besides its weight, all
 * zero for PyTorch's defaults: without_bias is nn.Linear(bias=False) or
 * nn.Conv2d(bias=False) (as before a batch norm). */
typedef struct ug_nn_layer_params {
    bool without_bias;
} ug_nn_layer_params;
/* ug_nn_linear with layer (NULL: ug_nn_linear's). */
UG_API ug_status ug_nn_linear_with(ug_graph *g, const char *name, ug_value *x, int64_t out_features,
                                   const ug_nn_layer_params *layer, ug_value **out);
/* LayerNorm over the last axis: "<name>.weight" (ones), "<name>.bias" (zeros). */
UG_API ug_status ug_nn_layernorm(ug_graph *g, const char *name, ug_value *x, float eps, ug_value **out);
/* What a normalisation layer learns, all zero for PyTorch's defaults:
 * without_bias is nn.LayerNorm(bias=False) (GPT-2 as nanoGPT trains it),
 * without_weight elementwise_affine=False (no weight, hence no bias). */
typedef struct ug_nn_norm_params {
    bool without_weight;
    bool without_bias;
} ug_nn_norm_params;
/* ug_nn_layernorm with params (NULL: ug_nn_layernorm's): only the
 * parameters asked for are created. */
UG_API ug_status ug_nn_layernorm_with(ug_graph *g, const char *name, ug_value *x, float eps,
                                      const ug_nn_norm_params *params, ug_value **out);
/* RMSNorm over the last axis (nn.RMSNorm): "<name>.weight" (ones). */
UG_API ug_status ug_nn_rmsnorm(ug_graph *g, const char *name, ug_value *x, float eps, ug_value **out);
/* PyTorch's nn.Conv2d on x [N, in, H, W]: "<name>.weight"
 * [out, in / groups, kernel_h, kernel_w], Kaiming-uniform with a = sqrt(5)
 * (bound 1/sqrt(fan_in), fan_in = in / groups * kernel_h * kernel_w), and
 * "<name>.bias" [out] uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)]. params
 * NULL: stride 1, no padding, dilation 1, one group. */
UG_API ug_status ug_nn_conv2d(ug_graph *g, const char *name, ug_value *x, int64_t out_channels,
                              int kernel_h, int kernel_w, const ug_conv2d_params *params,
                              ug_value **out);
/* ug_nn_conv2d with layer (NULL: ug_nn_conv2d's). */
UG_API ug_status ug_nn_conv2d_with(ug_graph *g, const char *name, ug_value *x, int64_t out_channels,
                                   int kernel_h, int kernel_w, const ug_conv2d_params *params,
                                   const ug_nn_layer_params *layer, ug_value **out);
/* The activation closing a layer that takes one. */
typedef enum ug_nn_activation { UG_NN_IDENTITY = 0, UG_NN_RELU, UG_NN_RELU6 } ug_nn_activation;
/* torchvision's Conv2dNormActivation, the unit of ResNets and MobileNets:
 * "<name>.conv", a convolution without bias of kernel x kernel (params as
 * ug_nn_conv2d's; padding 0 there gives kernel / 2, keeping the size at
 * stride 1), then "<name>.bn", a batch norm, then the activation. */
UG_API ug_status ug_nn_conv_bn(ug_graph *g, const char *name, ug_value *x, int64_t out_channels, int kernel,
                               const ug_conv2d_params *params, ug_nn_activation activation, ug_value **out);
/* PyTorch's nn.BatchNorm1d (x [N, C] or [N, C, L]) and nn.BatchNorm2d
 * (x [N, C, H, W]):
 * "<name>.weight" (ones), "<name>.bias" (zeros), and the model state
 * "<name>.running_mean" (zeros) and "<name>.running_var" (ones); momentum
 * 0.1, eps 1e-5. */
UG_API ug_status ug_nn_batch_norm(ug_graph *g, const char *name, ug_value *x, ug_value **out);
/* PyTorch's nn.Embedding: "<name>.weight" [vocab, dim], normal with
 * standard deviation init_std (PyTorch's default is 1; GPT-2 uses 0.02),
 * looked up at index (i32 or i64, any shape [...]): y [..., dim]. */
UG_API ug_status ug_nn_embedding(ug_graph *g, const char *name, ug_value *index, int64_t vocab, int64_t dim,
                                 float init_std, ug_value **out);
/* Multi-head self-attention on x [batch, positions, channels] (nanoGPT's
 * CausalSelfAttention): "<name>.qkv", a linear layer to 3 x channels (q,
 * k and v), the heads (channels / heads each) attended by ug_g_attention
 * (causal where asked, scale 1/sqrt(channels / heads)), and "<name>.proj",
 * a linear layer back to channels. */
UG_API ug_status ug_nn_self_attention(ug_graph *g, const char *name, ug_value *x, int heads, bool causal,
                                      ug_value **out);
/* What ug_nn_self_attention_with takes, all zero for a plain non-causal
 * layer: nanoGPT's CausalSelfAttention(dropout = p) is {.causal = true,
 * .dropout = p, .output_dropout = p}. Both dropouts act in training mode
 * only (ug_graph_set_training). */
typedef struct ug_nn_attention_params {
    bool causal;
    float dropout;        /* on the attention probabilities, inside the fused op */
    float output_dropout; /* on the projection's output (ug_g_dropout) */
} ug_nn_attention_params;
UG_API ug_status ug_nn_self_attention_with(ug_graph *g, const char *name, ug_value *x, int heads,
                                           const ug_nn_attention_params *params, ug_value **out);
/* [rows, d1, d2, ...] to [rows, d1*d2*...]. */
UG_API ug_status ug_nn_flatten(ug_graph *g, ug_value *x, ug_value **out);

#ifdef __cplusplus
}
#endif
#endif
