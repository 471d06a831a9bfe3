/* Tensors: up to 8 dimensions, row-major, on one device. A view (slice along
 * the first axis, reshape) shares its parent's storage, which lives until
 * the last tensor using it is freed. */
#ifndef UNIGRAD_TENSOR_H
#define UNIGRAD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/device.h"
#include "unigrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UG_MAX_DIMS 8

typedef struct ug_tensor ug_tensor;

/* Uninitialised storage on the device. ndim 0 is a scalar; dimensions may be 0. */
UG_API ug_status ug_tensor_create(ug_device *device, ug_dtype dtype, int ndim,
                           const int64_t *shape, ug_tensor **out);
/* Create and upload in one call; data holds numel elements of dtype. */
UG_API ug_status ug_tensor_from_host(ug_device *device, ug_dtype dtype, int ndim,
                              const int64_t *shape, const void *data,
                              ug_tensor **out);
/* Frees the handle; storage goes back to the pool when no view uses it.
 * NULL is ignored. */
UG_API void ug_tensor_free(ug_tensor *tensor);

UG_API ug_device *ug_tensor_device(const ug_tensor *tensor);
UG_API ug_dtype ug_tensor_dtype(const ug_tensor *tensor);
UG_API int ug_tensor_ndim(const ug_tensor *tensor);
/* Size of dimension axis (negative counts from the end); -1 if out of range. */
UG_API int64_t ug_tensor_dim(const ug_tensor *tensor, int axis);
/* Copies ndim sizes into shape. */
UG_API void ug_tensor_shape(const ug_tensor *tensor, int64_t *shape);
UG_API int64_t ug_tensor_numel(const ug_tensor *tensor);
UG_API size_t ug_tensor_nbytes(const ug_tensor *tensor);
/* Writes "[64,784]" into buf. */
UG_API const char *ug_tensor_shape_string(const ug_tensor *tensor, char *buf, size_t len);

/* Host to device and back; bytes must equal ug_tensor_nbytes. The blocking
 * forms return when the copy is complete. The asynchronous forms may return
 * before: the host buffer must stay untouched until ug_device_synchronize. */
UG_API ug_status ug_tensor_upload(ug_tensor *tensor, const void *data, size_t bytes);
UG_API ug_status ug_tensor_download(const ug_tensor *tensor, void *data, size_t bytes);
UG_API ug_status ug_tensor_upload_async(ug_tensor *tensor, const void *data, size_t bytes);
UG_API ug_status ug_tensor_download_async(const ug_tensor *tensor, void *data, size_t bytes);

/* A new tensor on device holding a copy of src (any two devices, any backends). */
UG_API ug_status ug_tensor_to_device(const ug_tensor *src, ug_device *device, ug_tensor **out);
/* Copies src into dst: same dtype and element count, any devices. */
UG_API ug_status ug_tensor_copy(ug_tensor *dst, const ug_tensor *src);

/* Rows [start, start+count) of the first axis, sharing storage. */
UG_API ug_status ug_tensor_slice(const ug_tensor *tensor, int64_t start, int64_t count,
                          ug_tensor **out);
/* Same storage, new shape with the same element count; one size may be -1. */
UG_API ug_status ug_tensor_reshape(const ug_tensor *tensor, int ndim, const int64_t *shape,
                            ug_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
