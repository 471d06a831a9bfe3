/* Data-parallel training in one process (comm.h): two replicas (the CPU and
 * the device under test, on threads of their own) start from different
 * initialisations, take rank 0's parameters (ug_comm_broadcast_model),
 * and train an MLP with Adam on their parts of each global batch, split
 * evenly and unevenly, with the gradients summed over the ranks
 * (ug_comm_reduce_gradients). After 10 steps every replica's parameters
 * equal one device's trained on the whole global batches within 1e-5;
 * replicas on the same kind of device are bitwise equal. A part may be
 * empty; replicas of different models are refused on every rank. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "train_support.h"

#define EXPECT(cond) ((cond) ? true : (th_fail(TH_LOC, "%s", #cond), false))
/* Returns a failed status from the enclosing function. */
#define TRY(expr)                      \
    do {                               \
        ug_status try_ = (expr);       \
        if (try_ != UG_OK)             \
            return try_;               \
    } while (0)

enum { FEATURES = 6, HIDDEN = 5, CLASSES = 3, BATCH = 8, STEPS = 10, MAX_PARAMS = 4096 };

static float xs[STEPS][BATCH * FEATURES];
static int32_t labels[STEPS][BATCH];

static void make_data(void)
{
    th_seed(11);
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BATCH; i++) {
            labels[s][i] = (int32_t)((s + i) % CLASSES);
            for (int f = 0; f < FEATURES; f++)
                xs[s][i * FEATURES + f] = (float)th_uniform(-1.0, 1.0) + (f == labels[s][i] ? 1.0f : 0.0f);
        }
}

/* A replica: its model, graph and optimizer on device, built from seed. */
typedef struct replica {
    ug_device *device;
    ug_comm *comm;
    ug_model *model;
    ug_optimizer *opt;
    ug_graph *graph;
    ug_value *x, *y;
    int64_t first, rows;      /* its part of each global batch */
    bool other_model;         /* builds a wider hidden layer (the refusal case) */
    ug_status status;
    char message[384];
    float params[MAX_PARAMS];
    int64_t param_count;
} replica;

static ug_status build(replica *r, uint64_t seed)
{
    TRY(ug_model_create(r->device, seed, &r->model));
    TRY(ug_graph_create(r->model, &r->graph));
    ug_value *h = NULL, *a = NULL, *logits = NULL, *loss = NULL;
    TRY(ug_graph_input(r->graph, "x", UG_F32, 2, (int64_t[]){BATCH, FEATURES}, &r->x));
    TRY(ug_graph_input(r->graph, "y", UG_I32, 1, (int64_t[]){BATCH}, &r->y));
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
        if (r->param_count + n <= MAX_PARAMS &&
            ug_model_read_param(r->model, name, r->params + r->param_count, (size_t)n * sizeof(float)) == UG_OK)
            r->param_count += n;
    }
}

static void *run_replica(void *arg)
{
    replica *r = arg;
    ug_status st = build(r, 100 + (uint64_t)ug_comm_rank(r->comm)); /* different starts: the broadcast unites them */
    if (st == UG_OK)
        st = ug_comm_broadcast_model(r->comm, r->model);
    if (st == UG_OK)
        st = train(r);
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", st == UG_OK ? "" : ug_last_error());
    if (st == UG_OK)
        read_params(r);
    ug_comm_free(r->comm); /* a rank that failed leaves: the others return at once */
    return NULL;
}

static void free_replica(replica *r)
{
    ug_graph_free(r->graph);
    ug_optimizer_free(r->opt);
    ug_model_free(r->model);
}

/* One device on the whole global batches, from rank 0's initialisation. */
static bool reference(ug_device *dev, replica *one)
{
    memset(one, 0, sizeof *one);
    one->device = dev;
    one->rows = BATCH;
    bool ok = CHECK_STATUS(build(one, 100), UG_OK) && CHECK_STATUS(train(one), UG_OK);
    if (ok)
        read_params(one);
    free_replica(one);
    return ok;
}

static replica one, ranks[2];

/* Two replicas, rank 1 on dev, splitting each batch at split. */
static void run_pair(ug_device *dev, int64_t split, bool other_model)
{
    ug_device *cpu = NULL;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    ug_device *devices[2] = {cpu, dev};
    ug_comm *comms[2];
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    pthread_t threads[2];
    for (int r = 0; r < 2; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r] = (replica){.device = devices[r], .comm = comms[r], .first = r ? split : 0,
                             .rows = r ? BATCH - split : split, .other_model = other_model && r == 1};
        pthread_create(&threads[r], NULL, run_replica, &ranks[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(threads[r], NULL);
    for (int r = 0; r < 2; r++)
        free_replica(&ranks[r]);
    ug_device_close(cpu);
}

static void check_against_one(ug_device *dev, int64_t split)
{
    make_data();
    REQUIRE(reference(dev, &one));
    run_pair(dev, split, false);
    for (int r = 0; r < 2; r++) {
        if (!EXPECT(ranks[r].status == UG_OK)) {
            th_fail(TH_LOC, "rank %d: %s", r, ranks[r].message);
            continue;
        }
        CHECK_EQ_I64(ranks[r].param_count, one.param_count);
        double worst = 0;
        for (int64_t i = 0; i < one.param_count; i++)
            worst = fmax(worst, fabs(ranks[r].params[i] - one.params[i]) / fmax(1e-3, fabs(one.params[i])));
        CHECK_MSG(worst < 1e-5, "rank %d (split %lld of %d) is %g from one device on the global batch", r,
                  (long long)split, BATCH, worst);
    }
    if (!strcmp(ug_device_name(dev), "cpu"))
        CHECK_MSG(!memcmp(ranks[0].params, ranks[1].params, (size_t)one.param_count * sizeof(float)),
                  "two replicas on the CPU are not bitwise equal");
}

static void test_even_split(ug_device *dev) { check_against_one(dev, BATCH / 2); }
static void test_uneven_split(ug_device *dev) { check_against_one(dev, 3); }
static void test_empty_part(ug_device *dev) { check_against_one(dev, BATCH); } /* rank 1 gets no rows */

static void test_other_model_refused(ug_device *dev)
{
    make_data();
    run_pair(dev, BATCH / 2, true);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(ranks[r].status == UG_ERR_INVALID_ARGUMENT && strstr(ranks[r].message, "another name or shape"),
                  "rank %d: %s", r, ranks[r].message);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(even_split),
        TH_DEVICE_TEST(uneven_split),
        TH_DEVICE_TEST(empty_part),
        TH_DEVICE_TEST(other_model_refused),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
