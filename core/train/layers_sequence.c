/* Layers for sequences: multi-head self-attention over [batch, positions,
 * channels], on the fused attention op, with or without a key-value cache
 * (generation, core/train/generate.c). */
#include <stdio.h>

#include "core/graph/internal.h"
#include "core/train/layers.h"
#include "unigrad/attention.h"
#include "unigrad/nn.h"

/* "<layer>.<part>" into name, or an error naming the layer. */
static ug_status part_name(const char *layer, const char *part, char *name, size_t len)
{
    if (!layer || (size_t)snprintf(name, len, "%s.%s", layer, part) >= len)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "layer name '%s' is missing or too long (limit %zu)",
                            layer ? layer : "(null)", len - 8);
    return UG_OK;
}

/* q, k and v of heads heads from qkv [B, T, 3C]: one copy into
 * [3, B, heads, T, C / heads], then its three parts. */
static ug_status split_heads(ug_graph *g, ug_value *qkv, int64_t b, int64_t t, int64_t heads, int64_t d,
                             ug_value **q, ug_value **k, ug_value **v)
{
    static const int order[5] = {2, 0, 3, 1, 4};
    const int64_t five[5] = {b, t, 3, heads, d}, four[4] = {b, heads, t, d};
    ug_value *split = NULL, *moved = NULL, *parts[3];
    UG_TRY(ug_g_reshape(g, qkv, 5, five, &split));
    UG_TRY(ug_g_permute(g, split, 5, order, &moved));
    UG_TRY(ug_g_split(g, moved, 0, 3, NULL, parts));
    UG_TRY(ug_g_reshape(g, parts[0], 4, four, q));
    UG_TRY(ug_g_reshape(g, parts[1], 4, four, k));
    return ug_g_reshape(g, parts[2], 4, four, v);
}

/* The output projection, and its dropout where asked. */
static ug_status project(ug_graph *g, const char *name, ug_value *x, int64_t c, const ug_nn_attention_params *p,
                        ug_value **out)
{
    UG_TRY(ug_nn_linear(g, name, x, c, out));
    return p->output_dropout > 0.0f ? ug_g_dropout(g, *out, p->output_dropout, out) : UG_OK;
}

/* The layer's ops; with cache set, k and v are written into its caches
 * at its position and q attends over them, under its mask. */
static ug_status self_attention(ug_graph *g, const char *name, ug_value *x, int heads,
                                const ug_nn_attention_params *p, ug_attention_cache *cache, ug_value **out)
{
    const int64_t b = x->shape[0], t = x->shape[1], c = x->shape[2], d = c / heads;
    char qkv_name[64], proj_name[64];
    UG_TRY(part_name(name, "qkv", qkv_name, sizeof qkv_name));
    UG_TRY(part_name(name, "proj", proj_name, sizeof proj_name));
    ug_value *qkv = NULL, *q = NULL, *k = NULL, *v = NULL, *y = NULL, *merged = NULL, *flat = NULL;
    UG_TRY(ug_nn_linear(g, qkv_name, x, 3 * c, &qkv));
    if (!cache) { /* the heads read and written where they lie */
        const ug_attention_options opts = {.causal = p->causal, .dropout = p->dropout};
        UG_TRY(ug_g_attention_packed(g, qkv, heads, NULL, &opts, &flat));
        return project(g, proj_name, flat, c, p, out);
    }
    UG_TRY(split_heads(g, qkv, b, t, heads, d, &q, &k, &v));
    UG_TRY(ug_g_index_copy(g, cache->k, 2, cache->position, k, &cache->k_written));
    UG_TRY(ug_g_index_copy(g, cache->v, 2, cache->position, v, &cache->v_written));
    const ug_attention_options opts = {0}; /* the cache's mask hides what causal would */
    UG_TRY(ug_g_attention(g, q, cache->k_written, cache->v_written, cache->mask, &opts, &y));
    static const int back[4] = {0, 2, 1, 3};
    const int64_t rows[3] = {b, t, c};
    UG_TRY(ug_g_permute(g, y, 4, back, &merged));
    UG_TRY(ug_g_reshape(g, merged, 3, rows, &flat));
    return project(g, proj_name, flat, c, p, out);
}

ug_status ug_self_attention_layer(ug_graph *g, const char *name, ug_value *x, int heads,
                                  const ug_nn_attention_params *params, ug_attention_cache *cache, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_self_attention"));
    if (!x || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_self_attention: %s is NULL", x ? "out" : "x");
    *out = NULL;
    if (x->ndim != 3 || heads < 1 || x->shape[2] % heads != 0) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE,
                            "ug_nn_self_attention '%s': x is %s with %d heads; x must be [batch, positions, "
                            "channels] and the heads divide the channels",
                            name ? name : "", ug_format_shape(x->ndim, x->shape, s, sizeof s), heads);
    }
    const ug_nn_attention_params none = {0}, *p = params ? params : &none;
    if (!(p->dropout >= 0.0f && p->dropout < 1.0f) || !(p->output_dropout >= 0.0f && p->output_dropout < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_self_attention '%s': dropout %g and output_dropout %g "
                            "must each be in [0, 1)", name ? name : "", (double)p->dropout,
                            (double)p->output_dropout);
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = self_attention(g, name, x, heads, p, cache, out);
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        *out = NULL;
    }
    return st;
}

ug_status ug_nn_self_attention(ug_graph *g, const char *name, ug_value *x, int heads, bool causal, ug_value **out)
{
    const ug_nn_attention_params params = {.causal = causal};
    return ug_self_attention_layer(g, name, x, heads, &params, NULL, out);
}

ug_status ug_nn_self_attention_with(ug_graph *g, const char *name, ug_value *x, int heads,
                                    const ug_nn_attention_params *params, ug_value **out)
{
    return ug_self_attention_layer(g, name, x, heads, params, NULL, out);
}
