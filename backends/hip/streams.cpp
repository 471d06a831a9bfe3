/* Streams and events of the HIP/CUDA module: runtime streams (each with
 * its own BLAS handle and reduction scratch) and runtime events. Entries go
 * to the stream bound on the calling thread (thread-local), else to the
 * device's default one. */
#include <stdlib.h>

#include "backends/hip/internal.h"

struct ug_bevent {
    hipEvent_t event;
};

static thread_local ug_bstream *bound = NULL;

ug_hip_queue *ug_hip_current(ug_bdev *dev) { return bound ? &bound->q : &dev->main; }

static ug_hip_queue *queue_of(ug_bdev *dev, ug_bstream *stream) { return stream ? &stream->q : &dev->main; }

ug_status ug_hip_queue_open(ug_bdev *dev, ug_hip_queue *q)
{
    (void)dev;
    /* Non-blocking: never serialised against the legacy default stream,
     * which vendor libraries or the application may use. */
    hipError_t e = hipStreamCreateWithFlags(&q->stream, hipStreamNonBlocking);
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "StreamCreateWithFlags");
    ug_hip_blas_open(q);
    static const unsigned zeros[UG_HIP_BLOCK_COUNTS] = {0};
    const char *what = UG_HIP_RT "Malloc (a stream's block counts)";
    e = hipMalloc((void **)&q->block_counts, sizeof zeros);
    if (e == hipSuccess) {
        what = UG_HIP_RT "MemcpyAsync (zeroing a stream's block counts)";
        e = hipMemcpyAsync(q->block_counts, zeros, sizeof zeros, hipMemcpyHostToDevice, q->stream);
    }
    if (e != hipSuccess) {
        const ug_status st = ug_hip_fail(e == hipErrorOutOfMemory ? UG_ERR_OUT_OF_MEMORY : UG_ERR_BACKEND, e, what);
        ug_hip_queue_close(q);
        return st;
    }
    return UG_OK;
}

void ug_hip_queue_close(ug_hip_queue *q)
{
    (void)hipStreamSynchronize(q->stream);
    ug_hip_blas_close(q);
    ug_hip_attention_plans_close(q); /* before the handle they were made on */
    ug_hip_conv_close(q);
    if (q->scratch)
        (void)hipFree(q->scratch);
    for (int i = 0; i < q->retired_count; i++)
        (void)hipFree(q->retired[i]);
    if (q->block_counts)
        (void)hipFree(q->block_counts);
    (void)hipStreamDestroy(q->stream);
    (void)hipGetLastError();
    *q = ug_hip_queue{};
}

static ug_status wait_queue(ug_hip_queue *q)
{
    hipError_t e = hipStreamSynchronize(q->stream);
    return e == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "StreamSynchronize");
}

/* Errors of kernels that failed while running surface here. */
ug_status ug_hip_synchronize(ug_bdev *dev)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    ug_status first = wait_queue(&dev->main);
    pthread_mutex_lock(&dev->streams_lock);
    for (ug_bstream *s = dev->streams; s; s = s->next) {
        ug_status st = wait_queue(&s->q);
        if (first == UG_OK)
            first = st;
    }
    pthread_mutex_unlock(&dev->streams_lock);
    return first;
}

ug_status ug_hip_stream_create(ug_bdev *dev, ug_bstream **out)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    ug_bstream *s = (ug_bstream *)calloc(1, sizeof *s);
    if (!s)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for a stream",
                                      UG_HIP_BACKEND);
    ug_status st = ug_hip_queue_open(dev, &s->q);
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

void ug_hip_stream_destroy(ug_bdev *dev, ug_bstream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_REMOVE(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    if (bound == s)
        bound = NULL;
    if (ug_hip_enter(dev) == UG_OK)
        ug_hip_queue_close(&s->q); /* finishes its work first */
    free(s);
}

void ug_hip_stream_bind(ug_bdev *dev, ug_bstream *stream)
{
    (void)dev;
    bound = stream;
}

ug_status ug_hip_stream_synchronize(ug_bdev *dev, ug_bstream *stream)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    return wait_queue(queue_of(dev, stream));
}

ug_status ug_hip_event_create(ug_bdev *dev, bool timing, ug_bevent **out)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    ug_bevent *e = (ug_bevent *)calloc(1, sizeof *e);
    if (!e)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for an event",
                                      UG_HIP_BACKEND);
    hipError_t err = hipEventCreateWithFlags(&e->event, timing ? 0 : hipEventDisableTiming);
    if (err != hipSuccess) {
        free(e);
        return ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "EventCreateWithFlags");
    }
    *out = e;
    return UG_OK;
}

void ug_hip_event_destroy(ug_bdev *dev, ug_bevent *e)
{
    if (!e)
        return;
    if (ug_hip_enter(dev) == UG_OK && hipEventDestroy(e->event) != hipSuccess)
        (void)hipGetLastError();
    free(e);
}

ug_status ug_hip_event_record(ug_bdev *dev, ug_bevent *e, ug_bstream *stream)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t err = hipEventRecord(e->event, queue_of(dev, stream)->stream);
    return err == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "EventRecord");
}

ug_status ug_hip_event_wait(ug_bdev *dev, ug_bstream *stream, ug_bevent *e)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t err = hipStreamWaitEvent(queue_of(dev, stream)->stream, e->event, 0);
    return err == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "StreamWaitEvent");
}

ug_status ug_hip_event_query(ug_bdev *dev, ug_bevent *e, bool *done)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t err = hipEventQuery(e->event);
    *done = err == hipSuccess;
    if (err == hipSuccess || err == hipErrorNotReady) {
        (void)hipGetLastError(); /* not ready is an answer, not an error */
        return UG_OK;
    }
    return ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "EventQuery");
}

ug_status ug_hip_event_synchronize(ug_bdev *dev, ug_bevent *e)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t err = hipEventSynchronize(e->event);
    return err == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "EventSynchronize");
}

ug_status ug_hip_native(ug_bdev *dev, ug_mem mem, void **address, void **stream)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    *address = mem; /* the module's buffers are device pointers */
    *stream = (void *)ug_hip_current(dev)->stream;
    return UG_OK;
}

ug_status ug_hip_event_elapsed(ug_bdev *dev, ug_bevent *start, ug_bevent *end, int64_t *ns)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    float ms = 0.0f;
    hipError_t err = hipEventElapsedTime(&ms, start->event, end->event);
    if (err != hipSuccess)
        return ug_hip_fail(UG_ERR_BACKEND, err, UG_HIP_RT "EventElapsedTime");
    *ns = (int64_t)((double)ms * 1e6);
    return UG_OK;
}

/* Capture: the queue's work becomes a graph, instantiated once and
 * replayed with one launch. Thread-local mode: only this thread's calls
 * that are not stream-ordered (an allocation, a synchronisation) break the
 * capture, not the loader's uploads on its own threads. */
ug_status ug_hip_stream_capture_begin(ug_bdev *dev, ug_bstream *stream)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t e = hipStreamBeginCapture(queue_of(dev, stream)->stream, hipStreamCaptureModeThreadLocal);
    return e == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_UNSUPPORTED, e, UG_HIP_RT "StreamBeginCapture");
}

ug_status ug_hip_stream_capture_end(ug_bdev *dev, ug_bstream *stream, void **replay)
{
    *replay = NULL;
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipGraph_t graph = NULL;
    hipError_t e = hipStreamEndCapture(queue_of(dev, stream)->stream, &graph);
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_UNSUPPORTED, e, UG_HIP_RT "StreamEndCapture");
    hipGraphExec_t exec = NULL;
    e = hipGraphInstantiateWithFlags(&exec, graph, 0);
    (void)hipGraphDestroy(graph);
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_UNSUPPORTED, e, UG_HIP_RT "GraphInstantiateWithFlags");
    *replay = (void *)exec;
    return UG_OK;
}

ug_status ug_hip_stream_replay(ug_bdev *dev, ug_bstream *stream, void *replay)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    hipError_t e = hipGraphLaunch((hipGraphExec_t)replay, queue_of(dev, stream)->stream);
    return e == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "GraphLaunch");
}

void ug_hip_replay_free(ug_bdev *dev, void *replay)
{
    if (replay && ug_hip_enter(dev) == UG_OK && hipGraphExecDestroy((hipGraphExec_t)replay) != hipSuccess)
        (void)hipGetLastError();
}
