/* The optimizer's state sharded over the ranks (ZeRO stage 1, comm.h's
 * ug_comm_shard_optimizer): two in-process replicas on the device under
 * test (threads of their own) train replica.c's MLP or CNN with Adam for
 * 20 steps, once with whole state and once sharded, each rank updating
 * its part of every parameter and ug_comm_gather_parameters making them
 * whole. The sharded run's parameters are the unsharded run's bit for bit
 * after every step, on both ranks (the same sums in the same order), with
 * accumulation, clipping, and f16 with loss scaling and an overflow (the
 * gradients reduce-scattered, or all-reduced whole where clipping and
 * loss scaling read their norm); each
 * rank's state is its part: the two add up to the whole state and differ
 * by at most a value per tensor, and the pool's bytes in use (and the
 * graph's plan) drop by half the state's on sharding. Refused: ug_graph_run on a sharded
 * optimizer (it would not gather), a checkpoint of one, and a gather
 * without sharding; sharding again as the same rank is nothing. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"
#include "unigrad/memory.h"

static replica ranks[2];

static void *run_replica(void *arg)
{
    replica *r = arg;
    replica_run(r);
    ug_comm_free(r->comm);
    return NULL;
}

/* Two replicas on dev, splitting each global batch at split. */
static bool run_pair(ug_device *dev, int64_t split, const replica_setup *setup)
{
    ug_device *devices[2] = {dev, dev};
    ug_comm *comms[2];
    if (!CHECK_STATUS(ug_comm_local_create(2, devices, comms), UG_OK))
        return false;
    pthread_t threads[2];
    for (int r = 0; r < 2; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r] = (replica){.device = dev, .comm = comms[r], .first = r ? split : 0,
                             .rows = r ? REPLICA_BATCH - split : split, .setup = *setup};
        pthread_create(&threads[r], NULL, run_replica, &ranks[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(threads[r], NULL);
    bool ok = true;
    for (int r = 0; r < 2; r++) {
        if (ranks[r].status != UG_OK) {
            th_fail(TH_LOC, "rank %d%s: %s", r, setup->shard ? " (sharded)" : "", ranks[r].message);
            ok = false;
        }
        replica_free(&ranks[r]);
    }
    return ok;
}

static void check_same_bits(ug_device *dev, int64_t split, replica_setup setup, const char *what)
{
    replica_data();
    setup.shard = false;
    if (!run_pair(dev, split, &setup))
        return;
    replica whole[2];
    memcpy(whole, ranks, sizeof whole);
    setup.shard = true;
    if (!run_pair(dev, split, &setup))
        return;
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < REPLICA_STEPS; s++)
            if (ranks[r].step_hash[s] != whole[r].step_hash[s]) {
                th_fail(TH_LOC, "%s: rank %d's parameters after step %d differ from the unsharded run's", what, r,
                        s + 1);
                break;
            }
    CHECK_MSG(whole[0].state_values > 0 && ranks[0].state_values + ranks[1].state_values == whole[0].state_values,
              "%s: the ranks' state holds %lld + %lld values, the whole state %lld", what,
              (long long)ranks[0].state_values, (long long)ranks[1].state_values, (long long)whole[0].state_values);
    /* reduce-scattered where the sharded update reads its part of the
     * gradients alone; all-reduced whole unsharded, or for the norm that
     * clipping and loss scaling take */
    const bool parts_only = !setup.clip && !setup.f16;
    for (int r = 0; r < 2; r++)
        CHECK_MSG(!whole[r].scattered && ranks[r].scattered == (parts_only ? REPLICA_STEPS : 0),
                  "%s: rank %d's buckets were reduce-scattered in %d updates unsharded and %d sharded, of %d", what,
                  r, whole[r].scattered, ranks[r].scattered, REPLICA_STEPS);
    /* 4 parameters (8 for the CNN), 2 moments each: at most a value a tensor apart */
    const long long apart = llabs((long long)(ranks[0].state_values - ranks[1].state_values));
    CHECK_MSG(apart <= 16, "%s: rank 0 holds %lld values of state, rank 1 %lld: not halves", what,
              (long long)ranks[0].state_values, (long long)ranks[1].state_values);
}

static void test_mlp(ug_device *dev) { check_same_bits(dev, REPLICA_BATCH / 2, (replica_setup){0}, "mlp"); }
static void test_uneven_cnn(ug_device *dev)
{
    check_same_bits(dev, 3, (replica_setup){.cnn = true}, "cnn, split 3");
}
static void test_accumulation_clipping(ug_device *dev)
{
    check_same_bits(dev, 5, (replica_setup){.accumulate = true, .clip = true}, "accumulation and clipping");
}
static void test_f16_overflow(ug_device *dev)
{
    check_same_bits(dev, 3, (replica_setup){.f16 = true, .overflow_step = 7}, "f16 with an overflow");
}

/* A rank of a pair on one device: the first member of each test's rank. */
typedef struct pair_member {
    ug_device *device;
    ug_comm *comm;
} pair_member;

/* Two ranks on dev, each running fn on its own thread; the group freed
 * after. */
static void run_members(ug_device *dev, void *(*fn)(void *), pair_member *a, pair_member *b)
{
    ug_device *devices[2] = {dev, dev};
    ug_comm *comms[2];
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    pair_member *members[2] = {a, b};
    pthread_t threads[2];
    for (int k = 0; k < 2; k++) {
        *members[k] = (pair_member){.device = dev, .comm = comms[k]};
        pthread_create(&threads[k], NULL, fn, members[k]);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(threads[k], NULL);
        ug_comm_free(comms[k]);
    }
}

/* What a sharded optimizer refuses, on rank r of a pair. */
typedef struct refusal_rank {
    pair_member pair;
    ug_status run, checkpoint, reshard, shard;
    char run_message[256], checkpoint_message[256];
} refusal_rank;

enum { WIDE = 256 };

/* A linear layer of width x width with Adam, compiled, two rows bound. */
static ug_status linear_model(ug_device *dev, int64_t width, ug_model **model, ug_graph **graph, ug_optimizer **opt)
{
    ug_value *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    ug_status st = ug_model_create(dev, 1, model);
    if (st == UG_OK) st = ug_graph_create(*model, graph);
    if (st == UG_OK) st = ug_graph_input(*graph, "x", UG_F32, 2, (int64_t[]){2, width}, &x);
    if (st == UG_OK) st = ug_graph_input(*graph, "y", UG_I32, 1, (int64_t[]){2}, &y);
    if (st == UG_OK) st = ug_nn_linear(*graph, "fc", x, width, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(*graph, logits, y, 0.0f, &loss);
    if (st == UG_OK) st = ug_graph_backward(*graph, loss);
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    if (st == UG_OK) st = ug_optimizer_create(*model, &oc, opt);
    if (st == UG_OK) st = ug_graph_set_optimizer(*graph, *opt);
    if (st == UG_OK) st = ug_graph_compile(*graph);
    static float features[2 * WIDE] = {1, 2, 3, 4, 5, 6};
    const int32_t classes[2] = {0, 1};
    ug_tensor *xt = NULL, *yt = NULL;
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){2, width}, features, &xt);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){2}, classes, &yt);
    if (st == UG_OK) st = ug_graph_bind(*graph, x, xt);
    if (st == UG_OK) st = ug_graph_bind(*graph, y, yt);
    ug_tensor_free(xt);
    ug_tensor_free(yt);
    return st;
}

static void *refusal_main(void *arg)
{
    refusal_rank *r = arg;
    ug_model *model = NULL;
    ug_graph *graph = NULL;
    ug_optimizer *opt = NULL;
    r->shard = linear_model(r->pair.device, 3, &model, &graph, &opt);
    if (r->shard == UG_OK)
        r->shard = ug_comm_shard_optimizer(r->pair.comm, opt);
    if (r->shard == UG_OK) {
        r->run = ug_graph_run(graph);
        snprintf(r->run_message, sizeof r->run_message, "%s", ug_last_error());
        ug_checkpoint *ck = NULL;
        r->checkpoint = ug_checkpoint_create(&ck);
        if (r->checkpoint == UG_OK)
            r->checkpoint = ug_checkpoint_add_optimizer(ck, opt);
        if (r->checkpoint == UG_OK)
            r->checkpoint = ug_checkpoint_save(ck, "/nonexistent-dir/never-written.safetensors");
        snprintf(r->checkpoint_message, sizeof r->checkpoint_message, "%s", ug_last_error());
        ug_checkpoint_free(ck);
        /* the same rank of the same size again: nothing */
        r->reshard = ug_comm_shard_optimizer(r->pair.comm, opt);
    }
    ug_graph_free(graph);
    ug_optimizer_free(opt);
    ug_model_free(model);
    return NULL;
}

static void test_refusals(ug_device *dev)
{
    refusal_rank r[2] = {0};
    run_members(dev, refusal_main, &r[0].pair, &r[1].pair);
    for (int k = 0; k < 2; k++) {
        CHECK_STATUS(r[k].shard, UG_OK);
        CHECK_MSG(r[k].run == UG_ERR_STATE && strstr(r[k].run_message, "ug_comm_gather_parameters"),
                  "rank %d: ug_graph_run on a sharded optimizer gave %d: %s", k, (int)r[k].run, r[k].run_message);
        CHECK_MSG(r[k].checkpoint == UG_ERR_UNSUPPORTED && strstr(r[k].checkpoint_message, "sharded"),
                  "rank %d: a checkpoint of a sharded optimizer gave %d: %s", k, (int)r[k].checkpoint,
                  r[k].checkpoint_message);
        CHECK_STATUS(r[k].reshard, UG_OK);
    }

    /* A gather on an optimizer that was never sharded. */
    ug_device *devices[2] = {dev, dev};
    ug_comm *comms[2];
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    ug_model *model = NULL;
    ug_graph *graph = NULL;
    ug_optimizer *opt = NULL;
    REQUIRE_OK(linear_model(dev, 3, &model, &graph, &opt));
    ug_status st = ug_comm_gather_parameters(comms[0], opt);
    CHECK_MSG(st == UG_ERR_STATE && strstr(ug_last_error(), "not sharded"), "a gather without sharding gave %d: %s",
              (int)st, ug_last_error());
    ug_comm_free(comms[0]);
    ug_comm_free(comms[1]);
    ug_graph_free(graph);
    ug_optimizer_free(opt);
    ug_model_free(model);
}

/* The pool's figures: each rank's optimizer of a 256 x 256 layer (Adam:
 * two moments of 65 792 values) holds half its state once sharded. */
typedef struct memory_rank {
    pair_member pair;
    ug_status status;
    int64_t freed;            /* bytes in use before sharding less after */
    uint64_t planned[2];      /* ug_graph_memory's optimizer bytes before and after */
} memory_rank;

static void *memory_main(void *arg)
{
    memory_rank *r = arg;
    ug_device *dev = r->pair.device;
    ug_comm *comm = r->pair.comm;
    ug_model *model = NULL;
    ug_graph *graph = NULL;
    ug_optimizer *opt = NULL;
    ug_memory_stats before = {0}, after = {0};
    ug_status st = linear_model(dev, WIDE, &model, &graph, &opt);
    ug_graph_memory_info plan = {0};
    if (st == UG_OK) st = ug_graph_memory(graph, &plan);
    r->planned[0] = plan.optimizer_bytes;
    /* both ranks' figures read between barriers: the same device's pool may be both's */
    if (st == UG_OK) st = ug_comm_barrier(comm);
    if (st == UG_OK) st = ug_memory_get_stats(dev, &before);
    if (st == UG_OK) st = ug_comm_barrier(comm);
    if (st == UG_OK) st = ug_comm_shard_optimizer(comm, opt);
    if (st == UG_OK) st = ug_comm_barrier(comm);
    if (st == UG_OK) st = ug_memory_get_stats(dev, &after);
    if (st == UG_OK) st = ug_comm_barrier(comm);
    if (st == UG_OK) st = ug_graph_memory(graph, &plan);
    r->planned[1] = plan.optimizer_bytes;
    r->status = st;
    r->freed = (int64_t)before.bytes_in_use - (int64_t)after.bytes_in_use;
    ug_graph_free(graph);
    ug_optimizer_free(opt);
    ug_model_free(model);
    return NULL;
}

static void test_pool_holds_half(ug_device *dev)
{
    memory_rank r[2] = {0};
    run_members(dev, memory_main, &r[0].pair, &r[1].pair);
    /* one pool for both ranks: each reads both halves freed */
    const double state = 2.0 * (WIDE * WIDE + WIDE) * sizeof(float), expect = state;
    for (int k = 0; k < 2; k++) {
        CHECK_STATUS(r[k].status, UG_OK);
        CHECK_MSG(r[k].freed > 0.95 * expect && r[k].freed < 1.05 * expect,
                  "rank %d: sharding freed %lld bytes of the pool; two ranks' halves of %.0f bytes of state are "
                  "%.0f", k, (long long)r[k].freed, state, expect);
        CHECK_MSG(r[k].planned[0] >= state && r[k].planned[1] > 0.45 * state && r[k].planned[1] < 0.55 * state,
                  "rank %d: the graph's plan counts %llu bytes of optimizer state, then %llu sharded (%.0f whole)",
                  k, (unsigned long long)r[k].planned[0], (unsigned long long)r[k].planned[1], state);
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(mlp),
        TH_DEVICE_TEST(uneven_cnn),
        TH_DEVICE_TEST(accumulation_clipping),
        TH_DEVICE_TEST(f16_overflow),
        TH_DEVICE_TEST(refusals),
        TH_DEVICE_TEST(pool_holds_half),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
