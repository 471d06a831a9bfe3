/* A communicator's engine (in-process now; MPI and NCCL as modules later):
 * collectives on host buffers of floats, which comm.c stages device
 * tensors through. Every entry returns the same status on every rank of a
 * collective, or an error naming what went wrong. */
#ifndef UG_CORE_COMM_INTERNAL_H
#define UG_CORE_COMM_INTERNAL_H

#include <stddef.h>

#include "unigrad/comm.h"
#include "unigrad/stream.h"

typedef struct comm_engine {
    const char *name;
    ug_status (*all_reduce)(ug_comm *c, float *data, size_t n, ug_comm_op op);
    ug_status (*broadcast)(ug_comm *c, float *data, size_t n, int root);
    ug_status (*all_gather)(ug_comm *c, const float *in, size_t n, float *out);
    ug_status (*barrier)(ug_comm *c);
    /* This rank cannot take part in the collective the others are in (its
     * arguments were refused): the group breaks with why, so they return
     * at once rather than at the timeout. */
    void (*fail)(ug_comm *c, const char *why);
    /* This rank leaves: the engine's state of it is freed. */
    void (*leave)(ug_comm *c);
} comm_engine;

typedef struct comm_side comm_side;
typedef struct comm_data_parallel comm_data_parallel;

struct ug_comm {
    const comm_engine *engine;
    void *group;              /* the engine's */
    int rank, size;
    ug_device *device;        /* retained */
    double timeout;           /* seconds */
    float *staging;           /* host copies of tensors */
    size_t staging_floats;
    bool side_allowed;        /* the engine may be called from the communication thread */
    comm_side *side;          /* the communication thread, made on first use (side.c) */
    comm_data_parallel *data_parallel; /* data_parallel.c's state */
};

/* comm.c: tensor <- op over the ranks' tensors, staged through *staging
 * (grown as needed); what ug_comm_all_reduce does, from any thread. */
ug_status ug_comm_reduce_staged(ug_comm *c, ug_tensor *tensor, ug_comm_op op, float **staging,
                                size_t *staging_floats);

/* side.c: the communication thread. */
typedef struct comm_timing {
    double start, end;        /* seconds of ug_seconds_now */
} comm_timing;
/* Queues an all-reduce (sum) of tensor, to start once ready completes;
 * timing, if not NULL, receives its start and end. */
ug_status ug_comm_side_submit(ug_comm *c, ug_tensor *tensor, ug_event *ready, comm_timing *timing);
/* Waits until the queued collectives are done: the first failure among
 * them since the last drain, or UG_OK. */
ug_status ug_comm_side_drain(ug_comm *c);
/* Finishes the queue and ends the thread. */
void ug_comm_side_stop(ug_comm *c);
/* data_parallel.c: frees its state. */
void ug_comm_data_parallel_free(ug_comm *c);

extern const comm_engine ug_comm_local_engine;

/* data_parallel.c, for the trainer: every rank takes rank 0's parameters
 * (through the model, so its half copies follow), with no check of the
 * models; and whether the ranks' devices are of different backends, whose
 * kernels may round alike-looking updates differently. */
ug_status ug_comm_take_rank0_params(ug_comm *c, ug_model *model, const char *op);
bool ug_comm_mixed_backends(ug_comm *c);

#endif
