/* A stopped profiler's recording as a Chrome trace: the JSON Trace Event
 * format that Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Process 1 is the host, with a thread per host thread: the time each
 * launch took to issue, host waits, and ranges. Process 2 + i is device i,
 * with a thread per stream (0: the default stream): each launch's span on
 * the device, ranges marked on the device, and the pool's counters.
 * A launch and its span on the device share args.correlation, and a flow
 * event joins them (viewers draw it as an arrow), so that a reader can
 * tell when the device idled because the host had not yet issued its next
 * work. A transfer that waited in its queue before it started (behind the
 * work queued before it, or another thread's) has that wait apart, on a
 * track beside its stream's ("queued", from args.queued to the transfer's
 * start): the transfer's own span is its time only. Timestamps are
 * microseconds since the profiler started. */
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/text.h"
#include "base/fault.h"
#include "core/profile/recording.h"

enum { HOST_PID = 1, FIRST_DEVICE_PID = 2, FIRST_WAIT_TID = 100 /* + the stream's track */ };

static void put_us(ug_text *t, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    ug_text_printf(t, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void metadata(ug_text *t, const char *what, int pid, int tid, const char *name)
{
    ug_text_printf(t, ",\n{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", what, pid, tid);
    ug_text_json_string(t, name);
    ug_text_printf(t, "}}");
}

/* correlation: the launch's number, shared by its events; 0: none. */
static void complete(ug_text *t, const profile_record *r, const char *category, int pid, int tid,
                     int64_t start, int64_t end, size_t correlation)
{
    ug_text_printf(t, ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", category);
    ug_text_json_string(t, r->name);
    ug_text_printf(t, ",\"pid\":%d,\"tid\":%d,\"ts\":", pid, tid);
    put_us(t, start);
    ug_text_printf(t, ",\"dur\":");
    put_us(t, end - start);
    ug_text_printf(t, ",\"args\":{");
    if (r->kind == RECORD_KERNEL || r->kind == RECORD_TRANSFER) {
        ug_text_printf(t, "\"family\":\"%s\",\"dtype\":\"%s\",\"shape\":", r->family, ug_dtype_name(r->dtype));
        ug_text_json_string(t, r->shape);
        ug_text_printf(t, ",\"flops\":%.0f,\"bytes\":%.0f", r->flops, r->bytes);
        if (correlation)
            ug_text_printf(t, ",\"correlation\":%zu", correlation);
        if (!strcmp(category, "transfer")) { /* on the device: when the host queued it */
            ug_text_printf(t, ",\"queued\":");
            put_us(t, r->host_start);
        }
    } else if (r->kind == RECORD_WAIT) {
        ug_text_printf(t, "\"device\":");
        ug_text_json_string(t, r->shape);
    } else {
        ug_text_printf(t, "\"depth\":%d", r->depth);
    }
    ug_text_printf(t, "}}");
}

/* The stream tracks of device d whose transfers waited. */
static void waiting_tracks(const ug_profiler *p, int d, bool waited[PROFILE_MAX_STREAMS])
{
    for (size_t i = 0; i < p->count; i++)
        if (p->records[i].device == d && p->records[i].wait_start >= 0)
            waited[p->records[i].stream] = true;
}

static void names(ug_text *t, const ug_profiler *p)
{
    ug_text_printf(t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"host\"}}",
        HOST_PID);
    for (int k = 1; k <= p->threads; k++) {
        char name[32];
        snprintf(name, sizeof name, "thread %d", k);
        metadata(t, "thread_name", HOST_PID, k, name);
    }
    for (int d = 0; d < p->device_count; d++) {
        const profile_device *pd = &p->devices[d];
        metadata(t, "process_name", FIRST_DEVICE_PID + d, 0, pd->description);
        bool waited[PROFILE_MAX_STREAMS] = {false};
        waiting_tracks(p, d, waited);
        for (int s = 0; s < pd->stream_count; s++) {
            char name[64];
            if (pd->streams[s])
                snprintf(name, sizeof name, "stream %d", s);
            else if (s)
                snprintf(name, sizeof name, "default stream from thread %d", pd->stream_threads[s]);
            else
                snprintf(name, sizeof name, "default stream");
            metadata(t, "thread_name", FIRST_DEVICE_PID + d, s, name);
            if (!waited[s])
                continue;
            size_t used = strlen(name);
            snprintf(name + used, sizeof name - used, ": transfers queued");
            metadata(t, "thread_name", FIRST_DEVICE_PID + d, FIRST_WAIT_TID + s, name);
        }
    }
}

/* One end of the arrow from a launch to its span on the device: "s" at
 * the launch's start, "f" bound to the enclosing span ("bp":"e"). */
static void flow(ug_text *t, char phase, size_t id, int pid, int tid, int64_t ts)
{
    ug_text_printf(t, ",\n{\"ph\":\"%c\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":%zu,"
                      "\"pid\":%d,\"tid\":%d,%s\"ts\":",
                   phase, id, pid, tid, phase == 'f' ? "\"bp\":\"e\"," : "");
    put_us(t, ts);
    ug_text_printf(t, "}");
}

static void record(ug_text *t, const profile_record *r, size_t number)
{
    int device_pid = FIRST_DEVICE_PID + r->device;
    switch (r->kind) {
    case RECORD_KERNEL:
    case RECORD_TRANSFER: {
        const size_t correlation = r->device_start >= 0 ? number : 0;
        complete(t, r, "launch", HOST_PID, r->thread, r->host_start, r->host_end, correlation);
        if (correlation) {
            complete(t, r, r->kind == RECORD_KERNEL ? "kernel" : "transfer", device_pid, r->stream,
                     r->device_start, r->device_end, correlation);
            flow(t, 's', correlation, HOST_PID, r->thread, r->host_start);
            flow(t, 'f', correlation, device_pid, r->stream, r->device_start);
        }
        if (correlation && r->wait_start >= 0) {
            ug_text_printf(t, ",\n{\"ph\":\"X\",\"cat\":\"queued\",\"name\":");
            ug_text_json_string(t, r->name);
            ug_text_printf(t, ",\"pid\":%d,\"tid\":%d,\"ts\":", device_pid, FIRST_WAIT_TID + r->stream);
            put_us(t, r->wait_start);
            ug_text_printf(t, ",\"dur\":");
            put_us(t, r->device_start - r->wait_start);
            ug_text_printf(t, ",\"args\":{\"correlation\":%zu}}", correlation);
        }
        break;
    }
    case RECORD_WAIT:
        complete(t, r, "wait", HOST_PID, r->thread, r->host_start, r->host_end, 0);
        break;
    case RECORD_RANGE:
        complete(t, r, "range", HOST_PID, r->thread, r->host_start, r->host_end, 0);
        if (r->device >= 0 && r->device_start >= 0)
            complete(t, r, "range", device_pid, r->stream, r->device_start, r->device_end, 0);
        break;
    case RECORD_MEMORY:
        ug_text_printf(t, ",\n{\"ph\":\"C\",\"name\":\"pool MiB\",\"pid\":%d,\"tid\":0,\"ts\":", device_pid);
        put_us(t, r->host_start);
        ug_text_printf(t, ",\"args\":{\"in use\":%.3f,\"cached\":%.3f}}", (double)r->in_use / 1048576.0,
            (double)r->cached / 1048576.0);
        ug_text_printf(t, ",\n{\"ph\":\"C\",\"name\":\"pool peak MiB\",\"pid\":%d,\"tid\":0,\"ts\":", device_pid);
        put_us(t, r->host_start);
        ug_text_printf(t, ",\"args\":{\"peak\":%.3f}}", (double)r->peak / 1048576.0);
        break;
    }
}

ug_status ug_profiler_write_trace(const ug_profiler *p, const char *path)
{
    if (!p || !path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_write_trace: %s is NULL",
                            p ? "path" : "profiler");
    if (!p->stopped)
        return ug_set_error(UG_ERR_STATE, "ug_profiler_write_trace: stop the profiler first (ug_profiler_stop)");
    ug_text t = {0};
    ug_text_printf(&t, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"unigrad\",\"dropped_records\":%llu},\n"
            "\"traceEvents\":[\n",
        (unsigned long long)p->dropped);
    names(&t, p);
    for (size_t i = 0; i < p->count; i++)
        record(&t, &p->records[i], i + 1);
    ug_text_printf(&t, "\n]}\n");
    if (t.failed) {
        ug_text_free(&t);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_profiler_write_trace: out of host memory for %s", path);
    }
    ug_atomic_file *f = NULL;
    ug_status st = ug_atomic_open(path, &f);
    if (st == UG_OK && (st = ug_atomic_write(f, t.data, t.len)) != UG_OK)
        ug_atomic_abort(f);
    else if (st == UG_OK)
        st = ug_atomic_commit(f, 1);
    ug_text_free(&t);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "ug_profiler_write_trace");
}
