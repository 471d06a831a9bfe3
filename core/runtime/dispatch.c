/* The one path from the core into a backend (see dispatch.h). */
#include "core/runtime/dispatch.h"

#include "base/fault.h"
#include "core/profile/hooks.h"

/* Runs call with the calling thread's current side stream bound in the
 * backend (stream_bind), so every queued entry lands on it. */
#define ON_CURRENT_STREAM(device, call)                                   \
    do {                                                                  \
        ug_bstream *bound_ = ug_current_bstream(device);                  \
        if (bound_)                                                       \
            (device)->backend->stream_bind((device)->bdev, bound_);       \
        call;                                                             \
        if (bound_)                                                       \
            (device)->backend->stream_bind((device)->bdev, NULL);         \
    } while (0)

static const char *const family_names[] = {
#define UG_FAMILY_NAME_(ctx, NAME, slot, args) [UG_KERNEL_##NAME] = #slot,
    UG_KERNEL_FAMILIES(UG_FAMILY_NAME_, _) UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_NAME_, _)
#undef UG_FAMILY_NAME_
};

/* Runs call (which sets st) recorded by a running profiler as a transfer
 * of bytes_ named what_. */
#define PROFILED_TRANSFER(device, what_, bytes_, call)                                  \
    do {                                                                              \
        ug_profile_span span_;                                                        \
        bool profiled_ = ug_profiling() && ug_profile_begin(device, &span_);          \
        call;                                                                         \
        if (profiled_) {                                                              \
            ug_profile_launch launch_ = {.name = what_, .family = UG_KERNEL_FAMILY_COUNT,  \
                                         .dtype = UG_U8, .bytes = (double)(bytes_)};   \
            ug_profile_end(device, &span_, &launch_, st);                             \
        }                                                                             \
    } while (0)

/* Runs call (which sets st) recorded by a running profiler as a kernel of
 * family, named by the graph node launching it or else by op. */
#define PROFILED_KERNEL(device, family_, op_, dtype_, type_, args_, call)                \
    do {                                                                              \
        ug_profile_span span_;                                                        \
        bool profiled_ = ug_profiling() && ug_profile_begin(device, &span_);          \
        call;                                                                         \
        if (profiled_) {                                                              \
            const char *label_ = ug_profile_label();                                  \
            ug_profile_launch launch_ = {.name = label_ ? label_ : op_, .family = family_, \
                                         .args = args_, .args_size = sizeof(type_),    \
                                         .dtype = dtype_};                            \
            ug_profile_end(device, &span_, &launch_, st);                             \
        }                                                                             \
    } while (0)

int ug_call_device_count(const ug_backend *backend, char *reason, size_t reason_len)
{
    return backend->device_count(reason, reason_len);
}

ug_status ug_call_device_info(const ug_backend *backend, int index, ug_device_info *info)
{
    return backend->device_info(index, info);
}

ug_status ug_call_device_open(const ug_backend *backend, int index, ug_bdev **out)
{
    return backend->device_open(index, out);
}

void ug_call_device_close(const ug_backend *backend, ug_bdev *bdev) { backend->device_close(bdev); }

void ug_call_shutdown(const ug_backend *backend)
{
    if (backend->shutdown)
        backend->shutdown();
}

ug_status ug_call_alloc(ug_device *device, size_t bytes, ug_mem *out)
{
    *out = NULL;
    return device->backend->alloc(device->bdev, bytes, out);
}

void ug_call_release(ug_device *device, ug_mem mem) { device->backend->release(device->bdev, mem); }

void *ug_call_host_alloc(ug_device *device, size_t bytes)
{
    return device->backend->host_alloc ? device->backend->host_alloc(device->bdev, bytes) : NULL;
}

bool ug_call_host_free(ug_device *device, void *ptr)
{
    if (!device->backend->host_free)
        return false;
    device->backend->host_free(device->bdev, ptr);
    return true;
}

static ug_status injected_wait_failure(void)
{
    return ug_set_error(UG_ERR_BACKEND, "the wait failed (injected fault)");
}

static ug_status on_device(ug_status st, const char *what, const char *preposition,
                           const ug_device *device)
{
    return st == UG_OK ? st : ug_prefix_error(st, "%s %s %s", what, preposition, device->info.id);
}

/* What a host recording cannot replay refuses it (recorder.c) and does
 * nothing now, as work on a captured stream does not run. */
#define REFUSED_WHILE_RECORDING(device, what_)  \
    do {                                        \
        if (ug_recording(device)) {             \
            ug_record_refuse(what_);            \
            return UG_OK;                       \
        }                                       \
    } while (0)

ug_status ug_call_write(ug_device *device, ug_mem dst, size_t dst_offset, const void *src,
                        size_t bytes, bool blocking, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "an upload from host memory");
    ug_status st = UG_OK;
    if (blocking && ug_fault_hit(UG_FAULT_HOST_WAIT))
        st = injected_wait_failure();
    else
        PROFILED_TRANSFER(device, "upload", bytes,
                          ON_CURRENT_STREAM(device, st = device->backend->write(device->bdev, dst, dst_offset,
                                                                                src, bytes, blocking)));
    return on_device(st, what, "to", device);
}

ug_status ug_call_read(ug_device *device, void *dst, ug_mem src, size_t src_offset, size_t bytes,
                       bool blocking, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "a download to host memory");
    ug_status st = UG_OK;
    if (blocking && ug_fault_hit(UG_FAULT_HOST_WAIT))
        st = injected_wait_failure();
    else
        PROFILED_TRANSFER(device, "download", bytes,
                          ON_CURRENT_STREAM(device, st = device->backend->read(device->bdev, dst, src,
                                                                               src_offset, bytes, blocking)));
    return on_device(st, what, "from", device);
}

ug_status ug_call_copy(ug_device *device, ug_mem dst, size_t dst_offset, ug_mem src,
                       size_t src_offset, size_t bytes, const char *what)
{
    if (ug_recording(device))
        return ug_record_copy(dst, dst_offset, src, src_offset, bytes);
    ug_status st = UG_OK;
    PROFILED_TRANSFER(device, "copy", 2 * bytes,
                      ON_CURRENT_STREAM(device, st = device->backend->copy(device->bdev, dst, dst_offset,
                                                                           src, src_offset, bytes)));
    return on_device(st, what, "on", device);
}

ug_status ug_call_copy_peer(ug_device *device, ug_mem dst, size_t dst_offset, ug_device *src_device, ug_mem src,
                            size_t src_offset, size_t bytes, const char *what)
{
    if (device->backend != src_device->backend || !device->backend->copy_peer || ug_recording(device) ||
        ug_recording(src_device))
        return UG_ERR_UNSUPPORTED; /* (no message: the caller takes the host's way) */
    UG_TRY(ug_call_stream_synchronize(src_device, ug_current_bstream(src_device), what));
    ug_status st = UG_OK;
    PROFILED_TRANSFER(device, "copy from another device", bytes,
                      ON_CURRENT_STREAM(device, st = device->backend->copy_peer(device->bdev, dst, dst_offset,
                                                                                src_device->bdev, src, src_offset,
                                                                                bytes)));
    return on_device(st, what, "on", device);
}

ug_status ug_call_synchronize(ug_device *device, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "a wait for the device");
    int64_t started = ug_profiling() ? ug_profile_clock() : 0;
    ug_status st = ug_fault_hit(UG_FAULT_HOST_WAIT) ? injected_wait_failure()
                                                    : device->backend->synchronize(device->bdev);
    if (started)
        ug_profile_wait(device, what, started);
    return on_device(st, what, "on", device);
}

ug_status ug_call_autotune(ug_device *device, char *report, size_t report_len)
{
    return on_device(device->backend->autotune(device->bdev, report, report_len),
                     "ug_device_autotune", "on", device);
}

/* ---- streams and events ---- */

static ug_status no_streams(const ug_device *device, const char *what)
{
    return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s backend of %s has no streams or events", what,
                        device->backend->name, device->info.id);
}

ug_status ug_call_stream_create(ug_device *device, ug_bstream **out, const char *what)
{
    *out = NULL;
    if (!device->backend->stream_create)
        return no_streams(device, what);
    return on_device(device->backend->stream_create(device->bdev, out), what, "on", device);
}

bool ug_backend_captures(const ug_device *device)
{
    const ug_backend *b = device->backend;
    return b->stream_capture_begin && b->stream_capture_end && b->stream_replay && b->replay_free;
}

ug_status ug_call_capture_begin(ug_device *device, ug_bstream *stream, const char *what)
{
    if (!ug_backend_captures(device))
        return on_device(ug_record_begin(device), what, "on", device);
    return on_device(device->backend->stream_capture_begin(device->bdev, stream), what, "on", device);
}

ug_status ug_call_capture_end(ug_device *device, ug_bstream *stream, void **replay, const char *what)
{
    *replay = NULL;
    if (!ug_backend_captures(device))
        return on_device(ug_record_end(replay), what, "on", device);
    return on_device(device->backend->stream_capture_end(device->bdev, stream, replay), what, "on", device);
}

/* A host recording replays on the thread's current stream, which the
 * caller has made stream. */
ug_status ug_call_replay(ug_device *device, ug_bstream *stream, void *replay, const char *what)
{
    if (!ug_backend_captures(device))
        return ug_record_replay(device, replay);
    return on_device(device->backend->stream_replay(device->bdev, stream, replay), what, "on", device);
}

void ug_call_replay_free(ug_device *device, void *replay)
{
    /* Queued calls of a host recording may still read its arguments (the
     * CPU's streams run them on threads of their own): they finish first,
     * as CUDA finishes a graph's launches before destroying it. */
    if (!ug_backend_captures(device)) {
        if (replay && device->backend->synchronize(device->bdev) != UG_OK)
            ug_clear_error(); /* the work's failure was reported by its step */
        ug_record_free(replay);
    } else
        device->backend->replay_free(device->bdev, replay);
}

void ug_call_stream_destroy(ug_device *device, ug_bstream *stream)
{
    device->backend->stream_destroy(device->bdev, stream);
}

ug_status ug_call_stream_synchronize(ug_device *device, ug_bstream *stream, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "a wait for a stream");
    int64_t started = ug_profiling() ? ug_profile_clock() : 0;
    ug_status st = ug_fault_hit(UG_FAULT_HOST_WAIT)
                       ? injected_wait_failure()
                       : device->backend->stream_synchronize(device->bdev, stream);
    if (started)
        ug_profile_wait(device, what, started);
    return on_device(st, what, "on", device);
}

ug_status ug_call_event_create(ug_device *device, bool timing, ug_bevent **out, const char *what)
{
    *out = NULL;
    if (!device->backend->event_create)
        return no_streams(device, what);
    return on_device(device->backend->event_create(device->bdev, timing, out), what, "on", device);
}

void ug_call_event_destroy(ug_device *device, ug_bevent *event)
{
    device->backend->event_destroy(device->bdev, event);
}

ug_status ug_call_event_record(ug_device *device, ug_bevent *event, ug_bstream *stream,
                               const char *what)
{
    REFUSED_WHILE_RECORDING(device, "an event");
    return on_device(device->backend->event_record(device->bdev, event, stream), what, "on", device);
}

ug_status ug_call_event_wait(ug_device *device, ug_bstream *stream, ug_bevent *event,
                             const char *what)
{
    REFUSED_WHILE_RECORDING(device, "a wait for an event");
    return on_device(device->backend->event_wait(device->bdev, stream, event), what, "on", device);
}

ug_status ug_call_event_query(ug_device *device, ug_bevent *event, bool *done, const char *what)
{
    return on_device(device->backend->event_query(device->bdev, event, done), what, "on", device);
}

ug_status ug_call_event_synchronize(ug_device *device, ug_bevent *event, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "a wait for an event");
    int64_t started = ug_profiling() ? ug_profile_clock() : 0;
    ug_status st = ug_fault_hit(UG_FAULT_HOST_WAIT) ? injected_wait_failure()
                                                    : device->backend->event_synchronize(device->bdev, event);
    if (started)
        ug_profile_wait(device, what, started);
    return on_device(st, what, "on", device);
}

ug_status ug_call_event_elapsed(ug_device *device, ug_bevent *start, ug_bevent *end,
                                int64_t *nanoseconds, const char *what)
{
    return on_device(device->backend->event_elapsed(device->bdev, start, end, nanoseconds), what,
                     "on", device);
}

/* The thread's current stream is bound while the backend reads it. */
ug_status ug_call_native(ug_device *device, const ug_tensor *t, void **address, void **stream, const char *what)
{
    REFUSED_WHILE_RECORDING(device, "work of another library (NCCL, MPI)");
    ug_status st = UG_OK;
    void *base = NULL;
    ON_CURRENT_STREAM(device, st = device->backend->native(device->bdev, t ? t->storage->mem : NULL, &base, stream));
    if (st == UG_OK && t)
        *address = (char *)base + (size_t)t->offset * ug_dtype_size(t->dtype);
    return on_device(st, what, "on", device);
}

/* ---- kernels ---- */


ug_status ug_dispatch(ug_device *d, ug_kernel_family family, const char *op, ug_dtype dtype,
                      const void *args)
{
    const ug_backend *b = d->backend;
    ug_status st = UG_ERR_UNSUPPORTED;
    bool present = false;
    switch (family) {
#define UG_FAMILY_CALL_(ctx, NAME, slot, type)          \
    case UG_KERNEL_##NAME:                              \
        present = b->slot != NULL;                      \
        if (present && ug_recording(d))                 \
            return ug_record_call(family, op, dtype, args, sizeof(type)); \
        if (present)                                    \
            PROFILED_KERNEL(d, family, op, dtype, type, args, \
                            ON_CURRENT_STREAM(d, st = b->slot(d->bdev, (const type *)args))); \
        break;
        UG_KERNEL_FAMILIES(UG_FAMILY_CALL_, _)
        UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_CALL_, _)
#undef UG_FAMILY_CALL_
    case UG_KERNEL_FAMILY_COUNT:
        break;
    }
    if (!present)
        return ug_set_error(UG_ERR_UNSUPPORTED,
                            "%s (%s) on %s: the %s backend has no %s kernel; run it on another "
                            "device (ug-devices lists them)",
                            op, ug_dtype_name(dtype), d->info.id, b->name,
                            (unsigned)family < UG_KERNEL_FAMILY_COUNT ? family_names[family] : "such");
    if (st != UG_OK)
        return ug_prefix_error(st, "%s (%s) on %s", op, ug_dtype_name(dtype), d->info.id);
    return UG_OK;
}

const char *ug_kernel_family_name(ug_kernel_family family)
{
    return (unsigned)family < UG_KERNEL_FAMILY_COUNT ? family_names[family] : "transfer";
}

ug_status ug_call_conv_plan(ug_device *device, const ug_conv_args *args, bool *runs,
                            size_t *workspace_bytes, const char *op)
{
    *runs = false;
    *workspace_bytes = 0;
    if (!device->backend->conv_plan)
        return UG_OK;
    ug_status st = device->backend->conv_plan(device->bdev, args, runs, workspace_bytes);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s on %s", op, device->info.id);
}
