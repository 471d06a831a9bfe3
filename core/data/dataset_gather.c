/* Assembling a batch from a data set: the loader's workers gather rows
 * from bytes or floats (or have a callback make them), apply the data set's
 * affine transform and round to the batch's dtype in one pass per row. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/data/internal.h"
#include "base/error.h"
#include "base/half.h"

bool ug_dataset_gather_needs_scratch(const ug_dataset *ds, ug_dtype x_dtype)
{
    /* A callback writes f32: a half batch takes it through scratch first. */
    return ug_dataset_storage(ds)->fill && x_dtype != UG_F32;
}

size_t ug_dataset_y_bytes(const ug_dataset *ds)
{
    int64_t width = ug_dataset_storage(ds)->target_width;
    return width ? (size_t)width * sizeof(float) : sizeof(int32_t);
}

/* n f32 values to dst in dtype. */
static void store_row(const float *src, int64_t n, ug_dtype dtype, void *dst)
{
    if (dtype == UG_F32) {
        if (src != dst)
            memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    unsigned short *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = dtype == UG_F16 ? ug_half_from_f32(src[i]) : ug_bfloat_from_f32(src[i]);
}

static ug_status gather_callback(const ug_dataset *ds, const ug_dataset *base, const int64_t *base_ids,
                                 int64_t count, ug_dtype x_dtype, void *x, void *y, float *scratch)
{
    float *values = x_dtype == UG_F32 ? x : scratch;
    int code = base->fill(base->user, base_ids, count, values, y);
    if (code != 0)
        return ug_set_error(UG_ERR_IO, "the data set's fill callback returned %d for %lld samples from %lld",
                            code, (long long)count, (long long)base_ids[0]);
    int64_t features = ds->features;
    for (int64_t r = 0; r < count; r++) {
        float *row = values + r * features;
        for (int64_t f = 0; f < features; f++) {
            float v = ds->scale * row[f] + ds->shift;
            if (!isfinite(v)) /* the callback's values enter here: check them once */
                return ug_set_error(UG_ERR_FORMAT,
                                    "the data set's fill callback gave sample %lld feature %lld the value %g, "
                                    "%g after the data set's transform; values must be finite",
                                    (long long)base_ids[r], (long long)f, (double)row[f], (double)v);
            row[f] = v;
        }
        store_row(row, features, x_dtype, (char *)x + (size_t)(r * features) * ug_dtype_size(x_dtype));
    }
    if (!base->target_width) {
        const int32_t *labels = y;
        for (int64_t r = 0; r < count; r++)
            if (labels[r] < 0 || labels[r] >= base->classes)
                return ug_set_error(UG_ERR_FORMAT,
                                    "the data set's fill callback gave sample %lld the label %d, outside "
                                    "its %d classes",
                                    (long long)base_ids[r], (int)labels[r], (int)base->classes);
    }
    return UG_OK;
}

void ug_dataset_byte_table(const ug_dataset *ds, float table[256])
{
    for (int v = 0; v < 256; v++)
        table[v] = ds->scale * (float)v + ds->shift;
}

ug_status ug_dataset_gather(const ug_dataset *ds, const int64_t *ids, int64_t count, ug_dtype x_dtype,
                            void *x, void *y, int64_t *base_ids, float *scratch)
{
    const ug_dataset *base = ug_dataset_storage(ds);
    for (int64_t r = 0; r < count; r++)
        base_ids[r] = ug_dataset_base_id(ds, ids[r]);
    if (base->fill)
        return gather_callback(ds, base, base_ids, count, x_dtype, x, y, scratch);

    int64_t features = ds->features;
    size_t out_row = (size_t)features * ug_dtype_size(x_dtype);
    bool identity = ds->scale == 1.0f && ds->shift == 0.0f;
    /* Bytes have 256 values: convert through a table, in the batch's dtype. */
    float table[256];
    unsigned short half_table[256];
    if (base->x_dtype == UG_U8) {
        ug_dataset_byte_table(ds, table);
        if (x_dtype != UG_F32 && x_dtype != UG_U8)
            store_row(table, 256, x_dtype, half_table);
    }
    float row[256];
    for (int64_t r = 0; r < count; r++) {
        char *dst = (char *)x + (size_t)r * out_row;
        if (base->x_dtype == UG_U8) {
            const unsigned char *src = (const unsigned char *)base->x + base_ids[r] * features;
            if (x_dtype == UG_U8) /* the bytes themselves, converted on the device */
                memcpy(dst, src, (size_t)features);
            else if (x_dtype == UG_F32)
                for (int64_t f = 0; f < features; f++)
                    ((float *)dst)[f] = table[src[f]];
            else
                for (int64_t f = 0; f < features; f++)
                    ((unsigned short *)dst)[f] = half_table[src[f]];
            continue;
        }
        const float *src = (const float *)base->x + base_ids[r] * features;
        if (identity) {
            store_row(src, features, x_dtype, dst);
            continue;
        }
        /* In chunks, so the transform needs no buffer of a row's size. */
        for (int64_t f = 0; f < features; f += 256) {
            int64_t n = features - f < 256 ? features - f : 256;
            for (int64_t i = 0; i < n; i++)
                row[i] = ds->scale * src[f + i] + ds->shift;
            store_row(row, n, x_dtype, dst + (size_t)f * ug_dtype_size(x_dtype));
        }
    }
    size_t y_bytes = ug_dataset_y_bytes(ds);
    for (int64_t r = 0; r < count; r++) {
        char *dst = (char *)y + (size_t)r * y_bytes;
        if (base->target_width)
            memcpy(dst, base->targets + base_ids[r] * base->target_width, y_bytes);
        else
            memcpy(dst, base->labels + base_ids[r], y_bytes);
    }
    return UG_OK;
}
