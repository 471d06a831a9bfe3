/* Shared by the data files (idx.c, dataset.c, loader.c): the dataset's
 * layout, which the loader gathers from directly. */
#ifndef UG_CORE_DATA_INTERNAL_H
#define UG_CORE_DATA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/data.h"

/* Storage belongs to a base data set; a subset reads its base's through
 * ids and keeps its own transform. */
struct ug_dataset {
    int refs;                  /* the program's handle, loaders and subsets (atomic) */
    int64_t count;             /* samples */
    int64_t features;          /* values per sample */
    float scale, shift;        /* value = scale * stored + shift, applied on assembly */
    ug_dataset *base;          /* a subset's base (holding a reference), else NULL */
    int64_t *ids;              /* a subset's count indices into base, else NULL */
    /* The storage; in a subset, read base's. */
    ug_dtype x_dtype;          /* U8 or F32 */
    void *x;                   /* count * features, row-major; NULL with fill */
    int64_t target_width;      /* 0: labels; else f32 targets per sample */
    int32_t *labels;           /* count class indices, or NULL */
    float *targets;            /* count * target_width, or NULL */
    int32_t classes;           /* largest label + 1 (the source's with fill) */
    ug_dataset_fill_fn fill;   /* samples made by a callback, or NULL */
    void *user;
};

/* The data set that holds the storage (ds itself unless a subset), and a
 * sample's index in it. */
const ug_dataset *ug_dataset_storage(const ug_dataset *ds);
int64_t ug_dataset_base_id(const ug_dataset *ds, int64_t id);

/* Assembles samples ids[0..count) (indices into ds) into x, count * features
 * values of x_dtype (f32, f16 or bf16; u8: a byte data set's bytes), and y
 * (labels i32 or targets f32).
 * base_ids receives the storage's indices (count); scratch is count *
 * features floats when ug_dataset_gather_needs_scratch, else unused. The
 * error names the samples. Thread-safe: loaders' workers call it. */
ug_status ug_dataset_gather(const ug_dataset *ds, const int64_t *ids, int64_t count,
                            ug_dtype x_dtype, void *x, void *y, int64_t *base_ids, float *scratch);
bool ug_dataset_gather_needs_scratch(const ug_dataset *ds, ug_dtype x_dtype);
/* The value of each byte in ds (scale * byte + shift, in f32). */
void ug_dataset_byte_table(const ug_dataset *ds, float table[256]);
/* Bytes of one sample's y as a batch holds it. */
size_t ug_dataset_y_bytes(const ug_dataset *ds);

/* Sample indices 0..n-1, shuffled by a Fisher-Yates pass driven by
 * splitmix64 keyed by (seed, stream) alone: the same order on every
 * platform. shuffle false leaves them in order. */
void ug_shuffled_order(int64_t *perm, int64_t n, bool shuffle, uint64_t seed, uint64_t stream);

/* A shard's rows of a global batch of rows, by weights (NULL: equal):
 * [*begin, *begin + *count), shard i taking [floor(rows W_i / W),
 * floor(rows W_i+1 / W)). The loader's and the token sampler's rule. */
void ug_shard_rows(int shard_count, int shard_index, const double *weights, int64_t rows, int64_t *begin,
                   int64_t *count);
/* UG_ERR_INVALID_ARGUMENT, naming op, unless every weight is positive and
 * finite and so is their sum. */
ug_status ug_check_shard_weights(int count, const double *weights, const char *op);

/* A base data set with room for count samples: x_dtype features unless
 * store_x is false (taken over, or made by a callback), labels or
 * target_width targets unless store_y is false; op names the caller in
 * the errors. */
ug_status ug_dataset_alloc(int64_t count, int64_t features, bool store_x, ug_dtype x_dtype, int64_t target_width,
                           bool store_y, const char *op, ug_dataset **out);

/* Loaders keep their data set: ug_dataset_free drops a reference. */
void ug_dataset_retain(const ug_dataset *dataset);

/* ug_idx_read that also reports the size of one element in the file (a
 * converted i8 or i16 array reads as i32 but sat in 1 or 2 bytes) and the
 * header length, so later checks can name the byte offset of an element. */
ug_status ug_idx_read_ex(const char *path, ug_idx **out, size_t *file_elem_size,
                         size_t *header_bytes);

/* Test hook, not in the public headers: the worker preparing batch number
 * `batch` (of every later epoch; -1 turns it off) makes its upload fail with
 * the core's own error, so the tests can see a worker's error reach
 * ug_loader_next. */
void ug_loader_debug_fail_batch(ug_loader *loader, int64_t batch);

/* A loader slot's part on the device with device_convert (loader_device.c):
 * the rows' bytes, and with augmentation each sample's crop and flip. */
typedef struct ug_device_batch {
    ug_tensor *bytes;      /* u8 [rows, features] */
    ug_tensor *places;     /* i32 [rows, 3]: dy, dx, flip; NULL without augmentation */
    int32_t *host_places;
} ug_device_batch;
/* The configuration's device conversion and augmentation against ds. */
ug_status ug_device_batch_check(const ug_dataset *ds, const ug_loader_config *c, const char *op);
/* ds's byte table on device (f32 [256]). */
ug_status ug_device_batch_table(const ug_dataset *ds, ug_device *device, ug_tensor **table);
ug_status ug_device_batch_make(ug_device_batch *b, ug_device *device, const ug_loader_config *c, int64_t rows,
                               int64_t features);
void ug_device_batch_free(ug_device_batch *b);
/* Uploads count rows of bytes (samples ids) and their places in epoch,
 * and makes x (count rows) from them on the device. */
ug_status ug_device_batch_fill(ug_device_batch *b, const ug_loader_config *c, const ug_tensor *table,
                               int64_t epoch, const int64_t *ids, int64_t count, const void *bytes, ug_tensor *x);

#endif
