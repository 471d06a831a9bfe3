/* Token data (tokens.h): token files of each width written here byte by
 * byte, and the files refused (empty, cut mid-id, ids past the
 * vocabulary, wrong widths); copies, ranges, the split by position and
 * saving; the sampler's windows against offsets recomputed here from the
 * documented Philox draws, a sampler made again drawing the same batch
 * (resuming), fixed evaluation batches, shards that split the global
 * batch; the character vocabulary, its file and the files it refuses,
 * and tinyshakespeare's round trip (skipped when the file is absent). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "reference.h"

#define OK(expr) CHECK_STATUS(expr, UG_OK)

/* ---- files in a private folder ---- */

static char folder[64];

static const char *temp_path(const char *name)
{
    static char path[160];
    if (!folder[0]) {
        snprintf(folder, sizeof folder, "/tmp/ug-test-tokens-XXXXXX");
        if (!mkdtemp(folder))
            folder[0] = '\0';
    }
    snprintf(path, sizeof path, "%s/%s", folder, name);
    return path;
}

static void write_bytes(const char *path, const void *data, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    if (!f || (bytes && fwrite(data, 1, bytes, f) != bytes))
        th_fail(TH_LOC, "cannot write %s", path);
    if (f)
        fclose(f);
}

/* ids as a little-endian file of width bytes each, written by hand. */
static void write_ids(const char *path, const uint32_t *ids, int64_t count, int width)
{
    uint8_t *bytes = th_alloc((size_t)count * (size_t)width + 1);
    for (int64_t i = 0; i < count; i++)
        for (int b = 0; b < width; b++)
            bytes[i * width + b] = (uint8_t)(ids[i] >> (8 * b));
    write_bytes(path, bytes, (size_t)count * (size_t)width);
}

/* ---- token files ---- */

static void test_token_files_of_each_width(ug_device *dev)
{
    (void)dev;
    static const int widths[3] = {1, 2, 4};
    static const uint32_t largest[3] = {255, 65535, 100000}; /* past uint16's range for uint32 */
    for (int w = 0; w < 3; w++) {
        th_context("width %d", widths[w]);
        enum { COUNT = 1001 };
        uint32_t ids[COUNT];
        for (int i = 0; i < COUNT; i++)
            ids[i] = (uint32_t)((uint64_t)i * 7919u % (largest[w] + 1u));
        ids[500] = largest[w];
        const char *path = temp_path("ids.bin");
        write_ids(path, ids, COUNT, widths[w]);
        ug_tokens *t = NULL;
        if (!OK(ug_tokens_open(path, &(ug_token_file){.width = widths[w]}, &t)))
            continue;
        CHECK_EQ_I64(ug_tokens_count(t), COUNT);
        CHECK_EQ_I64(ug_tokens_vocab_size(t), (int64_t)largest[w] + 1); /* computed: the largest id + 1 */
        int32_t got[COUNT];
        if (OK(ug_tokens_read(t, 0, COUNT, got)))
            for (int i = 0; i < COUNT; i++)
                CHECK_MSG(got[i] == (int32_t)ids[i], "id %d is %d, written %u", i, got[i], ids[i]);
        ug_tokens_free(t);
        /* A vocabulary given: kept as given. */
        if (OK(ug_tokens_open(path, &(ug_token_file){.width = widths[w], .vocab_size = 200000}, &t)))
            CHECK_EQ_I64(ug_tokens_vocab_size(t), 200000);
        ug_tokens_free(t);
        unlink(path);
    }
}

static void check_refused(const char *path, int width, int64_t vocab, ug_status want, const char *needle)
{
    ug_tokens *t = (ug_tokens *)&t; /* must come back NULL */
    if (CHECK_STATUS(ug_tokens_open(path, &(ug_token_file){.width = width, .vocab_size = vocab}, &t), want))
        CHECK_ERROR_HAS(needle);
    CHECK(t == NULL);
}

static void test_token_files_refused(ug_device *dev)
{
    (void)dev;
    char path[160]; /* temp_path's buffer is used again below */
    snprintf(path, sizeof path, "%s", temp_path("bad.bin"));
    write_bytes(path, "", 0);
    check_refused(path, 2, 0, UG_ERR_FORMAT, "empty");
    write_bytes(path, "\x01\x00\x02", 3); /* one id and half of the next */
    check_refused(path, 2, 0, UG_ERR_FORMAT, "cut short at byte offset 2");
    write_bytes(path, "\x01\x00\x00\x00\x02\x00", 6);
    check_refused(path, 4, 0, UG_ERR_FORMAT, "cut short at byte offset 4");
    const uint32_t ids[5] = {1, 2, 9, 12, 3};
    write_ids(path, ids, 5, 2);
    check_refused(path, 2, 10, UG_ERR_FORMAT, "id 12 at byte offset 6 (token 3)"); /* past the vocabulary */
    check_refused(path, 2, 10, UG_ERR_FORMAT, "vocabulary size 10");
    const uint32_t huge[2] = {5, 0xFFFFFFFFu};
    write_ids(path, huge, 2, 4);
    check_refused(path, 4, 0, UG_ERR_FORMAT, "past the largest vocabulary");
    write_ids(path, ids, 5, 2);
    check_refused(path, 3, 0, UG_ERR_INVALID_ARGUMENT, "1, 2 or 4 bytes");
    check_refused(path, 2, -1, UG_ERR_INVALID_ARGUMENT, "vocab_size -1");
    check_refused(temp_path("absent.bin"), 2, 0, UG_ERR_IO, "absent.bin");
    check_refused(folder, 2, 0, UG_ERR_IO, "folder");
    ug_tokens *t = NULL;
    CHECK_STATUS(ug_tokens_open(NULL, &(ug_token_file){.width = 2}, &t), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tokens_open(path, NULL, &t), UG_ERR_INVALID_ARGUMENT);
    unlink(path);
}

static void test_token_sets_ranges_split_save(ug_device *dev)
{
    (void)dev;
    enum { COUNT = 1000 };
    int32_t ids[COUNT], got[COUNT];
    for (int i = 0; i < COUNT; i++)
        ids[i] = (i * 31) % 300;
    ug_tokens *all = NULL, *first = NULL, *second = NULL, *mid = NULL, *back = NULL;
    REQUIRE(OK(ug_tokens_from_ids(ids, COUNT, 0, &all)));
    CHECK_EQ_I64(ug_tokens_vocab_size(all), 300);
    /* nanoGPT's split: data[:int(n*0.9)], data[int(n*0.9):]. */
    if (OK(ug_tokens_split(all, 0.9, &first, &second))) {
        CHECK_EQ_I64(ug_tokens_count(first), 900);
        CHECK_EQ_I64(ug_tokens_count(second), 100);
        CHECK_EQ_I64(ug_tokens_vocab_size(second), 300);
        if (OK(ug_tokens_read(second, 0, 100, got)))
            CHECK(!memcmp(got, ids + 900, 100 * sizeof *got));
    }
    /* A range of a range, kept after everything else is freed. */
    if (first && OK(ug_tokens_range(first, 100, 200, &mid))) {
        ug_tokens_free(all);
        ug_tokens_free(first);
        all = first = NULL;
        if (OK(ug_tokens_read(mid, 0, 100, got)))
            CHECK(!memcmp(got, ids + 100, 100 * sizeof *got));
        CHECK_STATUS(ug_tokens_read(mid, 50, 51, got), UG_ERR_INVALID_ARGUMENT);
    }
    /* Saved as uint16 and opened again; uint8 cannot hold the ids. */
    const char *path = temp_path("saved.bin");
    if (mid && OK(ug_tokens_save(mid, path, 2)) &&
        OK(ug_tokens_open(path, &(ug_token_file){.width = 2, .vocab_size = 300}, &back))) {
        CHECK_EQ_I64(ug_tokens_count(back), 100);
        if (OK(ug_tokens_read(back, 0, 100, got)))
            CHECK(!memcmp(got, ids + 100, 100 * sizeof *got));
    }
    if (mid && CHECK_STATUS(ug_tokens_save(mid, path, 1), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("uint8", "300");
    /* Refusals. */
    ug_tokens *t = NULL;
    int32_t bad[3] = {1, -2, 3};
    CHECK_STATUS(ug_tokens_from_ids(bad, 3, 0, &t), UG_ERR_INVALID_ARGUMENT);
    bad[1] = 7;
    CHECK_STATUS(ug_tokens_from_ids(bad, 3, 5, &t), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tokens_from_ids(bad, 0, 0, &t), UG_ERR_INVALID_ARGUMENT);
    ug_tokens *a = NULL, *b = NULL;
    if (mid) {
        CHECK_STATUS(ug_tokens_split(mid, 0.001, &a, &b), UG_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ug_tokens_split(mid, 1.0, &a, &b), UG_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ug_tokens_range(mid, 10, 10, &t), UG_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ug_tokens_range(mid, 0, 101, &t), UG_ERR_INVALID_ARGUMENT);
    }
    CHECK(t == NULL && a == NULL && b == NULL);
    ug_tokens_free(all);
    ug_tokens_free(first);
    ug_tokens_free(second);
    ug_tokens_free(mid);
    ug_tokens_free(back);
    unlink(path);
}

/* ---- the sampler ---- */

/* splitmix64's output for state x: its published constants. */
static uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Window row of batch index, as tokens.h documents it. */
static int64_t reference_offset(uint64_t seed, int stream, int64_t index, int64_t batch, int64_t row, int64_t places)
{
    const uint64_t key = splitmix64(seed ^ ((uint64_t)stream * 0x9E3779B97F4A7C15ull));
    uint32_t r0 = 0, r1 = 0;
    ref_philox_words(key, (uint64_t)index * (uint64_t)batch + (uint64_t)row, &r0, &r1);
    return (int64_t)((((uint64_t)r1 << 32) | r0) % (uint64_t)places);
}

enum { SET_COUNT = 1000, SET_VOCAB = 50 };
static int32_t set_ids[SET_COUNT];

static ug_tokens *make_set(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < SET_COUNT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        set_ids[i] = (int32_t)((s >> 33) % SET_VOCAB);
    }
    ug_tokens *t = NULL;
    if (ug_tokens_from_ids(set_ids, SET_COUNT, SET_VOCAB, &t) != UG_OK)
        th_fail(TH_LOC, "ug_tokens_from_ids: %s", ug_last_error());
    return t;
}

/* Batch index of stream against windows cut here from set_ids at the
 * reference offsets. */
static void check_batch(ug_token_sampler *s, int stream, int64_t index)
{
    const ug_token_sampler_config c = ug_token_sampler_get_config(s);
    th_context("stream %d, batch %lld, %s", stream, (long long)index, ug_dtype_name(c.dtype));
    ug_token_batch b;
    if (!OK(ug_token_sampler_batch(s, (ug_token_stream)stream, index, &b)))
        return;
    CHECK_EQ_I64(b.rows, c.batch_size);
    CHECK_EQ_I64(b.first_row, 0);
    const int64_t shape[2] = {c.batch_size, c.block_size};
    if (!th_check_tensor(b.x, c.dtype, 2, shape) || !th_check_tensor(b.y, c.dtype, 2, shape))
        return;
    double *x = th_download(b.x), *y = th_download(b.y);
    int64_t offsets[64];
    CHECK(OK(ug_token_sampler_offsets(s, (ug_token_stream)stream, index, offsets)));
    for (int64_t r = 0; r < c.batch_size; r++) {
        const int64_t off = reference_offset(c.seed, stream, index, c.batch_size, r, SET_COUNT - c.block_size);
        CHECK_MSG(offsets[r] == off, "row %lld starts at %lld, the reference at %lld", (long long)r,
                  (long long)offsets[r], (long long)off);
        for (int64_t i = 0; i < c.block_size; i++) {
            CHECK_MSG(x[r * c.block_size + i] == set_ids[off + i], "x[%lld][%lld]", (long long)r, (long long)i);
            CHECK_MSG(y[r * c.block_size + i] == set_ids[off + i + 1], "y[%lld][%lld]", (long long)r, (long long)i);
        }
    }
}

static void test_sampler_windows_match_reference(ug_device *dev)
{
    ug_tokens *t = make_set();
    REQUIRE(t);
    for (int wide = 0; wide < 2; wide++) {
        ug_token_sampler_config c = ug_token_sampler_defaults();
        c.batch_size = 5;
        c.block_size = 7;
        c.seed = 1234;
        c.dtype = wide ? UG_I64 : UG_I32;
        ug_token_sampler *s = NULL;
        if (!OK(ug_token_sampler_create(t, dev, &c, &s)))
            continue;
        const int64_t indices[4] = {0, 1, 17, (int64_t)1 << 40};
        for (int k = 0; k < 4; k++)
            for (int stream = 0; stream < 2; stream++)
                check_batch(s, stream, indices[k]);
        ug_token_sampler_free(s);
    }
    ug_tokens_free(t);
}

/* Every batch's contents as doubles: x's then y's. */
static double *batch_values(ug_token_sampler *s, int stream, int64_t index, int64_t *n)
{
    ug_token_batch b;
    if (!OK(ug_token_sampler_batch(s, (ug_token_stream)stream, index, &b)))
        return NULL;
    const int64_t half = ug_tensor_numel(b.x);
    double *x = th_download(b.x), *y = th_download(b.y), *all = th_alloc(2 * (size_t)half * sizeof *all);
    if (!x || !y)
        return NULL;
    memcpy(all, x, (size_t)half * sizeof *all);
    memcpy(all + half, y, (size_t)half * sizeof *all);
    *n = 2 * half;
    return all;
}

/* A sampler made again (a resumed run's) draws batch n as the first did,
 * whatever came before; evaluation batches are the same every time. */
static void test_sampler_resumes_and_evaluates_alike(ug_device *dev)
{
    ug_tokens *t = make_set();
    REQUIRE(t);
    ug_token_sampler_config c = ug_token_sampler_defaults();
    c.batch_size = 4;
    c.block_size = 16;
    c.seed = 99;
    ug_token_sampler *first = NULL, *again = NULL;
    if (OK(ug_token_sampler_create(t, dev, &c, &first)) && OK(ug_token_sampler_create(t, dev, &c, &again))) {
        double *kept[10] = {0}, *eval_before[3] = {0};
        int64_t n = 0;
        for (int i = 0; i < 3; i++)
            eval_before[i] = batch_values(first, UG_TOKEN_EVAL, i, &n);
        for (int i = 0; i < 10; i++)
            kept[i] = batch_values(first, UG_TOKEN_TRAIN, i, &n);
        double *resumed = batch_values(again, UG_TOKEN_TRAIN, 7, &n);
        if (kept[7] && resumed)
            CHECK_MSG(!memcmp(kept[7], resumed, (size_t)n * sizeof *resumed),
                      "batch 7 of a new sampler differs from batch 7 after 0..6");
        if (kept[6] && kept[7])
            CHECK_MSG(memcmp(kept[6], kept[7], (size_t)n * sizeof *resumed), "batches 6 and 7 are the same");
        for (int i = 0; i < 3; i++) {
            double *later = batch_values(first, UG_TOKEN_EVAL, i, &n);
            if (later && eval_before[i])
                CHECK_MSG(!memcmp(later, eval_before[i], (size_t)n * sizeof *later),
                          "evaluation batch %d changed after training batches", i);
        }
        if (eval_before[0] && kept[0])
            CHECK_MSG(memcmp(eval_before[0], kept[0], (size_t)n * sizeof *kept[0]),
                      "evaluation batch 0 is training batch 0: the streams are not apart");
        /* Another seed, other batches. */
        ug_token_sampler_free(again);
        again = NULL;
        c.seed = 100;
        double *other = OK(ug_token_sampler_create(t, dev, &c, &again)) ? batch_values(again, 0, 7, &n) : NULL;
        if (other && kept[7])
            CHECK_MSG(memcmp(other, kept[7], (size_t)n * sizeof *other), "seeds 99 and 100 drew the same batch");
    }
    ug_token_sampler_free(first);
    ug_token_sampler_free(again);
    ug_tokens_free(t);
}

/* Shards' parts, concatenated in rank order, are the unsharded batch,
 * with equal and with measured weights. */
static void test_sampler_shards_split_the_batch(ug_device *dev)
{
    ug_tokens *t = make_set();
    REQUIRE(t);
    ug_token_sampler_config c = ug_token_sampler_defaults();
    c.batch_size = 7;
    c.block_size = 5;
    c.seed = 3;
    ug_token_sampler *whole = NULL, *parts[3] = {0};
    int64_t n = 0;
    REQUIRE(OK(ug_token_sampler_create(t, dev, &c, &whole)));
    double *want = batch_values(whole, UG_TOKEN_TRAIN, 11, &n);
    c.shard_count = 3;
    for (int i = 0; i < 3; i++) {
        c.shard_index = i;
        CHECK(OK(ug_token_sampler_create(t, dev, &c, &parts[i])));
    }
    const double weights[3] = {1.0, 2.0, 4.0};
    for (int weighted = 0; weighted < 2 && want && parts[2]; weighted++) {
        th_context("%s weights", weighted ? "unequal" : "equal");
        for (int i = 0; weighted && i < 3; i++)
            CHECK(OK(ug_token_sampler_set_shard_weights(parts[i], weights)));
        int64_t next_row = 0;
        for (int i = 0; i < 3; i++) {
            ug_token_batch b;
            if (!OK(ug_token_sampler_batch(parts[i], UG_TOKEN_TRAIN, 11, &b)))
                continue;
            CHECK_EQ_I64(b.first_row, next_row);
            if (b.rows) {
                double *x = th_download(b.x), *y = th_download(b.y);
                const int64_t cells = b.rows * c.block_size, at = b.first_row * c.block_size;
                CHECK(x && !memcmp(x, want + at, (size_t)cells * sizeof *x));
                CHECK(y && !memcmp(y, want + n / 2 + at, (size_t)cells * sizeof *y));
            }
            next_row = b.first_row + b.rows;
        }
        CHECK_EQ_I64(next_row, c.batch_size);
    }
    if (parts[2]) { /* weights 1, 2, 4 of 7 rows: 1, 2 and 4 */
        ug_token_batch b;
        if (OK(ug_token_sampler_batch(parts[2], UG_TOKEN_TRAIN, 0, &b)))
            CHECK_EQ_I64(b.rows, 4);
    }
    CHECK_STATUS(ug_token_sampler_set_shard_weights(whole, weights), UG_ERR_STATE);
    const double bad[3] = {1.0, 0.0, 1.0};
    if (parts[0])
        CHECK_STATUS(ug_token_sampler_set_shard_weights(parts[0], bad), UG_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 3; i++)
        ug_token_sampler_free(parts[i]);
    ug_token_sampler_free(whole);
    ug_tokens_free(t);
}

/* Offsets reach every place a window may start, about equally often. */
static void test_sampler_offsets_cover_the_set(ug_device *dev)
{
    int32_t ids[108];
    for (int i = 0; i < 108; i++)
        ids[i] = i % 10;
    ug_tokens *t = NULL;
    REQUIRE(OK(ug_tokens_from_ids(ids, 108, 0, &t)));
    ug_token_sampler_config c = ug_token_sampler_defaults();
    c.batch_size = 50;
    c.block_size = 8; /* 100 places: 0..99 */
    ug_token_sampler *s = NULL;
    if (OK(ug_token_sampler_create(t, dev, &c, &s))) {
        int64_t hits[100] = {0}, offsets[50];
        for (int64_t index = 0; index < 400; index++) { /* 20,000 draws, 200 a place */
            if (!OK(ug_token_sampler_offsets(s, UG_TOKEN_TRAIN, index, offsets)))
                break;
            for (int r = 0; r < 50; r++) {
                REQUIRE(offsets[r] >= 0 && offsets[r] < 100);
                hits[offsets[r]]++;
            }
        }
        double chi2 = 0.0; /* 99 degrees of freedom: above 160 once in ~10^5 runs */
        for (int p = 0; p < 100; p++)
            chi2 += (hits[p] - 200.0) * (hits[p] - 200.0) / 200.0;
        CHECK_MSG(chi2 < 160.0, "chi-square %.1f over the 100 places: the offsets are not uniform", chi2);
        CHECK(hits[0] > 0 && hits[99] > 0);
    }
    ug_token_sampler_free(s);
    ug_tokens_free(t);
}

static void test_sampler_refuses(ug_device *dev)
{
    ug_tokens *t = make_set();
    REQUIRE(t);
    ug_token_sampler_config c = ug_token_sampler_defaults();
    ug_token_sampler *s = NULL;
    c.block_size = SET_COUNT; /* needs SET_COUNT + 1 tokens */
    if (CHECK_STATUS(ug_token_sampler_create(t, dev, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("block_size + 1");
    c = ug_token_sampler_defaults();
    c.batch_size = 0;
    CHECK_STATUS(ug_token_sampler_create(t, dev, &c, &s), UG_ERR_INVALID_ARGUMENT);
    c = ug_token_sampler_defaults();
    c.dtype = UG_F32;
    CHECK_STATUS(ug_token_sampler_create(t, dev, &c, &s), UG_ERR_INVALID_ARGUMENT);
    c = ug_token_sampler_defaults();
    c.shard_count = 2;
    c.shard_index = 2;
    CHECK_STATUS(ug_token_sampler_create(t, dev, &c, &s), UG_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    c = ug_token_sampler_defaults();
    if (OK(ug_token_sampler_create(t, dev, &c, &s))) {
        ug_token_batch b;
        CHECK_STATUS(ug_token_sampler_batch(s, UG_TOKEN_TRAIN, -1, &b), UG_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ug_token_sampler_batch(s, UG_TOKEN_TRAIN, INT64_MAX, &b), UG_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(ug_token_sampler_batch(s, (ug_token_stream)2, 0, &b), UG_ERR_INVALID_ARGUMENT);
    }
    ug_token_sampler_free(s);
    ug_tokens_free(t);
}

/* ---- the character vocabulary ---- */

static void test_char_vocab_small(ug_device *dev)
{
    (void)dev;
    ug_char_vocab *v = NULL, *w = NULL;
    REQUIRE(OK(ug_char_vocab_build("hello", 5, &v)));
    CHECK_EQ_I64(ug_char_vocab_size(v), 4); /* e h l o */
    CHECK(ug_char_vocab_symbol(v, 0) == 'e' && ug_char_vocab_symbol(v, 3) == 'o');
    CHECK(ug_char_vocab_symbol(v, 4) == -1 && ug_char_vocab_symbol(v, -1) == -1);
    int32_t ids[5];
    char text[6] = {0};
    if (OK(ug_char_vocab_encode(v, "hello", 5, ids)))
        CHECK(ids[0] == 1 && ids[1] == 0 && ids[2] == 2 && ids[3] == 2 && ids[4] == 3);
    if (OK(ug_char_vocab_decode(v, ids, 5, text)))
        CHECK(!strcmp(text, "hello"));
    if (CHECK_STATUS(ug_char_vocab_encode(v, "help", 4, ids), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("'p'", "offset 3");
    ids[2] = 4;
    if (CHECK_STATUS(ug_char_vocab_decode(v, ids, 5, text), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ids[2] is 4");
    const uint8_t symbols[3] = {'a', 'c', 'b'};
    CHECK_STATUS(ug_char_vocab_from_symbols(symbols, 3, &w), UG_ERR_INVALID_ARGUMENT);
    if (OK(ug_char_vocab_from_symbols(symbols, 2, &w)))
        CHECK(ug_char_vocab_size(w) == 2 && ug_char_vocab_symbol(w, 1) == 'c');
    ug_char_vocab *none = NULL;
    CHECK_STATUS(ug_char_vocab_build("", 0, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK(none == NULL);
    ug_char_vocab_free(w);
    ug_char_vocab_free(v);
    ug_char_vocab *all = NULL;
    uint8_t every[256];
    for (int b = 0; b < 256; b++)
        every[b] = (uint8_t)(255 - b);
    const char *path = temp_path("vocab.json");
    if (OK(ug_char_vocab_build(every, 256, &all)) && OK(ug_char_vocab_save(all, path))) {
        ug_char_vocab *back = NULL;
        if (OK(ug_char_vocab_load(path, &back)))
            for (int id = 0; id < 256; id++)
                CHECK(ug_char_vocab_symbol(back, id) == id);
        ug_char_vocab_free(back);
    }
    ug_char_vocab_free(all);
    unlink(path);
}

/* Each file refused with UG_ERR_FORMAT and a message holding needle. */
static void test_char_vocab_files_refused(ug_device *dev)
{
    (void)dev;
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "ends at byte offset 0"},
        {"[1, 2]", "byte offset 0"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1}", "the key \"bytes\""},
        {"{\"format\": \"unigrad-char-vocab\", \"bytes\": [1]}", "the key \"version\""},
        {"{\"format\": \"other\", \"version\": 1, \"bytes\": [1]}", "byte offset 11"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 2, \"bytes\": [1]}", "version 1"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [1, 1]}", "increasing"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [3, 2]}", "increasing"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [256]}", "0..255"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [-1]}", "0..255"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [010]}", "0..255"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [1.5]}", "',' or ']'"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": []}", "0..255"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [1]} x", "the end of the file"},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"version\": 1, \"bytes\": [1]}", "not given before"},
        {"{\"format\": \"unigrad-char-vocab\", \"vocab\": 1, \"bytes\": [1]}", "\"format\", \"version\" or \"bytes\""},
        {"{\"format\": \"unigrad-char-vocab\", \"version\": 1, \"bytes\": [1, 2", "ends at byte offset"},
        {"{\"form\\u0061t\": 1}", "plain character"},
    };
    const char *path = temp_path("bad.json");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        th_context("%s", bad[i].text);
        write_bytes(path, bad[i].text, strlen(bad[i].text));
        ug_char_vocab *v = NULL;
        if (CHECK_STATUS(ug_char_vocab_load(path, &v), UG_ERR_FORMAT))
            CHECK_ERROR_HAS(bad[i].needle, "bad.json");
        CHECK(v == NULL);
        ug_char_vocab_free(v);
    }
    th_context("a file of 64 KiB and more");
    char *big = th_alloc(70000);
    memset(big, ' ', 70000);
    write_bytes(path, big, 70000);
    ug_char_vocab *v = NULL;
    if (CHECK_STATUS(ug_char_vocab_load(path, &v), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("at most 65536");
    /* Whitespace and key order are JSON's to choose. */
    th_context("keys in another order");
    const char *good = "\n{ \"bytes\" :[ 10,32 ,97 ] ,\"version\":1,\t\"format\":\"unigrad-char-vocab\" }\r\n";
    write_bytes(path, good, strlen(good));
    if (OK(ug_char_vocab_load(path, &v)))
        CHECK(ug_char_vocab_size(v) == 3 && ug_char_vocab_symbol(v, 1) == ' ');
    ug_char_vocab_free(v);
    unlink(path);
}

static void test_char_vocab_on_tinyshakespeare(ug_device *dev)
{
    (void)dev;
    const char *path = getenv("UG_TEST_TINYSHAKESPEARE");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        th_skip("tinyshakespeare.txt is absent (%s)", path ? path : "UG_TEST_TINYSHAKESPEARE is not set");
        return;
    }
    enum { SIZE = 1115394 };
    char *text = th_alloc(SIZE + 1), *back = th_alloc(SIZE);
    int32_t *ids = th_alloc(SIZE * sizeof *ids);
    const size_t got = fread(text, 1, SIZE + 1, f);
    fclose(f);
    REQUIRE(got == SIZE);
    ug_char_vocab *v = NULL, *loaded = NULL;
    ug_tokens *all = NULL, *train = NULL, *val = NULL;
    REQUIRE(OK(ug_char_vocab_build(text, SIZE, &v)));
    /* nanoGPT's prepare.py: sorted(list(set(data))), 65 characters. */
    static const char symbols[] = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    CHECK_EQ_I64(ug_char_vocab_size(v), 65);
    for (int id = 0; id < 65 && ug_char_vocab_size(v) == 65; id++)
        CHECK_MSG(ug_char_vocab_symbol(v, id) == (uint8_t)symbols[id], "symbol %d", id);
    if (OK(ug_char_vocab_encode(v, text, SIZE, ids)) && OK(ug_char_vocab_decode(v, ids, SIZE, back)))
        CHECK_MSG(!memcmp(back, text, SIZE), "the text decoded from its ids differs");
    const char *saved = temp_path("shakespeare-vocab.json");
    if (OK(ug_char_vocab_save(v, saved)) && OK(ug_char_vocab_load(saved, &loaded))) {
        CHECK_EQ_I64(ug_char_vocab_size(loaded), 65);
        for (int id = 0; id < 65; id++)
            CHECK(ug_char_vocab_symbol(loaded, id) == ug_char_vocab_symbol(v, id));
    }
    if (OK(ug_tokens_from_text(v, text, SIZE, &all)) && OK(ug_tokens_split(all, 0.9, &train, &val))) {
        CHECK_EQ_I64(ug_tokens_count(all), SIZE);
        CHECK_EQ_I64(ug_tokens_vocab_size(all), 65);
        CHECK_EQ_I64(ug_tokens_count(train), 1003854); /* int(1115394 * 0.9) */
        CHECK_EQ_I64(ug_tokens_count(val), 111540);
        int32_t first[4];
        if (OK(ug_tokens_read(val, 0, 4, first)))
            CHECK(!memcmp(first, ids + 1003854, sizeof first));
    }
    unlink(saved);
    ug_tokens_free(all);
    ug_tokens_free(train);
    ug_tokens_free(val);
    ug_char_vocab_free(v);
    ug_char_vocab_free(loaded);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(token_files_of_each_width),
        TH_HOST_TEST(token_files_refused),
        TH_HOST_TEST(token_sets_ranges_split_save),
        TH_DEVICE_TEST(sampler_windows_match_reference),
        TH_DEVICE_TEST(sampler_resumes_and_evaluates_alike),
        TH_DEVICE_TEST(sampler_shards_split_the_batch),
        TH_DEVICE_TEST(sampler_offsets_cover_the_set),
        TH_DEVICE_TEST(sampler_refuses),
        TH_HOST_TEST(char_vocab_small),
        TH_HOST_TEST(char_vocab_files_refused),
        TH_HOST_TEST(char_vocab_on_tinyshakespeare),
    };
    int rc = th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
    if (folder[0])
        rmdir(folder);
    return rc;
}
