/* A pipeline stage's update (ug_pipeline_run), or its forward passes
 * alone in a pipeline compiled without an optimizer (evaluation): the
 * micro-batches in the schedule's order, each a forward pass (its input received, its output
 * sent on) and later a backward pass (the gradient received, the input's
 * sent back), then the optimizer's update.
 *
 * Every stage but the last runs a micro-batch's forward pass twice: once
 * alone, to send its output on, and again inside the backward pass, which
 * needs the activations the first did not keep (GPipe's
 * re-materialisation; one micro-batch's activations at a time). Both
 * passes draw the same dropout masks, those one device draws for that
 * micro-batch when it accumulates them (the graph's run count is set to
 * the micro-batch's before each), and only the second moves batch norm's
 * running statistics. The last stage's forward pass is its backward's:
 * it computes the loss and the gradients at once. */
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/comm/pipeline_internal.h"
#include "core/graph/internal.h"
#include "core/runtime/internal.h"
#include "unigrad/ops.h"

typedef struct stage_run {
    ug_pipeline *p;
    uint64_t first_run;       /* the graph's run count at micro-batch 0 */
    int64_t batch_rows;       /* of the bound batches; 0: none bound */
    double busy, waiting;
} stage_run;

static bool is_last(const ug_pipeline *p) { return p->stage == p->stages - 1; }

/* Micro-batch j's rows of a batch of rows: [rows j / m, rows (j + 1) / m). */
static int64_t part_start(const ug_pipeline *p, int64_t rows, int j) { return rows * j / p->micro_batches; }

/* Binds input to rows [start, start + count) of tensor. */
static ug_status bind_rows(ug_graph *g, ug_value *input, const ug_tensor *tensor, int64_t start, int64_t count)
{
    ug_tensor *part = NULL;
    UG_TRY(ug_tensor_slice(tensor, start, count, &part));
    ug_status st = ug_graph_bind(g, input, part);
    ug_tensor_free(part);
    return st;
}

/* Micro-batch j's data parts and input; its rows in *rows. */
static ug_status bind_micro_batch(stage_run *r, int j, int64_t *rows)
{
    ug_pipeline *p = r->p;
    if (r->batch_rows) {
        const int64_t start = part_start(p, r->batch_rows, j), count = part_start(p, r->batch_rows, j + 1) - start;
        for (int i = 0; i < p->bound_count; i++)
            UG_TRY(bind_rows(p->graph, p->bound[i].input, p->bound[i].batch, start, count));
        *rows = count;
    }
    if (p->input) {
        const int slot = j % p->slot_count;
        if (r->batch_rows && p->slot_rows[slot] != *rows)
            return ug_set_error(UG_ERR_SHAPE, "ug_pipeline_run: micro-batch %d reached stage %d with %lld rows, and "
                                "its bound batch gives it %lld; bind batches of the same rows on every stage", j,
                                p->stage, (long long)p->slot_rows[slot], (long long)*rows);
        UG_TRY(bind_rows(p->graph, p->input, p->slots[slot], 0, p->slot_rows[slot]));
        *rows = p->slot_rows[slot];
    }
    return UG_OK;
}

/* Receives into tensor from source, counting the wait. */
static ug_status receive(stage_run *r, ug_tensor *tensor, int source, int64_t *rows)
{
    const double start = ug_seconds_now();
    ug_status st = ug_comm_recv_rows(r->p->comm, tensor, source, rows);
    r->waiting += ug_seconds_now() - start;
    return st;
}

/* The dropout masks of micro-batch j: one device's j-th accumulated run. */
static ug_status set_run(stage_run *r, int j) { return ug_graph_set_runs(r->p->graph, r->first_run + (uint64_t)j); }

static ug_status forward(stage_run *r, int j)
{
    ug_pipeline *p = r->p;
    if (p->input) {
        const int slot = j % p->slot_count;
        UG_TRY(receive(r, p->slots[slot], p->stage - 1, &p->slot_rows[slot]));
    }
    if (is_last(p) && p->training)
        return UG_OK;
    const double start = ug_seconds_now();
    int64_t rows = 0;
    UG_TRY(bind_micro_batch(r, j, &rows));
    if (p->seed) /* the gradient's input is bound (every input is), not read */
        UG_TRY(bind_rows(p->graph, p->seed, p->gradient, 0, rows));
    if (p->training)
        UG_TRY(set_run(r, j));
    p->graph->run.hold_statistics = p->training;
    ug_status st = ug_graph_run_forward(p->graph);
    p->graph->run.hold_statistics = false;
    UG_TRY(st);
    if (!is_last(p))
        UG_TRY(ug_comm_send(p->comm, p->output->tensor, p->stage + 1));
    else
        p->last_rows += rows;
    r->busy += ug_seconds_now() - start;
    return UG_OK;
}

static ug_status backward(stage_run *r, int j)
{
    ug_pipeline *p = r->p;
    int64_t rows = 0, sent_rows = 0;
    UG_TRY(bind_micro_batch(r, j, &rows));
    if (p->seed) {
        UG_TRY(receive(r, p->gradient, p->stage + 1, &sent_rows));
        if (sent_rows != rows)
            return ug_set_error(UG_ERR_SHAPE, "ug_pipeline_run: stage %d sent micro-batch %d's gradient with %lld "
                                "rows, stage %d ran it with %lld", p->stage + 1, j, (long long)sent_rows, p->stage,
                                (long long)rows);
        UG_TRY(bind_rows(p->graph, p->seed, p->gradient, 0, rows));
    }
    const double start = ug_seconds_now();
    UG_TRY(set_run(r, j));
    UG_TRY(ug_graph_run_backward(p->graph));
    if (p->input_grad)
        UG_TRY(ug_comm_send(p->comm, p->input_grad->tensor, p->stage - 1));
    p->last_rows += rows;
    r->busy += ug_seconds_now() - start;
    return UG_OK;
}

/* The schedule: GPipe every forward then every backward; 1F1B as many
 * forwards as stages after this one (to fill the pipeline), then one
 * backward after each forward, then the backwards left. The last stage,
 * whose backward pass is its forward's too, takes each micro-batch as it
 * comes in either. */
static ug_status run_schedule(stage_run *r)
{
    ug_pipeline *p = r->p;
    const int m = p->micro_batches;
    int warmup = is_last(p) ? 0 : p->schedule == UG_PIPELINE_GPIPE ? m : p->stages - p->stage - 1;
    warmup = warmup < m ? warmup : m;
    int f = 0, b = 0;
    for (; f < warmup; f++)
        UG_TRY(forward(r, f));
    for (; f < m; f++, b++) {
        UG_TRY(forward(r, f));
        UG_TRY(backward(r, b));
    }
    for (; b < m; b++)
        UG_TRY(backward(r, b));
    return UG_OK;
}

/* The rows of the batches bound: the same for each. */
static ug_status batch_rows(ug_pipeline *p, int64_t *rows)
{
    *rows = 0;
    for (int i = 0; i < p->bound_count; i++) {
        const int64_t r = p->bound[i].batch->shape[0];
        if (i && r != *rows)
            return ug_set_error(UG_ERR_SHAPE, "ug_pipeline_run: the batches bound to '%s' and '%s' have %lld and "
                                "%lld rows; bind one batch's parts", p->bound[0].input->name,
                                p->bound[i].input->name, (long long)*rows, (long long)r);
        *rows = r;
    }
    if (!*rows && !p->input)
        return ug_set_error(UG_ERR_STATE, "ug_pipeline_run: stage 0 has no batch; bind its data inputs "
                            "(ug_pipeline_bind) first");
    return UG_OK;
}

ug_status ug_pipeline_run(ug_pipeline *p)
{
    if (!p)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_pipeline_run: pipeline is NULL");
    if (!p->compiled)
        return ug_set_error(UG_ERR_STATE, "ug_pipeline_run: compile stage %d first (ug_pipeline_compile)", p->stage);
    const double start = ug_seconds_now();
    const uint64_t direct = p->comm->received_direct, staged = p->comm->received_staged;
    stage_run r = {.p = p, .first_run = p->graph->runs};
    p->last_rows = 0;
    ug_status st = batch_rows(p, &r.batch_rows);
    if (st == UG_OK && p->loss_sum) /* its own sum: the caller's own go on across runs */
        st = ug_fill(p->loss_sum->tensor, 0.0f);
    for (int j = 0; st == UG_OK && !p->training && j < p->micro_batches; j++)
        st = forward(&r, j);
    if (st == UG_OK && p->training)
        st = run_schedule(&r);
    if (st == UG_OK && p->training)
        st = ug_graph_set_runs(p->graph, r.first_run + (uint64_t)p->micro_batches);
    const double update = ug_seconds_now(); /* (the replicas' sums count as the update's) */
    if (st == UG_OK && p->training)
        st = ug_pipeline_reduce_replicas(p);
    if (st == UG_OK && p->training)
        st = ug_graph_run_update(p->graph);
    if (st == UG_OK && p->training)
        st = ug_pipeline_gather_replicas(p);
    if (st == UG_OK)
        st = ug_stream_synchronize(ug_stream_current(p->graph->device));
    if (st != UG_OK) { /* the neighbours would wait for this stage's messages */
        p->comm->engine->fail(p->comm, ug_last_error());
        if (p->replicas) /* and so would the other pipelines' */
            p->replicas->engine->fail(p->replicas, ug_last_error());
        return ug_prefix_error(st, "ug_pipeline_run: stage %d", p->stage);
    }
    const double end = ug_seconds_now();
    p->timing = (ug_pipeline_timing){.seconds = end - start, .busy_seconds = r.busy + (end - update),
                                     .waiting_seconds = r.waiting,
                                     .direct_bytes = p->comm->received_direct - direct,
                                     .staged_bytes = p->comm->received_staged - staged};
    return UG_OK;
}
