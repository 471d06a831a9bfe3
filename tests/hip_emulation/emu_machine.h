/* The emulated CUDA runtime's state, shared by its files: emu_runtime.cpp
 * (the kernel scheduler, device memory, the machine's bookkeeping) and
 * emu_streams.cpp (streams, events, stream capture and graphs). */
#ifndef UG_EMU_MACHINE_H
#define UG_EMU_MACHINE_H

#include <pthread.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "cuda_runtime.h"
#include "emu_control.h"

namespace emu {

struct EmuEvent {
    bool timing = true, recorded = false;
    double ms = 0; /* the host's monotonic clock at the record */
};

/* Work recorded in order: a captured stream's, a graph's. */
typedef std::vector<std::function<void()>> Work;

struct Capture {
    Work work;
    cudaStreamCaptureMode mode;
    pthread_t thread;
    bool invalid = false;
};

struct Machine {
    int devices = 1, sm_count = 8, current_device = 0;
    std::map<cudaStream_t, Capture> captures;
    std::set<const Work *> graphs, execs; /* cudaGraph_t and cudaGraphExec_t are Work */
    int fail_next_capture = 0;
    size_t memory = (size_t)4 << 30, used = 0;
    cudaError_t last_error = cudaSuccess;
    std::map<const char *, size_t> device_allocs; /* start -> bytes */
    std::set<void *> host_allocs;
    std::set<cudaStream_t> streams;
    uintptr_t next_stream = 0x5000;
    std::map<cudaEvent_t, EmuEvent> events;
    uintptr_t next_event = 0x9000;
    ug_emu_stats stats = {};
};
extern Machine g_machine;

/* The library's threads (the data loader's workers upload batches) may call
 * into the runtime at once, as they may into CUDA's: every call, a whole
 * launch included, holds this lock (recursive: a call may make another). */
extern std::recursive_mutex g_lock;
#define EMU_LOCKED std::lock_guard<std::recursive_mutex> emu_locked_(emu::g_lock)

/* Sets the "last error" (as CUDA does) and returns e. */
cudaError_t record(cudaError_t e);
bool stream_ok(cudaStream_t s);
/* The stream's capture, or NULL when it is not being captured. */
Capture *capture_of(cudaStream_t s);
/* A call that is not stream-ordered, as CUDA forbids it during a global
 * capture (from any thread) or a thread-local one (from its thread): true
 * when it must fail, and those captures are invalidated. */
bool forbidden_in_capture();
/* Runs body, or records it when stream is being captured. */
void on_stream(cudaStream_t stream, std::function<void()> body);

} // namespace emu

#endif
