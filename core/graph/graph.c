/* Building graphs: values, nodes, leaves, and the calls that complete a
 * graph (backward, optimizer). The ops themselves are definitions in
 * core/ops/, added through ug_op_graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "unigrad/ops.h"

ug_status ug_graph_create(ug_model *model, ug_graph **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_create: out is NULL");
    *out = NULL;
    if (!model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_create: model is NULL");
    ug_graph *g = ug_calloc(1, sizeof *g);
    if (!g)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_create: out of host memory");
    ug_model_retain(model);
    g->model = model;
    g->device = ug_model_device(model);
    g->run.training = true;
    g->run.seed_weight = 1.0f;
    g->check_mode = UG_CHECK_LOSS_AND_GRADS;
    *out = g;
    return UG_OK;
}

void ug_graph_free(ug_graph *g)
{
    if (!g)
        return;
    ug_graph_free_replay(g);
    ug_graph_free_accumulators(g); /* first: it points gradients back at their own buffers */
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind != VALUE_PARAM && v->kind != VALUE_PARAM_COPY) /* the model's */
            ug_tensor_free(v->tensor);
        free(v);
    }
    for (int i = 0; i < g->node_count; i++) {
        ug_graph_free_group(g->nodes[i]);
        free(g->nodes[i]);
    }
    for (int i = 0; i < g->aside_count; i++)
        free(g->aside[i]);
    free(g->aside);
    free(g->values);
    free(g->nodes);
    ug_graph_free_checks(g);
    ug_tensor_free(g->run.run_count);
    ug_optimizer_free(g->optimizer);
    ug_model_free(g->model);
    ug_storage_release(g->arena);
    free(g);
}

ug_model *ug_graph_model(const ug_graph *g) { return g ? g->model : NULL; }

ug_meta ug_value_meta(const ug_value *v)
{
    ug_meta m = {.dtype = v->dtype, .ndim = v->ndim};
    memcpy(m.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    return m;
}

bool ug_value_is_param(const ug_value *v) { return v->kind == VALUE_PARAM; }

ug_value *ug_saved_of(const ug_value *v, int k) { return v->producer->scratch[k]; }

ug_run_state *ug_graph_run_state(ug_graph *g) { return &g->run; }
ug_device *ug_graph_device(const ug_graph *g) { return g->device; }
ug_dtype ug_graph_precision(const ug_graph *g) { return g->precision; }

ug_status ug_graph_check_open(const ug_graph *g, const char *op)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: graph is NULL", op);
    if (g->compiled || g->planned)
        return ug_set_error(UG_ERR_STATE, "%s: the graph is %s; build a new graph to change it", op,
                            g->compiled ? "compiled" : "planned (ug_graph_memory)");
    return UG_OK;
}

ug_status ug_graph_set_training(ug_graph *g, bool training)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_training: graph is NULL");
    g->run.training = training;
    return UG_OK;
}

ug_status ug_graph_set_checks(ug_graph *g, ug_check_mode mode)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_set_checks"));
    if ((unsigned)mode > UG_CHECK_EVERY_NODE)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_checks: %d is not a ug_check_mode",
                            (int)mode);
    g->check_mode = mode;
    return UG_OK;
}

ug_status ug_graph_set_fusion(ug_graph *g, bool on)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_set_fusion"));
    g->unfused = !on;
    return UG_OK;
}

ug_status ug_graph_set_seed(ug_graph *g, uint64_t seed)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_seed: graph is NULL");
    g->run.seed = seed;
    return UG_OK;
}

ug_status ug_graph_set_precision(ug_graph *g, ug_dtype dtype)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_set_precision"));
    if (dtype != UG_F32 && dtype != UG_F16 && dtype != UG_BF16)
        return ug_set_error(UG_ERR_DTYPE,
                            "ug_graph_set_precision: %s is not a compute precision (f32, f16 or "
                            "bf16)",
                            ug_dtype_size(dtype) ? ug_dtype_name(dtype) : "an invalid dtype");
    g->precision = dtype;
    return UG_OK;
}

ug_status ug_graph_new_value(ug_graph *g, value_kind kind, ug_dtype dtype, int ndim,
                             const int64_t *shape, ug_value **out)
{
    int64_t numel;
    UG_TRY(ug_checked_numel(ndim, shape, ug_dtype_size(dtype), "graph", &numel));
    if (g->value_count == g->value_capacity) {
        int capacity = g->value_capacity ? g->value_capacity * 2 : 64;
        ug_value **grown = ug_realloc(g->values, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
        g->values = grown;
        g->value_capacity = capacity;
    }
    ug_value *v = ug_calloc(1, sizeof *v);
    if (!v)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    v->graph = g;
    v->id = g->value_count;
    v->kind = kind;
    v->dtype = dtype;
    v->ndim = ndim;
    if (ndim)
        memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    v->last_use = -1;
    g->values[g->value_count++] = v;
    *out = v;
    return UG_OK;
}

ug_status ug_graph_add_node(ug_graph *g, const ug_op *op, ug_value *out, int nin,
                            ug_value *const *in, graph_node **node)
{
    if (g->node_count == g->node_capacity) {
        int capacity = g->node_capacity ? g->node_capacity * 2 : 64;
        graph_node **grown = ug_realloc(g->nodes, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
        g->nodes = grown;
        g->node_capacity = capacity;
    }
    for (int i = 0; i < nin; i++)
        if (in[i] && ug_value_base(in[i])->elsewhere) {
            const ug_value *v = ug_value_base(in[i]);
            ug_status st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                        "%s: a value of pipeline stage %d (%s%s%s) is used in stage %d without "
                                        "crossing the boundary between them; pass what a later stage reads "
                                        "through ug_pipeline_boundary", op->name ? op->name : op->def->family,
                                        v->elsewhere - 1, v->name[0] ? "'" : "", v->name[0] ? v->name : "unnamed",
                                        v->name[0] ? "'" : "", g->stage);
            if (g->cut_wrongly)
                g->cut_wrongly(g->cut_ctx, ug_last_error());
            return st;
        }
    graph_node *n = ug_calloc(1, sizeof *n);
    if (!n)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    n->op = *op;
    n->phase = g->building;
    n->origin = g->deriving;
    n->out = out;
    n->nin = nin;
    for (int i = 0; i < nin; i++)
        n->in[i] = in[i];
    if (out)
        out->producer = n;
    g->nodes[g->node_count++] = n;
    *node = n;
    return UG_OK;
}

ug_graph_mark ug_graph_mark_now(const ug_graph *g)
{
    return (ug_graph_mark){g->value_count, g->node_count, ug_model_param_count(g->model)};
}

void ug_graph_rollback(ug_graph *g, ug_graph_mark mark)
{
    /* Gradients are the only links from older values to newer ones. */
    for (int i = 0; i < mark.values; i++)
        if (g->values[i]->grad && g->values[i]->grad->id >= mark.values)
            g->values[i]->grad = NULL;
    while (g->node_count > mark.nodes)
        free(g->nodes[--g->node_count]);
    while (g->value_count > mark.values) {
        ug_value *v = g->values[--g->value_count];
        if (v->kind != VALUE_PARAM && v->kind != VALUE_PARAM_COPY)
            ug_tensor_free(v->tensor);
        free(v);
    }
    ug_model_truncate(g->model, mark.params);
}

ug_status ug_graph_set_aside(ug_graph *g, ug_graph_mark mark, int stage, const ug_value *drop_input)
{
    const int moving = g->value_count - mark.values;
    if (g->aside_count + moving > g->aside_capacity) {
        int capacity = g->aside_count + moving + 16;
        ug_value **grown = ug_realloc(g->aside, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
        g->aside = grown;
        g->aside_capacity = capacity;
    }
    int kept = mark.values;
    for (int i = mark.values; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_INPUT && v != drop_input) {
            v->id = kept;
            g->values[kept++] = v;
            continue;
        }
        if (!v->name[0] && v->producer) /* for the message of an op that reads it */
            snprintf(v->name, sizeof v->name, "%s",
                     v->producer->op.name ? v->producer->op.name : v->producer->op.def->family);
        if (v->kind != VALUE_PARAM && v->kind != VALUE_PARAM_COPY) { /* a constant's copy: the model's are freed below */
            ug_tensor_free(v->tensor);
            v->tensor = NULL;
        }
        v->elsewhere = stage + 1;
        v->producer = NULL;
        v->grad = NULL;
        g->aside[g->aside_count++] = v;
    }
    g->value_count = kept;
    while (g->node_count > mark.nodes)
        free(g->nodes[--g->node_count]);
    ug_model_drop_last(g->model, mark.params);
    return UG_OK;
}

ug_status ug_graph_check_value(const ug_graph *g, const ug_value *v, const char *op, const char *arg)
{
    if (!v)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, arg);
    if (v->graph != g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s belongs to another graph", op, arg);
    return UG_OK;
}

static ug_status start_op(ug_graph *g, const char *op, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, op));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    return UG_OK;
}

/* ---- leaves ---- */

ug_status ug_graph_input(ug_graph *g, const char *name, ug_dtype dtype, int ndim,
                         const int64_t *shape, ug_value **out)
{
    UG_TRY(start_op(g, "ug_graph_input", out));
    if (ug_dtype_size(dtype) == 0)
        return ug_set_error(UG_ERR_DTYPE, "ug_graph_input: dtype %d is not a ug_dtype", (int)dtype);
    if (ndim > 0 && !shape)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_input: shape is NULL");
    UG_TRY(ug_graph_new_value(g, VALUE_INPUT, dtype, ndim, shape, out));
    snprintf((*out)->name, sizeof (*out)->name, "%s", name ? name : "input");
    return UG_OK;
}

ug_status ug_graph_param(ug_graph *g, ug_tensor *param, ug_value **out)
{
    if (!g || !param || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_param: NULL argument");
    /* A parameter the graph uses is found even once compiled (for ug_graph_grad). */
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->kind == VALUE_PARAM && g->values[i]->param == param) {
            *out = g->values[i];
            return UG_OK;
        }
    UG_TRY(start_op(g, "ug_graph_param", out));
    int index = ug_model_param_index(g->model, param);
    if (index < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_graph_param: the tensor is not a parameter of the graph's model "
                            "(create it with ug_model_param)");
    UG_TRY(ug_graph_new_value(g, VALUE_PARAM, param->dtype, param->ndim, param->shape, out));
    const char *name = NULL;
    ug_model_param_at(g->model, index, &name, NULL);
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    (*out)->param = param;
    (*out)->tensor = param;
    return UG_OK;
}

ug_status ug_graph_constant(ug_graph *g, const char *name, const ug_tensor *value, ug_value **out)
{
    UG_TRY(start_op(g, "ug_graph_constant", out));
    UG_TRY(ug_check_tensor(value, "ug_graph_constant", "value"));
    ug_tensor *copy = NULL;
    UG_TRY(ug_tensor_to_device(value, g->device, &copy));
    ug_status st = ug_graph_new_value(g, VALUE_CONSTANT, copy->dtype, copy->ndim, copy->shape, out);
    if (st != UG_OK) {
        ug_tensor_free(copy);
        return st;
    }
    snprintf((*out)->name, sizeof (*out)->name, "%s", name ? name : "constant");
    (*out)->tensor = copy;
    return UG_OK;
}

int ug_value_ndim(const ug_value *v) { return v ? v->ndim : 0; }
ug_dtype ug_value_dtype(const ug_value *v) { return v ? v->dtype : UG_F32; }

int64_t ug_value_dim(const ug_value *v, int axis)
{
    if (!v)
        return -1;
    if (axis < 0)
        axis += v->ndim;
    if (axis < 0 || axis >= v->ndim)
        return -1;
    /* After a run with fewer rows, the sizes that run had. */
    return v->graph->compiled && v->tensor ? v->tensor->shape[axis] : v->shape[axis];
}

ug_status ug_g_reshape(ug_graph *g, ug_value *x, int ndim, const int64_t *shape, ug_value **out)
{
    UG_TRY(start_op(g, "graph reshape", out));
    UG_TRY(ug_graph_check_value(g, x, "graph reshape", "x"));
    int64_t resolved[UG_MAX_DIMS];
    UG_TRY(ug_resolve_reshape(x->ndim, x->shape, ndim, shape, "graph reshape", resolved));
    UG_TRY(ug_graph_new_value(g, VALUE_ALIAS, x->dtype, ndim, resolved, out));
    (*out)->alias_of = ug_value_base(x);
    return UG_OK;
}

ug_status ug_graph_keep(ug_graph *g, ug_value *v)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_keep"));
    UG_TRY(ug_graph_check_value(g, v, "ug_graph_keep", "value"));
    ug_value_base(v)->keep = true;
    return UG_OK;
}

ug_status ug_graph_backward_stage(ug_graph *g, ug_value *root, ug_value *seed, ug_value *input,
                                  ug_value **input_grad)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_backward"));
    UG_TRY(ug_graph_check_value(g, root, "ug_graph_backward", seed ? "output" : "loss"));
    if (g->has_backward)
        return ug_set_error(UG_ERR_STATE, "ug_graph_backward: the graph already has a backward pass");
    if (!seed && (ug_shape_numel(root->ndim, root->shape) != 1 || root->dtype != UG_F32))
        return ug_set_error(UG_ERR_SHAPE, "ug_graph_backward: the loss must be one f32 element");
    ug_graph_mark mark = ug_graph_mark_now(g);
    g->building = PHASE_BACKWARD;
    ug_status st = ug_autograd_derive(g, root, seed, input);
    ug_value *grad = input ? ug_value_base(input)->grad : NULL;
    if (st == UG_OK && input && !grad)
        st = ug_set_error(UG_ERR_STATE, "ug_graph_backward: the stage's input '%s' reaches its %s through no "
                          "differentiable op, so no gradient goes back to the stage before", input->name,
                          seed ? "output" : "loss");
    /* The gradient sent back is a value of its own, never the seed or a
     * view of another. */
    if (st == UG_OK && grad && (ug_value_base(grad)->kind != VALUE_TEMP || grad->kind == VALUE_ALIAS))
        st = ug_g_scale_shift(g, grad, 1.0f, 0.0f, &grad);
    g->building = PHASE_FORWARD;
    if (st == UG_OK && grad)
        st = ug_graph_keep(g, grad);
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    if (input_grad)
        *input_grad = grad;
    g->loss = seed ? NULL : root;
    g->has_backward = true;
    return seed ? UG_OK : ug_graph_keep(g, root);
}

ug_status ug_graph_backward(ug_graph *g, ug_value *loss)
{
    return ug_graph_backward_stage(g, loss, NULL, NULL, NULL);
}

ug_status ug_graph_set_optimizer(ug_graph *g, ug_optimizer *opt)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_set_optimizer"));
    if (!opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_optimizer: optimizer is NULL");
    if (!g->has_backward)
        return ug_set_error(UG_ERR_STATE, "ug_graph_set_optimizer: call ug_graph_backward first");
    if (g->optimizer)
        return ug_set_error(UG_ERR_STATE, "ug_graph_set_optimizer: the graph already has an optimizer");
    if (ug_optimizer_model(opt) != g->model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_graph_set_optimizer: the optimizer belongs to another model");
    ug_graph_mark mark = ug_graph_mark_now(g);
    g->building = PHASE_UPDATE;
    ug_status st = ug_graph_append_updates(g, opt);
    g->building = PHASE_FORWARD;
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    ug_optimizer_retain(opt);
    g->optimizer = opt;
    const ug_optim_source *source = ug_optimizer_source(opt);
    g->run.loss_scale = source->rule.scaling ? source->step_state : NULL;
    return UG_OK;
}

ug_status ug_graph_grad(ug_graph *g, ug_value *param, ug_value **grad)
{
    if (!g || !param || !grad)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_grad: NULL argument");
    if (param->graph != g || param->kind != VALUE_PARAM)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_grad: the value is not a parameter of this graph");
    if (!param->grad)
        return ug_set_error(UG_ERR_STATE,
                            "ug_graph_grad: '%s' has no gradient (call ug_graph_backward; does the loss depend on it?)",
                            param->name);
    *grad = param->grad;
    return UG_OK;
}

static ug_status accumulate(ug_graph *g, ug_value *value, float scale, bool per_row, const char *op,
                            ug_value **sum)
{
    UG_TRY(start_op(g, op, sum));
    UG_TRY(ug_graph_check_value(g, value, op, "value"));
    if (value->dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: value is %s; sums are kept in f32", op,
                            ug_dtype_name(value->dtype));
    ug_graph_mark mark = ug_graph_mark_now(g);
    const ug_value *base = ug_value_base(value);
    graph_phase before = g->building;
    g->building = base->producer ? base->producer->phase : PHASE_FORWARD;
    ug_value *acc = NULL;
    graph_node *n = NULL;
    /* sum += scale * value, one kernel. */
    ug_op add = {.def = &ug_op_binary, .name = op,
                 .p.binary = {.op = UG_BINARY_ADD_SCALED, .post = UG_UNARY_COPY, .alpha = scale}};
    ug_status st = ug_graph_new_value(g, VALUE_SUM, UG_F32, value->ndim, value->shape, &acc);
    if (st == UG_OK) {
        ug_value *in[2] = {acc, value};
        st = ug_graph_add_node(g, &add, acc, 2, in, &n);
    }
    if (st == UG_OK && per_row)
        n->per_row_scale = scale;
    g->building = before;
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    snprintf(acc->name, sizeof acc->name, "sum of %.50s", value->name[0] ? value->name : "a value");
    *sum = acc;
    return UG_OK;
}

ug_status ug_graph_accumulate(ug_graph *g, ug_value *value, float scale, ug_value **sum)
{
    return accumulate(g, value, scale, false, "ug_graph_accumulate", sum);
}

ug_status ug_graph_accumulate_rows(ug_graph *g, ug_value *value, ug_value **sum)
{
    return accumulate(g, value, 1.0f, true, "ug_graph_accumulate_rows", sum);
}

ug_status ug_graph_clear_sums(ug_graph *g)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_clear_sums: graph is NULL");
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->kind == VALUE_SUM && g->values[i]->tensor)
            UG_TRY(ug_fill(g->values[i]->tensor, 0.0f));
    return UG_OK;
}

ug_status ug_g_mse(ug_graph *g, ug_value *a, ug_value *b, ug_value **out)
{
    UG_TRY(start_op(g, "graph mse", out));
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *diff = NULL, *square = NULL;
    ug_status st = ug_g_sub(g, a, b, &diff);
    if (st == UG_OK)
        st = ug_g_unary(g, UG_UNARY_SQUARE, 0, 0, diff, &square);
    if (st == UG_OK)
        st = ug_g_mean(g, square, 0, true, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}
