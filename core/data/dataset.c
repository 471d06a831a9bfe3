/* Making data sets on the host: from IDX files, the caller's arrays or a
 * callback. Features stay in their stored type (bytes stay bytes) and are
 * converted as batches are assembled (data/dataset_gather.c), a table lookup or
 * a multiply-add per value beside the copy the batch needs anyway. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/data/internal.h"
#include "core/runtime/internal.h"

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

/* count rows of width values, 8 bytes each at most (the widest element),
 * fit in size_t. */
static bool fits_in_memory(int64_t count, int64_t width)
{
    uint64_t n;
    return !__builtin_mul_overflow((uint64_t)count, (uint64_t)width, &n) && n <= SIZE_MAX / 8;
}

ug_status ug_dataset_alloc(int64_t count, int64_t features, bool store_x, ug_dtype x_dtype, int64_t target_width,
                           bool store_y, const char *op, ug_dataset **out)
{
    if (count < 1 || features < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %lld samples of %lld features; both must be at least 1", op,
                            (long long)count, (long long)features);
    if (target_width < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: target_width %lld is negative", op,
                            (long long)target_width);
    bool features_fit = fits_in_memory(count, features);
    if (!features_fit || !fits_in_memory(count, target_width ? target_width : 1))
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: %lld samples of %lld %s do not fit in memory", op,
                            (long long)count, (long long)(features_fit ? target_width : features),
                            features_fit ? "float targets (target_width)" : "features");
    size_t x_bytes = store_x ? (size_t)count * (size_t)features * ug_dtype_size(x_dtype) : 0;
    size_t y_width = target_width ? (size_t)target_width * sizeof(float) : sizeof(int32_t);
    size_t y_bytes = store_y ? (size_t)count * y_width : 0;
    ug_dataset *ds = ug_calloc(1, sizeof *ds);
    bool ok = ds != NULL;
    if (ok) {
        ds->refs = 1;
        ds->scale = 1.0f;
        ds->x_dtype = x_dtype;
        ds->target_width = target_width;
        if (x_bytes)
            ok = (ds->x = ug_malloc(x_bytes)) != NULL;
        if (ok && y_bytes && target_width)
            ok = (ds->targets = ug_malloc(y_bytes)) != NULL;
        else if (ok && y_bytes)
            ok = (ds->labels = ug_malloc(y_bytes)) != NULL;
    }
    if (!ok) {
        ug_dataset_free(ds);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                            "%s: out of host memory for %lld samples (%zu bytes)", op,
                            (long long)count, x_bytes + y_bytes);
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
    /* Bytes and floats are kept as read (the array is taken over); i8, i16
     * and i32 images, rare, are held as f32. */
    bool adopt = images->dtype == UG_U8 || images->dtype == UG_F32;
    ug_dataset *ds = NULL;
    st = ug_dataset_alloc(count, features, !adopt, UG_F32, 0, true, op, &ds);
    if (st != UG_OK)
        goto done;
    ds->scale = scale;
    ds->shift = shift;
    if (adopt) {
        ds->x_dtype = images->dtype;
        ds->x = images->data;
        images->data = NULL;
    } else {
        const int32_t *src = images->data;
        float *dst = ds->x;
        for (size_t i = 0, n = (size_t)count * (size_t)features; i < n; i++)
            dst[i] = (float)src[i];
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
    const ug_dataset *base = ug_dataset_storage(ds);
    if (base->target_width)
        return ug_set_error(UG_ERR_DTYPE, "%s: the data set holds %lld float targets per sample, not class labels",
                            op, (long long)base->target_width);
    if (base->fill) {
        if (base->classes > classes)
            return ug_set_error(UG_ERR_FORMAT, "%s: the data set's source declares %d classes, more than %d",
                                op, (int)base->classes, (int)classes);
        return UG_OK;
    }
    for (int64_t i = 0; i < ds->count; i++) {
        int32_t label = base->labels[ug_dataset_base_id(ds, i)];
        if (label >= classes)
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: sample %lld has label %d, outside the %d classes 0..%d (a "
                                "damaged labels file, or the wrong data set?)",
                                op, (long long)i, (int)label, (int)classes, (int)classes - 1);
    }
    return UG_OK;
}

ug_status ug_dataset_create(const ug_dataset_arrays *a, ug_dataset **out)
{
    const char *op = "ug_dataset_create";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!a || !a->x)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, a ? "x" : "arrays");
    ug_dtype xt = a->x_dtype ? a->x_dtype : UG_F32;
    if (xt != UG_F32 && xt != UG_U8)
        return ug_set_error(UG_ERR_DTYPE, "%s: x_dtype %s; features are f32 or u8", op,
                            ug_dtype_size(xt) ? ug_dtype_name(xt) : "(invalid)");
    if (!a->labels == !a->targets)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: give either labels (classification) or targets (regression), %s", op,
                            a->labels ? "not both" : "not neither");
    if (a->targets && a->target_width < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: target_width %lld; targets need at least 1 per sample",
                            op, (long long)a->target_width);
    int64_t width = a->targets ? a->target_width : 0;
    ug_dataset *ds = NULL;
    UG_TRY(ug_dataset_alloc(a->count, a->features, true, xt, width, true, op, &ds));
    memcpy(ds->x, a->x, (size_t)a->count * (size_t)a->features * ug_dtype_size(xt));
    ug_status st = UG_OK;
    if (a->targets) {
        size_t n = (size_t)a->count * (size_t)width;
        memcpy(ds->targets, a->targets, n * sizeof(float));
    } else {
        memcpy(ds->labels, a->labels, (size_t)a->count * sizeof(int32_t));
        st = check_labels(ds->labels, a->count, UG_ERR_INVALID_ARGUMENT, op, NULL, 0, 0, &ds->classes);
    }
    if (st != UG_OK) {
        ug_dataset_free(ds);
        return st;
    }
    *out = ds;
    return UG_OK;
}

ug_status ug_dataset_from_arrays(int64_t count, int64_t features, const float *x,
                                 const int32_t *labels, ug_dataset **out)
{
    if (!labels && out) {
        *out = NULL;
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_dataset_from_arrays: labels is NULL");
    }
    ug_dataset_arrays a = {.count = count, .features = features, .x_dtype = UG_F32, .x = x, .labels = labels};
    ug_status st = ug_dataset_create(&a, out);
    return st == UG_OK ? st : ug_prefix_error(st, "ug_dataset_from_arrays");
}

ug_status ug_dataset_from_callback(const ug_dataset_source *src, ug_dataset **out)
{
    const char *op = "ug_dataset_from_callback";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!src || !src->fill)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, src ? "fill" : "source");
    if (!src->target_width && src->classes < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: classes is %d; a source of labels declares how many classes there are",
                            op, (int)src->classes);
    ug_dataset *ds = NULL;
    /* Nothing is stored: the callback makes every sample. */
    UG_TRY(ug_dataset_alloc(src->count, src->features, false, UG_F32, src->target_width, false, op, &ds));
    ds->fill = src->fill;
    ds->user = src->user;
    ds->classes = src->target_width ? 0 : src->classes;
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
    ug_dataset_free(ds->base);
    free(ds->ids);
    free(ds->x);
    free(ds->labels);
    free(ds->targets);
    free(ds);
}

const ug_dataset *ug_dataset_storage(const ug_dataset *ds) { return ds->base ? ds->base : ds; }
int64_t ug_dataset_base_id(const ug_dataset *ds, int64_t id) { return ds->ids ? ds->ids[id] : id; }

int64_t ug_dataset_count(const ug_dataset *ds) { return ds ? ds->count : 0; }
int64_t ug_dataset_features(const ug_dataset *ds) { return ds ? ds->features : 0; }
int64_t ug_dataset_target_width(const ug_dataset *ds) { return ds ? ug_dataset_storage(ds)->target_width : 0; }
int32_t ug_dataset_classes(const ug_dataset *ds) { return ds ? ug_dataset_storage(ds)->classes : 0; }

uint64_t ug_dataset_host_bytes(const ug_dataset *ds)
{
    if (!ds)
        return 0;
    if (ds->base)
        return (uint64_t)ds->count * sizeof *ds->ids;
    uint64_t n = (uint64_t)ds->count;
    uint64_t x = ds->x ? n * (uint64_t)ds->features * ug_dtype_size(ds->x_dtype) : 0;
    uint64_t y = ds->labels ? n * sizeof(int32_t) : ds->targets ? n * (uint64_t)ds->target_width * sizeof(float) : 0;
    return x + y;
}
