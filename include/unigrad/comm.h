/* Communication between replicas: collectives on device tensors, for
 * training on several devices, processes and machines.
 *
 * A communicator is one rank's handle on a group of ranks; every rank of
 * the group calls the same collectives in the same order, each on its own
 * tensor (on its own device), as with MPI and NCCL. The in-process group
 * makes every device a program opened a rank, any mix of backends, each
 * driven by a thread of its own:
 *
 *     ug_device *devices[2];            // e.g. "cpu" and "opencl:0"
 *     ug_comm *ranks[2];
 *     ug_comm_local_create(2, devices, ranks);
 *     // on rank r's thread:
 *     ug_comm_all_reduce(ranks[r], grad, UG_COMM_AVERAGE);
 *
 * A rank that never joins a collective, or one that leaves the group, is
 * reported to the others as an error within the timeout (ug_comm_set_timeout,
 * default 300 s), never a silent hang; the group is then broken and every
 * later collective fails at once with the same message. Collectives take
 * f32 tensors, contiguous, of the same element count on every rank; a
 * mismatch is refused on every rank. */
#ifndef UNIGRAD_COMM_H
#define UNIGRAD_COMM_H

#include "unigrad/device.h"
#include "unigrad/export.h"
#include "unigrad/status.h"
#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_comm ug_comm;

typedef enum ug_comm_op {
    UG_COMM_SUM = 0,
    UG_COMM_AVERAGE,   /* the sum over the group's size */
    UG_COMM_MAX
} ug_comm_op;

/* count ranks in this process, rank i on devices[i] (devices may repeat):
 * ranks[0..count-1] receive the handles, each freed with ug_comm_free. */
UG_API ug_status ug_comm_local_create(int count, ug_device *const *devices, ug_comm **ranks);
/* This process's rank of the processes mpirun started (MPI_COMM_WORLD),
 * on device: the MPI engine, in libunigrad-mpi.so, loaded only by this
 * call (UG_ERR_UNSUPPORTED, saying why, when unigrad was built without
 * MPI). Initialises MPI unless the program has, and finalises it at exit
 * then. A collective: refused on every rank when any rank's call is
 * refused, naming it and why. A rank that never joins a collective makes
 * the others fail after their timeout; a rank whose collective failed is
 * broken from then on. Each collective first compares what the ranks
 * asked (one small all-reduce): a count, op, root or collective that
 * differs is refused on every rank, which then go on; a rank whose own
 * call was refused (a dtype, a device) breaks the others' collective
 * once it calls the communicator again or frees it. */
UG_API ug_status ug_comm_mpi_create(ug_device *device, ug_comm **out);
/* This rank's NCCL (on "cuda" devices) or RCCL ("hip") communicator over
 * the ranks of bootstrap (MPI or in-process): collectives then run on the
 * devices' memory in place, with no staging through the host. The library
 * (libnccl.so.2, librccl.so.1, 2.10 or later) is loaded at run time. A
 * collective: every rank of bootstrap calls it, each on its own thread,
 * and rank 0's unique id reaches the others through bootstrap. On success
 * the new communicator owns bootstrap, which carries its host-side work
 * (checks, agreements) and is freed with it; when any rank cannot use the
 * library (another kind of device, the library missing or too old) every
 * rank returns UG_ERR_UNSUPPORTED, saying why, and bootstrap stays the
 * caller's, whole. A collective that does not complete within the timeout
 * (a rank died) aborts the NCCL communicator and is an error. */
UG_API ug_status ug_comm_nccl_create(ug_comm *bootstrap, ug_comm **out);
/* A collective: this rank's handle on a new group of comm's ranks, those
 * that give the same color (0 to 2^24 - 1), ranked by key, then by their
 * rank in comm (MPI_Comm_split), on device (NULL: comm's). A grid splits
 * one comm twice, e.g. pipelines side by side (pipeline.h): color =
 * replica for each pipeline's stages, color = stage for each stage's
 * replicas. The new comm is its own (freed with ug_comm_free, before or
 * after comm) and may be used from another thread than comm, at the same
 * time (under MPI, the module's calls take turns: MPI_THREAD_SERIALIZED,
 * which unigrad asks for, suffices; a program that initialised MPI with
 * less may use one thread only).
 * In-process and MPI engines; NCCL and RCCL: split the bootstrap, and
 * make a communicator over each part. */
UG_API ug_status ug_comm_split(ug_comm *comm, int color, int key, ug_device *device, ug_comm **out);
/* Frees this rank's handle; the others' collectives then fail (the rank
 * has left). NULL is ignored. */
UG_API void ug_comm_free(ug_comm *comm);

UG_API int ug_comm_rank(const ug_comm *comm);
UG_API int ug_comm_size(const ug_comm *comm);
UG_API ug_device *ug_comm_device(const ug_comm *comm);
/* "in-process", "MPI", "NCCL" or "RCCL". */
UG_API const char *ug_comm_engine(const ug_comm *comm);
/* How the engine's all-reduces travel, in words: under MPI, "shared memory
 * among the 4 ranks of the machine" (ranks of one machine reduce through
 * an MPI-3 shared window; UG_MPI_SHARED_RANKS=N makes groups of at most N
 * consecutive ones, 1 leaves every all-reduce to MPI), "shared memory in 2
 * groups of 4 ranks, MPI between the groups", or "MPI" with the reason
 * when the window could not be used; otherwise the engine's name. */
UG_API const char *ug_comm_transport(const ug_comm *comm);
/* Seconds this rank waits for the others in a collective (> 0). */
UG_API ug_status ug_comm_set_timeout(ug_comm *comm, double seconds);
/* Whether ug_comm_run_backward reduces each gradient bucket while the rest
 * of backward runs (the default) or all of them after it, with the same
 * bits: to measure what the overlap hides, or to keep a side stream free. */
UG_API ug_status ug_comm_set_overlap(ug_comm *comm, bool overlap);

/* tensor <- op over the ranks' tensors, in place. Every rank receives the
 * same bits: the ranks' values are combined in rank order. */
UG_API ug_status ug_comm_all_reduce(ug_comm *comm, ug_tensor *tensor, ug_comm_op op);
/* tensor <- root's tensor. */
UG_API ug_status ug_comm_broadcast(ug_comm *comm, ug_tensor *tensor, int root);
/* out (count x size(in) elements) <- every rank's in, in rank order. */
UG_API ug_status ug_comm_all_gather(ug_comm *comm, const ug_tensor *in, ug_tensor *out);
/* out <- the sum over the ranks of their in's rank-th block (in: count x
 * size(out) elements, a block of size(out) per rank in rank order), as
 * NCCL's ReduceScatter and MPI_Reduce_scatter_block; in-process, summed
 * in rank order. */
UG_API ug_status ug_comm_reduce_scatter(ug_comm *comm, const ug_tensor *in, ug_tensor *out);
/* Returns when every rank has called it. */
UG_API ug_status ug_comm_barrier(ug_comm *comm);

/* Point-to-point: tensor (any dtype, on this rank's device) to rank
 * dest. It returns once the data is copied out, not waiting for dest to
 * receive it, so two ranks may send to each other at once. */
UG_API ug_status ug_comm_send(ug_comm *comm, const ug_tensor *tensor, int dest);
/* Waits (at most the timeout) for the oldest tensor rank source sent this
 * rank and not yet received, into tensor: the same dtype and shape, or it
 * is refused, naming both. Messages between two ranks keep their order. */
UG_API ug_status ug_comm_recv(ug_comm *comm, ug_tensor *tensor, int source);

/* ---- data-parallel training (each rank a replica of one model) ---- */

typedef struct ug_graph ug_graph;
typedef struct ug_model ug_model;

/* Every rank's model takes rank 0's parameters, after a check that every
 * rank has the same parameters (count, names, shapes), refused on every
 * rank otherwise, naming the first that differs. Call it once, before
 * training. */
UG_API ug_status ug_comm_broadcast_model(ug_comm *comm, ug_model *model);
/* Between ug_graph_run_backward on each rank's part of the global batch
 * and ug_graph_run_update: sums every rank's accumulated gradients and
 * their rows, so each rank's update sees the gradient of the whole global
 * batch, as one device on it would, and the replicas stay alike (with the
 * loss scaler, an overflow on any rank skips the step on all). A rank
 * whose part was empty (no ug_graph_run_backward) takes part with zeros.
 * It weights the gradients by the rows in a pass over them, which
 * ug_comm_run_backward needs not (so the two may differ in the last bit).
 * Parameters the graph does not train but updates (batch norm's running
 * statistics) take rank 0's values, as DistributedDataParallel's buffers. */
UG_API ug_status ug_comm_reduce_gradients(ug_comm *comm, ug_graph *graph);
/* The last micro-batch before an update, in place of ug_graph_run_backward
 * then ug_comm_reduce_gradients, with the same result: the ranks first sum
 * their rows, so that backward weights each rank's gradients by its share
 * of them; the gradients are accumulated in buckets in the order backward
 * finishes them, and each bucket's all-reduce starts on this rank's
 * communication thread as soon as its last gradient is written, while the
 * rest of backward runs. (After backward instead with
 * ug_comm_set_overlap(false), or when MPI was initialised by the program
 * without MPI_THREAD_SERIALIZED.) */
UG_API ug_status ug_comm_run_backward(ug_comm *comm, ug_graph *graph);
/* The sizes of graph's gradient buckets: the first (small, so that the
 * first all-reduce starts early) and the others; 0 keeps the defaults,
 * 1 MiB and 25 MiB, as DistributedDataParallel's. A gradient larger than
 * a bucket is a bucket of its own. Between updates only. */
UG_API ug_status ug_comm_set_bucket_bytes(ug_graph *graph, size_t first_bytes, size_t bytes);

/* ---- optimizer state sharded over the ranks (ZeRO stage 1) ---- */

typedef struct ug_optimizer ug_optimizer;

/* Each rank keeps the optimizer's state of its part of every parameter
 * only (rank r of s: elements [n r / s, n (r + 1) / s) of a parameter of
 * n), so Adam's two moments take a 1/s share of the memory on each rank.
 * The gradients are then reduce-scattered (ug_comm_run_backward and
 * ug_comm_reduce_gradients sum each rank's part of them on that rank),
 * ug_graph_run_update updates that part of each parameter, and
 * ug_comm_gather_parameters after it gives every rank the whole updated
 * parameters: the same bits as the unsharded update on devices of one
 * kind. (With gradient clipping or loss scaling, which read the norm of
 * every gradient, they are all-reduced whole.) A collective, after
 * ug_comm_broadcast_model, before or between updates (the state kept is
 * the rank's part of what it was); refused on every rank when the ranks'
 * models differ. A sharded optimizer steps only with the comm's training
 * calls (ug_graph_run, which would not gather, refuses it), and a
 * checkpoint, which holds whole state, refuses it: load the whole state
 * before sharding (each rank then keeps its part of it); the trainer
 * (ug_trainer_config.shard_optimizer) gathers the parts on rank 0 to save. */
UG_API ug_status ug_comm_shard_optimizer(ug_comm *comm, ug_optimizer *optimizer);
/* After ug_graph_run_update with a sharded optimizer: every rank's part of
 * every parameter to every rank (an all-gather; half copies follow). */
UG_API ug_status ug_comm_gather_parameters(ug_comm *comm, ug_optimizer *optimizer);

/* A bucket of the last update this rank reduced (ug_comm_run_backward or
 * ug_comm_reduce_gradients), in the order backward finished them. */
typedef struct ug_comm_bucket {
    int parameters;           /* gradients in it */
    int64_t bytes;
    double seconds;           /* its all-reduce, staging included */
    double hidden;            /* the share of it that ran while backward did (0 to 1) */
    bool scattered;           /* reduce-scattered: only this rank's part of each gradient was summed, the part
                               * its sharded optimizer updates (else all-reduced whole) */
} ug_comm_bucket;
UG_API int ug_comm_bucket_count(const ug_comm *comm);
UG_API ug_status ug_comm_bucket_at(const ug_comm *comm, int index, ug_comm_bucket *out);

#ifdef __cplusplus
}
#endif
#endif
