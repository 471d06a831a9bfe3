/* Inside libunigrad-mpi.so: all-reduces among the ranks that share a
 * machine, through an MPI-3 shared-memory window (mpi_shared.c), the
 * polled wait that every collective of the module uses (mpi_module.c),
 * and point-to-point messages (mpi_p2p.c). */
#ifndef UG_CORE_COMM_MPI_SHARED_H
#define UG_CORE_COMM_MPI_SHARED_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/comm/mpi_module.h"

/* The module's communicator: MPI_COMM_WORLD (the shared-memory transport
 * is its alone) or one split from it. */
struct ug_mpi_comm {
    MPI_Comm comm;
    bool world;
};

/* mpi_module.c: every call into MPI holds the module's lock, which a
 * wait lets go of between its looks (ug_mpi_pause), so that threads of
 * the rank (the stages of a pipeline, each on a comm of its own) call MPI
 * one at a time, as MPI_THREAD_SERIALIZED allows, and each one's waits
 * let the others' collectives go on. pause: the lock let go while the
 * core is yielded (or, after a second of waiting, slept on briefly). */
void ug_mpi_pause(double waited);

/* Polls request until it completes (0) or timeout seconds pass (1, with
 * the reason in why); what names the collective in the message. */
int ug_mpi_wait(MPI_Request *request, const char *what, double timeout, char *why, size_t len);
/* The same, with the completed request's status (a receive's count). */
int ug_mpi_wait_status(MPI_Request *request, MPI_Status *status, const char *what, double timeout, char *why,
                       size_t len);
/* mpi_p2p.c: the module's send and recv, and the end of the sends still
 * pending, before MPI is finalised. */
int ug_mpi_send(ug_mpi_comm *comm, const void *data, size_t bytes, int dest, char *why, size_t len);
int ug_mpi_recv(ug_mpi_comm *comm, void *data, size_t capacity, int source, size_t *bytes, double timeout, char *why,
                size_t len);
void ug_mpi_p2p_finish(void);
/* MPI cannot be finalised any more: a rank gave up waiting for another
 * (MPI_Finalize would wait for it too), so the process leaves without. */
void ug_mpi_abandon(void);
/* 1, with "call failed: MPI's text for code" in why. */
int ug_mpi_error(int code, const char *call, char *why, size_t len);

/* This rank's UG_MPI_SHARED_RANKS: the most consecutive ranks of a
 * machine that form a group (0: unset, all of them); 1 with why when it
 * is malformed. */
int ug_mpi_shared_limit(int *limit, char *why, size_t len);

/* Splits MPI_COMM_WORLD into groups of ranks on one machine (at most limit
 * consecutive ones each, when not 0: every rank's the same, agreed
 * beforehand). Collective; 1 with why on an MPI error. Where every group
 * holds one rank, or the groups differ in size, the module's all-reduces
 * stay MPI's own and mpi_shared_all_reduce declines. */
int ug_mpi_shared_init(int limit, char *why, size_t len);

/* How the module's all-reduces travel, in words (after init). */
const char *ug_mpi_shared_transport(void);

/* data <- sum (max: the largest) of every rank's n floats, in place. The
 * ranks of a group reduce a part each from the others' copies in shared
 * memory; with several groups, each part then goes through MPI among the
 * ranks that reduced it in every group; every rank reads the result
 * back. Each element is combined once, in rank order, and copied: every
 * rank gets the same bits. *done false: not taken (see init), nothing
 * was done. */
int ug_mpi_shared_all_reduce(float *data, size_t n, bool max, double timeout, bool *done, char *why, size_t len);

/* A block of bytes of host memory that every rank of the group maps
 * (mpi_module.h's shared_block). */
int ug_mpi_shared_block(size_t bytes, double timeout, void **address, char *why, size_t len);
void ug_mpi_shared_block_free(void *address);

#endif
