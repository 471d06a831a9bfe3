/* The one path from the core into a backend.
 *
 * Every call of a backend table entry (device discovery and opening,
 * memory, transfers, synchronisation, kernels, plans) is made here and
 * nowhere else (tests/structure/check_structure.cmake fails the suite
 * otherwise). This is where a missing entry becomes UG_ERR_UNSUPPORTED,
 * where waits fail under fault injection, and where a failure is prefixed
 * with the device. */
#ifndef UG_CORE_DISPATCH_H
#define UG_CORE_DISPATCH_H

#include "core/runtime/internal.h"

/* Discovery and lifetime: backend is a registry entry's table. */
int ug_call_device_count(const ug_backend *backend, char *reason, size_t reason_len);
ug_status ug_call_device_info(const ug_backend *backend, int index, ug_device_info *info);
ug_status ug_call_device_open(const ug_backend *backend, int index, ug_bdev **out);
void ug_call_device_close(const ug_backend *backend, ug_bdev *bdev);
void ug_call_shutdown(const ug_backend *backend);

/* Memory (the pool words alloc's failures and injects UG_FAULT_DEVICE_ALLOC
 * per request, cached or not). The host entries return NULL or false where
 * the backend has no page-locked memory. */
ug_status ug_call_alloc(ug_device *device, size_t bytes, ug_mem *out);
void ug_call_release(ug_device *device, ug_mem mem);
void *ug_call_host_alloc(ug_device *device, size_t bytes);
bool ug_call_host_free(ug_device *device, void *ptr);

/* Transfers and waits; a blocking one (and every synchronisation) fails
 * under UG_FAULT_HOST_WAIT. what names the caller in messages. Transfers
 * and kernels go to the calling thread's current stream on the device. */
ug_status ug_call_write(ug_device *device, ug_mem dst, size_t dst_offset, const void *src,
                        size_t bytes, bool blocking, const char *what);
ug_status ug_call_read(ug_device *device, void *dst, ug_mem src, size_t src_offset, size_t bytes,
                       bool blocking, const char *what);
ug_status ug_call_copy(ug_device *device, ug_mem dst, size_t dst_offset, ug_mem src,
                       size_t src_offset, size_t bytes, const char *what);
/* src's bytes on src_device (of device's backend) to dst on device,
 * device to device, once src_device's current stream has finished what it
 * holds; UG_ERR_UNSUPPORTED where the backend has no peer copies or a
 * recording is under way (the caller goes through the host). */
ug_status ug_call_copy_peer(ug_device *device, ug_mem dst, size_t dst_offset, ug_device *src_device, ug_mem src,
                            size_t src_offset, size_t bytes, const char *what);
ug_status ug_call_synchronize(ug_device *device, const char *what);
/* The backend's autotune entry (the caller has checked it has one). */
ug_status ug_call_autotune(ug_device *device, char *report, size_t report_len);

/* Streams and events (stream.c keeps the handles); stream NULL is the
 * default stream. */
ug_status ug_call_stream_create(ug_device *device, ug_bstream **out, const char *what);
/* Capture and replay (backend.h) on every device: a backend without them
 * has the calling thread's kernels and copies recorded on the host
 * (recorder.c), and replayed as recorded. */
/* Whether the backend captures its streams itself (a capture then takes
 * in every thread's work on the stream). */
bool ug_backend_captures(const ug_device *device);
ug_status ug_call_capture_begin(ug_device *device, ug_bstream *stream, const char *what);
ug_status ug_call_capture_end(ug_device *device, ug_bstream *stream, void **replay, const char *what);
ug_status ug_call_replay(ug_device *device, ug_bstream *stream, void *replay, const char *what);
void ug_call_replay_free(ug_device *device, void *replay);
void ug_call_stream_destroy(ug_device *device, ug_bstream *stream);
ug_status ug_call_stream_synchronize(ug_device *device, ug_bstream *stream, const char *what);
ug_status ug_call_event_create(ug_device *device, bool timing, ug_bevent **out, const char *what);
void ug_call_event_destroy(ug_device *device, ug_bevent *event);
ug_status ug_call_event_record(ug_device *device, ug_bevent *event, ug_bstream *stream,
                               const char *what);
ug_status ug_call_event_wait(ug_device *device, ug_bstream *stream, ug_bevent *event,
                             const char *what);
ug_status ug_call_event_query(ug_device *device, ug_bevent *event, bool *done, const char *what);
ug_status ug_call_event_synchronize(ug_device *device, ug_bevent *event, const char *what);
ug_status ug_call_event_elapsed(ug_device *device, ug_bevent *start, ug_bevent *end,
                                int64_t *nanoseconds, const char *what);
/* t's first element's device address (t NULL: none) and the thread's
 * current native stream, for NCCL and RCCL (backend.h's ug_native_fn). */
ug_status ug_call_native(ug_device *device, const ug_tensor *t, void **address, void **stream, const char *what);

/* recorder.c: the host recording of this thread, if it records for
 * device (ug_recording), which ug_dispatch and ug_call_copy add to and
 * the other device calls refuse (ug_record_refuse names what). */
bool ug_recording(const ug_device *device);
ug_status ug_record_begin(ug_device *device);
ug_status ug_record_end(void **replay);
void ug_record_refuse(const char *what);
ug_status ug_record_call(ug_kernel_family family, const char *op, ug_dtype dtype, const void *args,
                         size_t bytes);
ug_status ug_record_copy(ug_mem dst, size_t dst_offset, ug_mem src, size_t src_offset, size_t bytes);
ug_status ug_record_replay(ug_device *device, void *replay);
void ug_record_free(void *replay);

/* Calls the device's kernel of family with args (the family's ug_*_args).
 * op names the caller and dtype its main operand in messages. */
ug_status ug_dispatch(ug_device *device, ug_kernel_family family, const char *op, ug_dtype dtype,
                      const void *args);
/* The family's name ("gemm", "unary", ...); "transfer" for
 * UG_KERNEL_FAMILY_COUNT. */
const char *ug_kernel_family_name(ug_kernel_family family);
/* Whether the device's library runs the convolution of args (see
 * ug_conv_plan_fn); false without a library. */
ug_status ug_call_conv_plan(ug_device *device, const ug_conv_args *args, bool *runs,
                            size_t *workspace_bytes, const char *op);

#endif
