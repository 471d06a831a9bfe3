/* A staged run's checkpoint holds the whole model: every stage's
 * parameters and optimizer state gathered on stage 0, into a model and an
 * optimizer in host memory (the CPU backend's: the whole model need not
 * fit stage 0's device), which its checkpoint saves in place of its own
 * part. A resume loads each stage's part by name from the file, so a run
 * resumes on any cut of its model, or on one device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/pipeline_internal.h"
#include "core/graph/internal.h"
#include "unigrad/optim.h"

/* One parameter as it travels: name, shape, then its values and its
 * state slots' (each numel floats). */
typedef struct param_header {
    char name[64];
    int32_t ndim, slots;
    int64_t shape[UG_MAX_DIMS];
} param_header;

/* Parameter i of model and its state, packed into the rank's host
 * buffer as they travel (*buffer, of *floats floats). */
static ug_status pack_param(ug_comm *c, ug_model *model, ug_optimizer *opt, int i, float **buffer, size_t *floats)
{
    const int slots = ug_optimizer_state_count(opt);
    const char *name = NULL;
    ug_tensor *t = NULL, *state = NULL;
    ug_model_param_at(model, i, &name, &t);
    const int64_t n = ug_tensor_numel(t);
    param_header h = {.ndim = ug_tensor_ndim(t), .slots = slots};
    snprintf(h.name, sizeof h.name, "%s", name);
    ug_tensor_shape(t, h.shape);
    *floats = sizeof h / sizeof(float) + (size_t)n * (size_t)(1 + slots);
    UG_TRY(ug_comm_host_buffer(c, *floats, "saving a staged run", buffer));
    float *values = *buffer + sizeof h / sizeof(float);
    memcpy(*buffer, &h, sizeof h);
    UG_TRY(ug_tensor_download(t, values, (size_t)n * sizeof(float)));
    for (int s = 0; s < slots; s++) {
        UG_TRY(ug_optimizer_state(opt, i, s, &state));
        UG_TRY(ug_tensor_download(state, values + (size_t)n * (size_t)(1 + s), (size_t)n * sizeof(float)));
    }
    return UG_OK;
}

/* Every parameter of this stage, the last stage's running sums (slots
 * -1, the name their key), then a header of no axes (the end). */
static ug_status send_state(ug_comm *c, ug_model *model, ug_optimizer *opt, const ug_graph *graph,
                            const char *graph_name)
{
    float *buffer = NULL;
    size_t floats = 0;
    ug_status st = UG_OK;
    for (int i = 0; st == UG_OK && i < ug_model_param_count(model); i++) {
        st = pack_param(c, model, opt, i, &buffer, &floats);
        if (st == UG_OK)
            st = c->engine->send(c, buffer, floats * sizeof(float), 0);
    }
    /* The last stage's running sums, by the names its checkpoint gives them. */
    for (int i = 0, k = 0; st == UG_OK && graph && i < graph->value_count; i++) {
        const ug_value *v = graph->values[i];
        if (v->kind != VALUE_SUM || !v->tensor)
            continue;
        const int64_t n = ug_tensor_numel(v->tensor);
        param_header h = {.ndim = v->tensor->ndim, .slots = -1};
        snprintf(h.name, sizeof h.name, "unigrad.graph.%s.sum%d", graph_name, k++);
        memcpy(h.shape, v->tensor->shape, sizeof(int64_t) * (size_t)h.ndim);
        const size_t floats = sizeof h / sizeof(float) + (size_t)n;
        st = ug_comm_host_buffer(c, floats, "saving a staged run", &buffer);
        if (st == UG_OK) {
            memcpy(buffer, &h, sizeof h);
            st = ug_tensor_download(v->tensor, buffer + sizeof h / sizeof(float), (size_t)n * sizeof(float));
        }
        if (st == UG_OK)
            st = c->engine->send(c, buffer, floats * sizeof(float), 0);
    }
    const param_header end = {.ndim = -1};
    return st == UG_OK ? c->engine->send(c, &end, sizeof end, 0) : st;
}

/* The state of the whole model's parameters, kept on the host until the
 * whole optimizer exists. */
typedef struct kept_state {
    float **values;           /* [parameter]: its slots' values, one after another */
    int count, capacity;
} kept_state;

/* A parameter and its state into the whole model (values now, the
 * state once the optimizer exists: kept). */
static ug_status add_param(ug_model *whole, const param_header *h, const float *values, kept_state *k)
{
    if (k->count == k->capacity) {
        const int capacity = k->capacity ? 2 * k->capacity : 64;
        float **grown = ug_realloc(k->values, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving a staged run: out of host memory");
        k->values = grown;
        k->capacity = capacity;
    }
    float **kept = &k->values[k->count];
    *kept = NULL;
    ug_tensor *t = NULL;
    int64_t n = 1;
    for (int d = 0; d < h->ndim; d++)
        n *= h->shape[d];
    UG_TRY(ug_model_param(whole, h->name, h->ndim, h->shape, UG_INIT_CONSTANT, 0.0f, &t));
    UG_TRY(ug_model_write_param(whole, h->name, values, (size_t)n * sizeof *values));
    *kept = ug_malloc((size_t)n * (size_t)(h->slots ? h->slots : 1) * sizeof **kept);
    if (!*kept)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving a staged run: the state of %s", h->name);
    memcpy(*kept, values + n, (size_t)n * (size_t)h->slots * sizeof **kept);
    k->count++;
    return UG_OK;
}

/* A running sum of the last stage's, into host memory. */
static ug_status keep_sum(ug_pipeline_state *out, ug_device *host, const param_header *h, const float *values)
{
    if (out->sum_count == UG_PIPELINE_MAX_SUMS)
        return ug_set_error(UG_ERR_UNSUPPORTED, "saving a staged run: more than %d running sums",
                            UG_PIPELINE_MAX_SUMS);
    ug_tensor *t = NULL;
    UG_TRY(ug_tensor_from_host(host, UG_F32, h->ndim, h->shape, values, &t));
    snprintf(out->sum_names[out->sum_count], sizeof out->sum_names[0], "%s", h->name);
    out->sums[out->sum_count++] = t;
    return UG_OK;
}

/* Stage 0: its own parameters, then each stage's in stage order (the
 * whole model's order of creation). */
static ug_status receive_state(ug_comm *c, ug_model *model, ug_optimizer *opt, ug_device *host,
                               ug_pipeline_state *out, kept_state *k)
{
    ug_model *whole = out->model;
    float *buffer = NULL;
    for (int source = 0; source < c->size; source++) {
        if (source == 0) { /* stage 0's own, packed as the others send them */
            for (int i = 0; i < ug_model_param_count(model); i++) {
                size_t floats = 0;
                UG_TRY(pack_param(c, model, opt, i, &buffer, &floats));
                param_header h;
                memcpy(&h, buffer, sizeof h);
                UG_TRY(add_param(whole, &h, buffer + sizeof h / sizeof(float), k));
            }
            continue;
        }
        for (;;) {
            size_t bytes = 0;
            UG_TRY(ug_comm_recv_message(c, source, sizeof(param_header), "saving a staged run", &buffer, &bytes));
            if (bytes < sizeof(param_header))
                return ug_set_error(UG_ERR_BACKEND, "saving a staged run: stage %d sent %zu bytes, not a parameter",
                                    source, bytes);
            param_header h;
            memcpy(&h, buffer, sizeof h);
            if (h.ndim < 0)
                break;
            h.name[sizeof h.name - 1] = '\0';
            if (h.slots < 0 && h.ndim <= UG_MAX_DIMS) {
                UG_TRY(keep_sum(out, host, &h, buffer + sizeof h / sizeof(float)));
                continue;
            }
            if (h.ndim > UG_MAX_DIMS || h.slots != ug_optimizer_state_count(opt))
                return ug_set_error(UG_ERR_BACKEND, "saving a staged run: stage %d sent parameter %s of %d axes "
                                    "and %d state slots", source, h.name, h.ndim, h.slots);
            UG_TRY(add_param(whole, &h, buffer + sizeof h / sizeof(float), k));
        }
    }
    return UG_OK;
}

/* The whole optimizer, of the stages' configuration and steps, its state
 * from kept (in the whole model's order). */
static ug_status whole_optimizer(ug_optimizer *opt, ug_model *whole, const kept_state *k, ug_optimizer **out)
{
    const ug_optimizer_config config = ug_optimizer_get_config(opt);
    UG_TRY(ug_optimizer_create(whole, &config, out));
    UG_TRY(ug_optimizer_set_steps(*out, ug_optimizer_steps(opt)));
    for (int i = 0; i < ug_model_param_count(whole); i++)
        for (int s = 0; s < ug_optimizer_state_count(*out); s++) {
            ug_tensor *state = NULL;
            UG_TRY(ug_optimizer_state(*out, i, s, &state));
            const int64_t n = ug_tensor_numel(state);
            UG_TRY(ug_tensor_upload(state, k->values[i] + (size_t)n * (size_t)s, (size_t)n * sizeof(float)));
        }
    return UG_OK;
}

ug_status ug_pipeline_gather_state(ug_comm *c, ug_model *model, ug_optimizer *opt, const ug_graph *graph,
                                   const char *graph_name, ug_pipeline_state *out)
{
    *out = (ug_pipeline_state){0};
    if (c->rank != 0) {
        ug_status st = send_state(c, model, opt, c->rank == c->size - 1 ? graph : NULL, graph_name);
        if (st != UG_OK) /* stage 0 would wait for the rest */
            c->engine->fail(c, ug_last_error());
        return st;
    }
    ug_device *host = NULL;
    kept_state k = {0};
    ug_status st = ug_device_open("cpu", &host);
    if (st == UG_OK) st = ug_model_create(host, 0, &out->model);
    if (st == UG_OK) st = receive_state(c, model, opt, host, out, &k);
    if (st == UG_OK) st = whole_optimizer(opt, out->model, &k, &out->optimizer);
    for (int i = 0; i < k.count; i++)
        free(k.values[i]);
    free(k.values);
    ug_device_close(host); /* the model holds it */
    if (st != UG_OK) {
        c->engine->fail(c, ug_last_error());
        ug_pipeline_state_free(out);
    }
    return st;
}

void ug_pipeline_state_free(ug_pipeline_state *s)
{
    ug_optimizer_free(s->optimizer);
    ug_model_free(s->model);
    for (int i = 0; i < s->sum_count; i++)
        ug_tensor_free(s->sums[i]);
    *s = (ug_pipeline_state){0};
}
