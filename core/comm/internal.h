/* A communicator's engine (in-process now; MPI and NCCL as modules later):
 * collectives on host buffers of floats, which comm.c stages device
 * tensors through. Every entry returns the same status on every rank of a
 * collective, or an error naming what went wrong. */
#ifndef UG_CORE_COMM_INTERNAL_H
#define UG_CORE_COMM_INTERNAL_H

#include <stddef.h>

#include "unigrad/comm.h"
#include "unigrad/stream.h"

struct ug_storage; /* core/runtime/internal.h */

typedef struct comm_engine {
    const char *name;
    ug_status (*all_reduce)(ug_comm *c, float *data, size_t n, ug_comm_op op);
    ug_status (*broadcast)(ug_comm *c, float *data, size_t n, int root);
    ug_status (*all_gather)(ug_comm *c, const float *in, size_t n, float *out);
    /* out (n floats) <- the sum over the ranks of their in's block of this
     * rank (in: size blocks of n floats, in rank order). */
    ug_status (*reduce_scatter)(ug_comm *c, const float *in, size_t n, float *out);
    ug_status (*barrier)(ug_comm *c);
    /* This rank cannot take part in the collective the others are in (its
     * arguments were refused): the group breaks with why, so they return
     * at once rather than at the timeout. */
    void (*fail)(ug_comm *c, const char *why);
    /* (ug_comm_free calls fail with why UG_COMM_LEAVING first.) */
    /* This rank leaves: the engine's state of it is freed. */
    void (*leave)(ug_comm *c);
    /* Point-to-point (NULL: the engine has none). send queues a copy of
     * bytes for rank dest and returns without waiting for the receiver;
     * recv waits, at most the timeout, for the oldest message from source
     * not yet received (messages between two ranks keep their order),
     * its size in *bytes; one larger than capacity stays to be received:
     * UG_ERR_SHAPE, its size in *bytes. */
    ug_status (*send)(ug_comm *c, const void *data, size_t bytes, int dest);
    ug_status (*recv)(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes);
    /* Optional (ranks sharing an address space): a message of bytes and a
     * tensor on the sender's device, which the message owns from the call
     * on (freed by it on failure); recv_tensor receives either kind
     * (*tensor NULL for bytes alone), the tensor then the caller's. */
    ug_status (*send_tensor)(ug_comm *c, const void *data, size_t bytes, ug_tensor *tensor, int dest);
    ug_status (*recv_tensor)(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes,
                             ug_tensor **tensor);
    /* Optional, a collective (ug_comm_split): made, this rank's new comm
     * (its engine, device and timeout set), takes the group of the ranks
     * of c with its color, ranked by key, then by rank in c: the engine
     * sets its group, rank and size. */
    ug_status (*split)(ug_comm *c, int color, int key, ug_comm *made);
    /* Optional: how its all-reduces travel, in words (ug_comm_transport);
     * NULL: the engine's name says it. */
    const char *(*transport)(const ug_comm *c);
    /* Optional: collectives on this rank's device tensors in place,
     * queued on the calling thread's current stream and waited for (NCCL,
     * RCCL); NULL: comm.c stages the tensors through host buffers for the
     * host collectives above, which every engine has. */
    ug_status (*device_all_reduce)(ug_comm *c, ug_tensor *t, ug_comm_op op);
    ug_status (*device_broadcast)(ug_comm *c, ug_tensor *t, int root);
    ug_status (*device_all_gather)(ug_comm *c, const ug_tensor *in, ug_tensor *out);
    ug_status (*device_reduce_scatter)(ug_comm *c, const ug_tensor *in, ug_tensor *out);
    /* Optional, a collective: a storage of bytes of host memory for a CPU
     * replica's gradient buckets, which this engine's all-reduces reduce
     * where it lies, with no copies (MPI: shared memory among a machine's
     * ranks); *out NULL where it has none. */
    ug_status (*bucket_memory)(ug_comm *c, size_t bytes, struct ug_storage **out);
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
    bool overlap_off;         /* ug_comm_set_overlap(false): buckets reduced after backward */
    comm_side *side;          /* the communication thread, made on first use (side.c) */
    comm_data_parallel *data_parallel; /* data_parallel.c's state */
    /* Bytes of the messages received (ug_comm_recv): device to device
     * (ranks of one process on one backend's devices), or through host
     * memory. */
    uint64_t received_direct, received_staged;
    double debug_seconds_per_row; /* test hook: > 0 replaces the timed compute (ug_comm_debug_seconds_per_row) */
    double debug_backward_delay;  /* test hook: seconds added to each timed backward (ug_comm_debug_slow) */
};

/* comm.c: tensor <- op over the ranks' tensors, in place on the device
 * or staged through *staging (grown as needed); what ug_comm_all_reduce
 * does, from any thread. */
ug_status ug_comm_reduce_staged(ug_comm *c, ug_tensor *tensor, ug_comm_op op, float **staging,
                                size_t *staging_floats);

/* comm.c: t's segments (count of them, at offsets, of lengths elements)
 * summed over the ranks where this rank's part of each lies (rank r's
 * part of n elements: [n r / s, n (r + 1) / s), the sharded optimizer's),
 * by a reduce-scatter; the rest of t is left as it was. Staged through
 * *staging (grown as needed), as ug_comm_reduce_staged, or on the device
 * where the engine reduce-scatters device memory. */
ug_status ug_comm_reduce_parts_staged(ug_comm *c, ug_tensor *t, int count, const int64_t *offsets,
                                      const int64_t *lengths, float **staging, size_t *staging_floats);

/* comm.c: dst's elements [to, to + count) <- src's [from, from + count),
 * both flattened, on their device. */
ug_status ug_comm_copy_range(ug_tensor *dst, int64_t to, const ug_tensor *src, int64_t from, int64_t count);
/* comm.c: frees a staging buffer that the functions above grew (page-
 * locked where the device's backend offers it). */
void ug_comm_free_staging(ug_comm *c, float *buffer);

/* comm.c: *out holds floats floats of host memory, the rank's staging
 * buffer (kept and grown between calls), for collectives on its thread. */
ug_status ug_comm_host_buffer(ug_comm *c, size_t floats, const char *op, float **out);

/* side.c: the communication thread. */
typedef struct comm_timing {
    double start, end;        /* seconds of ug_seconds_now */
} comm_timing;
/* Queues the reduction of gradient bucket b (ug_comm_reduce_bucket), to
 * start once ready completes; timing, if not NULL, receives its start and
 * end. */
ug_status ug_comm_side_submit(ug_comm *c, int bucket, ug_event *ready, comm_timing *timing);
/* Waits until the queued collectives are done: the first failure among
 * them since the last drain, or UG_OK. */
ug_status ug_comm_side_drain(ug_comm *c);
/* Finishes the queue and ends the thread. */
void ug_comm_side_stop(ug_comm *c);
/* data_parallel.c: gradient bucket b of the graph being reduced, summed
 * over the ranks (all-reduced; reduce-scattered where the optimizer,
 * sharded over them, reads only this rank's part of each gradient),
 * staged through *staging, from any thread. */
ug_status ug_comm_reduce_bucket(ug_comm *c, int b, float **staging, size_t *staging_floats);
/* data_parallel.c: frees its state. */
void ug_comm_data_parallel_free(ug_comm *c);

extern const comm_engine ug_comm_local_engine;
/* local.c: a new in-process group of size ranks (NULL: out of memory). */
void *ug_comm_local_group(int size);

/* The why of ug_comm_free's call to fail: an engine may tell it apart
 * (the others are then in no collective with this rank to be told of). */
#define UG_COMM_LEAVING "it has left the group (ug_comm_free)"

/* data_parallel.c, for the trainer: every rank takes rank 0's parameters
 * (through the model, so its half copies follow), with no check of the
 * models; whether any rank's text differs from the others' (a collective:
 * true when it cannot be told), e.g. the devices' backends, whose kernels
 * may round alike-looking updates differently; and how long the last
 * ug_comm_run_backward's forward and backward took this rank's device,
 * waiting for no other rank (0 before one). */
ug_status ug_comm_take_rank0_params(ug_comm *c, ug_model *model, const char *op);
bool ug_comm_ranks_differ(ug_comm *c, const char *text);
/* A collective: whether every rank has rank 0's texts[i] for each of the
 * count named settings (each text under UG_COMM_FIELD_TEXT bytes, longer
 * ones compared by their start); the same verdict on every rank, naming
 * the first setting that differs with both values. */
enum { UG_COMM_FIELD_TEXT = 48 };
ug_status ug_comm_check_same(ug_comm *c, int count, const char *const *names, const char *const *texts,
                             const char *op);
double ug_comm_compute_seconds(const ug_comm *c);
/* A collective: every rank's parameters (count, names, shapes) against
 * rank 0's; the same verdict on every rank, naming the first that differs. */
ug_status ug_comm_check_models(ug_comm *c, ug_model *model, const char *op);
/* shard.c, for the trainer's checkpoints: a collective that gathers every
 * rank's part of a sharded optimizer's state into *whole, on rank 0, an
 * unsharded copy of it (NULL on the others). */
ug_status ug_comm_consolidate_optimizer(ug_comm *c, ug_optimizer *opt, ug_optimizer **whole);
/* p2p.c: ug_comm_recv into a tensor with at least the rows sent (the
 * other sizes and the dtype the same): its first rows take them, *rows
 * says how many. */
ug_status ug_comm_recv_rows(ug_comm *c, ug_tensor *t, int source, int64_t *rows);
/* p2p.c: the oldest message from source whole, into the rank's host
 * buffer (*buffer, grown past expected bytes when the message is larger),
 * its size in *bytes. */
ug_status ug_comm_recv_message(ug_comm *c, int source, size_t expected, const char *op, float **buffer,
                               size_t *bytes);
/* Test hook: this rank's forward and backward take seconds per row, as if
 * timed, so that a test knows the shares the trainer must choose. */
void ug_comm_debug_seconds_per_row(ug_comm *c, double seconds);
/* Test hook: this rank's ug_comm_run_backward sleeps seconds inside its
 * timed compute, as a slow device would take them. */
void ug_comm_debug_slow(ug_comm *c, double seconds);

#endif
