/* Data-parallel training in one process (comm.h): two replicas (the CPU and
 * the device under test, on threads of their own) start from different
 * initialisations, take rank 0's parameters (ug_comm_broadcast_model),
 * and train an MLP with Adam on their parts of each global batch, split
 * evenly and unevenly, with the gradients summed over the ranks
 * (ug_comm_reduce_gradients). After 10 steps every replica's parameters
 * equal one device's trained on the whole global batches within 1e-5;
 * replicas on the same kind of device are bitwise equal. A part may be
 * empty; replicas of different models are refused on every rank. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"

static void *run_replica(void *arg)
{
    replica *r = arg;
    replica_run(r);
    ug_comm_free(r->comm); /* a rank that failed leaves: the others return at once */
    return NULL;
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
                             .rows = r ? REPLICA_BATCH - split : split, .other_model = other_model && r == 1};
        pthread_create(&threads[r], NULL, run_replica, &ranks[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(threads[r], NULL);
    for (int r = 0; r < 2; r++)
        replica_free(&ranks[r]);
    ug_device_close(cpu);
}

static void check_against_one(ug_device *dev, int64_t split)
{
    replica_data();
    REQUIRE(replica_reference(dev, &one));
    run_pair(dev, split, false);
    for (int r = 0; r < 2; r++) {
        if (ranks[r].status != UG_OK) {
            th_fail(TH_LOC, "rank %d: %s", r, ranks[r].message);
            continue;
        }
        double worst = replica_distance(&ranks[r], &one);
        CHECK_MSG(worst < 1e-5, "rank %d (split %lld of %d) is %g from one device on the global batch", r,
                  (long long)split, REPLICA_BATCH, worst);
    }
    if (!strcmp(ug_device_name(dev), "cpu"))
        CHECK_MSG(!memcmp(ranks[0].params, ranks[1].params, (size_t)one.param_count * sizeof(float)),
                  "two replicas on the CPU are not bitwise equal");
}

static void test_even_split(ug_device *dev) { check_against_one(dev, REPLICA_BATCH / 2); }
static void test_uneven_split(ug_device *dev) { check_against_one(dev, 3); }
static void test_empty_part(ug_device *dev) { check_against_one(dev, REPLICA_BATCH); } /* rank 1 gets no rows */

static void test_other_model_refused(ug_device *dev)
{
    replica_data();
    run_pair(dev, REPLICA_BATCH / 2, true);
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
