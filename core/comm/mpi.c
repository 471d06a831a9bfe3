/* The MPI engine (comm.h's ug_comm_mpi_create): one rank per process,
 * started by mpirun, its collectives in libunigrad-mpi.so (mpi_module.h),
 * which is loaded here and nowhere else. After a collective fails (a
 * timeout, an MPI error) the rank cannot tell where the others stand: its
 * communicator is broken and refuses every later call. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/comm/mpi_module.h"
#include "core/runtime/internal.h"
#include "core/runtime/module.h"

typedef struct mpi_group {
    const ug_mpi_module *module;
    bool broken;
    char why[384];
} mpi_group;

/* Runs call; counts is the most floats a rank sends or receives in it. */
static ug_status run(ug_comm *c, const char *op, size_t counts, size_t n,
                     int (*call)(ug_comm *c, size_t n, void *args, char *why, size_t len), void *args)
{
    mpi_group *g = c->group;
    if (g->broken)
        return ug_set_error(UG_ERR_BACKEND, "%s: the communicator is broken: %s", op, g->why);
    if (counts > INT_MAX) {
        g->broken = true;
        snprintf(g->why, sizeof g->why, "rank %d: %s of %zu elements: MPI counts stop at %d", c->rank, op, counts,
                 INT_MAX);
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s", g->why);
    }
    if (call(c, n, args, g->why, sizeof g->why) == 0)
        return UG_OK;
    g->broken = true;
    return ug_set_error(UG_ERR_BACKEND, "%s: %s", op, g->why);
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
    return ((mpi_group *)c->group)->module->all_reduce(x->data, n, x->op, c->timeout, why, len);
}
static int do_broadcast(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    return ((mpi_group *)c->group)->module->broadcast(x->data, n, x->root, c->timeout, why, len);
}
static int do_all_gather(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    call_args *x = a;
    return ((mpi_group *)c->group)->module->all_gather(x->in, n, x->data, c->timeout, why, len);
}
static int do_barrier(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    (void)n;
    (void)a;
    return ((mpi_group *)c->group)->module->barrier(c->timeout, why, len);
}

static int do_shared_block(ug_comm *c, size_t n, void *a, char *why, size_t len)
{
    return ((mpi_group *)c->group)->module->shared_block(n, c->timeout, ((call_args *)a)->block, why, len);
}

static ug_status mpi_all_reduce(ug_comm *c, float *data, size_t n, ug_comm_op op)
{
    return run(c, "ug_comm_all_reduce", n, n, do_all_reduce, &(call_args){.data = data, .op = (int)op});
}
static ug_status mpi_broadcast(ug_comm *c, float *data, size_t n, int root)
{
    return run(c, "ug_comm_broadcast", n, n, do_broadcast, &(call_args){.data = data, .root = root});
}
static ug_status mpi_all_gather(ug_comm *c, const float *in, size_t n, float *out)
{
    return run(c, "ug_comm_all_gather", n * (size_t)c->size, n, do_all_gather,
               &(call_args){.data = out, .in = in});
}
static ug_status mpi_barrier(ug_comm *c) { return run(c, "ug_comm_barrier", 0, 0, do_barrier, NULL); }

/* A refused rank cannot tell the others (they wait until their timeout):
 * it only stops taking part. */
static void mpi_fail(ug_comm *c, const char *why)
{
    mpi_group *g = c->group;
    if (!g->broken)
        snprintf(g->why, sizeof g->why, "rank %d: %s", c->rank, why);
    g->broken = true;
}

static void mpi_leave(ug_comm *c) { free(c->group); }

static ug_status mpi_bucket_memory(ug_comm *c, size_t bytes, ug_storage **out)
{
    mpi_group *g = c->group;
    void *block = NULL;
    *out = NULL;
    if (!g->broken) /* (run keeps its text then) */
        g->why[0] = '\0';
    UG_TRY(run(c, "ug_comm_run_backward", 0, bytes, do_shared_block, &(call_args){.block = &block}));
    if (!block && g->why[0])
        ug_warn("rank %d: the gradient buckets are copied to be all-reduced, not shared: %s", c->rank, g->why);
    ug_status st = block ? ug_storage_over_host(c->device, block, bytes, g->module->shared_block_free, out) : UG_OK;
    if (st != UG_OK)
        g->module->shared_block_free(block);
    return st;
}

static const char *mpi_transport(const ug_comm *c) { return ((mpi_group *)c->group)->module->transport(); }

static const comm_engine mpi_engine = {.name = "MPI", .all_reduce = mpi_all_reduce, .broadcast = mpi_broadcast,
                                       .all_gather = mpi_all_gather, .barrier = mpi_barrier, .fail = mpi_fail,
                                       .leave = mpi_leave, .transport = mpi_transport,
                                       .bucket_memory = mpi_bucket_memory};

ug_status ug_comm_mpi_create(ug_device *device, ug_comm **out)
{
    const char *op = "ug_comm_mpi_create";
    if (!device || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, device ? "out" : "device");
    *out = NULL;
    char path[4096], reason[512];
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
    if (!g || !c) {
        free(g);
        free(c);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    g->module = module;
    int rank = 0, size = 0, any_thread = 0;
    if (module->init(&rank, &size, &any_thread, reason, sizeof reason) != 0) {
        free(g);
        free(c);
        return ug_set_error(UG_ERR_BACKEND, "%s: %s", op, reason);
    }
    ug_device_retain(device);
    *c = (ug_comm){.engine = &mpi_engine, .group = g, .rank = rank, .size = size, .device = device,
                   .timeout = 300.0, .side_allowed = any_thread != 0};
    *out = c;
    return UG_OK;
}
