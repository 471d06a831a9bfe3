/* Generation with a key-value cache: the model's graph built for one
 * position, each attention layer's keys and values kept in cache tensors
 * the graph reads as inputs and writes a copy of (the position's rows
 * replaced), copied back after each run; the next token sampled on the
 * host from the last logits, with a temperature and top-k, by Philox. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph/internal.h"
#include "core/train/layers.h"
#include "kernels/common/elementwise.h"
#include "kernels/common/random.h"
#include "unigrad/generate.h"
#include "unigrad/ops.h"

enum { MAX_LAYERS = 256 };

typedef struct cache_layer {
    ug_attention_cache values;
    ug_tensor *k, *v;
} cache_layer;

struct ug_decoder {
    int64_t block;
    ug_value *position, *mask;
    cache_layer layers[MAX_LAYERS];
    int count;
};

ug_status ug_decoder_positions(ug_graph *g, ug_decoder *dec, int64_t positions, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_decoder_positions"));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_decoder_positions: out is NULL");
    if (dec) {
        *out = dec->position;
        return UG_OK;
    }
    if (positions < 1 || positions > INT32_MAX)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_decoder_positions: %lld positions; give 1 to %d",
                            (long long)positions, INT32_MAX);
    int32_t *ids = malloc(sizeof *ids * (size_t)positions);
    if (!ids)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_decoder_positions: out of host memory");
    for (int64_t i = 0; i < positions; i++)
        ids[i] = (int32_t)i;
    ug_tensor *t = NULL;
    ug_status st = ug_tensor_from_host(g->device, UG_I32, 1, &positions, ids, &t);
    free(ids);
    if (st == UG_OK)
        st = ug_graph_constant(g, "positions", t, out);
    ug_tensor_free(t);
    return st;
}

ug_status ug_nn_decoder_attention(ug_graph *g, ug_decoder *dec, const char *name, ug_value *x, int heads,
                                  ug_value **out)
{
    return ug_nn_decoder_attention_with(g, dec, name, x, heads, NULL, out);
}

ug_status ug_nn_decoder_attention_with(ug_graph *g, ug_decoder *dec, const char *name, ug_value *x, int heads,
                                       const ug_nn_attention_params *params, ug_value **out)
{
    ug_nn_attention_params p = params ? *params : (ug_nn_attention_params){0};
    p.causal = !dec; /* decoding: the cache's mask says what is seen */
    if (!dec)
        return ug_self_attention_layer(g, name, x, heads, &p, NULL, out);
    UG_TRY(ug_graph_check_open(g, "ug_nn_decoder_attention"));
    if (!x || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_decoder_attention: %s is NULL", x ? "out" : "x");
    if (x->ndim != 3 || x->shape[1] != 1 || heads < 1 || x->shape[2] % heads)
        return ug_set_error(UG_ERR_SHAPE,
                            "ug_nn_decoder_attention '%s': decoding takes x [batch, 1, channels] with heads "
                            "dividing the channels",
                            name ? name : "");
    if (dec->count == MAX_LAYERS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_decoder_attention: more than %d attention layers",
                            MAX_LAYERS);
    cache_layer *layer = &dec->layers[dec->count];
    *layer = (cache_layer){.values = {.position = dec->position, .mask = dec->mask}};
    const int64_t shape[4] = {x->shape[0], heads, dec->block, x->shape[2] / heads};
    char kname[80], vname[80];
    snprintf(kname, sizeof kname, "%s.k_cache", name ? name : "attention");
    snprintf(vname, sizeof vname, "%s.v_cache", name ? name : "attention");
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = ug_graph_input(g, kname, x->dtype, 4, shape, &layer->values.k);
    if (st == UG_OK)
        st = ug_graph_input(g, vname, x->dtype, 4, shape, &layer->values.v);
    if (st == UG_OK)
        st = ug_self_attention_layer(g, name, x, heads, &p, &layer->values, out);
    if (st == UG_OK)
        st = ug_graph_keep(g, layer->values.k_written);
    if (st == UG_OK)
        st = ug_graph_keep(g, layer->values.v_written);
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    dec->count++;
    return UG_OK;
}

/* The next token from logits [vocab]: softmax(logits / temperature) over
 * the top_k most likely (0: all), drawn with uniform u in [0, 1). */
static int32_t sample(const float *logits, int64_t vocab, float temperature, int top_k, float u, double *p)
{
    double cut = -INFINITY;
    if (top_k > 0 && top_k < vocab) { /* the k-th largest logit */
        for (int64_t i = 0; i < vocab; i++)
            p[i] = logits[i];
        for (int k = 0; k < top_k; k++) {
            int64_t best = k;
            for (int64_t i = k + 1; i < vocab; i++)
                if (p[i] > p[best])
                    best = i;
            const double t = p[k];
            p[k] = p[best];
            p[best] = t;
        }
        cut = p[top_k - 1];
    }
    double top = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < vocab; i++)
        if (logits[i] >= cut && logits[i] > top)
            top = logits[i];
    for (int64_t i = 0; i < vocab; i++) {
        p[i] = logits[i] >= cut ? exp(((double)logits[i] - top) / temperature) : 0.0;
        sum += p[i];
    }
    double at = (double)u * sum, run = 0.0;
    int32_t last = 0;
    for (int64_t i = 0; i < vocab; i++) {
        if (p[i] <= 0.0)
            continue;
        last = (int32_t)i;
        run += p[i];
        if (at < run)
            return last;
    }
    return last;
}

typedef struct generator {
    ug_graph *g;
    ug_decoder dec;
    ug_value *token, *logits;
    ug_tensor *token_t, *position_t, *mask_t;
    float *mask;
    int64_t vocab;
} generator;

static void generator_free(generator *gen)
{
    for (int i = 0; i < gen->dec.count; i++) {
        ug_tensor_free(gen->dec.layers[i].k);
        ug_tensor_free(gen->dec.layers[i].v);
    }
    ug_tensor_free(gen->token_t);
    ug_tensor_free(gen->position_t);
    ug_tensor_free(gen->mask_t);
    free(gen->mask);
    ug_graph_free(gen->g);
}

static ug_status generator_build(generator *gen, ug_model *model, ug_lm_fn fn, void *user)
{
    ug_device *dev = ug_model_device(model);
    const int64_t one[2] = {1, 1}, block[2] = {1, gen->dec.block};
    UG_TRY(ug_graph_create(model, &gen->g));
    UG_TRY(ug_graph_set_training(gen->g, false));
    UG_TRY(ug_graph_input(gen->g, "token", UG_I32, 2, one, &gen->token));
    UG_TRY(ug_graph_input(gen->g, "position", UG_I32, 1, one, &gen->dec.position));
    UG_TRY(ug_graph_input(gen->g, "mask", UG_F32, 2, block, &gen->dec.mask));
    UG_TRY(fn(gen->g, gen->token, &gen->dec, user, &gen->logits));
    if (!gen->logits || ug_value_ndim(gen->logits) != 3 || ug_value_dim(gen->logits, 1) != 1 ||
        ug_value_dtype(gen->logits) != UG_F32)
        return ug_set_error(UG_ERR_SHAPE, "ug_generate: the model's logits must be f32 [1, 1, vocab] for one "
                            "token");
    gen->vocab = ug_value_dim(gen->logits, 2);
    UG_TRY(ug_graph_keep(gen->g, gen->logits));
    UG_TRY(ug_graph_compile(gen->g));
    UG_TRY(ug_tensor_create(dev, UG_I32, 2, one, &gen->token_t));
    UG_TRY(ug_tensor_create(dev, UG_I32, 1, one, &gen->position_t));
    UG_TRY(ug_tensor_create(dev, UG_F32, 2, block, &gen->mask_t));
    gen->mask = malloc(sizeof *gen->mask * (size_t)gen->dec.block);
    if (!gen->mask)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_generate: out of host memory");
    for (int i = 0; i < gen->dec.count; i++) {
        cache_layer *l = &gen->dec.layers[i];
        const ug_value *k = l->values.k;
        UG_TRY(ug_tensor_create(dev, k->dtype, k->ndim, k->shape, &l->k));
        UG_TRY(ug_tensor_create(dev, k->dtype, k->ndim, k->shape, &l->v));
        /* Positions not cached yet are masked; zeros keep them finite
         * (a score of NaN plus -inf would still be NaN). */
        UG_TRY(ug_fill(l->k, 0.0f));
        UG_TRY(ug_fill(l->v, 0.0f));
        UG_TRY(ug_graph_bind(gen->g, l->values.k, l->k));
        UG_TRY(ug_graph_bind(gen->g, l->values.v, l->v));
    }
    UG_TRY(ug_graph_bind(gen->g, gen->token, gen->token_t));
    UG_TRY(ug_graph_bind(gen->g, gen->dec.position, gen->position_t));
    return ug_graph_bind(gen->g, gen->dec.mask, gen->mask_t);
}

/* Runs token at position (the cache holding the positions before it) and,
 * when logits is set, reads the next token's logits. */
static ug_status decode(generator *gen, int32_t token, int64_t position, float *logits)
{
    const int32_t at = (int32_t)position;
    for (int64_t j = 0; j < gen->dec.block; j++)
        gen->mask[j] = j <= position ? 0.0f : -INFINITY;
    UG_TRY(ug_tensor_upload(gen->token_t, &token, sizeof token));
    UG_TRY(ug_tensor_upload(gen->position_t, &at, sizeof at));
    UG_TRY(ug_tensor_upload(gen->mask_t, gen->mask, sizeof *gen->mask * (size_t)gen->dec.block));
    UG_TRY(ug_graph_run_forward(gen->g));
    for (int i = 0; i < gen->dec.count; i++) {
        cache_layer *l = &gen->dec.layers[i];
        UG_TRY(ug_graph_copy_value(gen->g, l->values.k_written, l->k));
        UG_TRY(ug_graph_copy_value(gen->g, l->values.v_written, l->v));
    }
    return logits ? ug_graph_read(gen->g, gen->logits, logits, sizeof *logits * (size_t)gen->vocab) : UG_OK;
}

/* The cache (from position 0) of tokens, the logits after the last. */
static ug_status prefill(generator *gen, const int32_t *tokens, int64_t count, float *logits)
{
    for (int64_t i = 0; i < count; i++)
        UG_TRY(decode(gen, tokens[i], i, i + 1 == count ? logits : NULL));
    return UG_OK;
}

static ug_status check_config(const ug_generate_config *cfg, const int32_t *prompt, int64_t prompt_len,
                              const int32_t *out)
{
    if (!cfg || !prompt || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_generate: %s is NULL",
                            !cfg ? "the config" : !prompt ? "the prompt" : "out");
    if (cfg->block_size < 2 || prompt_len < 1 || cfg->new_tokens < 0 || cfg->top_k < 0 ||
        !(cfg->temperature >= 0.0f) || isinf(cfg->temperature))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_generate: block_size %lld, prompt of %lld, new_tokens %lld, top_k %d, temperature "
                            "%g; give a block of 2 or more, a prompt, no negative counts and a finite temperature",
                            (long long)cfg->block_size, (long long)prompt_len, (long long)cfg->new_tokens,
                            cfg->top_k, (double)cfg->temperature);
    return UG_OK;
}

static ug_status run(generator *gen, const int32_t *prompt, int64_t prompt_len, const ug_generate_config *cfg,
                     int32_t *out, float *logits, double *scratch)
{
    for (int64_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= gen->vocab)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_generate: prompt token %lld is %d, outside the "
                                "model's %lld ids", (long long)i, prompt[i], (long long)gen->vocab);
    memcpy(out, prompt, sizeof *out * (size_t)prompt_len);
    const int64_t block = gen->dec.block, keep = block / 2;
    int64_t length = prompt_len, cached = prompt_len < block ? prompt_len : keep;
    UG_TRY(prefill(gen, out + length - cached, cached, logits));
    const float temperature = cfg->temperature > 0.0f ? cfg->temperature : 1.0f;
    for (int64_t n = 0; n < cfg->new_tokens; n++) {
        const float u = ug_random_value(cfg->seed, (uint64_t)n, 0, 0.0f, 1.0f);
        out[length] = sample(logits, gen->vocab, temperature, cfg->top_k, u, scratch);
        length++;
        if (n + 1 == cfg->new_tokens)
            break;
        if (cached == block) { /* full: restart from the last half */
            cached = keep;
            UG_TRY(prefill(gen, out + length - cached, cached, logits));
        } else {
            UG_TRY(decode(gen, out[length - 1], cached, logits));
            cached++;
        }
    }
    return UG_OK;
}

ug_status ug_generate(ug_model *model, ug_lm_fn fn, void *user, const int32_t *prompt, int64_t prompt_len,
                      const ug_generate_config *cfg, int32_t *out)
{
    if (!model || !fn)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_generate: %s is NULL", model ? "the model function" : "model");
    UG_TRY(check_config(cfg, prompt, prompt_len, out));
    generator gen = {.dec = {.block = cfg->block_size}};
    ug_status st = generator_build(&gen, model, fn, user);
    float *logits = st == UG_OK ? malloc(sizeof *logits * (size_t)gen.vocab) : NULL;
    double *scratch = st == UG_OK ? malloc(sizeof *scratch * (size_t)gen.vocab) : NULL;
    if (st == UG_OK && (!logits || !scratch))
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_generate: out of host memory");
    if (st == UG_OK)
        st = run(&gen, prompt, prompt_len, cfg, out, logits, scratch);
    free(logits);
    free(scratch);
    generator_free(&gen);
    return st;
}
