/* A pipeline stage's state, shared by pipeline.c (its graph, boundaries
 * and compile) and pipeline_run.c (the schedule). */
#ifndef UG_CORE_COMM_PIPELINE_INTERNAL_H
#define UG_CORE_COMM_PIPELINE_INTERNAL_H

#include "core/comm/internal.h"
#include "core/ops/op.h"
#include "unigrad/pipeline.h"

enum { UG_PIPELINE_MAX_BOUND = 8 };

struct ug_pipeline {
    ug_comm *comm;
    ug_comm *replicas;        /* the same stage of the other pipelines (NULL: none) */
    ug_graph *graph;
    int stage, stages, micro_batches;
    ug_pipeline_schedule schedule;
    bool compiled;
    ug_value *input;          /* the previous stage's output (stage > 0) */
    ug_value *input_grad;     /* its gradient, sent back (stage > 0) */
    ug_value *output;         /* sent to the next stage (all but the last) */
    ug_value *seed;           /* the next stage's gradient of output: an input */
    ug_value *loss, *loss_sum; /* the last stage's, and its sum over the rows */
    /* Inputs in flight: micro-batch j's in slots[j % slot_count], with its rows. */
    ug_tensor **slots;
    int64_t *slot_rows;
    int slot_count;
    ug_tensor *gradient;      /* the gradient received, bound to seed */
    /* Inputs given whole batches (ug_pipeline_bind), cut per micro-batch. */
    struct {
        ug_value *input;
        ug_tensor *batch;
    } bound[UG_PIPELINE_MAX_BOUND];
    int bound_count;
    /* Boundaries marked in the graph (pipeline_build.c): how many so far,
     * where the stage being built began (its nodes set aside when it is
     * another's), the placeholder a later stage's ops read meanwhile, and
     * where this stage's own ops ended (after: later stages'). */
    int boundaries;
    ug_graph_mark stage_start, own_end;
    ug_value *placeholder;
    uint64_t own_streams;     /* the dropout streams drawn when this stage's part ended */
    bool training;            /* compiled with an optimizer; else forward passes only */
    int64_t last_rows;        /* the last run's batch rows (the last stage's) */
    ug_pipeline_timing timing;
};

/* pipeline_replicas.c: the replicas' verdict at compile, given this
 * stage's (its layout and compile agreed, replica 0's parameters taken);
 * each update's gradients summed over them, before it; the parameters of
 * an optimizer sharded over them gathered, after it. */
ug_status ug_pipeline_agree_replicas(ug_pipeline *p, ug_status compiled);
ug_status ug_pipeline_reduce_replicas(ug_pipeline *p);
ug_status ug_pipeline_gather_replicas(ug_pipeline *p);
/* Micro-batches whose input the stage holds at once. */
int ug_pipeline_in_flight(const ug_pipeline *p);
/* pipeline.c: an input of p's graph for what stage `stage` receives,
 * of dtype and shape. */
ug_status ug_pipeline_make_input(ug_pipeline *p, const char *op, int stage, ug_dtype dtype, int ndim,
                                 const int64_t *shape, ug_value **out);
/* pipeline_build.c: the graph takes p's stage (its boundaries are then
 * p's); and at compile, the stage's own part kept (later stages' ops set
 * aside), the count of boundaries checked against the stages. */
void ug_pipeline_take_graph(ug_pipeline *p);
ug_status ug_pipeline_finish_build(ug_pipeline *p, ug_value **value);
/* pipeline_save.c, a collective of the stages (c's ranks): every stage's
 * model and optimizer state gathered whole on stage 0, into a model and
 * optimizer in host memory, with the last stage's running sums of graph
 * (its checkpoint part graph_name), for a checkpoint; nothing on the
 * others. */
enum { UG_PIPELINE_MAX_SUMS = 32 };
typedef struct ug_pipeline_state {
    ug_model *model;
    ug_optimizer *optimizer;
    int sum_count;
    char sum_names[UG_PIPELINE_MAX_SUMS][64];
    ug_tensor *sums[UG_PIPELINE_MAX_SUMS];
} ug_pipeline_state;
ug_status ug_pipeline_gather_state(ug_comm *c, ug_model *model, ug_optimizer *opt, const ug_graph *graph,
                                   const char *graph_name, ug_pipeline_state *out);
void ug_pipeline_state_free(ug_pipeline_state *s);

#endif
