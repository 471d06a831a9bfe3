#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* The MPI engine, run by mpirun -np 2 (tests/CMakeLists.txt): each process
 * a rank on the CPU. Collectives against sums worked out in double, the
 * same bits on every rank, through the shared-memory window that ranks of
 * one machine use (or as ug_comm_transport says, --transport); ranks
 * giving different counts, ops, roots, dtypes or collectives refused on
 * every rank with nothing written, and a communicator refused on one rank
 * refused on all; data-parallel training of the MLP and
 * the CNN (uneven splits of each global batch, the last one partial; gradient
 * buckets overlapped with backward; accumulation, clipping, f16 with an
 * overflow on rank 1) equal to one device on the global batches within
 * 1e-5 and bitwise equal across the ranks after every step, and with the
 * optimizer's state sharded bitwise equal to the unsharded run, each
 * rank's state its share; another model or optimizer refused on both; the
 * world split in parts, and two copies of it used from two threads at
 * once. The process exits 1 when a check failed,
 * which fails the mpirun.
 *
 * With --rank-killed (mpirun told to keep the others running when one
 * dies), rank 1 kills itself at the start of a training step; rank 0,
 * in that step's all-reduce, must return an error within its timeout. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replica.h"

enum { N = 1001 };

static float value(int r, int i) { return (float)((r + 1) * 0.37 + i * 0.011 - (i % 7) * 0.3); }

static int failures;
#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "rank %d: ", rank);             \
            fprintf(stderr, __VA_ARGS__);                   \
            fprintf(stderr, "\n");                          \
            failures++;                                     \
        }                                                   \
    } while (0)

static int rank;

/* A tensor of n floats from host. */
static ug_tensor *tensor(ug_device *dev, int64_t n, const float *host)
{
    ug_tensor *t = NULL;
    return ug_tensor_from_host(dev, UG_F32, 1, &n, host, &t) == UG_OK ? t : NULL;
}

/* Whether every rank holds the same n floats (gathered and compared). */
static bool same_everywhere(ug_comm *comm, ug_device *dev, const float *data, int64_t n)
{
    ug_tensor *mine = tensor(dev, n, data), *all = NULL;
    const int ranks = ug_comm_size(comm);
    int64_t total = n * ranks;
    float *host = malloc((size_t)total * sizeof *host);
    bool same = mine && host && ug_tensor_create(dev, UG_F32, 1, &total, &all) == UG_OK &&
                ug_comm_all_gather(comm, mine, all) == UG_OK &&
                ug_tensor_download(all, host, (size_t)total * sizeof *host) == UG_OK;
    for (int r = 1; same && r < ranks; r++)
        same = !memcmp(host, host + r * n, (size_t)n * sizeof *host);
    ug_tensor_free(mine);
    ug_tensor_free(all);
    free(host);
    return same;
}

/* Every rank's value(r, i) for n elements, reduced by op, against the
 * same in double; the same bits on every rank. */
static void all_reduce_case(ug_comm *comm, ug_device *dev, int64_t n, ug_comm_op op)
{
    const int ranks = ug_comm_size(comm);
    float *host = malloc((size_t)n * sizeof *host), *got = malloc((size_t)n * sizeof *got);
    for (int64_t i = 0; host && i < n; i++)
        host[i] = value(rank, (int)i);
    ug_tensor *t = host && got ? tensor(dev, n, host) : NULL;
    ug_status st = t ? ug_comm_all_reduce(comm, t, op) : UG_ERR_OUT_OF_MEMORY;
    EXPECT(st == UG_OK, "all_reduce of %lld (op %d): %s", (long long)n, (int)op, ug_last_error());
    if (st == UG_OK && ug_tensor_download(t, got, (size_t)n * sizeof *got) == UG_OK) {
        double worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = op == UG_COMM_MAX ? -INFINITY : 0;
            for (int r = 0; r < ranks; r++)
                want = op == UG_COMM_MAX ? fmax(want, value(r, (int)i)) : want + value(r, (int)i);
            if (op == UG_COMM_AVERAGE)
                want /= ranks;
            double d = fabs(got[i] - want) / fmax(1.0, fabs(want));
            if (!(d <= worst))
                worst = d, at = i;
        }
        EXPECT(worst < 1e-6, "all_reduce of %lld (op %d): element %lld is %g from the result in double", (long long)n,
               (int)op, (long long)at, worst);
        EXPECT(same_everywhere(comm, dev, got, n), "all_reduce of %lld (op %d): the ranks' results differ",
               (long long)n, (int)op);
    }
    ug_tensor_free(t);
    free(host);
    free(got);
}

/* All-reduces of one element, one piece and several of the shared window
 * (its largest piece is 1 Mi floats), each op; a broadcast; a barrier. */
static void collectives(ug_comm *comm, ug_device *dev)
{
    static const int64_t sizes[] = {1, N, 1100000};
    for (int k = 0; k < 3; k++)
        all_reduce_case(comm, dev, sizes[k], UG_COMM_SUM);
    all_reduce_case(comm, dev, N, UG_COMM_AVERAGE);
    all_reduce_case(comm, dev, N, UG_COMM_MAX);
    float host[N], got[N];
    for (int i = 0; i < N; i++)
        host[i] = value(rank, i);
    ug_tensor *t = tensor(dev, N, host);
    EXPECT(ug_comm_broadcast(comm, t, 1) == UG_OK, "broadcast: %s", ug_last_error());
    ug_tensor_download(t, got, sizeof got);
    bool root = true;
    for (int i = 0; i < N; i++)
        root &= got[i] == value(1, i);
    EXPECT(root, "the broadcast is not rank 1's tensor");
    EXPECT(ug_comm_barrier(comm) == UG_OK, "barrier: %s", ug_last_error());
    ug_tensor_free(t);
    /* a reduce-scatter: this rank's block of every rank's tensor, summed */
    const int size = ug_comm_size(comm);
    float *all = malloc((size_t)size * N * sizeof *all);
    for (int i = 0; all && i < size * N; i++)
        all[i] = value(rank, i);
    ug_tensor *in = all ? tensor(dev, (int64_t)size * N, all) : NULL, *out = tensor(dev, N, host);
    EXPECT(in && out && ug_comm_reduce_scatter(comm, in, out) == UG_OK, "reduce-scatter: %s", ug_last_error());
    ug_tensor_download(out, got, sizeof got);
    bool summed = true;
    for (int i = 0; i < N; i++) {
        double want = 0.0;
        for (int r = 0; r < size; r++)
            want += value(r, rank * N + i);
        summed &= fabs(got[i] - want) <= 1e-5 * (1.0 + fabs(want));
    }
    EXPECT(summed, "the reduce-scatter's block is not the ranks' sum");
    ug_tensor_free(in);
    ug_tensor_free(out);
    free(all);
}

/* ---- split communicators ---- */

/* n floats of value(r, i) for every rank r of the world of this parity
 * with the given world ranks, summed: each element as a part's all-reduce
 * gives it (a part of two ranks, or one). */
static bool is_parts_sum(const float *got, int64_t n, int size, int parity)
{
    bool same = true;
    for (int64_t i = 0; i < n; i++) {
        float want = 0.0f;
        for (int r = parity; r < size; r += 2)
            want += value(r, (int)i);
        same &= got[i] == want;
    }
    return same;
}

typedef struct dup_run {
    ug_comm *comm;
    ug_device *dev;
    int rounds;
    bool ok;
} dup_run;

/* All-reduces and messages on one comm of two, while another thread
 * uses the other: MPI from two threads at once (the module's calls take
 * turns; MPI_THREAD_SERIALIZED). */
static void *use_dup(void *arg)
{
    dup_run *d = arg;
    float host[N], got[N];
    d->ok = true;
    const int me = ug_comm_rank(d->comm), size = ug_comm_size(d->comm);
    for (int k = 0; k < d->rounds && d->ok; k++) {
        for (int i = 0; i < N; i++)
            host[i] = value(me, i);
        ug_tensor *t = tensor(d->dev, N, host);
        d->ok = t && ug_comm_all_reduce(d->comm, t, UG_COMM_SUM) == UG_OK &&
                ug_tensor_download(t, got, sizeof got) == UG_OK;
        for (int i = 0; d->ok && i < N; i++) { /* (the sum's order is MPI's: checked in double) */
            double want = 0.0;
            for (int r = 0; r < size; r++)
                want += value(r, i);
            d->ok = fabs(got[i] - want) < 1e-4 * (1.0 + fabs(want));
        }
        /* a message round the ring */
        d->ok = d->ok && ug_comm_send(d->comm, t, (me + 1) % size) == UG_OK &&
                ug_comm_recv(d->comm, t, (me + size - 1) % size) == UG_OK;
        ug_tensor_free(t);
    }
    return NULL;
}

/* The world split by parity, keys reversed: each part's ranks, sizes and
 * sums; two copies of the world used at once from two threads; the world
 * whole after. */
static void split_checks(ug_comm *world, ug_device *dev)
{
    const int size = ug_comm_size(world);
    ug_comm *part = NULL;
    EXPECT(ug_comm_split(world, rank % 2, -rank, NULL, &part) == UG_OK, "split: %s", ug_last_error());
    if (part) {
        int above = 0, members = 0;
        for (int r = rank % 2; r < size; r += 2) {
            members++;
            above += r > rank;
        }
        EXPECT(ug_comm_rank(part) == above && ug_comm_size(part) == members, "rank %d of %d in its part; want %d of %d",
               ug_comm_rank(part), ug_comm_size(part), above, members);
        EXPECT(!strcmp(ug_comm_transport(part), "MPI"), "a part's all-reduces travel by %s", ug_comm_transport(part));
        float host[N], got[N];
        for (int i = 0; i < N; i++)
            host[i] = value(rank, i);
        ug_tensor *t = tensor(dev, N, host);
        EXPECT(ug_comm_all_reduce(part, t, UG_COMM_SUM) == UG_OK, "a part's all-reduce: %s", ug_last_error());
        ug_tensor_download(t, got, sizeof got);
        EXPECT(is_parts_sum(got, N, size, rank % 2), "a part's all-reduce is not its ranks' sum");
        ug_tensor_free(t);
        ug_comm_free(part);
    }
    dup_run runs[2] = {{.dev = dev, .rounds = 20}, {.dev = dev, .rounds = 20}};
    for (int k = 0; k < 2; k++)
        EXPECT(ug_comm_split(world, 0, rank, NULL, &runs[k].comm) == UG_OK, "a copy of the world: %s", ug_last_error());
    if (runs[0].comm && runs[1].comm) {
        pthread_t threads[2];
        for (int k = 0; k < 2; k++)
            pthread_create(&threads[k], NULL, use_dup, &runs[k]);
        for (int k = 0; k < 2; k++)
            pthread_join(threads[k], NULL);
        EXPECT(runs[0].ok && runs[1].ok, "two copies of the world used at once from two threads: %s, %s",
               runs[0].ok ? "ok" : "failed", runs[1].ok ? "ok" : "failed");
    }
    for (int k = 0; k < 2; k++)
        ug_comm_free(runs[k].comm);
    EXPECT(ug_comm_barrier(world) == UG_OK, "the world after its parts: %s", ug_last_error());
}

/* ---- collectives that differ between ranks ---- */

/* The ranks that ask otherwise than rank 0: the upper half (rank 1 of 2;
 * of 4 ranks in 2 groups of 2, the second group, so that the groups agree
 * within and differ between them). The first of them, which the refusals
 * name. */
static bool odd_one(int r, int size) { return r >= size / 2; }
static int first_odd(int size) { return size / 2; }

enum { GUARD = 4096 };
static const float SENTINEL = 1234.5f;

/* n floats of host in a tensor sharing its storage with GUARD sentinels
 * after it: an engine writing past the tensor changes them, not the
 * heap, so that the old engine's overrun shows here and harms nothing. */
typedef struct guarded {
    ug_tensor *whole, *t;
    int64_t n;
} guarded;

static guarded guarded_tensor(ug_device *dev, int64_t n, const float *host)
{
    guarded g = {.n = n};
    float *init = malloc((size_t)(n + GUARD) * sizeof *init);
    for (int64_t i = 0; init && i < n + GUARD; i++)
        init[i] = i < n ? host[i] : SENTINEL;
    g.whole = init ? tensor(dev, n + GUARD, init) : NULL;
    if (g.whole && ug_tensor_slice(g.whole, 0, n, &g.t) != UG_OK)
        g.t = NULL;
    free(init);
    return g;
}

/* Whether the tensor still holds host and the sentinels after it theirs. */
static bool untouched(const guarded *g, const float *host)
{
    float *now = malloc((size_t)(g->n + GUARD) * sizeof *now);
    bool same = now && ug_tensor_download(g->whole, now, (size_t)(g->n + GUARD) * sizeof *now) == UG_OK;
    for (int64_t i = 0; same && i < g->n + GUARD; i++)
        same = now[i] == (i < g->n ? host[i] : SENTINEL);
    free(now);
    return same;
}

static void guarded_free(guarded *g)
{
    ug_tensor_free(g->t);
    ug_tensor_free(g->whole);
}

/* A refusal: status want and a message holding text and, but where it
 * is this rank's own, naming the first odd rank. */
static void expect_refused(const char *what, ug_status st, ug_status want, const char *text, int size, bool own)
{
    char who[32];
    snprintf(who, sizeof who, "rank %d", first_odd(size));
    const char *message = ug_last_error();
    EXPECT(st == want && strstr(message, text) && (own || strstr(message, who)),
           "[%s] returned %d, not %d saying \"%s\" of %s: %s", what, (int)st, (int)want, text, who, message);
}

/* An all-reduce whose count or op differs on the odd ranks (kinds: an
 * op; -1 the count; -2 a barrier in its place). */
static void all_reduce_differs(ug_comm *comm, ug_device *dev, const char *what, int kind, const char *text)
{
    const int size = ug_comm_size(comm);
    const bool odd = odd_one(rank, size);
    const int64_t n = kind == -1 && odd ? 101 : 100;
    float host[101];
    for (int i = 0; i < 101; i++)
        host[i] = value(rank, i);
    guarded g = guarded_tensor(dev, n, host);
    ug_status st = UG_ERR_OUT_OF_MEMORY;
    if (g.t && kind == -2 && odd)
        st = ug_comm_barrier(comm);
    else if (g.t)
        st = ug_comm_all_reduce(comm, g.t, kind >= 0 && odd ? (ug_comm_op)kind : UG_COMM_SUM);
    expect_refused(what, st, UG_ERR_INVALID_ARGUMENT, text, size, false);
    EXPECT(untouched(&g, host), "[%s] the refused all-reduce changed the tensor or wrote past it", what);
    guarded_free(&g);
}

/* A broadcast whose count (-1) or root (the odd ranks name the last rank)
 * differs; or an all-gather whose count differs (gather). */
static void broadcast_differs(ug_comm *comm, ug_device *dev, const char *what, bool root_differs, bool gather,
                              const char *text)
{
    const int size = ug_comm_size(comm);
    const bool odd = odd_one(rank, size);
    const int64_t n = !root_differs && odd ? 101 : 100;
    float host[101], *sent = calloc((size_t)(101 * size), sizeof *sent);
    for (int i = 0; i < 101; i++)
        host[i] = value(rank, i);
    for (int i = 0; sent && i < 101 * size; i++)
        sent[i] = -1.0f - (float)i;
    guarded in = guarded_tensor(dev, n, host), out = {0};
    if (gather)
        out = guarded_tensor(dev, n * size, sent);
    ug_status st = UG_ERR_OUT_OF_MEMORY;
    if (in.t && sent && gather && out.t)
        st = ug_comm_all_gather(comm, in.t, out.t);
    else if (in.t && sent && !gather)
        st = ug_comm_broadcast(comm, in.t, root_differs && odd ? size - 1 : 0);
    expect_refused(what, st, UG_ERR_INVALID_ARGUMENT, text, size, false);
    EXPECT(untouched(&in, host) && (!gather || untouched(&out, sent)),
           "[%s] the refused collective changed a tensor or wrote past it", what);
    guarded_free(&in);
    guarded_free(&out);
    free(sent);
}

/* The odd ranks give an f16 tensor: refused there (UG_ERR_DTYPE); the
 * others hear why when they free their communicator, rather than at the
 * timeout (20 s; the old engine's message said "waited"). */
static void dtype_differs(ug_comm *comm, ug_device *dev)
{
    const int size = ug_comm_size(comm);
    const bool odd = odd_one(rank, size);
    int64_t n = 100;
    ug_tensor *t = NULL;
    ug_status st = ug_tensor_create(dev, odd ? UG_F16 : UG_F32, 1, &n, &t);
    if (st == UG_OK)
        st = ug_comm_all_reduce(comm, t, UG_COMM_SUM);
    expect_refused("dtype", st, odd ? UG_ERR_DTYPE : UG_ERR_BACKEND, "is f16; collectives take f32", size, odd);
    ug_tensor_free(t);
}

static ug_comm *fresh(ug_device *dev, const char *what)
{
    ug_comm *comm = NULL;
    EXPECT(ug_comm_mpi_create(dev, &comm) == UG_OK, "[%s] a communicator: %s", what, ug_last_error());
    if (comm)
        ug_comm_set_timeout(comm, 20.0); /* the old engine: a refused rank's peers waited this long */
    return comm;
}

/* The ranks' rank and size from mpirun, for what happens before the
 * first communicator; -1 when not under Open MPI's. */
static int launched_as(const char *variable)
{
    const char *text = getenv(variable);
    return text ? atoi(text) : -1;
}

/* The first communicator of the process, with UG_MPI_SHARED_RANKS=0 on
 * the odd ranks only: refused there, and on the others, naming it (the
 * old engine left them in MPI_Comm_split_type for ever: the ctest timeout
 * ends it). Then one with the setting as it was, which must work. */
static void create_refused_first(ug_device *dev)
{
    const int me = launched_as("OMPI_COMM_WORLD_RANK"), size = launched_as("OMPI_COMM_WORLD_SIZE");
    rank = me;
    EXPECT(me >= 0 && size >= 2, "[create] run under Open MPI's mpirun with 2 ranks or more");
    if (me < 0 || size < 2)
        return;
    const char *was = getenv("UG_MPI_SHARED_RANKS");
    char saved[64];
    snprintf(saved, sizeof saved, "%s", was ? was : "");
    if (odd_one(me, size))
        setenv("UG_MPI_SHARED_RANKS", "0", 1);
    ug_comm *comm = NULL;
    ug_status st = ug_comm_mpi_create(dev, &comm);
    expect_refused("create, UG_MPI_SHARED_RANKS=0 on one side", st,
                   odd_one(me, size) ? UG_ERR_INVALID_ARGUMENT : UG_ERR_BACKEND, "UG_MPI_SHARED_RANKS=\"0\"", size,
                   odd_one(me, size));
    ug_comm_free(comm);
    if (was)
        setenv("UG_MPI_SHARED_RANKS", saved, 1);
    else
        unsetenv("UG_MPI_SHARED_RANKS");
}

/* A later communicator that the odd ranks ask for with no device: refused
 * on every rank (the old engine gave the others one: UG_OK). */
static void create_refused_later(ug_comm *world, ug_device *dev)
{
    const int size = ug_comm_size(world);
    const bool odd = odd_one(rank, size);
    ug_comm *comm = NULL;
    ug_status st = ug_comm_mpi_create(odd ? NULL : dev, &comm);
    expect_refused("create, no device on one side", st, odd ? UG_ERR_INVALID_ARGUMENT : UG_ERR_BACKEND,
                   "device is NULL", size, odd);
    ug_comm_free(comm);
}

static bool chosen(const char *only, const char *name) { return !only || !strcmp(only, name); }

/* Collectives that differ between the ranks, refused on every rank with
 * the tensors untouched, on one communicator, which goes on working after
 * (nothing was done); the overruns of the old engine come last. A dtype
 * that differs breaks a communicator of its own; then a communicator
 * refused on one side. only: that case alone. */
static void mismatches(ug_comm *world, ug_device *dev, const char *only)
{
    ug_comm *comm = fresh(dev, "mismatches");
    if (!comm)
        return;
    if (chosen(only, "average"))
        all_reduce_differs(comm, dev, "sum against average", UG_COMM_AVERAGE, "every rank must give the same op");
    if (chosen(only, "max"))
        all_reduce_differs(comm, dev, "sum against max", UG_COMM_MAX, "every rank must give the same op");
    if (chosen(only, "kind"))
        all_reduce_differs(comm, dev, "all-reduce against barrier", -2,
                           "every rank must call the same collectives in the same order");
    if (chosen(only, "broadcast_root"))
        broadcast_differs(comm, dev, "broadcast roots", true, false, "every rank must name the same root");
    if (chosen(only, "broadcast_count"))
        broadcast_differs(comm, dev, "broadcast counts", false, false, "every rank must give the same count");
    if (chosen(only, "gather_count"))
        broadcast_differs(comm, dev, "all-gather counts", false, true, "every rank must give the same count");
    if (chosen(only, "count"))
        all_reduce_differs(comm, dev, "all-reduce counts", -1, "every rank must give the same count");
    all_reduce_case(comm, dev, N, UG_COMM_SUM);
    ug_comm_free(comm);
    if (chosen(only, "dtype") && (comm = fresh(dev, "dtype"))) {
        dtype_differs(comm, dev);
        ug_comm_free(comm);
    }
    if (chosen(only, "create_later"))
        create_refused_later(world, dev);
}

/* Freeing a communicator tells no other rank anything: ranks that free
 * one at different points, around a collective of another, go on. */
static void free_tells_nobody(ug_device *dev)
{
    ug_comm *spare = fresh(dev, "free"), *comm = fresh(dev, "free");
    const bool odd = comm && odd_one(rank, ug_comm_size(comm));
    if (odd)
        ug_comm_free(spare);
    if (comm)
        all_reduce_case(comm, dev, N, UG_COMM_SUM);
    if (!odd)
        ug_comm_free(spare);
    ug_comm_free(comm);
}

/* The rows of the global batch this rank runs: rank 0 the first split,
 * the others the rest in equal shares (the last one the remainder). */
static void share(ug_comm *comm, int64_t split, int64_t *first, int64_t *rows)
{
    const int64_t others = ug_comm_size(comm) - 1, each = (REPLICA_BATCH - split) / others;
    *first = rank ? split + (rank - 1) * each : 0;
    *rows = !rank ? split : rank < others ? each : REPLICA_BATCH - *first;
}

static void train_case(ug_comm *comm, ug_device *dev, int64_t split, replica_setup setup, const char *what)
{
    static replica one, mine;
    EXPECT(replica_reference(dev, &setup, split, &one), "[%s] the one-device reference failed", what);
    mine = (replica){.device = dev, .comm = comm, .setup = setup};
    share(comm, split, &mine.first, &mine.rows);
    replica_run(&mine);
    EXPECT(mine.status == UG_OK, "[%s] training: %s", what, mine.message);
    double d = replica_distance(&mine, &one);
    EXPECT(d < 1e-5, "[%s] the replica is %g from one device on the global batches", what, d);
    EXPECT(mine.skipped_steps == one.skipped_steps && (!setup.overflow_step || one.skipped_steps > 0),
           "[%s] skipped %lld steps, one device %lld", what, (long long)mine.skipped_steps,
           (long long)one.skipped_steps);
    float hashes[REPLICA_STEPS * 4]; /* 16 bits a float: exact in f32 */
    for (int s = 0; s < REPLICA_STEPS; s++)
        for (int k = 0; k < 4; k++)
            hashes[s * 4 + k] = (float)((mine.step_hash[s] >> (16 * k)) & 0xFFFF);
    EXPECT(same_everywhere(comm, dev, hashes, REPLICA_STEPS * 4), "[%s] the ranks' parameters differ after some step",
           what);
    replica_free(&mine);
}

/* The optimizer's state sharded over the ranks: the parameters the
 * unsharded run's bit for bit after every step, each rank's state its
 * share of the whole (at most a value a tensor off). */
static void shard_case(ug_comm *comm, ug_device *dev, replica_setup setup, const char *what)
{
    static replica whole, part;
    whole = (replica){.device = dev, .comm = comm, .setup = setup};
    share(comm, 3, &whole.first, &whole.rows);
    part = whole;
    part.setup.shard = true;
    replica_run(&whole);
    replica_run(&part);
    EXPECT(whole.status == UG_OK && part.status == UG_OK, "[%s] training: %s%s", what, whole.message, part.message);
    EXPECT(!memcmp(whole.step_hash, part.step_hash, sizeof whole.step_hash),
           "[%s] the sharded run's parameters differ from the unsharded run's", what);
    const int64_t size = ug_comm_size(comm), off = part.state_values * size - whole.state_values;
    EXPECT(whole.state_values > 0 && off >= -16 * size && off <= 16 * size,
           "[%s] this rank's sharded state holds %lld values of the whole %lld", what, (long long)part.state_values,
           (long long)whole.state_values);
    replica_free(&whole);
    replica_free(&part);
}

static void record_warning(const char *message, void *user)
{
    snprintf(user, 256, "%s", message);
}

/* A replica's buckets lie in a shared block; past the 16 blocks a rank
 * maps, they stay in the pool, with a warning saying why, and train the
 * same; blocks let go of are taken again. On a communicator of its own
 * (the refusals broke the first). */
static void shared_blocks_run_out(ug_device *dev)
{
    enum { MAPPED = 16 };
    static replica held[MAPPED + 1], one;
    char warning[256] = "";
    ug_comm *comm = NULL;
    if (ug_comm_mpi_create(dev, &comm) != UG_OK) {
        EXPECT(false, "[blocks] a communicator: %s", ug_last_error());
        return;
    }
    EXPECT(replica_reference(dev, &(replica_setup){0}, 3, &one), "[blocks] the one-device reference failed");
    ug_set_warning_handler(record_warning, warning);
    for (int i = 0; i <= MAPPED; i++) {
        held[i] = (replica){.device = dev, .comm = comm};
        share(comm, 3, &held[i].first, &held[i].rows);
        replica_run(&held[i]);
        EXPECT(held[i].status == UG_OK, "[blocks] replica %d: %s", i, held[i].message);
        EXPECT(!*warning == (i < MAPPED), "[blocks] replica %d: warned \"%s\"", i, warning);
    }
    EXPECT(strstr(warning, "not shared: this rank maps 16 shared blocks already"), "[blocks] warned \"%s\"",
           warning);
    double d = replica_distance(&held[MAPPED], &one);
    EXPECT(d < 1e-5, "[blocks] the replica in the pool is %g from one device", d);
    for (int i = 0; i <= MAPPED; i++)
        replica_free(&held[i]);
    *warning = '\0';
    held[0] = (replica){.device = dev, .comm = comm};
    share(comm, 3, &held[0].first, &held[0].rows);
    replica_run(&held[0]);
    EXPECT(held[0].status == UG_OK && !*warning, "[blocks] after the others were freed: %s; warned \"%s\"",
           held[0].message, warning);
    replica_free(&held[0]);
    replica_free(&one);
    ug_set_warning_handler(NULL, NULL);
    ug_comm_free(comm);
}

static void refused(ug_comm *comm, ug_device *dev, bool model, const char *expect)
{
    static replica mine;
    mine = (replica){.device = dev, .comm = comm, .rows = 4, .other_model = model && rank == 1,
                     .other_optimizer = !model && rank == 1};
    replica_run(&mine);
    EXPECT(mine.status == UG_ERR_INVALID_ARGUMENT && strstr(mine.message, expect),
           "another %s was not refused: %s", model ? "model" : "optimizer", mine.message);
    replica_free(&mine);
}

static void training(ug_comm *comm, ug_device *dev)
{
    replica_data();
    train_case(comm, dev, 3, (replica_setup){0}, "mlp");
    train_case(comm, dev, 5, (replica_setup){.cnn = true, .accumulate = true}, "cnn, accumulation");
    train_case(comm, dev, 3, (replica_setup){.clip = true, .after_backward = true}, "mlp, clipping, after backward");
    /* f16 gradients of other splits than 3 and 5 rows round otherwise
     * than one device's, by 1e-4. */
    if (ug_comm_size(comm) == 2)
        train_case(comm, dev, 3, (replica_setup){.f16 = true, .overflow_step = 7}, "mlp, f16, overflow on rank 1");
    shard_case(comm, dev, (replica_setup){.cnn = true, .accumulate = true}, "cnn, accumulation, sharded");
    refused(comm, dev, true, "another name or shape");
    refused(comm, dev, false, "rank 1's optimizer");
}

/* Rank 1 dies at step 3's start; rank 0 returns an error naming the wait. */
static void rank_killed(ug_comm *comm, ug_device *dev)
{
    const double timeout = 5.0;
    ug_comm_set_timeout(comm, timeout);
    replica_data();
    static replica mine;
    mine = (replica){.device = dev, .comm = comm, .first = rank ? 3 : 0, .rows = rank ? REPLICA_BATCH - 3 : 3,
                     .killed_at_step = rank ? 3 : 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    replica_run(&mine);
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    EXPECT(mine.status == UG_ERR_BACKEND && strstr(mine.message, "waited"),
           "training beside a killed rank returned %d: %s", mine.status, mine.message);
    /* Not a speed figure: a bound that tells an error from a hang. */
    EXPECT(seconds < timeout + 30.0, "the error came after %.1f s, the timeout being %g s", seconds, timeout);
    if (!failures)
        printf("rank 0: ok: rank 1 killed mid-run, this rank returned after %.1f s (timeout %g s): %s\n", seconds,
               timeout, mine.message);
    replica_free(&mine);
}

/* Options: --rank-killed; --collectives (only those, and the refusals,
 * on any number of ranks); --transport TEXT, a part of ug_comm_transport
 * expected; --mismatch CASE, that refusal case alone (create_first,
 * average, max, kind, broadcast_root, broadcast_count, gather_count,
 * count, dtype, create_later), to try each against another engine. */
int main(int argc, char **argv)
{
    bool killed = false, only_collectives = false;
    const char *transport = "shared memory among the 2 ranks of the machine", *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rank-killed"))
            killed = true;
        else if (!strcmp(argv[i], "--collectives"))
            only_collectives = true;
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc)
            transport = argv[++i];
        else if (!strcmp(argv[i], "--mismatch") && i + 1 < argc)
            only = argv[++i];
    }
    ug_device *dev = NULL;
    if (ug_device_open("cpu", &dev) != UG_OK) {
        fprintf(stderr, "setting up: %s\n", ug_last_error());
        return 1;
    }
    if (!killed && chosen(only, "create_first"))
        create_refused_first(dev);
    ug_comm *comm = NULL;
    if ((!only || strcmp(only, "create_first")) && ug_comm_mpi_create(dev, &comm) != UG_OK) {
        fprintf(stderr, "setting up: %s\n", ug_last_error());
        return 1;
    }
    if (comm) {
        rank = ug_comm_rank(comm);
        ug_comm_set_timeout(comm, 20.0); /* a failing check ends the run soon */
        EXPECT(ug_comm_size(comm) >= 2, "the world has %d rank (run with mpirun -np 2 or more)", ug_comm_size(comm));
        EXPECT(!strcmp(ug_comm_engine(comm), "MPI"), "the engine is %s", ug_comm_engine(comm));
        EXPECT(strstr(ug_comm_transport(comm), transport), "the all-reduces travel by \"%s\", not \"%s\"",
               ug_comm_transport(comm), transport);
    }
    if (!failures && killed) {
        rank_killed(comm, dev);
    } else if (!failures && only) {
        if (comm)
            mismatches(comm, dev, only);
        printf("rank %d: %s: %s\n", rank, only, failures ? "refused wrongly" : "ok");
    } else if (!failures) {
        collectives(comm, dev);
        split_checks(comm, dev);
        if (!only_collectives)
            training(comm, dev);
        mismatches(comm, dev, NULL);
        free_tells_nobody(dev);
        if (strstr(transport, "shared memory") && !only_collectives)
            shared_blocks_run_out(dev);
        printf("rank %d: ok: collectives, refusals%s (%s)\n", rank,
               only_collectives ? "" : ", training equal to one device", ug_comm_transport(comm));
    }
    if (failures)
        printf("rank %d: FAILED\n", rank);
    ug_comm_free(comm);
    ug_device_close(dev);
    return failures ? 1 : 0;
}
