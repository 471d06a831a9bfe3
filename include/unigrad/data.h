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

/* Samples on the host, each flattened to features = prod(shape[1:])
 * values, with a target per sample: an integer class label, or a row of
 * target_width floats (regression). Features are stored as given, u8 bytes
 * or f32, and become f32 (or the loader's x_dtype) as batches are
 * assembled: value = scale * stored + shift, the affine map that
 * ug_dataset_transform composes (1 and 0 until then). So 8-bit images take
 * their size in bytes on the host, and normalising them costs nothing up
 * front. */
typedef struct ug_dataset ug_dataset;

/* images [n, ...] (u8, kept as bytes; i8, i16 or i32, held as f32; or f32)
 * and labels [n] (integers). Values are scale * stored + shift (e.g. 1/255
 * and 0 maps bytes to [0, 1]). The counts must agree. */
UG_API ug_status ug_dataset_from_idx(const char *images_path, const char *labels_path, float scale,
                              float shift, ug_dataset **out);

/* CIFAR-10's binary version: dir is the folder cifar-10-binary.tar.gz
 * unpacks to (cifar-10-batches-bin); train reads data_batch_1.bin to
 * data_batch_5.bin (50000 images), else test_batch.bin (10000). Samples
 * [3, 32, 32] (red, green, blue planes) kept as bytes, values scale *
 * byte + shift; labels 0 to 9 (10 classes). */
UG_API ug_status ug_dataset_from_cifar10(const char *dir, bool train, float scale, float shift, ug_dataset **out);

/* The caller's arrays, copied. Exactly one of labels and targets is given. */
typedef struct ug_dataset_arrays {
    int64_t count, features;
    ug_dtype x_dtype;          /* UG_F32 (default, 0) or UG_U8 (kept as bytes) */
    const void *x;             /* count * features values, row-major */
    const int32_t *labels;     /* class labels [count], each >= 0; or NULL */
    const float *targets;      /* float targets [count, target_width]; or NULL */
    int64_t target_width;      /* with targets: at least 1 */
} ug_dataset_arrays;
UG_API ug_status ug_dataset_create(const ug_dataset_arrays *arrays, ug_dataset **out);
/* Shorthand: f32 features x [count, features] and i32 labels [count]. */
UG_API ug_status ug_dataset_from_arrays(int64_t count, int64_t features, const float *x,
                                 const int32_t *labels, ug_dataset **out);

/* Fills samples ids[0..count) of a batch: x [count, features] f32 values
 * and y, labels i32 [count] or targets f32 [count, target_width]. It runs
 * on the loader's worker threads, concurrently when the loader has more
 * than one: it must be thread-safe then. Returns 0, or a nonzero code that
 * fails the batch (ug_loader_next reports it with the samples). */
typedef int (*ug_dataset_fill_fn)(void *user, const int64_t *ids, int64_t count, float *x, void *y);
typedef struct ug_dataset_source {
    int64_t count, features;
    int64_t target_width;      /* 0: i32 class labels; n: n f32 targets */
    int32_t classes;           /* with labels: each label must be below it */
    ug_dataset_fill_fn fill;
    void *user;                /* passed to fill; must outlive the data set */
} ug_dataset_source;
/* A data set whose samples a callback produces when a batch is assembled:
 * data on disk, generated, or held by the caller. Labels outside
 * [0, classes) fail their batch. */
UG_API ug_status ug_dataset_from_callback(const ug_dataset_source *source, ug_dataset **out);

/* The samples ids[0..count) of dataset (in that order; repeats allowed),
 * sharing its storage and starting from its transform. */
UG_API ug_status ug_dataset_subset(const ug_dataset *dataset, const int64_t *ids, int64_t count,
                                   ug_dataset **out);
/* A seeded random split: *second holds round(fraction * count) samples,
 * *first the rest, both in the data set's order (a validation split:
 * fraction 0.1 keeps 10% out of training). Both must be non-empty. The same
 * seed gives the same split on every platform. */
UG_API ug_status ug_dataset_split(const ug_dataset *dataset, double fraction, uint64_t seed,
                                  ug_dataset **first, ug_dataset **second);

UG_API void ug_dataset_free(ug_dataset *dataset);
UG_API int64_t ug_dataset_count(const ug_dataset *dataset);
UG_API int64_t ug_dataset_features(const ug_dataset *dataset);
/* 0 for class labels, else the float targets per sample. */
UG_API int64_t ug_dataset_target_width(const ug_dataset *dataset);
/* Number of classes: the largest label plus one (the source's classes for
 * a callback data set; 0 with float targets). */
UG_API int32_t ug_dataset_classes(const ug_dataset *dataset);
/* Host bytes the data set holds (its share of storage it owns). */
UG_API uint64_t ug_dataset_host_bytes(const ug_dataset *dataset);
/* UG_ERR_FORMAT naming the first sample whose label is not below classes
 * (the class count a model was built for). */
UG_API ug_status ug_dataset_require_classes(const ug_dataset *dataset, int32_t classes);
/* Mean and standard deviation over every feature value (in double). */
UG_API ug_status ug_dataset_stats(const ug_dataset *dataset, double *mean, double *stddev);
/* value = scale * value + shift for every feature value, applied as
 * batches are assembled: e.g. standardising a test set with the training
 * set's statistics. Transform a data set before creating a loader on it. */
UG_API ug_status ug_dataset_transform(ug_dataset *dataset, float scale, float shift);

/* Image augmentation on the device (ug_loader_config.augment), per sample
 * as torchvision's RandomCrop(size, padding=crop_padding) then
 * RandomHorizontalFlip(p=flip): the features are images [channels,
 * height, width]; each is padded with crop_padding zero bytes on every
 * side and cut back to its size at a random place, then flipped left to
 * right with probability flip. Drawn from (seed, epoch, sample index), so
 * every device, shard and resumed run gives the same. Zero: none. */
typedef struct ug_image_augment {
    int64_t channels, height, width;
    int crop_padding;
    float flip;
} ug_image_augment;

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
    /* Sharding, for data-parallel training (DistributedSampler's contract):
     * this loader takes its part of every global batch of batch_size from
     * the one order (seed, epoch) every shard shares, so the global
     * sequence of batches does not depend on how many shards there are.
     * Shard i of n takes the rows [floor(B W_i / W), floor(B W_i+1 / W))
     * of a batch of B rows, W_i the sum of the weights before it (NULL
     * shard_weights: equal). shard_count 0 or 1: the whole batches. A
     * shard's part of a small last batch may be empty: count 0, x and y
     * NULL. At most 64 shards; weights positive and finite. */
    int shard_count, shard_index;
    const double *shard_weights;
    /* Byte data sets' batches converted on the device: uploaded as bytes, a
     * quarter of f32's, and made x_dtype there through the data set's
     * value of each byte (its scale and shift), bit for bit what the host
     * gives; augment (which needs it) applies there too. False: on the
     * host. */
    bool device_convert;
    ug_image_augment augment;
} ug_loader_config;

/* Defaults: batch 64, shuffle, seed 0, keep last, 1 thread, 2 ahead. */
UG_API ug_loader_config ug_loader_default_config(void);

typedef struct ug_loader ug_loader;

/* A batch on the device. The tensors belong to the loader and stay valid
 * until the next ug_loader_next (or ug_loader_free). */
typedef struct ug_batch {
    ug_tensor *x;            /* [count, features], of the config's x_dtype */
    ug_tensor *y;            /* labels i32 [count], or targets f32 [count, width] */
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
/* Starts epoch at its batch number batch (0..batches): resuming an epoch
 * part-way, with the same order as if it had run from its start. Epoch -1
 * with batch 0 puts the loader back before its first epoch. */
UG_API ug_status ug_loader_seek(ug_loader *loader, int64_t epoch, int64_t batch);
/* New shard weights for a sharded loader (its config's shard_count > 1),
 * from the next batch ug_loader_next hands out: every shard must change
 * at the same batch, so that the global batches are still split whole
 * (the trainer does, as it measures replicas' speeds). Batches assembled
 * ahead are assembled again. Refused (nothing changes) for an unsharded
 * loader or weights that are not positive and finite. */
UG_API ug_status ug_loader_set_shard_weights(ug_loader *loader, const double *weights);
/* Where the loader stands: the epoch last started and the batches of it
 * handed out so far (the batch ug_loader_next gives next); -1 and 0 before
 * any epoch. With the seed, all a checkpoint needs to continue. */
UG_API void ug_loader_position(const ug_loader *loader, int64_t *epoch, int64_t *next_batch);
UG_API ug_loader_config ug_loader_get_config(const ug_loader *loader);
/* Next batch, or *done = true at the end of the epoch. */
UG_API ug_status ug_loader_next(ug_loader *loader, ug_batch *batch, bool *done);

#ifdef __cplusplus
}
#endif
#endif
