/* A pipeline stage's state, shared by pipeline.c (its graph, boundaries
 * and compile) and pipeline_run.c (the schedule). */
#ifndef UG_CORE_COMM_PIPELINE_INTERNAL_H
#define UG_CORE_COMM_PIPELINE_INTERNAL_H

#include "core/comm/internal.h"
#include "unigrad/pipeline.h"

enum { UG_PIPELINE_MAX_BOUND = 8 };

struct ug_pipeline {
    ug_comm *comm;
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
    int64_t last_rows;        /* the last run's batch rows (the last stage's) */
    ug_pipeline_timing timing;
};

/* Micro-batches whose input the stage holds at once. */
int ug_pipeline_in_flight(const ug_pipeline *p);

#endif
