/* Batches of random windows of a token set (include/unigrad/tokens.h),
 * nanoGPT's get_batch: B windows of T + 1 tokens, x the first T and y the
 * last T of each.
 *
 * Design, and why:
 * - A window's place is a function of (seed, stream, batch index, row)
 *   alone, through Philox (kernels/common/random.h, the generator the
 *   library's devices use), so there is no generator state to save: a
 *   checkpoint's step count is the sampler's whole position, and shards
 *   draw their rows of a global batch without talking to each other.
 * - Two slots, each a pinned host buffer, device tensors x and y of B rows
 *   and an event recorded after its upload. A batch is uploaded
 *   asynchronously into the slot the batch before last used, after that
 *   slot's event: the host never waits for the step just queued, only (if
 *   at all) for the upload two batches back. The upload is queued on the
 *   thread's current stream, behind the work that read the slot before.
 * - A shard's part of fewer rows than B is a view of the slot's tensors,
 *   made again only when the rows change: nothing is allocated per batch. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/mix64.h"
#include "core/data/internal.h"
#include "core/data/tokens_internal.h"
#include "core/runtime/internal.h"
#include "kernels/common/random.h"
#include "unigrad/memory.h"
#include "unigrad/stream.h"

enum { SAMPLER_SLOTS = 2, SAMPLER_MAX_SHARDS = 64 };

typedef struct sampler_slot {
    void *host;                /* x's rows then y's, pinned */
    ug_tensor *x, *y;          /* [B, T] */
    ug_tensor *x_part, *y_part; /* views of part_rows rows when fewer than B */
    int64_t part_rows;
    ug_event *uploaded;        /* after the slot's last upload */
    bool used;
} sampler_slot;

struct ug_token_sampler {
    ug_tokens *tokens;
    ug_device *device;
    ug_token_sampler_config config;
    double weights[SAMPLER_MAX_SHARDS];
    sampler_slot slots[SAMPLER_SLOTS];
    int next_slot;
    int64_t *offsets;          /* B */
};

ug_token_sampler_config ug_token_sampler_defaults(void)
{
    ug_token_sampler_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 12;
    c.block_size = 64;
    c.dtype = UG_I32;
    return c;
}

ug_token_sampler_config ug_token_sampler_get_config(const ug_token_sampler *s)
{
    return s ? s->config : ug_token_sampler_defaults();
}

/* The largest batch index whose rows' counters index * B + row stay below
 * 2^64. */
static uint64_t last_index(int64_t batch) { return UINT64_MAX / (uint64_t)batch - 1; }

static ug_status check_config(const ug_tokens *tokens, const ug_token_sampler_config *c, const char *op)
{
    const char *bad = NULL;
    if (c->batch_size < 1) bad = "batch_size is below 1";
    else if (c->block_size < 1) bad = "block_size is below 1";
    else if (c->dtype != UG_I32 && c->dtype != UG_I64) bad = "dtype is not i32 or i64";
    else if (c->shard_count < 0 || c->shard_count > SAMPLER_MAX_SHARDS) bad = "shard_count is outside 0..64";
    else if (c->shard_count > 1 && (c->shard_index < 0 || c->shard_index >= c->shard_count))
        bad = "shard_index is not one of the shards";
    if (bad)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op, bad);
    if (tokens->count < c->block_size + 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the set's %lld tokens make no window of block_size + 1 "
                                                     "= %lld tokens",
                            op, (long long)tokens->count, (long long)c->block_size + 1);
    /* The host buffer of a slot, 2 B T ids, must be addressable. */
    const size_t id_bytes = ug_dtype_size(c->dtype);
    if ((uint64_t)c->batch_size > SIZE_MAX / 2 / id_bytes / (uint64_t)c->block_size)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: batches of %lld windows of %lld tokens are too large", op,
                            (long long)c->batch_size, (long long)c->block_size);
    return c->shard_count > 1 && c->shard_weights ? ug_check_shard_weights(c->shard_count, c->shard_weights, op)
                                                  : UG_OK;
}

static void free_slot(ug_token_sampler *s, sampler_slot *slot)
{
    if (slot->uploaded && slot->used)
        ug_event_synchronize(slot->uploaded); /* the host buffer may still be read */
    ug_event_free(slot->uploaded);
    ug_tensor_free(slot->x_part);
    ug_tensor_free(slot->y_part);
    ug_tensor_free(slot->x);
    ug_tensor_free(slot->y);
    if (slot->host)
        ug_host_free(s->device, slot->host);
    memset(slot, 0, sizeof *slot);
}

void ug_token_sampler_free(ug_token_sampler *s)
{
    if (!s)
        return;
    for (int i = 0; i < SAMPLER_SLOTS; i++)
        free_slot(s, &s->slots[i]);
    free(s->offsets);
    ug_tokens_free(s->tokens);
    ug_device_close(s->device);
    free(s);
}

static ug_status make_slot(ug_token_sampler *s, sampler_slot *slot)
{
    const ug_token_sampler_config *c = &s->config;
    const int64_t shape[2] = {c->batch_size, c->block_size};
    const size_t bytes = (size_t)c->batch_size * (size_t)c->block_size * ug_dtype_size(c->dtype);
    UG_TRY(ug_host_alloc(s->device, 2 * bytes, &slot->host));
    UG_TRY(ug_tensor_create(s->device, c->dtype, 2, shape, &slot->x));
    UG_TRY(ug_tensor_create(s->device, c->dtype, 2, shape, &slot->y));
    return ug_event_create(s->device, false, &slot->uploaded);
}

ug_status ug_token_sampler_create(const ug_tokens *tokens, ug_device *device, const ug_token_sampler_config *config,
                                  ug_token_sampler **out)
{
    const char *op = "ug_token_sampler_create";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!tokens || !device || !config)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                            !tokens ? "tokens" : !device ? "device" : "config");
    UG_TRY(check_config(tokens, config, op));
    ug_token_sampler *s = ug_calloc(1, sizeof *s);
    if (!s)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    ug_tokens_retain(tokens);
    s->tokens = (ug_tokens *)tokens;
    ug_device_retain(device);
    s->device = device;
    s->config = *config;
    s->config.shard_weights = NULL;
    if (config->shard_count > 1 && config->shard_weights) {
        memcpy(s->weights, config->shard_weights, (size_t)config->shard_count * sizeof *s->weights);
        s->config.shard_weights = s->weights;
    }
    s->offsets = ug_malloc((size_t)config->batch_size * sizeof *s->offsets);
    ug_status st = s->offsets ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int i = 0; st == UG_OK && i < SAMPLER_SLOTS; i++)
        st = make_slot(s, &s->slots[i]);
    if (st != UG_OK) {
        ug_prefix_error(st, "%s", op);
        ug_token_sampler_free(s);
        return st;
    }
    *out = s;
    return UG_OK;
}

ug_status ug_token_sampler_set_shard_weights(ug_token_sampler *s, const double *weights)
{
    const char *op = "ug_token_sampler_set_shard_weights";
    if (!s || !weights)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !s ? "sampler" : "weights");
    if (s->config.shard_count <= 1)
        return ug_set_error(UG_ERR_STATE, "%s: the sampler is not sharded (shard_count %d); weights divide a batch "
                                          "between shards", op, s->config.shard_count);
    UG_TRY(ug_check_shard_weights(s->config.shard_count, weights, op));
    memmove(s->weights, weights, (size_t)s->config.shard_count * sizeof *s->weights);
    s->config.shard_weights = s->weights;
    return UG_OK;
}

static ug_status check_draw(const ug_token_sampler *s, ug_token_stream stream, int64_t index, const char *op)
{
    if (stream != UG_TOKEN_TRAIN && stream != UG_TOKEN_EVAL)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: stream %d is neither UG_TOKEN_TRAIN nor UG_TOKEN_EVAL", op,
                            (int)stream);
    if (index < 0 || (uint64_t)index > last_index(s->config.batch_size))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: batch index %lld is outside 0..%llu", op, (long long)index,
                            (unsigned long long)last_index(s->config.batch_size));
    return UG_OK;
}

/* This shard's rows of the global batch. */
static void shard_part(const ug_token_sampler *s, int64_t *first, int64_t *rows)
{
    const ug_token_sampler_config *c = &s->config;
    ug_shard_rows(c->shard_count, c->shard_index, c->shard_weights, c->batch_size, first, rows);
}

/* Offsets of rows [first, first + rows) of batch index (documented in
 * tokens.h, which a test recomputes). */
static void draw(const ug_token_sampler *s, ug_token_stream stream, int64_t index, int64_t first, int64_t rows,
                 int64_t *offsets)
{
    const uint64_t key = ug_mix64(s->config.seed ^ ((uint64_t)stream * 0x9E3779B97F4A7C15ull));
    const uint64_t places = (uint64_t)(s->tokens->count - s->config.block_size);
    const uint64_t base = (uint64_t)index * (uint64_t)s->config.batch_size;
    for (int64_t r = 0; r < rows; r++) {
        uint32_t r0 = 0, r1 = 0;
        ug_philox_words(key, base + (uint64_t)(first + r), &r0, &r1);
        offsets[r] = (int64_t)((((uint64_t)r1 << 32) | r0) % places);
    }
}

ug_status ug_token_sampler_offsets(const ug_token_sampler *s, ug_token_stream stream, int64_t index,
                                   int64_t *offsets)
{
    const char *op = "ug_token_sampler_offsets";
    if (!s || !offsets)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !s ? "sampler" : "offsets");
    UG_TRY(check_draw(s, stream, index, op));
    int64_t first = 0, rows = 0;
    shard_part(s, &first, &rows);
    draw(s, stream, index, first, rows, offsets);
    return UG_OK;
}

/* The slot's tensors of rows rows: the whole ones, or views of them. */
static ug_status part_tensors(sampler_slot *slot, int64_t rows, int64_t batch, ug_tensor **x, ug_tensor **y)
{
    if (rows == batch) {
        *x = slot->x;
        *y = slot->y;
        return UG_OK;
    }
    if (slot->part_rows != rows || !slot->x_part) {
        ug_tensor_free(slot->x_part);
        ug_tensor_free(slot->y_part);
        slot->x_part = slot->y_part = NULL;
        slot->part_rows = 0;
        UG_TRY(ug_tensor_slice(slot->x, 0, rows, &slot->x_part));
        UG_TRY(ug_tensor_slice(slot->y, 0, rows, &slot->y_part));
        slot->part_rows = rows;
    }
    *x = slot->x_part;
    *y = slot->y_part;
    return UG_OK;
}

ug_status ug_token_sampler_batch(ug_token_sampler *s, ug_token_stream stream, int64_t index, ug_token_batch *out)
{
    const char *op = "ug_token_sampler_batch";
    if (!s || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !s ? "sampler" : "out");
    memset(out, 0, sizeof *out);
    UG_TRY(check_draw(s, stream, index, op));
    const ug_token_sampler_config *c = &s->config;
    int64_t first = 0, rows = 0;
    shard_part(s, &first, &rows);
    out->first_row = first;
    if (!rows)
        return UG_OK;
    sampler_slot *slot = &s->slots[s->next_slot];
    if (slot->used) /* its host buffer is free once its last upload is done */
        UG_TRY(ug_event_synchronize(slot->uploaded));
    draw(s, stream, index, first, rows, s->offsets);
    const size_t id_bytes = ug_dtype_size(c->dtype), row_bytes = (size_t)c->block_size * id_bytes;
    uint8_t *x_host = slot->host, *y_host = x_host + (size_t)c->batch_size * row_bytes;
    for (int64_t r = 0; r < rows; r++) {
        /* y is x one token on: T + 1 ids, gathered once each way. */
        ug_tokens_gather(s->tokens, s->offsets[r], c->block_size, c->dtype, x_host + (size_t)r * row_bytes);
        ug_tokens_gather(s->tokens, s->offsets[r] + 1, c->block_size, c->dtype, y_host + (size_t)r * row_bytes);
    }
    ug_tensor *x = NULL, *y = NULL;
    UG_TRY(part_tensors(slot, rows, c->batch_size, &x, &y));
    const size_t bytes = (size_t)rows * row_bytes;
    UG_TRY(ug_tensor_upload_async(x, x_host, bytes));
    UG_TRY(ug_tensor_upload_async(y, y_host, bytes));
    slot->used = true;
    UG_TRY(ug_event_record(slot->uploaded, ug_stream_current(s->device)));
    s->next_slot = (s->next_slot + 1) % SAMPLER_SLOTS;
    out->x = x;
    out->y = y;
    out->rows = rows;
    return UG_OK;
}
