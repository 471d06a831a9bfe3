/* The GPT of gpt_model.h. */
#include "gpt_model.h"

#include <stdio.h>

ug_status gpt_logits(ug_graph *g, ug_value *tokens, ug_decoder *dec, void *user, ug_value **logits)
{
    const gpt_config *c = user;
    ug_value *pos = NULL, *x = NULL, *p = NULL, *h = NULL, *a = NULL, *wte = NULL;
    ug_tensor *table = NULL;
    char name[32];
    ug_status st = ug_decoder_positions(g, dec, ug_value_dim(tokens, 1), &pos);
    if (st == UG_OK) st = ug_nn_embedding(g, "wte", tokens, c->vocab, c->dim, 0.02f, &x);
    if (st == UG_OK) st = ug_nn_embedding(g, "wpe", pos, c->block, c->dim, 0.02f, &p);
    if (st == UG_OK) st = ug_g_add(g, x, p, &x);
    for (int64_t l = 0; l < c->layers && st == UG_OK; l++) {
        snprintf(name, sizeof name, "h%lld.ln1", (long long)l);
        st = ug_nn_layernorm(g, name, x, 1e-5f, &h);
        snprintf(name, sizeof name, "h%lld.attn", (long long)l);
        if (st == UG_OK) st = ug_nn_decoder_attention(g, dec, name, h, c->heads, &a);
        if (st == UG_OK) st = ug_g_add(g, x, a, &x);
        snprintf(name, sizeof name, "h%lld.ln2", (long long)l);
        if (st == UG_OK) st = ug_nn_layernorm(g, name, x, 1e-5f, &h);
        snprintf(name, sizeof name, "h%lld.fc", (long long)l);
        if (st == UG_OK) st = ug_nn_linear(g, name, h, 4 * c->dim, &h);
        if (st == UG_OK) st = ug_g_gelu(g, h, &h);
        snprintf(name, sizeof name, "h%lld.proj", (long long)l);
        if (st == UG_OK) st = ug_nn_linear(g, name, h, c->dim, &h);
        if (st == UG_OK) st = ug_g_add(g, x, h, &x);
    }
    if (st == UG_OK) st = ug_nn_layernorm(g, "ln_f", x, 1e-5f, &h);
    if (st == UG_OK) st = ug_model_find_param(ug_graph_model(g), "wte.weight", &table);
    if (st == UG_OK) st = ug_graph_param(g, table, &wte);
    return st == UG_OK ? ug_g_matmul(g, h, wte, false, true, logits) : st;
}

ug_status gpt_build(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    ug_status st = gpt_logits(g, x, NULL, user, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}
