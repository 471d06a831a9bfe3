/* The optimizer's part of a training graph: the step's gate (the rate,
 * the counts, and the factor that unscales and clips) and every
 * parameter's update node, which the plan groups into one launch. */
#include "core/graph/internal.h"
#include "unigrad/ops.h"

/* The sum of every gradient's squares, on the device. */
static ug_status sum_of_squares(ug_graph *g, ug_value **total)
{
    *total = NULL;
    for (int i = 0; i < g->value_count; i++) {
        ug_value *p = g->values[i];
        if (p->kind != VALUE_PARAM || !p->grad)
            continue;
        ug_value *sq = NULL;
        UG_TRY(ug_g_reduce_axes(g, p->grad, UG_RKERNEL_SUMSQ, 0, true, false, &sq));
        if (*total)
            UG_TRY(ug_g_add(g, *total, sq, total));
        else
            *total = sq;
    }
    return UG_OK;
}

ug_status ug_graph_append_updates(ug_graph *g, ug_optimizer *opt)
{
    /* The gate: the step's rate and counts, and the factor that unscales
     * and clips (clip_grad_norm_'s over every gradient). */
    ug_value *total = NULL, *gate = NULL;
    const ug_optim_source *source = ug_optimizer_source(opt);
    if (source->rule.scaling || source->rule.max_norm > 0.0f)
        UG_TRY(sum_of_squares(g, &total));
    if (total && g->norm_comm) { /* every stage's gradients: one norm, one verdict on overflow */
        ug_op sum = {.def = &ug_op_sum_over_ranks, .name = "gradient norm over the stages",
                     .p.collective = {.comm = g->norm_comm}};
        ug_value *local = total;
        UG_TRY(ug_op_graph(g, &sum, 1, &local, &total));
    }
    ug_op step = {.def = &ug_op_optimizer_step, .name = "optimizer step",
                  .p.optim = {.source = source, .param_index = -1}};
    UG_TRY(ug_op_graph(g, &step, total ? 1 : 0, &total, &gate));
    for (int i = 0; i < g->value_count; i++) {
        ug_value *p = g->values[i];
        if (p->kind != VALUE_PARAM || !p->grad)
            continue;
        int index = ug_model_param_index(g->model, p->param);
        if (index >= ug_optimizer_param_count(opt))
            return ug_set_error(UG_ERR_STATE,
                                "ug_graph_set_optimizer: parameter '%s' was created after the optimizer; "
                                "create the optimizer once the model is complete",
                                p->name);
        graph_node *n;
        ug_value *in[3] = {p, p->grad, gate};
        ug_op op = {.def = &ug_op_optimizer, .name = "optimizer update",
                    .p.optim = {.source = source, .param_index = index}};
        UG_TRY(ug_graph_add_node(g, &op, NULL, 3, in, &n));
    }
    return UG_OK;
}
