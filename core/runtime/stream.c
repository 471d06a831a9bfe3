/* Streams and events (include/unigrad/stream.h): handles over the
 * backend's, each thread's current stream per device, and the fences the
 * memory pool waits on. */
#include <stdatomic.h>
#include <stdlib.h>

#include "core/runtime/dispatch.h"
#include "base/fault.h"
#include "core/runtime/internal.h"
#include "unigrad/stream.h"

struct ug_event {
    ug_device *device;
    ug_bevent *bevent;
    bool timing;
    bool recorded;
};

struct ug_fence {
    int count;
    ug_bevent *events[];
};

/* ---- each thread's current stream, per device ---- */

/* A thread picks streams on few devices at once; the serial tells a device
 * reopened at the same address apart from the one the entry was for. */
enum { CURRENT_MAX = 16 };
typedef struct current_entry {
    ug_device *device;
    uint64_t serial;
    ug_stream *stream;
} current_entry;
static _Thread_local current_entry current[CURRENT_MAX];
static _Thread_local int current_count;
static atomic_uint_fast64_t next_serial = 1;
/* Entries set in any thread: while none is, every call skips the
 * thread-local lookup (a library's thread-local costs a call to reach). */
static atomic_int entries_set;

static current_entry *current_for(const ug_device *device)
{
    for (int i = 0; i < current_count; i++)
        if (current[i].device == device && current[i].serial == device->serial)
            return &current[i];
    return NULL;
}

ug_bstream *ug_current_bstream(ug_device *device)
{
    if (!atomic_load_explicit(&entries_set, memory_order_relaxed) || !current_count)
        return NULL; /* the common case: no thread picked a stream */
    current_entry *e = current_for(device);
    return e && !e->stream->freed ? e->stream->bstream : NULL;
}

void ug_streams_init(ug_device *device)
{
    device->serial = atomic_fetch_add(&next_serial, 1);
    device->default_stream = (ug_stream){.device = device};
    pthread_mutex_init(&device->stream_lock, NULL);
}

void ug_streams_destroy(ug_device *device)
{
    ug_stream *s = device->side_streams;
    while (s) {
        ug_stream *next = s->next;
        if (!s->freed)
            ug_call_stream_destroy(device, s->bstream);
        free(s);
        s = next;
    }
    device->side_streams = NULL;
    device->live_streams = 0;
    pthread_mutex_destroy(&device->stream_lock);
}

/* ---- checks ---- */

static ug_status check_stream(const ug_stream *s, const char *fn)
{
    if (!s)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: stream is NULL", fn);
    if (s->freed)
        return ug_set_error(UG_ERR_STATE, "%s: the stream was freed (ug_stream_free); create another",
                            fn);
    return UG_OK;
}

static ug_status check_event(const ug_event *e, const char *fn, const char *arg, bool recorded)
{
    if (!e)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, arg);
    if (recorded && !e->recorded)
        return ug_set_error(UG_ERR_STATE, "%s: %s was never recorded (call ug_event_record first)",
                            fn, arg);
    return UG_OK;
}

static ug_status check_same_device(const ug_stream *s, const ug_event *e, const char *fn)
{
    if (s->device != e->device)
        return ug_set_error(UG_ERR_DEVICE, "%s: the stream is of %s and the event of %s; use one device's",
                            fn, s->device->info.id, e->device->info.id);
    return UG_OK;
}

/* ---- streams ---- */

ug_stream *ug_device_default_stream(ug_device *device)
{
    return device ? &device->default_stream : NULL;
}

ug_device *ug_stream_device(const ug_stream *stream) { return stream ? stream->device : NULL; }

ug_status ug_stream_create(ug_device *device, ug_stream **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_stream_create: out is NULL");
    *out = NULL;
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_stream_create: device is NULL");
    ug_stream *s = ug_calloc(1, sizeof *s);
    if (!s)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_stream_create: out of host memory");
    s->device = device;
    ug_status st = ug_call_stream_create(device, &s->bstream, "ug_stream_create");
    if (st != UG_OK) {
        free(s);
        return st;
    }
    pthread_mutex_lock(&device->stream_lock);
    s->next = device->side_streams;
    device->side_streams = s;
    __atomic_add_fetch(&device->live_streams, 1, __ATOMIC_RELEASE); /* the pool reads it without the lock */
    pthread_mutex_unlock(&device->stream_lock);
    ug_device_retain(device);
    *out = s;
    return UG_OK;
}

void ug_stream_free(ug_stream *stream)
{
    if (!stream || !stream->bstream || stream->freed)
        return;
    ug_device *device = stream->device;
    pthread_mutex_lock(&device->stream_lock);
    stream->freed = true;
    __atomic_sub_fetch(&device->live_streams, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&device->stream_lock);
    ug_call_stream_destroy(device, stream->bstream);
    stream->bstream = NULL;
    ug_device_close(device);
}

ug_status ug_stream_synchronize(ug_stream *stream)
{
    UG_TRY(check_stream(stream, "ug_stream_synchronize"));
    return ug_call_stream_synchronize(stream->device, stream->bstream, "ug_stream_synchronize");
}

ug_status ug_stream_set_current(ug_device *device, ug_stream *stream)
{
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_stream_set_current: device is NULL");
    if (stream) {
        UG_TRY(check_stream(stream, "ug_stream_set_current"));
        if (stream->device != device)
            return ug_set_error(UG_ERR_DEVICE,
                                "ug_stream_set_current: the stream is of %s, not %s",
                                stream->device->info.id, device->info.id);
        if (!stream->bstream)
            stream = NULL; /* the default stream */
    }
    current_entry *e = current_for(device);
    if (!stream) {
        if (e) {
            *e = current[--current_count];
            atomic_fetch_sub(&entries_set, 1);
        }
        return UG_OK;
    }
    if (!e) {
        if (current_count == CURRENT_MAX)
            return ug_set_error(UG_ERR_STATE,
                                "ug_stream_set_current: this thread has current streams on %d "
                                "devices already; set one back to NULL first",
                                CURRENT_MAX);
        e = &current[current_count++];
        atomic_fetch_add(&entries_set, 1);
    }
    *e = (current_entry){.device = device, .serial = device->serial, .stream = stream};
    return UG_OK;
}

ug_stream *ug_stream_current(ug_device *device)
{
    if (!device)
        return NULL;
    current_entry *e = current_count ? current_for(device) : NULL;
    return e && !e->stream->freed ? e->stream : &device->default_stream;
}

/* ---- events ---- */

ug_status ug_event_create(ug_device *device, bool timing, ug_event **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_event_create: out is NULL");
    *out = NULL;
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_event_create: device is NULL");
    ug_event *e = ug_calloc(1, sizeof *e);
    if (!e)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_event_create: out of host memory");
    ug_status st = ug_call_event_create(device, timing, &e->bevent, "ug_event_create");
    if (st != UG_OK) {
        free(e);
        return st;
    }
    e->device = device;
    e->timing = timing;
    ug_device_retain(device);
    *out = e;
    return UG_OK;
}

void ug_event_free(ug_event *event)
{
    if (!event)
        return;
    ug_call_event_destroy(event->device, event->bevent);
    ug_device_close(event->device);
    free(event);
}

ug_status ug_event_record(ug_event *event, ug_stream *stream)
{
    UG_TRY(check_event(event, "ug_event_record", "event", false));
    UG_TRY(check_stream(stream, "ug_event_record"));
    UG_TRY(check_same_device(stream, event, "ug_event_record"));
    UG_TRY(ug_call_event_record(event->device, event->bevent, stream->bstream, "ug_event_record"));
    event->recorded = true;
    return UG_OK;
}

ug_status ug_stream_wait_event(ug_stream *stream, ug_event *event)
{
    UG_TRY(check_stream(stream, "ug_stream_wait_event"));
    UG_TRY(check_event(event, "ug_stream_wait_event", "event", true));
    UG_TRY(check_same_device(stream, event, "ug_stream_wait_event"));
    return ug_call_event_wait(stream->device, stream->bstream, event->bevent, "ug_stream_wait_event");
}

ug_status ug_event_query(ug_event *event, bool *done)
{
    if (!done)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_event_query: done is NULL");
    *done = false;
    UG_TRY(check_event(event, "ug_event_query", "event", true));
    return ug_call_event_query(event->device, event->bevent, done, "ug_event_query");
}

ug_status ug_event_synchronize(ug_event *event)
{
    UG_TRY(check_event(event, "ug_event_synchronize", "event", true));
    return ug_call_event_synchronize(event->device, event->bevent, "ug_event_synchronize");
}

ug_status ug_event_elapsed_ns(ug_event *start, ug_event *end, int64_t *nanoseconds)
{
    const char *fn = "ug_event_elapsed_ns";
    if (!nanoseconds)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: nanoseconds is NULL", fn);
    *nanoseconds = 0;
    UG_TRY(check_event(start, fn, "start", true));
    UG_TRY(check_event(end, fn, "end", true));
    if (start->device != end->device)
        return ug_set_error(UG_ERR_DEVICE, "%s: start is of %s and end of %s; time one device's work",
                            fn, start->device->info.id, end->device->info.id);
    if (!start->timing || !end->timing)
        return ug_set_error(UG_ERR_STATE,
                            "%s: %s was created without timing; create both with "
                            "ug_event_create(device, true, ...)",
                            fn, start->timing ? "end" : "start");
    bool done = false;
    UG_TRY(ug_call_event_query(end->device, end->bevent, &done, fn));
    if (done)
        UG_TRY(ug_call_event_query(start->device, start->bevent, &done, fn));
    if (!done)
        return ug_set_error(UG_ERR_STATE,
                            "%s: the events have not completed yet; call ug_event_synchronize(end) "
                            "first",
                            fn);
    return ug_call_event_elapsed(start->device, start->bevent, end->bevent, nanoseconds, fn);
}

/* ---- fences for the pool ---- */

ug_status ug_fence_create(ug_device *device, ug_fence **out)
{
    *out = NULL;
    pthread_mutex_lock(&device->stream_lock);
    ug_fence *f = ug_calloc(1, sizeof *f + (size_t)(device->live_streams + 1) * sizeof f->events[0]);
    ug_status st = f ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory for a fence");
    ug_stream *s = &device->default_stream;
    ug_stream *next_side = device->side_streams;
    while (st == UG_OK && s) {
        if (!s->freed) {
            ug_bevent **e = &f->events[f->count];
            st = ug_call_event_create(device, false, e, "a memory fence");
            if (st == UG_OK) {
                f->count++;
                st = ug_call_event_record(device, *e, s->bstream, "a memory fence");
            }
        }
        s = next_side;
        next_side = s ? s->next : NULL;
    }
    pthread_mutex_unlock(&device->stream_lock);
    if (st != UG_OK && f) {
        (void)ug_fence_wait_free(device, f);
        return st;
    }
    *out = f;
    return UG_OK;
}

bool ug_fence_passed(ug_device *device, ug_fence *fence)
{
    for (int i = 0; i < fence->count; i++) {
        bool done = false;
        if (ug_call_event_query(device, fence->events[i], &done, "a memory fence") != UG_OK || !done)
            return false;
    }
    return true;
}

ug_status ug_fence_wait_free(ug_device *device, ug_fence *fence)
{
    ug_status st = UG_OK;
    for (int i = 0; i < fence->count; i++) {
        ug_status s = ug_call_event_synchronize(device, fence->events[i], "a memory fence");
        if (st == UG_OK)
            st = s;
        ug_call_event_destroy(device, fence->events[i]);
    }
    free(fence);
    return st;
}
