/* Streams and events of the OpenCL backend.
 *
 * A side stream is an in-order queue of the device's context with its own
 * reduction scratch; entries go to the queue bound on the calling thread
 * (thread-local), else to the default one. An event is a marker enqueued
 * on the stream's queue; a timing event is a 4-byte fill there instead,
 * whose end the queue's profiling times (see ug_opencl_queue).
 *
 * Transfers between two timing events. Threads share a queue (a data
 * loader uploads on the default stream while the main thread launches),
 * so between a thread's timing event, its transfer and its next timing
 * event another thread's kernels can be queued: a blocking upload waits
 * for the step queued before it, and the kernels queued while it waits
 * run before the fill after it. The fills' times would then make the
 * transfer's time the queue's. So a thread's bracket, a timing event,
 * exactly one transfer and a timing event, all on one queue with nothing
 * else of the thread's between, is timed by the transfer's own event
 * (CL_PROFILING_COMMAND_START..END): the closing event stamps the
 * transfer's end, and the elapsed time from the opening one is the
 * transfer's own. The time it waited in the queue before its start is
 * not its time (the profiler shows it as a wait). The transfer's event is
 * asked for only inside an open bracket, so unprofiled transfers cost
 * nothing more. */
#include <stdatomic.h>
#include <stdlib.h>

#include "backends/opencl/internal.h"

struct ug_bevent {
    bool timing;
    cl_event marker;     /* NULL until recorded; a timing event's fill */
    uint64_t record;     /* this record's number (process-wide), 0 before the first */
    cl_event transfer;   /* a timing event closing a bracket: its transfer's event, else NULL */
    uint64_t opened_by;  /* then: the record number of the event that opened it */
};

static _Thread_local ug_bstream *bound;
static atomic_uint_fast64_t records;

/* The calling thread's open bracket: its last timing event's record and
 * queue, and the transfer queued since (the thread's own reference). */
static _Thread_local struct bracket {
    uint64_t opened;     /* 0: none open */
    cl_command_queue queue;
    cl_event transfer;
    int transfers;
} bracket;

/* Something other than one transfer followed the thread's timing event:
 * the bracket is not a transfer's. */
static void drop_bracket(void)
{
    if (bracket.transfer)
        clReleaseEvent(bracket.transfer);
    bracket = (struct bracket){0};
}

ug_opencl_queue *ug_opencl_current(ug_bdev *dev)
{
    drop_bracket(); /* every enqueue but a transfer's comes through here */
    return bound ? &bound->q : &dev->main;
}

void ug_opencl_not_bracketed(void)
{
    drop_bracket();
}

cl_command_queue ug_opencl_transfer_queue(ug_bdev *dev, cl_event **own_event)
{
    cl_command_queue queue = bound ? bound->q.queue : dev->main.queue;
    *own_event = NULL;
    if (bracket.opened && bracket.queue == queue && bracket.transfers++ == 0)
        *own_event = &bracket.transfer;
    else
        drop_bracket();
    return queue;
}

static ug_opencl_queue *queue_of(ug_bdev *dev, ug_bstream *stream)
{
    return stream ? &stream->q : &dev->main;
}

ug_status ug_opencl_queue_open(ug_bdev *dev, ug_opencl_queue *q)
{
    cl_int err;
    /* In order: every kernel of a step follows the previous one and the
     * host never waits between them. Profiled, for timing events; the
     * kernels' own events are not asked for, so it costs them nothing
     * measurable (ug-bench train-mlp's step against its products). */
    q->queue = clCreateCommandQueue(dev->context, dev->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!q->queue)
        return ug_opencl_fail(ug_opencl_status_of(err), "clCreateCommandQueue", err);
    /* Partials of two-pass reductions: 64K slots bound the split count. */
    q->scratch_elems = (size_t)1 << 16;
    q->scratch_v = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, q->scratch_elems * 4, NULL, &err);
    if (q->scratch_v)
        q->scratch_i = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, q->scratch_elems * 4, NULL, &err);
    if (!q->scratch_v || !q->scratch_i) {
        ug_opencl_queue_close(q);
        return ug_opencl_fail(ug_opencl_status_of(err), "clCreateBuffer(reduction scratch)", err);
    }
    return UG_OK;
}

void ug_opencl_queue_close(ug_opencl_queue *q)
{
    if (q->queue)
        clFinish(q->queue);
    if (q->stamp_target)
        clReleaseMemObject(q->stamp_target);
    if (q->scratch_v)
        clReleaseMemObject(q->scratch_v);
    if (q->scratch_i)
        clReleaseMemObject(q->scratch_i);
    if (q->queue)
        clReleaseCommandQueue(q->queue);
    *q = (ug_opencl_queue){0};
}

static cl_int finish_all(ug_bdev *dev)
{
    cl_int first = dev->main.queue ? clFinish(dev->main.queue) : CL_SUCCESS;
    pthread_mutex_lock(&dev->streams_lock);
    for (ug_bstream *s = dev->streams; s; s = s->next) {
        cl_int err = clFinish(s->q.queue);
        if (first == CL_SUCCESS)
            first = err;
    }
    pthread_mutex_unlock(&dev->streams_lock);
    return first;
}

void ug_opencl_finish_all(ug_bdev *dev)
{
    (void)finish_all(dev);
}

ug_status ug_opencl_synchronize(ug_bdev *dev)
{
    cl_int err = finish_all(dev);
    return err == CL_SUCCESS ? UG_OK : ug_opencl_fail(ug_opencl_status_of(err), "clFinish", err);
}

/* ---- streams ---- */

ug_status ug_opencl_stream_create(ug_bdev *dev, ug_bstream **out)
{
    ug_bstream *s = calloc(1, sizeof *s);
    if (!s)
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory for a stream");
    ug_status st = ug_opencl_queue_open(dev, &s->q);
    if (st != UG_OK) {
        free(s);
        return st;
    }
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_PUSH(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    *out = s;
    return UG_OK;
}

void ug_opencl_stream_destroy(ug_bdev *dev, ug_bstream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_REMOVE(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    if (bound == s)
        bound = NULL;
    ug_opencl_queue_close(&s->q); /* finishes its work first */
    free(s);
}

void ug_opencl_stream_bind(ug_bdev *dev, ug_bstream *stream)
{
    (void)dev;
    bound = stream;
}

ug_status ug_opencl_stream_synchronize(ug_bdev *dev, ug_bstream *stream)
{
    cl_int err = clFinish(queue_of(dev, stream)->queue);
    return err == CL_SUCCESS ? UG_OK : ug_opencl_fail(ug_opencl_status_of(err), "clFinish", err);
}

/* ---- events ---- */

ug_status ug_opencl_event_create(ug_bdev *dev, bool timing, ug_bevent **out)
{
    (void)dev;
    ug_bevent *e = calloc(1, sizeof *e);
    if (!e)
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory for an event");
    e->timing = timing;
    *out = e;
    return UG_OK;
}

static void forget(ug_bevent *e)
{
    if (e->marker)
        clReleaseEvent(e->marker);
    if (e->transfer)
        clReleaseEvent(e->transfer);
    e->marker = e->transfer = NULL;
    e->opened_by = 0;
}

void ug_opencl_event_destroy(ug_bdev *dev, ug_bevent *e)
{
    (void)dev;
    if (!e)
        return;
    forget(e);
    free(e);
}

static ug_status stamp_target_of(ug_bdev *dev, ug_opencl_queue *q, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&dev->streams_lock);
    if (!q->stamp_target)
        q->stamp_target = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, sizeof(cl_uint), NULL, &err);
    *out = q->stamp_target;
    pthread_mutex_unlock(&dev->streams_lock);
    return *out ? UG_OK : ug_opencl_fail(ug_opencl_status_of(err), "clCreateBuffer(event stamp)", err);
}

ug_status ug_opencl_event_record(ug_bdev *dev, ug_bevent *e, ug_bstream *stream)
{
    ug_opencl_queue *q = queue_of(dev, stream);
    /* Closing a bracket of one transfer: it takes the transfer's event. */
    cl_event transfer = NULL;
    uint64_t opened_by = 0;
    if (e->timing && bracket.opened && bracket.queue == q->queue && bracket.transfers == 1 && bracket.transfer) {
        transfer = bracket.transfer;
        opened_by = bracket.opened;
        bracket.transfer = NULL;
    }
    drop_bracket();
    cl_event marker = NULL;
    cl_int err;
    const char *call;
    if (e->timing) {
        cl_mem target = NULL;
        UG_BACKEND_TRY(stamp_target_of(dev, q, &target));
        const cl_uint zero = 0;
        err = clEnqueueFillBuffer(q->queue, target, &zero, sizeof zero, 0, sizeof zero, 0, NULL, &marker);
        call = "clEnqueueFillBuffer(event stamp)";
    } else {
        err = clEnqueueMarkerWithWaitList(q->queue, 0, NULL, &marker);
        call = "clEnqueueMarkerWithWaitList";
    }
    if (err != CL_SUCCESS) {
        if (transfer)
            clReleaseEvent(transfer);
        return ug_opencl_fail(ug_opencl_status_of(err), call, err);
    }
    clFlush(q->queue); /* so the event completes without a later wait */
    forget(e);
    e->marker = marker;
    e->transfer = transfer;
    e->opened_by = opened_by;
    e->record = atomic_fetch_add(&records, 1) + 1;
    if (e->timing) /* it opens the thread's next bracket */
        bracket = (struct bracket){.opened = e->record, .queue = q->queue};
    return UG_OK;
}

ug_status ug_opencl_event_wait(ug_bdev *dev, ug_bstream *stream, ug_bevent *e)
{
    drop_bracket(); /* a barrier is queued, or the thread went on to other work */
    if (!e->marker)
        return UG_OK;
    cl_int err = clEnqueueBarrierWithWaitList(queue_of(dev, stream)->queue, 1, &e->marker, NULL);
    return err == CL_SUCCESS ? UG_OK
                             : ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueBarrierWithWaitList", err);
}

ug_status ug_opencl_event_query(ug_bdev *dev, ug_bevent *e, bool *done)
{
    (void)dev;
    *done = true;
    if (!e->marker)
        return UG_OK;
    cl_int status = CL_QUEUED;
    cl_int err = clGetEventInfo(e->marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clGetEventInfo", err);
    if (status < 0)
        return ug_opencl_fail(UG_ERR_BACKEND, "a command before the event failed", status);
    *done = status == CL_COMPLETE;
    return UG_OK;
}

ug_status ug_opencl_event_synchronize(ug_bdev *dev, ug_bevent *e)
{
    (void)dev;
    if (!e->marker)
        return UG_OK;
    cl_int err = clWaitForEvents(1, &e->marker);
    return err == CL_SUCCESS ? UG_OK : ug_opencl_fail(ug_opencl_status_of(err), "clWaitForEvents", err);
}

/* A completed command's CL_PROFILING_COMMAND_START or _END (a bracket's
 * transfer has completed when the fill queued after it has). */
static ug_status command_time(cl_event command, cl_profiling_info which, cl_ulong *ns)
{
    cl_int err = clGetEventProfilingInfo(command, which, sizeof *ns, ns, NULL);
    return err == CL_SUCCESS ? UG_OK
                             : ug_opencl_fail(ug_opencl_status_of(err), "clGetEventProfilingInfo", err);
}

/* A timing event's time: the end of its fill, or of the transfer whose
 * bracket it closes. */
static ug_status stamp_time(const ug_bevent *e, cl_ulong *ns)
{
    if (!e->timing || !e->marker)
        return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                         "OpenCL: the event is not a recorded timing event");
    return command_time(e->transfer ? e->transfer : e->marker, CL_PROFILING_COMMAND_END, ns);
}

ug_status ug_opencl_native(ug_bdev *dev, ug_mem mem, void **address, void **stream)
{
    (void)dev, (void)mem, (void)address, (void)stream;
    return ug_opencl_host->set_error(UG_ERR_UNSUPPORTED,
                                     "OpenCL: its buffers are cl_mem objects, not CUDA or HIP device "
                                     "memory");
}

ug_status ug_opencl_event_elapsed(ug_bdev *dev, ug_bevent *start, ug_bevent *end, int64_t *ns)
{
    (void)dev;
    cl_ulong t0 = 0, t1 = 0;
    UG_BACKEND_TRY(stamp_time(start, &t0));
    UG_BACKEND_TRY(stamp_time(end, &t1));
    /* The bracket start opened and end closed: its transfer's own time. */
    if (end->transfer && end->opened_by == start->record)
        UG_BACKEND_TRY(command_time(end->transfer, CL_PROFILING_COMMAND_START, &t0));
    *ns = (int64_t)(t1 - t0);
    return UG_OK;
}
