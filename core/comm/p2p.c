/* Point-to-point messages between two ranks (comm.h's ug_comm_send and
 * ug_comm_recv): a tensor staged through this rank's host buffer, or, for
 * ranks of one process, a copy of it on the sender's device (the receiver
 * copies it device to device where the backends can), after a header that
 * names its dtype and shape, so that the receiver checks what it takes
 * against what was sent rather than reading bytes of another layout. A
 * rank whose call is refused breaks the group, as with a collective: its
 * peer would otherwise wait for a message never sent. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/comm/internal.h"
#include "core/runtime/internal.h"

enum { HEADER_MAGIC = 0x55475032 }; /* "UGP2" */

typedef struct message_header {
    int32_t magic, dtype, ndim, unused;
    int64_t shape[UG_MAX_DIMS];
} message_header;

static ug_status refused(ug_comm *c, ug_status st)
{
    c->engine->fail(c, ug_last_error());
    return st;
}

static ug_status check_peer(ug_comm *c, const ug_tensor *t, int peer, const char *op, const char *role)
{
    if (!c)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: comm is NULL", op);
    if (!c->engine->send || !c->engine->recv)
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s engine has no point-to-point messages", op,
                            c->engine->name);
    if (!t)
        return refused(c, ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: tensor is NULL", op));
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return refused(c, ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s %d is not another rank (0 to %d, this "
                                       "is %d)", op, role, peer, c->size - 1, c->rank));
    if (t->storage->device != c->device)
        return refused(c, ug_set_error(UG_ERR_DEVICE, "%s: the tensor is on %s, rank %d on %s", op,
                                       t->storage->device->info.id, c->rank, c->device->info.id));
    return UG_OK;
}

/* Ranks sharing an address space: a copy of the tensor on this rank's
 * device travels with the header, finished before it is queued (the
 * receiver's thread reads it), so the receiver copies it device to device
 * where the backends can (ug_tensor_copy). */
static ug_status send_tensor(ug_comm *c, const ug_tensor *t, const message_header *h, int dest, const char *op)
{
    ug_tensor *copy = NULL;
    ug_status st = ug_tensor_new(c->device, t->dtype, t->ndim, t->shape, op, &copy);
    if (st == UG_OK)
        st = ug_tensor_copy(copy, t);
    if (st == UG_OK)
        st = ug_stream_synchronize(ug_stream_current(c->device));
    if (st != UG_OK) {
        ug_tensor_free(copy);
        return refused(c, st);
    }
    return c->engine->send_tensor(c, h, sizeof *h, copy, dest);
}

ug_status ug_comm_send(ug_comm *c, const ug_tensor *t, int dest)
{
    const char *op = "ug_comm_send";
    UG_TRY(check_peer(c, t, dest, op, "dest"));
    const size_t bytes = ug_tensor_nbytes(t);
    message_header h = {.magic = HEADER_MAGIC, .dtype = (int32_t)t->dtype, .ndim = t->ndim};
    memcpy(h.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (c->engine->send_tensor)
        return send_tensor(c, t, &h, dest, op);
    float *buffer = NULL;
    ug_status st = ug_comm_host_buffer(c, (sizeof h + bytes + sizeof(float) - 1) / sizeof(float), op, &buffer);
    if (st == UG_OK) {
        memcpy(buffer, &h, sizeof h);
        st = ug_tensor_download(t, (unsigned char *)buffer + sizeof h, bytes);
    }
    if (st != UG_OK)
        return refused(c, st);
    return c->engine->send(c, buffer, sizeof h + bytes, dest);
}

ug_status ug_comm_recv_message(ug_comm *c, int source, size_t expected, const char *op, float **buffer,
                               size_t *bytes)
{
    size_t capacity = expected;
    UG_TRY(ug_comm_host_buffer(c, (capacity + sizeof(float) - 1) / sizeof(float), op, buffer));
    ug_status st = c->engine->recv(c, *buffer, capacity, source, bytes);
    if (st != UG_ERR_SHAPE || *bytes <= capacity)
        return st;
    capacity = *bytes; /* larger than expected: it waits, whole, for a larger buffer */
    UG_TRY(ug_comm_host_buffer(c, (capacity + sizeof(float) - 1) / sizeof(float), op, buffer));
    return c->engine->recv(c, *buffer, capacity, source, bytes);
}

/* The message received (its header and bytes in buffer, or its tensor)
 * into t, checked against it. */
static ug_status take(ug_comm *c, ug_tensor *t, int source, int64_t *rows, const float *buffer, size_t bytes,
                      const ug_tensor *sent)
{
    const char *op = "ug_comm_recv";
    ug_status st = UG_OK;
    message_header h;
    memcpy(&h, buffer, bytes < sizeof h ? bytes : sizeof h);
    bool same = bytes >= sizeof h && h.magic == HEADER_MAGIC && h.dtype == (int32_t)t->dtype && h.ndim == t->ndim &&
                h.ndim >= 1 && h.shape[0] >= 0 && h.shape[0] <= t->shape[0];
    for (int i = 1; same && i < t->ndim; i++)
        same = h.shape[i] == t->shape[i];
    if (!same || (rows == NULL && h.shape[0] != t->shape[0])) {
        char theirs[96] = "bytes of no tensor", mine[96];
        if (bytes >= sizeof h && h.magic == HEADER_MAGIC && h.ndim >= 0 && h.ndim <= UG_MAX_DIMS &&
            h.dtype >= 0 && h.dtype < UG_DTYPE_COUNT) {
            char shape[80];
            snprintf(theirs, sizeof theirs, "%s %s", ug_dtype_name((ug_dtype)h.dtype),
                     ug_format_shape(h.ndim, h.shape, shape, sizeof shape));
        }
        return refused(c, ug_set_error(UG_ERR_SHAPE, "%s: rank %d sent %s; rank %d receives into %s %s", op, source,
                                       theirs, c->rank, ug_dtype_name(t->dtype),
                                       ug_format_shape(t->ndim, t->shape, mine, sizeof mine)));
    }
    /* Fewer rows than the tensor's (ug_comm_recv_rows): its first ones. */
    ug_tensor *part = NULL;
    st = h.shape[0] == t->shape[0] ? UG_OK : ug_tensor_slice(t, 0, h.shape[0], &part);
    if (st == UG_OK) {
        ug_tensor *into = part ? part : t;
        bool direct = false;
        if (!sent)
            st = ug_tensor_upload(into, (const unsigned char *)buffer + sizeof h, ug_tensor_nbytes(into));
        else if ((st = ug_tensor_copy_direct(into, sent, &direct)) == UG_OK) /* done before the sent copy goes */
            st = ug_stream_synchronize(ug_stream_current(c->device));
        *(direct ? &c->received_direct : &c->received_staged) += ug_tensor_nbytes(into);
    }
    ug_tensor_free(part);
    if (st != UG_OK)
        return refused(c, st);
    if (rows)
        *rows = h.shape[0];
    return UG_OK;
}

ug_status ug_comm_recv_rows(ug_comm *c, ug_tensor *t, int source, int64_t *rows)
{
    const char *op = "ug_comm_recv";
    UG_TRY(check_peer(c, t, source, op, "source"));
    size_t bytes = 0;
    float *buffer = NULL;
    ug_tensor *sent = NULL; /* with the header, where the engine carries tensors */
    ug_status st = UG_OK;
    if (c->engine->recv_tensor) {
        st = ug_comm_host_buffer(c, (sizeof(message_header) + sizeof(float) - 1) / sizeof(float), op, &buffer);
        if (st == UG_OK)
            st = c->engine->recv_tensor(c, buffer, sizeof(message_header), source, &bytes, &sent);
    } else {
        st = ug_comm_recv_message(c, source, sizeof(message_header) + ug_tensor_nbytes(t), op, &buffer, &bytes);
    }
    if (st != UG_OK) /* a larger one is refused below, naming both layouts */
        return refused(c, st);
    st = take(c, t, source, rows, buffer, bytes, sent);
    ug_tensor_free(sent);
    return st;
}

ug_status ug_comm_recv(ug_comm *c, ug_tensor *t, int source) { return ug_comm_recv_rows(c, t, source, NULL); }
