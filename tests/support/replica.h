/* A data-parallel replica for the tests (test_data_parallel.c in one
 * process, test_mpi.c across processes): an MLP 6-5-3 with Adam trained
 * on its rows [first, first + rows) of 10 fixed global batches of 8, its
 * gradients summed over its communicator when it has one. */
#ifndef UG_TESTS_REPLICA_H
#define UG_TESTS_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "harness.h"

enum { REPLICA_BATCH = 8, REPLICA_MAX_PARAMS = 4096 };

typedef struct replica {
    ug_device *device;
    ug_comm *comm;            /* NULL: one device on the whole batches */
    int64_t first, rows;      /* its part of each global batch */
    bool other_model;         /* builds a wider hidden layer (the refusal case) */
    ug_model *model;
    ug_optimizer *opt;
    ug_graph *graph;
    ug_value *x, *y;
    ug_status status;
    char message[384];
    float params[REPLICA_MAX_PARAMS];
    int64_t param_count;
} replica;

/* The global batches (the same in every process). */
void replica_data(void);
/* Builds from a seed of its rank (different starts), takes rank 0's
 * parameters, trains; status, message and params are set. */
void replica_run(replica *r);
/* One device on the whole global batches, from rank 0's start. */
bool replica_reference(ug_device *device, replica *one);
/* The largest relative difference of the parameters. */
double replica_distance(const replica *a, const replica *b);
void replica_free(replica *r);

#endif
