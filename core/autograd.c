/* Reverse-mode differentiation: walks the forward nodes backwards and adds,
 * for each, the nodes computing its inputs' gradients. Gradients of values
 * used more than once are summed; gradients of broadcast operands are
 * summed back to the operand's shape. */
#include <string.h>

#include "core/graph_internal.h"

static bool needs_grad(const ug_value *v);

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

static ug_status give(ug_graph *g, ug_value *operand, ug_value *grad)
{
    if (!needs_grad(operand))
        return UG_OK;
    ug_value *shaped = NULL;
    UG_TRY(reduce_to(g, grad, operand, &shaped));
    return accumulate(g, operand, shaped);
}

static ug_status binary_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *a = n->in[0], *b = n->in[1], *ga = NULL, *gb = NULL, *t = NULL;
    switch (n->p.binary.op) {
    case UG_BINARY_ADD:
        UG_TRY(give(g, a, gy));
        return give(g, b, gy);
    case UG_BINARY_SUB:
        UG_TRY(give(g, a, gy));
        if (!needs_grad(b))
            return UG_OK;
        UG_TRY(ug_g_neg(g, gy, &gb));
        return give(g, b, gb);
    case UG_BINARY_MUL:
        if (needs_grad(a)) {
            UG_TRY(ug_g_mul(g, gy, b, &ga));
            UG_TRY(give(g, a, ga));
        }
        if (needs_grad(b)) {
            UG_TRY(ug_g_mul(g, gy, a, &gb));
            UG_TRY(give(g, b, gb));
        }
        return UG_OK;
    case UG_BINARY_DIV: /* d(a/b)/db = -(a/b)/b */
        UG_TRY(ug_g_div(g, gy, b, &ga));
        UG_TRY(give(g, a, ga));
        if (!needs_grad(b))
            return UG_OK;
        UG_TRY(ug_g_mul(g, ga, n->out, &t));
        UG_TRY(ug_g_neg(g, t, &gb));
        return give(g, b, gb);
    case UG_BINARY_MAXIMUM: {
        /* As PyTorch: ties split the gradient evenly. share_a = (ge(a,b) - ge(b,a) + 1) / 2 */
        ug_value *ge_ab = NULL, *ge_ba = NULL, *diff = NULL, *share = NULL;
        UG_TRY(ug_g_binary(g, UG_BINARY_GE_MASK, 0, a, b, &ge_ab));
        UG_TRY(ug_g_binary(g, UG_BINARY_GE_MASK, 0, b, a, &ge_ba));
        UG_TRY(ug_g_sub(g, ge_ab, ge_ba, &diff));
        UG_TRY(ug_g_scale_shift(g, diff, 0.5f, 0.5f, &share));
        UG_TRY(ug_g_mul(g, gy, share, &ga));
        UG_TRY(give(g, a, ga));
        UG_TRY(ug_g_sub(g, gy, ga, &gb));
        return give(g, b, gb);
    }
    case UG_BINARY_DROPOUT:
        UG_TRY(ug_g_binary(g, UG_BINARY_DROPOUT, n->p.binary.alpha, gy, b, &ga));
        return give(g, a, ga);
    default:
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: binary op %d has no gradient",
                            (int)n->p.binary.op);
    }
}

static ug_status unary_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *y = n->out, *gx = NULL;
    switch (n->p.unary.op) {
    case UG_UNARY_NEG: UG_TRY(ug_g_neg(g, gy, &gx)); break;
    case UG_UNARY_ABS: UG_TRY(ug_g_binary(g, UG_BINARY_ABS_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_EXP: UG_TRY(ug_g_mul(g, gy, y, &gx)); break;
    case UG_UNARY_LOG: UG_TRY(ug_g_div(g, gy, x, &gx)); break;
    case UG_UNARY_SQRT: UG_TRY(ug_g_binary(g, UG_BINARY_SQRT_GRAD, 0, gy, y, &gx)); break;
    /* relu'(x) = [y > 0]: reading y lets the forward fuse the bias add. */
    case UG_UNARY_RELU: UG_TRY(ug_g_binary(g, UG_BINARY_RELU_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_SIGMOID: UG_TRY(ug_g_binary(g, UG_BINARY_SIGMOID_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_TANH: UG_TRY(ug_g_binary(g, UG_BINARY_TANH_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_GELU: UG_TRY(ug_g_binary(g, UG_BINARY_GELU_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_SCALE_SHIFT: UG_TRY(ug_g_scale_shift(g, gy, n->p.unary.alpha, 0.0f, &gx)); break;
    case UG_UNARY_SQUARE: {
        ug_value *t = NULL;
        UG_TRY(ug_g_mul(g, gy, x, &t));
        UG_TRY(ug_g_scale_shift(g, t, 2.0f, 0.0f, &gx));
        break;
    }
    default:
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: unary op %d has no gradient",
                            (int)n->p.unary.op);
    }
    return give(g, x, gx);
}

/* Gradients of C = op(A) op(B); the products broadcast a 2-D operand over
 * the batch, and give() sums that batch back. */
static ug_status matmul_grad(ug_graph *g, graph_node *n, ug_value *gc)
{
    ug_value *a = n->in[0], *b = n->in[1], *ga = NULL, *gb = NULL;
    bool ta = n->p.matmul.ta, tb = n->p.matmul.tb;
    if (needs_grad(a)) {
        if (!ta)
            UG_TRY(ug_g_matmul(g, gc, b, false, !tb, &ga));   /* dC op(B)^T */
        else
            UG_TRY(ug_g_matmul(g, b, gc, tb, true, &ga));      /* op(B) dC^T */
        UG_TRY(give(g, a, ga));
    }
    if (needs_grad(b)) {
        if (!tb)
            UG_TRY(ug_g_matmul(g, a, gc, !ta, false, &gb));    /* op(A)^T dC */
        else
            UG_TRY(ug_g_matmul(g, gc, a, true, ta, &gb));      /* dC^T op(A) */
        UG_TRY(give(g, b, gb));
    }
    return UG_OK;
}

static ug_status reduce_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *kept = gy, *gx = NULL;
    float scale = 1.0f;
    if (n->p.reduce.op == UG_RKERNEL_MEAN)
        scale = 1.0f / (float)n->p.reduce.len;
    else if (n->p.reduce.op != UG_RKERNEL_SUM)
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: max/argmax reductions have no gradient here");
    /* Put the reduced axis back as size 1 so the expand broadcasts along it. */
    int64_t shape[UG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        shape[i] = n->p.reduce.axis < 0 || i == n->p.reduce.axis ? 1 : x->shape[i];
    UG_TRY(ug_g_reshape(g, gy, x->ndim, shape, &kept));
    UG_TRY(ug_g_expand(g, kept, scale, x->ndim, x->shape, &gx));
    return give(g, x, gx);
}

static ug_status softmax_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *y = n->out, *x = n->in[0], *s = NULL, *t = NULL, *gx = NULL;
    if (n->p.softmax.log) { /* gx = gy - exp(y) * sum(gy) */
        ug_value *p = NULL;
        UG_TRY(ug_g_reduce_axes(g, gy, UG_RKERNEL_SUM, -1, false, true, &s));
        UG_TRY(ug_g_exp(g, y, &p));
        UG_TRY(ug_g_mul(g, p, s, &t));
        UG_TRY(ug_g_sub(g, gy, t, &gx));
    } else { /* gx = y * (gy - sum(gy * y)) */
        ug_value *gyy = NULL;
        UG_TRY(ug_g_mul(g, gy, y, &gyy));
        UG_TRY(ug_g_reduce_axes(g, gyy, UG_RKERNEL_SUM, -1, false, true, &s));
        UG_TRY(ug_g_sub(g, gy, s, &t));
        UG_TRY(ug_g_mul(g, y, t, &gx));
    }
    return give(g, x, gx);
}

static ug_status layernorm_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    ug_value *mean = n->scratch[0], *rstd = n->scratch[1];
    int64_t cols = x->shape[x->ndim - 1];
    int64_t rows = ug_shape_numel(x->ndim, x->shape) / cols;
    int64_t flat[2] = {rows, cols}, column[2] = {rows, 1};
    if (needs_grad(x)) {
        graph_node *dn;
        ug_value *in[5] = {gy, x, mean, rstd, gamma};
        UG_TRY(ug_graph_op(g, NODE_LAYERNORM_GRAD, UG_F32, x->ndim, x->shape, 5, in, &dn));
        dn->p.layernorm.eps = n->p.layernorm.eps;
        UG_TRY(give(g, x, dn->out));
    }
    ug_value *gy2 = NULL, *x2 = NULL, *m2 = NULL, *r2 = NULL, *centered = NULL, *xhat = NULL;
    ug_value *prod = NULL, *dgamma = NULL, *dbeta = NULL;
    UG_TRY(ug_g_reshape(g, gy, 2, flat, &gy2));
    if (needs_grad(gamma)) {
        UG_TRY(ug_g_reshape(g, x, 2, flat, &x2));
        UG_TRY(ug_g_reshape(g, mean, 2, column, &m2));
        UG_TRY(ug_g_reshape(g, rstd, 2, column, &r2));
        UG_TRY(ug_g_sub(g, x2, m2, &centered));
        UG_TRY(ug_g_mul(g, centered, r2, &xhat));
        UG_TRY(ug_g_mul(g, gy2, xhat, &prod));
        UG_TRY(ug_g_reduce_axes(g, prod, UG_RKERNEL_SUM, 0, false, false, &dgamma));
        UG_TRY(give(g, gamma, dgamma));
    }
    if (needs_grad(beta)) {
        UG_TRY(ug_g_reduce_axes(g, gy2, UG_RKERNEL_SUM, 0, false, false, &dbeta));
        UG_TRY(give(g, beta, dbeta));
    }
    return UG_OK;
}

static ug_status node_grad(ug_graph *g, graph_node *n, ug_value *gy)
{
    switch (n->kind) {
    case NODE_BINARY: return binary_grad(g, n, gy);
    case NODE_UNARY: return unary_grad(g, n, gy);
    case NODE_MATMUL: return matmul_grad(g, n, gy);
    case NODE_REDUCE: return reduce_grad(g, n, gy);
    case NODE_SOFTMAX: return softmax_grad(g, n, gy);
    case NODE_TRANSPOSE: {
        ug_value *gx = NULL;
        UG_TRY(ug_g_transpose(g, gy, &gx));
        return give(g, n->in[0], gx);
    }
    case NODE_EXPAND: return give(g, n->in[0], gy); /* only alpha 1 expands are built forward */
    case NODE_LAYERNORM: return layernorm_grad(g, n, gy);
    case NODE_XENT: {
        graph_node *dn;
        ug_value *in[3] = {n->in[0], n->in[1], gy};
        UG_TRY(ug_graph_op(g, NODE_XENT_GRAD, UG_F32, n->in[0]->ndim, n->in[0]->shape, 3, in, &dn));
        dn->p.xent.smoothing = n->p.xent.smoothing;
        return give(g, n->in[0], dn->out);
    }
    case NODE_FILL:
    case NODE_DROPOUT_MASK:
        return UG_OK;
    default:
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: node kind %d has no gradient",
                            (int)n->kind);
    }
}

static bool needs_grad(const ug_value *v)
{
    return (v->kind == VALUE_ALIAS ? v->alias_of : v)->needs_grad;
}

/* A value needs a gradient when a parameter reaches it; nodes are in
 * topological order, so one forward pass marks them all. */
static void mark_needs_grad(ug_graph *g)
{
    for (int i = 0; i < g->value_count; i++)
        g->values[i]->needs_grad = g->values[i]->kind == VALUE_PARAM;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        for (int k = 0; k < n->nin && n->out; k++)
            n->out->needs_grad |= needs_grad(n->in[k]);
    }
}

ug_status ug_autograd_derive(ug_graph *g, ug_value *loss)
{
    int forward_nodes = g->node_count;
    mark_needs_grad(g);
    if (!needs_grad(loss))
        return ug_set_error(UG_ERR_STATE, "ug_graph_backward: the loss does not depend on any parameter");
    ug_value *seed = NULL;
    UG_TRY(ug_g_fill(g, 1.0f, loss->ndim, loss->shape, &seed));
    UG_TRY(accumulate(g, loss, seed));
    for (int i = forward_nodes - 1; i >= 0; i--) {
        graph_node *n = g->nodes[i];
        ug_value *gy = n->out ? n->out->grad : NULL;
        if (!gy)
            continue;
        UG_TRY(node_grad(g, n, gy));
    }
    return UG_OK;
}
