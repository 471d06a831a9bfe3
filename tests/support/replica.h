/* A data-parallel replica for the tests (test_data_parallel.c in one
 * process, test_mpi.c across processes): an MLP 16-5-3, or a small CNN,
 * with Adam trained for 20 steps on its rows [first, first + rows) of
 * fixed global batches of 8 (the last one of 5), its gradients summed
 * over its communicator when it has one. Variants: gradient accumulation
 * (each part in two micro-batches), clipping, f16 with loss scaling and
 * an overflow injected into one row, the buckets reduced after backward
 * rather than overlapped with it, and the optimizer's state sharded over
 * the ranks (its parts gathered after each update). */
#ifndef UG_TESTS_REPLICA_H
#define UG_TESTS_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "harness.h"

enum { REPLICA_BATCH = 8, REPLICA_LAST_BATCH = 5, REPLICA_STEPS = 20, REPLICA_MAX_PARAMS = 4096 };

typedef struct replica_setup {
    bool cnn;
    bool f16;                 /* f16 compute with loss scaling */
    bool accumulate;          /* each part in two micro-batches */
    bool clip;                /* global-norm clipping at 0.5 */
    int overflow_step;        /* 1 + the step whose row REPLICA_BATCH / 2 overflows f16 (0: none) */
    bool after_backward;      /* ug_comm_reduce_gradients, not ug_comm_run_backward */
    bool no_overlap;          /* ug_comm_run_backward with ug_comm_set_overlap(false) */
    double slow_seconds;      /* rank 1's backward takes this much more (in-process pairs: a test hook) */
    bool shard;               /* the optimizer's state sharded over the ranks (ZeRO stage 1) */
} replica_setup;

typedef struct replica {
    ug_device *device;
    ug_comm *comm;            /* NULL: one device on the whole batches */
    int64_t first, rows;      /* its part of each global batch (cut to the batch's rows) */
    bool other_model;         /* builds a wider hidden layer (the refusal case) */
    bool other_optimizer;     /* SGD, not Adam (the refusal case) */
    int killed_at_step;       /* 1 + the step whose start kills this process (SIGKILL; 0: never) */
    /* Read after each ug_comm_run_backward (when set): the largest after
     * the first step goes to most_compute. */
    double (*compute_seconds)(const ug_comm *comm);
    int64_t reference_split;  /* one device: the rows where rank 1's part starts, as a micro-batch (0: none) */
    replica_setup setup;
    ug_model *model;
    ug_optimizer *opt;
    ug_graph *graph;
    ug_value *x, *y;
    ug_status status;
    char message[384];
    float params[REPLICA_MAX_PARAMS];
    int64_t param_count;
    uint64_t step_hash[REPLICA_STEPS]; /* of the parameters after each step */
    int64_t skipped_steps;    /* by the loss scaler */
    double most_compute;
    int64_t state_values;     /* in the optimizer's state tensors, after training */
    int scattered;            /* updates whose gradient buckets were reduce-scattered */
} replica;

/* The global batches (the same in every process). */
void replica_data(void);
/* Builds from a seed of its rank (different starts), takes rank 0's
 * parameters, trains; status, message and params are set. */
void replica_run(replica *r);
/* One device on the whole global batches, from rank 0's start; with f16,
 * accumulating the ranks' parts (split at split) as micro-batches, since
 * f16 rounds a part's gradient otherwise than the whole batch's. */
bool replica_reference(ug_device *device, const replica_setup *setup, int64_t split, replica *one);
/* The largest difference of the parameters relative to the largest of
 * b's (the infinity norm's relative error). */
double replica_distance(const replica *a, const replica *b);
void replica_free(replica *r);

#endif
