/* Data sets and the prefetching loader. */
#ifndef UNIGRAD_DATA_H
#define UNIGRAD_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An array read from an IDX file (plain or gzip-compressed): the format of
 * MNIST and Fashion-MNIST. */
typedef struct ug_idx {
    ug_dtype dtype;          /* u8 or i32 from the file; f32 for IDX float (0x0D) */
    int ndim;
    int64_t shape[UG_MAX_DIMS];
    void *data;              /* numel elements, host byte order */
} ug_idx;

/* Reads and validates everything (magic, element type, dimension count,
 * sizes against the file length, overflow). A bad file gives UG_ERR_IO or
 * UG_ERR_FORMAT with the path, the byte offset and what was expected. */
UG_API ug_status ug_idx_read(const char *path, ug_idx **out);
/* The largest array (in bytes, as held in memory) ug_idx_read accepts;
 * larger ones are refused from the header, before anything is allocated.
 * Default 512 MiB, or UG_IDX_MAX_BYTES ("4G") when set; 0 restores that.
 * Process-wide. */
UG_API void ug_idx_set_max_bytes(uint64_t bytes);
UG_API uint64_t ug_idx_max_bytes(void);
UG_API void ug_idx_free(ug_idx *idx);

/* Samples and integer labels on the host. Each sample is flattened to
 * features = prod(shape[1:]) values, stored as f32. */
typedef struct ug_dataset ug_dataset;

/* images [n, ...] (u8 or f32) and labels [n] (u8 or i32). Images are stored
 * as scale * value + shift (e.g. 1/255 and 0 maps bytes to [0, 1]). The
 * counts must agree. */
UG_API ug_status ug_dataset_from_idx(const char *images_path, const char *labels_path, float scale,
                              float shift, ug_dataset **out);
/* From host arrays (copied): features f32 values per sample, labels i32. */
UG_API ug_status ug_dataset_from_arrays(int64_t count, int64_t features, const float *x,
                                 const int32_t *labels, ug_dataset **out);
UG_API void ug_dataset_free(ug_dataset *dataset);
UG_API int64_t ug_dataset_count(const ug_dataset *dataset);
UG_API int64_t ug_dataset_features(const ug_dataset *dataset);
/* Number of classes: the largest label plus one. */
UG_API int32_t ug_dataset_classes(const ug_dataset *dataset);
/* UG_ERR_FORMAT naming the first sample whose label is not below classes
 * (the class count a model was built for). */
UG_API ug_status ug_dataset_require_classes(const ug_dataset *dataset, int32_t classes);
/* Mean and standard deviation over every stored value (in double). */
UG_API ug_status ug_dataset_stats(const ug_dataset *dataset, double *mean, double *stddev);
/* value = scale * value + shift for every stored value: e.g. standardising
 * a test set with the training set's statistics. Loaders read the data set
 * from their threads: transform it before creating any loader on it. */
UG_API ug_status ug_dataset_transform(ug_dataset *dataset, float scale, float shift);

typedef struct ug_loader_config {
    int64_t batch_size;
    bool shuffle;            /* a new permutation each epoch from (seed, epoch) */
    uint64_t seed;
    bool drop_last;          /* drop the final partial batch */
    int threads;             /* background workers; 0 picks 1 */
    int prefetch;            /* batches ready ahead of the consumer; 0 picks 2 */
    /* The batches' feature dtype: f32 (the default, 0), f16 or bf16, rounded
     * on the host as batches are assembled: a mixed-precision graph's input
     * then needs no cast, and the upload is half the bytes. */
    ug_dtype x_dtype;
} ug_loader_config;

/* Defaults: batch 64, shuffle, seed 0, keep last, 1 thread, 2 ahead. */
UG_API ug_loader_config ug_loader_default_config(void);

typedef struct ug_loader ug_loader;

/* A batch on the device. The tensors belong to the loader and stay valid
 * until the next ug_loader_next (or ug_loader_free). */
typedef struct ug_batch {
    ug_tensor *x;            /* [count, features], of the config's x_dtype */
    ug_tensor *y;            /* i32 [count] */
    int64_t count;           /* samples in this batch */
    int64_t index;           /* batch number within the epoch */
    const int64_t *sample_ids; /* count dataset indices, in batch order */
} ug_batch;

/* Background threads assemble batches into pinned host buffers and upload
 * them while the caller computes. The data set must outlive the loader. */
/* The loader keeps the data set (read in place) and the device alive, so
 * the program may free them first. A program may also return from main with
 * a loader mid-epoch: its workers are stopped at exit before the devices go. */
UG_API ug_status ug_loader_create(const ug_dataset *dataset, ug_device *device,
                           const ug_loader_config *config, ug_loader **out);
UG_API void ug_loader_free(ug_loader *loader);
/* The device bytes a loader of dataset with config would take (its
 * prefetch + 1 batches), without creating it: for planning a batch size. */
UG_API ug_status ug_loader_device_bytes(const ug_dataset *dataset, const ug_loader_config *config,
                                        uint64_t *bytes);
/* Batches per epoch. */
UG_API int64_t ug_loader_batches(const ug_loader *loader);
/* Starts epoch number epoch (its order is fixed by seed and epoch). */
UG_API ug_status ug_loader_start_epoch(ug_loader *loader, int64_t epoch);
/* Next batch, or *done = true at the end of the epoch. */
UG_API ug_status ug_loader_next(ug_loader *loader, ug_batch *batch, bool *done);

#ifdef __cplusplus
}
#endif
#endif
