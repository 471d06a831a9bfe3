/* Token sets (include/unigrad/tokens.h): a token file mapped and checked
 * whole, a copy of the caller's ids, ranges and the split by position,
 * and saving one as a token file.
 *
 * A token file is untrusted input: its size must be a whole number of ids
 * and every id below the vocabulary size, checked once at open over the
 * mapping, so that the sampler's windows never need a check and a model's
 * embedding never sees an index outside its table. Ids are read byte by
 * byte as little-endian, whatever the host's order. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/regular_file.h"
#include "core/data/tokens_internal.h"

static uint32_t id_at(const uint8_t *data, int width, int64_t i)
{
    const uint8_t *p = data + (size_t)i * (size_t)width;
    switch (width) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
}

static const char *width_name(int width) { return width == 1 ? "uint8" : width == 2 ? "uint16" : "uint32"; }

static bool valid_width(int width) { return width == 1 || width == 2 || width == 4; }

void ug_tokens_retain(const ug_tokens *t) { __atomic_add_fetch(&((ug_tokens *)t)->refs, 1, __ATOMIC_RELAXED); }

void ug_tokens_free(ug_tokens *t)
{
    if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (t->map)
        munmap(t->map, t->map_bytes);
    free(t->owned);
    ug_tokens_free(t->base);
    free(t);
}

int64_t ug_tokens_count(const ug_tokens *t) { return t ? t->count : 0; }
int64_t ug_tokens_vocab_size(const ug_tokens *t) { return t ? t->vocab : 0; }

/* The largest id of the set, or the first at or past vocab (when vocab is
 * given): its index in *bad, else -1. */
static uint32_t scan_ids(const uint8_t *data, int width, int64_t count, int64_t vocab, int64_t *bad)
{
    uint32_t largest = 0;
    *bad = -1;
    for (int64_t i = 0; i < count; i++) {
        const uint32_t id = id_at(data, width, i);
        if (vocab && (int64_t)id >= vocab) {
            *bad = i;
            return id;
        }
        if (id > largest)
            largest = id;
    }
    return largest;
}

static ug_status check_file_args(const char *path, const ug_token_file *file)
{
    const char *op = "ug_tokens_open";
    if (!path || !file)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !path ? "path" : "file");
    if (!valid_width(file->width))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s: width %d: a token file's ids are 1, 2 or 4 bytes "
                                                     "(uint8, uint16 as nanoGPT's train.bin, uint32)",
                            op, path, file->width);
    if (file->vocab_size < 0 || file->vocab_size > UG_TOKENS_MAX_VOCAB)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s: vocab_size %lld is outside 0..2^31 (0: the "
                                                     "largest id + 1)",
                            op, path, (long long)file->vocab_size);
    return UG_OK;
}

/* The mapping's ids against the vocabulary; sets t->vocab. */
static ug_status check_ids(ug_tokens *t, const char *path, int64_t vocab)
{
    int64_t bad = -1;
    const uint32_t id = scan_ids(t->data, t->width, t->count, vocab, &bad);
    if (bad >= 0)
        return ug_set_error(UG_ERR_FORMAT, "%s: id %lu at byte offset %lld (token %lld) is not below the "
                                           "vocabulary size %lld: the file is damaged, of another width than "
                                           "%s, or of another vocabulary",
                            path, (unsigned long)id, (long long)bad * t->width, (long long)bad, (long long)vocab,
                            width_name(t->width));
    if (!vocab && (int64_t)id + 1 > UG_TOKENS_MAX_VOCAB)
        return ug_set_error(UG_ERR_FORMAT, "%s: the largest id, %lu, is past the largest vocabulary (2^31 "
                                           "ids, so that an id fits an i32 batch): is it of another width than "
                                           "%s?",
                            path, (unsigned long)id, width_name(t->width));
    t->vocab = vocab ? vocab : (int64_t)id + 1;
    return UG_OK;
}

ug_status ug_tokens_open(const char *path, const ug_token_file *file, ug_tokens **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tokens_open: out is NULL");
    *out = NULL;
    UG_TRY(check_file_args(path, file));
    int fd = -1;
    uint64_t bytes = 0;
    UG_TRY(ug_open_regular_file(path, "the token file", &fd, &bytes));
    const int width = file->width;
    ug_status st = UG_OK;
    if (bytes == 0)
        st = ug_set_error(UG_ERR_FORMAT, "%s: the file is empty; a token file holds at least one id", path);
    else if (bytes % (uint64_t)width)
        st = ug_set_error(UG_ERR_FORMAT, "%s: %llu bytes is not a whole number of %d-byte (%s) ids: the file "
                                         "is cut short at byte offset %llu, mid-id, or its ids are of another "
                                         "width",
                          path, (unsigned long long)bytes, width, width_name(width),
                          (unsigned long long)(bytes - bytes % (uint64_t)width));
    else if (bytes > (uint64_t)SIZE_MAX || bytes / (uint64_t)width > (uint64_t)INT64_MAX)
        st = ug_set_error(UG_ERR_FORMAT, "%s: %llu bytes is more than this machine can map", path,
                          (unsigned long long)bytes);
    ug_tokens *t = st == UG_OK ? ug_calloc(1, sizeof *t) : NULL;
    if (st == UG_OK && !t)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_tokens_open: %s: out of host memory", path);
    if (st == UG_OK) {
        t->refs = 1;
        t->width = width;
        t->count = (int64_t)(bytes / (uint64_t)width);
        t->map_bytes = (size_t)bytes;
        /* Private and read-only: the page cache's pages, nothing copied. */
        void *map = mmap(NULL, t->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            st = ug_set_error(UG_ERR_IO, "%s: cannot map the token file's %llu bytes: %s", path,
                              (unsigned long long)bytes, strerror(errno));
        else
            t->map = map;
        t->data = t->map;
    }
    close(fd);
    if (st == UG_OK)
        st = check_ids(t, path, file->vocab_size);
    if (st != UG_OK) {
        ug_tokens_free(t);
        return st;
    }
    *out = t;
    return UG_OK;
}

/* The narrowest width holding ids below vocab. */
static int width_for(int64_t vocab) { return vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4; }

static void put_id(uint8_t *p, int width, uint32_t id)
{
    for (int b = 0; b < width; b++)
        p[b] = (uint8_t)(id >> (8 * b));
}

ug_status ug_tokens_from_ids(const int32_t *ids, int64_t count, int64_t vocab, ug_tokens **out)
{
    const char *op = "ug_tokens_from_ids";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!ids)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: ids is NULL", op);
    if (count < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: count %lld; a token set holds at least one id", op,
                            (long long)count);
    if (vocab < 0 || vocab > UG_TOKENS_MAX_VOCAB)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: vocab_size %lld is outside 0..2^31", op, (long long)vocab);
    int32_t largest = 0;
    for (int64_t i = 0; i < count; i++) {
        if (ids[i] < 0 || (vocab && ids[i] >= vocab))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: ids[%lld] is %d, outside [0, %lld)", op, (long long)i,
                                ids[i], (long long)(vocab ? vocab : UG_TOKENS_MAX_VOCAB));
        if (ids[i] > largest)
            largest = ids[i];
    }
    if (!vocab)
        vocab = (int64_t)largest + 1;
    const int width = width_for(vocab);
    if ((uint64_t)count > SIZE_MAX / (size_t)width)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: %lld ids are more than this machine can hold", op,
                            (long long)count);
    ug_tokens *t = ug_calloc(1, sizeof *t);
    uint8_t *data = t ? ug_malloc((size_t)count * (size_t)width) : NULL;
    if (!data) {
        free(t);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: %lld ids: out of host memory", op, (long long)count);
    }
    for (int64_t i = 0; i < count; i++)
        put_id(data + (size_t)i * (size_t)width, width, (uint32_t)ids[i]);
    t->refs = 1;
    t->width = width;
    t->count = count;
    t->vocab = vocab;
    t->owned = data;
    t->data = data;
    *out = t;
    return UG_OK;
}

ug_status ug_tokens_save(const ug_tokens *t, const char *path, int width)
{
    const char *op = "ug_tokens_save";
    if (!t || !path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !t ? "tokens" : "path");
    if (!valid_width(width))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: width %d: ids are 1, 2 or 4 bytes", op, width);
    if (width < 4 && t->vocab > ((int64_t)1 << (8 * width)))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: a %s file holds ids below %lld, and the set's "
                                                     "vocabulary is %lld ids: save it with a wider width",
                            op, width_name(width), (long long)1 << (8 * width), (long long)t->vocab);
    enum { CHUNK = 1 << 16 };
    uint8_t *buffer = ug_malloc(CHUNK);
    if (!buffer)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    ug_atomic_file *f = NULL;
    ug_status st = ug_atomic_open(path, &f);
    const int64_t per_chunk = CHUNK / width;
    for (int64_t i = 0; st == UG_OK && i < t->count; i += per_chunk) {
        const int64_t n = t->count - i < per_chunk ? t->count - i : per_chunk;
        for (int64_t k = 0; k < n; k++)
            put_id(buffer + k * width, width, id_at(t->data, t->width, i + k));
        st = ug_atomic_write(f, buffer, (size_t)n * (size_t)width);
    }
    free(buffer);
    if (st != UG_OK) {
        ug_atomic_abort(f);
        return st;
    }
    return ug_atomic_commit(f, 1);
}

ug_status ug_tokens_range(const ug_tokens *t, int64_t begin, int64_t end, ug_tokens **out)
{
    const char *op = "ug_tokens_range";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!t)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: tokens is NULL", op);
    if (begin < 0 || end <= begin || end > t->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: [%lld, %lld) is not a non-empty range of the set's %lld "
                                                     "tokens",
                            op, (long long)begin, (long long)end, (long long)t->count);
    ug_tokens *r = ug_calloc(1, sizeof *r);
    if (!r)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    const ug_tokens *base = t->base ? t->base : t;
    ug_tokens_retain(base);
    r->refs = 1;
    r->base = (ug_tokens *)base;
    r->width = t->width;
    r->data = t->data + (size_t)begin * (size_t)t->width;
    r->count = end - begin;
    r->vocab = t->vocab;
    *out = r;
    return UG_OK;
}

ug_status ug_tokens_split(const ug_tokens *t, double fraction, ug_tokens **first, ug_tokens **second)
{
    const char *op = "ug_tokens_split";
    if (!first || !second)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !first ? "first" : "second");
    *first = *second = NULL;
    if (!t)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: tokens is NULL", op);
    if (!(fraction > 0.0 && fraction < 1.0))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: fraction %g is not in (0, 1)", op, fraction);
    /* Python's int(n * 0.9): the product in double, truncated. */
    const int64_t cut = (int64_t)floor((double)t->count * fraction);
    if (cut < 1 || cut >= t->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %g of %lld tokens leaves %s part empty", op, fraction,
                            (long long)t->count, cut < 1 ? "the first" : "the second");
    UG_TRY(ug_tokens_range(t, 0, cut, first));
    ug_status st = ug_tokens_range(t, cut, t->count, second);
    if (st != UG_OK) {
        ug_tokens_free(*first);
        *first = NULL;
    }
    return st;
}

ug_status ug_tokens_read(const ug_tokens *t, int64_t start, int64_t count, int32_t *ids)
{
    if (!t || (!ids && count))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tokens_read: %s is NULL", !t ? "tokens" : "ids");
    if (start < 0 || count < 0 || start > t->count || count > t->count - start)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tokens_read: [%lld, %lld + %lld) is outside the set's "
                                                     "%lld tokens",
                            (long long)start, (long long)start, (long long)count, (long long)t->count);
    ug_tokens_gather(t, start, count, UG_I32, ids);
    return UG_OK;
}

void ug_tokens_gather(const ug_tokens *t, int64_t start, int64_t count, ug_dtype dtype, void *dst)
{
    if (dtype == UG_I64) {
        int64_t *out = dst;
        for (int64_t i = 0; i < count; i++)
            out[i] = (int64_t)id_at(t->data, t->width, start + i);
        return;
    }
    int32_t *out = dst; /* ids are below 2^31 (UG_TOKENS_MAX_VOCAB) */
    for (int64_t i = 0; i < count; i++)
        out[i] = (int32_t)id_at(t->data, t->width, start + i);
}
