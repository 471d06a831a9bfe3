/* The emulated CUDA runtime's streams, events, stream capture and graphs
 * (see cuda_runtime.h). Work runs when issued, except on a stream being
 * captured: there it is recorded (on_stream) for the graph's replays. */
#include <time.h>

#include "emu_machine.h"

using namespace emu;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    EMU_LOCKED;
    if (flags != cudaStreamNonBlocking && flags != 0)
        return record(cudaErrorInvalidValue);
    /* A distinct handle that is never dereferenced. */
    *stream = (cudaStream_t)(g_machine.next_stream += 0x10);
    g_machine.streams.insert(*stream);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    EMU_LOCKED;
    g_machine.captures.erase(stream);
    return record(g_machine.streams.erase(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    EMU_LOCKED;
    if (Capture *c = capture_of(stream)) {
        c->invalid = true;
        return record(cudaErrorStreamCaptureUnsupported);
    }
    if (forbidden_in_capture())
        return record(cudaErrorStreamCaptureUnsupported);
    return record(stream_ok(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode)
{
    EMU_LOCKED;
    /* The legacy default stream cannot be captured. */
    if (!stream || !stream_ok(stream))
        return record(stream ? cudaErrorInvalidResourceHandle : cudaErrorStreamCaptureUnsupported);
    if (capture_of(stream) || mode > cudaStreamCaptureModeRelaxed)
        return record(cudaErrorInvalidValue);
    Capture &c = g_machine.captures[stream];
    c.mode = mode;
    c.thread = pthread_self();
    if (g_machine.fail_next_capture > 0) { /* ug_emu_fail_captures */
        g_machine.fail_next_capture--;
        c.invalid = true;
    }
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    EMU_LOCKED;
    Capture *c = capture_of(stream);
    *graph = nullptr;
    if (!c)
        return record(cudaErrorIllegalState);
    if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self()))
        return record(cudaErrorStreamCaptureWrongThread);
    const bool invalid = c->invalid;
    Work *work = invalid ? nullptr : new Work(std::move(c->work));
    g_machine.captures.erase(stream);
    if (invalid)
        return record(cudaErrorStreamCaptureInvalidated);
    g_machine.graphs.insert(work);
    *graph = (cudaGraph_t)work;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status)
{
    EMU_LOCKED;
    if (stream && !stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    const Capture *c = stream ? capture_of(stream) : nullptr;
    *status = !c ? cudaStreamCaptureStatusNone
              : c->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    EMU_LOCKED;
    auto it = g_machine.graphs.find((const Work *)graph);
    if (it == g_machine.graphs.end() || flags != 0)
        return record(cudaErrorInvalidValue);
    Work *copy = new Work(**it);
    g_machine.execs.insert(copy);
    *exec = (cudaGraphExec_t)copy;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    EMU_LOCKED;
    auto it = g_machine.execs.find((const Work *)exec);
    if (it == g_machine.execs.end() || !stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    g_machine.stats.graph_launches++;
    const Work *work = *it;
    on_stream(stream, [work] {
        for (const auto &step : *work)
            step();
    });
    return cudaSuccess;
}

namespace {
/* A graph or an instance (both are Work), taken out of its set. */
cudaError_t destroy_work(std::set<const Work *> &live, const void *handle)
{
    EMU_LOCKED;
    if (!live.erase((const Work *)handle))
        return record(cudaErrorInvalidResourceHandle);
    delete (const Work *)handle;
    return cudaSuccess;
}
} // namespace

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return destroy_work(g_machine.execs, exec); }

cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return destroy_work(g_machine.graphs, graph); }

extern "C" int ug_emu_stream_work(void *stream, void (*fn)(const void *ctx), const void *ctx, size_t bytes)
{
    EMU_LOCKED;
    cudaStream_t s = (cudaStream_t)stream;
    if (!stream_ok(s))
        return record(cudaErrorInvalidResourceHandle);
    std::vector<char> copy((const char *)ctx, (const char *)ctx + bytes);
    on_stream(s, [fn, copy] { fn(copy.data()); });
    return cudaSuccess;
}

extern "C" void ug_emu_fail_captures(int count)
{
    EMU_LOCKED;
    g_machine.fail_next_capture = count;
}

namespace {
double host_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

EmuEvent *event_of(cudaEvent_t e)
{
    auto it = g_machine.events.find(e);
    return it == g_machine.events.end() ? nullptr : &it->second;
}
} // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
    EMU_LOCKED;
    if (flags & ~(unsigned)cudaEventDisableTiming)
        return record(cudaErrorInvalidValue);
    *event = (cudaEvent_t)(g_machine.next_event += 0x10);
    g_machine.events[*event].timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    EMU_LOCKED;
    return record(g_machine.events.erase(event) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    EMU_LOCKED;
    EmuEvent *e = event_of(event);
    if (!e || !stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    on_stream(stream, [event] {
        if (EmuEvent *live = event_of(event)) {
            live->recorded = true;
            live->ms = host_ms();
        }
    });
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
    EMU_LOCKED;
    if (!event_of(event) || !stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    return record(flags == 0 ? cudaSuccess : cudaErrorInvalidValue);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    EMU_LOCKED;
    return record(event_of(event) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    EMU_LOCKED;
    if (forbidden_in_capture())
        return record(cudaErrorStreamCaptureUnsupported);
    return record(event_of(event) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    EMU_LOCKED;
    EmuEvent *a = event_of(start), *b = event_of(end);
    if (!a || !b || !a->timing || !b->timing || !a->recorded || !b->recorded)
        return record(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

