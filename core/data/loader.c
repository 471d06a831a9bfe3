/* The prefetching loader.
 *
 * Design, and why:
 * - Slots. The loader owns prefetch + 1 slots, each a pinned host buffer
 *   pair (x, y) and a device tensor pair allocated at create: the consumer
 *   holds one slot while up to `prefetch` others are filled ahead. A batch
 *   of fewer rows than its slot holds is a view (ug_tensor_slice) of the
 *   slot's tensors, made again only when the count changes: nothing is
 *   allocated per batch, so a training loop's pool statistics stay flat.
 * - Workers claim batch numbers in increasing order, each into any free
 *   slot, gather the rows into the slot's pinned buffers and upload them with
 *   the blocking ug_tensor_upload. The consumer takes batches in order. Since
 *   claims are in order, the batch the consumer waits for always holds a
 *   slot, so the two sides cannot deadlock.
 * - One mutex guards all shared state; two condition variables let either
 *   side sleep: `work` wakes workers (a slot was freed, an epoch started,
 *   shutdown) and `ready` wakes the consumer or start_epoch (a slot was
 *   filled). No thread spins or polls.
 * - A slot handed out by ug_loader_next stays untouched until the next call
 *   to ug_loader_next (or ug_loader_free): only then does it become free for
 *   a worker. Work the consumer queued on the batch before that call is
 *   ordered before the worker's upload, because a device's queue is in order
 *   and the backend serialises the upload into that same queue (the CPU
 *   backend runs kernels synchronously).
 * - start_epoch stops claims, waits for in-flight uploads (the workers read
 *   the permutation while gathering, so it may only be rewritten when none
 *   is), frees every slot but the one handed out, and restarts from batch 0.
 * - Shards (data-parallel training) take their part of each global batch
 *   from the same order; an empty part is handed out as count 0. The shares
 *   may change between batches (ug_loader_set_shard_weights, as replicas'
 *   speeds are measured): the batches assembled ahead are assembled again,
 *   and a slot too small for a larger part grows in the worker that fills
 *   it (the pool fences a freed tensor the device may still read).
 * - The shuffle (ug_shuffled_order) is keyed by (seed, epoch) alone: the
 *   same order on every platform and for any batch size, thread count or
 *   prefetch depth, so an epoch can be resumed at any batch (ug_loader_seek).
 * - The loader reads the data set in place (ug_dataset_gather converts
 *   bytes as rows are gathered) and holds a reference to it (and to the
 *   device), so the program may free them in any order.
 * - A worker's error is stored with its message (error messages are
 *   thread-local) in the slot of its batch, and the consumer reports it when
 *   that batch is due. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/data/internal.h"
#include "core/runtime/internal.h"

enum { LOADER_MAX_THREADS = 64, LOADER_MAX_PREFETCH = 64, LOADER_MAX_SHARDS = 64, MESSAGE_BYTES = 2048 };

typedef enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HANDED } slot_state;

typedef struct slot {
    slot_state state;
    int64_t batch;             /* batch number within the epoch */
    uint64_t generation;       /* the epoch start it belongs to */
    int64_t count;             /* samples in the batch */
    bool inject_failure;       /* test hook (ug_loader_debug_fail_batch) */
    void *host_x;              /* pinned, rows * features of x_dtype */
    void *host_y;              /* pinned, rows labels or rows * width targets */
    int64_t *ids;              /* rows dataset indices */
    int64_t *base_ids;         /* the same in the data set's storage */
    float *scratch;            /* rows * features, for a callback's f32 values, or NULL */
    int64_t capacity;          /* rows it holds */
    ug_tensor *x, *y;          /* [capacity, features] x_dtype; [capacity] i32 or [capacity, width] f32 */
    ug_tensor *x_view, *y_view; /* their first view_rows rows, for a batch of fewer, or NULL */
    ug_device_batch on_device; /* with device_convert: the bytes and crops uploaded */
    int64_t view_rows;
    ug_status status;          /* the worker's result */
    char message[MESSAGE_BYTES];
} slot;

struct ug_loader {
    ug_loader *next_live;      /* in the list of loaders not yet freed */
    const ug_dataset *dataset;
    ug_device *device;
    ug_loader_config config;
    ug_dtype host_dtype;       /* what a slot's host_x holds: x_dtype, or u8 with device_convert */
    ug_tensor *byte_table;     /* with device_convert: the data set's value of each byte */
    int64_t rows;              /* the most rows of a batch (of this shard) at create: the slots' */
    int64_t full_batches;      /* batches of batch_size samples */
    int64_t full_rows, full_offset; /* this shard's rows of a full batch, and where they start */
    int64_t partial;           /* this shard's rows of the last batch if it is kept partial, else 0 */
    int64_t partial_offset;
    int64_t rest;              /* rows of the partial last batch kept, or 0 */
    double shard_weights[LOADER_MAX_SHARDS];
    int64_t batches;           /* per epoch */
    int64_t *perm;             /* the epoch's order of sample indices */
    int nslots;
    slot *slots;
    int nthreads;
    pthread_t *threads;

    pthread_mutex_t lock;
    pthread_cond_t work;
    pthread_cond_t ready;
    bool shutdown;
    bool active;               /* workers may claim batches */
    bool started;              /* an epoch was started */
    uint64_t generation;
    int64_t epoch;
    int64_t next_claim, next_consume;
    int handed;                /* slot held by the consumer, or -1 */
    int filling;               /* slots being filled */
    ug_status failed;          /* a batch of this epoch failed */
    char failed_message[MESSAGE_BYTES];
    int64_t fail_batch;        /* test hook, -1 when off */
};

/* ---- workers ---- */

static int64_t batch_count(const ug_loader *l, int64_t batch)
{
    return batch < l->full_batches ? l->full_rows : l->partial;
}

/* Where this shard's rows of batch start in the epoch's order. */
static int64_t batch_offset(const ug_loader *l, int64_t batch)
{
    return batch * l->config.batch_size + (batch < l->full_batches ? l->full_offset : l->partial_offset);
}

/* floor(rows * part / total) for 0 <= part <= total, at most rows. The
 * product first, for the exact boundaries of small weights (49 * 1 / 49 is
 * 1, 49 * (1 / 49) is not); the quotient first where the product would
 * overflow. Near INT64_MAX, (double)rows rounds up to 2^63, which int64_t
 * cannot hold: hence the clamp. */
static int64_t rows_before(int64_t rows, double part, double total)
{
    double product = (double)rows * part;
    double r = floor(isfinite(product) ? product / total : (double)rows * (part / total));
    return r >= (double)rows ? rows : (int64_t)r;
}

void ug_shard_rows(int shard_count, int shard_index, const double *weights, int64_t rows, int64_t *begin,
                   int64_t *count)
{
    if (shard_count <= 1) {
        *begin = 0;
        *count = rows;
        return;
    }
    double total = 0, before = 0;
    for (int i = 0; i < shard_count; i++) {
        total += weights ? weights[i] : 1.0;
        if (i < shard_index)
            before = total;
    }
    double mine = before + (weights ? weights[shard_index] : 1.0);
    int64_t start = rows_before(rows, before, total);
    int64_t end = shard_index == shard_count - 1 ? rows : rows_before(rows, mine, total);
    *begin = start;
    *count = end - start;
}

/* This shard's rows of a global batch of rows: [*begin, *begin + *count). */
static void shard_of(const ug_loader_config *c, const double *weights, int64_t rows, int64_t *begin,
                     int64_t *count)
{
    ug_shard_rows(c->shard_count, c->shard_index, weights, rows, begin, count);
}

/* This shard's part of the full batches and of the partial last one, by
 * weights (NULL: equal), kept in the loader: the caller's array need not
 * outlive the call. */
static void place_shard(ug_loader *l, const double *weights)
{
    ug_loader_config *c = &l->config;
    c->shard_weights = NULL;
    if (c->shard_count > 1 && weights) {
        memmove(l->shard_weights, weights, (size_t)c->shard_count * sizeof *l->shard_weights);
        c->shard_weights = l->shard_weights;
    }
    shard_of(c, c->shard_weights, c->batch_size, &l->full_offset, &l->full_rows);
    shard_of(c, c->shard_weights, l->rest, &l->partial_offset, &l->partial);
}

/* The slot's tensors (or views of them) of its count rows; NULL for none. */
static void batch_tensors(const slot *s, ug_tensor **x, ug_tensor **y)
{
    const bool whole = s->count == s->capacity;
    *x = !s->count ? NULL : whole ? s->x : s->x_view;
    *y = !s->count ? NULL : whole ? s->y : s->y_view;
}

static void free_slot_buffers(ug_loader *l, slot *s);
static ug_status make_slot(ug_loader *l, slot *s, int64_t rows);

/* The slot ready for its count rows: grown if it holds fewer (the shares
 * changed), with views of count rows if it holds more. */
static ug_status shape_slot(ug_loader *l, slot *s)
{
    if (s->count > s->capacity) {
        free_slot_buffers(l, s);
        UG_TRY(make_slot(l, s, s->count));
    }
    if (s->count == s->capacity || s->count == s->view_rows)
        return UG_OK;
    ug_tensor_free(s->x_view);
    ug_tensor_free(s->y_view);
    s->x_view = s->y_view = NULL;
    s->view_rows = 0;
    UG_TRY(ug_tensor_slice(s->x, 0, s->count, &s->x_view));
    UG_TRY(ug_tensor_slice(s->y, 0, s->count, &s->y_view));
    s->view_rows = s->count;
    return UG_OK;
}

/* Gathers and uploads one batch; runs without the lock. Reads perm, which
 * start_epoch only rewrites when no slot is being filled. */
static ug_status fill_slot(ug_loader *l, slot *s)
{
    const ug_dataset *ds = l->dataset;
    int64_t count = s->count;
    if (!count)
        return UG_OK; /* this shard's part of a small last batch is empty */
    UG_TRY(shape_slot(l, s));
    memcpy(s->ids, l->perm + batch_offset(l, s->batch), (size_t)count * sizeof *s->ids);
    UG_TRY(ug_dataset_gather(ds, s->ids, count, l->host_dtype, s->host_x, s->host_y, s->base_ids,
                             s->scratch));
    ug_tensor *x = NULL, *y = NULL;
    batch_tensors(s, &x, &y);
    size_t x_bytes = (size_t)count * (size_t)ds->features * ug_dtype_size(l->host_dtype);
    if (s->inject_failure)
        x_bytes++; /* the test hook: ug_tensor_upload refuses the size */
    if (l->config.device_convert && !s->inject_failure)
        UG_TRY(ug_device_batch_fill(&s->on_device, &l->config, l->byte_table, l->epoch, s->ids, count, s->host_x, x));
    else
        UG_TRY(ug_tensor_upload(x, s->host_x, x_bytes));
    return ug_tensor_upload(y, s->host_y, (size_t)count * ug_dataset_y_bytes(ds));
}

static int free_slot(const ug_loader *l)
{
    for (int i = 0; i < l->nslots; i++)
        if (l->slots[i].state == SLOT_FREE)
            return i;
    return -1;
}

static void *worker_main(void *arg)
{
    ug_loader *l = arg;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        int i = -1;
        while (!l->shutdown && !(l->active && l->next_claim < l->batches && (i = free_slot(l)) >= 0))
            pthread_cond_wait(&l->work, &l->lock);
        if (l->shutdown)
            break;
        slot *s = &l->slots[i];
        s->state = SLOT_FILLING;
        s->batch = l->next_claim++;
        s->generation = l->generation;
        s->count = batch_count(l, s->batch);
        s->inject_failure = s->batch == l->fail_batch;
        l->filling++;
        pthread_mutex_unlock(&l->lock);

        ug_status st = fill_slot(l, s);

        pthread_mutex_lock(&l->lock);
        s->status = st;
        if (st != UG_OK)
            snprintf(s->message, sizeof s->message, "%s", ug_last_error());
        s->state = SLOT_READY;
        l->filling--;
        pthread_cond_broadcast(&l->ready);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* ---- create and free ---- */

ug_loader_config ug_loader_default_config(void)
{
    return (ug_loader_config){
        .batch_size = 64, .shuffle = true, .seed = 0, .drop_last = false, .threads = 1,
        .prefetch = 2,
    };
}

static void stop_workers(ug_loader *l, int started)
{
    pthread_mutex_lock(&l->lock);
    l->shutdown = true;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->lock);
    for (int i = 0; i < started; i++)
        pthread_join(l->threads[i], NULL);
}

/* Loaders the program has not freed. A program may return from main with
 * one mid-epoch: before the device registry releases the devices at exit,
 * every live loader's workers are stopped, so none uploads into a device
 * that is going away. (This handler is registered after the registry's,
 * by the first loader, so it runs first.) */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static ug_loader *live_loaders;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void stop_live_loaders(void)
{
    pthread_mutex_lock(&live_lock);
    for (ug_loader *l = live_loaders; l; l = l->next_live) {
        stop_workers(l, l->nthreads);
        l->nthreads = 0;
    }
    pthread_mutex_unlock(&live_lock);
}

static void register_exit_stop(void) { atexit(stop_live_loaders); }

static void live_add(ug_loader *l)
{
    pthread_once(&live_once, register_exit_stop);
    pthread_mutex_lock(&live_lock);
    l->next_live = live_loaders;
    live_loaders = l;
    pthread_mutex_unlock(&live_lock);
}

static void live_remove(ug_loader *l)
{
    pthread_mutex_lock(&live_lock);
    for (ug_loader **p = &live_loaders; *p; p = &(*p)->next_live)
        if (*p == l) {
            *p = l->next_live;
            break;
        }
    pthread_mutex_unlock(&live_lock);
}

/* A slot's buffers, freed and set to NULL (its state stays). Host buffers
 * go before the tensors: the tensors' storage keeps the device open, and
 * ug_host_free needs it. */
static void free_slot_buffers(ug_loader *l, slot *s)
{
    ug_host_free(l->device, s->host_x);
    ug_host_free(l->device, s->host_y);
    free(s->ids);
    free(s->base_ids);
    free(s->scratch);
    ug_tensor_free(s->x_view);
    ug_tensor_free(s->y_view);
    ug_tensor_free(s->x);
    ug_tensor_free(s->y);
    ug_device_batch_free(&s->on_device);
    s->host_x = s->host_y = NULL;
    s->ids = s->base_ids = NULL;
    s->scratch = NULL;
    s->x = s->y = s->x_view = s->y_view = NULL;
    s->capacity = s->view_rows = 0;
}

/* Frees everything except the threads (stopped before) and the sync objects. */
static void free_slots(ug_loader *l)
{
    for (int i = 0; l->slots && i < l->nslots; i++)
        free_slot_buffers(l, &l->slots[i]);
    free(l->slots);
    l->slots = NULL;
}

static ug_status make_slot(ug_loader *l, slot *s, int64_t rows)
{
    const ug_dataset *ds = l->dataset;
    int64_t features = ds->features, width = ug_dataset_target_width(ds);
    size_t values = (size_t)rows * (size_t)features;
    UG_TRY(ug_host_alloc(l->device, values * ug_dtype_size(l->host_dtype), &s->host_x));
    if (l->config.device_convert)
        UG_TRY(ug_device_batch_make(&s->on_device, l->device, &l->config, rows, features));
    UG_TRY(ug_host_alloc(l->device, (size_t)rows * ug_dataset_y_bytes(ds), &s->host_y));
    s->ids = ug_malloc((size_t)rows * sizeof *s->ids);
    s->base_ids = ug_malloc((size_t)rows * sizeof *s->base_ids);
    bool scratch = ug_dataset_gather_needs_scratch(ds, l->host_dtype);
    if (scratch)
        s->scratch = ug_malloc(values * sizeof(float));
    if (!s->ids || !s->base_ids || (scratch && !s->scratch))
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "the loader's batches of %lld rows: out of host memory",
                            (long long)rows);
    int64_t xs[2] = {rows, features}, ys[2] = {rows, width};
    UG_TRY(ug_tensor_create(l->device, l->config.x_dtype, 2, xs, &s->x));
    UG_TRY(width ? ug_tensor_create(l->device, UG_F32, 2, ys, &s->y) : ug_tensor_create(l->device, UG_I32, 1, ys, &s->y));
    s->capacity = rows;
    return UG_OK;
}

ug_status ug_check_shard_weights(int count, const double *weights, const char *op)
{
    double total = 0.0;
    for (int i = 0; i < count; i++) {
        if (!(weights[i] > 0.0) || !isfinite(weights[i]))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: shard_weights[%d] is %g; weights are positive", op, i,
                                weights[i]);
        total += weights[i];
    }
    if (!isfinite(total))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the shard weights sum to %g; scale them down", op, total);
    return UG_OK;
}

/* config (or the defaults) with its zeros resolved, checked. */
static ug_status resolve_config(const ug_loader_config *config, const char *op, ug_loader_config *c)
{
    *c = config ? *config : ug_loader_default_config();
    if (c->threads == 0)
        c->threads = 1;
    if (c->prefetch == 0)
        c->prefetch = 2;
    if (c->batch_size < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: batch_size %lld must be at least 1", op,
                            (long long)c->batch_size);
    if (c->threads < 0 || c->threads > LOADER_MAX_THREADS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: threads %d is outside 0..%d", op,
                            c->threads, LOADER_MAX_THREADS);
    if (c->prefetch < 0 || c->prefetch > LOADER_MAX_PREFETCH)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: prefetch %d is outside 0..%d", op,
                            c->prefetch, LOADER_MAX_PREFETCH);
    if (c->x_dtype != UG_F32 && c->x_dtype != UG_F16 && c->x_dtype != UG_BF16)
        return ug_set_error(UG_ERR_DTYPE, "%s: x_dtype %s: batches' features are f32, f16 or bf16",
                            op, ug_dtype_size(c->x_dtype) ? ug_dtype_name(c->x_dtype) : "(invalid)");
    if (c->shard_count < 0 || c->shard_count > LOADER_MAX_SHARDS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: shard_count %d is outside 0..%d", op, c->shard_count,
                            LOADER_MAX_SHARDS);
    if (c->shard_count > 1 && (c->shard_index < 0 || c->shard_index >= c->shard_count))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: shard_index %d is not one of the %d shards (0..%d)", op,
                            c->shard_index, c->shard_count, c->shard_count - 1);
    return c->shard_count > 1 && c->shard_weights ? ug_check_shard_weights(c->shard_count, c->shard_weights, op)
                                                  : UG_OK;
}

/* The most rows a batch of this shard has: its part of a full batch or
 * of the partial last one (at least 1, for the slots). */
static int64_t batch_rows(const ug_dataset *dataset, const ug_loader_config *c)
{
    int64_t begin = 0, full = 0, partial = 0;
    if (dataset->count >= c->batch_size)
        shard_of(c, c->shard_weights, c->batch_size, &begin, &full);
    if (!c->drop_last && dataset->count % c->batch_size)
        shard_of(c, c->shard_weights, dataset->count % c->batch_size, &begin, &partial);
    int64_t rows = full > partial ? full : partial;
    return rows > 0 ? rows : 1;
}

ug_status ug_loader_device_bytes(const ug_dataset *dataset, const ug_loader_config *config, uint64_t *bytes)
{
    const char *op = "ug_loader_device_bytes";
    if (!dataset || !bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, dataset ? "bytes" : "dataset");
    ug_loader_config c;
    UG_TRY(resolve_config(config, op, &c));
    UG_TRY(ug_device_batch_check(dataset, &c, op));
    size_t rows = (size_t)batch_rows(dataset, &c);
    size_t x = ug_pool_block_bytes(rows * (size_t)dataset->features * ug_dtype_size(c.x_dtype));
    size_t y = ug_pool_block_bytes(rows * ug_dataset_y_bytes(dataset));
    if (c.device_convert) /* the bytes, the crops, and the byte table once */
        x += ug_pool_block_bytes(rows * (size_t)dataset->features) + ug_pool_block_bytes(rows * 12);
    *bytes = (uint64_t)(c.prefetch + 1) * (x + y) + (c.device_convert ? ug_pool_block_bytes(1024) : 0);
    return UG_OK;
}

ug_status ug_loader_create(const ug_dataset *dataset, ug_device *device,
                           const ug_loader_config *config, ug_loader **out)
{
    const char *op = "ug_loader_create";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!dataset || !device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                            dataset ? "device" : "dataset");
    ug_loader_config c;
    UG_TRY(resolve_config(config, op, &c));
    UG_TRY(ug_device_batch_check(dataset, &c, op));

    ug_loader *l = ug_calloc(1, sizeof *l);
    if (!l)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    int64_t n = dataset->count;
    l->dataset = dataset;
    l->device = device;
    l->config = c;
    l->host_dtype = c.device_convert ? UG_U8 : c.x_dtype;
    l->rows = batch_rows(dataset, &c);
    l->full_batches = n / c.batch_size;
    int64_t rest = c.drop_last ? 0 : n % c.batch_size;
    l->rest = rest;
    place_shard(l, c.shard_weights);
    l->batches = l->full_batches + (rest ? 1 : 0);
    l->handed = -1;
    l->fail_batch = -1;
    l->nslots = c.prefetch + 1;
    l->nthreads = c.threads;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    /* The loader keeps the device open for its host buffers, and the data
     * set it reads in place. */
    ug_device_retain(device);
    ug_dataset_retain(dataset);

    ug_status st = UG_OK;
    l->perm = ug_malloc((size_t)n * sizeof *l->perm);
    l->slots = ug_calloc((size_t)l->nslots, sizeof *l->slots);
    l->threads = ug_calloc((size_t)l->nthreads, sizeof *l->threads);
    if (!l->perm || !l->slots || !l->threads)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (st == UG_OK && c.device_convert)
        st = ug_device_batch_table(dataset, device, &l->byte_table);
    for (int i = 0; st == UG_OK && i < l->nslots; i++)
        st = make_slot(l, &l->slots[i], l->rows);
    if (st != UG_OK)
        st = ug_prefix_error(st, "%s: batches of %lld x %lld on %s", op, (long long)l->rows,
                             (long long)dataset->features, device->info.id);
    int started = 0;
    for (; st == UG_OK && started < l->nthreads; started++) {
        int err = pthread_create(&l->threads[started], NULL, worker_main, l);
        if (err) {
            st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: could not start worker thread %d: %s",
                              op, started, strerror(err));
            break;
        }
    }
    if (st != UG_OK) {
        stop_workers(l, started);
        l->nthreads = 0;
        ug_loader_free(l);
        return st;
    }
    live_add(l);
    *out = l;
    return UG_OK;
}

void ug_loader_free(ug_loader *l)
{
    if (!l)
        return;
    live_remove(l);
    stop_workers(l, l->nthreads);
    free_slots(l);
    ug_tensor_free(l->byte_table);
    free(l->perm);
    free(l->threads);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->ready);
    pthread_mutex_destroy(&l->lock);
    ug_device_close(l->device);
    ug_dataset_free((ug_dataset *)l->dataset);
    free(l);
}

int64_t ug_loader_batches(const ug_loader *l) { return l ? l->batches : 0; }

void ug_loader_debug_fail_batch(ug_loader *l, int64_t batch)
{
    pthread_mutex_lock(&l->lock);
    l->fail_batch = batch;
    pthread_mutex_unlock(&l->lock);
}

/* ---- the consumer ---- */

/* Under the lock: claims stopped, uploads in flight waited for (the
 * workers read the permutation and the shard's place while gathering),
 * and every batch assembled ahead dropped. The caller sets active again. */
static void drop_assembled(ug_loader *l)
{
    l->active = false;
    while (l->filling > 0)
        pthread_cond_wait(&l->ready, &l->lock);
    for (int i = 0; i < l->nslots; i++)
        if (l->slots[i].state != SLOT_HANDED) /* valid until the next ug_loader_next */
            l->slots[i].state = SLOT_FREE;
    l->generation++;
}

ug_status ug_loader_set_shard_weights(ug_loader *l, const double *weights)
{
    const char *op = "ug_loader_set_shard_weights";
    if (!l || !weights)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, l ? "weights" : "loader");
    if (l->config.shard_count <= 1)
        return ug_set_error(UG_ERR_STATE, "%s: the loader is not sharded (shard_count %d); weights divide a batch "
                            "between shards", op, l->config.shard_count);
    UG_TRY(ug_check_shard_weights(l->config.shard_count, weights, op));
    pthread_mutex_lock(&l->lock);
    const bool active = l->active;
    drop_assembled(l);
    place_shard(l, weights);
    l->next_claim = l->next_consume;
    l->active = active;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->lock);
    return UG_OK;
}

ug_status ug_loader_seek(ug_loader *l, int64_t epoch, int64_t batch)
{
    const char *op = "ug_loader_seek";
    if (!l)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: loader is NULL", op);
    if (epoch < -1 || (epoch == -1 && batch != 0))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: epoch %lld, batch %lld; epochs count from 0 (-1 with batch 0: before the first)",
                            op, (long long)epoch, (long long)batch);
    if (batch < 0 || batch > l->batches)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: batch %lld is outside the epoch's 0..%lld", op,
                            (long long)batch, (long long)l->batches);
    pthread_mutex_lock(&l->lock);
    drop_assembled(l);
    l->failed = UG_OK;
    l->started = epoch >= 0;
    l->active = epoch >= 0;
    if (l->started) {
        ug_shuffled_order(l->perm, l->dataset->count, l->config.shuffle, l->config.seed, (uint64_t)epoch);
        l->epoch = epoch;
        l->next_claim = l->next_consume = batch;
    }
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->lock);
    return UG_OK;
}

ug_status ug_loader_start_epoch(ug_loader *l, int64_t epoch)
{
    if (epoch < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_loader_start_epoch: epoch %lld is negative",
                            (long long)epoch);
    ug_status st = ug_loader_seek(l, epoch, 0);
    return st == UG_OK ? st : ug_prefix_error(st, "ug_loader_start_epoch");
}

void ug_loader_position(const ug_loader *l, int64_t *epoch, int64_t *next_batch)
{
    if (!l) {
        if (epoch)
            *epoch = -1;
        if (next_batch)
            *next_batch = 0;
        return;
    }
    ug_loader *m = (ug_loader *)l; /* the lock only */
    pthread_mutex_lock(&m->lock);
    if (epoch)
        *epoch = l->started ? l->epoch : -1;
    if (next_batch)
        *next_batch = l->started ? l->next_consume : 0;
    pthread_mutex_unlock(&m->lock);
}

ug_loader_config ug_loader_get_config(const ug_loader *l)
{
    return l ? l->config : ug_loader_default_config();
}

ug_status ug_loader_next(ug_loader *l, ug_batch *batch, bool *done)
{
    const char *op = "ug_loader_next";
    if (!l || !batch || !done)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                            !l ? "loader" : !batch ? "batch" : "done");
    memset(batch, 0, sizeof *batch);
    *done = false;
    pthread_mutex_lock(&l->lock);
    if (l->handed >= 0) { /* the caller is done with the previous batch */
        l->slots[l->handed].state = SLOT_FREE;
        l->handed = -1;
        pthread_cond_broadcast(&l->work);
    }
    ug_status st = UG_OK;
    if (!l->started) {
        st = ug_set_error(UG_ERR_STATE, "%s: no epoch started; call ug_loader_start_epoch first", op);
    } else if (l->failed != UG_OK) {
        st = ug_set_error(UG_ERR_STATE,
                          "%s: epoch %lld stopped after an error (%s); call "
                          "ug_loader_start_epoch to start again",
                          op, (long long)l->epoch, l->failed_message);
    } else if (l->next_consume >= l->batches) {
        *done = true;
    } else {
        slot *s = NULL;
        for (;;) {
            for (int i = 0; i < l->nslots && !s; i++)
                if (l->slots[i].state == SLOT_READY && l->slots[i].generation == l->generation &&
                    l->slots[i].batch == l->next_consume)
                    s = &l->slots[i];
            if (s)
                break;
            pthread_cond_wait(&l->ready, &l->lock);
        }
        if (s->status != UG_OK) {
            /* Stop the epoch: later batches would be out of order anyway. */
            l->failed = s->status;
            snprintf(l->failed_message, sizeof l->failed_message, "%s", s->message);
            l->active = false;
            s->state = SLOT_FREE;
            st = ug_set_error(s->status, "%s: batch %lld of epoch %lld: %s", op,
                              (long long)s->batch, (long long)l->epoch, s->message);
        } else {
            s->state = SLOT_HANDED;
            l->handed = (int)(s - l->slots);
            l->next_consume++;
            batch_tensors(s, &batch->x, &batch->y);
            batch->count = s->count;
            batch->index = s->batch;
            batch->sample_ids = s->ids;
        }
    }
    pthread_mutex_unlock(&l->lock);
    return st;
}
