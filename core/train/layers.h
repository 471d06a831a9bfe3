/* What the layers share with generation (core/train/generate.c). */
#ifndef UG_CORE_TRAIN_LAYERS_H
#define UG_CORE_TRAIN_LAYERS_H

#include "unigrad/nn.h"

/* A self-attention layer's key-value cache in a decoding graph: k and v
 * [batch, heads, block, head_dim] (inputs bound to the cache's tensors),
 * the position decoded (i32 [1]) and the mask of the positions cached so
 * far (0 there, -inf after, [1, block]); the layer sets k_written and
 * v_written, the caches with this position's keys and values in. */
typedef struct ug_attention_cache {
    ug_value *k, *v, *position, *mask;
    ug_value *k_written, *v_written;
} ug_attention_cache;

/* ug_nn_self_attention_with, with a cache when cache is set (then not
 * causal: the mask says what is seen). */
ug_status ug_self_attention_layer(ug_graph *g, const char *name, ug_value *x, int heads,
                                  const ug_nn_attention_params *params, ug_attention_cache *cache, ug_value **out);

#endif
