/* Streams and events of the OpenCL backend.
 *
 * A side stream is an in-order queue of the device's context with its own
 * reduction scratch; entries go to the queue bound on the calling thread
 * (thread-local), else to the default one. An event is a marker enqueued
 * on the stream's queue; a timing event is a 4-byte fill there instead,
 * whose end the queue's profiling times (see ocl_queue). */
#include <stdlib.h>

#include "backends/opencl/internal.h"

struct ug_bevent {
    bool timing;
    cl_event marker; /* NULL until recorded; a timing event's fill */
};

static _Thread_local ug_bstream *bound;

ocl_queue *ocl_current(ug_bdev *dev) { return bound ? &bound->q : &dev->main; }

static ocl_queue *queue_of(ug_bdev *dev, ug_bstream *stream) { return stream ? &stream->q : &dev->main; }

ug_status ocl_queue_open(ug_bdev *dev, ocl_queue *q)
{
    cl_int err;
    /* In order: every kernel of a step follows the previous one and the
     * host never waits between them. Profiled, for timing events; the
     * kernels' own events are not asked for, so it costs them nothing
     * measurable (ug-bench train-mlp's step against its products). */
    q->queue = clCreateCommandQueue(dev->context, dev->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!q->queue)
        return ocl_fail(ocl_status_of(err), "clCreateCommandQueue", err);
    /* Partials of two-pass reductions: 64K slots bound the split count. */
    q->scratch_elems = (size_t)1 << 16;
    q->scratch_v = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, q->scratch_elems * 4, NULL, &err);
    if (q->scratch_v)
        q->scratch_i = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, q->scratch_elems * 4, NULL, &err);
    if (!q->scratch_v || !q->scratch_i) {
        ocl_queue_close(q);
        return ocl_fail(ocl_status_of(err), "clCreateBuffer(reduction scratch)", err);
    }
    return UG_OK;
}

void ocl_queue_close(ocl_queue *q)
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
    *q = (ocl_queue){0};
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

void ocl_finish_all(ug_bdev *dev) { (void)finish_all(dev); }

ug_status ocl_synchronize(ug_bdev *dev)
{
    cl_int err = finish_all(dev);
    return err == CL_SUCCESS ? UG_OK : ocl_fail(ocl_status_of(err), "clFinish", err);
}

/* ---- streams ---- */

ug_status ocl_stream_create(ug_bdev *dev, ug_bstream **out)
{
    ug_bstream *s = calloc(1, sizeof *s);
    if (!s)
        return ocl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory for a stream");
    ug_status st = ocl_queue_open(dev, &s->q);
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

void ocl_stream_destroy(ug_bdev *dev, ug_bstream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_REMOVE(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    if (bound == s)
        bound = NULL;
    ocl_queue_close(&s->q); /* finishes its work first */
    free(s);
}

void ocl_stream_bind(ug_bdev *dev, ug_bstream *stream)
{
    (void)dev;
    bound = stream;
}

ug_status ocl_stream_synchronize(ug_bdev *dev, ug_bstream *stream)
{
    cl_int err = clFinish(queue_of(dev, stream)->queue);
    return err == CL_SUCCESS ? UG_OK : ocl_fail(ocl_status_of(err), "clFinish", err);
}

/* ---- events ---- */

ug_status ocl_event_create(ug_bdev *dev, bool timing, ug_bevent **out)
{
    (void)dev;
    ug_bevent *e = calloc(1, sizeof *e);
    if (!e)
        return ocl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory for an event");
    e->timing = timing;
    *out = e;
    return UG_OK;
}

static void forget(ug_bevent *e)
{
    if (e->marker)
        clReleaseEvent(e->marker);
    e->marker = NULL;
}

void ocl_event_destroy(ug_bdev *dev, ug_bevent *e)
{
    (void)dev;
    if (!e)
        return;
    forget(e);
    free(e);
}

static ug_status stamp_target_of(ug_bdev *dev, ocl_queue *q, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&dev->streams_lock);
    if (!q->stamp_target)
        q->stamp_target = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, sizeof(cl_uint), NULL, &err);
    *out = q->stamp_target;
    pthread_mutex_unlock(&dev->streams_lock);
    return *out ? UG_OK : ocl_fail(ocl_status_of(err), "clCreateBuffer(event stamp)", err);
}

ug_status ocl_event_record(ug_bdev *dev, ug_bevent *e, ug_bstream *stream)
{
    ocl_queue *q = queue_of(dev, stream);
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
    if (err != CL_SUCCESS)
        return ocl_fail(ocl_status_of(err), call, err);
    clFlush(q->queue); /* so the event completes without a later wait */
    forget(e);
    e->marker = marker;
    return UG_OK;
}

ug_status ocl_event_wait(ug_bdev *dev, ug_bstream *stream, ug_bevent *e)
{
    if (!e->marker)
        return UG_OK;
    cl_int err = clEnqueueBarrierWithWaitList(queue_of(dev, stream)->queue, 1, &e->marker, NULL);
    return err == CL_SUCCESS ? UG_OK : ocl_fail(ocl_status_of(err), "clEnqueueBarrierWithWaitList", err);
}

ug_status ocl_event_query(ug_bdev *dev, ug_bevent *e, bool *done)
{
    (void)dev;
    *done = true;
    if (!e->marker)
        return UG_OK;
    cl_int status = CL_QUEUED;
    cl_int err = clGetEventInfo(e->marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    if (err != CL_SUCCESS)
        return ocl_fail(ocl_status_of(err), "clGetEventInfo", err);
    if (status < 0)
        return ocl_fail(UG_ERR_BACKEND, "a command before the event failed", status);
    *done = status == CL_COMPLETE;
    return UG_OK;
}

ug_status ocl_event_synchronize(ug_bdev *dev, ug_bevent *e)
{
    (void)dev;
    if (!e->marker)
        return UG_OK;
    cl_int err = clWaitForEvents(1, &e->marker);
    return err == CL_SUCCESS ? UG_OK : ocl_fail(ocl_status_of(err), "clWaitForEvents", err);
}

static ug_status stamp_time(const ug_bevent *e, cl_ulong *ns)
{
    if (!e->timing || !e->marker)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT, "OpenCL: the event is not a recorded timing event");
    cl_int err = clGetEventProfilingInfo(e->marker, CL_PROFILING_COMMAND_END, sizeof *ns, ns, NULL);
    return err == CL_SUCCESS ? UG_OK : ocl_fail(ocl_status_of(err), "clGetEventProfilingInfo", err);
}

ug_status ocl_native(ug_bdev *dev, ug_mem mem, void **address, void **stream)
{
    (void)dev, (void)mem, (void)address, (void)stream;
    return ocl_host->set_error(UG_ERR_UNSUPPORTED, "OpenCL: its buffers are cl_mem objects, not CUDA or HIP device "
                                                   "memory");
}

ug_status ocl_event_elapsed(ug_bdev *dev, ug_bevent *start, ug_bevent *end, int64_t *ns)
{
    (void)dev;
    cl_ulong t0 = 0, t1 = 0;
    UG_BACKEND_TRY(stamp_time(start, &t0));
    UG_BACKEND_TRY(stamp_time(end, &t1));
    *ns = (int64_t)(t1 - t0);
    return UG_OK;
}
