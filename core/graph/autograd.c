/* Reverse-mode differentiation: walks the forward nodes backwards and adds,
 * for each, the nodes its definition's backward rule gives (core/ops/).
 * Gradients of values used more than once are summed; gradients of broadcast operands are
 * summed back to the operand's shape. */
#include <string.h>

#include "core/graph/internal.h"

/* Adds contribution to v's gradient. */
static ug_status accumulate(ug_graph *g, ug_value *v, ug_value *contribution)
{
    if (v->kind == VALUE_ALIAS) {
        /* A reshape's gradient is the base's, reshaped back. */
        ug_value *base = v->alias_of, *reshaped = NULL;
        UG_TRY(ug_g_reshape(g, contribution, base->ndim, base->shape, &reshaped));
        return accumulate(g, base, reshaped);
    }
    if (!v->grad) {
        v->grad = contribution;
        return UG_OK;
    }
    return ug_g_add(g, v->grad, contribution, &v->grad);
}

/* Sums grad (shape of a broadcast result) down to target's shape. */
static ug_status reduce_to(ug_graph *g, ug_value *grad, const ug_value *target, ug_value **out)
{
    ug_value *cur = grad;
    int offset = grad->ndim - target->ndim;
    for (int axis = 0; axis < grad->ndim; axis++) {
        int64_t want = axis >= offset ? target->shape[axis - offset] : 1;
        if (cur->shape[axis] != want)
            UG_TRY(ug_g_reduce_axes(g, cur, UG_RKERNEL_SUM, axis, false, true, &cur));
    }
    if (cur->ndim != target->ndim || memcmp(cur->shape, target->shape, sizeof(int64_t) * (size_t)target->ndim))
        UG_TRY(ug_g_reshape(g, cur, target->ndim, target->shape, &cur));
    *out = cur;
    return UG_OK;
}

ug_status ug_grad_give(ug_graph *g, ug_value *operand, ug_value *grad)
{
    if (!operand || !ug_grad_needed(operand))
        return UG_OK;
    ug_value *shaped = NULL;
    UG_TRY(reduce_to(g, grad, operand, &shaped));
    /* A gradient has its operand's dtype, as in PyTorch: an f32 bias added
     * to a bf16 convolution gets an f32 gradient (the cast folds into the
     * sum that makes it). */
    if (shaped->dtype != operand->dtype && ug_dtype_is_float(shaped->dtype) && ug_dtype_is_float(operand->dtype))
        UG_TRY(ug_g_cast(g, shaped, operand->dtype, &shaped));
    return accumulate(g, operand, shaped);
}

bool ug_grad_needed(const ug_value *v)
{
    return ug_value_base(v)->needs_grad;
}

/* A value needs a gradient when a parameter (or the input whose gradient
 * is wanted) reaches it; nodes are in topological order, so one forward
 * pass marks them all. */
static void mark_needs_grad(ug_graph *g, const ug_value *wanted)
{
    for (int i = 0; i < g->value_count; i++)
        g->values[i]->needs_grad = g->values[i]->kind == VALUE_PARAM || g->values[i] == wanted;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        for (int k = 0; k < n->nin && n->out; k++)
            n->out->needs_grad |= ug_grad_needed(n->in[k]);
    }
}

ug_status ug_autograd_derive(ug_graph *g, ug_value *root, ug_value *seed, ug_value *wanted)
{
    int forward_nodes = g->node_count;
    mark_needs_grad(g, wanted);
    if (!ug_grad_needed(root))
        return ug_set_error(UG_ERR_STATE, "ug_graph_backward: the %s does not depend on any parameter%s",
                            seed ? "stage's output" : "loss", wanted ? " or on the stage's input" : "");
    if (!seed) {
        ug_op seed_op = {.def = &ug_op_loss_seed, .name = "loss seed",
                         .p.seed = {.run = &g->run, .ndim = root->ndim}};
        memcpy(seed_op.p.seed.shape, root->shape, sizeof(int64_t) * (size_t)root->ndim);
        UG_TRY(ug_op_graph(g, &seed_op, 0, NULL, &seed));
    }
    UG_TRY(accumulate(g, root, seed));
    for (int i = forward_nodes - 1; i >= 0; i--) {
        graph_node *n = g->nodes[i];
        ug_value *gy = n->out ? n->out->grad : NULL;
        if (!gy)
            continue;
        if (!n->op.def->backward)
            return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: %s has no gradient",
                                n->op.name ? n->op.name : n->op.def->family);
        g->deriving = n;
        const ug_op_node view = {.op = &n->op, .in = n->in, .nin = n->nin, .out = n->out, .saved = n->scratch,
                                 .nsaved = n->nscratch};
        ug_status st = n->op.def->backward(g, &view, gy);
        g->deriving = NULL;
        UG_TRY(st);
    }
    return UG_OK;
}
