/* A pipeline stage built from the whole model's build function: each
 * stage runs the same function, which marks where one stage ends and the
 * next begins (ug_pipeline_boundary), and keeps its own part. Ops of the
 * stages before this one are set aside at each boundary as it is crossed
 * (their parameters freed at once, so a stage never holds more than its
 * own and one other stage's), the value crossing the boundary replaced by
 * an input; ops after this stage's end are set aside at compile. A value
 * set aside keeps its handle, and an op that reads one is refused: the
 * model is cut where a value reaches past the boundary without crossing
 * it. Every stage draws its parameters' initial values and its dropout
 * masks as the whole model does on one device. */
#include "base/error.h"
#include "core/comm/pipeline_internal.h"
#include "core/graph/internal.h"

/* An op read a value of another stage: the stages' group breaks with
 * why, so that the others are not left waiting for this one. */
static void cut_wrongly(void *ctx, const char *why)
{
    ug_pipeline *p = ctx;
    p->comm->engine->fail(p->comm, why);
}

void ug_pipeline_take_graph(ug_pipeline *p)
{
    p->graph->stage = p->stage;
    p->graph->cut_wrongly = cut_wrongly;
    p->graph->cut_ctx = p;
    p->stage_start = ug_graph_mark_now(p->graph);
}

ug_status ug_pipeline_boundary(ug_graph *g, ug_value **value)
{
    const char *op = "ug_pipeline_boundary";
    if (!g || !value)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, g ? "value" : "graph");
    UG_TRY(ug_graph_check_value(g, *value, op, "*value"));
    ug_pipeline *p = g->cut_wrongly == cut_wrongly ? g->cut_ctx : NULL;
    if (!p) /* one device: the whole model in one graph */
        return UG_OK;
    ug_value *v = *value;
    if (!ug_dtype_is_float(v->dtype) || v->ndim < 1)
        return ug_set_error(UG_ERR_DTYPE, "%s: %s with %d axes; a float value with rows crosses a boundary", op,
                            ug_dtype_name(v->dtype), v->ndim);
    if (p->input && !p->boundaries)
        return ug_set_error(UG_ERR_STATE, "%s: stage %d has its input from ug_pipeline_input; mark boundaries "
                            "or declare the input, not both", op, p->stage);
    const int ending = p->boundaries++; /* the stage this boundary ends */
    if (ending == p->stage) {           /* this stage's own part ends: v is its output */
        p->output = v;
        p->own_end = ug_graph_mark_now(g);
        p->own_streams = g->run.dropout_streams;
        return UG_OK;
    }
    if (ending > p->stage) /* a later stage's: set aside at compile */
        return UG_OK;
    /* An earlier stage ends: its ops go (v stays, set aside), and the
     * next stage's read an input in place of v (this stage's own, or a
     * placeholder). */
    UG_TRY(ug_graph_set_aside(g, p->stage_start, ending, p->placeholder));
    p->placeholder = NULL;
    ug_value *input = NULL;
    UG_TRY(ug_pipeline_make_input(p, op, ending + 1, v->dtype, v->ndim, v->shape, &input));
    if (ending + 1 == p->stage) {
        p->input = input;
        /* This stage's masks continue the streams the ops before drew. */
        g->run.first_dropout_stream += g->run.dropout_streams;
        g->run.dropout_streams = 0;
    } else {
        p->placeholder = input;
    }
    p->stage_start = ug_graph_mark_now(g);
    *value = input;
    return UG_OK;
}

ug_status ug_pipeline_finish_build(ug_pipeline *p, ug_value **value)
{
    const char *op = "ug_pipeline_compile";
    const bool last = p->stage == p->stages - 1;
    if (!p->boundaries)
        return *value || last ? UG_OK
                              : ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: stage %d has no output: mark where "
                                             "each stage ends in the build function (ug_pipeline_boundary), or "
                                             "give the output to ug_pipeline_compile", op, p->stage);
    if (p->boundaries != p->stages - 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the model marks %d boundar%s between stages; %d stages "
                            "need %d", op, p->boundaries, p->boundaries == 1 ? "y" : "ies", p->stages,
                            p->stages - 1);
    if (last)
        return UG_OK;
    /* The later stages' ops go; the loss given is theirs. */
    UG_TRY(ug_graph_set_aside(p->graph, p->own_end, p->stage + 1, NULL));
    p->graph->run.dropout_streams = p->own_streams; /* the later stages' masks are theirs */
    *value = p->output;
    return UG_OK;
}
