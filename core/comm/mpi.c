/* The MPI engine (comm.h's ug_comm_mpi_create): one rank per process,
 * started by mpirun, its collectives in libunigrad-mpi.so (mpi_module.h),
 * which is loaded here and nowhere else.
 *
 * Every collective, and the creation, starts with the ranks' agreement on
 * what each was asked (the module's agree, one small all-reduce more per
 * collective): ranks that ask for different counts, ops, roots or
 * collectives are all refused, with UG_ERR_INVALID_ARGUMENT saying what
 * differed on which ranks, before any buffer is touched, and the
 * communicator stays usable, as nothing was done. A rank whose own
 * arguments were refused (fail) cannot take part: the others, waiting in
 * that agreement, hear of it from the rank's next call to the engine or
 * from its ug_comm_free, and every rank is broken from then on, as after
 * a collective that failed (a timeout, an MPI error), where a rank cannot
 * tell where the others stand and refuses every later call. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/comm/mpi_module.h"
#include "core/runtime/internal.h"
#include "core/runtime/module.h"

enum { WHY = 384 };
static const double default_timeout = 300.0;

typedef struct mpi_group {
    const ug_mpi_module *module;
    ug_mpi_comm *comm;        /* the world, or one split from it (freed with the group) */
    pthread_mutex_t lock;     /* the fields below: fail may come from any thread */
    bool broken;
    char why[WHY];            /* why it is broken, for later calls' messages */
    bool untold;              /* broken by this rank's refusal, which the others wait to hear of */
    char refusal[WHY];        /* that refusal, as they will read it */
} mpi_group;

/* Breaks the group (the first reason stays); refusal, when not NULL, is
 * this rank's, which the others are yet to be told. */
static void break_group(mpi_group *g, const char *why, const char *refusal)
{
    pthread_mutex_lock(&g->lock);
    if (!g->broken) {
        g->broken = true;
        snprintf(g->why, sizeof g->why, "%s", why);
        g->untold = refusal != NULL;
        snprintf(g->refusal, sizeof g->refusal, "%s", refusal ? refusal : "");
    }
    pthread_mutex_unlock(&g->lock);
}

/* Whether the group is broken, with why; *refusal receives this rank's
 * refusal when the others have not been told of it (the caller tells
 * them, once), else "". */
static bool is_broken(mpi_group *g, char *why, size_t len, char refusal[WHY])
{
    pthread_mutex_lock(&g->lock);
    const bool broken = g->broken;
    if (broken)
        snprintf(why, len, "%s", g->why);
    snprintf(refusal, WHY, "%s", g->untold ? g->refusal : "");
    g->untold = false;
    pthread_mutex_unlock(&g->lock);
    return broken;
}

/* Tells the other ranks, waiting in the agreement of the collective this
 * rank could not take part in, why: their verdict is then a refusal. */
static void tell(ug_comm *c, const char *refusal)
{
    char ignored[512];
    mpi_group *g = c->group;
    g->module->agree(g->comm, &(ug_mpi_call){0}, refusal, c->timeout, ignored, sizeof ignored);
}

typedef int payload_fn(ug_comm *c, size_t n, void *args, char *why, size_t len);

/* Agrees on call with the other ranks, then runs payload (none: the
 * agreement is the whole collective); counts is the most floats a rank
 * sends or receives in it. why receives the module's text, a shared
 * block's reason for declining included. */
static ug_status run(ug_comm *c, const char *op, ug_mpi_call call, size_t counts, size_t n, payload_fn *payload,
                     void *args, char *why, size_t len)
{
    mpi_group *g = c->group;
    char refusal[WHY];
    if (is_broken(g, why, len, refusal)) {
        if (*refusal) /* the others wait for this rank here */
            tell(c, refusal);
        return ug_set_error(UG_ERR_BACKEND, "%s: the communicator is broken: %s", op, why);
    }
    if (counts > INT_MAX) { /* refused here and, through the agreement, there */
        snprintf(refusal, sizeof refusal, "%s of %zu elements: MPI counts stop at %d", op, counts, INT_MAX);
        tell(c, refusal);
        snprintf(why, len, "rank %d: %.300s", c->rank, refusal);
        break_group(g, why, NULL);
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s", why);
    }
    const int verdict = g->module->agree(g->comm, &call, NULL, c->timeout, why, len);
    if (verdict == UG_MPI_DIFFER)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op, why);
    if (verdict == UG_MPI_AGREED && (!payload || payload(c, n, args, why, len) == 0))
        return UG_OK;
    break_group(g, why, NULL);
    return ug_set_error(UG_ERR_BACKEND, "%s: %s", op, why);
}

typedef struct call_args {
    float *data;
    const float *in;
    int op, root;
    void **block;
} call_args;

static int do_all_reduce(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    mpi_group *g = c->group;
    return g->module->all_reduce(g->comm, x->data, n, x->op, c->timeout, why, len);
}
static int do_broadcast(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    mpi_group *g = c->group;
    return g->module->broadcast(g->comm, x->data, n, x->root, c->timeout, why, len);
}
static int do_all_gather(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    mpi_group *g = c->group;
    return g->module->all_gather(g->comm, x->in, n, x->data, c->timeout, why, len);
}
static int do_reduce_scatter(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    mpi_group *g = c->group;
    return g->module->reduce_scatter(g->comm, x->in, n, x->data, c->timeout, why, len);
}
static int do_shared_block(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    mpi_group *g = c->group;
    return g->module->shared_block(g->comm, n, c->timeout, ((call_args *)a)->block, why, len);
}

static int64_t count_of(size_t n) { return n > INT64_MAX ? INT64_MAX : (int64_t)n; }

static ug_status mpi_all_reduce(ug_comm *c, float *data, size_t n, ug_comm_op op)
{
    char why[WHY];
    return run(c, "ug_comm_all_reduce", (ug_mpi_call){.kind = UG_MPI_ALL_REDUCE, .count = count_of(n), .op = (int)op},
               n, n, do_all_reduce, &(call_args){.data = data, .op = (int)op}, why, sizeof why);
}
static ug_status mpi_broadcast(ug_comm *c, float *data, size_t n, int root)
{
    char why[WHY];
    return run(c, "ug_comm_broadcast", (ug_mpi_call){.kind = UG_MPI_BROADCAST, .count = count_of(n), .root = root}, n,
               n, do_broadcast, &(call_args){.data = data, .root = root}, why, sizeof why);
}
static ug_status mpi_all_gather(ug_comm *c, const float *in, size_t n, float *out)
{
    char why[WHY];
    return run(c, "ug_comm_all_gather", (ug_mpi_call){.kind = UG_MPI_ALL_GATHER, .count = count_of(n)},
               n * (size_t)c->size, n, do_all_gather, &(call_args){.data = out, .in = in}, why, sizeof why);
}
static ug_status mpi_reduce_scatter(ug_comm *c, const float *in, size_t n, float *out)
{
    char why[WHY];
    return run(c, "ug_comm_reduce_scatter", (ug_mpi_call){.kind = UG_MPI_REDUCE_SCATTER, .count = count_of(n)},
               n * (size_t)c->size, n, do_reduce_scatter, &(call_args){.data = out, .in = in}, why, sizeof why);
}
/* The agreement alone: an all-reduce returns on no rank before every
 * rank has come to it. */
static ug_status mpi_barrier(ug_comm *c)
{
    char why[WHY];
    return run(c, "ug_comm_barrier", (ug_mpi_call){.kind = UG_MPI_BARRIER}, 0, 0, NULL, NULL, why, sizeof why);
}

/* This rank cannot take part in the collective the others are in. It
 * tells them at its next call to the engine (run, on whichever thread
 * makes it) or at ug_comm_free (mpi_leave): there, and not here, it is
 * the one thread of the rank calling MPI, in the others' order. */
static void mpi_fail(ug_comm *c, const char *why)
{
    char text[WHY];
    snprintf(text, sizeof text, "rank %d: %.360s", c->rank, why);
    /* ug_comm_free's own call is no refusal: the others are in no
     * collective with this rank to be told of, and telling them anyway
     * would take the place of a later collective of theirs. */
    break_group(c->group, text, strcmp(why, UG_COMM_LEAVING) ? why : NULL);
}

static void mpi_leave(ug_comm *c)
{
    mpi_group *g = c->group;
    char why[WHY], refusal[WHY];
    if (is_broken(g, why, sizeof why, refusal) && *refusal)
        tell(c, refusal);
    g->module->comm_free(g->comm);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static ug_status mpi_bucket_memory(ug_comm *c, size_t bytes, ug_storage **out)
{
    mpi_group *g = c->group;
    void *block = NULL;
    char why[WHY] = "";
    *out = NULL;
    UG_TRY(run(c, "ug_comm_run_backward", (ug_mpi_call){.kind = UG_MPI_SHARED_BLOCK}, 0, bytes, do_shared_block,
               &(call_args){.block = &block}, why, sizeof why));
    if (!block && why[0])
        ug_warn("rank %d: the gradient buckets are copied to be all-reduced, not shared: %s", c->rank, why);
    ug_status st = block ? ug_storage_over_host(c->device, block, bytes, g->module->shared_block_free, out) : UG_OK;
    if (st != UG_OK)
        g->module->shared_block_free(block);
    return st;
}

/* Point-to-point needs no agreement; a failed one (a timeout, an MPI
 * error) breaks the group as a failed collective does. */
static ug_status p2p_failed(ug_comm *c, const char *op, const char *why)
{
    char text[WHY];
    snprintf(text, sizeof text, "rank %d: %.360s", c->rank, why);
    break_group(c->group, text, NULL);
    return ug_set_error(UG_ERR_BACKEND, "%s: %s", op, why);
}

static ug_status mpi_send(ug_comm *c, const void *data, size_t bytes, int dest)
{
    mpi_group *g = c->group;
    char why[WHY], refusal[WHY];
    if (is_broken(g, why, sizeof why, refusal))
        return ug_set_error(UG_ERR_BACKEND, "ug_comm_send: the communicator is broken: %s", why);
    if (g->module->send(g->comm, data, bytes, dest, why, sizeof why))
        return p2p_failed(c, "ug_comm_send", why);
    return UG_OK;
}

static ug_status mpi_recv(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes)
{
    mpi_group *g = c->group;
    char why[WHY], refusal[WHY];
    if (is_broken(g, why, sizeof why, refusal))
        return ug_set_error(UG_ERR_BACKEND, "ug_comm_recv: the communicator is broken: %s", why);
    const int rc = g->module->recv(g->comm, data, capacity, source, bytes, c->timeout, why, sizeof why);
    if (rc == 2)
        return ug_set_error(UG_ERR_SHAPE, "ug_comm_recv: rank %d sent %zu bytes, more than the %zu received into",
                            source, *bytes, capacity);
    return rc ? p2p_failed(c, "ug_comm_recv", why) : UG_OK;
}

static const char *mpi_transport(const ug_comm *c)
{
    const mpi_group *g = c->group;
    return g->module->transport(g->comm);
}

/* Agreed first, so that MPI_Comm_split, which waits with no timeout,
 * starts only once every rank is there. */
static ug_status mpi_split(ug_comm *c, int color, int key, ug_comm *made)
{
    mpi_group *g = c->group, *part = ug_calloc(1, sizeof *part);
    char why[WHY];
    if (!part) { /* refused in the agreement, so no rank goes on to wait for this one */
        tell(c, "ug_comm_split: out of host memory");
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_split: out of host memory");
    }
    ug_status st = run(c, "ug_comm_split", (ug_mpi_call){.kind = UG_MPI_SPLIT}, 0, 0, NULL, NULL, why, sizeof why);
    if (st == UG_OK && g->module->split(g->comm, color, key, &part->comm, &made->rank, &made->size, why, sizeof why)) {
        break_group(g, why, NULL);
        st = ug_set_error(UG_ERR_BACKEND, "ug_comm_split: %s", why);
    }
    if (st != UG_OK) {
        free(part);
        return st;
    }
    part->module = g->module;
    pthread_mutex_init(&part->lock, NULL);
    made->group = part;
    return UG_OK;
}

static const comm_engine mpi_engine = {.name = "MPI", .all_reduce = mpi_all_reduce, .broadcast = mpi_broadcast,
                                       .all_gather = mpi_all_gather, .reduce_scatter = mpi_reduce_scatter,
                                       .barrier = mpi_barrier, .fail = mpi_fail,
                                       .leave = mpi_leave, .transport = mpi_transport,
                                       .send = mpi_send, .recv = mpi_recv, .split = mpi_split,
                                       .bucket_memory = mpi_bucket_memory};

/* A collective: a rank that refuses (its arguments, its memory) still
 * brings its refusal to the ranks' agreement once MPI is up, so that every
 * rank returns an error, rather than the others going on to wait for it.
 * (Only a rank that cannot load the module cannot tell them.) */
ug_status ug_comm_mpi_create(ug_device *device, ug_comm **out)
{
    const char *op = "ug_comm_mpi_create";
    if (out)
        *out = NULL;
    ug_status own = UG_OK;
    char own_why[WHY] = "", path[4096], reason[512];
    if (!device || !out) {
        own = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, device ? "out" : "device");
        snprintf(own_why, sizeof own_why, "%s", ug_last_error());
    }
    void *handle = ug_module_open("mpi", path, sizeof path, reason, sizeof reason);
    if (!handle)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: %s (unigrad is built with MPI when Open MPI is installed: "
                            "Debian's libopenmpi-dev)", op, reason);
    ug_mpi_module_entry_fn *entry;
    void *symbol = dlsym(handle, UG_MPI_MODULE_ENTRY);
    memcpy(&entry, &symbol, sizeof entry); /* object to function pointer, as POSIX allows */
    const ug_mpi_module *module = entry ? entry() : NULL;
    if (!module || module->version != UG_MPI_MODULE_VERSION)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: %s is not this libunigrad's MPI module (rebuild them together)",
                            op, path);
    mpi_group *g = ug_calloc(1, sizeof *g);
    ug_comm *c = ug_calloc(1, sizeof *c);
    if ((!g || !c) && own == UG_OK) {
        own = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        snprintf(own_why, sizeof own_why, "%s", ug_last_error());
    }
    int rank = 0, size = 0, any_thread = 0;
    ug_mpi_comm *world = NULL;
    const int verdict = module->init(own != UG_OK ? own_why : NULL, default_timeout, &world, &rank, &size,
                                     &any_thread, reason, sizeof reason);
    if (own != UG_OK || verdict != UG_MPI_AGREED) {
        free(g);
        free(c);
        if (own != UG_OK)
            return ug_set_error(own, "%s", own_why);
        return ug_set_error(verdict == UG_MPI_DIFFER || verdict == UG_MPI_OWN_SETTING ? UG_ERR_INVALID_ARGUMENT
                                                                                      : UG_ERR_BACKEND,
                            "%s: %s", op, reason);
    }
    g->module = module;
    g->comm = world;
    pthread_mutex_init(&g->lock, NULL);
    ug_device_retain(device);
    *c = (ug_comm){.engine = &mpi_engine, .group = g, .rank = rank, .size = size, .device = device,
                   .timeout = default_timeout, .side_allowed = any_thread != 0};
    *out = c;
    return UG_OK;
}
