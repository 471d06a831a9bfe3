/* Building graphs: values, nodes and the symbolic ops with their shape rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"

ug_status ug_graph_create(ug_model *model, ug_graph **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_create: out is NULL");
    *out = NULL;
    if (!model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_create: model is NULL");
    ug_graph *g = calloc(1, sizeof *g);
    if (!g)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_create: out of host memory");
    g->model = model;
    g->device = ug_model_device(model);
    g->training = true;
    *out = g;
    return UG_OK;
}

void ug_graph_free(ug_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind != VALUE_PARAM) /* parameters belong to the model */
            ug_tensor_free(v->tensor);
        free(v);
    }
    for (int i = 0; i < g->node_count; i++)
        free(g->nodes[i]);
    free(g->values);
    free(g->nodes);
    ug_storage_release(g->arena);
    free(g);
}

ug_model *ug_graph_model(const ug_graph *g) { return g ? g->model : NULL; }

ug_status ug_graph_check_open(const ug_graph *g, const char *op)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: graph is NULL", op);
    if (g->compiled)
        return ug_set_error(UG_ERR_STATE, "%s: the graph is compiled; build a new graph to change it", op);
    return UG_OK;
}

ug_status ug_graph_set_training(ug_graph *g, bool training)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_set_training"));
    g->training = training;
    return UG_OK;
}

ug_status ug_graph_set_seed(ug_graph *g, uint64_t seed)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_seed: graph is NULL");
    g->seed = seed;
    return UG_OK;
}

ug_status ug_graph_new_value(ug_graph *g, value_kind kind, ug_dtype dtype, int ndim,
                             const int64_t *shape, ug_value **out)
{
    if (ndim < 0 || ndim > UG_MAX_DIMS)
        return ug_set_error(UG_ERR_SHAPE, "graph: ndim %d is outside 0..%d", ndim, UG_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return ug_set_error(UG_ERR_SHAPE, "graph: dimension %d has negative size %lld", i,
                                (long long)shape[i]);
    if (g->value_count == g->value_capacity) {
        int capacity = g->value_capacity ? g->value_capacity * 2 : 64;
        ug_value **grown = realloc(g->values, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
        g->values = grown;
        g->value_capacity = capacity;
    }
    ug_value *v = calloc(1, sizeof *v);
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

ug_status ug_graph_add_node(ug_graph *g, node_kind kind, ug_value *out, int nin,
                            ug_value *const *in, graph_node **node)
{
    if (g->node_count == g->node_capacity) {
        int capacity = g->node_capacity ? g->node_capacity * 2 : 64;
        graph_node **grown = realloc(g->nodes, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
        g->nodes = grown;
        g->node_capacity = capacity;
    }
    graph_node *n = calloc(1, sizeof *n);
    if (!n)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "graph: out of host memory");
    n->kind = kind;
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

ug_status ug_graph_op(ug_graph *g, node_kind kind, ug_dtype dtype, int ndim, const int64_t *shape,
                      int nin, ug_value *const *in, graph_node **node)
{
    ug_value *out = NULL;
    UG_TRY(ug_graph_new_value(g, VALUE_TEMP, dtype, ndim, shape, &out));
    return ug_graph_add_node(g, kind, out, nin, in, node);
}

static ug_status check_value(ug_graph *g, const ug_value *v, const char *op, const char *arg)
{
    if (!v)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, arg);
    if (v->graph != g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s belongs to another graph", op, arg);
    return UG_OK;
}

static ug_status check_float_value(const ug_value *v, const char *op, const char *arg)
{
    if (v->dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; graph ops compute in f32", op, arg,
                            ug_dtype_name(v->dtype));
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
    UG_TRY(start_op(g, "ug_graph_param", out));
    if (!param)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_param: param is NULL");
    int index = ug_model_param_index(g->model, param);
    if (index < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_graph_param: the tensor is not a parameter of the graph's model "
                            "(create it with ug_model_param)");
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->kind == VALUE_PARAM && g->values[i]->param == param) {
            *out = g->values[i];
            return UG_OK;
        }
    UG_TRY(ug_graph_new_value(g, VALUE_PARAM, param->dtype, param->ndim, param->shape, out));
    const char *name = NULL;
    ug_model_param_at(g->model, index, &name, NULL);
    snprintf((*out)->name, sizeof (*out)->name, "%s", name);
    (*out)->param = param;
    (*out)->tensor = param;
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
    return axis >= 0 && axis < v->ndim ? v->shape[axis] : -1;
}

/* ---- elementwise ---- */

ug_status ug_g_binary(ug_graph *g, ug_binary_kind op, float alpha, ug_value *a, ug_value *b,
                      ug_value **out)
{
    UG_TRY(start_op(g, "graph binary op", out));
    UG_TRY(check_value(g, a, "graph binary op", "a"));
    UG_TRY(check_value(g, b, "graph binary op", "b"));
    UG_TRY(check_float_value(a, "graph binary op", "a"));
    UG_TRY(check_float_value(b, "graph binary op", "b"));
    int ndim = 0;
    int64_t shape[UG_MAX_DIMS];
    UG_TRY(ug_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, "graph binary op", &ndim, shape));
    graph_node *n;
    ug_value *in[2] = {a, b};
    UG_TRY(ug_graph_op(g, NODE_BINARY, UG_F32, ndim, shape, 2, in, &n));
    n->p.binary.op = op;
    n->p.binary.post = UG_UNARY_COPY;
    n->p.binary.alpha = alpha;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_unary(ug_graph *g, ug_unary_kind op, float alpha, float beta, ug_value *x,
                     ug_value **out)
{
    UG_TRY(start_op(g, "graph unary op", out));
    UG_TRY(check_value(g, x, "graph unary op", "x"));
    UG_TRY(check_float_value(x, "graph unary op", "x"));
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_UNARY, UG_F32, x->ndim, x->shape, 1, &x, &n));
    n->p.unary.op = op;
    n->p.unary.alpha = alpha;
    n->p.unary.beta = beta;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_add(ug_graph *g, ug_value *a, ug_value *b, ug_value **out) { return ug_g_binary(g, UG_BINARY_ADD, 0, a, b, out); }
ug_status ug_g_sub(ug_graph *g, ug_value *a, ug_value *b, ug_value **out) { return ug_g_binary(g, UG_BINARY_SUB, 0, a, b, out); }
ug_status ug_g_mul(ug_graph *g, ug_value *a, ug_value *b, ug_value **out) { return ug_g_binary(g, UG_BINARY_MUL, 0, a, b, out); }
ug_status ug_g_div(ug_graph *g, ug_value *a, ug_value *b, ug_value **out) { return ug_g_binary(g, UG_BINARY_DIV, 0, a, b, out); }
ug_status ug_g_maximum(ug_graph *g, ug_value *a, ug_value *b, ug_value **out) { return ug_g_binary(g, UG_BINARY_MAXIMUM, 0, a, b, out); }
ug_status ug_g_neg(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_NEG, 0, 0, x, out); }
ug_status ug_g_abs(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_ABS, 0, 0, x, out); }
ug_status ug_g_exp(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_EXP, 0, 0, x, out); }
ug_status ug_g_log(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_LOG, 0, 0, x, out); }
ug_status ug_g_sqrt(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_SQRT, 0, 0, x, out); }
ug_status ug_g_relu(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_RELU, 0, 0, x, out); }
ug_status ug_g_sigmoid(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_SIGMOID, 0, 0, x, out); }
ug_status ug_g_tanh(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_TANH, 0, 0, x, out); }
ug_status ug_g_gelu(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_unary(g, UG_UNARY_GELU, 0, 0, x, out); }

ug_status ug_g_scale_shift(ug_graph *g, ug_value *x, float scale, float shift, ug_value **out)
{
    return ug_g_unary(g, UG_UNARY_SCALE_SHIFT, scale, shift, x, out);
}

ug_status ug_g_fill(ug_graph *g, float value, int ndim, const int64_t *shape, ug_value **out)
{
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_FILL, UG_F32, ndim, shape, 0, NULL, &n));
    n->p.unary.beta = value;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_expand(ug_graph *g, ug_value *x, float alpha, int ndim, const int64_t *shape,
                      ug_value **out)
{
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_EXPAND, UG_F32, ndim, shape, 1, &x, &n));
    n->p.unary.alpha = alpha;
    *out = n->out;
    return UG_OK;
}

/* ---- shape ops ---- */

ug_status ug_g_matmul(ug_graph *g, ug_value *a, ug_value *b, bool ta, bool tb, ug_value **out)
{
    UG_TRY(start_op(g, "graph matmul", out));
    UG_TRY(check_value(g, a, "graph matmul", "a"));
    UG_TRY(check_value(g, b, "graph matmul", "b"));
    UG_TRY(check_float_value(a, "graph matmul", "a"));
    UG_TRY(check_float_value(b, "graph matmul", "b"));
    char sa[96], sb[96];
    if (a->ndim < 2 || b->ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "graph matmul: a is %s, b is %s; both need two axes",
                            ug_format_shape(a->ndim, a->shape, sa, sizeof sa),
                            ug_format_shape(b->ndim, b->shape, sb, sizeof sb));
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    int64_t m = ta ? ac : ar, k = ta ? ar : ac, kb = tb ? bc : br, n = tb ? br : bc;
    if (k != kb)
        return ug_set_error(UG_ERR_SHAPE, "graph matmul: inner dimensions differ: a is %s%s, b is %s%s%s",
                            ug_format_shape(a->ndim, a->shape, sa, sizeof sa), ta ? " (transposed)" : "",
                            ug_format_shape(b->ndim, b->shape, sb, sizeof sb), tb ? " (transposed)" : "",
                            !tb && k == bc ? " (did you mean transpose_b?)" : "");
    if (a->ndim > 2 && b->ndim > 2 &&
        (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)(a->ndim - 2))))
        return ug_set_error(UG_ERR_SHAPE, "graph matmul: batch axes differ: a is %s, b is %s",
                            ug_format_shape(a->ndim, a->shape, sa, sizeof sa),
                            ug_format_shape(b->ndim, b->shape, sb, sizeof sb));
    const ug_value *batched = a->ndim >= b->ndim ? a : b;
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, batched->shape, sizeof shape);
    shape[batched->ndim - 2] = m;
    shape[batched->ndim - 1] = n;
    graph_node *node;
    ug_value *in[2] = {a, b};
    UG_TRY(ug_graph_op(g, NODE_MATMUL, UG_F32, batched->ndim, shape, 2, in, &node));
    node->p.matmul.ta = ta;
    node->p.matmul.tb = tb;
    *out = node->out;
    return UG_OK;
}

ug_status ug_g_reduce_axes(ug_graph *g, ug_value *x, ug_reduce_kind op, int axis, bool all,
                           bool keepdim, ug_value **out)
{
    int64_t shape[UG_MAX_DIMS];
    int ndim = 0;
    int64_t outer = 1, len = 1, inner = 1;
    int reduced_axis = -1;
    if (all) {
        len = ug_shape_numel(x->ndim, x->shape);
        if (keepdim)
            for (; ndim < x->ndim; ndim++)
                shape[ndim] = 1;
    } else {
        int a = axis < 0 ? axis + x->ndim : axis;
        if (a < 0 || a >= x->ndim) {
            char s[96];
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph reduce: axis %d is out of range for %s",
                                axis, ug_format_shape(x->ndim, x->shape, s, sizeof s));
        }
        reduced_axis = a;
        for (int i = 0; i < x->ndim; i++) {
            if (i < a)
                outer *= x->shape[i];
            else if (i > a)
                inner *= x->shape[i];
            else
                len = x->shape[i];
            if (i != a || keepdim)
                shape[ndim++] = i == a ? 1 : x->shape[i];
        }
    }
    if (len == 0)
        return ug_set_error(UG_ERR_SHAPE, "graph reduce: the reduced axis is empty");
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_REDUCE, op == UG_RKERNEL_ARGMAX ? UG_I32 : UG_F32, ndim, shape, 1, &x, &n));
    n->p.reduce.op = op;
    n->p.reduce.outer = outer;
    n->p.reduce.len = len;
    n->p.reduce.inner = inner;
    n->p.reduce.axis = reduced_axis;
    *out = n->out;
    return UG_OK;
}

static ug_status reduce_op(ug_graph *g, ug_value *x, ug_reduce_kind op, int axis, bool all,
                           const char *name, ug_value **out)
{
    UG_TRY(start_op(g, name, out));
    UG_TRY(check_value(g, x, name, "x"));
    UG_TRY(check_float_value(x, name, "x"));
    return ug_g_reduce_axes(g, x, op, axis, all, false, out);
}

ug_status ug_g_sum(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out)
{
    return reduce_op(g, x, UG_RKERNEL_SUM, axis, all, "graph sum", out);
}

ug_status ug_g_mean(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out)
{
    return reduce_op(g, x, UG_RKERNEL_MEAN, axis, all, "graph mean", out);
}

ug_status ug_g_argmax(ug_graph *g, ug_value *x, int axis, ug_value **out)
{
    return reduce_op(g, x, UG_RKERNEL_ARGMAX, axis, false, "graph argmax", out);
}

static ug_status softmax_op(ug_graph *g, ug_value *x, bool log, ug_value **out)
{
    const char *name = log ? "graph log_softmax" : "graph softmax";
    UG_TRY(start_op(g, name, out));
    UG_TRY(check_value(g, x, name, "x"));
    UG_TRY(check_float_value(x, name, "x"));
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x needs at least one axis", name);
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_SOFTMAX, UG_F32, x->ndim, x->shape, 1, &x, &n));
    n->p.softmax.log = log;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_softmax(ug_graph *g, ug_value *x, ug_value **out) { return softmax_op(g, x, false, out); }
ug_status ug_g_log_softmax(ug_graph *g, ug_value *x, ug_value **out) { return softmax_op(g, x, true, out); }

ug_status ug_g_transpose(ug_graph *g, ug_value *x, ug_value **out)
{
    UG_TRY(start_op(g, "graph transpose", out));
    UG_TRY(check_value(g, x, "graph transpose", "x"));
    UG_TRY(check_float_value(x, "graph transpose", "x"));
    if (x->ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "graph transpose: x needs at least two axes");
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 2] = x->shape[x->ndim - 1];
    shape[x->ndim - 1] = x->shape[x->ndim - 2];
    graph_node *n;
    UG_TRY(ug_graph_op(g, NODE_TRANSPOSE, UG_F32, x->ndim, shape, 1, &x, &n));
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_reshape(ug_graph *g, ug_value *x, int ndim, const int64_t *shape, ug_value **out)
{
    UG_TRY(start_op(g, "graph reshape", out));
    UG_TRY(check_value(g, x, "graph reshape", "x"));
    int64_t resolved[UG_MAX_DIMS];
    UG_TRY(ug_resolve_reshape(x->ndim, x->shape, ndim, shape, "graph reshape", resolved));
    UG_TRY(ug_graph_new_value(g, VALUE_ALIAS, x->dtype, ndim, resolved, out));
    (*out)->alias_of = x->kind == VALUE_ALIAS ? x->alias_of : x;
    return UG_OK;
}

ug_status ug_g_dropout(ug_graph *g, ug_value *x, float p, ug_value **out)
{
    UG_TRY(start_op(g, "graph dropout", out));
    UG_TRY(check_value(g, x, "graph dropout", "x"));
    UG_TRY(check_float_value(x, "graph dropout", "x"));
    if (!(p >= 0.0f && p < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph dropout: p = %g must be in [0, 1)", (double)p);
    if (!g->training || p == 0.0f) { /* eval mode: the identity */
        *out = x;
        return UG_OK;
    }
    graph_node *mask;
    UG_TRY(ug_graph_op(g, NODE_DROPOUT_MASK, UG_F32, x->ndim, x->shape, 0, NULL, &mask));
    mask->p.dropout.stream = g->dropout_streams++;
    return ug_g_binary(g, UG_BINARY_DROPOUT, p, x, mask->out, out);
}

ug_status ug_g_layernorm(ug_graph *g, ug_value *x, ug_value *gamma, ug_value *beta, float eps,
                         ug_value **out)
{
    UG_TRY(start_op(g, "graph layernorm", out));
    UG_TRY(check_value(g, x, "graph layernorm", "x"));
    UG_TRY(check_value(g, gamma, "graph layernorm", "gamma"));
    UG_TRY(check_value(g, beta, "graph layernorm", "beta"));
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "graph layernorm: x needs at least one axis");
    int64_t cols = x->shape[x->ndim - 1];
    if (ug_shape_numel(gamma->ndim, gamma->shape) != cols || ug_shape_numel(beta->ndim, beta->shape) != cols)
        return ug_set_error(UG_ERR_SHAPE, "graph layernorm: gamma and beta need %lld elements (x's last axis)",
                            (long long)cols);
    if (!(eps > 0.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "graph layernorm: eps %g must be positive", (double)eps);
    graph_node *n;
    ug_value *in[3] = {x, gamma, beta};
    UG_TRY(ug_graph_op(g, NODE_LAYERNORM, UG_F32, x->ndim, x->shape, 3, in, &n));
    n->p.layernorm.eps = eps;
    int64_t rows = ug_shape_numel(x->ndim, x->shape) / (cols ? cols : 1);
    UG_TRY(ug_graph_new_value(g, VALUE_TEMP, UG_F32, 1, &rows, &n->scratch[0]));
    UG_TRY(ug_graph_new_value(g, VALUE_TEMP, UG_F32, 1, &rows, &n->scratch[1]));
    n->scratch[0]->producer = n;
    n->scratch[1]->producer = n;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_cross_entropy(ug_graph *g, ug_value *logits, ug_value *labels, float smoothing,
                             ug_value **out)
{
    const char *name = "graph cross_entropy";
    UG_TRY(start_op(g, name, out));
    UG_TRY(check_value(g, logits, name, "logits"));
    UG_TRY(check_value(g, labels, name, "labels"));
    UG_TRY(check_float_value(logits, name, "logits"));
    char sl[96], sy[96];
    if (labels->dtype != UG_I32)
        return ug_set_error(UG_ERR_DTYPE, "%s: labels are %s; they must be i32 class indices", name,
                            ug_dtype_name(labels->dtype));
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0])
        return ug_set_error(UG_ERR_SHAPE, "%s: logits are %s and labels %s; expected [rows, classes] and [rows]",
                            name, ug_format_shape(logits->ndim, logits->shape, sl, sizeof sl),
                            ug_format_shape(labels->ndim, labels->shape, sy, sizeof sy));
    if (!(smoothing >= 0.0f && smoothing < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: label smoothing %g must be in [0, 1)", name,
                            (double)smoothing);
    graph_node *n;
    ug_value *in[2] = {logits, labels};
    UG_TRY(ug_graph_op(g, NODE_XENT, UG_F32, 0, NULL, 2, in, &n));
    n->p.xent.smoothing = smoothing;
    UG_TRY(ug_graph_new_value(g, VALUE_TEMP, UG_F32, 1, logits->shape, &n->scratch[0]));
    n->scratch[0]->producer = n;
    *out = n->out;
    return UG_OK;
}

ug_status ug_g_mse(ug_graph *g, ug_value *a, ug_value *b, ug_value **out)
{
    ug_value *diff = NULL, *square = NULL;
    UG_TRY(ug_g_sub(g, a, b, &diff));
    UG_TRY(ug_g_unary(g, UG_UNARY_SQUARE, 0, 0, diff, &square));
    return ug_g_mean(g, square, 0, true, out);
}

ug_status ug_graph_keep(ug_graph *g, ug_value *v)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_keep"));
    UG_TRY(check_value(g, v, "ug_graph_keep", "value"));
    (v->kind == VALUE_ALIAS ? v->alias_of : v)->keep = true;
    return UG_OK;
}

ug_status ug_graph_backward(ug_graph *g, ug_value *loss)
{
    UG_TRY(ug_graph_check_open(g, "ug_graph_backward"));
    UG_TRY(check_value(g, loss, "ug_graph_backward", "loss"));
    if (g->has_backward)
        return ug_set_error(UG_ERR_STATE, "ug_graph_backward: the graph already has a backward pass");
    if (ug_shape_numel(loss->ndim, loss->shape) != 1 || loss->dtype != UG_F32)
        return ug_set_error(UG_ERR_SHAPE, "ug_graph_backward: the loss must be one f32 element");
    UG_TRY(ug_autograd_derive(g, loss));
    g->loss = loss;
    g->has_backward = true;
    return ug_graph_keep(g, loss);
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
    UG_TRY(ug_optim_append(g, opt));
    g->optimizer = opt;
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
