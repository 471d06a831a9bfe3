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
 * shared memory however large a bucket is. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef struct header {
    atomic_uint meetings;          /* meet() calls this rank has come to (mod 2^32) */
    int64_t count;                 /* the floats this rank's all-reduce gave */
    int64_t world_rank;
    char pad[64 - 3 * sizeof(int64_t)];
} header;

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
    _Alignas(64) float chunk[CHUNK]; /* a part's sum on its way to the window */
} shared = {.group = MPI_COMM_NULL, .across = MPI_COMM_NULL, .win = MPI_WIN_NULL, .transport = "MPI"};

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
    shared.usable = 0;
    return MPI_SUCCESS;
}

/* The most consecutive ranks of a machine that form a group. */
static int group_limit(int *limit, char *why, size_t len)
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
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    atomic_init(&shared.headers[shared.rank].meetings, 0);
    shared.headers[shared.rank].world_rank = world;
    return 0;
}

int ug_mpi_shared_init(char *why, size_t len)
{
    if (shared.group != MPI_COMM_NULL)
        return 0; /* made by an earlier communicator of this process */
    int limit = 0, world = 0, size[2];
    if (group_limit(&limit, why, len))
        return 1;
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
                snprintf(why, len, "rank %d waited %g s in %s for rank %lld; raise the timeout (ug_comm_set_timeout) "
                         "if a rank is slow, or look for one that stopped", world, timeout, what,
                         (long long)h->world_rank);
                return 1;
            }
            if (waited > 1.0)
                nanosleep(&(struct timespec){0, 50000}, NULL);
            else
                sched_yield();
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

/* Group rank r's copy of the piece: this rank's is data itself. */
static const float *from(const float *data, int r)
{
    return r == shared.rank ? data : shared.slots + (size_t)r * shared.piece;
}

/* The part of a piece of m floats that group rank r reduces. */
static size_t part_start(size_t m, int r) { return m * (size_t)r / (size_t)shared.size; }

static int reduce_piece(float *data, size_t m, size_t n, bool max, double timeout, char *why, size_t len)
{
    static const char what[] = "ug_comm_all_reduce";
    const size_t lo = part_start(m, shared.rank), hi = part_start(m, shared.rank + 1);
    float *mine = shared.slots + (size_t)shared.rank * shared.piece;
    float *result = shared.slots + (size_t)shared.size * shared.piece;
    shared.headers[shared.rank].count = (int64_t)n;
    memcpy(mine, data, lo * sizeof *data);
    memcpy(mine + hi, data + hi, (m - hi) * sizeof *data);
    if (meet(what, timeout, why, len))
        return 1;
    for (int r = 1; r < shared.size; r++) /* the same verdict on every rank */
        if (shared.headers[r].count != shared.headers[0].count) {
            snprintf(why, len, "rank %lld's all-reduce has %lld elements, rank %lld's %lld; every rank must give "
                     "the same count", (long long)shared.headers[r].world_rank, (long long)shared.headers[r].count,
                     (long long)shared.headers[0].world_rank, (long long)shared.headers[0].count);
            return 1;
        }
    /* This rank's part summed in rank order, (r0 + r1) + r2 ..., whichever
     * rank sums it, into the result slot and, when that is the sum of
     * every machine's ranks, into data. */
    const bool final = shared.across == MPI_COMM_NULL;
    for (size_t at = lo; at < hi; at += CHUNK) {
        const size_t k = hi - at < CHUNK ? hi - at : CHUNK;
        for (int r = 1; r < shared.size; r++)
            combine(shared.chunk, r == 1 ? from(data, 0) + at : shared.chunk, from(data, r) + at, k, max);
        memcpy(result + at, shared.chunk, k * sizeof *data);
        if (final)
            memcpy(data + at, shared.chunk, k * sizeof *data);
    }
    if (!final && hi > lo) {
        MPI_Request request;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, result + lo, (int)(hi - lo), MPI_FLOAT, max ? MPI_MAX : MPI_SUM,
                                shared.across, &request);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Iallreduce", why, len);
        if (ug_mpi_wait(&request, what, timeout, why, len))
            return 1;
        memcpy(data + lo, result + lo, (hi - lo) * sizeof *data);
    }
    if (meet(what, timeout, why, len))
        return 1;
    memcpy(data, result, lo * sizeof *data);
    memcpy(data + hi, result + hi, (m - hi) * sizeof *data);
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
