/* Text generation from a language model: a forward-only graph that
 * decodes one position at a time with a key-value cache, so each new token
 * costs O(positions), not O(positions^2), and samples the next token with
 * a temperature and top-k.
 *
 * The model is written once as a ug_lm_fn, for training and for decoding:
 *
 *   ug_status gpt(ug_graph *g, ug_value *tokens, ug_decoder *dec, void *user, ug_value **logits)
 *   {   // tokens [batch, positions]: token and position embeddings, blocks, head
 *       ug_value *pos, *x, *p, *a; ...
 *       ug_decoder_positions(g, dec, ug_value_dim(tokens, 1), &pos);
 *       ug_nn_embedding(g, "wte", tokens, vocab, dim, 0.02f, &x);
 *       ug_nn_embedding(g, "wpe", pos, block, dim, 0.02f, &p);  ug_g_add(g, x, p, &x);
 *       ug_nn_decoder_attention(g, dec, "h0.attn", x, heads, &a);  ...
 *   }
 *
 * With dec NULL (a training graph) the positions are 0..T-1 and attention
 * is causal over the whole sequence; ug_generate passes a decoder whose
 * graph takes one position and attends over the cache. */
#ifndef UNIGRAD_GENERATE_H
#define UNIGRAD_GENERATE_H

#include <stdint.h>

#include "unigrad/graph.h"
#include "unigrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_decoder ug_decoder;

/* Logits [batch, positions, vocab] of tokens [batch, positions] (i32). */
typedef ug_status (*ug_lm_fn)(ug_graph *g, ug_value *tokens, ug_decoder *decoder, void *user, ug_value **logits);

/* The positions of the tokens (i32 [positions]): 0..positions-1 (a graph
 * constant) without a decoder; with one, the position being decoded. */
UG_API ug_status ug_decoder_positions(ug_graph *g, ug_decoder *decoder, int64_t positions, ug_value **out);

/* ug_nn_self_attention, causal, without a decoder; with one, x is the one
 * position being decoded: its keys and values are written into the
 * decoder's cache for this layer (by name) and it attends over every
 * position cached so far. */
UG_API ug_status ug_nn_decoder_attention(ug_graph *g, ug_decoder *decoder, const char *name, ug_value *x,
                                         int heads, ug_value **out);
/* ug_nn_decoder_attention with params' dropouts (their causal is ignored:
 * the layer is causal), which act in training graphs only. */
UG_API ug_status ug_nn_decoder_attention_with(ug_graph *g, ug_decoder *decoder, const char *name, ug_value *x,
                                              int heads, const ug_nn_attention_params *params, ug_value **out);

typedef struct ug_generate_config {
    int64_t block_size;    /* the positions the model was built for (its position table) */
    int64_t new_tokens;    /* tokens to generate after the prompt */
    float temperature;     /* > 0; logits are divided by it (default 1 when 0) */
    int top_k;             /* sample among the k most likely; 0: all */
    uint64_t seed;         /* the draws: the same seed gives the same text */
} ug_generate_config;

/* Generates cfg->new_tokens tokens after prompt (prompt_len >= 1 ids)
 * with the model's parameters as they are, writing prompt and new tokens
 * to out (prompt_len + new_tokens ids). Past block_size positions the cache
 * restarts from the last block_size / 2 tokens (each token then sees at
 * least that many before it), which keeps every token's cost linear. The
 * draws use Philox from the seed, so a run repeats exactly on one device. */
UG_API ug_status ug_generate(ug_model *model, ug_lm_fn fn, void *user, const int32_t *prompt, int64_t prompt_len,
                             const ug_generate_config *cfg, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
