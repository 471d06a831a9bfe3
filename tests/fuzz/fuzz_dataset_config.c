/* libFuzzer harness for the data-set and loader entry points
 * (structure-aware: the bytes decode into sizes, a transform, split and
 * subset arguments, a loader configuration and seeks). Sizes that would
 * overflow must be refused before anything is allocated; sizes this
 * harness can back with memory are created for real and read through a
 * loader on the CPU. Every call returns a status with a message, never a
 * crash, hang, leak or overflow (ASan/UBSan). */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "unigrad/unigrad.h"

enum { MAX_VALUES = 1 << 16 }; /* the largest arrays the harness backs */

static ug_device *device;
static float values[MAX_VALUES];
static uint8_t bytes[MAX_VALUES];
static int32_t labels[MAX_VALUES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (ug_device_open("cpu", &device) != UG_OK || ug_memory_set_limit(device, FUZZ_POOL_LIMIT) != UG_OK)
        abort();
    return 0;
}

static void check(ug_status st)
{
    if (st != UG_OK && !ug_last_error()[0])
        abort(); /* every refusal says why */
}

/* Values from the callback: what the input says, NaN and inf included. */
static int fill(void *user, const int64_t *ids, int64_t count, float *x, void *y)
{
    const int64_t *shape = user; /* features, target width, classes */
    for (int64_t r = 0; r < count; r++) {
        for (int64_t f = 0; f < shape[0]; f++)
            x[r * shape[0] + f] = values[(ids[r] * shape[0] + f) % MAX_VALUES];
        if (shape[1])
            for (int64_t k = 0; k < shape[1]; k++)
                ((float *)y)[r * shape[1] + k] = values[(ids[r] + k) % MAX_VALUES];
        else
            ((int32_t *)y)[r] = labels[ids[r] % MAX_VALUES] % (int32_t)shape[2];
    }
    return 0;
}

static ug_dataset *make(fuzz_input *in, int64_t *shape)
{
    int64_t count = fuzz_int(in, 300), features = fuzz_int(in, 40), width = fuzz_int(in, 4);
    uint8_t kind = fuzz_byte(in) % 3;
    shape[0] = features;
    shape[1] = width;
    shape[2] = fuzz_int(in, 12);
    __int128 need = (__int128)count * features, need_y = (__int128)count * (width ? width : 1);
    bool backed = count >= 0 && features >= 0 && width >= 0 && need <= MAX_VALUES && need_y <= MAX_VALUES;
    bool huge = need > ((__int128)1 << 61) || need_y > ((__int128)1 << 61) || count < 0 || features < 0 ||
                width < 0;
    ug_dataset *ds = NULL;
    ug_status st;
    if (kind == 2) { /* nothing to back: the callback makes the values */
        ug_dataset_source src = {count, features, width, (int32_t)shape[2], fill, shape};
        st = ug_dataset_from_callback(&src, &ds);
    } else if (backed || huge) { /* huge: must be refused without reading the arrays */
        ug_dataset_arrays a = {.count = count, .features = features, .x_dtype = kind ? UG_U8 : UG_F32,
                               .x = kind ? (const void *)bytes : (const void *)values,
                               .labels = width ? NULL : labels, .targets = width ? values : NULL,
                               .target_width = width};
        st = ug_dataset_create(&a, &ds);
        if (huge && st == UG_OK)
            abort();
    } else {
        return NULL; /* fits, but more than this harness holds */
    }
    check(st);
    if (st == UG_OK && kind == 2 && (need > MAX_VALUES || need_y > MAX_VALUES)) {
        ug_dataset_free(ds); /* a loader would read more than the harness wants to make */
        return NULL;
    }
    return ds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size, 0};
    for (int i = 0; i < 64; i++) { /* the arrays' contents, from the input too */
        values[fuzz_byte(&in) * 97 % MAX_VALUES] = fuzz_float(&in);
        labels[fuzz_byte(&in) * 131 % MAX_VALUES] = (int32_t)fuzz_int(&in, 20);
    }
    int64_t shape[3];
    ug_dataset *ds = make(&in, shape);
    if (!ds)
        return 0;
    for (int t = fuzz_byte(&in) % 3; t > 0; t--)
        check(ug_dataset_transform(ds, fuzz_float(&in), fuzz_float(&in)));
    double mean, sd;
    if (fuzz_byte(&in) & 1)
        check(ug_dataset_stats(ds, &mean, &sd));
    ug_dataset *first = NULL, *second = NULL, *subset = NULL;
    double fraction = (double)fuzz_float(&in);
    if (ug_dataset_split(ds, fraction, fuzz_bits(&in, 8), &first, &second) != UG_OK)
        check(UG_ERR_INVALID_ARGUMENT);
    int64_t ids[8];
    int64_t n = fuzz_int(&in, 9);
    for (int i = 0; i < 8; i++)
        ids[i] = fuzz_int(&in, 400);
    check(ug_dataset_subset(ds, ids, n > 8 ? 8 : n, &subset));

    ug_loader_config c = ug_loader_default_config();
    c.batch_size = fuzz_int(&in, 70);
    c.shuffle = fuzz_byte(&in) & 1;
    c.seed = fuzz_bits(&in, 8);
    c.drop_last = fuzz_byte(&in) & 1;
    c.threads = (int)fuzz_int(&in, 4);
    c.prefetch = (int)fuzz_int(&in, 4);
    c.x_dtype = (ug_dtype)(fuzz_byte(&in) % 8);
    double weights[4];
    c.shard_count = (int)fuzz_int(&in, 4);
    c.shard_index = (int)fuzz_int(&in, 4);
    for (int i = 0; i < 4; i++)
        weights[i] = fuzz_float(&in);
    c.shard_weights = fuzz_byte(&in) & 1 ? weights : NULL;
    if (c.shard_count > 4)
        c.shard_count = 4; /* the weights the harness holds */
    c.device_convert = fuzz_byte(&in) & 1;
    c.augment = (ug_image_augment){.channels = fuzz_int(&in, 4), .height = fuzz_int(&in, 8),
                                   .width = fuzz_int(&in, 8), .crop_padding = (int)fuzz_int(&in, 4),
                                   .flip = fuzz_float(&in)};
    ug_dataset *source = subset && (fuzz_byte(&in) & 1) ? subset : first ? first : ds;
    uint64_t device_bytes = 0;
    ug_status st = ug_loader_device_bytes(source, &c, &device_bytes);
    check(st);
    ug_loader *l = NULL;
    if (st == UG_OK && device_bytes < ((uint64_t)64 << 20)) {
        st = ug_loader_create(source, device, &c, &l);
        check(st);
    }
    for (int k = 0; l && k < 3; k++) {
        st = ug_loader_seek(l, fuzz_int(&in, 5), fuzz_int(&in, 10));
        check(st);
        for (int b = 0; st == UG_OK && b < 3; b++) {
            ug_batch batch;
            bool done = false;
            st = ug_loader_next(l, &batch, &done);
            check(st);
            if (done)
                break;
        }
    }
    ug_loader_free(l);
    ug_dataset_free(subset);
    ug_dataset_free(first);
    ug_dataset_free(second);
    ug_dataset_free(ds);
    return 0;
}
