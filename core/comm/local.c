/* The in-process engine: the ranks are threads of one process sharing a
 * group. A collective is a few barriers around work on the ranks' host
 * buffers, which each rank publishes in its slot: an all-reduce has every
 * rank combine its share of the elements over all the ranks' buffers in
 * rank order (so every rank gets the same bits, and the ranks work in
 * parallel) into the group's scratch, then copy the whole result back.
 *
 * A barrier waits at most the rank's timeout. A rank that times out
 * breaks the group, naming the ranks that did not arrive; a rank that
 * leaves (ug_comm_free) breaks it too, since the others can no longer
 * complete a collective. A broken group fails every later call at once. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"

typedef struct slot {
    const float *in;          /* the rank's buffer for this collective */
    float *out;
    size_t n;
    int op, root;             /* what the rank asked for: all ranks must agree */
    uint64_t arrived;         /* the generation the rank last arrived at */
} slot;

/* A point-to-point message, queued for its receiver: bytes, and a tensor
 * on the sender's device that the message owns (send_tensor) or NULL. */
typedef struct message {
    struct message *next;
    ug_tensor *tensor;
    size_t bytes;
    unsigned char data[];
} message;

typedef struct group {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int size, members;        /* ranks, and those not freed */
    int arrived;
    uint64_t generation;      /* barriers completed */
    bool broken;
    char why[384];
    float *scratch;
    size_t scratch_floats;
    /* [source * size + dest]: the messages sent and not yet received,
     * oldest first (and the last, where the next goes). */
    message **mail, **mail_last;
    void **handoff;           /* [rank]: a split's new group, from the rank that made it */
    slot slots[];
} group;

static group *group_of(ug_comm *c) { return c->group; }
static void break_locked(group *g, int rank, const char *why);

static ug_status broken(group *g, const char *what)
{
    return ug_set_error(UG_ERR_BACKEND, "%s: the group is broken: %s", what, g->why);
}

/* When the rank's timeout from now passes. */
static struct timespec deadline_of(const ug_comm *c)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = floor(c->timeout);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((c->timeout - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    return deadline;
}

/* Waits until every rank has arrived (lock held on entry and exit). */
static ug_status barrier_locked(ug_comm *c, const char *what)
{
    group *g = group_of(c);
    if (g->broken)
        return broken(g, what);
    const uint64_t generation = g->generation;
    g->slots[c->rank].arrived = generation + 1;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->changed);
        return UG_OK;
    }
    struct timespec deadline = deadline_of(c);
    while (g->generation == generation && !g->broken)
        if (pthread_cond_timedwait(&g->changed, &g->lock, &deadline) == ETIMEDOUT && g->generation == generation &&
            !g->broken) {
            int n = snprintf(g->why, sizeof g->why, "rank %d waited %g s in %s for rank", c->rank, c->timeout, what);
            int missing = 0;
            for (int r = 0; r < g->size && n < (int)sizeof g->why; r++)
                if (g->slots[r].arrived != generation + 1)
                    n += snprintf(g->why + n, sizeof g->why - (size_t)n, "%s %d", missing++ ? "," : "", r);
            if (n < (int)sizeof g->why)
                snprintf(g->why + n, sizeof g->why - (size_t)n, "; raise the timeout (ug_comm_set_timeout) if "
                         "a rank is slow, or look for one that stopped");
            g->broken = true;
            pthread_cond_broadcast(&g->changed);
        }
    return g->generation == generation ? broken(g, what) : UG_OK;
}

/* Publishes this rank's request and waits for the others'; then checks
 * that they agree (every rank reaches the same verdict). */
static ug_status gather_requests(ug_comm *c, const char *what, const float *in, float *out, size_t n, int op,
                                 int root)
{
    group *g = group_of(c);
    g->slots[c->rank].in = in;
    g->slots[c->rank].out = out;
    g->slots[c->rank].n = n;
    g->slots[c->rank].op = op;
    g->slots[c->rank].root = root;
    UG_TRY(barrier_locked(c, what));
    for (int r = 1; r < g->size; r++) {
        const slot *a = &g->slots[0], *b = &g->slots[r];
        if (a->n != b->n || a->op != b->op || a->root != b->root)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, /* every rank sees the same slots: the same verdict */
                                "%s: rank %d asked for %zu elements (op %d, root %d), rank 0 for %zu (op %d, "
                                "root %d); every rank must call the same collective on the same sizes",
                                what, r, b->n, b->op, b->root, a->n, a->op, a->root);
    }
    return UG_OK;
}

static ug_status local_all_reduce(ug_comm *c, float *data, size_t n, ug_comm_op op)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    ug_status st = UG_OK;
    if (c->rank == 0 && g->scratch_floats < n) { /* before the others can read it */
        float *grown = ug_realloc(g->scratch, (n ? n : 1) * sizeof *grown);
        if (grown) {
            g->scratch = grown;
            g->scratch_floats = n;
        }
    }
    st = gather_requests(c, "ug_comm_all_reduce", data, data, n, (int)op, 0);
    if (st == UG_OK && g->scratch_floats < n)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_all_reduce: out of host memory for %zu floats", n);
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK)
        return st;
    /* This rank's share, over every rank in order, without the lock. */
    size_t begin = n * (size_t)c->rank / (size_t)g->size, end = n * (size_t)(c->rank + 1) / (size_t)g->size;
    for (size_t i = begin; i < end; i++) {
        float v = g->slots[0].in[i];
        for (int r = 1; r < g->size; r++) {
            float x = g->slots[r].in[i];
            v = op == UG_COMM_MAX ? (x > v || isnan(x) ? x : v) : v + x;
        }
        g->scratch[i] = op == UG_COMM_AVERAGE ? v / (float)g->size : v;
    }
    pthread_mutex_lock(&g->lock);
    st = barrier_locked(c, "ug_comm_all_reduce");
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK)
        return st;
    memcpy(data, g->scratch, n * sizeof *data);
    pthread_mutex_lock(&g->lock);
    st = barrier_locked(c, "ug_comm_all_reduce"); /* the scratch is free again */
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ug_status local_broadcast(ug_comm *c, float *data, size_t n, int root)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    ug_status st = gather_requests(c, "ug_comm_broadcast", data, data, n, -1, root);
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK)
        return st;
    if (c->rank != root)
        memcpy(data, g->slots[root].in, n * sizeof *data);
    pthread_mutex_lock(&g->lock);
    st = barrier_locked(c, "ug_comm_broadcast"); /* root's buffer is read */
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ug_status local_all_gather(ug_comm *c, const float *in, size_t n, float *out)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    ug_status st = gather_requests(c, "ug_comm_all_gather", in, out, n, -2, 0);
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK)
        return st;
    for (int r = 0; r < g->size; r++)
        memcpy(out + (size_t)r * n, g->slots[r].in, n * sizeof *out);
    pthread_mutex_lock(&g->lock);
    st = barrier_locked(c, "ug_comm_all_gather");
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* Each rank sums its own block over every rank's buffer, in rank order,
 * then waits until the others have read its buffer too. */
static ug_status local_reduce_scatter(ug_comm *c, const float *in, size_t n, float *out)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    ug_status st = gather_requests(c, "ug_comm_reduce_scatter", in, out, n, -3, 0);
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK)
        return st;
    const size_t at = n * (size_t)c->rank;
    for (size_t i = 0; i < n; i++) {
        float v = g->slots[0].in[at + i];
        for (int r = 1; r < g->size; r++)
            v += g->slots[r].in[at + i];
        out[i] = v;
    }
    pthread_mutex_lock(&g->lock);
    st = barrier_locked(c, "ug_comm_reduce_scatter");
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ug_status local_barrier(ug_comm *c)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    ug_status st = barrier_locked(c, "ug_comm_barrier");
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* Queues a copy of the bytes (and tensor, which the message then owns)
 * for dest and returns: the sender never waits for the receiver, so two
 * ranks may send to each other at once. */
static ug_status queue_message(ug_comm *c, const void *data, size_t bytes, ug_tensor *tensor, int dest)
{
    group *g = group_of(c);
    message *m = ug_malloc(sizeof *m + (bytes ? bytes : 1));
    if (!m)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_send: out of host memory for %zu bytes", bytes);
    m->next = NULL;
    m->tensor = tensor;
    m->bytes = bytes;
    memcpy(m->data, data, bytes);
    pthread_mutex_lock(&g->lock);
    if (g->broken) {
        pthread_mutex_unlock(&g->lock);
        free(m);
        return broken(g, "ug_comm_send");
    }
    const size_t box = (size_t)c->rank * (size_t)g->size + (size_t)dest;
    *(g->mail[box] ? &g->mail_last[box]->next : &g->mail[box]) = m;
    g->mail_last[box] = m;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
    return UG_OK;
}

static ug_status local_send(ug_comm *c, const void *data, size_t bytes, int dest)
{
    return queue_message(c, data, bytes, NULL, dest);
}

static ug_status local_send_tensor(ug_comm *c, const void *data, size_t bytes, ug_tensor *tensor, int dest)
{
    const ug_status st = queue_message(c, data, bytes, tensor, dest);
    if (st != UG_OK)
        ug_tensor_free(tensor);
    return st;
}

/* The oldest message from source, waiting at most the timeout (which
 * breaks the group: the sender stopped); its tensor to *tensor where the
 * caller takes one (else a message with one is refused). One larger than
 * capacity stays queued: UG_ERR_SHAPE, its size in *bytes. */
static ug_status receive(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes, ug_tensor **tensor)
{
    group *g = group_of(c);
    const size_t box = (size_t)source * (size_t)g->size + (size_t)c->rank;
    struct timespec deadline = deadline_of(c);
    pthread_mutex_lock(&g->lock);
    while (!g->mail[box] && !g->broken)
        if (pthread_cond_timedwait(&g->changed, &g->lock, &deadline) == ETIMEDOUT && !g->mail[box] && !g->broken) {
            char why[160];
            snprintf(why, sizeof why, "waited %g s in ug_comm_recv for rank %d's message; raise the timeout "
                     "(ug_comm_set_timeout) if it is slow, or look for why it stopped", c->timeout, source);
            break_locked(g, c->rank, why);
        }
    message *m = g->mail[box];
    ug_status st = UG_OK;
    if (!m)
        st = broken(g, "ug_comm_recv");
    else if (m->bytes > capacity)
        st = ug_set_error(UG_ERR_SHAPE, "ug_comm_recv: rank %d sent %zu bytes, more than the %zu received into",
                          source, m->bytes, capacity);
    else if (m->tensor && !tensor)
        st = ug_set_error(UG_ERR_STATE, "ug_comm_recv: rank %d sent a tensor where bytes were awaited", source);
    else
        g->mail[box] = m->next;
    pthread_mutex_unlock(&g->lock);
    if (st != UG_OK) {
        *bytes = m ? m->bytes : 0;
        return st;
    }
    memcpy(data, m->data, m->bytes);
    *bytes = m->bytes;
    if (tensor)
        *tensor = m->tensor;
    free(m);
    return UG_OK;
}

static ug_status local_recv(ug_comm *c, void *data, size_t capacity, int source, size_t *bytes)
{
    return receive(c, data, capacity, source, bytes, NULL);
}

static void break_locked(group *g, int rank, const char *why)
{
    if (g->broken)
        return;
    g->broken = true;
    snprintf(g->why, sizeof g->why, "rank %d: %s", rank, why);
    pthread_cond_broadcast(&g->changed);
}

static void local_fail(ug_comm *c, const char *why)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    break_locked(g, c->rank, why);
    pthread_mutex_unlock(&g->lock);
}

static void free_group(group *g)
{
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
    for (size_t box = 0; box < (size_t)g->size * (size_t)g->size; box++)
        for (message *m = g->mail[box], *next; m; m = next) {
            next = m->next;
            ug_tensor_free(m->tensor);
            free(m);
        }
    free(g->mail);
    free(g->mail_last);
    free(g->handoff);
    free(g->scratch);
    free(g);
}

static void local_leave(ug_comm *c)
{
    group *g = group_of(c);
    pthread_mutex_lock(&g->lock);
    break_locked(g, c->rank, UG_COMM_LEAVING);
    bool last = --g->members == 0;
    pthread_mutex_unlock(&g->lock);
    if (last)
        free_group(g);
}

/* Each color's first rank (by key, then rank) makes its group and hands
 * it to the others; when any could not, every rank fails alike. */
static ug_status local_split(ug_comm *c, int color, int key, ug_comm *made)
{
    group *g = group_of(c);
    const float mine[2] = {(float)color, (float)key};
    float *all = ug_calloc(2 * (size_t)g->size, sizeof *all);
    if (!all) {
        local_fail(c, "ug_comm_split: out of host memory");
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_split: out of host memory");
    }
    ug_status st = local_all_gather(c, mine, 2, all);
    int rank = 0, size = 0, first = -1;
    for (int r = 0; st == UG_OK && r < g->size; r++) {
        if (all[2 * r] != mine[0])
            continue;
        size++;
        rank += all[2 * r + 1] < mine[1] || (all[2 * r + 1] == mine[1] && r < c->rank);
        if (first < 0 || all[2 * r + 1] < all[2 * first + 1])
            first = r;
    }
    free(all);
    if (st != UG_OK)
        return st;
    group *part = first == c->rank ? ug_comm_local_group(size) : NULL;
    pthread_mutex_lock(&g->lock);
    g->handoff[c->rank] = part;
    st = barrier_locked(c, "ug_comm_split");
    part = g->handoff[first];
    pthread_mutex_unlock(&g->lock);
    float missing = part ? 0.0f : 1.0f; /* (its all-reduce starts once every rank has read its part) */
    if (st == UG_OK)
        st = local_all_reduce(c, &missing, 1, UG_COMM_MAX);
    if (st == UG_OK && missing > 0.0f)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_split: out of host memory for a new group");
    if (st != UG_OK) {
        if (first == c->rank && part)
            free_group(part);
        return st;
    }
    made->group = part;
    made->rank = rank;
    made->size = size;
    return UG_OK;
}

const comm_engine ug_comm_local_engine = {
    .name = "in-process", .all_reduce = local_all_reduce, .broadcast = local_broadcast,
    .all_gather = local_all_gather, .reduce_scatter = local_reduce_scatter, .barrier = local_barrier,
    .fail = local_fail, .leave = local_leave,
    .send = local_send, .recv = local_recv, .send_tensor = local_send_tensor, .recv_tensor = receive,
    .split = local_split};

void *ug_comm_local_group(int size)
{
    group *g = ug_calloc(1, sizeof *g + (size_t)size * sizeof(slot));
    if (g) {
        g->mail = ug_calloc((size_t)size * (size_t)size, sizeof *g->mail);
        g->mail_last = ug_calloc((size_t)size * (size_t)size, sizeof *g->mail_last);
        g->handoff = ug_calloc((size_t)size, sizeof *g->handoff);
    }
    if (!g || !g->mail || !g->mail_last || !g->handoff) {
        if (g) {
            free(g->mail);
            free(g->mail_last);
            free(g->handoff);
        }
        free(g);
        return NULL;
    }
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->size = g->members = size;
    return g;
}
