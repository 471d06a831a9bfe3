/* Byte batches converted and augmented on the device (the loader's
 * device_convert and augment; kernel family augment), on every device
 * against the host: conversion bit for bit what the host's assembly gives
 * in f32, f16 and bf16, partial batches included; each augmented sample
 * equal to its image cropped from a zero-padded copy and maybe flipped,
 * computed here from the definition, at one of the allowed places; the
 * same draws for a resumed loader, other draws in another epoch; and the
 * configurations it refuses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "unigrad/unigrad.h"

enum { COUNT = 37, C = 2, H = 5, W = 6, FEATURES = C * H * W, BATCH = 8, PAD = 2 };

static uint8_t bytes[COUNT * FEATURES];
static int32_t labels[COUNT];

static ug_dataset *make_dataset(void)
{
    for (int i = 0; i < COUNT * FEATURES; i++)
        bytes[i] = (uint8_t)((i * 2654435761u) >> 13);
    bytes[7] = 0; /* a zero byte, the padding's value, among the data */
    for (int i = 0; i < COUNT; i++)
        labels[i] = i % 3;
    ug_dataset_arrays a = {.count = COUNT, .features = FEATURES, .x_dtype = UG_U8, .x = bytes, .labels = labels};
    ug_dataset *ds = NULL;
    if (ug_dataset_create(&a, &ds) != UG_OK)
        return NULL;
    /* standardised: scale 1/255 then (v - 0.45) / 0.27 */
    if (ug_dataset_transform(ds, 1.0f / 255.0f, 0.0f) != UG_OK ||
        ug_dataset_transform(ds, 1.0f / 0.27f, -0.45f / 0.27f) != UG_OK) {
        ug_dataset_free(ds);
        return NULL;
    }
    return ds;
}

/* Every batch of epoch's x (raw bytes of x_dtype) and ids, in order. */
static bool epoch_batches(ug_loader *l, int64_t epoch, size_t value_bytes, uint8_t *x, int64_t *ids)
{
    bool done = false;
    int64_t row = 0;
    if (ug_loader_start_epoch(l, epoch) != UG_OK)
        return false;
    while (!done) {
        ug_batch b;
        if (ug_loader_next(l, &b, &done) != UG_OK)
            return false;
        if (done)
            break;
        if (ug_tensor_download(b.x, x + row * FEATURES * value_bytes, (size_t)(b.count * FEATURES) * value_bytes) != UG_OK)
            return false;
        memcpy(ids + row, b.sample_ids, (size_t)b.count * sizeof *ids);
        row += b.count;
    }
    return row == COUNT;
}

static ug_loader *make_loader(ug_device *dev, ug_dataset *ds, ug_dtype x_dtype, bool on_device, bool augment)
{
    ug_loader_config c = ug_loader_default_config();
    c.batch_size = BATCH;
    c.seed = 5;
    c.x_dtype = x_dtype;
    c.device_convert = on_device;
    if (augment)
        c.augment = (ug_image_augment){.channels = C, .height = H, .width = W, .crop_padding = PAD, .flip = 0.5f};
    ug_loader *l = NULL;
    return ug_loader_create(ds, dev, &c, &l) == UG_OK ? l : NULL;
}

static void test_conversion_matches_host(ug_device *dev)
{
    ug_dataset *ds = make_dataset();
    REQUIRE(ds);
    const ug_dtype dtypes[] = {UG_F32, UG_F16, UG_BF16};
    for (int d = 0; d < 3; d++) {
        th_context("%s", ug_dtype_name(dtypes[d]));
        const size_t size = ug_dtype_size(dtypes[d]);
        uint8_t *host = malloc(COUNT * FEATURES * size), *device = malloc(COUNT * FEATURES * size);
        int64_t host_ids[COUNT], device_ids[COUNT];
        ug_loader *a = make_loader(dev, ds, dtypes[d], false, false), *b = make_loader(dev, ds, dtypes[d], true, false);
        CHECK(host && device && a && b);
        if (host && device && a && b) {
            CHECK(epoch_batches(a, 0, size, host, host_ids) && epoch_batches(b, 0, size, device, device_ids));
            CHECK(!memcmp(host_ids, device_ids, sizeof host_ids));
            CHECK_MSG(!memcmp(host, device, COUNT * FEATURES * size), "the device's conversion differs from the host's");
        }
        ug_loader_free(a);
        ug_loader_free(b);
        free(host);
        free(device);
    }
    ug_dataset_free(ds);
}

/* Sample id's augmented image, if it is its source at some crop and flip:
 * computed here from the definition (pad with zero bytes, cut, mirror). */
static bool find_place(const float *got, int64_t id, const float *table, int *flips, int *moved)
{
    const uint8_t *image = bytes + id * FEATURES;
    int matches = 0;
    for (int dy = 0; dy <= 2 * PAD; dy++)
        for (int dx = 0; dx <= 2 * PAD; dx++)
            for (int flip = 0; flip < 2; flip++) {
                bool same = true;
                for (int k = 0; k < C && same; k++)
                    for (int i = 0; i < H && same; i++)
                        for (int j = 0; j < W && same; j++) {
                            const int si = i + dy - PAD, sj = (flip ? W - 1 - j : j) + dx - PAD;
                            const uint8_t b = si >= 0 && si < H && sj >= 0 && sj < W ? image[(k * H + si) * W + sj] : 0;
                            same = got[(k * H + i) * W + j] == table[b];
                        }
                if (same) {
                    matches++;
                    *flips += flip;
                    *moved += dy != PAD || dx != PAD;
                }
            }
    return matches == 1;
}

static void test_augmentation_is_a_crop_and_flip(ug_device *dev)
{
    ug_dataset *ds = make_dataset();
    REQUIRE(ds);
    /* Each byte's value as the host's assembly gives it (the reference
     * for the conversion), checked to be one value per byte. */
    ug_loader *host = make_loader(dev, ds, UG_F32, false, false);
    REQUIRE(host);
    float plain[COUNT * FEATURES], table[256];
    bool seen[256] = {false};
    int64_t plain_ids[COUNT];
    REQUIRE(epoch_batches(host, 0, 4, (uint8_t *)plain, plain_ids));
    for (int r = 0; r < COUNT; r++)
        for (int i = 0; i < FEATURES; i++) {
            const uint8_t b = bytes[plain_ids[r] * FEATURES + i];
            const float v = plain[r * FEATURES + i];
            CHECK(!seen[b] || table[b] == v);
            table[b] = v;
            seen[b] = true;
        }
    REQUIRE(seen[0]); /* the padding's byte */
    ug_loader_free(host);

    ug_loader *l = make_loader(dev, ds, UG_F32, true, true);
    REQUIRE(l);
    float got[COUNT * FEATURES], again[COUNT * FEATURES], other[COUNT * FEATURES];
    int64_t ids[COUNT], ids2[COUNT];
    REQUIRE(epoch_batches(l, 0, 4, (uint8_t *)got, ids));
    int flips = 0, moved = 0;
    for (int r = 0; r < COUNT; r++)
        CHECK_MSG(find_place(got + r * FEATURES, ids[r], table, &flips, &moved),
                  "sample %lld is not its image at exactly one crop and flip", (long long)ids[r]);
    CHECK_MSG(flips > 5 && flips < COUNT - 5 && moved > COUNT / 2, "%d of %d flipped, %d moved", flips, COUNT,
              moved);
    /* The same epoch again draws the same; another epoch other places. */
    REQUIRE(epoch_batches(l, 0, 4, (uint8_t *)again, ids2));
    CHECK(!memcmp(got, again, sizeof got) && !memcmp(ids, ids2, sizeof ids));
    REQUIRE(epoch_batches(l, 1, 4, (uint8_t *)other, ids2));
    float sorted_a[COUNT * FEATURES], sorted_b[COUNT * FEATURES];
    for (int r = 0; r < COUNT; r++) {
        memcpy(sorted_a + ids[r] * FEATURES, got + r * FEATURES, FEATURES * sizeof(float));
        memcpy(sorted_b + ids2[r] * FEATURES, other + r * FEATURES, FEATURES * sizeof(float));
    }
    CHECK_MSG(memcmp(sorted_a, sorted_b, sizeof sorted_a), "epochs 0 and 1 drew the same crops");
    /* A loader resumed at batch 2 of epoch 1 draws what the run did. */
    ug_loader *resumed = make_loader(dev, ds, UG_F32, true, true);
    REQUIRE(resumed);
    CHECK_OK(ug_loader_seek(resumed, 1, 2));
    ug_batch b;
    bool done = false;
    CHECK_OK(ug_loader_next(resumed, &b, &done));
    float batch[BATCH * FEATURES];
    CHECK(!done);
    if (!done && ug_tensor_download(b.x, batch, sizeof batch) == UG_OK)
        CHECK_MSG(!memcmp(batch, other + 2 * BATCH * FEATURES, sizeof batch), "the resumed batch's crops differ");
    ug_loader_free(resumed);
    ug_loader_free(l);
    ug_dataset_free(ds);
}

static void test_refusals(ug_device *dev)
{
    ug_dataset *ds = make_dataset();
    REQUIRE(ds);
    ug_loader *l = NULL;
    ug_loader_config c = ug_loader_default_config();
    c.augment = (ug_image_augment){.channels = C, .height = H, .width = W, .crop_padding = 1};
    CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("device_convert");
    c.device_convert = true;
    c.augment.width = W + 1;
    CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_SHAPE);
    CHECK_ERROR_HAS("features");
    c.augment = (ug_image_augment){.channels = (int64_t)1 << 40, .height = (int64_t)1 << 40, .width = 1 << 20,
                                   .crop_padding = 1}; /* sizes whose product overflows */
    CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_SHAPE);
    c.augment = (ug_image_augment){.channels = C, .height = H, .width = W, .crop_padding = 1};
    c.augment.flip = NAN;
    CHECK_STATUS(ug_loader_create(ds, dev, &c, &l), UG_ERR_INVALID_ARGUMENT);
    CHECK(l == NULL);
    float values[4] = {0};
    int32_t y[2] = {0, 1};
    ug_dataset *floats = NULL;
    REQUIRE_OK(ug_dataset_from_arrays(2, 2, values, y, &floats));
    c = ug_loader_default_config();
    c.device_convert = true;
    CHECK_STATUS(ug_loader_create(floats, dev, &c, &l), UG_ERR_DTYPE);
    CHECK_ERROR_HAS("bytes");
    ug_dataset_free(floats);
    ug_dataset_free(ds);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(conversion_matches_host),
        TH_DEVICE_TEST(augmentation_is_a_crop_and_flip),
        TH_DEVICE_TEST(refusals),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
