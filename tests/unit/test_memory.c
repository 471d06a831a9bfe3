/* The caching memory pool: statistics, cache reuse, peak, and the limit
 * with its out-of-memory error. Registered twice with ctest: once setting
 * the limit through ug_memory_set_limit, once through UG_MEMORY_LIMIT=64M. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MiB ((uint64_t)1 << 20)

static void test_parse_size(ug_device *dev)
{
    (void)dev;
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {{"123", 123},
                {"0", 0},
                {"64K", 64 * 1024},
                {"512M", 512 * MiB},
                {"64M", 64 * MiB},
                {"2G", 2048 * MiB},
                {"1G", 1024 * MiB}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t b = 1;
        if (CHECK_STATUS(ug_memory_parse_size(good[i].text, &b), UG_OK))
            CHECK_MSG(b == good[i].bytes, "\"%s\" parsed as %" PRIu64 ", expected %" PRIu64,
                      good[i].text, b, good[i].bytes);
    }
    const char *bad[] = {"", "abc", "12X", "-5", "M", "64MM"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t b = 0;
        if (CHECK_STATUS(ug_memory_parse_size(bad[i], &b), UG_ERR_INVALID_ARGUMENT) && bad[i][0])
            CHECK_ERROR_HAS(bad[i]);
    }
}

/* Creates a tensor of bytes (f32) that the test frees itself. */
static ug_tensor *alloc_bytes(ug_device *dev, uint64_t bytes)
{
    int64_t n = (int64_t)(bytes / 4);
    ug_tensor *t = NULL;
    if (!CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &t), UG_OK))
        return NULL;
    return th_track(t);
}

static void test_pool_statistics(ug_device *dev)
{
    CHECK_OK(ug_memory_release_cache(dev));
    ug_memory_stats s0 = th_stats(dev);
    CHECK_EQ_I64(s0.bytes_cached, 0);
    /* A first request is a device allocation (a cache miss). */
    ug_tensor *t = alloc_bytes(dev, MiB);
    REQUIRE(t);
    ug_memory_stats s1 = th_stats(dev);
    uint64_t block = s1.bytes_in_use - s0.bytes_in_use;
    CHECK_MSG(block >= MiB, "in use grew by %" PRIu64 " for a 1 MiB tensor", block);
    CHECK_EQ_I64(s1.allocations, s0.allocations + 1);
    CHECK_EQ_I64(s1.cache_hits, s0.cache_hits);
    CHECK(s1.peak_bytes_in_use >= s1.bytes_in_use);
    /* Freeing moves the block to the cache. */
    th_release(t);
    ug_memory_stats s2 = th_stats(dev);
    CHECK_EQ_I64(s2.bytes_in_use, s0.bytes_in_use);
    CHECK_EQ_I64(s2.bytes_cached, s0.bytes_cached + block);
    CHECK_EQ_I64(s2.allocations, s1.allocations);
    /* The same size again is served from the cache. */
    t = alloc_bytes(dev, MiB);
    REQUIRE(t);
    ug_memory_stats s3 = th_stats(dev);
    CHECK_EQ_I64(s3.cache_hits, s2.cache_hits + 1);
    CHECK_EQ_I64(s3.allocations, s2.allocations);
    CHECK_EQ_I64(s3.bytes_in_use, s1.bytes_in_use);
    CHECK_EQ_I64(s3.bytes_cached, s2.bytes_cached - block);
    th_release(t);
    /* release_cache returns every cached block. */
    CHECK_OK(ug_memory_release_cache(dev));
    ug_memory_stats s4 = th_stats(dev);
    CHECK_EQ_I64(s4.bytes_cached, 0);
    CHECK_EQ_I64(s4.bytes_in_use, s0.bytes_in_use);
    /* After the cache is gone the next request is a miss again. */
    t = alloc_bytes(dev, MiB);
    REQUIRE(t);
    ug_memory_stats s5 = th_stats(dev);
    CHECK_EQ_I64(s5.allocations, s4.allocations + 1);
    CHECK_EQ_I64(s5.cache_hits, s4.cache_hits);
    th_release(t);
    CHECK_OK(ug_memory_release_cache(dev));
}

static void test_peak(ug_device *dev)
{
    CHECK_OK(ug_memory_reset_peak(dev));
    ug_memory_stats s0 = th_stats(dev);
    CHECK_EQ_I64(s0.peak_bytes_in_use, s0.bytes_in_use);
    ug_tensor *a = alloc_bytes(dev, 4 * MiB), *b = alloc_bytes(dev, 2 * MiB);
    REQUIRE(a && b);
    ug_memory_stats s1 = th_stats(dev);
    CHECK(s1.peak_bytes_in_use == s1.bytes_in_use);
    CHECK(s1.bytes_in_use >= s0.bytes_in_use + 6 * MiB);
    th_release(a);
    th_release(b);
    ug_memory_stats s2 = th_stats(dev);
    /* The peak remembers; reset brings it down to what is in use now. */
    CHECK_EQ_I64(s2.peak_bytes_in_use, s1.peak_bytes_in_use);
    CHECK_OK(ug_memory_reset_peak(dev));
    ug_memory_stats s3 = th_stats(dev);
    CHECK_EQ_I64(s3.peak_bytes_in_use, s3.bytes_in_use);
    CHECK_EQ_I64(s3.bytes_in_use, s0.bytes_in_use);
}

/* Views share their parent's block; the block is freed with its last user.
 * Op outputs are new blocks. */
static void test_views_share_storage(ug_device *dev)
{
    ug_memory_stats s0 = th_stats(dev);
    int64_t shape[] = {256, 1024};
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, shape, &t));
    th_track(t);
    ug_memory_stats s1 = th_stats(dev);
    uint64_t block = s1.bytes_in_use - s0.bytes_in_use;
    CHECK(block >= MiB);
    ug_tensor *slice = NULL, *view = NULL;
    int64_t flat[] = {-1};
    REQUIRE_OK(ug_tensor_slice(t, 10, 100, &slice));
    th_track(slice);
    REQUIRE_OK(ug_tensor_reshape(slice, 1, flat, &view));
    th_track(view);
    ug_memory_stats s2 = th_stats(dev);
    CHECK_EQ_I64(s2.bytes_in_use, s1.bytes_in_use);
    CHECK_EQ_I64(s2.allocations + s2.cache_hits, s1.allocations + s1.cache_hits);
    th_release(t);
    th_release(slice);
    CHECK_EQ_I64(th_stats(dev).bytes_in_use, s1.bytes_in_use); /* view still holds it */
    CHECK_OK(ug_fill(view, 2.0f));
    ug_tensor *neg = NULL;
    CHECK_OK(ug_neg(view, &neg));
    th_track(neg);
    ug_memory_stats s3 = th_stats(dev);
    CHECK_MSG(s3.bytes_in_use >= s1.bytes_in_use + 100 * 1024 * 4,
              "an op's output is not counted: in use %" PRIu64, s3.bytes_in_use);
    th_release(neg);
    th_release(view);
    CHECK_EQ_I64(th_stats(dev).bytes_in_use, s0.bytes_in_use);
}

/* True if msg states the number, in bytes or as "N MiB" / "N.0 MiB". */
static bool names_bytes(const char *msg, uint64_t bytes)
{
    char a[64], b[64], c[64];
    snprintf(a, sizeof a, "%" PRIu64, bytes);
    snprintf(b, sizeof b, "%" PRIu64 " MiB", bytes / MiB);
    snprintf(c, sizeof c, "%.1f MiB", (double)bytes / (double)MiB);
    return th_contains(msg, a) || th_contains(msg, b) || th_contains(msg, c);
}

static void test_memory_limit(ug_device *dev)
{
    const char *env = getenv("UG_MEMORY_LIMIT");
    const uint64_t limit = 64 * MiB;
    if (env && *env) {
        /* This run sets the limit from outside: every device opened with it. */
        uint64_t parsed = 0;
        CHECK_OK(ug_memory_parse_size(env, &parsed));
        CHECK_MSG(parsed == limit, "this test expects UG_MEMORY_LIMIT=64M, got %s", env);
        CHECK_MSG(th_stats(dev).limit == limit, "limit is %" PRIu64 " with UG_MEMORY_LIMIT=%s",
                  th_stats(dev).limit, env);
    } else {
        REQUIRE_OK(ug_memory_set_limit(dev, limit));
        CHECK_EQ_I64(th_stats(dev).limit, limit);
    }
    ug_tensor *held = alloc_bytes(dev, 8 * MiB);
    REQUIRE(held);
    ug_memory_stats s0 = th_stats(dev);
    /* 100 MiB does not fit in 64 MiB. */
    int64_t n = (int64_t)(100 * MiB / 4);
    ug_tensor *big = NULL;
    ug_clear_error();
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &big), UG_ERR_OUT_OF_MEMORY)) {
        const char *msg = ug_last_error();
        CHECK_ERROR_HAS(ug_device_name(dev), "104857600", "in use", "cached");
        CHECK_MSG(names_bytes(msg, s0.bytes_in_use), "message lacks the bytes in use (%" PRIu64
                  "): \"%s\"", s0.bytes_in_use, msg);
        CHECK_MSG(names_bytes(msg, limit), "message lacks the limit (%" PRIu64 "): \"%s\"", limit,
                  msg);
        /* A remedy: free memory, a smaller batch, or a higher limit. */
        CHECK_MSG(th_contains(msg, "ug_memory_set_limit") || th_contains(msg, "UG_MEMORY_LIMIT") ||
                      th_contains(msg, "smaller") || th_contains(msg, "Free") ||
                      th_contains(msg, "free"),
                  "message suggests no remedy: \"%s\"", msg);
    }
    CHECK(big == NULL);
    th_track(big);
    ug_memory_stats s1 = th_stats(dev);
    CHECK_EQ_I64(s1.out_of_memory, s0.out_of_memory + 1);
    CHECK_EQ_I64(s1.bytes_in_use, s0.bytes_in_use);
    /* Smaller tensors still work: six more 8 MiB tensors (56 MiB in all). */
    ug_tensor *small[6] = {NULL};
    for (int i = 0; i < 6; i++) {
        th_context("8 MiB tensor %d", i);
        small[i] = alloc_bytes(dev, 8 * MiB);
        if (!small[i])
            break;
        CHECK_OK(ug_fill(small[i], (float)i));
    }
    th_context("after the small tensors");
    for (int i = 0; i < 6; i++) {
        if (!small[i])
            continue;
        float v[4] = {-1, -1, -1, -1};
        ug_tensor *head = NULL;
        if (CHECK_STATUS(ug_tensor_slice(small[i], 1000, 4, &head), UG_OK)) {
            CHECK_OK(ug_tensor_download(head, v, sizeof v));
            CHECK_MSG(v[0] == (float)i && v[3] == (float)i, "tensor %d holds %g", i, v[0]);
            ug_tensor_free(head);
        }
    }
    /* An op whose output passes the limit fails the same way. */
    ug_memory_stats s2 = th_stats(dev);
    int64_t n16 = (int64_t)(16 * MiB / 4);
    ug_tensor *more = NULL;
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n16, &more), UG_ERR_OUT_OF_MEMORY))
        CHECK_ERROR_HAS(ug_device_name(dev), "16777216");
    th_track(more);
    CHECK_EQ_I64(th_stats(dev).out_of_memory, s2.out_of_memory + 1);
    for (int i = 0; i < 6; i++)
        th_release(small[i]);
    th_release(held);
    /* With the memory back, 16 MiB fits again. */
    th_context("after freeing");
    ug_tensor *again = alloc_bytes(dev, 16 * MiB);
    CHECK(again != NULL);
    th_release(again);
    if (!(env && *env)) {
        CHECK_OK(ug_memory_set_limit(dev, 0));
        ug_device_info info;
        ug_device_get_info(dev, &info);
        CHECK_EQ_I64(th_stats(dev).limit, info.global_memory); /* the limit in force, never 0 */
    }
}

/* A plan of one MiB per row (a failure past 1000 rows). */
static ug_status mib_per_row(void *context, int64_t rows, uint64_t *bytes)
{
    ++*(int *)context;
    if (rows > 1000)
        return UG_ERR_SHAPE;
    *bytes = (uint64_t)rows * MiB;
    return UG_OK;
}

/* The largest power of two whose plan, plus the headroom, fits the limit
 * beside what is in use. */
static void test_fit_batch(ug_device *dev)
{
    uint64_t old_limit = th_stats(dev).limit;
    REQUIRE_OK(ug_memory_set_limit(dev, th_stats(dev).bytes_in_use + 20 * MiB));
    int64_t batch = 0;
    uint64_t bytes = 0, next = 0;
    int calls = 0;
    CHECK_OK(ug_memory_fit_batch(dev, mib_per_row, &calls, 0.05, 1 << 20, &batch, &bytes, &next));
    CHECK_EQ_I64(batch, 16); /* 16.8 MiB fits in 20; 32 x 1.05 does not */
    CHECK_EQ_I64(bytes, 16 * MiB);
    CHECK_EQ_I64(next, 32 * MiB);
    CHECK_OK(ug_memory_fit_batch(dev, mib_per_row, &calls, 0.5, 1 << 20, &batch, &bytes, &next));
    CHECK_EQ_I64(batch, 8); /* 24 MiB with half kept free does not fit */
    CHECK_OK(ug_memory_fit_batch(dev, mib_per_row, &calls, 0.0, 10, &batch, &bytes, &next));
    CHECK_EQ_I64(batch, 8); /* max_batch 10: the next power would pass it */
    CHECK_EQ_I64(next, 0);
    REQUIRE_OK(ug_memory_set_limit(dev, th_stats(dev).bytes_in_use + MiB / 2));
    if (CHECK_STATUS(ug_memory_fit_batch(dev, mib_per_row, &calls, 0.0, 64, &batch, &bytes, &next),
                     UG_ERR_OUT_OF_MEMORY))
        CHECK_ERROR_HAS("a batch of 1 needs", "UG_MEMORY_LIMIT");
    REQUIRE_OK(ug_memory_set_limit(dev, UINT64_C(1) << 50));
    CHECK_STATUS(ug_memory_fit_batch(dev, mib_per_row, &calls, 0.0, 1 << 20, &batch, &bytes, &next), UG_ERR_SHAPE);
    CHECK_STATUS(ug_memory_fit_batch(dev, mib_per_row, &calls, -1.0, 64, &batch, &bytes, &next),
                 UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_memory_fit_batch(dev, NULL, &calls, 0.0, 64, &batch, &bytes, &next), UG_ERR_INVALID_ARGUMENT);
    CHECK_OK(ug_memory_set_limit(dev, old_limit));
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(parse_size),
        TH_DEVICE_TEST(pool_statistics),
        TH_DEVICE_TEST(peak),
        TH_DEVICE_TEST(views_share_storage),
        TH_DEVICE_TEST(memory_limit),
        TH_DEVICE_TEST(fit_batch),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
