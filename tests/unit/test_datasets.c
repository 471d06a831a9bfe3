/* Data sets beyond f32 features and class labels (include/unigrad/data.h):
 * bytes kept as bytes and converted in the batch, float targets, subsets
 * and seeded splits, callback data sets, and resuming an epoch part-way
 * (ug_loader_seek), and CIFAR-10's binary files. Each batch is checked against values the test computes
 * itself from the arrays it gave. */
#define _GNU_SOURCE /* mkdtemp */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "unigrad/data.h"

enum { COUNT = 103, FEATURES = 5, WIDTH = 3 };

static uint8_t byte_value(int64_t sample, int64_t feature) { return (uint8_t)((sample * 37 + feature * 11) % 256); }
static float target_value(int64_t sample, int64_t k) { return (float)sample * 0.5f - (float)k; }

/* Every batch of one epoch (or from batch `from` on), its features and y
 * downloaded; check(row's sample id, x row, y row) decides. Returns the
 * number of samples seen, or -1. */
typedef bool (*row_check)(const void *context, int64_t id, const float *x, const void *y);

static int64_t walk_epoch(ug_loader *l, int64_t features, size_t y_bytes, row_check check, const void *context,
                          int64_t *ids_out)
{
    int64_t seen = 0;
    for (;;) {
        ug_batch b;
        bool done = false;
        if (ug_loader_next(l, &b, &done) != UG_OK) {
            th_fail(TH_LOC, "ug_loader_next: %s", ug_last_error());
            return -1;
        }
        if (done)
            return seen;
        float *x = th_alloc((size_t)(b.count * features) * sizeof(float));
        char *y = th_alloc((size_t)b.count * y_bytes);
        if (ug_tensor_download(b.x, x, (size_t)(b.count * features) * sizeof(float)) != UG_OK ||
            ug_tensor_download(b.y, y, (size_t)b.count * y_bytes) != UG_OK) {
            th_fail(TH_LOC, "download: %s", ug_last_error());
            return -1;
        }
        for (int64_t r = 0; r < b.count; r++) {
            if (ids_out)
                ids_out[seen + r] = b.sample_ids[r];
            if (check && !check(context, b.sample_ids[r], x + r * features, y + (size_t)r * y_bytes)) {
                th_fail(TH_LOC, "batch %lld row %lld (sample %lld) is wrong", (long long)b.index, (long long)r,
                        (long long)b.sample_ids[r]);
                return -1;
            }
        }
        seen += b.count;
    }
}

/* ---- bytes ---- */

typedef struct byte_context {
    float scale, shift;
    const int64_t *base_of; /* a subset's ids in the base, or NULL */
} byte_context;

static bool check_byte_row(const void *c, int64_t id, const float *x, const void *y)
{
    const byte_context *b = c;
    int64_t base = b->base_of ? b->base_of[id] : id;
    for (int64_t f = 0; f < FEATURES; f++) {
        float want = b->scale * (float)byte_value(base, f) + b->shift;
        if (fabsf(x[f] - want) > 1e-6f * (1.0f + fabsf(want)))
            return false;
    }
    int32_t label;
    memcpy(&label, y, sizeof label);
    return label == (int32_t)(base % 4);
}

static ug_dataset *make_byte_dataset(void)
{
    uint8_t *x = th_alloc(COUNT * FEATURES);
    int32_t *labels = th_alloc(COUNT * sizeof(int32_t));
    for (int64_t i = 0; i < COUNT; i++) {
        for (int64_t f = 0; f < FEATURES; f++)
            x[i * FEATURES + f] = byte_value(i, f);
        labels[i] = (int32_t)(i % 4);
    }
    ug_dataset_arrays a = {.count = COUNT, .features = FEATURES, .x_dtype = UG_U8, .x = x, .labels = labels};
    ug_dataset *ds = NULL;
    if (ug_dataset_create(&a, &ds) != UG_OK)
        th_fail(TH_LOC, "ug_dataset_create: %s", ug_last_error());
    return ds;
}

static void test_bytes_stay_bytes(ug_device *dev)
{
    ug_dataset *ds = make_byte_dataset();
    REQUIRE(ds);
    /* One byte per value, four per label. */
    CHECK_EQ_I64((int64_t)ug_dataset_host_bytes(ds), COUNT * FEATURES + COUNT * 4);
    CHECK_EQ_I64(ug_dataset_classes(ds), 4);
    CHECK_EQ_I64(ug_dataset_target_width(ds), 0);

    /* Statistics of the transformed values, against a direct computation. */
    CHECK_OK(ug_dataset_transform(ds, 1.0f / 255.0f, 0.0f));
    double mean = 0, sd = 0, want_mean = 0, want_sq = 0;
    CHECK_OK(ug_dataset_stats(ds, &mean, &sd));
    for (int64_t i = 0; i < COUNT; i++)
        for (int64_t f = 0; f < FEATURES; f++)
            want_mean += (double)((1.0f / 255.0f) * (float)byte_value(i, f));
    want_mean /= COUNT * FEATURES;
    for (int64_t i = 0; i < COUNT; i++)
        for (int64_t f = 0; f < FEATURES; f++) {
            double d = (double)((1.0f / 255.0f) * (float)byte_value(i, f)) - want_mean;
            want_sq += d * d;
        }
    CHECK(fabs(mean - want_mean) < 1e-12);
    CHECK(fabs(sd - sqrt(want_sq / (COUNT * FEATURES))) < 1e-12);

    /* Standardised: the composed transform reaches the batches. */
    CHECK_OK(ug_dataset_transform(ds, (float)(1.0 / sd), (float)(-mean / sd)));
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 16;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    byte_context ctx = {(float)(1.0 / sd) * (1.0f / 255.0f), (float)(1.0 / sd) * 0.0f + (float)(-mean / sd), NULL};
    CHECK_EQ_I64(walk_epoch(l, FEATURES, sizeof(int32_t), check_byte_row, &ctx, NULL), COUNT);
    ug_loader_free(l);

    /* In bf16: the table's values rounded once. */
    c.x_dtype = UG_BF16;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    ug_batch b;
    bool done = false;
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    uint16_t *h = th_alloc((size_t)(b.count * FEATURES) * 2);
    CHECK_OK(ug_tensor_download(b.x, h, (size_t)(b.count * FEATURES) * 2));
    for (int64_t r = 0; r < b.count; r++)
        for (int64_t f = 0; f < FEATURES; f++) {
            float want = ctx.scale * (float)byte_value(b.sample_ids[r], f) + ctx.shift;
            CHECK_MSG(h[r * FEATURES + f] == ug_f32_to_bf16(want), "row %lld feature %lld", (long long)r,
                      (long long)f);
        }
    ug_loader_free(l);
    ug_dataset_free(ds);
}

/* ---- float targets ---- */

static bool check_target_row(const void *c, int64_t id, const float *x, const void *y)
{
    (void)c;
    float t[WIDTH];
    memcpy(t, y, sizeof t);
    for (int64_t k = 0; k < WIDTH; k++)
        if (t[k] != target_value(id, k))
            return false;
    return x[0] == (float)id && x[FEATURES - 1] == (float)(id + FEATURES - 1);
}

static void test_float_targets(ug_device *dev)
{
    float *x = th_alloc(COUNT * FEATURES * sizeof(float));
    float *t = th_alloc(COUNT * WIDTH * sizeof(float));
    for (int64_t i = 0; i < COUNT; i++) {
        for (int64_t f = 0; f < FEATURES; f++)
            x[i * FEATURES + f] = (float)(i + f);
        for (int64_t k = 0; k < WIDTH; k++)
            t[i * WIDTH + k] = target_value(i, k);
    }
    ug_dataset *ds = NULL;
    ug_dataset_arrays a = {.count = COUNT, .features = FEATURES, .x = x, .targets = t, .target_width = WIDTH};
    REQUIRE_OK(ug_dataset_create(&a, &ds));
    CHECK_EQ_I64(ug_dataset_target_width(ds), WIDTH);
    CHECK_EQ_I64(ug_dataset_classes(ds), 0);
    CHECK_STATUS(ug_dataset_require_classes(ds, 10), UG_ERR_DTYPE);
    CHECK_ERROR_HAS("float targets");

    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 10;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 1));
    ug_batch b;
    bool done = false;
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    int64_t ys[2] = {10, WIDTH};
    CHECK(th_check_tensor(b.y, UG_F32, 2, ys));
    CHECK_OK(ug_loader_start_epoch(l, 1));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, WIDTH * sizeof(float), check_target_row, NULL, NULL), COUNT);
    uint64_t bytes = 0;
    CHECK_OK(ug_loader_device_bytes(ds, &c, &bytes));
    CHECK(bytes >= 3 * (10 * FEATURES * 4 + 10 * WIDTH * 4));
    ug_loader_free(l);
    ug_dataset_free(ds);

    /* Exactly one of labels and targets. */
    a.labels = (const int32_t *)t;
    CHECK_STATUS(ug_dataset_create(&a, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("not both");
    a.labels = NULL;
    a.target_width = 0;
    CHECK_STATUS(ug_dataset_create(&a, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("target_width");
    CHECK(ds == NULL);
}

/* ---- subsets and splits ---- */

/* The base sample of each of a byte data set's samples, in its order,
 * found from the values a loader delivers (the first two features identify
 * a sample among COUNT). NULL after a failure. */
static int64_t *base_samples(ug_device *dev, ug_dataset *ds)
{
    ug_loader_config c = ug_loader_default_config();
    c.shuffle = false;
    c.batch_size = 8;
    ug_loader *l = NULL;
    if (ug_loader_create(ds, dev, &c, &l) != UG_OK || ug_loader_start_epoch(l, 0) != UG_OK) {
        th_fail(TH_LOC, "loader: %s", ug_last_error());
        ug_loader_free(l);
        return NULL;
    }
    int64_t n = ug_dataset_count(ds), got = 0;
    int64_t *base_of = th_alloc((size_t)n * sizeof *base_of);
    float *x = th_alloc((size_t)(8 * FEATURES) * sizeof(float));
    for (bool done = false;;) {
        ug_batch b;
        if (ug_loader_next(l, &b, &done) != UG_OK ||
            (!done && ug_tensor_download(b.x, x, (size_t)(b.count * FEATURES) * sizeof(float)) != UG_OK)) {
            th_fail(TH_LOC, "batch: %s", ug_last_error());
            break;
        }
        if (done)
            break;
        for (int64_t r = 0; r < b.count; r++) {
            if (b.sample_ids[r] != got)
                th_fail(TH_LOC, "unshuffled sample %lld has id %lld", (long long)got, (long long)b.sample_ids[r]);
            base_of[got] = -1;
            for (int64_t i = 0; i < COUNT; i++)
                if ((float)byte_value(i, 0) == x[r * FEATURES] && (float)byte_value(i, 1) == x[r * FEATURES + 1])
                    base_of[got] = i;
            got++;
        }
    }
    ug_loader_free(l);
    return got == n ? base_of : NULL;
}

static void test_subsets_and_splits(ug_device *dev)
{
    ug_dataset *ds = make_byte_dataset();
    REQUIRE(ds);
    ug_dataset *train = NULL, *val = NULL, *train2 = NULL, *val2 = NULL;
    REQUIRE_OK(ug_dataset_split(ds, 0.2, 7, &train, &val));
    CHECK_EQ_I64(ug_dataset_count(val), 21); /* round(0.2 * 103) */
    CHECK_EQ_I64(ug_dataset_count(train), COUNT - 21);
    CHECK_EQ_I64(ug_dataset_classes(val), 4);
    int64_t *val_base = base_samples(dev, val), *train_base = base_samples(dev, train);
    REQUIRE(val_base && train_base);
    /* Every sample on exactly one side, each side in the data set's order. */
    int seen[COUNT] = {0};
    for (int64_t i = 0; i < 21; i++)
        seen[val_base[i]]++;
    for (int64_t i = 0; i < COUNT - 21; i++)
        seen[train_base[i]]++;
    for (int64_t i = 0; i < COUNT; i++)
        CHECK_MSG(seen[i] == 1, "sample %lld on %d sides", (long long)i, seen[i]);
    for (int64_t i = 1; i < 21; i++)
        CHECK(val_base[i] > val_base[i - 1]);
    for (int64_t i = 1; i < COUNT - 21; i++)
        CHECK(train_base[i] > train_base[i - 1]);

    /* The same seed gives the same split; another seed another one. */
    REQUIRE_OK(ug_dataset_split(ds, 0.2, 7, &train2, &val2));
    int64_t *again = base_samples(dev, val2);
    REQUIRE(again);
    CHECK(memcmp(again, val_base, 21 * sizeof(int64_t)) == 0);
    ug_dataset_free(train2);
    ug_dataset_free(val2);
    REQUIRE_OK(ug_dataset_split(ds, 0.2, 8, &train2, &val2));
    int64_t *other = base_samples(dev, val2);
    REQUIRE(other);
    CHECK(memcmp(other, val_base, 21 * sizeof(int64_t)) != 0);
    ug_dataset_free(train2);
    ug_dataset_free(val2);

    /* A subset of the validation side, repeats allowed, with a transform of
     * its own: the base's values through both index maps, scaled. */
    int64_t pick[3] = {20, 0, 20};
    ug_dataset *sub = NULL;
    REQUIRE_OK(ug_dataset_subset(val, pick, 3, &sub));
    CHECK_OK(ug_dataset_transform(sub, 2.0f, 1.0f));
    int64_t sub_base[3] = {val_base[20], val_base[0], val_base[20]};
    byte_context sub_ctx = {2.0f, 1.0f, sub_base};
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 8;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(sub, dev, &c, &l));
    ug_dataset_free(sub); /* the loader keeps it, and it keeps its base */
    ug_dataset_free(val);
    CHECK_OK(ug_loader_start_epoch(l, 0));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, check_byte_row, &sub_ctx, NULL), 3);
    ug_loader_free(l);

    CHECK_STATUS(ug_dataset_subset(train, (int64_t[]){COUNT - 21}, 1, &sub), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("outside");
    CHECK_STATUS(ug_dataset_split(ds, 0.001, 1, &train2, &val2), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("empty");
    CHECK(train2 == NULL && val2 == NULL);
    ug_dataset_free(train);
    ug_dataset_free(ds);
}

/* ---- callbacks ---- */

typedef struct source_state {
    pthread_mutex_t lock;
    int64_t calls;
    int64_t fail_from; /* the first sample id whose batch fails, or -1 */
    bool bad_label;
} source_state;

static int fill_samples(void *user, const int64_t *ids, int64_t count, float *x, void *y)
{
    source_state *s = user;
    /* Workers may still be prefetching after a failed batch while the test
       changes the settings, so read them under the lock. */
    pthread_mutex_lock(&s->lock);
    s->calls++;
    int64_t fail_from = s->fail_from;
    bool bad_label = s->bad_label;
    pthread_mutex_unlock(&s->lock);
    int32_t *labels = y;
    for (int64_t r = 0; r < count; r++) {
        if (ids[r] == fail_from)
            return 5;
        for (int64_t f = 0; f < FEATURES; f++)
            x[r * FEATURES + f] = (float)byte_value(ids[r], f);
        labels[r] = bad_label && ids[r] == 3 ? 9 : (int32_t)(ids[r] % 4);
    }
    return 0;
}

static void set_source(source_state *s, int64_t fail_from, bool bad_label)
{
    pthread_mutex_lock(&s->lock);
    s->fail_from = fail_from;
    s->bad_label = bad_label;
    pthread_mutex_unlock(&s->lock);
}

static void test_callback_dataset(ug_device *dev)
{
    source_state s = {.fail_from = -1};
    pthread_mutex_init(&s.lock, NULL);
    ug_dataset_source src = {.count = COUNT, .features = FEATURES, .classes = 4, .fill = fill_samples, .user = &s};
    ug_dataset *ds = NULL;
    REQUIRE_OK(ug_dataset_from_callback(&src, &ds));
    CHECK_EQ_I64(ug_dataset_classes(ds), 4);
    CHECK_OK(ug_dataset_require_classes(ds, 4));
    CHECK_STATUS(ug_dataset_require_classes(ds, 3), UG_ERR_FORMAT);
    CHECK_EQ_I64((int64_t)ug_dataset_host_bytes(ds), 0);
    /* Statistics read every sample through the callback. */
    double mean = 0, sd = 0, want = 0;
    CHECK_OK(ug_dataset_stats(ds, &mean, &sd));
    for (int64_t i = 0; i < COUNT; i++)
        for (int64_t f = 0; f < FEATURES; f++)
            want += byte_value(i, f);
    CHECK(fabs(mean - want / (COUNT * FEATURES)) < 1e-9);
    CHECK_OK(ug_dataset_transform(ds, 0.5f, -1.0f));

    /* Two workers call the callback at once. */
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 7;
    c.threads = 2;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 3));
    byte_context ctx = {0.5f, -1.0f, NULL};
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, check_byte_row, &ctx, NULL), COUNT);
    pthread_mutex_lock(&s.lock);
    CHECK(s.calls >= (COUNT + 6) / 7);
    pthread_mutex_unlock(&s.lock);

    /* A failing callback fails its batch with the code and samples. */
    set_source(&s, 50, false);
    CHECK_OK(ug_loader_start_epoch(l, 0));
    ug_status st = UG_OK;
    for (bool done = false; st == UG_OK && !done;) {
        ug_batch b;
        st = ug_loader_next(l, &b, &done);
    }
    CHECK(st != UG_OK);
    CHECK_ERROR_HAS("fill callback returned 5");
    /* A label outside the declared classes fails too. */
    set_source(&s, -1, true);
    CHECK_OK(ug_loader_start_epoch(l, 0));
    st = UG_OK;
    for (bool done = false; st == UG_OK && !done;) {
        ug_batch b;
        st = ug_loader_next(l, &b, &done);
    }
    CHECK_STATUS(st, UG_ERR_FORMAT);
    CHECK_ERROR_HAS("label 9", "4 classes");
    ug_loader_free(l);

    /* Half batches go through f32 scratch. */
    s.bad_label = false;
    c.x_dtype = UG_F16;
    c.threads = 1;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    ug_batch b;
    bool done = false;
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    uint16_t *h = th_alloc((size_t)(b.count * FEATURES) * 2);
    CHECK_OK(ug_tensor_download(b.x, h, (size_t)(b.count * FEATURES) * 2));
    for (int64_t r = 0; r < b.count; r++)
        CHECK(h[r * FEATURES + 2] == ug_f32_to_f16(0.5f * (float)byte_value(b.sample_ids[r], 2) - 1.0f));
    ug_loader_free(l);
    ug_dataset_free(ds);

    src.classes = 0;
    CHECK_STATUS(ug_dataset_from_callback(&src, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("classes");
    src.fill = NULL;
    CHECK_STATUS(ug_dataset_from_callback(&src, &ds), UG_ERR_INVALID_ARGUMENT);
    pthread_mutex_destroy(&s.lock);
}

/* ---- resuming an epoch ---- */

static void test_loader_seek(ug_device *dev)
{
    ug_dataset *ds = make_byte_dataset();
    REQUIRE(ds);
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 10;
    c.seed = 99;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    int64_t epoch = 0, next = 0;
    ug_loader_position(l, &epoch, &next);
    CHECK_EQ_I64(epoch, -1);
    int64_t *full = th_alloc(COUNT * sizeof(int64_t)), *tail = th_alloc(COUNT * sizeof(int64_t));
    CHECK_OK(ug_loader_start_epoch(l, 4));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, NULL, NULL, full), COUNT);
    ug_loader_position(l, &epoch, &next);
    CHECK_EQ_I64(epoch, 4);
    CHECK_EQ_I64(next, 11);

    /* Take three batches of epoch 4, then seek a fresh loader there: the
     * rest of the epoch is the same samples in the same order. */
    CHECK_OK(ug_loader_start_epoch(l, 4));
    for (int i = 0; i < 3; i++) {
        ug_batch b;
        bool done = false;
        CHECK_OK(ug_loader_next(l, &b, &done));
    }
    ug_loader_position(l, &epoch, &next);
    CHECK_EQ_I64(next, 3);
    ug_loader_free(l);
    c.threads = 2; /* the order does not depend on the workers */
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_seek(l, 4, 3));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, NULL, NULL, tail), COUNT - 30);
    for (int64_t i = 0; i < COUNT - 30; i++)
        CHECK_EQ_I64(tail[i], full[30 + i]);
    /* At the end: done at once. */
    CHECK_OK(ug_loader_seek(l, 4, 11));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, NULL, NULL, NULL), 0);
    CHECK_STATUS(ug_loader_seek(l, 4, 12), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("0..11");
    /* Back before the first epoch: nothing to hand out until one starts. */
    CHECK_OK(ug_loader_seek(l, -1, 0));
    ug_loader_position(l, &epoch, &next);
    CHECK(epoch == -1 && next == 0);
    ug_batch b;
    bool done = false;
    CHECK_STATUS(ug_loader_next(l, &b, &done), UG_ERR_STATE);
    CHECK_STATUS(ug_loader_seek(l, -1, 3), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_seek(l, -2, 0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_start_epoch(l, -1), UG_ERR_INVALID_ARGUMENT);
    CHECK_OK(ug_loader_seek(l, 4, 3));
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, NULL, NULL, tail), COUNT - 30);
    CHECK_EQ_I64(tail[0], full[30]);
    ug_loader_free(l);
    ug_dataset_free(ds);
}

/* ---- sizes and transforms that cannot work ---- */

static int fill_nothing(void *user, const int64_t *ids, int64_t count, float *x, void *y)
{
    (void)user, (void)ids, (void)count, (void)x, (void)y;
    return 0;
}

static int fill_large(void *user, const int64_t *ids, int64_t count, float *x, void *y)
{
    (void)user, (void)ids;
    for (int64_t i = 0; i < count * FEATURES; i++)
        x[i] = 1e30f;
    memset(y, 0, (size_t)count * sizeof(int32_t));
    return 0;
}

/* Sizes whose bytes overflow are refused naming the field; a transform
 * whose composition would overflow f32 is refused and changes nothing;
 * a callback's values that overflow fail their batch. */
static void test_impossible_sizes_and_transforms(ug_device *dev)
{
    float x[2 * FEATURES] = {0};
    float targets[2] = {0};
    ug_dataset *ds = NULL;
    const int64_t widths[] = {(int64_t)1 << 62, ((int64_t)1 << 62) + 1, INT64_MAX};
    for (int i = 0; i < 3; i++) {
        th_context("target_width %lld", (long long)widths[i]);
        ug_dataset_arrays a = {.count = 10, .features = 4, .x = x, .targets = targets, .target_width = widths[i]};
        CHECK_STATUS(ug_dataset_create(&a, &ds), UG_ERR_OUT_OF_MEMORY);
        CHECK_ERROR_HAS("target_width");
        ug_dataset_source src = {.count = 10, .features = 4, .target_width = widths[i], .fill = fill_nothing};
        CHECK_STATUS(ug_dataset_from_callback(&src, &ds), UG_ERR_OUT_OF_MEMORY);
        CHECK_ERROR_HAS("target_width");
        CHECK(ds == NULL);
    }
    ug_dataset_arrays a = {.count = 10, .features = INT64_MAX, .x = x, .targets = targets, .target_width = 1};
    CHECK_STATUS(ug_dataset_create(&a, &ds), UG_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_HAS("features");
    th_context("%s", "");

    /* Bytes: 255 * scale + shift must stay finite, composed. */
    ds = make_byte_dataset();
    REQUIRE(ds);
    CHECK_OK(ug_dataset_transform(ds, 1e30f, 0.0f));
    CHECK_STATUS(ug_dataset_transform(ds, 1e30f, 0.0f), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("overflow f32", "unchanged");
    CHECK_STATUS(ug_dataset_transform(ds, 1.0f, 3.39e38f), UG_ERR_INVALID_ARGUMENT);
    /* What was accepted still gives finite batches: 1e30 * byte. */
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = COUNT;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    byte_context ctx = {1e30f, 0.0f, NULL};
    CHECK_EQ_I64(walk_epoch(l, FEATURES, 4, check_byte_row, &ctx, NULL), COUNT);
    ug_loader_free(l);
    ug_dataset_free(ds);

    /* Floats: the largest stored magnitude bounds the composition. */
    float big[2 * FEATURES];
    for (int i = 0; i < 2 * FEATURES; i++)
        big[i] = i == 3 ? -3e37f : 1.0f;
    REQUIRE_OK(ug_dataset_from_arrays(2, FEATURES, big, (int32_t[]){0, 1}, &ds));
    CHECK_OK(ug_dataset_transform(ds, 10.0f, 0.0f));
    CHECK_STATUS(ug_dataset_transform(ds, 2.0f, 0.0f), UG_ERR_INVALID_ARGUMENT);
    ug_dataset_free(ds);

    /* A callback's values are checked as they enter a batch. */
    ug_dataset_source src = {.count = 4, .features = FEATURES, .classes = 2, .fill = fill_large};
    REQUIRE_OK(ug_dataset_from_callback(&src, &ds));
    CHECK_OK(ug_dataset_transform(ds, 1e10f, 0.0f)); /* bounded only by the values */
    c.batch_size = 4;
    REQUIRE_OK(ug_loader_create(ds, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    ug_batch b;
    bool done = false;
    CHECK_STATUS(ug_loader_next(l, &b, &done), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("fill callback", "must be finite");
    ug_loader_free(l);
    ug_dataset_free(ds);
}

/* ---- CIFAR-10's binary files ---- */

enum { CIFAR_PIXELS = 3072, CIFAR_RECORD = 3073 };

/* Writes records [first, first + count) of a made-up set (label: the
 * sample's number mod 10, pixels byte_value) to dir/name; bad_label: the
 * last record's label is 10, extra: bytes past the last record. */
static bool write_cifar(const char *dir, const char *name, int64_t first, int64_t count, bool bad_label, int extra)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    uint8_t rec[CIFAR_RECORD];
    for (int64_t i = first; i < first + count; i++) {
        rec[0] = (uint8_t)(bad_label && i == first + count - 1 ? 10 : i % 10);
        for (int64_t p = 0; p < CIFAR_PIXELS; p++)
            rec[1 + p] = byte_value(i, p);
        fwrite(rec, 1, sizeof rec, f);
    }
    for (int i = 0; i < extra; i++)
        fputc(0, f);
    return fclose(f) == 0;
}

static bool check_cifar_row(const void *c, int64_t id, const float *x, const void *y)
{
    (void)c;
    for (int64_t p = 0; p < CIFAR_PIXELS; p++) {
        const double want = byte_value(id, p) * 2.0 / 255.0 - 1.0;
        if (fabs(x[p] - want) > 1e-6)
            return false;
    }
    int32_t label;
    memcpy(&label, y, sizeof label);
    return label == (int32_t)(id % 10);
}

/* The five training files in order, the test file, and what a reader
 * must refuse: a missing folder, a truncated file, a label past 9. */
static void test_cifar10_files(ug_device *dev)
{
    char dir[] = "/tmp/ug-test-cifar-XXXXXX", rm[64];
    REQUIRE(mkdtemp(dir));
    static const int64_t per_file[5] = {3, 2, 4, 1, 2};
    int64_t first = 0;
    for (int i = 0; i < 5; first += per_file[i], i++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
        REQUIRE(write_cifar(dir, name, first, per_file[i], false, 0));
    }
    REQUIRE(write_cifar(dir, "test_batch.bin", 0, 5, false, 0));
    ug_dataset *train = NULL, *test = NULL;
    REQUIRE_OK(ug_dataset_from_cifar10(dir, true, 2.0f / 255.0f, -1.0f, &train));
    REQUIRE_OK(ug_dataset_from_cifar10(dir, false, 2.0f / 255.0f, -1.0f, &test));
    CHECK_EQ_I64(ug_dataset_count(train), 12);
    CHECK_EQ_I64(ug_dataset_count(test), 5);
    CHECK_EQ_I64(ug_dataset_features(train), CIFAR_PIXELS);
    CHECK_EQ_I64(ug_dataset_classes(train), 10);
    CHECK_EQ_I64((int64_t)ug_dataset_host_bytes(train), 12 * CIFAR_PIXELS + 12 * 4); /* bytes stay bytes */
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 5;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(train, dev, &c, &l));
    CHECK_OK(ug_loader_start_epoch(l, 0));
    CHECK_EQ_I64(walk_epoch(l, CIFAR_PIXELS, sizeof(int32_t), check_cifar_row, NULL, NULL), 12);
    ug_loader_free(l);
    ug_dataset_free(train);
    ug_dataset_free(test);
    ug_dataset *none = NULL;
    if (CHECK_STATUS(ug_dataset_from_cifar10("/nonexistent-cifar", true, 1.0f, 0.0f, &none), UG_ERR_IO))
        CHECK_ERROR_HAS("/nonexistent-cifar/data_batch_1.bin", "cifar-10-batches-bin");
    REQUIRE(write_cifar(dir, "data_batch_4.bin", 9, 1, false, 100));
    if (CHECK_STATUS(ug_dataset_from_cifar10(dir, true, 1.0f, 0.0f, &none), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("data_batch_4.bin", "3173 bytes", "whole number of 3073-byte records");
    REQUIRE(write_cifar(dir, "test_batch.bin", 0, 3, true, 0));
    if (CHECK_STATUS(ug_dataset_from_cifar10(dir, false, 1.0f, 0.0f, &none), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("record 2", "label 10");
    CHECK_STATUS(ug_dataset_from_cifar10(dir, false, NAN, 0.0f, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK(none == NULL);
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(bytes_stay_bytes),
        TH_DEVICE_TEST(float_targets),
        TH_DEVICE_TEST(subsets_and_splits),
        TH_DEVICE_TEST(callback_dataset),
        TH_DEVICE_TEST(loader_seek),
        TH_DEVICE_TEST(impossible_sizes_and_transforms),
        TH_DEVICE_TEST(cifar10_files),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
