/* Any batch up to the planned size: a graph compiled for inputs of B rows
 * runs inputs bound with 1..B rows in the same plan and memory. Before such
 * a run, every node's inference runs again on its inputs' shapes as bound,
 * and each value's tensor takes the (smaller) shape inferred, so the
 * kernels, the means and the losses see the actual rows. */
#include <stdio.h>
#include <string.h>

#include "core/graph/internal.h"

ug_meta ug_value_meta_now(const ug_value *v)
{
    if (v->tensor)
        return ug_meta_of_tensor(v->tensor);
    ug_meta m = {.dtype = v->dtype, .ndim = v->ndim};
    memcpy(m.shape, v->shape, sizeof m.shape);
    return m;
}

static const char *value_name(const ug_value *v) { return v->name[0] ? v->name : "a value"; }

/* A reshape follows its base: a change of the base's rows scales the
 * reshaped value's leading axis where that holds whole rows or a whole
 * number of them; else the one axis of the base whose size changed is found
 * in the reshaped value by its planned size and changed alike. */
ug_status ug_graph_fit_alias(ug_value *v)
{
    const ug_value *base = v->alias_of;
    if (!v->tensor || !base->tensor)
        return UG_OK;
    int changed = -1, count = 0;
    for (int i = 0; i < base->ndim; i++)
        if (base->tensor->shape[i] != base->shape[i]) {
            changed = i;
            count++;
        }
    memcpy(v->tensor->shape, v->shape, sizeof v->tensor->shape);
    if (count == 0)
        return UG_OK;
    /* The rows merged with the axes after them ([B, T, C] as [B*T, C]) or
     * split from them (the reverse): the leading axis scales with the rows. */
    const int64_t rows_planned = base->shape[0], rows_now = base->tensor->shape[0];
    if (count == 1 && changed == 0 && v->ndim > 0 && rows_planned > 0 && v->shape[0] > 0) {
        if (v->shape[0] % rows_planned == 0) {
            v->tensor->shape[0] = rows_now * (v->shape[0] / rows_planned);
            return UG_OK;
        }
        const int64_t per_row = rows_planned / v->shape[0];
        if (rows_planned % v->shape[0] == 0 && rows_now % per_row == 0) {
            v->tensor->shape[0] = rows_now / per_row;
            return UG_OK;
        }
    }
    for (int i = 0; count == 1 && i < v->ndim; i++)
        if (v->shape[i] == base->shape[changed]) {
            v->tensor->shape[i] = base->tensor->shape[changed];
            return UG_OK;
        }
    char planned[96], now[96];
    return ug_set_error(UG_ERR_SHAPE,
                        "a reshape of '%s' (planned %s, now %s) cannot follow the rows bound: "
                        "only a reshape that keeps the batch axis can run with fewer rows",
                        value_name(base), ug_format_shape(base->ndim, base->shape, planned, sizeof planned),
                        ug_format_shape(base->ndim, base->tensor->shape, now, sizeof now));
}

static ug_status fit_aliases_of(ug_graph *g, const ug_value *base)
{
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->kind == VALUE_ALIAS && g->values[i]->alias_of == base)
            UG_TRY(ug_graph_fit_alias(g->values[i]));
    return UG_OK;
}

static ug_status fit_result(ug_value *w, const ug_meta *m, const ug_op *op)
{
    if (!w || !w->tensor)
        return UG_OK;
    char planned[96], now[96];
    bool same = m->ndim == w->ndim && !memcmp(m->shape, w->shape, sizeof(int64_t) * (size_t)w->ndim);
    bool fits = m->ndim == w->ndim && m->dtype == w->dtype &&
                ug_shape_numel(m->ndim, m->shape) <= ug_shape_numel(w->ndim, w->shape);
    if (!fits || (w->kind != VALUE_TEMP && !same))
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: with the rows bound its result '%s' would be %s, planned as %s%s",
                            op->name, value_name(w), ug_format_shape(m->ndim, m->shape, now, sizeof now),
                            ug_format_shape(w->ndim, w->shape, planned, sizeof planned),
                            fits ? " (a gradient or running sum keeps its shape: sum over the rows first)"
                                 : " (bind at most the planned rows)");
    memcpy(w->tensor->shape, m->shape, sizeof w->tensor->shape);
    return UG_OK;
}

static ug_status fit_node(ug_graph *g, graph_node *n)
{
    if (!n->op.def->infer)
        return UG_OK; /* an optimizer update: parameters keep their shapes */
    ug_meta in[UG_OP_MAX_INPUTS] = {{0}}, out[UG_OP_MAX_OUTPUTS] = {{0}};
    for (int k = 0; k < n->nin; k++)
        if (n->in[k])
            in[k] = ug_value_meta_now(n->in[k]);
    ug_op op = n->op;
    if (n->per_row_scale != 0.0f && n->sum)
        op.sum_alpha = n->per_row_scale * (float)g->rows;
    else if (n->per_row_scale != 0.0f)
        op.p.binary.alpha = n->per_row_scale * (float)g->rows;
    if (ug_node_is_running_sum(n))
        UG_TRY(fit_result(n->out, &in[1], &op)); /* the sum keeps its shape */
    int nout = 1;
    UG_TRY(ug_op_infer(&op, n->nin, in, out, &nout));
    if (n->writes_cast)
        out[0].dtype = n->out->dtype;
    n->op = op;
    ug_value *results[UG_OP_MAX_OUTPUTS] = {n->out};
    for (int k = 0; k < n->nscratch; k++)
        results[k + 1] = n->scratch[k];
    for (int k = 0; k < nout && k <= n->nscratch; k++) {
        /* A scratch is room, not a result: its op works within the size it
         * is given. One that would need more with fewer rows (a library
         * choosing another algorithm for a smaller batch) keeps its planned
         * size, and the op takes the path that fits in it. */
        if (k > 0 && results[k] && ug_shape_numel(out[k].ndim, out[k].shape) >
                                        ug_shape_numel(results[k]->ndim, results[k]->shape))
            memcpy(out[k].shape, results[k]->shape, sizeof out[k].shape);
        UG_TRY(fit_result(results[k], &out[k], &op));
        if (results[k])
            UG_TRY(fit_aliases_of(g, results[k]));
    }
    return fit_result(n->sum, &out[0], &op); /* a running sum folded in keeps its shape */
}

const ug_value *ug_graph_batch_input(const ug_graph *g)
{
    for (int i = 0; i < g->value_count; i++) {
        const ug_value *v = g->values[i];
        if (v->kind == VALUE_INPUT && v->ndim > 0 && v->uses > 0)
            return v;
    }
    return NULL;
}

ug_status ug_graph_fit_rows(ug_graph *g)
{
    if (g->shapes_fitted)
        return UG_OK;
    /* The inputs' reshapes followed them at ug_graph_bind. */
    const ug_value *batch = ug_graph_batch_input(g);
    g->rows = batch && batch->tensor ? batch->tensor->shape[0] : 1;
    ug_graph_weigh_seed(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead)
            continue;
        ug_status st = fit_node(g, n);
        if (st != UG_OK)
            return ug_prefix_error(st, "node %d, for the inputs bound with %lld rows", i, (long long)g->rows);
    }
    g->shapes_fitted = true;
    return UG_OK;
}
