/* Pipeline stages (pipeline.h): a stage's graph, its boundaries with the
 * stages beside it, and their agreement at compile. The schedule that
 * runs micro-batches through the stages is pipeline_run.c's.
 *
 * A stage's graph is an ordinary training graph whose backward pass
 * starts, on every stage but the last, from an input holding the next
 * stage's gradient of the stage's output (ug_graph_backward_stage), and
 * which keeps the gradient of its own input to send back. At compile the
 * neighbours exchange what crosses each boundary (dtype, shape, rows),
 * which both sides check, so a mismatch is refused on both with the same
 * words, and every stage then learns every other's verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/pipeline_internal.h"
#include "core/graph/internal.h"
#include "core/runtime/internal.h"

enum { MAX_MICRO_BATCHES = 1024 };

ug_status ug_pipeline_create(ug_comm *comm, ug_graph *graph, int micro_batches, ug_pipeline_schedule schedule,
                             ug_pipeline **out)
{
    const char *op = "ug_pipeline_create";
    if (!comm || !graph || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !comm ? "comm" : !graph ? "graph" : "out");
    *out = NULL;
    if (micro_batches < 1 || micro_batches > MAX_MICRO_BATCHES)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d micro-batches; give 1 to %d", op, micro_batches,
                            MAX_MICRO_BATCHES);
    if (schedule != UG_PIPELINE_1F1B && schedule != UG_PIPELINE_GPIPE)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d is not a ug_pipeline_schedule", op, (int)schedule);
    if (graph->device != comm->device)
        return ug_set_error(UG_ERR_DEVICE, "%s: the graph is on %s, the comm's rank %d on %s", op,
                            graph->device->info.id, comm->rank, comm->device->info.id);
    if (graph->planned || graph->has_backward)
        return ug_set_error(UG_ERR_STATE, "%s: the graph already has its backward pass or plan; make the "
                            "pipeline before ug_graph_backward and ug_graph_compile", op);
    if (!comm->engine->send)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s engine has no point-to-point messages", op,
                            comm->engine->name);
    ug_pipeline *p = ug_calloc(1, sizeof *p);
    if (!p)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    p->comm = comm;
    p->graph = graph;
    p->stage = comm->rank;
    p->stages = comm->size;
    p->micro_batches = micro_batches;
    p->schedule = schedule;
    ug_pipeline_take_graph(p);
    *out = p;
    return UG_OK;
}

void ug_pipeline_free(ug_pipeline *p)
{
    if (!p)
        return;
    if (p->graph->cut_ctx == p) { /* the graph goes on as one of no pipeline */
        p->graph->cut_wrongly = NULL;
        p->graph->cut_ctx = NULL;
    }
    for (int i = 0; i < p->slot_count; i++)
        ug_tensor_free(p->slots[i]);
    free(p->slots);
    free(p->slot_rows);
    ug_tensor_free(p->gradient);
    for (int i = 0; i < p->bound_count; i++)
        ug_tensor_free(p->bound[i].batch);
    free(p);
}

int ug_pipeline_stage(const ug_pipeline *p) { return p ? p->stage : -1; }
int ug_pipeline_stages(const ug_pipeline *p) { return p ? p->stages : 0; }

ug_status ug_pipeline_input(ug_pipeline *p, ug_dtype dtype, int ndim, const int64_t *shape, ug_value **out)
{
    const char *op = "ug_pipeline_input";
    if (!p || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, p ? "out" : "pipeline");
    if (p->stage == 0)
        return ug_set_error(UG_ERR_STATE, "%s: stage 0 has no stage before it; its inputs are the data's "
                            "(ug_graph_input)", op);
    if (p->input || p->boundaries)
        return ug_set_error(UG_ERR_STATE, "%s: stage %d has its input already%s", op, p->stage,
                            p->boundaries ? " (from ug_pipeline_boundary)" : "");
    UG_TRY(ug_pipeline_make_input(p, op, p->stage, dtype, ndim, shape, out));
    p->input = *out;
    return UG_OK;
}

ug_status ug_pipeline_make_input(ug_pipeline *p, const char *op, int stage, ug_dtype dtype, int ndim,
                                 const int64_t *shape, ug_value **out)
{
    if (!ug_dtype_is_float(dtype))
        return ug_set_error(UG_ERR_DTYPE, "%s: %s; what crosses a boundary is a float value, whose gradient "
                            "goes back", op, ug_dtype_name(dtype));
    if (ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: the input needs a leading axis of rows", op);
    char name[32];
    snprintf(name, sizeof name, "stage%d.input", stage);
    return ug_graph_input(p->graph, name, dtype, ndim, shape, out);
}

/* What crosses a boundary, as each side declares it: the sender its
 * output, the receiver its input; and the dropout streams the stages up
 * to the sender drew, where the receiver's masks begin. */
typedef struct boundary_layout {
    int32_t dtype, ndim;
    int64_t shape[UG_MAX_DIMS];
    uint64_t dropout_streams;
} boundary_layout;

static boundary_layout layout_of(const ug_value *v, uint64_t streams)
{
    boundary_layout l = {.dtype = (int32_t)v->dtype, .ndim = v->ndim, .dropout_streams = streams};
    memcpy(l.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    return l;
}

static void describe(const boundary_layout *l, char *out, size_t len)
{
    char shape[80];
    snprintf(out, len, "%s %s", ug_dtype_name((ug_dtype)l->dtype),
             ug_format_shape(l->ndim, l->shape, shape, sizeof shape));
}

/* Both sides of the boundary between stage `before` and the next compare
 * the same two layouts, so both refuse with the same message. Float
 * types may differ (devices that compute a half type and devices that
 * compute it in f32): the sender casts to the receiver's. */
static ug_status compare_layouts(int before, const boundary_layout *sent, const boundary_layout *declared)
{
    const bool floats = ug_dtype_is_float((ug_dtype)sent->dtype) && ug_dtype_is_float((ug_dtype)declared->dtype);
    bool same = (sent->dtype == declared->dtype || floats) && sent->ndim == declared->ndim &&
                !memcmp(sent->shape, declared->shape, sizeof(int64_t) * (size_t)sent->ndim);
    if (same)
        return UG_OK;
    char a[112], b[112];
    describe(sent, a, sizeof a);
    describe(declared, b, sizeof b);
    return ug_set_error(UG_ERR_SHAPE, "ug_pipeline_compile: stage %d sends %s, stage %d's input (ug_pipeline_input) "
                        "is %s; declare the input as the previous stage's output, with one micro-batch's rows",
                        before, a, before + 1, b);
}

/* Every stage's verdict to every stage: UG_OK when all passed; else this
 * stage's own error, or one naming the first stage that refused. */
static ug_status agree(ug_pipeline *p, ug_status mine, const char *what)
{
    ug_comm *c = p->comm;
    char message[512];
    snprintf(message, sizeof message, "%s", mine != UG_OK ? ug_last_error() : "");
    float *flags = ug_calloc((size_t)c->size, sizeof *flags);
    if (!flags)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_pipeline_compile: out of host memory");
    flags[c->rank] = mine != UG_OK ? (float)mine : 0.0f;
    ug_status st = c->engine->all_reduce(c, flags, (size_t)c->size, UG_COMM_MAX);
    int first = -1;
    for (int r = 0; st == UG_OK && r < c->size && first < 0; r++)
        first = flags[r] != 0.0f ? r : -1;
    const ug_status theirs = first >= 0 ? (ug_status)(int)flags[first] : UG_OK;
    free(flags);
    if (st != UG_OK)
        return st;
    if (mine != UG_OK)
        return ug_set_error(mine, "%s", message);
    if (first >= 0)
        return ug_set_error(theirs, "ug_pipeline_compile: stage %d refused %s (its error says why); nothing was "
                            "compiled", first, what);
    return UG_OK;
}

/* Two stages on one device of one process: the memory the pipeline is
 * for would not be split, and their threads would queue on one device. */
static ug_status distinct_devices(ug_pipeline *p)
{
    ug_comm *c = p->comm;
    const uint64_t where = (uint64_t)(uintptr_t)c->device;
    float mine[4] = {(float)(getpid() & 0xffffff), (float)(where & 0xffffff), (float)((where >> 24) & 0xffffff),
                     (float)((where >> 48) & 0xffff)};
    float *all = ug_calloc((size_t)c->size * 4, sizeof *all);
    if (!all)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_pipeline_compile: out of host memory");
    ug_status st = c->engine->all_gather(c, mine, 4, all);
    for (int a = 0; st == UG_OK && a < c->size; a++)
        for (int b = a + 1; st == UG_OK && b < c->size; b++)
            if (!memcmp(all + 4 * a, all + 4 * b, 4 * sizeof *all))
                st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_pipeline_compile: stages %d and %d are both on %s of "
                                  "one process; give each stage a device of its own (a pipeline splits a model's "
                                  "memory between devices)", a, b, c->device->info.id);
    free(all);
    return st;
}

/* What this stage alone can tell is wrong. */
static ug_status check_stage(ug_pipeline *p, ug_value *value, ug_optimizer *opt)
{
    const char *op = "ug_pipeline_compile";
    const bool last = p->stage == p->stages - 1;
    UG_TRY(ug_graph_check_open(p->graph, op));
    if (value || opt || !last) /* an evaluation's last stage may send nothing */
        UG_TRY(ug_graph_check_value(p->graph, value, op, last ? "loss" : "output"));
    if (opt && ug_optimizer_model(opt) != p->graph->model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the optimizer is another model's", op);
    if (p->stage > 0 && !p->input)
        return ug_set_error(UG_ERR_STATE, "%s: stage %d has no input from stage %d (ug_pipeline_input)", op, p->stage,
                            p->stage - 1);
    if (!last && (!ug_dtype_is_float(value->dtype) || value->ndim < 1))
        return ug_set_error(UG_ERR_DTYPE, "%s: stage %d's output is %s with %d axes; a float value with rows goes "
                            "to the next stage", op, p->stage, ug_dtype_name(value->dtype), value->ndim);
    return UG_OK;
}

/* The layouts across this stage's two boundaries, each checked on both
 * sides; the receiver's masks start where the sender's stages stopped. */
static ug_status exchange_layouts(ug_pipeline *p, ug_value **value)
{
    ug_comm *c = p->comm;
    const bool last = p->stage == p->stages - 1;
    ug_status mine = UG_OK;
    boundary_layout from_before = {0}, from_after = {0};
    size_t bytes = 0;
    if (p->stage > 0) {
        const boundary_layout declared = layout_of(p->input, 0);
        UG_TRY(c->engine->send(c, &declared, sizeof declared, p->stage - 1));
        UG_TRY(c->engine->recv(c, &from_before, sizeof from_before, p->stage - 1, &bytes));
        mine = compare_layouts(p->stage - 1, &from_before, &declared);
        p->graph->run.first_dropout_stream = from_before.dropout_streams;
    }
    if (!last) {
        const boundary_layout sent =
            layout_of(*value, p->graph->run.first_dropout_stream + p->graph->run.dropout_streams);
        UG_TRY(c->engine->send(c, &sent, sizeof sent, p->stage + 1));
        UG_TRY(c->engine->recv(c, &from_after, sizeof from_after, p->stage + 1, &bytes));
        ug_status theirs = compare_layouts(p->stage, &sent, &from_after);
        if (theirs == UG_OK && sent.dtype != from_after.dtype) /* the next stage's type crosses */
            theirs = ug_g_cast(p->graph, *value, (ug_dtype)from_after.dtype, value);
        if (mine == UG_OK)
            mine = theirs;
    }
    return mine;
}

/* The stage's backward pass, update and plan; the seed (the next stage's
 * gradient of the output) is an input of the output's shape. */
static ug_status build_stage(ug_pipeline *p, ug_value *value, ug_optimizer *opt)
{
    const bool last = p->stage == p->stages - 1;
    ug_graph *g = p->graph;
    if (!opt) { /* forward passes only: the output kept to be sent */
        if (last)
            return ug_graph_compile(g);
        p->output = value;
        UG_TRY(ug_graph_keep(g, value));
        return ug_graph_compile(g);
    }
    if (last) {
        p->loss = value;
        UG_TRY(ug_graph_backward_stage(g, value, NULL, p->input, &p->input_grad));
        UG_TRY(ug_graph_accumulate_rows(g, value, &p->loss_sum));
    } else {
        char name[32];
        snprintf(name, sizeof name, "stage%d.output_grad", p->stage);
        p->output = value;
        UG_TRY(ug_graph_input(g, name, value->dtype, value->ndim, value->shape, &p->seed));
        UG_TRY(ug_graph_keep(g, value));
        UG_TRY(ug_graph_backward_stage(g, value, p->seed, p->input, &p->input_grad));
    }
    g->norm_comm = p->comm; /* clipping and loss scaling: the norm of every stage's gradients */
    UG_TRY(ug_graph_set_optimizer(g, opt));
    return ug_graph_compile(g);
}

/* The inputs in flight and the gradient received, each of its value's
 * declared shape. */
static ug_status make_buffers(ug_pipeline *p)
{
    const int in_flight = ug_pipeline_in_flight(p);
    if (p->input) {
        p->slots = ug_calloc((size_t)in_flight, sizeof *p->slots);
        p->slot_rows = ug_calloc((size_t)in_flight, sizeof *p->slot_rows);
        if (!p->slots || !p->slot_rows)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_pipeline_compile: out of host memory");
        p->slot_count = in_flight;
        for (int i = 0; i < in_flight; i++)
            UG_TRY(ug_tensor_create(p->graph->device, p->input->dtype, p->input->ndim, p->input->shape,
                                    &p->slots[i]));
    }
    if (p->seed)
        UG_TRY(ug_tensor_create(p->graph->device, p->seed->dtype, p->seed->ndim, p->seed->shape, &p->gradient));
    return UG_OK;
}

int ug_pipeline_in_flight(const ug_pipeline *p)
{
    if (!p->input)
        return 0;
    const int most = !p->training || p->stage == p->stages - 1 ? 1
                     : p->schedule == UG_PIPELINE_GPIPE     ? p->micro_batches
                                                             : p->stages - p->stage;
    return most < p->micro_batches ? most : p->micro_batches;
}

ug_status ug_pipeline_compile(ug_pipeline *p, ug_value *value, ug_optimizer *opt)
{
    const char *op = "ug_pipeline_compile";
    if (!p)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: pipeline is NULL", op);
    if (p->compiled)
        return ug_set_error(UG_ERR_STATE, "%s: stage %d is compiled already", op, p->stage);
    ug_comm *c = p->comm;
    char micro[16], schedule[16];
    snprintf(micro, sizeof micro, "%d", p->micro_batches);
    snprintf(schedule, sizeof schedule, "%s", p->schedule == UG_PIPELINE_GPIPE ? "GPipe" : "1F1B");
    UG_TRY(ug_comm_check_same(c, 2, (const char *const[]){"micro-batches", "schedule"},
                              (const char *const[]){micro, schedule}, op));
    UG_TRY(agree(p, distinct_devices(p), "to share its device"));
    ug_status mine = ug_pipeline_finish_build(p, &value);
    if (mine == UG_OK)
        mine = check_stage(p, value, opt);
    UG_TRY(agree(p, mine, "its stage"));
    p->training = opt != NULL;
    UG_TRY(agree(p, exchange_layouts(p, &value), "a boundary's layout"));
    mine = build_stage(p, value, opt);
    if (mine == UG_OK)
        mine = make_buffers(p);
    UG_TRY(agree(p, ug_pipeline_agree_replicas(p, mine), "to compile"));
    p->compiled = true;
    return UG_OK;
}

ug_status ug_pipeline_bind(ug_pipeline *p, ug_value *input, const ug_tensor *batch)
{
    const char *op = "ug_pipeline_bind";
    if (!p || !input || !batch)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (input->graph != p->graph || input->kind != VALUE_INPUT || input == p->input || input == p->seed)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the value is not one of this stage's data inputs", op);
    const int64_t rows = batch->ndim ? batch->shape[0] : 0;
    if (rows < p->micro_batches || rows > p->micro_batches * (input->ndim ? input->shape[0] : 1))
        return ug_set_error(UG_ERR_SHAPE, "%s: input '%s' is bound %lld rows; a batch of %d micro-batches of at "
                            "most %lld rows has %d to %lld", op, input->name, (long long)rows, p->micro_batches,
                            (long long)(input->ndim ? input->shape[0] : 1), p->micro_batches,
                            (long long)p->micro_batches * (input->ndim ? input->shape[0] : 1));
    /* Its first micro-batch binds now: the graph checks dtype, shape, device. */
    ug_tensor *first = NULL;
    UG_TRY(ug_tensor_slice(batch, 0, rows / p->micro_batches, &first));
    ug_status st = ug_graph_bind(p->graph, input, first);
    ug_tensor_free(first);
    UG_TRY(st);
    int i = 0;
    while (i < p->bound_count && p->bound[i].input != input)
        i++;
    if (i == UG_PIPELINE_MAX_BOUND)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: at most %d inputs take whole batches", op,
                            UG_PIPELINE_MAX_BOUND);
    ug_tensor *held = NULL;
    UG_TRY(ug_tensor_over_storage(batch->storage, batch->dtype, batch->ndim, batch->shape, batch->offset, &held));
    if (i == p->bound_count)
        p->bound_count++;
    else
        ug_tensor_free(p->bound[i].batch);
    p->bound[i].input = input;
    p->bound[i].batch = held;
    return UG_OK;
}

ug_status ug_pipeline_loss(ug_pipeline *p, float *loss)
{
    if (!p || !loss)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_pipeline_loss: NULL argument");
    if (!p->loss_sum || p->last_rows == 0)
        return ug_set_error(UG_ERR_STATE, "ug_pipeline_loss: %s", !p->loss_sum ? "only the last stage has the loss"
                                                                              : "run the pipeline first");
    float sum = 0.0f;
    UG_TRY(ug_graph_read(p->graph, p->loss_sum, &sum, sizeof sum));
    *loss = sum / (float)p->last_rows;
    return UG_OK;
}

ug_status ug_pipeline_memory(ug_pipeline *p, ug_pipeline_memory_info *info)
{
    if (!p || !info)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_pipeline_memory: NULL argument");
    if (!p->compiled)
        return ug_set_error(UG_ERR_STATE, "ug_pipeline_memory: compile the stage first (ug_pipeline_compile)");
    *info = (ug_pipeline_memory_info){.in_flight = ug_pipeline_in_flight(p)};
    UG_TRY(ug_graph_memory(p->graph, &info->graph));
    for (int i = 0; i < p->slot_count; i++)
        info->boundary_bytes += ug_tensor_nbytes(p->slots[i]);
    if (p->gradient)
        info->boundary_bytes += ug_tensor_nbytes(p->gradient);
    info->total_bytes = info->graph.total_bytes + info->boundary_bytes;
    return UG_OK;
}

ug_status ug_pipeline_last_timing(const ug_pipeline *p, ug_pipeline_timing *out)
{
    if (!p || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_pipeline_last_timing: NULL argument");
    *out = p->timing;
    return UG_OK;
}
