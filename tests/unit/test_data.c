/* Tests of the prefetching loader (include/unigrad/data.h) on every device
 * present: orders, the steady state, restarts, a worker's error, byte
 * batches converted on the device, refused arguments, and the real
 * Fashion-MNIST test split when the system has it. The IDX reader's
 * tests: test_idx.c. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "unigrad/data.h"

/* The library's test hook (core/data/internal.h): makes the upload of one
 * batch fail inside the worker. */
void ug_loader_debug_fail_batch(ug_loader *loader, int64_t batch);

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* ---- the loader ---- */

/* A data set whose every value says where it came from. */
typedef struct test_data {
    int64_t count, features;
    float *x;
    int32_t *y;
    ug_dataset *ds;
} test_data;

/* The data set of the running test; freed by the next make_data or at exit,
 * so a test that stops at a REQUIRE leaks nothing. */
static ug_dataset *current_data;

static void free_current_data(void)
{
    ug_dataset_free(current_data);
    current_data = NULL;
}

static bool make_data(test_data *d, int64_t count, int64_t features)
{
    static bool registered;
    if (!registered) {
        atexit(free_current_data);
        registered = true;
    }
    free_current_data();
    d->count = count;
    d->features = features;
    d->x = th_alloc((size_t)(count * features) * sizeof(float));
    d->y = th_alloc((size_t)count * sizeof(int32_t));
    for (int64_t i = 0; i < count; i++) {
        for (int64_t f = 0; f < features; f++)
            d->x[i * features + f] = (float)(i * 100 + f) + 0.25f;
        d->y[i] = (int32_t)((i * 7) % 11);
    }
    d->ds = NULL;
    ug_status st = ug_dataset_from_arrays(count, features, d->x, d->y, &d->ds);
    current_data = d->ds;
    if (st != UG_OK)
        th_fail(TH_LOC, "ug_dataset_from_arrays: %s", ug_last_error());
    return st == UG_OK;
}

/* Runs one epoch, checking every batch against the data set; writes the
 * order of sample ids into order (count entries) and returns the number of
 * samples delivered, or -1 after a failure. */
static int64_t run_epoch(ug_loader *l, const test_data *d, const ug_loader_config *c,
                         int64_t epoch, int64_t *order, bool download)
{
    if (ug_loader_start_epoch(l, epoch) != UG_OK) {
        th_fail(TH_LOC, "start_epoch: %s", ug_last_error());
        return -1;
    }
    int64_t full = d->count / c->batch_size, rest = d->count % c->batch_size;
    int64_t want_batches = full + (rest && !c->drop_last ? 1 : 0);
    if (ug_loader_batches(l) != want_batches) {
        th_fail(TH_LOC, "ug_loader_batches is %lld, expected %lld", (long long)ug_loader_batches(l),
                (long long)want_batches);
        return -1;
    }
    float *x = th_alloc((size_t)(c->batch_size < d->count ? c->batch_size : d->count) *
                        (size_t)d->features * sizeof(float));
    int32_t *y = th_alloc((size_t)d->count * sizeof(int32_t));
    int64_t delivered = 0, batches = 0;
    for (;;) {
        ug_batch b;
        bool done = true;
        ug_status st = ug_loader_next(l, &b, &done);
        if (st != UG_OK) {
            th_fail(TH_LOC, "ug_loader_next: %s", ug_last_error());
            return -1;
        }
        if (done)
            break;
        int64_t want = batches < full ? c->batch_size : rest;
        if (b.count != want || b.index != batches) {
            th_fail(TH_LOC, "batch %lld: count %lld index %lld, expected count %lld",
                    (long long)batches, (long long)b.count, (long long)b.index, (long long)want);
            return -1;
        }
        int64_t xs[2] = {b.count, d->features}, ys[1] = {b.count};
        if (!th_check_tensor(b.x, UG_F32, 2, xs) || !th_check_tensor(b.y, UG_I32, 1, ys))
            return -1;
        if (delivered + b.count > d->count) {
            th_fail(TH_LOC, "more samples than the data set holds");
            return -1;
        }
        memcpy(order + delivered, b.sample_ids, (size_t)b.count * sizeof(int64_t));
        if (download) {
            size_t xb = (size_t)(b.count * d->features) * sizeof(float);
            if (ug_tensor_download(b.x, x, xb) != UG_OK ||
                ug_tensor_download(b.y, y, (size_t)b.count * sizeof(int32_t)) != UG_OK) {
                th_fail(TH_LOC, "download: %s", ug_last_error());
                return -1;
            }
            for (int64_t r = 0; r < b.count; r++) {
                int64_t id = b.sample_ids[r];
                if (id < 0 || id >= d->count) {
                    th_fail(TH_LOC, "sample id %lld out of range", (long long)id);
                    return -1;
                }
                if (memcmp(x + r * d->features, d->x + id * d->features,
                           (size_t)d->features * sizeof(float)) != 0 ||
                    y[r] != d->y[id]) {
                    th_fail(TH_LOC, "batch %lld row %lld (sample %lld) does not hold the data "
                            "set's row: x[0] %g (want %g), y %d (want %d)",
                            (long long)batches, (long long)r, (long long)id, (double)x[r * d->features],
                            (double)d->x[id * d->features], y[r], d->y[id]);
                    return -1;
                }
            }
        }
        delivered += b.count;
        batches++;
    }
    if (batches != want_batches) {
        th_fail(TH_LOC, "%lld batches, expected %lld", (long long)batches, (long long)want_batches);
        return -1;
    }
    /* Past the end it stays done. */
    ug_batch b;
    bool done = false;
    CHECK_OK(ug_loader_next(l, &b, &done));
    CHECK(done && b.x == NULL && b.count == 0);
    return delivered;
}

/* True if order holds n distinct ids below count. */
static bool distinct(const int64_t *order, int64_t n, int64_t count)
{
    if (count <= 0)
        return n == 0;
    bool *seen = th_alloc((size_t)count);
    for (int64_t i = 0; i < count; i++)
        seen[i] = false;
    for (int64_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= count || seen[order[i]])
            return false;
        seen[order[i]] = true;
    }
    return true;
}

static void test_loader_orders(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 37, 5));
    const int64_t n = d.count;
    /* The shuffled order of (seed 42, epoch e), from a plain configuration. */
    int64_t *ref0 = th_alloc((size_t)n * sizeof(int64_t));
    int64_t *ref1 = th_alloc((size_t)n * sizeof(int64_t));
    ug_loader_config base = ug_loader_default_config();
    base.batch_size = 1;
    base.seed = 42;
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &base, &l));
    CHECK_EQ_I64(run_epoch(l, &d, &base, 0, ref0, false), n);
    CHECK_EQ_I64(run_epoch(l, &d, &base, 1, ref1, false), n);
    ug_loader_free(l);
    CHECK(distinct(ref0, n, n));
    CHECK(distinct(ref1, n, n));
    CHECK_MSG(memcmp(ref0, ref1, (size_t)n * sizeof(int64_t)) != 0,
              "epochs 0 and 1 gave the same order");
    /* Pinned: the order is fixed by (seed, epoch) on every platform. */
    static const int64_t golden[8] = {28, 11, 35, 2, 21, 29, 8, 1};
    CHECK_MSG(memcmp(ref0, golden, sizeof golden) == 0,
              "seed 42 epoch 0 starts %lld %lld %lld %lld %lld %lld %lld %lld",
              (long long)ref0[0], (long long)ref0[1], (long long)ref0[2], (long long)ref0[3],
              (long long)ref0[4], (long long)ref0[5], (long long)ref0[6], (long long)ref0[7]);

    static const struct {
        int64_t batch;
        bool drop_last, shuffle;
        int threads, prefetch;
    } cases[] = {
        {1, false, true, 1, 1},   {4, false, true, 2, 2},  {4, true, true, 1, 3},
        {37, false, true, 1, 2},  {37, true, false, 2, 1}, {10, false, false, 3, 2},
        {10, true, false, 1, 2},  {10, true, true, 2, 4},  {50, false, true, 1, 2},
        {50, true, true, 1, 2},   {36, false, true, 4, 1}, {36, true, true, 0, 0},
    };
    int64_t *order = th_alloc((size_t)n * sizeof(int64_t));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ug_loader_config c = ug_loader_default_config();
        c.batch_size = cases[k].batch;
        c.drop_last = cases[k].drop_last;
        c.shuffle = cases[k].shuffle;
        c.threads = cases[k].threads;
        c.prefetch = cases[k].prefetch;
        c.seed = 42;
        th_context("batch %lld drop_last %d shuffle %d threads %d prefetch %d",
                   (long long)c.batch_size, c.drop_last, c.shuffle, c.threads, c.prefetch);
        l = NULL;
        REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
        int64_t want = c.drop_last ? n / c.batch_size * c.batch_size : n;
        for (int64_t epoch = 0; epoch < 3; epoch++) {
            int64_t got = run_epoch(l, &d, &c, epoch, order, true);
            CHECK_EQ_I64(got, want);
            if (got != want)
                break;
            CHECK(distinct(order, got, n));
            if (!c.shuffle) {
                for (int64_t i = 0; i < got; i++)
                    if (order[i] != i) {
                        th_fail(TH_LOC, "shuffle off: position %lld holds %lld", (long long)i,
                                (long long)order[i]);
                        break;
                    }
            } else if (epoch < 2) {
                /* The same (seed, epoch) order whatever the batch size,
                 * threads or prefetch; drop_last keeps its prefix. */
                const int64_t *ref = epoch == 0 ? ref0 : ref1;
                CHECK_MSG(memcmp(order, ref, (size_t)got * sizeof(int64_t)) == 0,
                          "epoch %lld order differs from the reference", (long long)epoch);
            }
        }
        ug_loader_free(l);
    }

    th_context("seeds");
    ug_loader_config c = base;
    c.seed = 43;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    CHECK_EQ_I64(run_epoch(l, &d, &c, 0, order, false), n);
    CHECK_MSG(memcmp(order, ref0, (size_t)n * sizeof(int64_t)) != 0,
              "seeds 42 and 43 gave the same order");
    ug_loader_free(l);
}

static void test_loader_steady_state(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 1000, 16)); /* 15 batches of 64 and one of 40 */
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 64;
    c.threads = 2;
    c.seed = 7;
    int64_t *order = th_alloc((size_t)d.count * sizeof(int64_t));
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    CHECK_EQ_I64(ug_loader_batches(l), 16);
    CHECK_EQ_I64(run_epoch(l, &d, &c, 0, order, true), 1000);
    ug_memory_stats before = th_stats(dev);
    CHECK_EQ_I64(run_epoch(l, &d, &c, 1, order, true), 1000);
    CHECK_EQ_I64(run_epoch(l, &d, &c, 2, order, false), 1000);
    ug_memory_stats after = th_stats(dev);
    CHECK_EQ_I64(after.allocations, before.allocations);
    CHECK_EQ_I64(after.cache_hits, before.cache_hits);
    CHECK_EQ_I64(after.bytes_in_use, before.bytes_in_use);
    ug_loader_free(l);

    /* drop_last: 15 full batches. */
    c.drop_last = true;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    CHECK_EQ_I64(ug_loader_batches(l), 15);
    CHECK_EQ_I64(run_epoch(l, &d, &c, 0, order, true), 960);
    ug_loader_free(l);
}

/* Abandoning an epoch part way, and going back to an earlier epoch. */
static void test_loader_restart(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 101, 3));
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 8;
    c.threads = 2;
    c.prefetch = 3;
    c.seed = 99;
    int64_t *first = th_alloc((size_t)d.count * sizeof(int64_t));
    int64_t *again = th_alloc((size_t)d.count * sizeof(int64_t));
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    CHECK_EQ_I64(run_epoch(l, &d, &c, 1, first, false), 101);

    ug_batch b;
    bool done = false;
    ug_status st = ug_loader_next(l, &b, &done);
    CHECK(st == UG_OK && done); /* epoch 1 is over */

    for (int round = 0; round < 3; round++) {
        th_context("round %d", round);
        REQUIRE_OK(ug_loader_start_epoch(l, 0));
        for (int k = 0; k < round * 3 + 1; k++) {
            REQUIRE_OK(ug_loader_next(l, &b, &done));
            REQUIRE(!done);
        }
        /* Restart while the workers are filling the slots ahead. */
        REQUIRE_OK(ug_loader_start_epoch(l, 1));
        /* The batch handed out before stays valid until the next call. */
        float x[8 * 3];
        REQUIRE_OK(ug_tensor_download(b.x, x, sizeof x));
        CHECK(memcmp(x, d.x + b.sample_ids[0] * 3, 3 * sizeof(float)) == 0);
        int64_t got = 0;
        for (;;) {
            REQUIRE_OK(ug_loader_next(l, &b, &done));
            if (done)
                break;
            REQUIRE(got + b.count <= d.count);
            memcpy(again + got, b.sample_ids, (size_t)b.count * sizeof(int64_t));
            got += b.count;
        }
        CHECK_EQ_I64(got, 101);
        CHECK(memcmp(first, again, sizeof(int64_t) * 101) == 0);
    }
    /* Restart twice in a row, then free mid-epoch with batches in flight. */
    REQUIRE_OK(ug_loader_start_epoch(l, 3));
    REQUIRE_OK(ug_loader_start_epoch(l, 1));
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    CHECK(!done && memcmp(b.sample_ids, first, 8 * sizeof(int64_t)) == 0);
    ug_loader_free(l);
}

static void test_loader_worker_error(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 50, 4));
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 10;
    c.threads = 2;
    int64_t *order = th_alloc((size_t)d.count * sizeof(int64_t));
    ug_loader *l = NULL;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    ug_loader_debug_fail_batch(l, 2);
    REQUIRE_OK(ug_loader_start_epoch(l, 0));
    ug_batch b;
    bool done = false;
    CHECK_OK(ug_loader_next(l, &b, &done));
    CHECK_OK(ug_loader_next(l, &b, &done));
    CHECK(!done && b.index == 1);
    /* The worker's own message (from ug_tensor_upload) reaches the caller. */
    if (CHECK_STATUS(ug_loader_next(l, &b, &done), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("batch 2", "ug_tensor_upload", "161 bytes given");
    CHECK(b.x == NULL);
    if (CHECK_STATUS(ug_loader_next(l, &b, &done), UG_ERR_STATE))
        CHECK_ERROR_HAS("ug_loader_start_epoch", "161 bytes given");
    /* A new epoch recovers. */
    ug_loader_debug_fail_batch(l, -1);
    CHECK_EQ_I64(run_epoch(l, &d, &c, 0, order, true), 50);
    ug_loader_free(l);
}

/* The planned device bytes of a loader are what creating it takes from
 * the pool. */
static void test_loader_device_bytes(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 5, 300));
    static const struct { int64_t batch; int prefetch; } configs[] = {{2, 1}, {3, 0}, {64, 4}};
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        th_context("batch %lld, prefetch %d", (long long)configs[i].batch, configs[i].prefetch);
        ug_loader_config c = ug_loader_default_config();
        c.batch_size = configs[i].batch;
        c.prefetch = configs[i].prefetch;
        uint64_t planned = 0;
        REQUIRE_OK(ug_loader_device_bytes(d.ds, &c, &planned));
        uint64_t before = th_stats(dev).bytes_in_use;
        ug_loader *l = NULL;
        REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
        CHECK_EQ_I64(th_stats(dev).bytes_in_use - before, planned);
        ug_loader_free(l);
    }
    uint64_t bytes = 0;
    ug_loader_config bad = ug_loader_default_config();
    bad.batch_size = 0;
    if (CHECK_STATUS(ug_loader_device_bytes(d.ds, &bad, &bytes), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ug_loader_device_bytes", "batch_size");
    CHECK_STATUS(ug_loader_device_bytes(NULL, NULL, &bytes), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_device_bytes(d.ds, NULL, NULL), UG_ERR_INVALID_ARGUMENT);
}

static void test_loader_arguments(ug_device *dev)
{
    test_data d;
    REQUIRE(make_data(&d, 5, 2));
    ug_loader *l = (ug_loader *)(uintptr_t)1;
    ug_loader_config c = ug_loader_default_config();
    CHECK(c.batch_size == 64 && c.shuffle && c.seed == 0 && !c.drop_last && c.threads == 1 &&
          c.prefetch == 2);
    c.batch_size = 0;
    CHECK_STATUS(ug_loader_create(d.ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK(l == NULL);
    c = ug_loader_default_config();
    c.threads = -1;
    CHECK_STATUS(ug_loader_create(d.ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    c.threads = 1;
    c.prefetch = 1000;
    CHECK_STATUS(ug_loader_create(d.ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_create(NULL, dev, NULL, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_create(d.ds, NULL, NULL, &l), UG_ERR_INVALID_ARGUMENT);

    /* NULL config: the defaults (batch 64 > 5 samples: one batch of 5). */
    REQUIRE_OK(ug_loader_create(d.ds, dev, NULL, &l));
    CHECK_EQ_I64(ug_loader_batches(l), 1);
    ug_batch b;
    bool done = false;
    if (CHECK_STATUS(ug_loader_next(l, &b, &done), UG_ERR_STATE))
        CHECK_ERROR_HAS("ug_loader_start_epoch");
    CHECK_STATUS(ug_loader_start_epoch(l, -1), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_loader_next(l, NULL, &done), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_loader_start_epoch(l, 0));
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    CHECK(!done && b.count == 5 && ug_tensor_dim(b.x, 0) == 5);
    ug_loader_free(l);

    /* drop_last with fewer samples than a batch: an empty epoch. */
    c = ug_loader_default_config();
    c.drop_last = true;
    REQUIRE_OK(ug_loader_create(d.ds, dev, &c, &l));
    CHECK_EQ_I64(ug_loader_batches(l), 0);
    REQUIRE_OK(ug_loader_start_epoch(l, 0));
    REQUIRE_OK(ug_loader_next(l, &b, &done));
    CHECK(done);
    ug_loader_free(l);
    ug_loader_free(NULL);
    CHECK_EQ_I64(ug_loader_batches(NULL), 0);
}

/* ---- Fashion-MNIST, when present ---- */

static bool have_fashion(void)
{
    struct stat st;
    return stat(FASHION_DIR "/train-images-idx3-ubyte.gz", &st) == 0 &&
           stat(FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &st) == 0;
}

/* The test split through the loader: pixels arrive as value / 255. */
static void test_fashion_mnist_loader(ug_device *dev)
{
    if (!have_fashion()) {
        th_skip("Fashion-MNIST is not installed under " FASHION_DIR);
        return;
    }
    const char *ip = FASHION_DIR "/t10k-images-idx3-ubyte.gz";
    const char *lp = FASHION_DIR "/t10k-labels-idx1-ubyte.gz";
    ug_idx *img = NULL, *lab = NULL;
    REQUIRE_OK(ug_idx_read(ip, &img));
    ug_status st = ug_idx_read(lp, &lab);
    if (st != UG_OK) {
        ug_idx_free(img);
        REQUIRE_OK(st);
    }
    ug_dataset *ds = NULL;
    ug_loader *l = NULL;
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = 256; /* 39 full batches and one of 16 */
    c.threads = 2;
    c.seed = 2024;
    float *x = th_alloc(256 * 784 * sizeof(float));
    int32_t y[256];
    bool *seen = th_alloc(10000);
    memset(seen, 0, 10000);
    int64_t total = 0, batches = 0, bad = 0;
    st = ug_dataset_from_idx(ip, lp, 1.0f / 255.0f, 0.0f, &ds);
    if (st == UG_OK)
        st = ug_loader_create(ds, dev, &c, &l);
    if (st == UG_OK)
        st = ug_loader_start_epoch(l, 0);
    while (st == UG_OK) {
        ug_batch b;
        bool done = false;
        st = ug_loader_next(l, &b, &done);
        if (st != UG_OK || done)
            break;
        st = ug_tensor_download(b.x, x, (size_t)b.count * 784 * sizeof(float));
        if (st == UG_OK)
            st = ug_tensor_download(b.y, y, (size_t)b.count * sizeof(int32_t));
        for (int64_t r = 0; st == UG_OK && r < b.count; r++) {
            int64_t id = b.sample_ids[r];
            if (seen[id])
                bad++;
            seen[id] = true;
            const uint8_t *pix = (const uint8_t *)img->data + id * 784;
            for (int f = 0; f < 784; f++)
                if (x[r * 784 + f] != (float)pix[f] * (1.0f / 255.0f))
                    bad++;
            if (y[r] != ((const uint8_t *)lab->data)[id])
                bad++;
        }
        total += b.count;
        batches++;
    }
    CHECK_OK(st);
    CHECK_EQ_I64(total, 10000);
    CHECK_EQ_I64(batches, 40);
    CHECK_EQ_I64(bad, 0);
    ug_loader_free(l);
    ug_dataset_free(ds);
    ug_idx_free(img);
    ug_idx_free(lab);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(loader_arguments),
        TH_DEVICE_TEST(loader_device_bytes),
        TH_DEVICE_TEST(loader_orders),
        TH_DEVICE_TEST(loader_steady_state),
        TH_DEVICE_TEST(loader_restart),
        TH_DEVICE_TEST(loader_worker_error),
        TH_DEVICE_TEST(fashion_mnist_loader),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
