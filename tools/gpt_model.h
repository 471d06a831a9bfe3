/* examples/gpt.c's model at any size, for ug-bench gpt and the numpy
 * reference test (tests/training/test_gpt_reference.c): token and position
 * embeddings, pre-norm blocks (layer norm, causal multi-head
 * self-attention, residual; layer norm, linear 4C, exact GELU, linear C,
 * residual), a final layer norm and the token table as the head (tied).
 * The example keeps its own copy, to be read whole. */
#ifndef UG_TOOLS_GPT_MODEL_H
#define UG_TOOLS_GPT_MODEL_H

#include "unigrad/unigrad.h"
#include "unigrad/generate.h"

typedef struct gpt_config {
    int64_t vocab, block, layers, heads, dim;
} gpt_config;

/* nanoGPT's CPU configuration (its README's Shakespeare-on-a-laptop run):
 * block 64, 4 layers, 4 heads, 128 channels; the vocabulary of
 * tinyshakespeare's characters. */
#define GPT_NANO_CPU ((gpt_config){.vocab = 65, .block = 64, .layers = 4, .heads = 4, .dim = 128})

/* A ug_lm_fn; user is a gpt_config. */
ug_status gpt_logits(ug_graph *g, ug_value *tokens, ug_decoder *dec, void *user, ug_value **logits);

/* A ug_trainer_build_fn: the mean cross-entropy of every token; user is a
 * gpt_config. */
ug_status gpt_build(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out);

#endif
