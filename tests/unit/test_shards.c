/* Sharded loaders (ug_loader_config.shard_*), the data side of data-parallel
 * training: each shard's part of every batch, equal and weighted, put side
 * by side in shard order, is the unsharded loader's batch (sample ids and
 * values), whatever the number of shards; parts of a small last batch may
 * be empty; weights changed mid-epoch (ug_loader_set_shard_weights) split
 * the later batches by the new ones, a shard's part growing past what its
 * slots held; a batch of INT64_MAX rows splits too; bad shard settings are
 * refused. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { FEATURES = 3, MAX_BATCHES = 8, MAX_ROWS = 64 };

static ug_dataset *dataset(int64_t count)
{
    float *x = malloc((size_t)count * FEATURES * sizeof *x);
    int32_t *y = malloc((size_t)count * sizeof *y);
    for (int64_t i = 0; i < count * FEATURES; i++)
        x[i] = (float)i * 0.5f;
    for (int64_t i = 0; i < count; i++)
        y[i] = (int32_t)(i % 10);
    ug_dataset *ds = NULL;
    if (ug_dataset_from_arrays(count, FEATURES, x, y, &ds) != UG_OK)
        ds = NULL;
    free(x);
    free(y);
    return ds;
}

/* One epoch's batches: ids, counts and the features of each row. */
typedef struct epoch_rows {
    int64_t batches, count[MAX_BATCHES], ids[MAX_BATCHES][MAX_ROWS];
    float x[MAX_BATCHES][MAX_ROWS * FEATURES];
    bool empty_is_null;
} epoch_rows;

/* Shard weights: first, then later from batch `from` on (later NULL: none). */
typedef struct shard_weights {
    const double *first, *later;
    int64_t from;
} shard_weights;

static bool read_epoch(ug_device *dev, const ug_dataset *ds, int64_t batch, int shards, int shard,
                       shard_weights w, epoch_rows *out)
{
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = batch;
    c.seed = 7;
    c.shard_count = shards;
    c.shard_index = shard;
    c.shard_weights = w.first;
    ug_loader *l = NULL;
    if (!CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_OK))
        return false;
    memset(out, 0, sizeof *out);
    out->empty_is_null = true;
    bool ok = CHECK_STATUS(ug_loader_start_epoch(l, 3), UG_OK);
    for (bool done = false; ok;) {
        ug_batch b;
        if (w.later && out->batches == w.from && !CHECK_STATUS(ug_loader_set_shard_weights(l, w.later), UG_OK))
            break;
        ok = CHECK_STATUS(ug_loader_next(l, &b, &done), UG_OK);
        if (!ok || done)
            break;
        int64_t k = out->batches++;
        out->count[k] = b.count;
        memcpy(out->ids[k], b.sample_ids, (size_t)b.count * sizeof(int64_t));
        if (b.count)
            ok = CHECK_STATUS(ug_tensor_download(b.x, out->x[k], (size_t)b.count * FEATURES * sizeof(float)), UG_OK);
        else
            out->empty_is_null &= !b.x && !b.y;
    }
    ug_loader_free(l);
    return ok;
}

/* The shards' parts of each batch, side by side, are the whole batch. */
static void check_parts(ug_device *dev, int64_t count, int64_t batch, int shards, shard_weights weights,
                        const int64_t *want_rows)
{
    ug_dataset *ds = dataset(count);
    REQUIRE(ds);
    static epoch_rows whole, part[4];
    REQUIRE(read_epoch(dev, ds, batch, 0, 0, (shard_weights){0}, &whole));
    for (int s = 0; s < shards; s++)
        REQUIRE(read_epoch(dev, ds, batch, shards, s, weights, &part[s]));
    for (int s = 0; s < shards; s++) {
        CHECK_EQ_I64(part[s].batches, whole.batches);
        CHECK(part[s].empty_is_null);
    }
    for (int64_t k = 0; k < whole.batches; k++) {
        int64_t at = 0;
        for (int s = 0; s < shards; s++) {
            if (want_rows)
                CHECK_MSG(part[s].count[k] == want_rows[k * shards + s], "batch %lld shard %d: %lld rows, expected %lld",
                          (long long)k, s, (long long)part[s].count[k], (long long)want_rows[k * shards + s]);
            CHECK_MSG(!memcmp(part[s].ids[k], whole.ids[k] + at, (size_t)part[s].count[k] * sizeof(int64_t)),
                      "batch %lld shard %d: its samples are not the whole batch's from row %lld", (long long)k, s,
                      (long long)at);
            CHECK(!memcmp(part[s].x[k], whole.x[k] + at * FEATURES, (size_t)part[s].count[k] * FEATURES * sizeof(float)));
            at += part[s].count[k];
        }
        CHECK_MSG(at == whole.count[k], "batch %lld: the parts hold %lld rows of %lld", (long long)k, (long long)at,
                  (long long)whole.count[k]);
    }
    ug_dataset_free(ds);
}

static void test_equal_shards(ug_device *dev)
{
    /* 21 samples in batches of 8: 8, 8, 5 split 4+4, 4+4, 2+3. */
    static const int64_t rows[] = {4, 4, 4, 4, 2, 3};
    check_parts(dev, 21, 8, 2, (shard_weights){0}, rows);
    check_parts(dev, 21, 8, 3, (shard_weights){0}, NULL);
}

static void test_weighted_shards(ug_device *dev)
{
    /* Weights 1 and 3: a batch of 8 splits 2 + 6, the last batch of 5 1 + 4. */
    static const double weights[] = {1.0, 3.0};
    static const int64_t rows[] = {2, 6, 2, 6, 1, 4};
    check_parts(dev, 21, 8, 2, (shard_weights){weights, NULL, 0}, rows);
}

static void test_weights_changed(ug_device *dev)
{
    /* Equal, then 3 and 1 from batch 1: 4 + 4, 6 + 2, and 3 + 2 of the last
     * 5 (shard 0's part outgrows its slots). Then 1 and 7 from batch 2 of
     * weights 3 and 1: 6 + 2, 6 + 2, 0 + 5 (an empty part). */
    static const int64_t rows[] = {4, 4, 6, 2, 3, 2};
    check_parts(dev, 21, 8, 2, (shard_weights){NULL, (const double[]){3.0, 1.0}, 1}, rows);
    static const int64_t shrunk[] = {6, 2, 6, 2, 0, 5};
    check_parts(dev, 21, 8, 2, (shard_weights){(const double[]){3.0, 1.0}, (const double[]){1.0, 7.0}, 2}, shrunk);
}

static void test_empty_parts(ug_device *dev)
{
    /* 9 samples in batches of 8 over 4 shards: the last batch's one row
     * goes to the last shard; the others' parts are empty. */
    static const int64_t rows[] = {2, 2, 2, 2, 0, 0, 0, 1};
    check_parts(dev, 9, 8, 4, (shard_weights){0}, rows);
}

static void test_huge_batch(ug_device *dev)
{
    /* A batch of INT64_MAX rows (more than any data set: one batch of its
     * 10) is still split by its weights, 1:3 as 2 + 8, with weights whose
     * products with the batch overflow a double. */
    static const int64_t rows[] = {2, 8};
    check_parts(dev, 10, INT64_MAX, 2, (shard_weights){(const double[]){1e300, 3e300}, NULL, 0}, rows);
    static const int64_t equal[] = {5, 5};
    check_parts(dev, 10, INT64_MAX, 2, (shard_weights){0}, equal);
}

static void test_refusals(ug_device *dev)
{
    ug_dataset *ds = dataset(10);
    REQUIRE(ds);
    ug_loader_config c = ug_loader_default_config();
    ug_loader *l = NULL;
    c.shard_count = 2;
    c.shard_index = 2;
    if (CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("shard_index 2");
    c.shard_index = 0;
    c.shard_weights = (const double[]){1.0, -1.0};
    if (CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("shard_weights[1]");
    c.shard_weights = (const double[]){1e308, 1e308};
    if (CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("sum to inf");
    c.shard_weights = NULL;
    c.shard_count = 65;
    CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK(l == NULL);
    /* New weights: only for a sharded loader, and checked as at create. */
    c.shard_count = 0;
    REQUIRE(CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_OK));
    if (CHECK_STATUS(ug_loader_set_shard_weights(l, (const double[]){1.0, 2.0}), UG_ERR_STATE))
        CHECK_ERROR_HAS("not sharded");
    ug_loader_free(l);
    c.shard_count = 2;
    REQUIRE(CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_OK));
    if (CHECK_STATUS(ug_loader_set_shard_weights(l, (const double[]){0.0, 2.0}), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("shard_weights[0] is 0");
    CHECK_STATUS(ug_loader_set_shard_weights(l, NULL), UG_ERR_INVALID_ARGUMENT);
    ug_loader_free(l);
    ug_dataset_free(ds);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(equal_shards),
        TH_DEVICE_TEST(weighted_shards),
        TH_DEVICE_TEST(weights_changed),
        TH_DEVICE_TEST(empty_parts),
        TH_DEVICE_TEST(huge_batch),
        TH_DEVICE_TEST(refusals),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
