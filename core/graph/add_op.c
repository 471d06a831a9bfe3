/* Adding an op to a graph: its inputs checked and, in a mixed-precision
 * forward pass, cast as autocast picks; its inference run; a node and
 * its result values made, all taken back when anything fails. */
#include <string.h>

#include "core/graph/internal.h"

static ug_status op_graph_as_given(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                                   ug_value **out);

/* In a mixed-precision graph the forward pass's ops first get their inputs
 * in the dtypes autocast picks (graph/autocast.c); the casts go with the op
 * if it fails. */
ug_status ug_op_graph(ug_graph *g, const ug_op *op, int nin, ug_value *const *in, ug_value **out)
{
    if (!g || g->precision == UG_F32 || g->autocasting || g->building != PHASE_FORWARD || !out)
        return op_graph_as_given(g, op, nin, in, out);
    for (int i = 0; i < nin; i++)
        UG_TRY(ug_graph_check_value(g, in[i], ug_op_name(op), ug_op_input_name(op, nin, i)));
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *cast[UG_OP_MAX_INPUTS] = {NULL};
    ug_status st = ug_autocast_inputs(g, op, nin, in, cast);
    if (st == UG_OK)
        st = op_graph_as_given(g, op, nin, cast, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

static ug_status op_graph_as_given(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                                   ug_value **out)
{
    const char *name = ug_op_name(op);
    UG_TRY(ug_graph_check_open(g, name));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    *out = NULL;
    ug_meta metas[UG_OP_MAX_INPUTS], results[UG_OP_MAX_OUTPUTS];
    for (int i = 0; i < nin; i++) {
        UG_TRY(ug_graph_check_value(g, in[i], name, ug_op_input_name(op, nin, i)));
        metas[i] = (ug_meta){.dtype = in[i]->dtype, .ndim = in[i]->ndim};
        memcpy(metas[i].shape, in[i]->shape, sizeof metas[i].shape);
    }
    int nout = 1;
    UG_TRY(ug_op_infer(op, nin, metas, results, &nout));
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *values[UG_OP_MAX_OUTPUTS] = {NULL};
    ug_status st = UG_OK;
    for (int k = 0; k < nout && st == UG_OK; k++)
        st = ug_graph_new_value(g, VALUE_TEMP, results[k].dtype, results[k].ndim, results[k].shape,
                                &values[k]);
    graph_node *n = NULL;
    if (st == UG_OK)
        st = ug_graph_add_node(g, op, values[0], nin, in, &n);
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    for (int k = 1; k < nout; k++) {
        n->scratch[k - 1] = values[k];
        values[k]->producer = n;
    }
    n->nscratch = nout - 1;
    *out = values[0];
    return UG_OK;
}

ug_status ug_op_graph_cast(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                           const ug_dtype *want, ug_value **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", ug_op_name(op));
    *out = NULL;
    UG_TRY(ug_graph_check_open(g, ug_op_name(op)));
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *args[UG_OP_MAX_INPUTS] = {NULL};
    ug_status st = UG_OK;
    for (int i = 0; i < nin; i++) {
        args[i] = in[i];
        if (st == UG_OK && in[i] && in[i]->graph == g && ug_needs_cast(in[i]->dtype, want[i]))
            st = ug_g_cast(g, in[i], want[i], &args[i]);
    }
    if (st == UG_OK)
        st = ug_op_graph(g, op, nin, args, out);
    if (st == UG_OK && (*out)->dtype != in[0]->dtype)
        st = ug_g_cast(g, *out, in[0]->dtype, out);
    if (st != UG_OK) {
        *out = NULL;
        ug_graph_rollback(g, mark);
    }
    return st;
}
