/* Running a compiled graph: binding inputs, replaying the nodes, reading
 * values back. */
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"

/* Each run draws fresh dropout masks: counters advance by run and by mask. */
static uint64_t dropout_offset(const ug_graph *g, uint64_t stream)
{
    return (g->runs << 40) + (stream << 32);
}

/* Masks use their own Philox key, the graph's seed mixed with a tag
 * (splitmix64's finaliser): with the seed itself as key, a graph seeded
 * like its model (both default to 0) would draw run r's first mask from the
 * very counters that initialised parameter r (r * 2^40 + i), so dropout
 * would drop exactly the units whose initial weights were low. */
static uint64_t dropout_key(uint64_t seed)
{
    uint64_t z = (seed ^ 0x6a09e667f3bcc909ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static ug_status backend_call(ug_device *d, const char *op, bool present)
{
    if (!present)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s backend of %s does not implement it", op,
                            d->backend->name, d->info.id);
    return UG_OK;
}

static ug_status exec_xent(ug_graph *g, graph_node *n, bool backward)
{
    ug_device *d = g->device;
    UG_TRY(backend_call(d, "cross_entropy", d->backend->cross_entropy != NULL));
    ug_value *logits = n->in[0], *labels = n->in[1];
    ug_xent_args args = {.logits = ug_kview_of(logits->tensor), .labels = ug_kview_of(labels->tensor),
                         .rows = logits->shape[0], .cols = logits->shape[1],
                         .smoothing = n->p.xent.smoothing};
    if (backward) {
        args.grad = ug_kview_of(n->out->tensor);
        args.dloss = ug_kview_of(n->in[2]->tensor);
        args.scale = 1.0f / (float)args.rows;
    } else {
        args.loss = ug_kview_of(n->scratch[0]->tensor);
    }
    ug_status st = d->backend->cross_entropy(d->bdev, &args);
    if (st != UG_OK)
        return ug_kernel_failed(st, "cross_entropy", d);
    if (backward || args.rows == 0)
        return UG_OK;
    return ug_exec_reduce(UG_RKERNEL_MEAN, n->out->tensor, n->scratch[0]->tensor, 1, args.rows, 1);
}

static ug_status exec_layernorm(ug_graph *g, graph_node *n, bool backward)
{
    ug_device *d = g->device;
    UG_TRY(backend_call(d, "layernorm", d->backend->layernorm != NULL));
    ug_value *x = n->in[backward ? 1 : 0];
    int64_t cols = x->shape[x->ndim - 1];
    ug_layernorm_args args = {.x = ug_kview_of(x->tensor), .cols = cols, .eps = n->p.layernorm.eps};
    args.rows = cols ? ug_shape_numel(x->ndim, x->shape) / cols : 0;
    if (backward) {
        args.dy = ug_kview_of(n->in[0]->tensor);
        args.mean = ug_kview_of(n->in[2]->tensor);
        args.rstd = ug_kview_of(n->in[3]->tensor);
        args.gamma = ug_kview_of(n->in[4]->tensor);
        args.dx = ug_kview_of(n->out->tensor);
    } else {
        args.gamma = ug_kview_of(n->in[1]->tensor);
        args.beta = ug_kview_of(n->in[2]->tensor);
        args.y = ug_kview_of(n->out->tensor);
        args.mean = ug_kview_of(n->scratch[0]->tensor);
        args.rstd = ug_kview_of(n->scratch[1]->tensor);
    }
    if (args.rows == 0)
        return UG_OK;
    ug_status st = d->backend->layernorm(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "layernorm", d);
}

static ug_status exec_optim(ug_graph *g, graph_node *n)
{
    ug_device *d = g->device;
    UG_TRY(backend_call(d, "optimizer", d->backend->optimizer != NULL));
    ug_optim_args args = {0};
    ug_optim_fill_args(g->optimizer, n->p.optim.param_index, &args);
    args.param = ug_kview_of(n->in[0]->tensor);
    args.grad = ug_kview_of(n->in[1]->tensor);
    if (n->nin > 2)
        args.grad_scale = ug_kview_of(n->in[2]->tensor);
    args.n = ug_tensor_numel(n->in[0]->tensor);
    if (args.n == 0)
        return UG_OK;
    ug_status st = d->backend->optimizer(d->bdev, &args);
    return st == UG_OK ? st : ug_kernel_failed(st, "optimizer update", d);
}

ug_status ug_graph_exec_node(ug_graph *g, graph_node *n)
{
    ug_tensor *y = n->out ? n->out->tensor : NULL;
    ug_tensor *a = n->nin > 0 ? n->in[0]->tensor : NULL;
    ug_tensor *b = n->nin > 1 ? n->in[1]->tensor : NULL;
    switch (n->kind) {
    case NODE_BINARY: return ug_exec_binary(n->p.binary.op, n->p.binary.post, n->p.binary.alpha, y, a, b);
    case NODE_UNARY: return ug_exec_unary(n->p.unary.op, n->p.unary.alpha, n->p.unary.beta, y, a);
    case NODE_EXPAND: return ug_exec_expand(y, a, n->p.unary.alpha);
    case NODE_MATMUL: return ug_exec_matmul(y, a, b, n->p.matmul.ta, n->p.matmul.tb, 1.0f, 0.0f);
    case NODE_REDUCE:
        return ug_exec_reduce(n->p.reduce.op, y, a, n->p.reduce.outer, n->p.reduce.len, n->p.reduce.inner);
    case NODE_SOFTMAX: return ug_exec_softmax(n->p.softmax.log, y, a);
    case NODE_TRANSPOSE: return ug_exec_transpose(y, a);
    case NODE_FILL: return ug_exec_unary(UG_UNARY_FILL, 0.0f, n->p.unary.beta, y, NULL);
    case NODE_DROPOUT_MASK:
        return ug_exec_random(false, 0.0f, 1.0f, dropout_key(g->seed), dropout_offset(g, n->p.dropout.stream), y);
    case NODE_XENT: return exec_xent(g, n, false);
    case NODE_XENT_GRAD: return exec_xent(g, n, true);
    case NODE_LAYERNORM: return exec_layernorm(g, n, false);
    case NODE_LAYERNORM_GRAD: return exec_layernorm(g, n, true);
    case NODE_OPTIM: return exec_optim(g, n);
    }
    return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph: unknown node kind %d", (int)n->kind);
}

ug_status ug_graph_bind(ug_graph *g, ug_value *input, const ug_tensor *tensor)
{
    if (!g || !input || !tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_bind: NULL argument");
    if (input->graph != g || input->kind != VALUE_INPUT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_bind: the value is not an input of this graph");
    char want[96], have[96];
    bool same_dtype = tensor->dtype == input->dtype;
    if (!same_dtype || tensor->ndim != input->ndim ||
        memcmp(tensor->shape, input->shape, sizeof(int64_t) * (size_t)input->ndim) != 0)
        return ug_set_error(same_dtype ? UG_ERR_SHAPE : UG_ERR_DTYPE,
                            "ug_graph_bind: input '%s' is %s %s, the tensor is %s %s", input->name,
                            ug_dtype_name(input->dtype), ug_format_shape(input->ndim, input->shape, want, sizeof want),
                            ug_dtype_name(tensor->dtype), ug_format_shape(tensor->ndim, tensor->shape, have, sizeof have));
    if (ug_dev(tensor) != g->device)
        return ug_set_error(UG_ERR_DEVICE, "ug_graph_bind: input '%s' is on %s, the tensor on %s", input->name,
                            g->device->info.id, ug_dev(tensor)->info.id);
    /* The graph holds its own handle so the storage outlives the caller's. */
    ug_tensor *view = NULL;
    UG_TRY(ug_tensor_over_storage(tensor->storage, tensor->dtype, tensor->ndim, tensor->shape, tensor->offset, &view));
    ug_tensor_free(input->tensor);
    input->tensor = view;
    return ug_graph_refresh_aliases(g, input);
}

ug_status ug_graph_run(ug_graph *g)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_run: graph is NULL");
    if (!g->compiled)
        return ug_set_error(UG_ERR_STATE, "ug_graph_run: compile the graph first (ug_graph_compile)");
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_INPUT && !v->tensor && v->uses > 0)
            return ug_set_error(UG_ERR_STATE, "ug_graph_run: input '%s' is not bound (ug_graph_bind)", v->name);
    }
    for (int i = 0; i < g->node_count; i++) {
        if (g->nodes[i]->dead)
            continue;
        ug_status st = ug_graph_exec_node(g, g->nodes[i]);
        if (st != UG_OK)
            return ug_prefix_error(st, "ug_graph_run (node %d)", i);
    }
    g->runs++;
    if (g->optimizer)
        ug_optim_step_done(g->optimizer);
    return UG_OK;
}

ug_status ug_graph_read(ug_graph *g, ug_value *value, void *data, size_t bytes)
{
    if (!g || !value)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_read: NULL argument");
    if (value->graph != g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_read: the value belongs to another graph");
    ug_value *base = value->kind == VALUE_ALIAS ? value->alias_of : value;
    bool readable = base->keep || base->kind != VALUE_TEMP;
    if (!g->compiled || !value->tensor || !readable)
        return ug_set_error(UG_ERR_STATE,
                            "ug_graph_read: value %d is not readable: mark it with ug_graph_keep before "
                            "ug_graph_compile, and run the graph",
                            value->id);
    return ug_tensor_download(value->tensor, data, bytes);
}
