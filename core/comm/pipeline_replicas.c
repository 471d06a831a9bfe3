/* Pipelines side by side (pipeline.h's ug_pipeline_set_replicas): a grid
 * of pipeline stages by data-parallel replicas. Each stage's graph is a
 * replica of the same stage of the other pipelines, over a comm of its
 * own: at compile the replicas agree on their layout and take replica
 * 0's parameters, and each update sums their gradients (weighted by each
 * replica's rows, ug_comm_reduce_gradients) before the optimizer runs, and
 * gathers the parameters of an optimizer sharded over them after it. */
#include <stdio.h>

#include "base/error.h"
#include "core/comm/pipeline_internal.h"
#include "core/graph/internal.h"
#include "core/model/internal.h"

ug_status ug_pipeline_set_replicas(ug_pipeline *p, ug_comm *replicas)
{
    const char *op = "ug_pipeline_set_replicas";
    if (!p || !replicas)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, p ? "replicas" : "pipeline");
    if (p->compiled)
        return ug_set_error(UG_ERR_STATE, "%s: stage %d is compiled already; give its replicas before "
                            "ug_pipeline_compile", op, p->stage);
    if (replicas == p->comm)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the replicas' comm is the stages' own; give a comm of the "
                            "same stage of every pipeline (ug_comm_split)", op);
    if (replicas->device != p->comm->device)
        return ug_set_error(UG_ERR_DEVICE, "%s: stage %d is on %s, its rank of the replicas (%d) on %s; the same "
                            "device for both", op, p->stage, p->comm->device->info.id, replicas->rank,
                            replicas->device->info.id);
    p->replicas = replicas;
    return UG_OK;
}

ug_status ug_pipeline_agree_replicas(ug_pipeline *p, ug_status compiled)
{
    if (!p->replicas)
        return compiled;
    char op[64], stage[16], stages[16], micro[16], verdict[UG_COMM_FIELD_TEXT];
    snprintf(op, sizeof op, "ug_pipeline_compile: stage %d's replicas", p->stage);
    snprintf(stage, sizeof stage, "%d", p->stage);
    snprintf(stages, sizeof stages, "%d", p->stages);
    snprintf(micro, sizeof micro, "%d", p->micro_batches);
    /* a replica that failed takes part all the same, so the others hear
     * of it here rather than wait for it at the first update */
    snprintf(verdict, sizeof verdict, "%s", compiled == UG_OK ? "compiled" : "refused");
    ug_status agreed = ug_comm_check_same(
        p->replicas, 6, (const char *const[]){"stage", "stages", "micro-batches", "schedule", "training", "stage's compile"},
        (const char *const[]){stage, stages, micro, p->schedule == UG_PIPELINE_GPIPE ? "GPipe" : "1F1B",
                              p->training ? "yes" : "no", verdict},
        op);
    if (compiled != UG_OK)
        return compiled;
    if (agreed == UG_OK && (agreed = ug_comm_broadcast_model(p->replicas, p->graph->model)) != UG_OK)
        ug_prefix_error(agreed, "%s", op); /* (the replicas start alike, whatever each drew) */
    return agreed;
}

ug_status ug_pipeline_reduce_replicas(ug_pipeline *p)
{
    return p->replicas ? ug_comm_reduce_gradients(p->replicas, p->graph) : UG_OK;
}

ug_status ug_pipeline_gather_replicas(ug_pipeline *p)
{
    ug_optimizer *opt = p->graph->optimizer;
    return p->replicas && opt && ug_optim_sharded(opt, NULL, NULL) ? ug_comm_gather_parameters(p->replicas, opt)
                                                                   : UG_OK;
}
