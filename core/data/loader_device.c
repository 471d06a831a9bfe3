/* A loader's batches converted and augmented on the device: a byte data
 * set's rows are uploaded as bytes (a quarter of f32's) with each sample's
 * crop and flip, and the augment kernel (backend.h, ug_augment_args) makes
 * them the batch's values there through the data set's byte table, the
 * host's conversion bit for bit. */
#include <stdlib.h>

#include "base/fault.h"
#include "base/mix64.h"
#include "core/data/internal.h"
#include "core/runtime/dispatch.h"

static bool augmenting(const ug_image_augment *a) { return a->crop_padding > 0 || a->flip > 0.0f; }

ug_status ug_device_batch_check(const ug_dataset *ds, const ug_loader_config *c, const char *op)
{
    const ug_image_augment *a = &c->augment;
    if (!c->device_convert)
        return augmenting(a) ? ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                            "%s: augmentation runs on the device: set device_convert too", op)
                             : UG_OK;
    const ug_dataset *base = ug_dataset_storage(ds);
    if (base->x_dtype != UG_U8 || base->fill)
        return ug_set_error(UG_ERR_DTYPE,
                            "%s: device_convert needs a data set of bytes (u8 features, not made by a "
                            "callback); this one holds %s",
                            op, base->fill ? "a callback's values" : ug_dtype_name(base->x_dtype));
    if (!augmenting(a))
        return UG_OK;
    if (!(a->flip >= 0.0f && a->flip <= 1.0f) || a->crop_padding < 0 || a->crop_padding > 65535)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: augment.flip %g must be in [0, 1] and crop_padding %d in [0, 65535]", op,
                            (double)a->flip, a->crop_padding);
    /* Divisions, so that no product of the caller's sizes can overflow. */
    if (a->channels <= 0 || a->height <= 0 || a->width <= 0 || ds->features % a->channels ||
        ds->features / a->channels % a->height || ds->features / a->channels / a->height != a->width)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: augment's images of %lld x %lld x %lld (channels, height, width) must "
                            "hold the data set's %lld features",
                            op, (long long)a->channels, (long long)a->height, (long long)a->width,
                            (long long)ds->features);
    return UG_OK;
}

ug_status ug_device_batch_table(const ug_dataset *ds, ug_device *device, ug_tensor **table)
{
    float values[256];
    ug_dataset_byte_table(ds, values);
    UG_TRY(ug_tensor_new(device, UG_F32, 1, (int64_t[]){256}, "loader byte table", table));
    return ug_tensor_upload(*table, values, sizeof values);
}

ug_status ug_device_batch_make(ug_device_batch *b, ug_device *device, const ug_loader_config *c, int64_t rows,
                               int64_t features)
{
    UG_TRY(ug_tensor_new(device, UG_U8, 2, (int64_t[]){rows, features}, "loader batch bytes", &b->bytes));
    if (!augmenting(&c->augment))
        return UG_OK;
    if (!(b->host_places = ug_malloc((size_t)rows * 3 * sizeof *b->host_places)))
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    return ug_tensor_new(device, UG_I32, 2, (int64_t[]){rows, 3}, "loader batch crops", &b->places);
}

void ug_device_batch_free(ug_device_batch *b)
{
    ug_tensor_free(b->bytes);
    ug_tensor_free(b->places);
    free(b->host_places);
    *b = (ug_device_batch){0};
}

/* Sample id's crop (dy, dx in [0, 2 padding]) and flip in epoch: from
 * (seed, epoch, id) alone, so every shard, thread and resumed run draws
 * the same. */
static void place_of(const ug_loader_config *c, int64_t epoch, int64_t id, int32_t *place)
{
    const uint64_t r = ug_mix64(ug_mix64(c->seed ^ 0x8bb84b93962eacc9ull) ^ ug_mix64((uint64_t)epoch) ^
                                (uint64_t)id * 0x9e3779b97f4a7c15ull);
    const uint64_t span = 2 * (uint64_t)c->augment.crop_padding + 1;
    place[0] = (int32_t)((r & 0xfffff) % span);
    place[1] = (int32_t)(((r >> 20) & 0xfffff) % span);
    /* 24 bits: the flip's probability to 2^-24 */
    place[2] = (double)(r >> 40) < (double)c->augment.flip * 16777216.0;
}

/* The first count rows of t: t itself, or a slice (*slice, freed by the
 * caller). */
static ug_status rows_of(ug_tensor *t, int64_t count, ug_tensor **slice, ug_tensor **rows)
{
    *slice = NULL;
    if (t->shape[0] == count) {
        *rows = t;
        return UG_OK;
    }
    UG_TRY(ug_tensor_slice(t, 0, count, slice));
    *rows = *slice;
    return UG_OK;
}

ug_status ug_device_batch_fill(ug_device_batch *b, const ug_loader_config *c, const ug_tensor *table,
                               int64_t epoch, const int64_t *ids, int64_t count, const void *bytes, ug_tensor *x)
{
    ug_tensor *slices[2] = {NULL, NULL}, *rows = NULL, *places = NULL;
    const int64_t features = b->bytes->shape[1];
    ug_status st = rows_of(b->bytes, count, &slices[0], &rows);
    if (st == UG_OK)
        st = ug_tensor_upload(rows, bytes, (size_t)(count * features));
    if (st == UG_OK && b->places) {
        for (int64_t r = 0; r < count; r++)
            place_of(c, epoch, ids[r], &b->host_places[3 * r]);
        st = rows_of(b->places, count, &slices[1], &places);
        if (st == UG_OK)
            st = ug_tensor_upload(places, b->host_places, (size_t)count * 3 * sizeof *b->host_places);
    }
    if (st == UG_OK) {
        const ug_image_augment *a = &c->augment;
        ug_augment_args args = {.x = ug_kview_of(rows), .y = ug_kview_of(x), .table = ug_kview_of(table),
                                .n = count, .c = places ? a->channels : 1, .h = places ? a->height : 1,
                                .w = places ? a->width : features, .pad = places ? a->crop_padding : 0};
        if (places)
            args.place = ug_kview_of(places);
        st = ug_dispatch(ug_dev(x), UG_KERNEL_AUGMENT, "loader augment", x->dtype, &args);
    }
    ug_tensor_free(slices[0]);
    ug_tensor_free(slices[1]);
    return st;
}
