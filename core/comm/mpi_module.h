/* The interface between libunigrad and its MPI module, libunigrad-mpi.so
 * (core/comm/mpi_module.c, built against Open MPI when it is installed and
 * loaded only by ug_comm_mpi_create), so a program linking libunigrad
 * needs no MPI unless it asks for it. The module speaks plain C: statuses
 * are 0 or an error with its message in why. */
#ifndef UG_CORE_COMM_MPI_MODULE_H
#define UG_CORE_COMM_MPI_MODULE_H

#include <stddef.h>

#define UG_MPI_MODULE_VERSION 4
#define UG_MPI_MODULE_ENTRY "ug_mpi_module_entry"

typedef struct ug_mpi_module {
    int version;
    /* Initialises MPI if the program has not (and finalises it at exit):
     * this process's rank and the world's size, and whether MPI may be
     * called from any thread, one at a time (MPI_THREAD_SERIALIZED). */
    int (*init)(int *rank, int *size, int *any_thread, char *why, size_t len);
    /* Collectives on MPI_COMM_WORLD, each waiting at most timeout seconds.
     * op: 0 sum, 1 average, 2 max (ug_comm_op). Open MPI's all-reduce
     * algorithms give every rank the same bits: each element is summed
     * once and copied (ring, reduce and broadcast), or summed in the same
     * pairs on both sides (recursive doubling). */
    int (*all_reduce)(float *data, size_t n, int op, double timeout, char *why, size_t len);
    int (*broadcast)(float *data, size_t n, int root, double timeout, char *why, size_t len);
    int (*all_gather)(const float *in, size_t n, float *out, double timeout, char *why, size_t len);
    int (*barrier)(double timeout, char *why, size_t len);
    /* How the all-reduces travel, in words: through shared memory among
     * the ranks of a machine (mpi_shared.c), or MPI's own. */
    const char *(*transport)(void);
    /* A collective: a block of bytes of host memory (each rank its own
     * size) that the other ranks of this machine map too, so that an
     * all-reduce of data lying in it reads and writes every rank's data
     * where it lies, with no copies; a CPU replica's gradient buckets.
     * *address NULL, with 0, where the ranks share no memory or one could
     * not make its block (/dev/shm full: why then says so): the same on
     * every rank of the machine. Given back by shared_block_free, from
     * any thread. */
    int (*shared_block)(size_t bytes, double timeout, void **address, char *why, size_t len);
    void (*shared_block_free)(void *address);
} ug_mpi_module;

typedef const ug_mpi_module *ug_mpi_module_entry_fn(void);

#endif
