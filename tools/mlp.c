/* Building the MLP graph. */
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

ug_status mlp_build(ug_model *model, const mlp_config *c, int64_t batch, mlp_graph *out)
{
    memset(out, 0, sizeof *out);
    out->batch = batch;
    ug_graph *g = NULL;
    ug_status st = ug_graph_create(model, &g);
    if (st != UG_OK)
        return st;
    out->graph = g;
    int64_t xshape[2] = {batch, c->inputs};
    ug_value *h = NULL, *logits = NULL;
    st = ug_graph_input(g, "images", UG_F32, 2, xshape, &out->x);
    if (st == UG_OK)
        st = ug_graph_input(g, "labels", UG_I32, 1, &batch, &out->y);
    h = out->x;
    for (int i = 0; i <= c->hidden_count && st == UG_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        bool last = i == c->hidden_count;
        ug_value *layer_input = h;
        st = ug_nn_linear(g, name, h, last ? c->classes : c->hidden[i], last ? &logits : &h);
        if (st == UG_OK && !last)
            st = activate(g, c->activation, h, &h);
        if (st == UG_OK && !last && c->dropout > 0.0f)
            st = ug_g_dropout(g, h, c->dropout, &h);
        if (st == UG_OK && !last && c->checkpoint)
            st = ug_graph_checkpoint(g, layer_input, h);
    }
    if (st == UG_OK)
        st = ug_g_cross_entropy(g, logits, out->y, c->label_smoothing, &out->loss);
    /* The epoch's sums of the samples' losses and correct predictions. */
    ug_value *pred = NULL, *pred_f32 = NULL, *labels_f32 = NULL, *hits = NULL, *correct = NULL;
    if (st == UG_OK) st = ug_graph_accumulate_rows(g, out->loss, &out->loss_sum);
    if (st == UG_OK) st = ug_g_argmax(g, logits, -1, &pred);
    if (st == UG_OK) st = ug_g_cast(g, pred, UG_F32, &pred_f32);
    if (st == UG_OK) st = ug_g_cast(g, out->y, UG_F32, &labels_f32);
    if (st == UG_OK) st = ug_g_equal(g, pred_f32, labels_f32, &hits);
    if (st == UG_OK) st = ug_g_sum(g, hits, 0, true, &correct);
    if (st == UG_OK) st = ug_graph_accumulate(g, correct, 1.0f, &out->correct_sum);
    if (st == UG_OK)
        st = ug_graph_backward(g, out->loss);
    if (st != UG_OK) {
        ug_graph_free(g);
        out->graph = NULL;
    }
    return st;
}

ug_status mlp_finish(mlp_graph *mlp, ug_optimizer *optimizer)
{
    ug_status st = ug_graph_set_optimizer(mlp->graph, optimizer);
    return st == UG_OK ? ug_graph_compile(mlp->graph) : st;
}

void mlp_free(mlp_graph *mlp)
{
    ug_graph_free(mlp->graph);
    mlp->graph = NULL;
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
