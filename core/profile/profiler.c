/* The profiler's recorder: starting and stopping, the hooks of hooks.h,
 * named ranges, and reading the device times when recording stops.
 *
 * Every launch recorded gets two timing events around it on its stream;
 * their times are read only at stop, so recording never waits for a
 * device. A device's clock is placed on the host's by a base event
 * recorded when the device is idle (its first use, or start): an event's
 * device time is the base's host time plus the events' elapsed time.
 *
 * The recorder's state is one process-wide object behind a lock, and stop
 * waits for the launches being recorded on other threads to finish, so a
 * profiler is never freed under another thread's hook. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fault.h"
#include "base/text.h"
#include "core/profile/recording.h"
#include "core/runtime/dispatch.h"

enum { EVENT_BATCH = 64, MAX_RECORDS = 1 << 19, MAX_RANGE_DEPTH = 64 };

atomic_bool ug_profile_running;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t idle;
    ug_profiler *profiler; /* the running one, or NULL */
    int in_flight;         /* spans begun and not ended */
    uint64_t generations;
} recorder = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static atomic_int thread_numbers;
static _Thread_local int thread_number;
static _Thread_local const char *label;
/* Set while the profiler itself calls the runtime: its own waits are not recorded. */
static _Thread_local bool inside;
static _Thread_local struct open_range {
    uint64_t generation;
    size_t record;
    ug_device *device;
} open_ranges[MAX_RANGE_DEPTH];
static _Thread_local int open_depth;
static _Thread_local int64_t unrecorded_overflow; /* pushes past the stack with no profiler running */

int64_t ug_profile_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ug_profile_set_label(const char *name) { label = name; }
const char *ug_profile_label(void) { return label; }

static int this_thread(void)
{
    if (!thread_number)
        thread_number = atomic_fetch_add(&thread_numbers, 1) + 1;
    return thread_number;
}

/* The running profiler while it takes new records (recorder lock held). */
static ug_profiler *taking(void)
{
    return recorder.profiler && !recorder.profiler->closing ? recorder.profiler : NULL;
}

/* ---- devices, streams and events (recorder lock held) ---- */

static ug_status take_event(profile_device *pd, ug_bevent **out)
{
    if (!pd->spare_count) {
        if (pd->spare_capacity < EVENT_BATCH) {
            ug_bevent **grown = ug_realloc(pd->spare, EVENT_BATCH * sizeof *grown);
            if (!grown)
                return ug_set_error(UG_ERR_OUT_OF_MEMORY, "profiler: out of host memory");
            pd->spare = grown;
            pd->spare_capacity = EVENT_BATCH;
        }
        for (; pd->spare_count < EVENT_BATCH; pd->spare_count++)
            UG_TRY(ug_call_event_create(pd->device, true, &pd->spare[pd->spare_count], "profiling"));
    }
    *out = pd->spare[--pd->spare_count];
    return UG_OK;
}

static void give_event(profile_device *pd, ug_bevent *event)
{
    if (!event)
        return;
    if (pd->spare_count < pd->spare_capacity)
        pd->spare[pd->spare_count++] = event;
    else
        ug_call_event_destroy(pd->device, event);
}

static void describe(profile_device *pd)
{
    const ug_device_info *info = &pd->device->info;
    snprintf(pd->id, sizeof pd->id, "%s", info->id);
    snprintf(pd->description, sizeof pd->description, "%s: %s", info->id, info->name);
}

/* A device just registered (by device_index) on this thread, whose pool's
 * counters sample_registered records once the recorder's lock is let go:
 * the pool waits for fences under its own lock, and the recorder records
 * those waits, so the pool's lock is never taken inside the recorder's. */
static _Thread_local ug_device *registered;

/* The device's index, registering it on first use: waits for it to be
 * idle and records the base event. -1 when it is not profiled. */
static int device_index(ug_profiler *p, ug_device *device)
{
    for (int i = 0; i < p->device_count; i++)
        if (p->devices[i].device == device)
            return i;
    if ((p->only && p->only != device) || p->device_count == PROFILE_MAX_DEVICES)
        return -1;
    profile_device *pd = &p->devices[p->device_count];
    *pd = (profile_device){.device = device, .stream_count = 1};
    describe(pd);
    inside = true;
    ug_status st = ug_call_synchronize(device, "starting the profiler");
    if (st == UG_OK)
        st = ug_call_event_create(device, true, &pd->base, "profiling");
    int64_t before = ug_profile_clock();
    if (st == UG_OK)
        st = ug_call_event_record(device, pd->base, NULL, "profiling");
    if (st == UG_OK)
        st = ug_call_event_synchronize(device, pd->base, "profiling");
    inside = false;
    if (st != UG_OK) {
        if (pd->base)
            ug_call_event_destroy(device, pd->base);
        return -1;
    }
    pd->base_ns = (before + ug_profile_clock()) / 2 - p->start_ns;
    ug_device_retain(device);
    registered = device;
    return p->device_count++;
}

/* The counters' first point of a device registered here (however it was
 * first met: a launch, a range, start; a planned step allocates nothing,
 * and its trace would have no counter otherwise). Recorder lock not held. */
static void sample_registered(void)
{
    ug_device *device = registered;
    registered = NULL;
    ug_memory_stats stats;
    if (device && ug_memory_get_stats(device, &stats) == UG_OK)
        ug_profile_memory(device, &stats);
}

/* The track of this thread's work on stream (see profile_device). */
static int stream_index(profile_device *pd, ug_bstream *stream)
{
    if (!stream && !pd->stream_threads[0])
        pd->stream_threads[0] = this_thread();
    int thread = stream ? 0 : this_thread();
    for (int i = 0; i < pd->stream_count; i++)
        if (pd->streams[i] == stream && pd->stream_threads[i] == thread)
            return i;
    if (pd->stream_count == PROFILE_MAX_STREAMS)
        return PROFILE_MAX_STREAMS - 1; /* shares the last track */
    pd->streams[pd->stream_count] = stream;
    pd->stream_threads[pd->stream_count] = thread;
    return pd->stream_count++;
}

static profile_record *new_record(ug_profiler *p, record_kind kind)
{
    if (p->count == MAX_RECORDS) {
        p->dropped++;
        return NULL;
    }
    if (p->count == p->capacity) {
        size_t capacity = p->capacity ? p->capacity * 2 : 1024;
        profile_record *grown = ug_realloc(p->records, capacity * sizeof *grown);
        if (!grown) {
            p->dropped++;
            return NULL;
        }
        p->records = grown;
        p->capacity = capacity;
    }
    profile_record *r = &p->records[p->count++];
    /* Field by field: the name and shape need only their first byte cleared. */
    r->kind = kind;
    r->device = -1;
    r->stream = r->depth = 0;
    r->thread = this_thread();
    r->name[0] = r->shape[0] = '\0';
    r->family = "";
    r->dtype = UG_F32;
    r->flops = r->bytes = 0.0;
    r->host_start = 0;
    r->host_end = r->device_start = r->device_end = r->wait_start = -1;
    r->start_event = r->end_event = NULL;
    r->in_use = r->cached = r->peak = 0;
    if (r->thread > p->threads)
        p->threads = r->thread;
    return r;
}

/* A sample of device d's pool counters at host time now (recorder lock held). */
static void record_memory(ug_profiler *p, int d, const ug_memory_stats *stats, int64_t now)
{
    profile_record *r = new_record(p, RECORD_MEMORY);
    if (!r)
        return;
    r->device = d;
    r->family = "memory";
    snprintf(r->name, sizeof r->name, "pool");
    r->host_start = r->host_end = now - p->start_ns;
    r->in_use = stats->bytes_in_use;
    r->cached = stats->bytes_cached;
    r->peak = stats->peak_bytes_in_use;
}

/* ---- launches ---- */

bool ug_profile_begin(ug_device *device, ug_profile_span *span)
{
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = taking();
    int d = p ? device_index(p, device) : -1;
    bool recorded = false;
    if (d >= 0) {
        profile_device *pd = &p->devices[d];
        *span = (ug_profile_span){.device = d, .stream = stream_index(pd, ug_current_bstream(device))};
        recorded = take_event(pd, &span->start) == UG_OK;
        if (recorded && take_event(pd, &span->end) != UG_OK) {
            give_event(pd, span->start);
            recorded = false;
        }
    }
    if (recorded)
        recorder.in_flight++;
    pthread_mutex_unlock(&recorder.lock);
    sample_registered();
    if (!recorded)
        return false;
    if (ug_call_event_record(device, span->start, ug_current_bstream(device), "profiling") != UG_OK)
        span->start = NULL; /* the launch is still ended, and dropped there */
    span->host_start = ug_profile_clock();
    return true;
}

void ug_profile_end(ug_device *device, ug_profile_span *span, const ug_profile_launch *launch,
                    ug_status status)
{
    int64_t host_end = ug_profile_clock();
    bool timed = span->start && status == UG_OK &&
                 ug_call_event_record(device, span->end, ug_current_bstream(device), "profiling") == UG_OK;
    const bool kernel = launch->family != UG_KERNEL_FAMILY_COUNT;
    /* Worked out now, outside the lock: arguments may point at memory of
     * the launching frame (a multi-tensor update's list of tensors). */
    ug_kernel_cost cost = {.bytes = launch->bytes};
    if (timed && kernel && launch->args)
        ug_kernel_cost_of(launch->family, launch->args, &cost);
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = recorder.profiler; /* stop waits for this span: still the same */
    profile_device *pd = &p->devices[span->device];
    profile_record *r = timed ? new_record(p, kernel ? RECORD_KERNEL : RECORD_TRANSFER) : NULL;
    if (r) {
        r->device = span->device;
        r->stream = span->stream;
        ug_utf8_copy(r->name, sizeof r->name, launch->name);
        r->family = kernel ? ug_kernel_family_name(launch->family) : "transfer";
        r->dtype = launch->dtype;
        r->flops = cost.flops;
        r->bytes = cost.bytes;
        memcpy(r->shape, cost.shape, sizeof r->shape);
        r->host_start = span->host_start - p->start_ns;
        r->host_end = host_end - p->start_ns;
        r->start_event = span->start;
        r->end_event = span->end;
    } else {
        give_event(pd, span->start);
        give_event(pd, span->end);
    }
    if (--recorder.in_flight == 0)
        pthread_cond_broadcast(&recorder.idle);
    pthread_mutex_unlock(&recorder.lock);
}

void ug_profile_wait(ug_device *device, const char *what, int64_t started)
{
    if (inside)
        return;
    int64_t ended = ug_profile_clock();
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = taking();
    profile_record *r = p && (!p->only || p->only == device) ? new_record(p, RECORD_WAIT) : NULL;
    if (r) {
        ug_utf8_copy(r->name, sizeof r->name, what);
        snprintf(r->shape, sizeof r->shape, "%s", device->info.id);
        r->family = "wait";
        r->host_start = started - p->start_ns;
        r->host_end = ended - p->start_ns;
    }
    pthread_mutex_unlock(&recorder.lock);
}

void ug_profile_memory(ug_device *device, const ug_memory_stats *stats)
{
    int64_t now = ug_profile_clock();
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = taking();
    for (int i = 0; p && i < p->device_count; i++)
        if (p->devices[i].device == device) /* devices not yet in use are not registered from the pool */
            record_memory(p, i, stats, now);
    pthread_mutex_unlock(&recorder.lock);
}

/* ---- ranges ---- */

/* Records a range mark on device's current stream, or none. */
static ug_bevent *mark(ug_profiler *p, ug_device *device, int *d, int *stream)
{
    *d = device ? device_index(p, device) : -1;
    if (*d < 0)
        return NULL;
    ug_bevent *event = NULL;
    if (take_event(&p->devices[*d], &event) != UG_OK)
        return NULL;
    *stream = stream_index(&p->devices[*d], ug_current_bstream(device));
    if (ug_call_event_record(device, event, ug_current_bstream(device), "profiling") != UG_OK) {
        give_event(&p->devices[*d], event);
        return NULL;
    }
    return event;
}

/* Whether the thread's range at index i was pushed while p recorded
 * (not before p started, nor under an earlier profiler). */
static bool range_of(const ug_profiler *p, int i) { return p && open_ranges[i].generation == p->generation; }

/* Every push is kept on the thread's stack, recorded or not, so that each
 * pop finds its own push: a profiler started (on any thread) between a
 * push and its pop must not turn that pop into an error. */
ug_status ug_profiler_range_push(ug_device *device, const char *name)
{
    if (!ug_profiling()) {
        if (open_depth < MAX_RANGE_DEPTH)
            open_ranges[open_depth++] = (struct open_range){0, 0, device};
        else
            unrecorded_overflow++; /* nothing is recorded: no error to give */
        return UG_OK;
    }
    if (!name)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_range_push: name is NULL");
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = taking();
    if (open_depth == MAX_RANGE_DEPTH) {
        /* Ranges pushed outside this profiler (a failure may have skipped
         * their pops) give way; this profiler's own are a real overflow. */
        int kept = 0;
        for (int i = 0; i < open_depth; i++)
            if (range_of(p, i))
                open_ranges[kept++] = open_ranges[i];
        open_depth = kept;
        unrecorded_overflow = 0;
    }
    if (open_depth == MAX_RANGE_DEPTH) {
        pthread_mutex_unlock(&recorder.lock);
        return ug_set_error(UG_ERR_STATE, "ug_profiler_range_push: %d ranges are open on this thread; "
                            "pop one first", MAX_RANGE_DEPTH);
    }
    profile_record *r = NULL;
    int d = -1, stream = 0, depth = 0;
    ug_bevent *event = p ? mark(p, device, &d, &stream) : NULL;
    if (p && (r = new_record(p, RECORD_RANGE)) != NULL) {
        for (int i = 0; i < open_depth; i++)
            depth += range_of(p, i);
        ug_utf8_copy(r->name, sizeof r->name, name);
        r->family = "range";
        r->device = event ? d : -1;
        r->stream = stream;
        r->depth = depth;
        r->start_event = event;
        r->host_start = ug_profile_clock() - p->start_ns;
    } else if (event) {
        give_event(&p->devices[d], event);
    }
    open_ranges[open_depth++] = (struct open_range){r ? p->generation : 0, r ? (size_t)(r - p->records) : 0, device};
    pthread_mutex_unlock(&recorder.lock);
    sample_registered();
    return UG_OK;
}

ug_status ug_profiler_range_pop(ug_device *device)
{
    if (!ug_profiling()) {
        if (unrecorded_overflow)
            unrecorded_overflow--;
        else if (open_depth)
            open_depth--;
        return UG_OK;
    }
    pthread_mutex_lock(&recorder.lock);
    ug_profiler *p = taking();
    ug_status st = UG_OK;
    if (unrecorded_overflow) {
        unrecorded_overflow--;
    } else if (!open_depth) {
        st = ug_set_error(UG_ERR_STATE, "ug_profiler_range_pop: no range is open on this thread "
                          "(each ug_profiler_range_push needs one pop, on the same thread)");
    } else if (open_ranges[open_depth - 1].device != device) {
        st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                          "ug_profiler_range_pop: the open range was pushed on %s, not %s",
                          ug_device_name(open_ranges[open_depth - 1].device), ug_device_name(device));
    } else if (!range_of(p, open_depth - 1)) {
        open_depth--; /* pushed before this profiler started: nothing of it was recorded */
    } else {
        profile_record *r = &p->records[open_ranges[--open_depth].record];
        r->host_end = ug_profile_clock() - p->start_ns;
        if (r->start_event) {
            int d = -1, stream = 0;
            r->end_event = mark(p, device, &d, &stream);
        }
    }
    pthread_mutex_unlock(&recorder.lock);
    sample_registered();
    return st;
}

/* ---- start and stop ---- */

ug_status ug_profiler_start(ug_device *device, ug_profiler **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_start: out is NULL");
    *out = NULL;
    ug_profiler *p = ug_calloc(1, sizeof *p);
    if (!p)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_profiler_start: out of host memory");
    pthread_mutex_lock(&recorder.lock);
    ug_status st = UG_OK;
    if (recorder.profiler) {
        st = ug_set_error(UG_ERR_STATE, "ug_profiler_start: another profiler is running; stop it "
                          "first (ug_profiler_stop)");
    } else {
        p->only = device;
        p->generation = ++recorder.generations;
        p->start_ns = ug_profile_clock();
        if (device && device_index(p, device) < 0)
            st = ug_prefix_error(UG_ERR_BACKEND, "ug_profiler_start: %s cannot time its work",
                                 device->info.id);
    }
    if (st == UG_OK) {
        recorder.profiler = p;
        atomic_store(&ug_profile_running, true);
    }
    pthread_mutex_unlock(&recorder.lock);
    sample_registered();
    if (st != UG_OK) {
        free(p);
        return st;
    }
    *out = p;
    return UG_OK;
}

/* The device time of event (ns since start), or -1. */
static int64_t device_time(profile_device *pd, ug_bevent *event)
{
    int64_t elapsed = 0;
    if (!event || ug_call_event_synchronize(pd->device, event, "profiling") != UG_OK ||
        ug_call_event_elapsed(pd->device, pd->base, event, &elapsed, "profiling") != UG_OK)
        return -1;
    return pd->base_ns + elapsed;
}

/* A transfer's device times: its end, and its start as the span between
 * its events back from there. Where its queue was shared with other
 * threads' work, the events' elapsed time is the transfer's own (the
 * OpenCL backend times such a bracket by the transfer's own command),
 * so the time it waited in the queue is not counted as its time: that
 * wait, from its queuing on the host to its start, is kept apart. Waits
 * are cut to start after the previous one on their track ended, so that
 * two transfers queued together wait once for the work before them (and
 * the trace's wait track nests). */
static void transfer_times(profile_device *pd, profile_record *r, int64_t *track_wait_end)
{
    int64_t span = -1;
    r->device_end = device_time(pd, r->end_event);
    if (r->device_end < 0 || !r->start_event ||
        ug_call_event_elapsed(pd->device, r->start_event, r->end_event, &span, "profiling") != UG_OK || span < 0)
        return;
    r->device_start = r->device_end - span;
    const int64_t from = r->host_start > *track_wait_end ? r->host_start : *track_wait_end;
    if (from < r->device_start) {
        r->wait_start = from;
        *track_wait_end = r->device_start;
    }
}

static void resolve(ug_profiler *p)
{
    inside = true;
    int64_t wait_ends[PROFILE_MAX_DEVICES][PROFILE_MAX_STREAMS] = {{0}}; /* each track's last wait's end */
    for (size_t i = 0; i < p->count; i++) {
        profile_record *r = &p->records[i];
        if (r->device < 0 || r->kind == RECORD_MEMORY)
            continue;
        profile_device *pd = &p->devices[r->device];
        if (r->kind == RECORD_TRANSFER) {
            transfer_times(pd, r, &wait_ends[r->device][r->stream]);
        } else {
            r->device_start = device_time(pd, r->start_event);
            r->device_end = device_time(pd, r->end_event);
        }
        if (r->device_start < 0 || r->device_end < r->device_start)
            r->device_start = r->device_end = -1;
        give_event(pd, r->start_event);
        give_event(pd, r->end_event);
        r->start_event = r->end_event = NULL;
    }
    for (int d = 0; d < p->device_count; d++) {
        profile_device *pd = &p->devices[d];
        for (int k = 0; k < pd->spare_count; k++)
            ug_call_event_destroy(pd->device, pd->spare[k]);
        free(pd->spare);
        pd->spare = NULL;
        pd->spare_count = pd->spare_capacity = 0;
        ug_call_event_destroy(pd->device, pd->base);
        ug_device_close(pd->device);
        pd->device = NULL;
    }
    inside = false;
}

ug_status ug_profiler_stop(ug_profiler *p)
{
    if (!p)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_stop: profiler is NULL");
    if (p->stopped)
        return UG_OK;
    pthread_mutex_lock(&recorder.lock);
    atomic_store(&ug_profile_running, false);
    p->closing = true;
    while (recorder.in_flight) /* launches being recorded end on p */
        pthread_cond_wait(&recorder.idle, &recorder.lock);
    if (recorder.profiler == p)
        recorder.profiler = NULL;
    pthread_mutex_unlock(&recorder.lock);
    p->stopped = true;
    p->stop_ns = ug_profile_clock() - p->start_ns;
    for (int d = 0; d < p->device_count; d++) { /* the counters' last point: they hold to the end */
        ug_memory_stats stats;
        if (ug_memory_get_stats(p->devices[d].device, &stats) == UG_OK)
            record_memory(p, d, &stats, p->start_ns + p->stop_ns);
    }
    for (size_t i = 0; i < p->count; i++) /* ranges still open end here */
        if (p->records[i].host_end < 0)
            p->records[i].host_end = p->stop_ns;
    resolve(p);
    return ug_profile_summarize(p);
}

void ug_profiler_free(ug_profiler *p)
{
    if (!p)
        return;
    (void)ug_profiler_stop(p);
    free(p->records);
    free(p->rows);
    for (int i = 0; i < 3; i++)
        free(p->sorted[i]);
    free(p);
}
