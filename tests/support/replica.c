/* A data-parallel replica for the tests (see replica.h). */
#include "replica.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

enum { SIDE = 4, FEATURES = SIDE * SIDE, HIDDEN = 5, CLASSES = 3, STEPS = REPLICA_STEPS };

static float xs[STEPS][REPLICA_BATCH * FEATURES];
static int32_t labels[STEPS][REPLICA_BATCH];

/* The rows of global batch s. */
static int64_t batch_rows(int s) { return s + 1 == STEPS ? REPLICA_LAST_BATCH : REPLICA_BATCH; }

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
    const replica_setup *c = &r->setup;
    const ug_dtype precision = c->f16 ? UG_F16 : UG_F32;
    TRY(ug_model_create(r->device, seed, &r->model));
    TRY(ug_graph_create(r->model, &r->graph));
    TRY(ug_graph_set_precision(r->graph, precision));
    ug_value *h = NULL, *logits = NULL, *loss = NULL;
    TRY(ug_graph_input(r->graph, "x", precision, 2, (int64_t[]){REPLICA_BATCH, FEATURES}, &r->x));
    TRY(ug_graph_input(r->graph, "y", UG_I32, 1, (int64_t[]){REPLICA_BATCH}, &r->y));
    h = r->x;
    if (c->cnn) { /* no batch norm: its statistics over a part are not the global batch's */
        const ug_conv2d_params same = {.padding = {1, 1}};
        const ug_pool2d_params halve = {.kernel = {2, 2}};
        TRY(ug_g_reshape(r->graph, h, 4, (int64_t[]){REPLICA_BATCH, 1, SIDE, SIDE}, &h));
        TRY(ug_nn_conv2d(r->graph, "conv1", h, 3, 3, 3, &same, &h));
        TRY(ug_g_relu(r->graph, h, &h));
        TRY(ug_g_max_pool2d(r->graph, h, &halve, &h));
        TRY(ug_nn_flatten(r->graph, h, &h));
    }
    TRY(ug_nn_linear(r->graph, "fc1", h, r->other_model ? HIDDEN + 1 : HIDDEN, &h));
    TRY(ug_g_relu(r->graph, h, &h));
    TRY(ug_nn_linear(r->graph, "fc2", h, CLASSES, &logits));
    TRY(ug_g_cross_entropy(r->graph, logits, r->y, 0.0f, &loss));
    TRY(ug_graph_backward(r->graph, loss));
    ug_optimizer_config oc = ug_optimizer_defaults(r->other_optimizer ? UG_SGD : UG_ADAM);
    oc.lr = 0.05f;
    oc.max_grad_norm = c->clip ? 0.5f : 0.0f;
    oc.loss_scaling.enabled = c->f16;
    TRY(ug_optimizer_create(r->model, &oc, &r->opt));
    TRY(ug_graph_set_optimizer(r->graph, r->opt));
    TRY(ug_graph_compile(r->graph));
    /* Small buckets: several collectives, some while backward runs. */
    return ug_comm_set_bucket_bytes(r->graph, 64, 256);
}

/* Rows [first, first + rows) of global batch s as one micro-batch. */
static ug_status micro_batch(replica *r, int s, int64_t first, int64_t rows)
{
    float x_host[REPLICA_BATCH * FEATURES];
    memcpy(x_host, xs[s] + first * FEATURES, (size_t)(rows * FEATURES) * sizeof(float));
    /* The overflow: one row past f16's range. */
    const int64_t bad = REPLICA_BATCH / 2;
    if (r->setup.overflow_step == s + 1 && first <= bad && bad < first + rows)
        x_host[(bad - first) * FEATURES] = 1e30f;
    unsigned short half[REPLICA_BATCH * FEATURES];
    for (int64_t i = 0; i < rows * FEATURES; i++)
        half[i] = ug_f32_to_f16(x_host[i]);
    ug_tensor *x = NULL, *y = NULL;
    ug_status st = ug_tensor_create(r->device, r->setup.f16 ? UG_F16 : UG_F32, 2, (int64_t[]){rows, FEATURES}, &x);
    if (st == UG_OK && r->setup.f16)
        st = ug_tensor_upload(x, half, (size_t)(rows * FEATURES) * sizeof *half);
    else if (st == UG_OK)
        st = ug_tensor_upload(x, x_host, (size_t)(rows * FEATURES) * sizeof *x_host);
    if (st == UG_OK)
        st = ug_tensor_from_host(r->device, UG_I32, 1, (int64_t[]){rows}, labels[s] + first, &y);
    if (st == UG_OK)
        st = ug_graph_bind(r->graph, r->x, x);
    if (st == UG_OK)
        st = ug_graph_bind(r->graph, r->y, y);
    ug_tensor_free(x);
    ug_tensor_free(y);
    return st;
}

static void read_params(replica *r);

static uint64_t hash_params(const replica *r)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)r->params;
    for (size_t i = 0; i < (size_t)r->param_count * sizeof(float); i++)
        h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

/* Trains on rows [first, first + rows) of each global batch, cut to its
 * rows: in one or two micro-batches, the last one reducing over comm. */
static ug_status train(replica *r)
{
    if (r->comm)
        TRY(ug_comm_set_overlap(r->comm, !r->setup.no_overlap));
    for (int s = 0; s < STEPS; s++) {
        if (r->killed_at_step == s + 1)
            raise(SIGKILL); /* a rank that dies: the others must not hang */
        int64_t begin = r->first < batch_rows(s) ? r->first : batch_rows(s);
        int64_t end = r->first + r->rows < batch_rows(s) ? r->first + r->rows : batch_rows(s);
        int64_t middle = r->setup.accumulate ? (begin + end) / 2 : end;
        if (r->reference_split) /* the ranks' parts, as micro-batches */
            middle = r->reference_split < end ? r->reference_split : end;
        int64_t cut[3] = {begin, middle, end};
        int parts = middle < end ? 2 : 1, last = -1;
        for (int m = 0; m < parts; m++)
            if (cut[m + 1] > cut[m])
                last = m;
        for (int m = 0; m <= last; m++) {
            if (cut[m + 1] == cut[m])
                continue;
            TRY(micro_batch(r, s, cut[m], cut[m + 1] - cut[m]));
            if (r->comm && m == last && !r->setup.after_backward) {
                TRY(ug_comm_run_backward(r->comm, r->graph));
                const double compute = r->compute_seconds ? r->compute_seconds(r->comm) : 0.0;
                if (s > 0 && compute > r->most_compute)
                    r->most_compute = compute;
            } else
                TRY(ug_graph_run_backward(r->graph));
        }
        if (r->comm && (last < 0 || r->setup.after_backward))
            TRY(ug_comm_reduce_gradients(r->comm, r->graph));
        ug_comm_bucket bucket = {0};
        if (r->comm && ug_comm_bucket_at(r->comm, 0, &bucket) == UG_OK)
            r->scattered += bucket.scattered;
        TRY(ug_graph_run_update(r->graph));
        if (r->setup.shard)
            TRY(ug_comm_gather_parameters(r->comm, r->opt));
        read_params(r);
        r->step_hash[s] = hash_params(r);
    }
    ug_loss_scaler_state scaler = {0};
    if (r->setup.f16)
        TRY(ug_optimizer_loss_scaler(r->opt, &scaler));
    r->skipped_steps = scaler.skipped_steps;
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
    if (st == UG_OK && r->setup.shard)
        st = ug_comm_shard_optimizer(r->comm, r->opt);
    if (st == UG_OK)
        st = train(r);
    for (int i = 0; st == UG_OK && i < ug_model_param_count(r->model); i++)
        for (int slot = 0; slot < ug_optimizer_state_count(r->opt); slot++) {
            ug_tensor *t = NULL;
            if (ug_optimizer_state(r->opt, i, slot, &t) == UG_OK)
                r->state_values += ug_tensor_numel(t);
        }
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", st == UG_OK ? "" : ug_last_error());
    if (st == UG_OK)
        read_params(r);
}

bool replica_reference(ug_device *device, const replica_setup *setup, int64_t split, replica *one)
{
    memset(one, 0, sizeof *one);
    one->device = device;
    one->rows = REPLICA_BATCH;
    one->setup = *setup;
    one->setup.accumulate = false;
    one->reference_split = setup->f16 ? split : 0;
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
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < a->param_count; i++) {
        worst = fmax(worst, fabs(a->params[i] - b->params[i]));
        scale = fmax(scale, fabs(b->params[i]));
    }
    return worst / fmax(scale, 1e-30);
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
