/* Communicators (comm.h): argument checks, and device tensors staged
 * through this rank's host buffer for the engine's collectives (host
 * memory, the CPU backend's, is worked on in place). The staging waits
 * for the tensor's device (a download on the thread's current stream) and
 * queues the result back (an upload on it). A rank
 * that cannot take part (its arguments refused, its download failed)
 * breaks the group, so the others return at once with its reason. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/model/internal.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"
#include "unigrad/ops.h"

enum { MAX_LOCAL_RANKS = 64 };
static const double default_timeout = 300.0;

ug_status ug_comm_local_create(int count, ug_device *const *devices, ug_comm **ranks)
{
    if (!devices || !ranks)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_local_create: %s is NULL", devices ? "ranks" : "devices");
    if (count < 1 || count > MAX_LOCAL_RANKS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_local_create: %d ranks; a group has 1 to %d", count,
                            MAX_LOCAL_RANKS);
    for (int i = 0; i < count; i++)
        if (!devices[i])
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_local_create: devices[%d] is NULL", i);
    void *group = ug_comm_local_group(count);
    ug_comm *made[MAX_LOCAL_RANKS] = {NULL};
    bool ok = group != NULL;
    for (int i = 0; ok && i < count; i++)
        ok = (made[i] = ug_calloc(1, sizeof *made[i])) != NULL;
    if (!ok) {
        for (int i = 0; i < count; i++)
            free(made[i]);
        free(group);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_local_create: out of host memory");
    }
    for (int i = 0; i < count; i++) {
        ug_device_retain(devices[i]);
        *made[i] = (ug_comm){.engine = &ug_comm_local_engine, .group = group, .rank = i, .size = count,
                             .device = devices[i], .timeout = default_timeout, .side_allowed = true};
        ranks[i] = made[i];
    }
    return UG_OK;
}

ug_status ug_comm_split(ug_comm *c, int color, int key, ug_device *device, ug_comm **out)
{
    const char *op = "ug_comm_split";
    if (!c || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "out" : "comm");
    *out = NULL;
    if (!c->engine->split)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s engine cannot split; split its bootstrap communicator "
                            "and make one over each part (ug_comm_nccl_create)", op, c->engine->name);
    ug_comm *made = ug_calloc(1, sizeof *made);
    ug_status st = made ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    /* (colors and keys travel as floats through the host collectives) */
    if (st == UG_OK && (color < 0 || color >= 1 << 24 || key < -(1 << 24) || key > 1 << 24))
        st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: color %d, key %d; give a color of 0 to %d and a key of "
                          "-%d to %d", op, color, key, (1 << 24) - 1, 1 << 24, 1 << 24);
    if (st != UG_OK) { /* the others must not wait for this rank */
        c->engine->fail(c, ug_last_error());
        free(made);
        return st;
    }
    *made = (ug_comm){.engine = c->engine, .device = device ? device : c->device, .timeout = c->timeout,
                      .side_allowed = c->side_allowed, .overlap_off = c->overlap_off};
    if ((st = c->engine->split(c, color, key, made)) != UG_OK) {
        free(made);
        return st;
    }
    ug_device_retain(made->device);
    *out = made;
    return UG_OK;
}

void ug_comm_free(ug_comm *c)
{
    if (!c)
        return;
    /* The others' collectives with this rank fail from now on, this
     * rank's communication thread's too, which can then end. */
    c->engine->fail(c, UG_COMM_LEAVING);
    ug_comm_side_stop(c);
    ug_comm_data_parallel_free(c);
    c->engine->leave(c);
    ug_comm_free_staging(c, c->staging);
    ug_device_close(c->device);
    free(c);
}

int ug_comm_rank(const ug_comm *c) { return c ? c->rank : -1; }
int ug_comm_size(const ug_comm *c) { return c ? c->size : 0; }
ug_device *ug_comm_device(const ug_comm *c) { return c ? c->device : NULL; }
const char *ug_comm_engine(const ug_comm *c) { return c ? c->engine->name : "(null)"; }
const char *ug_comm_transport(const ug_comm *c)
{
    return !c ? "(null)" : c->engine->transport ? c->engine->transport(c) : c->engine->name;
}

ug_status ug_comm_set_timeout(ug_comm *c, double seconds)
{
    if (!c)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_set_timeout: comm is NULL");
    if (!(seconds > 0.0 && seconds <= 1e7))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_set_timeout: %g s; give seconds above 0", seconds);
    c->timeout = seconds;
    return UG_OK;
}

ug_status ug_comm_set_overlap(ug_comm *c, bool overlap)
{
    if (!c)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_set_overlap: comm is NULL");
    c->overlap_off = !overlap;
    return UG_OK;
}

/* A refusal on this rank breaks the group, so the other ranks, waiting
 * in the same collective, return at once with its reason. */
static ug_status refuse(ug_comm *c, ug_status st)
{
    c->engine->fail(c, ug_last_error());
    return st;
}

/* A tensor a collective takes: f32 on this rank's device. */
static ug_status check_tensor(ug_comm *c, const ug_tensor *t, const char *op, const char *name)
{
    if (!c)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);
    if (!t)
        return refuse(c, ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name));
    if (t->dtype != UG_F32)
        return refuse(c, ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; collectives take f32 (cast it first)", op,
                                      name, ug_dtype_name(t->dtype)));
    if (t->storage->device != c->device)
        return refuse(c, ug_set_error(UG_ERR_DEVICE, "%s: %s is on %s, rank %d on %s", op, name,
                                      t->storage->device->info.id, c->rank, c->device->info.id));
    return UG_OK;
}

/* A staging buffer of at least need floats (what it held is not kept),
 * page-locked where the device's backend offers it, so that its transfers
 * to and from the device run at the bus's speed. */
static ug_status grow(ug_comm *c, float **buffer, size_t *floats, size_t need, const char *op)
{
    if (*floats >= need)
        return UG_OK;
    void *grown = NULL;
    if (ug_host_alloc(c->device, (need ? need : 1) * sizeof(float), &grown) != UG_OK)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu floats", op, need);
    ug_host_free(c->device, *buffer);
    *buffer = grown;
    *floats = need;
    return UG_OK;
}

void ug_comm_free_staging(ug_comm *c, float *buffer) { ug_host_free(c->device, buffer); }

static ug_status staging(ug_comm *c, size_t floats, const char *op)
{
    return grow(c, &c->staging, &c->staging_floats, floats, op);
}

ug_status ug_comm_host_buffer(ug_comm *c, size_t floats, const char *op, float **out)
{
    UG_TRY(staging(c, floats, op));
    *out = c->staging;
    return UG_OK;
}

/* This thread's collectives come after those queued on the communication
 * thread, as on every rank. */
static ug_status after_queued(ug_comm *c)
{
    ug_status st = ug_comm_side_drain(c);
    if (st != UG_OK)
        c->engine->fail(c, ug_last_error());
    return st;
}

/* The tensor's memory where it is the host's (the CPU backend's), once
 * the thread's stream has written it, for the engine to work on in place
 * with no copies; NULL where it is a device's, or on failure (*st). */
static float *host_memory(ug_comm *c, const ug_tensor *t, ug_status *st)
{
    void *address = NULL, *stream = NULL;
    *st = UG_OK;
    if (ug_call_native(c->device, t, &address, &stream, "ug_comm") != UG_OK || stream)
        return NULL;
    *st = ug_stream_synchronize(ug_stream_current(c->device));
    return *st == UG_OK ? address : NULL;
}

ug_status ug_comm_reduce_staged(ug_comm *c, ug_tensor *t, ug_comm_op op, float **buffer, size_t *floats)
{
    if (c->engine->device_all_reduce)
        return c->engine->device_all_reduce(c, t, op);
    size_t n = (size_t)ug_tensor_numel(t);
    ug_status st = UG_OK;
    float *in_place = host_memory(c, t, &st);
    if (in_place)
        return c->engine->all_reduce(c, in_place, n, op);
    if (st == UG_OK)
        st = grow(c, buffer, floats, n, "ug_comm_all_reduce");
    if (st == UG_OK)
        st = ug_tensor_download(t, *buffer, n * sizeof(float));
    if (st != UG_OK)
        return refuse(c, st);
    UG_TRY(c->engine->all_reduce(c, *buffer, n, op));
    return ug_tensor_upload(t, *buffer, n * sizeof(float));
}

ug_status ug_comm_all_reduce(ug_comm *c, ug_tensor *t, ug_comm_op op)
{
    UG_TRY(check_tensor(c, t, "ug_comm_all_reduce", "tensor"));
    if (op != UG_COMM_SUM && op != UG_COMM_AVERAGE && op != UG_COMM_MAX)
        return refuse(c, ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_all_reduce: %d is not a ug_comm_op", (int)op));
    UG_TRY(after_queued(c));
    return ug_comm_reduce_staged(c, t, op, &c->staging, &c->staging_floats);
}

ug_status ug_comm_broadcast(ug_comm *c, ug_tensor *t, int root)
{
    UG_TRY(check_tensor(c, t, "ug_comm_broadcast", "tensor"));
    if (root < 0 || root >= c->size)
        return refuse(c, ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_broadcast: root %d is not a rank (0 to %d)",
                                      root, c->size - 1));
    UG_TRY(after_queued(c));
    if (c->engine->device_broadcast)
        return c->engine->device_broadcast(c, t, root);
    size_t n = (size_t)ug_tensor_numel(t);
    ug_status st = UG_OK;
    float *in_place = host_memory(c, t, &st);
    if (in_place)
        return c->engine->broadcast(c, in_place, n, root);
    if (st == UG_OK)
        st = staging(c, n, "ug_comm_broadcast");
    if (st == UG_OK && c->rank == root)
        st = ug_tensor_download(t, c->staging, n * sizeof(float));
    if (st != UG_OK)
        return refuse(c, st);
    UG_TRY(c->engine->broadcast(c, c->staging, n, root));
    return c->rank == root ? UG_OK : ug_tensor_upload(t, c->staging, n * sizeof(float));
}

ug_status ug_comm_all_gather(ug_comm *c, const ug_tensor *in, ug_tensor *out)
{
    UG_TRY(check_tensor(c, in, "ug_comm_all_gather", "in"));
    UG_TRY(check_tensor(c, out, "ug_comm_all_gather", "out"));
    size_t n = (size_t)ug_tensor_numel(in);
    if ((size_t)ug_tensor_numel(out) != n * (size_t)c->size)
        return refuse(c, ug_set_error(UG_ERR_SHAPE, "ug_comm_all_gather: out has %lld elements; it needs %zu (%d "
                                      "ranks x %zu)", (long long)ug_tensor_numel(out), n * (size_t)c->size,
                                      c->size, n));
    UG_TRY(after_queued(c));
    if (c->engine->device_all_gather)
        return c->engine->device_all_gather(c, in, out);
    ug_status st = UG_OK;
    /* In place only apart: MPI takes no aliased buffers. */
    float *in_place = in->storage != out->storage ? host_memory(c, out, &st) : NULL;
    float *from = in_place ? host_memory(c, in, &st) : NULL;
    if (from)
        return c->engine->all_gather(c, from, n, in_place);
    if (st == UG_OK)
        st = staging(c, n * (size_t)(c->size + 1), "ug_comm_all_gather");
    float *mine = c->staging + n * (size_t)c->size;
    if (st == UG_OK)
        st = ug_tensor_download(in, mine, n * sizeof(float));
    if (st != UG_OK)
        return refuse(c, st);
    UG_TRY(c->engine->all_gather(c, mine, n, c->staging));
    return ug_tensor_upload(out, c->staging, n * (size_t)c->size * sizeof(float));
}

ug_status ug_comm_reduce_scatter(ug_comm *c, const ug_tensor *in, ug_tensor *out)
{
    UG_TRY(check_tensor(c, in, "ug_comm_reduce_scatter", "in"));
    UG_TRY(check_tensor(c, out, "ug_comm_reduce_scatter", "out"));
    size_t n = (size_t)ug_tensor_numel(out);
    if ((size_t)ug_tensor_numel(in) != n * (size_t)c->size)
        return refuse(c, ug_set_error(UG_ERR_SHAPE, "ug_comm_reduce_scatter: in has %lld elements; it needs %zu (%d "
                                      "ranks x out's %zu)", (long long)ug_tensor_numel(in), n * (size_t)c->size,
                                      c->size, n));
    UG_TRY(after_queued(c));
    if (c->engine->device_reduce_scatter)
        return c->engine->device_reduce_scatter(c, in, out);
    ug_status st = staging(c, n * (size_t)(c->size + 1), "ug_comm_reduce_scatter");
    float *mine = c->staging + n * (size_t)c->size;
    if (st == UG_OK)
        st = ug_tensor_download(in, c->staging, n * (size_t)c->size * sizeof(float));
    if (st != UG_OK)
        return refuse(c, st);
    UG_TRY(c->engine->reduce_scatter(c, c->staging, n, mine));
    return ug_tensor_upload(out, mine, n * sizeof(float));
}

/* elements [begin, begin + count) of t, flattened. */
static ug_status flat_range(const ug_tensor *t, int64_t begin, int64_t count, ug_tensor **out)
{
    const int64_t n = ug_tensor_numel(t);
    ug_tensor *flat = NULL;
    UG_TRY(ug_tensor_reshape(t, 1, &n, &flat));
    ug_status st = ug_tensor_slice(flat, begin, count, out);
    ug_tensor_free(flat);
    return st;
}

ug_status ug_comm_copy_range(ug_tensor *dst, int64_t to, const ug_tensor *src, int64_t from, int64_t count)
{
    if (count == 0)
        return UG_OK;
    ug_tensor *a = NULL, *b = NULL;
    ug_status st = flat_range(dst, to, count, &a);
    if (st == UG_OK)
        st = flat_range(src, from, count, &b);
    if (st == UG_OK)
        st = ug_tensor_copy(a, b);
    ug_tensor_free(a);
    ug_tensor_free(b);
    return st;
}

/* Floats of the longest rank's parts of the segments, one after another. */
static size_t parts_block(const ug_comm *c, int count, const int64_t *lengths)
{
    size_t block = 0;
    for (int r = 0; r < c->size; r++) {
        size_t floats_of_r = 0;
        for (int s = 0; s < count; s++) {
            int64_t begin, part;
            ug_optim_shard_range(lengths[s], r, c->size, &begin, &part);
            floats_of_r += (size_t)part;
        }
        block = floats_of_r > block ? floats_of_r : block;
    }
    return block;
}

/* ug_comm_reduce_parts_staged on the device (NCCL, RCCL): the parts laid
 * out rank after rank in a device buffer, reduce-scattered there, this
 * rank's sums copied back. */
static ug_status reduce_parts_on_device(ug_comm *c, ug_tensor *t, int count, const int64_t *offsets,
                                        const int64_t *lengths, size_t block)
{
    ug_tensor *blocks = NULL, *mine = NULL;
    ug_status st = ug_tensor_create(c->device, UG_F32, 1, (int64_t[]){(int64_t)(block * (size_t)c->size)}, &blocks);
    if (st == UG_OK)
        st = ug_tensor_create(c->device, UG_F32, 1, (int64_t[]){(int64_t)block}, &mine);
    if (st == UG_OK) /* the blocks' padding adds nothing */
        st = ug_fill(blocks, 0.0f);
    for (int r = 0; st == UG_OK && r < c->size; r++) {
        int64_t to = r * (int64_t)block;
        for (int s = 0; st == UG_OK && s < count; s++) {
            int64_t begin, part;
            ug_optim_shard_range(lengths[s], r, c->size, &begin, &part);
            st = ug_comm_copy_range(blocks, to, t, offsets[s] + begin, part);
            to += part;
        }
    }
    if (st != UG_OK)
        c->engine->fail(c, ug_last_error());
    if (st == UG_OK)
        st = c->engine->device_reduce_scatter(c, blocks, mine);
    int64_t from = 0;
    for (int s = 0; st == UG_OK && s < count; s++) {
        int64_t begin, part;
        ug_optim_shard_range(lengths[s], c->rank, c->size, &begin, &part);
        st = ug_comm_copy_range(t, offsets[s] + begin, mine, from, part);
        from += part;
    }
    ug_tensor_free(blocks);
    ug_tensor_free(mine);
    return st;
}

ug_status ug_comm_reduce_parts_staged(ug_comm *c, ug_tensor *t, int count, const int64_t *offsets,
                                      const int64_t *lengths, float **buffer, size_t *floats)
{
    const size_t n = (size_t)ug_tensor_numel(t), size = (size_t)c->size;
    /* Rank r's parts one after another, in a block as long as the longest's. */
    const size_t block = parts_block(c, count, lengths);
    if (c->engine->device_reduce_scatter)
        return reduce_parts_on_device(c, t, count, offsets, lengths, block);
    ug_status st = UG_OK;
    float *host = host_memory(c, t, &st);
    const size_t staged = host ? 0 : n;
    if (st == UG_OK)
        st = grow(c, buffer, floats, staged + block * (size + 1), "ug_comm_run_backward");
    if (st == UG_OK && !host) {
        host = *buffer;
        st = ug_tensor_download(t, host, n * sizeof(float));
    }
    if (st != UG_OK)
        return refuse(c, st);
    float *blocks = *buffer + staged, *mine = blocks + block * size;
    for (int r = 0; r < c->size; r++) {
        float *to = blocks + (size_t)r * block;
        for (int s = 0; s < count; s++) {
            int64_t begin, part;
            ug_optim_shard_range(lengths[s], r, c->size, &begin, &part);
            memcpy(to, host + offsets[s] + begin, (size_t)part * sizeof(float));
            to += part;
        }
        memset(to, 0, (size_t)(blocks + (size_t)(r + 1) * block - to) * sizeof(float));
    }
    UG_TRY(c->engine->reduce_scatter(c, blocks, block, mine));
    for (int s = 0; s < count; s++) {
        int64_t begin, part;
        ug_optim_shard_range(lengths[s], c->rank, c->size, &begin, &part);
        memcpy(host + offsets[s] + begin, mine, (size_t)part * sizeof(float));
        mine += part;
    }
    return staged ? ug_tensor_upload(t, host, n * sizeof(float)) : UG_OK;
}

ug_status ug_comm_barrier(ug_comm *c)
{
    if (!c)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_comm_barrier: comm is NULL");
    UG_TRY(after_queued(c));
    return c->engine->barrier(c);
}
