/* Streams and events: ordering, overlap and device-side timing.
 *
 * A stream is an ordered queue of a device's work. Every device has a
 * default stream, where everything runs unless a thread picks another;
 * side streams made with ug_stream_create run independently of the default
 * stream and of each other, so a transfer (or, later, communication) can
 * overlap compute. Events order streams and time work, as
 * torch.cuda.Stream and torch.cuda.Event(enable_timing=True) do:
 *
 *     ug_stream *side;  ug_event *done;
 *     ug_stream_create(dev, &side);
 *     ug_event_create(dev, false, &done);
 *     ug_stream_set_current(dev, side);     // this thread's work on dev -> side
 *     ug_tensor_upload_async(x, host, bytes);
 *     ug_event_record(done, side);
 *     ug_stream_set_current(dev, NULL);     // back to the default stream
 *     ug_stream_wait_event(ug_device_default_stream(dev), done);
 *     ug_matmul(x, w, false, false, &y);   // runs after the upload
 *
 * On a GPU the streams are the runtime's (CUDA/HIP streams, OpenCL
 * queues) and the clock is the device's. On the CPU a side stream is an
 * ordered task queue run by a thread of the backend, the default stream runs
 * on the calling thread, and the clock is the host's.
 *
 * A tensor freed while another stream may still use it is safe: its memory
 * is reused only after the work queued on every stream of the device when
 * it was freed has finished. */
#ifndef UNIGRAD_STREAM_H
#define UNIGRAD_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/device.h"
#include "unigrad/export.h"
#include "unigrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_stream ug_stream;
typedef struct ug_event ug_event;

/* The device's default stream, owned by the device (never freed). */
UG_API ug_stream *ug_device_default_stream(ug_device *device);
/* A new side stream of device. */
UG_API ug_status ug_stream_create(ug_device *device, ug_stream **out);
/* Finishes the stream's work and frees it; a thread whose current stream it
 * was goes back to the default stream. A freed stream's handle is refused
 * with a status until its device closes. NULL and the default stream are
 * ignored. */
UG_API void ug_stream_free(ug_stream *stream);
/* Waits on the host until the stream's queued work has finished. */
UG_API ug_status ug_stream_synchronize(ug_stream *stream);
UG_API ug_device *ug_stream_device(const ug_stream *stream);

/* The stream this thread's eager ops, transfers and graph runs on device
 * queue to from now on (NULL: the default stream). Other threads keep their
 * own choice. */
UG_API ug_status ug_stream_set_current(ug_device *device, ug_stream *stream);
/* This thread's current stream on device (the default stream unless set). */
UG_API ug_stream *ug_stream_current(ug_device *device);

/* An event of device; timing events (enable_timing) can measure the time
 * between two of them, plain ones cost less. */
UG_API ug_status ug_event_create(ug_device *device, bool timing, ug_event **out);
/* NULL is ignored. The event may still be pending. */
UG_API void ug_event_free(ug_event *event);
/* Marks the point after the work queued on stream so far; the event
 * completes when that work has. Recording again moves the mark. */
UG_API ug_status ug_event_record(ug_event *event, ug_stream *stream);
/* Work queued on stream from now on starts only after event completes
 * (the host does not wait). */
UG_API ug_status ug_stream_wait_event(ug_stream *stream, ug_event *event);
/* Whether the event has completed, without waiting. */
UG_API ug_status ug_event_query(ug_event *event, bool *done);
/* Waits on the host until the event completes. */
UG_API ug_status ug_event_synchronize(ug_event *event);
/* Nanoseconds of the device's clock from start to end, both timing events,
 * recorded and completed (wait for end first). */
UG_API ug_status ug_event_elapsed_ns(ug_event *start, ug_event *end, int64_t *nanoseconds);

#ifdef __cplusplus
}
#endif
#endif
