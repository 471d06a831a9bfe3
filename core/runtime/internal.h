/* Internal structures shared by the core's files. */
#ifndef UG_CORE_INTERNAL_H
#define UG_CORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "base/error.h"
#include "unigrad/memory.h"
#include "unigrad/tensor.h"

typedef struct ug_pool ug_pool;

/* A stream handle (stream.c): the default one lives in its device; side
 * streams stay in the device's list after ug_stream_free, marked freed, so a
 * stale handle is refused rather than read after free. */
struct ug_stream {
    ug_device *device;
    ug_bstream *bstream;   /* NULL: the default stream */
    bool freed;
    struct ug_stream *next;
};

struct ug_device {
    const ug_backend *backend;
    ug_bdev *bdev;
    int backend_index;     /* index of the device within its backend */
    int refcount;          /* opens minus closes; guarded by the registry lock */
    uint64_t serial;       /* unique per open: tells a reopened device apart */
    ug_device_info info;
    ug_pool *pool;
    struct ug_stream default_stream;
    /* Side streams (freed ones too), guarded by stream_lock; live_streams
     * counts those not freed (read without the lock by the pool). */
    pthread_mutex_t stream_lock;
    struct ug_stream *side_streams;
    int live_streams;
};

/* One pool block: a backend buffer, reference counted by the tensors
 * (views) that use it. */
typedef struct ug_storage {
    ug_device *device;
    ug_mem mem;
    size_t bytes;          /* bytes asked for */
    size_t block_bytes;    /* bytes of the pool block (size class) */
    int refcount;          /* atomic */
    /* Non-NULL: host memory that someone else made (ug_storage_over_host),
     * given back through this when the last tensor lets go of it, never
     * to the pool. */
    void (*give_back)(void *address);
} ug_storage;

struct ug_tensor {
    ug_storage *storage;
    ug_dtype dtype;
    int ndim;
    int64_t shape[UG_MAX_DIMS];
    int64_t offset;        /* elements from the start of storage */
};

/* Registry (device.c) */
const ug_backend_host *ug_host_api(void);
/* Storage keeps its device open, so a program may close a device before
 * freeing its tensors; ug_device_close drops the reference. */
void ug_device_retain(ug_device *device);

/* Streams (stream.c) */
/* Opens and closes the device's stream state (ug_device_open/close). */
void ug_streams_init(ug_device *device);
void ug_streams_destroy(ug_device *device);
/* The calling thread's current side stream on device; NULL: the default. */
ug_bstream *ug_current_bstream(ug_device *device);
/* A fence: an event on every stream of a device (default and live side
 * streams), passed when all the work queued before it has finished. The
 * pool reuses memory freed while side streams live only past a fence. */
typedef struct ug_fence ug_fence;
ug_status ug_fence_create(ug_device *device, ug_fence **out);
/* Whether it has passed, without waiting; a runtime error counts as not. */
bool ug_fence_passed(ug_device *device, ug_fence *fence);
/* Waits for it and frees it. */
ug_status ug_fence_wait_free(ug_device *device, ug_fence *fence);

/* Pool (pool.c) */
ug_status ug_pool_create(ug_device *device, ug_pool **out);
/* Returns the cache to the runtime and frees the pool. */
void ug_pool_destroy(ug_device *device);
/* Takes a block of at least bytes; purpose names the request in errors. */
ug_status ug_pool_alloc(ug_device *device, size_t bytes, const char *purpose,
                        ug_storage **out);
/* "1048576 bytes (1.0 MiB)" into buf. */
void ug_format_bytes(uint64_t bytes, char *buf, size_t len);
/* The bytes of the block the pool gives for a request of bytes. */
size_t ug_pool_block_bytes(size_t bytes);
/* A storage over bytes of host memory at address, which the device's
 * kernels use as its own (the cpu backend's memory is the host's; any
 * other refuses with UG_ERR_UNSUPPORTED): a communicator's shared memory,
 * which other processes read and write. give_back(address) runs when the
 * last tensor over it is freed. Not counted in the pool's figures. */
ug_status ug_storage_over_host(ug_device *device, void *address, size_t bytes, void (*give_back)(void *address),
                               ug_storage **out);
void ug_storage_retain(ug_storage *storage);
void ug_storage_release(ug_storage *storage);

/* Tensors (tensor.c) */
int64_t ug_shape_numel(int ndim, const int64_t *shape);
/* Element count of a shape, or UG_ERR_SHAPE when ndim is out of range, a
 * size is negative, or the count (times elem_bytes) passes INT64_MAX. */
ug_status ug_checked_numel(int ndim, const int64_t *shape, size_t elem_bytes, const char *op,
                           int64_t *numel);
/* "[2,3]" into buf. */
const char *ug_format_shape(int ndim, const int64_t *shape, char *buf, size_t len);
/* Checks a reshape of from_shape to shape (one size may be -1) and writes
 * the sizes with -1 resolved. */
ug_status ug_resolve_reshape(int from_ndim, const int64_t *from_shape, int ndim, const int64_t *shape,
                             const char *op, int64_t *resolved);
/* Validates and creates a tensor with uninitialised storage. */
ug_status ug_tensor_new(ug_device *device, ug_dtype dtype, int ndim, const int64_t *shape,
                        const char *op, ug_tensor **out);
ug_kview ug_kview_of(const ug_tensor *tensor);
/* ug_tensor_copy, saying in *direct (when not NULL) whether the bytes went
 * device to device (one device, or peers of one backend) rather than
 * through host memory. */
ug_status ug_tensor_copy_direct(ug_tensor *dst, const ug_tensor *src, bool *direct);
/* A tensor handle over existing storage (retained) at an element offset. */
ug_status ug_tensor_over_storage(ug_storage *storage, ug_dtype dtype, int ndim,
                                 const int64_t *shape, int64_t offset, ug_tensor **out);
/* f32, f16 or bf16: the dtypes arithmetic ops take (computing in f32). */
static inline bool ug_dtype_is_float(ug_dtype d) { return d == UG_F32 || d == UG_F16 || d == UG_BF16; }

/* Common argument checks; op names the caller in the message. */
ug_status ug_check_tensor(const ug_tensor *tensor, const char *op, const char *arg);
ug_status ug_check_same_device(const ug_tensor *a, const ug_tensor *b, const char *op);
ug_status ug_check_float(const ug_tensor *tensor, const char *op, const char *arg);

static inline ug_device *ug_dev(const ug_tensor *tensor) { return tensor->storage->device; }

#endif
