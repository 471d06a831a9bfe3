/* The interface between libunigrad and its MPI module, libunigrad-mpi.so
 * (core/comm/mpi_module.c, built against Open MPI when it is installed and
 * loaded only by ug_comm_mpi_create), so a program linking libunigrad
 * needs no MPI unless it asks for it. The module speaks plain C: statuses
 * are 0 or an error with its message in why. */
#ifndef UG_CORE_COMM_MPI_MODULE_H
#define UG_CORE_COMM_MPI_MODULE_H

#include <stddef.h>
#include <stdint.h>

#define UG_MPI_MODULE_VERSION 7
#define UG_MPI_MODULE_ENTRY "ug_mpi_module_entry"

/* What a rank asks of a collective (or of ug_comm_mpi_create), which every
 * rank must ask alike: agree compares them before any data moves. */
typedef enum ug_mpi_kind {
    UG_MPI_CREATE = 1,
    UG_MPI_ALL_REDUCE,
    UG_MPI_BROADCAST,
    UG_MPI_ALL_GATHER,
    UG_MPI_BARRIER,
    UG_MPI_SHARED_BLOCK,
    UG_MPI_SPLIT,
    UG_MPI_REDUCE_SCATTER
} ug_mpi_kind;

/* A communicator of the module's (MPI_COMM_WORLD, or one split from it),
 * which every call below is on. */
typedef struct ug_mpi_comm ug_mpi_comm;

typedef struct ug_mpi_call {
    int kind;            /* ug_mpi_kind (0 with a refusal: any) */
    int64_t count;       /* elements; create: UG_MPI_SHARED_RANKS (0 unset); a shared block: 0 (sizes are each rank's) */
    int op;              /* all-reduce: 0 sum, 1 average, 2 max (ug_comm_op); else 0 */
    int root;            /* broadcast; else 0 */
} ug_mpi_call;

/* The verdicts of agree and init, the same on every rank. */
enum {
    UG_MPI_AGREED = 0,
    UG_MPI_FAILED = 1,   /* an MPI error or a timeout: the others' state is unknown */
    UG_MPI_REFUSED = 2,  /* a rank could not take part (why quotes its reason) */
    UG_MPI_DIFFER = 3,   /* the ranks asked for different things (why says what, on which ranks) */
    UG_MPI_OWN_SETTING = 4 /* init: this rank's UG_MPI_SHARED_RANKS is malformed (why says so) */
};

typedef struct ug_mpi_module {
    int version;
    /* Initialises MPI if the program has not (and finalises it at exit):
     * this process's rank and the world's size, and whether MPI may be
     * called from any thread (MPI_THREAD_SERIALIZED, which it asks for;
     * its own calls take turns under its lock, so several threads may
     * call it at once).
     * Then every rank agrees, before anything that could wait for the
     * others without a timeout: refusal (NULL when this rank can join)
     * and a malformed UG_MPI_SHARED_RANKS on any rank make every rank
     * return UG_MPI_REFUSED (or, on the rank whose setting it is,
     * UG_MPI_OWN_SETTING), and ranks whose UG_MPI_SHARED_RANKS differ
     * UG_MPI_DIFFER; waiting at most timeout seconds. */
    int (*init)(const char *refusal, double timeout, ug_mpi_comm **world, int *rank, int *size, int *any_thread,
                char *why, size_t len);
    /* A collective on comm: whether every rank asks call (see
     * the verdicts above); refusal, when not NULL, tells the others that
     * this rank cannot take part, and why. Every collective below comes
     * after one, so that ranks that ask different things are refused
     * before a buffer is touched. */
    int (*agree)(ug_mpi_comm *comm, const ug_mpi_call *call, const char *refusal, double timeout, char *why,
                 size_t len);
    /* Collectives on comm, each waiting at most timeout seconds.
     * op: 0 sum, 1 average, 2 max (ug_comm_op). Open MPI's all-reduce
     * algorithms give every rank the same bits: each element is summed
     * once and copied (ring, reduce and broadcast), or summed in the same
     * pairs on both sides (recursive doubling). */
    int (*all_reduce)(ug_mpi_comm *comm, float *data, size_t n, int op, double timeout, char *why, size_t len);
    int (*broadcast)(ug_mpi_comm *comm, float *data, size_t n, int root, double timeout, char *why, size_t len);
    int (*all_gather)(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout, char *why,
                      size_t len);
    /* out (n floats) <- the sum of every rank's block of this rank in in
     * (MPI_Reduce_scatter_block). */
    int (*reduce_scatter)(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout, char *why,
                          size_t len);
    /* After an agreement (UG_MPI_SPLIT): the ranks of comm that give the
     * same color, ranked by key, as a new communicator (MPI_Comm_split),
     * with this rank's place in it; freed by comm_free (never the world). */
    int (*split)(ug_mpi_comm *comm, int color, int key, ug_mpi_comm **out, int *rank, int *size, char *why,
                 size_t len);
    void (*comm_free)(ug_mpi_comm *comm);
    /* Point-to-point on comm, neither an agreement: send copies
     * bytes and starts them to rank dest without waiting for the receiver
     * (sends still pending complete inside later calls, and before MPI is
     * finalised); recv waits at most timeout seconds for the next message
     * from source, its size in *bytes: 0 when it was received, 2 when it
     * is larger than capacity (it stays to be received), 1 on an error. */
    int (*send)(ug_mpi_comm *comm, const void *data, size_t bytes, int dest, char *why, size_t len);
    int (*recv)(ug_mpi_comm *comm, void *data, size_t capacity, int source, size_t *bytes, double timeout,
                char *why, size_t len);
    /* How the all-reduces travel, in words: through shared memory among
     * the ranks of a machine (mpi_shared.c, the world's only), or MPI's own. */
    const char *(*transport)(const ug_mpi_comm *comm);
    /* A collective: a block of bytes of host memory (each rank its own
     * size) that the other ranks of this machine map too, so that an
     * all-reduce of data lying in it reads and writes every rank's data
     * where it lies, with no copies; a CPU replica's gradient buckets.
     * *address NULL, with 0, where the ranks share no memory or one could
     * not make its block (/dev/shm full: why then says so): the same on
     * every rank of the machine, and on every rank of a split comm.
     * Given back by shared_block_free, from any thread. */
    int (*shared_block)(ug_mpi_comm *comm, size_t bytes, double timeout, void **address, char *why, size_t len);
    void (*shared_block_free)(void *address);
} ug_mpi_module;

typedef const ug_mpi_module *ug_mpi_module_entry_fn(void);

#endif
