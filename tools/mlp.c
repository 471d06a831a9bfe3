/* The models' forward passes, and parsing their settings. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

static ug_status activate(ug_graph *g, mlp_activation a, ug_value *x, ug_value **out)
{
    switch (a) {
    case MLP_GELU: return ug_g_gelu(g, x, out);
    case MLP_TANH: return ug_g_tanh(g, x, out);
    case MLP_SIGMOID: return ug_g_sigmoid(g, x, out);
    default: return ug_g_relu(g, x, out);
    }
}

int mlp_max_stages(const mlp_config *c) { return c->cnn ? 4 : c->hidden_count + 1; }

/* Whether a stage ends after part `part` (from 0) of parts: the parts
 * spread evenly over the stages. */
static bool stage_ends_after(const mlp_config *c, int part, int parts)
{
    for (int k = 1; c->stages > 1 && k < c->stages; k++)
        if ((k * parts) / c->stages == part + 1)
            return true;
    return false;
}

/* The hidden layers of the MLP: x [batch, inputs] to the logits. */
static ug_status dense_body(ug_graph *g, const mlp_config *c, ug_value *x, ug_value **logits)
{
    ug_value *h = x;
    for (int i = 0; i <= c->hidden_count; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        bool last = i == c->hidden_count;
        ug_value *layer_input = h;
        TRY(ug_nn_linear(g, name, h, last ? c->classes : c->hidden[i], last ? logits : &h));
        if (last)
            break;
        TRY(activate(g, c->activation, h, &h));
        if (c->dropout > 0.0f)
            TRY(ug_g_dropout(g, h, c->dropout, &h));
        if (c->checkpoint)
            TRY(ug_graph_checkpoint(g, layer_input, h));
        if (stage_ends_after(c, i, c->hidden_count + 1))
            TRY(ug_pipeline_boundary(g, &h));
    }
    return UG_OK;
}

/* conv (3x3, padding 1) + batch norm + ReLU + max-pool 2. */
static ug_status conv_block(ug_graph *g, int index, int64_t channels, ug_value *x, ug_value **out)
{
    char conv[16], norm[16];
    snprintf(conv, sizeof conv, "conv%d", index);
    snprintf(norm, sizeof norm, "bn%d", index);
    const ug_conv2d_params same = {.padding = {1, 1}};
    const ug_pool2d_params halve = {.kernel = {2, 2}};
    ug_value *h = NULL;
    TRY(ug_nn_conv2d(g, conv, x, channels, 3, 3, &same, &h));
    TRY(ug_nn_batch_norm(g, norm, h, &h));
    TRY(ug_g_relu(g, h, &h));
    return ug_g_max_pool2d(g, h, &halve, out);
}

static ug_status conv_body(ug_graph *g, const mlp_config *c, ug_value *x, ug_value **logits)
{
    /* A non-square count fails in the reshape, with the sizes in its message. */
    int64_t side = (int64_t)llround(sqrt((double)c->inputs));
    int64_t batch = ug_value_dim(x, 0), image[4] = {batch, 1, side, side};
    ug_value *h = NULL, *block_input = NULL;
    TRY(ug_g_reshape(g, x, 4, image, &h));
    for (int i = 0; i < 2; i++) {
        block_input = h;
        TRY(conv_block(g, i + 1, i ? 64 : 32, h, &h));
        if (c->checkpoint)
            TRY(ug_graph_checkpoint(g, block_input, h));
        if (stage_ends_after(c, i, 4)) /* the parts: two conv blocks, fc1, fc2 */
            TRY(ug_pipeline_boundary(g, &h));
    }
    TRY(ug_nn_flatten(g, h, &h));
    TRY(ug_nn_linear(g, "fc1", h, 128, &h));
    TRY(ug_g_relu(g, h, &h));
    if (c->dropout > 0.0f)
        TRY(ug_g_dropout(g, h, c->dropout, &h));
    if (stage_ends_after(c, 2, 4))
        TRY(ug_pipeline_boundary(g, &h));
    return ug_nn_linear(g, "fc2", h, c->classes, logits);
}

ug_status mlp_forward(ug_graph *g, ug_value *x, ug_value *y, void *config, ug_trainer_outputs *out)
{
    const mlp_config *c = config;
    TRY((c->cnn ? conv_body : dense_body)(g, c, x, &out->logits));
    return ug_g_cross_entropy(g, out->logits, y, c->label_smoothing, &out->loss);
}

bool mlp_parse_hidden(const char *text, mlp_config *c)
{
    c->hidden_count = 0;
    const char *p = text;
    char *end = NULL;
    long long count = strtoll(p, &end, 10);
    if (end != p && *end == 'x') { /* "16x1024" */
        long long width = strtoll(end + 1, &end, 10);
        if (*end || count < 1 || count > MLP_MAX_HIDDEN || width < 1)
            return false;
        for (int i = 0; i < count; i++)
            c->hidden[c->hidden_count++] = width;
        return true;
    }
    while (*p) {
        long long v = strtoll(p, &end, 10);
        if (end == p || v <= 0 || c->hidden_count == MLP_MAX_HIDDEN)
            return false;
        c->hidden[c->hidden_count++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return false;
    }
    return c->hidden_count > 0;
}

bool mlp_parse_precision(const char *text, ug_dtype *precision)
{
    static const ug_dtype choices[] = {UG_F32, UG_F16, UG_BF16};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (!strcmp(text, ug_dtype_name(choices[i]))) {
            *precision = choices[i];
            return true;
        }
    return false;
}
