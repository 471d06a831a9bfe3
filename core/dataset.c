/* Data sets on the host: samples flattened to f32 rows plus i32 labels.
 *
 * Everything is converted once, when the data set is made, so the loader's
 * workers only copy rows (memcpy) and the training loop never pays for
 * decoding or normalisation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "core/data_internal.h"
#include "core/internal.h"

/* Labels are class indices: non-negative, and below INT32_MAX so that the
 * class count (largest label + 1) is an int32_t. For a file (path not NULL),
 * header and elem give the bad label's byte offset for the message. */
static ug_status check_labels(const int32_t *labels, int64_t count, ug_status bad,
                              const char *op, const char *path, size_t header, size_t elem,
                              int32_t *classes)
{
    int32_t max = -1;
    for (int64_t i = 0; i < count; i++) {
        int32_t v = labels[i];
        if (v < 0 || v == INT32_MAX) {
            char offset[64] = "";
            if (path)
                snprintf(offset, sizeof offset, " (byte offset %llu)",
                         (unsigned long long)(header + (size_t)i * elem));
            return ug_set_error(bad,
                                "%s: %s%s%slabel %lld at index %lld%s is %s; labels are class "
                                "indices 0, 1, 2, ...",
                                op, path ? "labels file " : "", path ? path : "",
                                path ? ": " : "", (long long)v, (long long)i, offset,
                                v < 0 ? "negative" : "too large");
        }
        if (v > max)
            max = v;
    }
    *classes = max + 1;
    return UG_OK;
}

static ug_status alloc_dataset(int64_t count, int64_t features, const char *op, ug_dataset **out)
{
    if (count < 1 || features < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %lld samples of %lld features; both must be at least 1", op,
                            (long long)count, (long long)features);
    if ((uint64_t)count > SIZE_MAX / sizeof(float) / (uint64_t)features)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                            "%s: %lld samples of %lld features do not fit in memory", op,
                            (long long)count, (long long)features);
    ug_dataset *ds = ug_calloc(1, sizeof *ds);
    if (ds) {
        ds->refs = 1;
        ds->x = ug_malloc((size_t)count * (size_t)features * sizeof(float));
        ds->labels = ug_malloc((size_t)count * sizeof(int32_t));
    }
    if (!ds || !ds->x || !ds->labels) {
        ug_dataset_free(ds);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                            "%s: out of host memory for %lld samples of %lld f32 features", op,
                            (long long)count, (long long)features);
    }
    ds->count = count;
    ds->features = features;
    *out = ds;
    return UG_OK;
}

ug_status ug_dataset_from_idx(const char *images_path, const char *labels_path, float scale,
                              float shift, ug_dataset **out)
{
    const char *op = "ug_dataset_from_idx";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!images_path || !labels_path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                            images_path ? "labels_path" : "images_path");
    if (!isfinite(scale) || !isfinite(shift))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: scale %g and shift %g must be finite",
                            op, (double)scale, (double)shift);
    ug_idx *images = NULL, *labels = NULL;
    size_t label_elem = 0, label_header = 0;
    ug_status st = ug_idx_read(images_path, &images);
    if (st == UG_OK)
        st = ug_idx_read_ex(labels_path, &labels, &label_elem, &label_header);
    if (st != UG_OK)
        goto done;

    char dims[96];
    if (labels->ndim != 1) {
        st = ug_set_error(UG_ERR_SHAPE, "%s: labels file %s has shape %s; expected one dimension [n]",
                          op, labels_path, ug_format_shape(labels->ndim, labels->shape, dims, sizeof dims));
        goto done;
    }
    if (labels->dtype == UG_F32) {
        st = ug_set_error(UG_ERR_DTYPE,
                          "%s: labels file %s holds f32 values; labels must be integers (u8, i8, "
                          "i16 or i32 IDX)",
                          op, labels_path);
        goto done;
    }
    int64_t count = images->shape[0];
    if (labels->shape[0] != count) {
        st = ug_set_error(UG_ERR_SHAPE,
                          "%s: images file %s holds %lld samples but labels file %s holds %lld "
                          "labels; the counts must match (are the files from the same split?)",
                          op, images_path, (long long)count, labels_path,
                          (long long)labels->shape[0]);
        goto done;
    }
    int64_t features = ug_shape_numel(images->ndim - 1, images->shape + 1);
    ug_dataset *ds = NULL;
    st = alloc_dataset(count, features, op, &ds);
    if (st != UG_OK)
        goto done;

    size_t n = (size_t)count * (size_t)features;
    if (images->dtype == UG_U8) {
        /* 256 possible inputs: convert through a table. */
        float table[256];
        for (int v = 0; v < 256; v++)
            table[v] = scale * (float)v + shift;
        const uint8_t *src = images->data;
        for (size_t i = 0; i < n; i++)
            ds->x[i] = table[src[i]];
    } else if (images->dtype == UG_I32) {
        const int32_t *src = images->data;
        for (size_t i = 0; i < n; i++)
            ds->x[i] = scale * (float)src[i] + shift;
    } else {
        const float *src = images->data;
        for (size_t i = 0; i < n; i++)
            ds->x[i] = scale * src[i] + shift;
    }
    if (labels->dtype == UG_U8) {
        const uint8_t *src = labels->data;
        for (int64_t i = 0; i < count; i++)
            ds->labels[i] = src[i];
    } else {
        memcpy(ds->labels, labels->data, (size_t)count * sizeof(int32_t));
    }
    st = check_labels(ds->labels, count, UG_ERR_FORMAT, op, labels_path, label_header,
                      label_elem, &ds->classes);
    if (st != UG_OK) {
        ug_dataset_free(ds);
        goto done;
    }
    *out = ds;
done:
    ug_idx_free(images);
    ug_idx_free(labels);
    return st;
}

ug_status ug_dataset_require_classes(const ug_dataset *ds, int32_t classes)
{
    const char *op = "ug_dataset_require_classes";
    if (!ds)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dataset is NULL", op);
    if (classes <= 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: classes is %d; it must be positive", op,
                            (int)classes);
    for (int64_t i = 0; i < ds->count; i++)
        if (ds->labels[i] >= classes)
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: sample %lld has label %d, outside the %d classes 0..%d (a "
                                "damaged labels file, or the wrong data set?)",
                                op, (long long)i, (int)ds->labels[i], (int)classes, (int)classes - 1);
    return UG_OK;
}

ug_status ug_dataset_from_arrays(int64_t count, int64_t features, const float *x,
                                 const int32_t *labels, ug_dataset **out)
{
    const char *op = "ug_dataset_from_arrays";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!x || !labels)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, x ? "labels" : "x");
    ug_dataset *ds = NULL;
    UG_TRY(alloc_dataset(count, features, op, &ds));
    memcpy(ds->x, x, (size_t)count * (size_t)features * sizeof(float));
    memcpy(ds->labels, labels, (size_t)count * sizeof(int32_t));
    ug_status st = check_labels(ds->labels, count, UG_ERR_INVALID_ARGUMENT, op, NULL, 0, 0,
                                &ds->classes);
    if (st != UG_OK) {
        ug_dataset_free(ds);
        return st;
    }
    *out = ds;
    return UG_OK;
}

void ug_dataset_retain(const ug_dataset *ds)
{
    __atomic_add_fetch(&((ug_dataset *)ds)->refs, 1, __ATOMIC_RELAXED);
}

void ug_dataset_free(ug_dataset *ds)
{
    if (!ds || __atomic_sub_fetch(&ds->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(ds->x);
    free(ds->labels);
    free(ds);
}

int64_t ug_dataset_count(const ug_dataset *ds) { return ds ? ds->count : 0; }
int64_t ug_dataset_features(const ug_dataset *ds) { return ds ? ds->features : 0; }
int32_t ug_dataset_classes(const ug_dataset *ds) { return ds ? ds->classes : 0; }
