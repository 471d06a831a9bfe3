/* A data-parallel replica for the tests (see replica.h). */
#include "replica.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { FEATURES = 6, HIDDEN = 5, CLASSES = 3, STEPS = 10 };

#define TRY(expr)                      \
    do {                               \
        ug_status try_ = (expr);       \
        if (try_ != UG_OK)             \
            return try_;               \
    } while (0)

static float xs[STEPS][REPLICA_BATCH * FEATURES];
static int32_t labels[STEPS][REPLICA_BATCH];

void replica_data(void)
{
    th_seed(11);
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < REPLICA_BATCH; i++) {
            labels[s][i] = (int32_t)((s + i) % CLASSES);
            for (int f = 0; f < FEATURES; f++)
                xs[s][i * FEATURES + f] = (float)th_uniform(-1.0, 1.0) + (f == labels[s][i] ? 1.0f : 0.0f);
        }
}

static ug_status build(replica *r, uint64_t seed)
{
    TRY(ug_model_create(r->device, seed, &r->model));
    TRY(ug_graph_create(r->model, &r->graph));
    ug_value *h = NULL, *a = NULL, *logits = NULL, *loss = NULL;
    TRY(ug_graph_input(r->graph, "x", UG_F32, 2, (int64_t[]){REPLICA_BATCH, FEATURES}, &r->x));
    TRY(ug_graph_input(r->graph, "y", UG_I32, 1, (int64_t[]){REPLICA_BATCH}, &r->y));
    TRY(ug_nn_linear(r->graph, "fc1", r->x, r->other_model ? HIDDEN + 1 : HIDDEN, &h));
    TRY(ug_g_relu(r->graph, h, &a));
    TRY(ug_nn_linear(r->graph, "fc2", a, CLASSES, &logits));
    TRY(ug_g_cross_entropy(r->graph, logits, r->y, 0.0f, &loss));
    TRY(ug_graph_backward(r->graph, loss));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 0.05f;
    TRY(ug_optimizer_create(r->model, &oc, &r->opt));
    TRY(ug_graph_set_optimizer(r->graph, r->opt));
    return ug_graph_compile(r->graph);
}

/* Trains on rows [first, first + rows) of each global batch. */
static ug_status train(replica *r)
{
    for (int s = 0; s < STEPS; s++) {
        if (r->rows > 0) {
            ug_tensor *x = NULL, *y = NULL;
            ug_status st = ug_tensor_from_host(r->device, UG_F32, 2, (int64_t[]){r->rows, FEATURES},
                                               xs[s] + r->first * FEATURES, &x);
            if (st == UG_OK)
                st = ug_tensor_from_host(r->device, UG_I32, 1, (int64_t[]){r->rows}, labels[s] + r->first, &y);
            if (st == UG_OK)
                st = ug_graph_bind(r->graph, r->x, x);
            if (st == UG_OK)
                st = ug_graph_bind(r->graph, r->y, y);
            if (st == UG_OK)
                st = ug_graph_run_backward(r->graph);
            ug_tensor_free(x);
            ug_tensor_free(y);
            TRY(st);
        }
        if (r->comm)
            TRY(ug_comm_reduce_gradients(r->comm, r->graph));
        TRY(ug_graph_run_update(r->graph));
    }
    return UG_OK;
}

static void read_params(replica *r)
{
    r->param_count = 0;
    for (int i = 0; i < ug_model_param_count(r->model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        ug_model_param_at(r->model, i, &name, &t);
        int64_t n = ug_tensor_numel(t);
        if (r->param_count + n <= REPLICA_MAX_PARAMS &&
            ug_model_read_param(r->model, name, r->params + r->param_count, (size_t)n * sizeof(float)) == UG_OK)
            r->param_count += n;
    }
}

void replica_run(replica *r)
{
    ug_status st = build(r, 100 + (uint64_t)ug_comm_rank(r->comm)); /* different starts: the broadcast unites them */
    if (st == UG_OK)
        st = ug_comm_broadcast_model(r->comm, r->model);
    if (st == UG_OK)
        st = train(r);
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", st == UG_OK ? "" : ug_last_error());
    if (st == UG_OK)
        read_params(r);
}

bool replica_reference(ug_device *device, replica *one)
{
    memset(one, 0, sizeof *one);
    one->device = device;
    one->rows = REPLICA_BATCH;
    bool ok = CHECK_STATUS(build(one, 100), UG_OK) && CHECK_STATUS(train(one), UG_OK);
    if (ok)
        read_params(one);
    replica_free(one);
    return ok;
}

double replica_distance(const replica *a, const replica *b)
{
    if (a->param_count != b->param_count)
        return INFINITY;
    double worst = 0;
    for (int64_t i = 0; i < a->param_count; i++)
        worst = fmax(worst, fabs(a->params[i] - b->params[i]) / fmax(1e-3, fabs(b->params[i])));
    return worst;
}

void replica_free(replica *r)
{
    ug_graph_free(r->graph);
    ug_optimizer_free(r->opt);
    ug_model_free(r->model);
    r->graph = NULL;
    r->opt = NULL;
    r->model = NULL;
}
