/* Pipeline stages: a model cut into consecutive parts, each on a rank of
 * a communicator (its device: any backend, in this process or another),
 * so that a model larger than one device's memory trains on several.
 * Each update's batch is cut into micro-batches that flow through the
 * stages, activations forward and their gradients back, while the stages
 * work on different micro-batches at once (PyTorch's
 * torch.distributed.pipelining; GPipe, Huang et al. 2019).
 *
 * Every rank builds its own stage, in stage order of the ranks:
 *
 *     ug_pipeline *p;
 *     ug_pipeline_create(comm, graph, 8, UG_PIPELINE_1F1B, &p);
 *     // stage 0: x = ug_graph_input(...) with one micro-batch's rows
 *     // later stages: ug_pipeline_input(p, UG_F32, 2, (int64_t[]){16, 500}, &x);
 *     ... layers of this stage, from x to h ...
 *     ug_pipeline_compile(p, h, optimizer);    // the last stage: its loss
 *     each update: ug_pipeline_bind(p, x, batch_x);   // stage 0
 *                  ug_pipeline_bind(p, y, batch_y);   // the last stage
 *                  ug_pipeline_run(p);                // every stage
 *
 * The update equals one device's on the whole batch accumulated over the
 * same micro-batches (ug_graph_run_backward on each, then
 * ug_graph_run_update), within float rounding where the stages' backends
 * differ: the last stage's loss seeds each micro-batch's gradient as
 * there, and each stage's dropout masks are those the whole model draws on
 * one device (the stages' graphs take their streams in stage order).
 *
 * A stage keeps its input of each micro-batch in flight and recomputes
 * its forward pass inside the backward one (GPipe's re-materialisation):
 * its memory is its graph's plan (parameters, optimizer state, one
 * micro-batch's activations) and the inputs in flight, all micro-batches'
 * with GPipe and at most (stages - stage) with 1F1B, known before the
 * first step (ug_pipeline_memory). The last stage runs each micro-batch
 * forward and backward at once, as it arrives, in either schedule.
 * Activations and gradients travel between ranks (ug_comm_send) device to
 * device between stages of one process on devices of one backend that
 * reach each other (two CUDA or two HIP GPUs), else through host memory,
 * page-locked where the backend has it. */
#ifndef UNIGRAD_PIPELINE_H
#define UNIGRAD_PIPELINE_H

#include "unigrad/comm.h"
#include "unigrad/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ug_pipeline_schedule {
    /* One forward, one backward (PipeDream-Flush, Narayanan et al. 2021):
     * after (stages - stage - 1) forwards, each stage alternates; few
     * micro-batches are in flight. */
    UG_PIPELINE_1F1B = 0,
    /* Every micro-batch forward, then every one backward (GPipe): the
     * reference schedule, with the same bubble and more in flight. */
    UG_PIPELINE_GPIPE
} ug_pipeline_schedule;

typedef struct ug_pipeline ug_pipeline;

/* This rank's stage: stage = the comm's rank, of ug_comm_size stages; the
 * stage's graph (on the comm's device, not yet compiled; it stays the
 * caller's, to be freed after the pipeline). micro_batches (1 to 1024)
 * cut each update's batch. */
UG_API ug_status ug_pipeline_create(ug_comm *comm, ug_graph *graph, int micro_batches,
                                    ug_pipeline_schedule schedule, ug_pipeline **out);
UG_API void ug_pipeline_free(ug_pipeline *pipeline);
UG_API int ug_pipeline_stage(const ug_pipeline *pipeline);
UG_API int ug_pipeline_stages(const ug_pipeline *pipeline);

/* In a build function that makes the whole model: marks the end of one
 * stage and the start of the next at *value (what the later stage reads
 * of the earlier: a float value with rows). On every stage the pipeline
 * keeps its own part: ops before its start and after its end are set
 * aside, and in the stage that starts here *value becomes its input from
 * the stage before. An op that reads a value across a boundary without
 * it (a skip connection past the cut) is refused, and breaks the stages'
 * group, so every stage's compile fails with its message. On a graph of
 * no pipeline it does nothing: the same function builds the model whole
 * for one device. Parameters take the initial values, and dropout masks
 * the streams, that the whole model has. */
UG_API ug_status ug_pipeline_boundary(ug_graph *graph, ug_value **value);
/* Or, building each stage apart: on every stage but the first, the
 * previous stage's output as an input of this graph, declared as
 * ug_graph_input with one micro-batch's rows. ug_pipeline_compile checks
 * it against what the previous stage sends. */
UG_API ug_status ug_pipeline_input(ug_pipeline *pipeline, ug_dtype dtype, int ndim, const int64_t *shape,
                                   ug_value **out);
/* Pipelines side by side (data parallelism over pipelines: a grid of
 * stages by replicas): replicas is a comm of this stage's graph in every
 * pipeline (on this stage's device; each pipeline's stages a comm of
 * their own, e.g. both from ug_comm_split of one comm). Each pipeline
 * runs its own part of the global batch, and each update sums the
 * stage's gradients over the replicas, weighted by their rows, as one
 * pipeline on the whole batch would; an optimizer sharded over replicas
 * (ug_comm_shard_optimizer, after compile) keeps a part of the state on
 * each, and its parameters are gathered after each update. At compile
 * the replicas also agree (stage, stages, micro-batches, schedule) and
 * take replica 0's parameters. Before ug_pipeline_compile. */
UG_API ug_status ug_pipeline_set_replicas(ug_pipeline *pipeline, ug_comm *replicas);
/* A collective over the stages. value is this stage's output, sent to
 * the next stage (a float value depending on the stage's input or
 * parameters; with boundaries, the one marked, and value may be NULL or
 * the model's loss), or on the last stage its loss (one f32 element).
 * Derives the stage's gradients (from the next stage's gradient of value,
 * or from the loss), sets optimizer (of the graph's model) and compiles.
 * Without an optimizer, the stages run forward passes only (an
 * evaluation: ug_pipeline_run then runs each micro-batch forward, and the
 * last stage's value may be any it computes, or NULL). Refused
 * on every stage, with the same message where both sides can tell: a
 * boundary whose two sides differ in shape, or in dtype unless both are
 * float types (a stage computing in f16 beside one computing in f32: the
 * sender casts its output to the receiver's type), stages that differ
 * in micro-batches or schedule, two stages on one device of one process,
 * an output that does not depend on the stage's input. Gradient clipping
 * and f16's loss scaling take the norm of every stage's gradients (their
 * sums of squares summed over the stages in each update), so every stage
 * clips by one factor and skips an overflowing step together. */
UG_API ug_status ug_pipeline_compile(ug_pipeline *pipeline, ug_value *value, ug_optimizer *optimizer);

/* The whole batch for an input of this stage's graph (the first stage's
 * data, the last stage's labels): a tensor with up to micro_batches
 * times the input's declared rows, and at least micro_batches rows. Each
 * micro-batch takes its part of them ([R j / m, R (j + 1) / m) of R rows). */
UG_API ug_status ug_pipeline_bind(ug_pipeline *pipeline, ug_value *input, const ug_tensor *batch);
/* One update, a collective over the stages: every micro-batch through
 * the stages in the schedule, then each stage's optimizer update. */
UG_API ug_status ug_pipeline_run(ug_pipeline *pipeline);
/* On the last stage: the mean loss over the last run's batch (its
 * pipeline's part, with replicas; a wait). */
UG_API ug_status ug_pipeline_loss(ug_pipeline *pipeline, float *loss);

typedef struct ug_pipeline_memory_info {
    ug_graph_memory_info graph; /* the stage's graph, as ug_graph_memory has it */
    int in_flight;              /* micro-batches whose input the stage holds at once */
    uint64_t boundary_bytes;    /* those inputs and the gradient received */
    uint64_t total_bytes;       /* graph.total_bytes + boundary_bytes */
} ug_pipeline_memory_info;
/* This stage's device memory, after ug_pipeline_compile (before the
 * first step, from the stage's plan). */
UG_API ug_status ug_pipeline_memory(ug_pipeline *pipeline, ug_pipeline_memory_info *info);

/* Where the last run's time went on this stage. */
typedef struct ug_pipeline_timing {
    double seconds;         /* the run, from its start to the update's end */
    double busy_seconds;    /* forward and backward passes, sends included */
    double waiting_seconds; /* waiting for the neighbours' messages */
    /* Bytes the stage received in it (activations, gradients): device to
     * device (stages of one process on devices of one backend that reach
     * each other), and through host memory. */
    uint64_t direct_bytes, staged_bytes;
} ug_pipeline_timing;
UG_API ug_status ug_pipeline_last_timing(const ug_pipeline *pipeline, ug_pipeline_timing *out);

#ifdef __cplusplus
}
#endif
#endif
