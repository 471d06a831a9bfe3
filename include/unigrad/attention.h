/* Scaled dot-product attention (PyTorch's
 * torch.nn.functional.scaled_dot_product_attention) as one fused op on
 * every device: softmax(scale q k^T + mask) v, computed with an online
 * softmax over the keys (FlashAttention), so its memory is linear in the
 * sequence: nothing of size rows x keys is stored, forward or backward. */
#ifndef UNIGRAD_ATTENTION_H
#define UNIGRAD_ATTENTION_H

#include <stdbool.h>

#include "unigrad/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_attention_options {
    /* Query row i sees keys 0..i only (is_causal: the top-left triangle of
     * [rows, keys], as PyTorch's). */
    bool causal;
    /* Applied to q . k; 0: 1 / sqrt(head_dim). */
    float scale;
    /* Dropout on the probabilities, in [0, 1): each is dropped with this
     * probability and the rest scaled by 1 / (1 - dropout), as PyTorch's
     * dropout_p. In a graph, only in training mode (ug_graph_set_training),
     * with fresh masks each run keyed by the graph's seed, exactly those
     * ug_g_dropout would draw on the probabilities [batch, heads, rows,
     * keys] as the graph's next dropout; the gradient recomputes them. */
    float dropout;
    /* Eager calls: the key of the mask, which drops probability (b, h, i, j)
     * where element ((b heads + h) rows + i) keys + j of
     * ug_random_uniform(seed, offset 0, [0, 1)) is below dropout. */
    uint64_t seed;
} ug_attention_options;

/* q [batch, heads, rows, head_dim], k and v [batch, heads, keys,
 * head_dim] (or all three without the heads axis), one float dtype (f32,
 * f16, bf16; arithmetic in f32), head_dim 1 to 256. mask (NULL: none) is
 * added to the scaled scores: in q's dtype, broadcasting to [batch, heads,
 * rows, keys] (-inf hides a key). opts NULL: not causal, the default
 * scale. The result has q's shape and dtype; a row that sees no key is
 * NaN (as a softmax of nothing but -inf). */
UG_API ug_status ug_attention(const ug_tensor *q, const ug_tensor *k, const ug_tensor *v, const ug_tensor *mask,
                              const ug_attention_options *opts, ug_tensor **out);
/* The same in a graph, with the gradients of q, k and v (not the mask's):
 * recomputed from the rows' saved log-sum-exp, each written once in a
 * fixed order (no atomics). Under mixed precision it runs in the half
 * dtype, as PyTorch's autocast runs it. */
UG_API ug_status ug_g_attention(ug_graph *g, ug_value *q, ug_value *k, ug_value *v, ug_value *mask,
                                const ug_attention_options *opts, ug_value **out);

/* The same on q, k and v packed in one tensor, as a linear layer to three
 * times the channels makes them (FlashAttention's qkvpacked form): qkv
 * [batch, rows, 3 * heads * head_dim] holds q's heads side by side, then
 * k's, then v's; the result is [batch, rows, heads * head_dim], the heads
 * side by side, as an output projection takes it. The kernels read and
 * write the heads where they lie: no permute, split or concat, forward or
 * backward. The mask broadcasts to [batch, heads, rows, rows]. */
UG_API ug_status ug_attention_packed(const ug_tensor *qkv, int heads, const ug_tensor *mask,
                                     const ug_attention_options *opts, ug_tensor **out);
UG_API ug_status ug_g_attention_packed(ug_graph *g, ug_value *qkv, int heads, ug_value *mask,
                                       const ug_attention_options *opts, ug_value **out);

#ifdef __cplusplus
}
#endif
#endif
