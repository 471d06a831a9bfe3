/* Data-parallel training on a communicator (comm.h): the replicas' models
 * made one (rank 0's parameters, after checking that every rank has the
 * same ones), and the accumulated gradients summed over the ranks.
 *
 * A graph's accumulators hold each micro-batch's mean gradient times its
 * rows, and the update divides by the rows accumulated (graph/run.c);
 * summing both over the ranks makes every rank's update the one a single
 * device would make on the global batch, however unevenly it is split. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/mix64.h"
#include "core/comm/internal.h"
#include "core/graph/internal.h"

/* A 64-bit hash as four floats holding 16 bits each, which f32 carries
 * exactly through any engine. */
static void as_floats(uint64_t h, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = (float)((h >> (16 * i)) & 0xFFFF);
}

static uint64_t hash_text(uint64_t h, const char *text)
{
    for (const char *c = text; *c; c++)
        h = ug_mix64(h ^ (unsigned char)*c);
    return h;
}

/* A parameter's name and shape, as four floats. */
static void signature(const char *name, const ug_tensor *t, float out[4])
{
    uint64_t h = ug_mix64(hash_text(0x9E3779B97F4A7C15ull, name) ^ (uint64_t)ug_tensor_ndim(t));
    for (int d = 0; d < ug_tensor_ndim(t); d++)
        h = ug_mix64(h ^ (uint64_t)ug_tensor_dim(t, d));
    as_floats(h, out);
}

/* Every rank's parameters against rank 0's; the same verdict on every rank. */
static ug_status check_models(ug_comm *c, ug_model *model, const char *op)
{
    const int n = ug_model_param_count(model);
    float count = (float)n, *counts = ug_calloc((size_t)c->size, sizeof *counts);
    if (!counts)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    ug_status st = c->engine->all_gather(c, &count, 1, counts);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        if (counts[r] != counts[0])
            st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                              "%s: rank %d's model has %.0f parameters, rank 0's %.0f; every rank must build the "
                              "same model", op, r, (double)counts[r], (double)counts[0]);
    free(counts);
    UG_TRY(st);
    float *mine = ug_calloc((size_t)n * 4 + 1, sizeof *mine), *all = ug_calloc((size_t)n * 4 * (size_t)c->size + 1,
                                                                             sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, &name, &t);
        signature(name, t, mine + 4 * i);
    }
    st = c->engine->all_gather(c, mine, (size_t)n * 4, all);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        for (int i = 0; i < n && st == UG_OK; i++)
            if (memcmp(all + ((size_t)r * (size_t)n + (size_t)i) * 4, all + (size_t)i * 4, 4 * sizeof(float))) {
                const char *name = NULL;
                ug_model_param_at(model, i, &name, NULL);
                st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                  "%s: parameter %d (%s on rank %d) has another name or shape on rank %d than on "
                                  "rank 0; every rank must build the same model", op, i, name, c->rank, r);
            }
    free(mine);
    free(all);
    return st;
}

ug_status ug_comm_broadcast_model(ug_comm *c, ug_model *model)
{
    const char *op = "ug_comm_broadcast_model";
    if (!c || !model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "model" : "comm");
    UG_TRY(check_models(c, model, op));
    return ug_comm_take_rank0_params(c, model, op);
}

bool ug_comm_mixed_backends(ug_comm *c)
{
    /* Each rank's backend name as a signature; any difference counts. */
    float mine[4], *all = ug_calloc((size_t)c->size * 4, sizeof *all);
    as_floats(hash_text(0x9E3779B97F4A7C15ull, c->device->backend->name), mine);
    bool mixed = true; /* when it cannot be told: resync, which is always right */
    if (all && c->engine->all_gather(c, mine, 4, all) == UG_OK) {
        mixed = false;
        for (int r = 1; r < c->size; r++)
            mixed |= memcmp(all, all + 4 * r, 4 * sizeof(float)) != 0;
    }
    free(all);
    return mixed;
}

ug_status ug_comm_take_rank0_params(ug_comm *c, ug_model *model, const char *op)
{
    for (int i = 0; i < ug_model_param_count(model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(model, i, &name, &t));
        size_t n = (size_t)ug_tensor_numel(t);
        float *host = ug_malloc((n ? n : 1) * sizeof *host);
        if (!host)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s", op, name);
        ug_status st = c->rank == 0 ? ug_model_read_param(model, name, host, n * sizeof *host) : UG_OK;
        if (st != UG_OK)
            c->engine->fail(c, ug_last_error());
        if (st == UG_OK)
            st = c->engine->broadcast(c, host, n, 0);
        /* Written through the model, so its half copies follow. */
        if (st == UG_OK && c->rank != 0)
            st = ug_model_write_param(model, name, host, n * sizeof *host);
        free(host);
        UG_TRY(st);
    }
    return UG_OK;
}

ug_status ug_comm_reduce_gradients(ug_comm *c, ug_graph *g)
{
    const char *op = "ug_comm_reduce_gradients";
    if (!c || !g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "graph" : "comm");
    ug_status st = UG_OK;
    if (!g->compiled || !g->has_backward)
        st = ug_set_error(UG_ERR_STATE, "%s: the graph is not compiled with a backward pass", op);
    if (st == UG_OK && !g->accumulated)
        st = ug_graph_make_accumulators(g);
    /* An empty part adds nothing: zeros, and no rows. */
    for (int k = 0; st == UG_OK && !g->micro_batches && k < g->accumulated_count; k++)
        st = ug_launch_unary(op, UG_UNARY_FILL, 0.0f, 0.0f, g->accumulated[k], NULL);
    if (st != UG_OK) {
        c->engine->fail(c, ug_last_error());
        return st;
    }
    for (int k = 0; k < g->accumulated_count; k++)
        UG_TRY(ug_comm_all_reduce(c, g->accumulated[k], UG_COMM_SUM));
    /* Parameters the graph does not train but its forward pass updates
     * (batch norm's running statistics) take rank 0's values, as
     * DistributedDataParallel's buffers do, so the replicas stay alike. */
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_PARAM && !v->grad && v->param && v->param->dtype == UG_F32)
            UG_TRY(ug_comm_broadcast(c, v->param, 0));
    }
    float rows = (float)(g->micro_batches ? g->accumulated_rows : 0);
    UG_TRY(c->engine->all_reduce(c, &rows, 1, UG_COMM_SUM));
    if (rows < 1.0f)
        return ug_set_error(UG_ERR_STATE, "%s: no rank ran a micro-batch (ug_graph_run_backward) since the last "
                            "update", op);
    if (!g->micro_batches++ && g->optimizer)
        g->accumulation_step = ug_optimizer_steps(g->optimizer);
    g->accumulated_rows = (int64_t)rows;
    return UG_OK;
}
