/* Running a compiled graph: binding inputs, replaying the nodes, reading
 * values back. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/profile/hooks.h"
#include "core/graph/internal.h"

/* A node's inputs as its launch takes them: its own, then its folded
 * checks' flags, then a running sum folded in, then the values a folded
 * comparison compares with. */
static void node_inputs(const graph_node *n, const ug_tensor **in)
{
    for (int k = 0; k < n->nin; k++)
        in[k] = n->in[k] ? n->in[k]->tensor : NULL;
    for (int k = 0; k < UG_OP_MAX_CHECKS && n->nin + k < UG_OP_MAX_INPUTS; k++)
        in[n->nin + k] = n->checks[k] ? n->checks[k]->tensor : NULL;
    if (n->sum)
        in[n->nin + UG_OP_SUM_INPUT] = n->sum->tensor;
    if (n->match)
        in[n->nin + UG_OP_MATCH_INPUT] = n->match->tensor;
}

/* The node's kernels; a group's for all its members, with their inputs
 * as they are bound now. */
static ug_status launch_node(graph_node *n)
{
    if (n->group_count) {
        for (int m = 0; m < n->group_count; m++)
            node_inputs(n->group[m], &n->group_ins[m * UG_OP_MAX_INPUTS]);
        return n->op.def->launch_group(n->group_ops, n->group_ins, n->group_count);
    }
    ug_tensor *out[UG_OP_MAX_OUTPUTS] = {n->out ? n->out->tensor : NULL};
    const ug_tensor *in[UG_OP_MAX_INPUTS] = {NULL};
    for (int k = 0; k < n->nscratch; k++)
        out[k + 1] = n->scratch[k]->tensor;
    node_inputs(n, in);
    return n->op.def->launch(&n->op, out, in);
}

ug_status ug_graph_exec_node(ug_graph *g, graph_node *n)
{
    if (!ug_profiling())
        return launch_node(n);
    ug_profile_set_label(ug_graph_node_label(g, n));
    ug_status st = launch_node(n);
    ug_profile_set_label(NULL);
    return st;
}

ug_status ug_graph_set_runs(ug_graph *g, uint64_t runs)
{
    if (g->run.run_count) {
        const float count = (float)(runs % UG_RANDOM_RUN_PERIOD);
        UG_TRY(ug_tensor_upload(g->run.run_count, &count, sizeof count));
    }
    g->runs = runs;
    return UG_OK;
}

/* Fresh dropout masks for the next run: the device's count advances by a
 * launch (which a replayed step repeats), and wraps with the host's. */
ug_status ug_graph_count_run(ug_graph *g)
{
    if (g->run.run_count && (g->runs + 1) % UG_RANDOM_RUN_PERIOD == 0)
        return ug_graph_set_runs(g, g->runs + 1);
    if (g->run.run_count)
        UG_TRY(ug_launch_unary("dropout run count", UG_UNARY_SCALE_SHIFT, 1.0f, 1.0f, g->run.run_count, g->run.run_count));
    g->runs++;
    return UG_OK;
}

/* A tensor bound to input: its dtype and shape, with 1 to the declared
 * rows (the leading size). */
static ug_status check_binding(const ug_value *input, const ug_tensor *tensor)
{
    char want[96], have[96];
    bool same_dtype = tensor->dtype == input->dtype;
    bool fits = same_dtype && tensor->ndim == input->ndim;
    for (int i = 0; fits && i < input->ndim; i++)
        fits = i == 0 ? tensor->shape[0] == input->shape[0] ||
                            (tensor->shape[0] >= 1 && tensor->shape[0] <= input->shape[0])
                      : tensor->shape[i] == input->shape[i];
    if (fits)
        return UG_OK;
    return ug_set_error(same_dtype ? UG_ERR_SHAPE : UG_ERR_DTYPE,
                        "ug_graph_bind: input '%s' is %s %s, the tensor is %s %s (a tensor may have "
                        "fewer rows, from 1, but the same other sizes and dtype)",
                        input->name, ug_dtype_name(input->dtype),
                        ug_format_shape(input->ndim, input->shape, want, sizeof want),
                        ug_dtype_name(tensor->dtype), ug_format_shape(tensor->ndim, tensor->shape, have, sizeof have));
}

ug_status ug_graph_bind(ug_graph *g, ug_value *input, const ug_tensor *tensor)
{
    if (!g || !input || !tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_bind: NULL argument");
    if (input->graph != g || input->kind != VALUE_INPUT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_bind: the value is not an input of this graph");
    UG_TRY(check_binding(input, tensor));
    if (ug_dev(tensor) != g->device)
        return ug_set_error(UG_ERR_DEVICE, "ug_graph_bind: input '%s' is on %s, the tensor on %s", input->name,
                            g->device->info.id, ug_dev(tensor)->info.id);
    /* The graph holds its own handle so the storage outlives the caller's. */
    ug_tensor *view = NULL;
    UG_TRY(ug_tensor_over_storage(tensor->storage, tensor->dtype, tensor->ndim, tensor->shape, tensor->offset, &view));
    int64_t rows_before = input->tensor && input->ndim ? input->tensor->shape[0] : -1;
    ug_tensor_free(input->tensor);
    input->tensor = view;
    if (!input->ndim || rows_before != view->shape[0])
        g->shapes_fitted = false;
    return ug_graph_refresh_aliases(g, input);
}

static ug_status check_compiled(ug_graph *g, const char *op)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: graph is NULL", op);
    if (!g->compiled)
        return ug_set_error(UG_ERR_STATE, "%s: compile the graph first (ug_graph_compile)", op);
    return UG_OK;
}

static ug_status check_runnable(ug_graph *g, const char *op)
{
    UG_TRY(check_compiled(g, op));
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_INPUT && !v->tensor && v->uses > 0)
            return ug_set_error(UG_ERR_STATE, "%s: input '%s' is not bound (ug_graph_bind)", op, v->name);
    }
    ug_status st = ug_graph_fit_rows(g);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

/* Launches the live nodes of the phases in mask (bit per graph_phase). */
ug_status ug_graph_launch_phases(ug_graph *g, unsigned mask, const char *op)
{
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead || !(mask & (1u << n->phase)))
            continue;
        ug_status st = ug_graph_exec_node(g, n);
        if (st != UG_OK)
            return ug_prefix_error(st, "%s (node %d)", op, i);
    }
    return mask & (1u << PHASE_FORWARD) ? ug_graph_count_run(g) : UG_OK;
}

enum { FORWARD = 1u << PHASE_FORWARD, BACKWARD = 1u << PHASE_BACKWARD, UPDATE = 1u << PHASE_UPDATE };

static ug_status no_pending_micro_batches(const ug_graph *g, const char *op)
{
    if (g->micro_batches)
        return ug_set_error(UG_ERR_STATE,
                            "%s: the gradients of %d micro-batch%s are accumulated; apply them "
                            "with ug_graph_run_update first",
                            op, g->micro_batches, g->micro_batches == 1 ? "" : "es");
    return UG_OK;
}

ug_status ug_graph_run(ug_graph *g)
{
    UG_TRY(check_runnable(g, "ug_graph_run"));
    UG_TRY(no_pending_micro_batches(g, "ug_graph_run"));
    if (g->optimizer && ug_optim_sharded(g->optimizer, NULL, NULL))
        return ug_set_error(UG_ERR_STATE, "ug_graph_run: the optimizer's state is sharded over a comm's ranks, "
                            "whose parts it would not gather; step with ug_comm_run_backward, "
                            "ug_graph_run_update and ug_comm_gather_parameters");
    UG_TRY(ug_graph_run_step(g, FORWARD | BACKWARD | UPDATE, "ug_graph_run"));
    if (g->optimizer)
        ug_optim_step_done(g->optimizer);
    return UG_OK;
}

ug_status ug_graph_run_forward(ug_graph *g)
{
    UG_TRY(check_runnable(g, "ug_graph_run_forward"));
    return ug_graph_launch_phases(g, FORWARD, "ug_graph_run_forward");
}

/* No micro-batch accumulated: the next are weighted against a full batch. */
static void clear_accumulation(ug_graph *g)
{
    g->micro_batches = 0;
    g->accumulated_rows = 0;
    g->gradient_rows = g->full_batch_rows;
    ug_graph_weigh_seed(g);
}

ug_status ug_graph_weigh_gradients(ug_graph *g, float rows, const char *op)
{
    for (int b = 0; g->micro_batches && rows != g->gradient_rows && b < g->bucket_count; b++) {
        ug_tensor *flat = g->buckets[b].flat;
        UG_TRY(ug_launch_unary(op, UG_UNARY_SCALE_SHIFT, g->gradient_rows / rows, 0.0f, flat, flat));
    }
    g->gradient_rows = rows;
    ug_graph_weigh_seed(g);
    return UG_OK;
}

ug_status ug_graph_rows_to_run(ug_graph *g, const char *op, int64_t *rows)
{
    UG_TRY(check_runnable(g, op));
    *rows = g->rows;
    return UG_OK;
}

/* Micro-batches accumulated before the optimizer stepped elsewhere (another
 * graph of the model) hold gradients of parameter values that are gone:
 * they are discarded, with an error. */
static ug_status same_parameters(ug_graph *g, const char *op)
{
    if (!g->micro_batches || !g->optimizer || ug_optimizer_steps(g->optimizer) == g->accumulation_step)
        return UG_OK;
    int count = g->micro_batches;
    clear_accumulation(g);
    return ug_set_error(UG_ERR_STATE,
                        "%s: the optimizer made a step (through another graph) after the first of %d "
                        "accumulated micro-batches; their gradients are of the parameters before it and "
                        "were discarded. Finish an accumulation with ug_graph_run_update first",
                        op, count);
}

/* Accumulator k takes the micro-batch's gradient, which the loss seed
 * weighted by its rows: the first micro-batch sets it (a gradient living
 * in its part is there already), the others add. */
static ug_status accumulate(ug_graph *g, int k, const char *op)
{
    ug_tensor *acc = g->accumulated[k], *grad = g->gradients[k]->tensor;
    if (g->micro_batches)
        return ug_launch_binary(op, UG_BINARY_ADD, UG_UNARY_COPY, 0.0f, acc, acc, grad);
    return g->own_buffers[k] ? UG_OK : ug_tensor_copy(acc, grad);
}

/* Forward and backward, each gradient accumulated right after the node
 * that finishes it, and ready told of each bucket as its last part is. */
static ug_status run_accumulating(ug_graph *g, ug_bucket_ready_fn *ready, void *ctx, const char *op)
{
    UG_TRY(ug_graph_place_gradients(g, !g->micro_batches));
    int next = 0, bucket = 0; /* in ready_order */
    for (int i = -1; i < g->node_count; i++) {
        if (i >= 0) {
            graph_node *n = g->nodes[i];
            if (n->dead || n->phase == PHASE_UPDATE)
                continue;
            ug_status st = ug_graph_exec_node(g, n);
            if (st != UG_OK)
                return ug_prefix_error(st, "%s (node %d)", op, i);
        }
        for (; next < g->accumulated_count && g->accumulate_after[g->ready_order[next]] <= i; next++) {
            UG_TRY(accumulate(g, g->ready_order[next], op));
            if (next + 1 == g->buckets[bucket].end && ready)
                UG_TRY(ready(ctx, bucket));
            bucket += next + 1 == g->buckets[bucket].end;
        }
    }
    return ug_graph_count_run(g);
}

ug_status ug_graph_run_backward_notify(ug_graph *g, ug_bucket_ready_fn *ready, void *ctx)
{
    const char *op = "ug_graph_run_backward";
    UG_TRY(check_runnable(g, op));
    if (!g->has_backward)
        return ug_set_error(UG_ERR_STATE, "%s: the graph has no backward pass (ug_graph_backward)", op);
    if (!g->accumulated)
        UG_TRY(ug_graph_make_accumulators(g, NULL, NULL));
    UG_TRY(same_parameters(g, op));
    g->accumulating = true;
    ug_graph_weigh_seed(g);
    ug_status st = run_accumulating(g, ready, ctx, op);
    g->accumulating = false;
    ug_graph_weigh_seed(g);
    if (st == UG_OK)
        st = ug_graph_place_gradients(g, true);
    if (st != UG_OK) { /* some accumulators hold this batch and some not: start over */
        clear_accumulation(g);
        return ug_prefix_error(st, "%s: the accumulated gradients were discarded", op);
    }
    if (!g->micro_batches++ && g->optimizer)
        g->accumulation_step = ug_optimizer_steps(g->optimizer);
    g->accumulated_rows += g->rows;
    return UG_OK;
}

ug_status ug_graph_run_backward(ug_graph *g) { return ug_graph_run_backward_notify(g, NULL, NULL); }

ug_status ug_graph_run_update(ug_graph *g)
{
    const char *op = "ug_graph_run_update";
    /* Not the inputs: the update reads the gradients only (a data-parallel
     * replica whose parts were empty has bound none). */
    UG_TRY(check_compiled(g, op));
    if (!g->micro_batches)
        return ug_set_error(UG_ERR_STATE,
                            "%s: no gradient is accumulated in this graph; run ug_graph_run_backward "
                            "on each micro-batch first (each graph accumulates its own)",
                            op);
    UG_TRY(same_parameters(g, op));
    /* The update sees the micro-batches' gradients weighted by their rows,
     * as one batch of all their rows would give (the loss is a mean over
     * rows). A gradient living in its part is scaled in place, and not at
     * all when the weights were the rows' shares already (one full batch,
     * or a data-parallel update: ug_graph_weigh_gradients). */
    const float mean = g->gradient_rows / (float)g->accumulated_rows;
    for (int k = 0; k < g->accumulated_count; k++)
        if (mean != 1.0f || !g->own_buffers[k])
            UG_TRY(ug_launch_unary(op, UG_UNARY_SCALE_SHIFT, mean, 0.0f, g->gradients[k]->tensor,
                                   g->accumulated[k]));
    clear_accumulation(g);
    if (!g->optimizer) /* the mean stays in the gradients, for ug_graph_grad */
        return UG_OK;
    UG_TRY(ug_graph_launch_phases(g, UPDATE, op));
    ug_optim_step_done(g->optimizer);
    return UG_OK;
}

/* The value's tensor, when the value can be read after the runs so far. */
static ug_status readable_tensor(ug_graph *g, ug_value *value, const char *op, ug_tensor **out)
{
    if (!g || !value)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (value->graph != g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the value belongs to another graph", op);
    ug_value *base = ug_value_base(value);
    bool readable = base->keep || base->kind != VALUE_TEMP;
    if (g->compiled && readable && g->runs == 0)
        return ug_set_error(UG_ERR_STATE,
                            "%s: '%s' has no value yet: run the graph (ug_graph_run) first", op,
                            base->name[0] ? base->name : "the value");
    if (!g->compiled || !value->tensor || !readable)
        return ug_set_error(UG_ERR_STATE,
                            "%s: value %d is not readable: mark it with ug_graph_keep before "
                            "ug_graph_compile, and run the graph",
                            op, value->id);
    *out = value->tensor;
    return UG_OK;
}

ug_status ug_graph_read(ug_graph *g, ug_value *value, void *data, size_t bytes)
{
    ug_tensor *t = NULL;
    UG_TRY(readable_tensor(g, value, "ug_graph_read", &t));
    UG_TRY(ug_tensor_download(t, data, bytes));
    return ug_graph_check(g);
}

ug_status ug_graph_copy_value(ug_graph *g, ug_value *value, ug_tensor *dst)
{
    ug_tensor *t = NULL;
    UG_TRY(readable_tensor(g, value, "ug_graph_copy_value", &t));
    return ug_tensor_copy(dst, t);
}
