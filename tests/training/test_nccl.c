/* Data-parallel training over NCCL or RCCL (ug_comm_nccl_create; on the
 * emulated CUDA device through a stand-in libnccl.so.2): collectives
 * against sums worked out in double, the replicas' training equal to one
 * device's, and sharded (the gradients reduce-scattered and the parameters
 * gathered on the devices) the unsharded run's bits; a split refused. On
 * devices that are not CUDA or HIP GPUs it is refused on every rank, the
 * bootstrap communicator left whole. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"

static replica reference;

enum { NCCL_N = 257 };

typedef struct nccl_rank {
    ug_comm *boot, *comm;
    ug_status status;         /* of ug_comm_nccl_create */
    char message[384];
    bool boot_whole;          /* after a refusal, the bootstrap still reduces */
    char engine[16];          /* ug_comm_engine's name for the new communicator */
    double worst_collective;  /* the largest error of the collectives against double sums */
    replica rep, sharded;     /* the optimizer whole, and sharded (its parts gathered on the devices) */
    bool split_refused;       /* ug_comm_split, refused with its reason */
} nccl_rank;

static float nccl_value(int r, int i) { return (float)((r + 1) * 0.25 + i * 0.013 - (i % 5) * 0.4); }

/* All-reduce (sum, average, max), broadcast from the last rank,
 * all-gather and reduce-scatter, against the same worked out in double. */
static double nccl_collectives(ug_comm *c, int ranks)
{
    const int me = ug_comm_rank(c);
    float host[NCCL_N * 8], got[NCCL_N * 8];
    for (int i = 0; i < NCCL_N; i++)
        host[i] = nccl_value(me, i);
    int64_t n = NCCL_N, all = NCCL_N * (int64_t)ranks;
    ug_tensor *t = NULL, *gathered = NULL, *scattered = NULL;
    double worst = INFINITY;
    if (ug_tensor_create(ug_comm_device(c), UG_F32, 1, &all, &gathered) != UG_OK)
        return worst;
    worst = 0.0;
    for (int op = 0; op < 4 && worst == 0.0; op++) {
        if (ug_tensor_from_host(ug_comm_device(c), UG_F32, 1, &n, host, &t) != UG_OK ||
            (op < 3 ? ug_comm_all_reduce(c, t, (ug_comm_op)op) : ug_comm_broadcast(c, t, ranks - 1)) != UG_OK ||
            ug_tensor_download(t, got, sizeof(float) * NCCL_N) != UG_OK)
            worst = INFINITY;
        for (int i = 0; i < NCCL_N && worst == 0.0; i++) {
            double want = op == 3 ? nccl_value(ranks - 1, i) : op == 2 ? -INFINITY : 0.0;
            for (int r = 0; op < 2 && r < ranks; r++)
                want += nccl_value(r, i);
            for (int r = 0; op == 2 && r < ranks; r++)
                want = fmax(want, nccl_value(r, i));
            want = op == 1 ? want / ranks : want;
            worst = fmax(worst, fabs(got[i] - want) / fmax(1.0, fabs(want)) > 1e-6 ? fabs(got[i] - want) : 0.0);
        }
        ug_tensor_free(t);
        t = NULL;
    }
    if (ug_tensor_from_host(ug_comm_device(c), UG_F32, 1, &n, host, &t) != UG_OK ||
        ug_comm_all_gather(c, t, gathered) != UG_OK ||
        ug_tensor_download(gathered, got, sizeof(float) * (size_t)all) != UG_OK)
        worst = INFINITY;
    for (int r = 0; r < ranks && worst == 0.0; r++)
        for (int i = 0; i < NCCL_N; i++)
            if (got[r * NCCL_N + i] != nccl_value(r, i))
                worst = fabs(got[r * NCCL_N + i] - nccl_value(r, i));
    /* reduce-scatter: this rank's block of every rank's ranks x NCCL_N */
    for (int i = 0; i < NCCL_N * ranks; i++)
        host[i] = nccl_value(me, i);
    ug_tensor_free(t);
    t = NULL;
    if (ug_tensor_from_host(ug_comm_device(c), UG_F32, 1, &all, host, &t) != UG_OK ||
        ug_tensor_from_host(ug_comm_device(c), UG_F32, 1, &n, host, &scattered) != UG_OK ||
        ug_comm_reduce_scatter(c, t, scattered) != UG_OK ||
        ug_tensor_download(scattered, got, sizeof(float) * NCCL_N) != UG_OK)
        worst = INFINITY;
    for (int i = 0; i < NCCL_N && worst == 0.0; i++) {
        double want = 0.0;
        for (int r = 0; r < ranks; r++)
            want += nccl_value(r, me * NCCL_N + i);
        worst = fabs(got[i] - want) / fmax(1.0, fabs(want)) > 1e-6 ? fabs(got[i] - want) : 0.0;
    }
    ug_tensor_free(t);
    ug_tensor_free(gathered);
    ug_tensor_free(scattered);
    return worst;
}

static void *nccl_main(void *arg)
{
    nccl_rank *r = arg;
    r->status = ug_comm_nccl_create(r->boot, &r->comm);
    snprintf(r->message, sizeof r->message, "%s", r->status == UG_OK ? "" : ug_last_error());
    if (r->status != UG_OK) {
        float one = 1.0f; /* refused: the bootstrap still works */
        ug_tensor *t = NULL;
        int64_t n = 1;
        r->boot_whole = ug_tensor_from_host(ug_comm_device(r->boot), UG_F32, 1, &n, &one, &t) == UG_OK &&
                        ug_comm_all_reduce(r->boot, t, UG_COMM_SUM) == UG_OK;
        ug_tensor_free(t);
        ug_comm_free(r->boot);
        return NULL;
    }
    snprintf(r->engine, sizeof r->engine, "%s", ug_comm_engine(r->comm));
    ug_comm *part = NULL; /* split the bootstrap instead, and make one over each part */
    r->split_refused = ug_comm_split(r->comm, 0, 0, NULL, &part) == UG_ERR_UNSUPPORTED &&
                       strstr(ug_last_error(), "split its bootstrap") && !part;
    r->worst_collective = nccl_collectives(r->comm, ug_comm_size(r->comm));
    r->rep.comm = r->comm;
    replica_run(&r->rep);
    r->sharded = (replica){.device = r->rep.device, .comm = r->comm, .first = r->rep.first, .rows = r->rep.rows,
                           .setup = {.shard = true}};
    replica_run(&r->sharded);
    ug_comm_free(r->comm); /* and its bootstrap */
    return NULL;
}

/* Two ranks on the device (one on a real GPU: NCCL takes each GPU once). */
static void test_nccl(ug_device *dev)
{
    const char *backend = ug_device_name(dev);
    const bool gpu = !strncmp(backend, "cuda", 4) || !strncmp(backend, "hip", 3);
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    const int count = !gpu || strstr(info.name, "Emulated") ? 2 : 1;
    const int64_t split = count == 2 ? 3 : REPLICA_BATCH;
    replica_data();
    if (gpu)
        REQUIRE(replica_reference(dev, &(replica_setup){0}, split, &reference));
    ug_device *devices[2] = {dev, dev};
    ug_comm *boots[2];
    REQUIRE_OK(ug_comm_local_create(count, devices, boots));
    static nccl_rank ranks_[2];
    pthread_t threads[2];
    for (int r = 0; r < count; r++) {
        memset(&ranks_[r], 0, sizeof ranks_[r]);
        ranks_[r].boot = boots[r];
        ranks_[r].rep = (replica){.device = dev, .first = r ? split : 0, .rows = r ? REPLICA_BATCH - split : split};
        pthread_create(&threads[r], NULL, nccl_main, &ranks_[r]);
    }
    for (int r = 0; r < count; r++)
        pthread_join(threads[r], NULL);
    for (int r = 0; r < count; r++) {
        nccl_rank *k = &ranks_[r];
        if (!gpu) {
            CHECK_MSG(k->status == UG_ERR_UNSUPPORTED && strstr(k->message, "CUDA and HIP") && k->boot_whole,
                      "rank %d on %s: %d (%s), the bootstrap %s", r, backend, k->status, k->message,
                      k->boot_whole ? "whole" : "broken");
            continue;
        }
        if (k->status != UG_OK) {
            th_fail(TH_LOC, "rank %d: %s", r, k->message);
            continue;
        }
        CHECK_MSG(!strcmp(k->engine, !strncmp(backend, "hip", 3) ? "RCCL" : "NCCL"), "rank %d's engine is %s", r,
                  k->engine);
        CHECK_MSG(k->worst_collective == 0.0, "rank %d: the collectives are %g from the sums in double", r,
                  k->worst_collective);
        CHECK_MSG(k->split_refused, "rank %d: splitting an NCCL communicator was not refused so", r);
        CHECK_MSG(k->rep.status == UG_OK, "rank %d: training: %s", r, k->rep.message);
        double worst = replica_distance(&k->rep, &reference);
        CHECK_MSG(worst < 1e-5, "rank %d is %g from one device on the global batch", r, worst);
        if (r == 1)
            for (int s = 0; s < REPLICA_STEPS; s++)
                if (ranks_[0].rep.step_hash[s] != k->rep.step_hash[s]) {
                    th_fail(TH_LOC, "the two replicas differ after step %d", s + 1);
                    break;
                }
        CHECK_MSG(k->sharded.status == UG_OK, "rank %d: training sharded: %s", r, k->sharded.message);
        CHECK_MSG(!k->rep.scattered && k->sharded.scattered == REPLICA_STEPS, "rank %d: the gradients were "
                  "reduce-scattered in %d updates of %d sharded (%d unsharded)", r, k->sharded.scattered,
                  REPLICA_STEPS, k->rep.scattered);
        for (int s = 0; k->sharded.status == UG_OK && s < REPLICA_STEPS; s++)
            if (k->sharded.step_hash[s] != k->rep.step_hash[s]) {
                th_fail(TH_LOC, "rank %d: sharded, its parameters after step %d differ from the unsharded run's", r,
                        s + 1);
                break;
            }
        replica_free(&k->rep);
        replica_free(&k->sharded);
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(nccl),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
