/* All-reduces among ranks on one machine through an MPI-3 shared-memory
 * window (mpi_shared.h), part of libunigrad-mpi.so.
 *
 * Why not MPI_Allreduce alone: Open MPI 4.1 moves a message between two
 * ranks of one machine through its shared-memory transport (vader) in
 * fragments or a kernel copy, then sums it; its all-reduce of 1.5 MB (the
 * MLP's first-layer gradient) between two ranks took 0.11 to 0.20 ms on
 * a 2-core EPYC, a fifth of a training step. Here each rank copies its
 * data into the window once, sums its part of everyone's copies where
 * they lie, and reads the others' parts back: 0.055 ms.
 *
 * The window holds, per rank of the group, a header (its count and world
 * rank, on a cache line of its own) and a slot of piece floats, and one
 * result slot; longer data goes through in pieces, which bounds the
 * shared memory however large a bucket is.
 *
 * Data that lies in a shared block (ug_mpi_shared_block: a CPU replica's
 * gradient buckets) needs no slot: every rank of the group maps every
 * rank's blocks, so each sums its part from where the others' data lies
 * and stores the sum there, in every rank's data at once. The MLP's 1.5
 * MB all-reduce took 0.04-0.06 ms so, against 0.088 through the slots. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, shm_open, posix_fallocate */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/comm/mpi_shared.h"

/* The window's bytes at most: Open MPI backs it with a file in /dev/shm,
 * 64 MiB in all in a container by default, where a store beyond the space
 * left would end the process (SIGBUS). */
enum { WINDOW_BYTES = 16 << 20, MOST_PIECE = 1 << 20, LEAST_PIECE = 1 << 14 };

/* A part's sum is made here, CHUNK floats at a time, and copied into the
 * window with memcpy. Stored there by a loop, each of the window's lines
 * (last read by another rank) took a read for ownership of its own, and
 * the MLP's 0.75 MB part took 0.097 ms where the copies of it take 0.05;
 * memcpy stores lines of this length whole. */
enum { CHUNK = 1 << 16 };

/* Shared blocks a rank maps at most: its own and the others' live ones. */
enum { MOST_BLOCKS = 16, BLOCK_HEADER = 64 };

typedef struct header {
    atomic_uint meetings;          /* meet() calls this rank has come to (mod 2^32) */
    int64_t count;                 /* the floats this rank's all-reduce gave */
    int64_t world_rank, pid;
    int64_t block, offset;         /* where its data lies: a block's serial and floats into it (block 0: a slot) */
    char pad[64 - 6 * sizeof(int64_t)];
} header;

/* A shared block: every rank's mapping of its own, made together. Each
 * starts with BLOCK_HEADER bytes whose first int says whether its rank
 * still uses it; the data follows. */
typedef struct block {
    unsigned serial;               /* 0: an unused entry */
    char **bases;                  /* per group rank (NULL: not mapped) */
    size_t *bytes;                 /* of each mapping */
} block;

static struct {
    int usable;                    /* the window is there and every group alike */
    MPI_Comm group, across;        /* across: one rank of each group (MPI_COMM_NULL: one group) */
    int rank, size;                /* in the group */
    MPI_Win win;
    header *headers;               /* [size] */
    unsigned meetings;             /* meet() calls of this rank */
    size_t piece;                  /* floats a slot holds */
    float *slots;                  /* [size + 1][piece]: the ranks', then the result */
    char transport[400];           /* how all-reduces travel, for ug_comm_transport */
    pthread_mutex_t blocks_lock;   /* blocks[], against ug_mpi_shared_block_free from any thread */
    unsigned block_serial;         /* blocks made (the same on every rank of the group) */
    block blocks[MOST_BLOCKS];
    const float **where;           /* [size]: where each rank's data lies in the all-reduce under way */
    _Alignas(64) float chunk[CHUNK]; /* a part's sum on its way to the window */
} shared = {.group = MPI_COMM_NULL, .across = MPI_COMM_NULL, .win = MPI_WIN_NULL, .transport = "MPI",
            .blocks_lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_int *in_use(char *base) { return (atomic_int *)(void *)base; }

/* Unmaps the others' mappings of b (only those their rank let go of, when
 * dead_only), and frees the entry once none is left. Under blocks_lock. */
static void unmap_others(block *b, bool dead_only)
{
    bool left = false;
    for (int r = 0; r < shared.size; r++) {
        if (b->bases[r] && r != shared.rank && (!dead_only || !atomic_load(in_use(b->bases[r])))) {
            munmap(b->bases[r], b->bytes[r]);
            b->bases[r] = NULL;
        }
        left |= b->bases[r] != NULL;
    }
    if (!left) {
        free(b->bases);
        free(b->bytes);
        *b = (block){0};
    }
}

/* Run at MPI_Finalize's start (an attribute of MPI_COMM_SELF), whoever
 * calls it: the window and the groups are freed while MPI still works. */
static int release(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm, (void)keyval, (void)value, (void)extra;
    if (shared.win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(shared.win);
        MPI_Win_free(&shared.win);
    }
    if (shared.across != MPI_COMM_NULL)
        MPI_Comm_free(&shared.across);
    if (shared.group != MPI_COMM_NULL)
        MPI_Comm_free(&shared.group);
    /* This rank's own blocks stay until their tensors are freed. */
    pthread_mutex_lock(&shared.blocks_lock);
    for (int i = 0; i < MOST_BLOCKS; i++)
        if (shared.blocks[i].serial)
            unmap_others(&shared.blocks[i], false);
    pthread_mutex_unlock(&shared.blocks_lock);
    shared.usable = 0;
    return MPI_SUCCESS;
}

int ug_mpi_shared_limit(int *limit, char *why, size_t len)
{
    const char *text = getenv("UG_MPI_SHARED_RANKS");
    *limit = 0;
    if (!text || !*text)
        return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 1 || v > 1 << 20) {
        snprintf(why, len, "UG_MPI_SHARED_RANKS=\"%s\" is not a rank count: give a positive integer (1 leaves "
                 "every all-reduce to MPI), or unset it for all the ranks of a machine", text);
        return 1;
    }
    *limit = (int)v;
    return 0;
}

/* The window, made by the group's first rank and mapped by the others. */
static int map_window(char *why, size_t len)
{
    size_t piece = WINDOW_BYTES / sizeof(float) / (size_t)(shared.size + 1);
    shared.piece = piece > MOST_PIECE ? MOST_PIECE : piece < LEAST_PIECE ? LEAST_PIECE : piece;
    const size_t bytes =
        (size_t)shared.size * sizeof(header) + (size_t)(shared.size + 1) * shared.piece * sizeof(float);
    void *base = NULL;
    int rc = MPI_Win_allocate_shared(shared.rank == 0 ? (MPI_Aint)bytes : 0, 1, MPI_INFO_NULL, shared.group, &base,
                                     &shared.win);
    if (rc != MPI_SUCCESS) {
        shared.win = MPI_WIN_NULL;
        return ug_mpi_error(rc, "MPI_Win_allocate_shared", why, len);
    }
    MPI_Aint size = 0;
    int unit = 0;
    rc = MPI_Win_shared_query(shared.win, 0, &size, &unit, &base);
    if (rc == MPI_SUCCESS)
        rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, shared.win);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Win_shared_query", why, len);
    shared.headers = base;
    shared.slots = (float *)(shared.headers + shared.size);
    if (!(shared.where = calloc((size_t)shared.size, sizeof *shared.where))) {
        snprintf(why, len, "out of host memory");
        return 1;
    }
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    atomic_init(&shared.headers[shared.rank].meetings, 0);
    shared.headers[shared.rank].world_rank = world;
    shared.headers[shared.rank].pid = getpid();
    return 0;
}

int ug_mpi_shared_init(int limit, char *why, size_t len)
{
    if (shared.group != MPI_COMM_NULL)
        return 0; /* made by an earlier communicator of this process */
    int world = 0, size[2];
    MPI_Comm machine;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world, MPI_INFO_NULL, &machine);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Comm_split_type", why, len);
    int on_machine = 0;
    MPI_Comm_rank(machine, &on_machine);
    rc = MPI_Comm_split(machine, limit ? on_machine / limit : 0, world, &shared.group);
    MPI_Comm_free(&machine);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Comm_split", why, len);
    MPI_Comm_set_errhandler(shared.group, MPI_ERRORS_RETURN);
    MPI_Comm_rank(shared.group, &shared.rank);
    MPI_Comm_size(shared.group, &shared.size);
    int keyval;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release, &keyval, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, keyval, NULL);
    /* Groups alike in size: the largest and the smallest as one minimum. */
    size[0] = shared.size;
    size[1] = -shared.size;
    rc = MPI_Allreduce(MPI_IN_PLACE, size, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Allreduce", why, len);
    if (size[0] != -size[1] || size[0] < 2) { /* left to MPI */
        if (size[0] != -size[1])
            snprintf(shared.transport, sizeof shared.transport, "MPI (the machines' groups of ranks differ in size: "
                     "%d to %d)", size[0], -size[1]);
        return 0;
    }
    rc = MPI_Comm_split(MPI_COMM_WORLD, shared.rank, world, &shared.across);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Comm_split", why, len);
    MPI_Comm_set_errhandler(shared.across, MPI_ERRORS_RETURN);
    int groups = 0;
    MPI_Comm_size(shared.across, &groups);
    if (groups == 1)
        MPI_Comm_free(&shared.across);
    /* A window that some rank could not map (a full /dev/shm) leaves the
     * all-reduces to MPI on every rank; one that every rank made is freed
     * by all (a collective), one that only some made is left alone. */
    char mapped_why[256] = "";
    int state[1] = {map_window(mapped_why, sizeof mapped_why) == 0 ? 2 : shared.win != MPI_WIN_NULL};
    rc = MPI_Allreduce(MPI_IN_PLACE, state, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Allreduce", why, len);
    if (state[0] == 2) {
        MPI_Win_sync(shared.win); /* the others' headers, set before the all-reduce */
        shared.usable = 1;
        if (shared.across == MPI_COMM_NULL)
            snprintf(shared.transport, sizeof shared.transport, "shared memory among the %d ranks of the machine",
                     shared.size);
        else
            snprintf(shared.transport, sizeof shared.transport, "shared memory in %d groups of %d ranks, MPI "
                     "between the groups", groups, shared.size);
        return 0;
    }
    if (state[0] == 1)
        MPI_Win_free(&shared.win);
    shared.win = MPI_WIN_NULL;
    snprintf(shared.transport, sizeof shared.transport, "MPI (a rank could not map the shared-memory window%s%s)",
             *mapped_why ? ": " : "", mapped_why);
    return 0;
}

const char *ug_mpi_shared_transport(void) { return shared.transport; }

/* Whether rank r has come to this rank's meeting number count. */
static bool came(const header *h, unsigned count)
{
    return (int)(atomic_load_explicit(&h->meetings, memory_order_acquire) - count) >= 0;
}

/* Every rank of the group past this point, its stores to the window
 * visible to the others' loads after it: each rank counts the meetings it
 * came to in its header and waits for the others' counts. (Open MPI's
 * barrier, polled, let the last rank to arrive on 2 cores go on some
 * 30 us after the first.) The wait yields the core, and after a second
 * sleeps between looks, as ug_mpi_wait does: sleeping at once (a futex)
 * made the step slower, x1.45 of one rank's against x1.2, as a woken
 * rank took long to run again. */
static int meet(const char *what, double timeout, char *why, size_t len)
{
    const unsigned count = ++shared.meetings;
    atomic_store_explicit(&shared.headers[shared.rank].meetings, count, memory_order_release);
    const double start = MPI_Wtime();
    for (int r = 0; r < shared.size; r++) {
        const header *h = &shared.headers[r];
        while (!came(h, count)) {
            const double waited = MPI_Wtime() - start;
            if (waited > timeout) {
                ug_mpi_abandon();
                int world = -1;
                MPI_Comm_rank(MPI_COMM_WORLD, &world);
                snprintf(why, len, "world rank %d waited %g s in %s for world rank %lld; raise the timeout "
                         "(ug_comm_set_timeout) if a rank is slow, or look for one that stopped", world, timeout, what,
                         (long long)h->world_rank);
                return 1;
            }
            ug_mpi_pause(waited);
        }
    }
    return 0;
}

/* out <- a + b (max: the larger of the two), element by element; out
 * may be a, never b. */
static void combine(float *out, const float *a, const float *restrict b, size_t n, bool max)
{
    if (max) {
        for (size_t i = 0; i < n; i++)
            out[i] = b[i] > a[i] ? b[i] : a[i];
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = a[i] + b[i];
    }
}

/* The part of a piece of m floats that group rank r reduces. */
static size_t part_start(size_t m, int r) { return m * (size_t)r / (size_t)shared.size; }

/* The serial of this rank's block that holds data's m floats, and their
 * offset in it; 0: none does. */
static int64_t own_block(const float *data, size_t m, int64_t *offset)
{
    int64_t serial = 0;
    pthread_mutex_lock(&shared.blocks_lock);
    for (int i = 0; i < MOST_BLOCKS && !serial; i++) {
        const block *b = &shared.blocks[i];
        const char *start = b->serial && b->bases[shared.rank] ? b->bases[shared.rank] + BLOCK_HEADER : NULL;
        if (start && (const char *)data >= start &&
            (const char *)(data + m) <= b->bases[shared.rank] + b->bytes[shared.rank]) {
            serial = b->serial;
            *offset = (const float *)(const void *)data - (const float *)(const void *)start;
        }
    }
    pthread_mutex_unlock(&shared.blocks_lock);
    return serial;
}

/* Where group rank r's data lies, from its header (after a meeting): in
 * its block, or its slot; this rank's is data itself. NULL: in a block
 * this rank has not mapped. */
static const float *data_of(const float *data, int r)
{
    const header *h = &shared.headers[r];
    if (r == shared.rank)
        return data;
    if (!h->block)
        return shared.slots + (size_t)r * shared.piece;
    const float *at = NULL;
    pthread_mutex_lock(&shared.blocks_lock);
    for (int i = 0; i < MOST_BLOCKS && !at; i++)
        if (shared.blocks[i].serial == (unsigned)h->block && shared.blocks[i].bases[r])
            at = (const float *)(const void *)(shared.blocks[i].bases[r] + BLOCK_HEADER) + h->offset;
    pthread_mutex_unlock(&shared.blocks_lock);
    return at;
}

/* k floats of a part's sum, at floats into the piece, into every rank's
 * data that lies in a block and into this rank's wherever it lies. */
static void deliver(const float *sum, size_t at, size_t k)
{
    for (int r = 0; r < shared.size; r++)
        if (r == shared.rank || shared.headers[r].block)
            memcpy((float *)shared.where[r] + at, sum, k * sizeof *sum);
}

static int reduce_piece(float *data, size_t m, size_t n, bool max, double timeout, char *why, size_t len)
{
    static const char what[] = "ug_comm_all_reduce";
    const size_t lo = part_start(m, shared.rank), hi = part_start(m, shared.rank + 1);
    header *me = &shared.headers[shared.rank];
    float *mine = shared.slots + (size_t)shared.rank * shared.piece;
    float *result = shared.slots + (size_t)shared.size * shared.piece;
    me->count = (int64_t)n;
    me->block = own_block(data, m, &me->offset);
    if (!me->block) { /* what the others sum, where they can read it */
        memcpy(mine, data, lo * sizeof *data);
        memcpy(mine + hi, data + hi, (m - hi) * sizeof *data);
    }
    if (meet(what, timeout, why, len))
        return 1;
    bool all_in_blocks = true;
    for (int r = 0; r < shared.size; r++) { /* the same verdict on every rank */
        const header *h = &shared.headers[r];
        /* (The counts were agreed before, by the module's agree: this
         * guards the slots, which a longer piece would read past.) */
        if (h->count != shared.headers[0].count) {
            snprintf(why, len, "rank %lld's all-reduce has %lld elements, rank %lld's %lld; every rank must give "
                     "the same count", (long long)h->world_rank, (long long)h->count,
                     (long long)shared.headers[0].world_rank, (long long)shared.headers[0].count);
            return 1;
        }
        if (!(shared.where[r] = data_of(data, r))) { /* (blocks are made by every rank together) */
            snprintf(why, len, "rank %lld's data lies in shared block %lld, which rank %d has not mapped",
                     (long long)h->world_rank, (long long)h->block, shared.rank);
            return 1;
        }
        all_in_blocks &= h->block != 0;
    }
    /* This rank's part summed in rank order, (r0 + r1) + r2 ..., whichever
     * rank sums it: into the result slot where a rank reads it from there
     * or it goes on to the other machines, and to the ranks' data once it
     * is the sum of every rank's. */
    const bool final = shared.across == MPI_COMM_NULL;
    for (size_t at = lo; at < hi; at += CHUNK) {
        const size_t k = hi - at < CHUNK ? hi - at : CHUNK;
        for (int r = 1; r < shared.size; r++)
            combine(shared.chunk, r == 1 ? shared.where[0] + at : shared.chunk, shared.where[r] + at, k, max);
        if (!final || !all_in_blocks)
            memcpy(result + at, shared.chunk, k * sizeof *data);
        if (final)
            deliver(shared.chunk, at, k);
    }
    if (!final && hi > lo) {
        MPI_Request request;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, result + lo, (int)(hi - lo), MPI_FLOAT, max ? MPI_MAX : MPI_SUM,
                                shared.across, &request);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Iallreduce", why, len);
        if (ug_mpi_wait(&request, what, timeout, why, len))
            return 1;
        deliver(result + lo, lo, hi - lo);
    }
    if (meet(what, timeout, why, len))
        return 1;
    if (!me->block) { /* the others' parts */
        memcpy(data, result, lo * sizeof *data);
        memcpy(data + hi, result + hi, (m - hi) * sizeof *data);
    }
    return 0;
}

int ug_mpi_shared_all_reduce(float *data, size_t n, bool max, double timeout, bool *done, char *why, size_t len)
{
    *done = shared.usable != 0;
    if (!*done)
        return 0;
    size_t at = 0;
    do { /* once at least: an empty all-reduce still meets the others */
        const size_t m = n - at < shared.piece ? n - at : shared.piece;
        if (reduce_piece(data + at, m, n, max, timeout, why, len))
            return 1;
        at += m;
    } while (at < n);
    return 0;
}

/* ---- shared blocks ---- */

static void block_name(char *name, size_t len, int64_t pid, unsigned serial)
{
    snprintf(name, len, "/unigrad-%lld-%u", (long long)pid, serial);
}

/* This rank's block of total bytes, named name; NULL with why. Its pages
 * are reserved now: a store past the space /dev/shm has left would end
 * the process (SIGBUS), where this only declines. */
static char *make_own(const char *name, size_t total, char *why, size_t len)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(why, len, "shm_open(%s): %s", name, strerror(errno));
        return NULL;
    }
    int err = ftruncate(fd, (off_t)total) ? errno : posix_fallocate(fd, 0, (off_t)total);
    char *base = err ? MAP_FAILED : mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!err && base == MAP_FAILED)
        err = errno;
    close(fd);
    if (err) {
        shm_unlink(name);
        snprintf(why, len, "%zu bytes of shared memory (%s): %s", total, name, strerror(err));
        return NULL;
    }
    return base;
}

static char *map_other(const char *name, size_t total)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return base == MAP_FAILED ? NULL : base;
}

/* all[r] <- group rank r's value. */
static int gather(int64_t value, int64_t *all, double timeout, char *why, size_t len)
{
    MPI_Request request;
    int rc = MPI_Iallgather(&value, 1, MPI_INT64_T, all, 1, MPI_INT64_T, shared.group, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Iallgather", why, len);
    return ug_mpi_wait(&request, "ug_mpi_shared_block", timeout, why, len);
}

/* An entry for a block about to be made (its serial set, nothing mapped
 * yet, so no lookup finds it), after dropping the others' blocks that
 * their ranks let go of; NULL when all are taken. */
static block *reserve_entry(unsigned serial)
{
    block *free_entry = NULL;
    pthread_mutex_lock(&shared.blocks_lock);
    for (int i = 0; i < MOST_BLOCKS; i++)
        if (shared.blocks[i].serial)
            unmap_others(&shared.blocks[i], true);
    for (int i = 0; i < MOST_BLOCKS && !free_entry; i++)
        if (!shared.blocks[i].serial)
            free_entry = &shared.blocks[i];
    char **bases = free_entry ? calloc((size_t)shared.size, sizeof *bases) : NULL;
    size_t *bytes = bases ? calloc((size_t)shared.size, sizeof *bytes) : NULL;
    if (bytes)
        *free_entry = (block){.serial = serial, .bases = bases, .bytes = bytes};
    else
        free(bases);
    pthread_mutex_unlock(&shared.blocks_lock);
    return bytes ? free_entry : NULL;
}

static void unreserve(block *b)
{
    pthread_mutex_lock(&shared.blocks_lock);
    if (b->bases[shared.rank])
        munmap(b->bases[shared.rank], b->bytes[shared.rank]);
    b->bases[shared.rank] = NULL;
    unmap_others(b, false); /* and, nothing left, the entry */
    pthread_mutex_unlock(&shared.blocks_lock);
}

/* Maps the others' blocks of serial (sizes: per group rank) into b:
 * whether all could be. */
static bool map_others(block *b, unsigned serial, const int64_t *sizes)
{
    bool all = true;
    for (int r = 0; r < shared.size && all; r++) {
        if (r == shared.rank)
            continue;
        char name[64];
        block_name(name, sizeof name, shared.headers[r].pid, serial);
        char *base = map_other(name, (size_t)sizes[r]);
        pthread_mutex_lock(&shared.blocks_lock);
        b->bases[r] = base;
        b->bytes[r] = (size_t)sizes[r];
        pthread_mutex_unlock(&shared.blocks_lock);
        all = base != NULL;
    }
    return all;
}

int ug_mpi_shared_block(size_t bytes, double timeout, void **address, char *why, size_t len)
{
    *address = NULL;
    if (!shared.usable)
        return 0;
    const unsigned serial = ++shared.block_serial;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t total = (BLOCK_HEADER + bytes + page - 1) / page * page;
    char name[64], declined[256] = "out of host memory"; /* why this rank has none */
    block_name(name, sizeof name, getpid(), serial);
    int64_t *sizes = calloc((size_t)shared.size, sizeof *sizes);
    char *own = sizes ? make_own(name, total, declined, sizeof declined) : NULL;
    if (own) /* in use from the start: no other rank takes it for let go of */
        atomic_store(in_use(own), 1);
    /* Each rank's size (0: it has none). Every rank has let go of what it
     * freed before coming here: an entry is taken after. */
    int failed = gather(own ? (int64_t)total : 0, sizes, timeout, why, len);
    int64_t verdict = own != NULL;
    for (int r = 0; own && !failed && r < shared.size; r++)
        verdict &= sizes[r] > 0;
    if (own && !verdict)
        snprintf(declined, sizeof declined, "another rank of this machine could not make its block");
    block *b = !failed && verdict ? reserve_entry(serial) : NULL;
    if (b) {
        pthread_mutex_lock(&shared.blocks_lock);
        b->bases[shared.rank] = own;
        b->bytes[shared.rank] = total;
        pthread_mutex_unlock(&shared.blocks_lock);
        if (!(verdict = map_others(b, serial, sizes)))
            snprintf(declined, sizeof declined, "another rank's block could not be mapped: %s", strerror(errno));
    } else if (verdict) {
        snprintf(declined, sizeof declined, "this rank maps %d shared blocks already", MOST_BLOCKS);
        verdict = 0;
    }
    /* Then whether each mapped every rank's. */
    const int64_t mine = verdict;
    if (!failed)
        failed = gather(verdict, sizes, timeout, why, len);
    if (own)
        shm_unlink(name); /* every rank has mapped it, or given up */
    for (int r = 0; !failed && r < shared.size; r++)
        verdict &= sizes[r] != 0;
    if (mine && !verdict)
        snprintf(declined, sizeof declined, "another rank of this machine could not map every rank's block");
    free(sizes);
    if (failed || !verdict) {
        if (b)
            unreserve(b);
        else if (own)
            munmap(own, total);
        if (!failed)
            snprintf(why, len, "%s", declined);
        return failed;
    }
    *address = own + BLOCK_HEADER;
    return 0;
}

void ug_mpi_shared_block_free(void *address)
{
    pthread_mutex_lock(&shared.blocks_lock);
    for (int i = 0; i < MOST_BLOCKS; i++) {
        block *b = &shared.blocks[i];
        char *base = b->serial ? b->bases[shared.rank] : NULL;
        if (base && base + BLOCK_HEADER == (char *)address) {
            atomic_store(in_use(base), 0); /* the others unmap it at their next block */
            munmap(base, b->bytes[shared.rank]);
            b->bases[shared.rank] = NULL;
            unmap_others(b, true);
            break;
        }
    }
    pthread_mutex_unlock(&shared.blocks_lock);
}
