/* The NCCL and RCCL engine: collectives on CUDA and HIP devices' memory,
 * in place and on the calling thread's stream, with no trip through the
 * host. The library is loaded at run time (libnccl.so.2 for "cuda"
 * devices, librccl.so.1 for "hip"): the few declarations it needs are
 * below, so nothing of NCCL is needed to build.
 *
 * A rank's NCCL communicator is made over a bootstrap communicator (MPI
 * across processes, or the in-process group), which it then owns: rank 0
 * draws the unique id and the bootstrap broadcasts it, and the bootstrap
 * carries the engine's host collectives (the checks of data_parallel.c,
 * the trainer's stop flag and shares). NCCL returns once a collective is
 * queued; each is waited for by polling an event recorded after it and
 * NCCL's asynchronous error, so a rank that died or a collective that
 * never completes becomes an error at the timeout: the communicator is
 * then aborted (ncclCommAbort) and broken. */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"

/* From nccl.h (RCCL's is the same): enums are int-sized in the ABI. */
enum { NCCL_ID_BYTES = 128, NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7, NCCL_FLOAT32 = 7 };
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_AVG = 4 };
enum { NCCL_OLDEST = 21000 }; /* 2.10: ncclAvg */
typedef struct nccl_id {
    char internal[NCCL_ID_BYTES];
} nccl_id;
typedef struct nccl_handle *nccl_comm;
typedef int nccl_result;

typedef struct nccl_library {
    const char *name;                   /* "NCCL", "RCCL" */
    const char *const *files;
    bool tried, usable;                 /* opened once; usable, or why says why not */
    void *handle;
    char why[256];
    nccl_result (*get_version)(int *version);
    nccl_result (*get_unique_id)(nccl_id *id);
    nccl_result (*comm_init_rank)(nccl_comm *comm, int ranks, nccl_id id, int rank);
    nccl_result (*comm_destroy)(nccl_comm comm);
    nccl_result (*comm_abort)(nccl_comm comm);
    nccl_result (*comm_get_async_error)(nccl_comm comm, nccl_result *error);
    const char *(*get_error_string)(nccl_result result);
    nccl_result (*all_reduce)(const void *send, void *recv, size_t count, int type, int op, nccl_comm comm,
                              void *stream);
    nccl_result (*broadcast)(const void *send, void *recv, size_t count, int type, int root, nccl_comm comm,
                             void *stream);
    nccl_result (*all_gather)(const void *send, void *recv, size_t count, int type, nccl_comm comm, void *stream);
    nccl_result (*reduce_scatter)(const void *send, void *recv, size_t count, int type, int op, nccl_comm comm,
                                  void *stream);
} nccl_library;

static const char *const nccl_files[] = {"libnccl.so.2", "libnccl.so", NULL};
static const char *const rccl_files[] = {"librccl.so.1", "librccl.so", NULL};
static nccl_library libraries[] = {{.name = "NCCL", .files = nccl_files}, {.name = "RCCL", .files = rccl_files}};
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* Opens lib and resolves what the engine calls; false with lib->why. A
 * library that falls short stays loaded: dlclose of a half-used library
 * is not worth its risk. */
static bool open_library(nccl_library *lib)
{
    for (int i = 0; !lib->handle && lib->files[i]; i++)
        lib->handle = dlopen(lib->files[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
        snprintf(lib->why, sizeof lib->why, "%s is not installed (%s: %s)", lib->name, lib->files[0], dlerror());
        return false;
    }
    struct { void **slot; const char *symbol; } wanted[] = {
        {(void **)&lib->get_version, "ncclGetVersion"},
        {(void **)&lib->get_unique_id, "ncclGetUniqueId"},
        {(void **)&lib->comm_init_rank, "ncclCommInitRank"},
        {(void **)&lib->comm_destroy, "ncclCommDestroy"},
        {(void **)&lib->comm_abort, "ncclCommAbort"},
        {(void **)&lib->comm_get_async_error, "ncclCommGetAsyncError"},
        {(void **)&lib->get_error_string, "ncclGetErrorString"},
        {(void **)&lib->all_reduce, "ncclAllReduce"},
        {(void **)&lib->broadcast, "ncclBroadcast"},
        {(void **)&lib->all_gather, "ncclAllGather"},
        {(void **)&lib->reduce_scatter, "ncclReduceScatter"},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        if (!(*wanted[i].slot = dlsym(lib->handle, wanted[i].symbol))) {
            snprintf(lib->why, sizeof lib->why, "%s has no %s: too old (2.10 or later is needed)", lib->name,
                     wanted[i].symbol);
            return false;
        }
    int version = 0;
    if (lib->get_version(&version) != NCCL_SUCCESS || version < NCCL_OLDEST) {
        snprintf(lib->why, sizeof lib->why, "%s is version %d; 2.10 (21000) or later is needed", lib->name, version);
        return false;
    }
    return true;
}

/* The library, opened once (kept for the process: NCCL's threads may
 * outlive a communicator); NULL with lib->why when it cannot be. */
static const nccl_library *load(nccl_library *lib)
{
    pthread_mutex_lock(&load_lock);
    if (!lib->tried)
        lib->usable = open_library(lib);
    lib->tried = true;
    pthread_mutex_unlock(&load_lock);
    return lib->usable ? lib : NULL;
}

/* One rank's state: the engine's group pointer. */
typedef struct nccl_rank {
    const nccl_library *lib;
    ug_comm *bootstrap;       /* owned: the host collectives */
    nccl_comm comm;           /* NULL once aborted */
    ug_event *done;           /* recorded after each collective */
    pthread_mutex_t lock;     /* broken and why: the side thread's and the rank's */
    bool broken;
    char why[512];
} nccl_rank;

static ug_comm *bootstrap_of(ug_comm *c)
{
    nccl_rank *r = c->group;
    r->bootstrap->timeout = c->timeout;
    return r->bootstrap;
}

static ug_status host_all_reduce(ug_comm *c, float *data, size_t n, ug_comm_op op)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->all_reduce(b, data, n, op);
}

/* Point-to-point through the bootstrap's engine (host-staged). */
static ug_status host_send(ug_comm *c, const void *data, size_t bytes, int dest)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->send(b, data, bytes, dest);
}

static ug_status host_recv(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->recv(b, data, capacity, source, bytes);
}

static ug_status host_broadcast(ug_comm *c, float *data, size_t n, int root)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->broadcast(b, data, n, root);
}

static ug_status host_all_gather(ug_comm *c, const float *in, size_t n, float *out)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->all_gather(b, in, n, out);
}

static ug_status host_reduce_scatter(ug_comm *c, const float *in, size_t n, float *out)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->reduce_scatter(b, in, n, out);
}

static ug_status host_barrier(ug_comm *c)
{
    ug_comm *b = bootstrap_of(c);
    return b->engine->barrier(b);
}

/* Broken from now on, with why; the other ranks' host collectives fail at
 * once (their NCCL ones at their timeout: NCCL cannot be told). */
static void fail(ug_comm *c, const char *why)
{
    nccl_rank *r = c->group;
    pthread_mutex_lock(&r->lock);
    if (!r->broken)
        snprintf(r->why, sizeof r->why, "%s", why);
    r->broken = true;
    pthread_mutex_unlock(&r->lock);
    r->bootstrap->engine->fail(r->bootstrap, why);
}

static void leave(ug_comm *c)
{
    nccl_rank *r = c->group;
    if (r->comm)
        r->lib->comm_destroy(r->comm);
    ug_event_free(r->done);
    ug_comm_free(r->bootstrap);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* An error of this rank: the group breaks with it. */
static ug_status breaks(ug_comm *c, ug_status st)
{
    fail(c, ug_last_error());
    return st;
}

static ug_status usable(ug_comm *c, const char *op)
{
    nccl_rank *r = c->group;
    pthread_mutex_lock(&r->lock);
    ug_status st = r->broken ? ug_set_error(UG_ERR_BACKEND, "%s: the communicator is broken: %s", op, r->why)
                             : UG_OK;
    pthread_mutex_unlock(&r->lock);
    return st;
}

static ug_status checked(ug_comm *c, nccl_result result, const char *call, const char *op)
{
    nccl_rank *r = c->group;
    if (result == NCCL_SUCCESS)
        return UG_OK;
    return breaks(c, ug_set_error(UG_ERR_BACKEND, "%s: %s failed on rank %d: %s (%d)", op, call, c->rank,
                                  r->lib->get_error_string(result), result));
}

/* Waits for the collective just queued: its event, or NCCL's error, or
 * the timeout, after which the communicator is aborted. */
static ug_status wait_done(ug_comm *c, const char *op)
{
    nccl_rank *r = c->group;
    ug_status st = ug_event_record(r->done, ug_stream_current(c->device));
    const double start = ug_seconds_now();
    for (bool done = false; st == UG_OK;) {
        st = ug_event_query(r->done, &done);
        if (st != UG_OK || done)
            break;
        nccl_result async = NCCL_SUCCESS;
        if (r->lib->comm_get_async_error(r->comm, &async) == NCCL_SUCCESS && async != NCCL_SUCCESS &&
            async != NCCL_IN_PROGRESS)
            st = ug_set_error(UG_ERR_BACKEND, "%s: %s reported on rank %d: %s (%d)", op, r->lib->name, c->rank,
                              r->lib->get_error_string(async), async);
        const double waited = ug_seconds_now() - start;
        if (st == UG_OK && waited > c->timeout)
            st = ug_set_error(UG_ERR_BACKEND, "%s: rank %d waited %g s for the other ranks in %s; raise the timeout "
                              "(ug_comm_set_timeout) if a rank is slow, or look for one that stopped", op, c->rank,
                              c->timeout, r->lib->name);
        if (st != UG_OK) {
            r->lib->comm_abort(r->comm); /* its kernels would wait for ever */
            r->comm = NULL;
            break;
        }
        if (waited > 1.0)
            nanosleep(&(struct timespec){0, 50000}, NULL);
        else
            sched_yield();
    }
    return st == UG_OK ? st : breaks(c, st);
}

/* A usable communicator, and t's device address and the thread's stream. */
static ug_status native(ug_comm *c, const ug_tensor *t, void **address, void **stream, const char *op)
{
    UG_TRY(usable(c, op));
    ug_status st = ug_call_native(c->device, t, address, stream, op);
    return st == UG_OK ? st : breaks(c, st);
}

static ug_status device_all_reduce(ug_comm *c, ug_tensor *t, ug_comm_op op)
{
    const char *name = "ug_comm_all_reduce";
    nccl_rank *r = c->group;
    void *address = NULL, *stream = NULL;
    UG_TRY(native(c, t, &address, &stream, name));
    const int nccl_op = op == UG_COMM_MAX ? NCCL_MAX : op == UG_COMM_AVERAGE ? NCCL_AVG : NCCL_SUM;
    UG_TRY(checked(c, r->lib->all_reduce(address, address, (size_t)ug_tensor_numel(t), NCCL_FLOAT32, nccl_op,
                                         r->comm, stream), "ncclAllReduce", name));
    return wait_done(c, name);
}

static ug_status device_broadcast(ug_comm *c, ug_tensor *t, int root)
{
    const char *name = "ug_comm_broadcast";
    nccl_rank *r = c->group;
    void *address = NULL, *stream = NULL;
    UG_TRY(native(c, t, &address, &stream, name));
    UG_TRY(checked(c, r->lib->broadcast(address, address, (size_t)ug_tensor_numel(t), NCCL_FLOAT32, root, r->comm,
                                        stream), "ncclBroadcast", name));
    return wait_done(c, name);
}

static ug_status device_all_gather(ug_comm *c, const ug_tensor *in, ug_tensor *out)
{
    const char *name = "ug_comm_all_gather";
    nccl_rank *r = c->group;
    void *send = NULL, *recv = NULL, *stream = NULL;
    UG_TRY(native(c, in, &send, &stream, name));
    UG_TRY(native(c, out, &recv, &stream, name));
    UG_TRY(checked(c, r->lib->all_gather(send, recv, (size_t)ug_tensor_numel(in), NCCL_FLOAT32, r->comm, stream),
                   "ncclAllGather", name));
    return wait_done(c, name);
}

static ug_status device_reduce_scatter(ug_comm *c, const ug_tensor *in, ug_tensor *out)
{
    const char *name = "ug_comm_reduce_scatter";
    nccl_rank *r = c->group;
    void *send = NULL, *recv = NULL, *stream = NULL;
    UG_TRY(native(c, in, &send, &stream, name));
    UG_TRY(native(c, out, &recv, &stream, name));
    UG_TRY(checked(c, r->lib->reduce_scatter(send, recv, (size_t)ug_tensor_numel(out), NCCL_FLOAT32, NCCL_SUM,
                                             r->comm, stream), "ncclReduceScatter", name));
    return wait_done(c, name);
}

/* One engine, named after its library (ug_comm_engine). */
#define NCCL_ENGINE(NAME)                                                                                     \
    {.name = NAME, .all_reduce = host_all_reduce, .broadcast = host_broadcast, .all_gather = host_all_gather, \
     .reduce_scatter = host_reduce_scatter, .barrier = host_barrier, .fail = fail, .leave = leave,            \
     .device_all_reduce = device_all_reduce, .device_broadcast = device_broadcast,                            \
     .device_all_gather = device_all_gather, .device_reduce_scatter = device_reduce_scatter,                  \
     .send = host_send, .recv = host_recv}
static const comm_engine nccl_engine = NCCL_ENGINE("NCCL"), rccl_engine = NCCL_ENGINE("RCCL");
#undef NCCL_ENGINE

/* This rank's library, or why not; then every rank learns whether all
 * have theirs, and all refuse together if not, the bootstrap still whole
 * (the program may go on with it). */
static ug_status agree_on_library(ug_comm *boot, const nccl_library **lib, const char *op)
{
    const char *backend = boot->device->info.backend;
    ug_status st = UG_OK;
    char mine[384] = "";
    if (!strcmp(backend, "cuda") || !strcmp(backend, "hip")) {
        nccl_library *wanted = &libraries[strcmp(backend, "cuda") ? 1 : 0];
        if (!(*lib = load(wanted)))
            st = ug_set_error(UG_ERR_UNSUPPORTED, "%s: rank %d: %s", op, boot->rank, wanted->why);
    } else {
        st = ug_set_error(UG_ERR_UNSUPPORTED, "%s: rank %d is on %s; NCCL and RCCL work on CUDA and HIP devices' "
                          "memory (the bootstrap communicator itself serves the others)", op, boot->rank,
                          boot->device->info.id);
    }
    if (st != UG_OK)
        snprintf(mine, sizeof mine, "%s", ug_last_error());
    float ready = st == UG_OK ? 1.0f : 0.0f;
    UG_TRY(boot->engine->all_reduce(boot, &ready, 1, UG_COMM_SUM));
    if (st != UG_OK)
        return ug_set_error(st, "%s", mine);
    if (ready < (float)boot->size)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: %.0f of the %d ranks cannot use %s (their errors say why)", op,
                            (double)boot->size - (double)ready, boot->size, (*lib)->name);
    return UG_OK;
}

/* Rank 0's unique id on every rank: 16 bits a float, exact through any engine. */
static ug_status share_id(ug_comm *boot, const nccl_library *lib, nccl_id *id, const char *op)
{
    float carried[NCCL_ID_BYTES / 2];
    if (boot->rank == 0) {
        nccl_result result = lib->get_unique_id(id);
        if (result != NCCL_SUCCESS) {
            ug_status st = ug_set_error(UG_ERR_BACKEND, "%s: ncclGetUniqueId failed: %s (%d)", op,
                                        lib->get_error_string(result), result);
            boot->engine->fail(boot, ug_last_error());
            return st;
        }
        const unsigned char *bytes = (const unsigned char *)id->internal;
        for (int i = 0; i < NCCL_ID_BYTES / 2; i++)
            carried[i] = (float)(bytes[2 * i] | bytes[2 * i + 1] << 8);
    }
    UG_TRY(boot->engine->broadcast(boot, carried, NCCL_ID_BYTES / 2, 0));
    for (int i = 0; i < NCCL_ID_BYTES / 2; i++) {
        unsigned v = (unsigned)carried[i];
        id->internal[2 * i] = (char)(v & 0xFF);
        id->internal[2 * i + 1] = (char)(v >> 8);
    }
    return UG_OK;
}

ug_status ug_comm_nccl_create(ug_comm *bootstrap, ug_comm **out)
{
    const char *op = "ug_comm_nccl_create";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!bootstrap)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: bootstrap is NULL", op);
    if (bootstrap->engine == &nccl_engine || bootstrap->engine == &rccl_engine)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the bootstrap is itself an %s communicator; give the MPI "
                            "or in-process one it was made over", op, bootstrap->engine->name);
    const nccl_library *lib = NULL;
    UG_TRY(agree_on_library(bootstrap, &lib, op));
    nccl_id id;
    UG_TRY(share_id(bootstrap, lib, &id, op));
    nccl_rank *r = ug_calloc(1, sizeof *r);
    ug_comm *c = ug_calloc(1, sizeof *c);
    void *address = NULL, *stream = NULL;
    ug_status st = r && c ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (st == UG_OK) /* NCCL takes the thread's current device */
        st = ug_call_native(bootstrap->device, NULL, &address, &stream, op);
    if (st == UG_OK)
        st = ug_event_create(bootstrap->device, false, &r->done);
    nccl_result result = NCCL_SUCCESS;
    if (st == UG_OK && (result = lib->comm_init_rank(&r->comm, bootstrap->size, id, bootstrap->rank)) != NCCL_SUCCESS)
        st = ug_set_error(UG_ERR_BACKEND, "%s: ncclCommInitRank failed on rank %d: %s (%d)", op, bootstrap->rank,
                          lib->get_error_string(result), result);
    /* All made it, or all return (e.g. NCCL refuses two ranks on one
     * GPU): the bootstrap then stays the caller's, whole. */
    char mine[512] = "";
    if (st != UG_OK)
        snprintf(mine, sizeof mine, "%s", ug_last_error());
    float made = st == UG_OK ? 1.0f : 0.0f;
    ug_status agreed = bootstrap->engine->all_reduce(bootstrap, &made, 1, UG_COMM_SUM);
    if (agreed != UG_OK)
        st = agreed;
    else if (st != UG_OK)
        st = ug_set_error(st, "%s", mine);
    else if (made < (float)bootstrap->size)
        st = ug_set_error(UG_ERR_BACKEND, "%s: ncclCommInitRank failed on %.0f of the %d ranks (their errors say "
                          "why)", op, (double)bootstrap->size - (double)made, bootstrap->size);
    if (st != UG_OK) {
        if (r && r->comm)
            lib->comm_destroy(r->comm);
        if (r)
            ug_event_free(r->done);
        free(r);
        free(c);
        return st;
    }
    r->lib = lib;
    r->bootstrap = bootstrap;
    pthread_mutex_init(&r->lock, NULL);
    ug_device_retain(bootstrap->device);
    *c = (ug_comm){.engine = lib == &libraries[0] ? &nccl_engine : &rccl_engine, .group = r,
                   .rank = bootstrap->rank, .size = bootstrap->size, .device = bootstrap->device,
                   .timeout = bootstrap->timeout, .side_allowed = true};
    *out = c;
    return UG_OK;
}
