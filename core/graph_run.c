/* Running a compiled graph: binding inputs, replaying the nodes, reading
 * values back. */
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"

ug_status ug_graph_exec_node(ug_graph *g, graph_node *n)
{
    (void)g;
    ug_tensor *out[UG_OP_MAX_OUTPUTS] = {n->out ? n->out->tensor : NULL};
    const ug_tensor *in[UG_OP_MAX_INPUTS] = {NULL};
    for (int k = 0; k < n->nscratch; k++)
        out[k + 1] = n->scratch[k]->tensor;
    for (int k = 0; k < n->nin; k++)
        in[k] = n->in[k] ? n->in[k]->tensor : NULL;
    return n->op.def->launch(&n->op, out, in);
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
    if (g->compiled && readable && g->runs == 0)
        return ug_set_error(UG_ERR_STATE,
                            "ug_graph_read: '%s' has no value yet: run the graph (ug_graph_run) "
                            "first",
                            base->name[0] ? base->name : "the value");
    if (!g->compiled || !value->tensor || !readable)
        return ug_set_error(UG_ERR_STATE,
                            "ug_graph_read: value %d is not readable: mark it with ug_graph_keep before "
                            "ug_graph_compile, and run the graph",
                            value->id);
    UG_TRY(ug_tensor_download(value->tensor, data, bytes));
    return ug_graph_check(g);
}
