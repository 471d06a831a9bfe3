/* Mixed precision in graphs (ug_graph_set_precision): the dtype each op of
 * the forward pass computes in, with PyTorch autocast's lists. Each op
 * declares its class (the autocast trait of its definition):
 *
 *   half: matrix products and convolutions read their float operands in the
 *     graph's half dtype (parameters through the model's half copy);
 *   f32: softmax, cross-entropy, layer norm, sums and means, exp and log
 *     read half operands widened to f32;
 *   follow: elementwise ops, pooling, dropout run in their operands' dtype;
 *     a parameter beside a half operand is read through its half copy, and
 *     other f32 operands beside half ones widen the half ones (PyTorch's
 *     promotion);
 *   keep: everything else (batch norm keeps f32 weights and statistics
 *     whatever x's dtype) is left as given.
 *
 * A value cast to a dtype once is reused by every later op reading it; an
 * input's cast is recomputed for the backward pass instead of held. The
 * backward pass follows the forward's dtypes through the casts' gradients,
 * and graph/plan.c folds a cast into the op that produces its operand. */
#include <string.h>

#include "core/graph/internal.h"

/* Each op's class is its definition's autocast trait. */
static ug_autocast_class autocast_class_of(const ug_op *op)
{
    return op->def->autocast ? op->def->autocast(op) : UG_AUTOCAST_KEEP;
}

static bool is_half(ug_dtype d) { return d != UG_F32 && ug_dtype_is_float(d); }

/* The parameter's half copy as a value: a cast node that never runs (the
 * optimizer's update keeps the copy current), so that autograd casts the
 * copy's gradient back to the f32 parameter. */
static ug_status param_copy(ug_graph *g, ug_value *param, ug_value **out)
{
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_PARAM_COPY && v->producer && v->producer->in[0] == param &&
            v->dtype == g->precision) {
            *out = v;
            return UG_OK;
        }
    }
    ug_tensor *copy = NULL;
    UG_TRY(ug_model_half_copy(g->model, ug_model_param_index(g->model, param->param),
                              g->precision, &copy));
    ug_op op = {.def = &ug_op_cast, .name = "half copy", .p.cast.dtype = g->precision};
    ug_value *v = NULL;
    graph_node *n = NULL;
    UG_TRY(ug_graph_new_value(g, VALUE_PARAM_COPY, g->precision, param->ndim, param->shape, &v));
    /* The parameter's name: messages about the copy then name the parameter. */
    memcpy(v->name, param->name, sizeof v->name);
    v->tensor = copy;
    UG_TRY(ug_graph_add_node(g, &op, v, 1, &param, &n));
    n->dead = true; /* never launched */
    *out = v;
    return UG_OK;
}

/* x in dtype: itself, an earlier cast of it, or a new cast node. */
static ug_status cast_to(ug_graph *g, ug_value *x, ug_dtype dtype, ug_value **out)
{
    if (x->dtype == dtype) {
        *out = x;
        return UG_OK;
    }
    if (x->kind == VALUE_PARAM && dtype == g->precision)
        return param_copy(g, x, out);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (ug_node_fold(n).kind == UG_FOLD_CAST && !n->dead && n->in[0] == x && n->out->dtype == dtype &&
            n->phase == PHASE_FORWARD) {
            *out = n->out;
            return UG_OK;
        }
    }
    g->autocasting = true; /* the cast itself is not autocast */
    ug_status st = ug_g_cast(g, x, dtype, out);
    g->autocasting = false;
    /* A cast of an input (bound for the whole step) is recomputed for the
     * backward pass rather than held through it: a recomputed segment of
     * its own (graph/recompute.c). */
    if (st == UG_OK && ug_value_base(x)->kind == VALUE_INPUT && !g->has_backward) {
        (*out)->producer->segment = ++g->segments;
        (*out)->producer->input_cast = true;
    }
    return st;
}

ug_status ug_autocast_inputs(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                             ug_value **cast)
{
    const ug_autocast_class amp = autocast_class_of(op);
    bool any_half = false, any_f32 = false;
    for (int i = 0; i < nin; i++) {
        cast[i] = in[i];
        if (!in[i])
            continue;
        any_half |= is_half(in[i]->dtype);
        any_f32 |= in[i]->dtype == UG_F32 && ug_value_base(in[i])->kind != VALUE_PARAM;
    }
    for (int i = 0; i < nin; i++) {
        ug_value *x = in[i];
        if (!x || !ug_dtype_is_float(x->dtype))
            continue;
        ug_dtype want = x->dtype;
        if (amp == UG_AUTOCAST_HALF)
            want = g->precision;
        else if (amp == UG_AUTOCAST_F32)
            want = UG_F32;
        else if (amp == UG_AUTOCAST_FOLLOW && any_half)
            want = any_f32 ? UG_F32 : g->precision;
        if (want != x->dtype)
            UG_TRY(cast_to(g, x, want, &cast[i]));
    }
    return UG_OK;
}
