/* The emulated CUDA runtime (fake_cuda/cuda_runtime.h): the kernel
 * scheduler, device memory and the machine's bookkeeping (streams, events,
 * capture and graphs: emu_streams.cpp).
 *
 * Scheduling. Each GPU thread of a block is a fiber (ucontext) with its own
 * stack, all on the calling OS thread. __syncthreads() switches back to the
 * scheduler; once every thread of the block waits at the barrier, the next
 * phase starts. Blocks run one after another. Fibers rather than one OS
 * thread per GPU thread: creating and waking 256 threads per block cost over
 * a minute of system time for the suite, and fibers also make every run
 * the same, so a failure reproduces. A block whose thread 0 finishes without
 * a barrier runs its other threads as plain calls (see run_block).
 *
 * GPU threads between two barriers may run in any order. The scheduler runs
 * them in increasing order in some phases and decreasing order in others
 * (see run_block), so a kernel that reads another thread's shared-memory
 * store, or overwrites a value another thread has still to read, without a
 * barrier in between, computes a wrong value in one of the two orders. A
 * barrier that not every thread of the block reaches (undefined behaviour on
 * a GPU) fails the launch, as does a configuration beyond CUDA's limits.
 *
 * Switching. A fiber is made once (makecontext, entered with setcontext)
 * and then lives for the whole process, waiting between blocks in
 * fiber_main's loop; every later switch is the compiler's
 * __builtin_setjmp/__builtin_longjmp (GCC and clang), which saves only the
 * frame, stack pointer and resume address and makes no system call
 * (swapcontext makes two per switch, which was most of the emulator's run
 * time; sigsetjmp/siglongjmp would also do, but AddressSanitizer intercepts
 * them with a system call and a stack clean-up each). Every jump lands in a
 * frame that is still live, and no instrumented frame is left behind, except
 * a waiting fiber's when it is made anew; its stack's shadow is cleared then.
 * AddressSanitizer builds print "ASan doesn't fully support makecontext/
 * swapcontext" once: every switch here is announced to it
 * (__sanitizer_start/finish_switch_fiber), which is the supported way. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "cuda_fp16.h"
#include "emu_machine.h"

/* AddressSanitizer must be told about every stack switch, or it reports
 * false errors on the fiber stacks (GCC and clang spell the test apart). */
#if defined(__SANITIZE_ADDRESS__)
#define UG_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UG_EMU_ASAN 1
#endif
#endif
#ifdef UG_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

using namespace emu;

dim3 threadIdx, blockIdx, blockDim, gridDim;

long long clock64(void)
{
    static long long cycles; /* under the launch's lock, as every kernel runs */
    return cycles += 1LL << 20;
}

/* Continues at the __builtin_setjmp that filled env (emu_jump.cpp: not
 * instrumented, and in a file of its own because __builtin_longjmp may not
 * be called where __builtin_setjmp is). */
void ug_emu_jump(void **env);

namespace {

/* A GPU thread's stack: kernels are shallow, but sanitizers and -O0 make
 * frames large. A guard page below each catches an overflow. */
const size_t kStackBytes = 256 * 1024;
const size_t kGuardBytes = 4096;
const unsigned kMaxBlockThreads = 1024;

struct Fiber {
    void *env[5];         /* where it waits (__builtin_setjmp): at a barrier, or for its next block */
    char *stack;          /* lowest usable address */
    dim3 tid;
    bool done;
    bool started;         /* made and entered once: later resumed at env */
    void *asan_fake_stack;
};

struct Scheduler {
    void *home[5];        /* the launching code, between fibers */
    ucontext_t boot;      /* a new fiber's first context */
    Fiber *fibers = nullptr;
    unsigned capacity = 0;
    pthread_t owner;      /* the OS thread the started fibers were entered from */
    Fiber *current = nullptr;
    void (*body)(void *) = nullptr;
    void *ctx = nullptr;
    bool direct = false;          /* running threads as plain calls */
    bool direct_barrier = false;  /* and one of them called __syncthreads */
    void *home_fake_stack = nullptr;
    const void *home_bottom = nullptr;
    size_t home_size = 0;
};
Scheduler g_sched;

} // namespace

namespace emu {

Machine g_machine;
std::recursive_mutex g_lock;

cudaError_t record(cudaError_t e)
{
    if (e != cudaSuccess)
        g_machine.last_error = e;
    return e;
}

bool stream_ok(cudaStream_t s) { return s == nullptr || g_machine.streams.count(s) != 0; }

Capture *capture_of(cudaStream_t s)
{
    auto it = g_machine.captures.find(s);
    return it == g_machine.captures.end() ? nullptr : &it->second;
}

bool forbidden_in_capture()
{
    bool forbidden = false;
    for (auto &c : g_machine.captures)
        if (c.second.mode == cudaStreamCaptureModeGlobal ||
            (c.second.mode == cudaStreamCaptureModeThreadLocal && pthread_equal(c.second.thread, pthread_self()))) {
            c.second.invalid = true;
            forbidden = true;
        }
    return forbidden;
}

void on_stream(cudaStream_t stream, std::function<void()> body)
{
    if (Capture *c = capture_of(stream))
        c->work.push_back(std::move(body));
    else
        body();
}

} // namespace emu

namespace {

void start_switch(void **save, const void *bottom, size_t size)
{
#ifdef UG_EMU_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
}

void finish_switch(void *save, const void **bottom_old, size_t *size_old)
{
#ifdef UG_EMU_ASAN
    __sanitizer_finish_switch_fiber(save, bottom_old, size_old);
#else
    (void)save, (void)bottom_old, (void)size_old;
#endif
}

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "CUDA emulator: %s\n", what);
    abort();
}

/* From the running fiber back to the launching code; returns when the
 * scheduler resumes it (the next phase, or the next block). */
__attribute__((noinline)) void yield_to_home()
{
    Fiber *const f = g_sched.current;
    if (__builtin_setjmp(f->env) == 0) {
        start_switch(&f->asan_fake_stack, g_sched.home_bottom, g_sched.home_size);
        ug_emu_jump(g_sched.home);
    }
    finish_switch(f->asan_fake_stack, &g_sched.home_bottom, &g_sched.home_size);
}

/* A fiber's whole life: one GPU thread per resumption from its block's
 * start, then it waits for the next block. */
[[noreturn]] void fiber_main()
{
    /* First entry: learn the launching stack, to switch back to it. */
    finish_switch(nullptr, &g_sched.home_bottom, &g_sched.home_size);
    for (;;) {
        g_sched.body(g_sched.ctx);
        g_sched.current->done = true;
        yield_to_home();
    }
}

void reserve_fibers(unsigned n)
{
    /* Fibers entered from another OS thread are left where they wait and
     * made anew: a parked frame belongs to the thread that ran it. */
    if (g_sched.capacity > 0 && !pthread_equal(g_sched.owner, pthread_self()))
        for (unsigned i = 0; i < g_sched.capacity; i++)
            g_sched.fibers[i].started = false;
    g_sched.owner = pthread_self();
    if (n <= g_sched.capacity)
        return;
    /* Grown once to the largest block seen and kept: mapping stacks per
     * block would dominate the run time. */
    Fiber *fibers = new Fiber[n](); /* zeroed: not started */
    for (unsigned i = 0; i < n; i++) {
        if (i < g_sched.capacity) {
            fibers[i].stack = g_sched.fibers[i].stack;
            continue; /* made anew: a waiting fiber's env points into the old array's frame */
        }
        void *m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED || mprotect(m, kGuardBytes, PROT_NONE) != 0)
            die("cannot map a GPU thread's stack");
        fibers[i].stack = (char *)m + kGuardBytes;
    }
    delete[] g_sched.fibers;
    g_sched.fibers = fibers;
    g_sched.capacity = n;
}

/* Runs fiber f until it waits at a barrier or its GPU thread finishes. */
__attribute__((noinline)) void resume(Fiber *f)
{
    g_sched.current = f;
    threadIdx = f->tid;
    if (__builtin_setjmp(g_sched.home) == 0) {
        start_switch(&g_sched.home_fake_stack, f->stack, kStackBytes);
        if (f->started)
            ug_emu_jump(f->env);
        /* Its first entry (a system call or two, once per fiber), on a stack
         * whose old frames, if any, are abandoned. */
        f->started = true;
        f->asan_fake_stack = nullptr;
#ifdef UG_EMU_ASAN
        __asan_unpoison_memory_region(f->stack, kStackBytes);
#endif
        /* Cleared first: g++ 12 warns that getcontext reads it otherwise. */
        memset(&g_sched.boot, 0, sizeof g_sched.boot);
        if (getcontext(&g_sched.boot) != 0)
            die("getcontext failed");
        g_sched.boot.uc_stack.ss_sp = f->stack;
        g_sched.boot.uc_stack.ss_size = kStackBytes;
        g_sched.boot.uc_link = nullptr;
        makecontext(&g_sched.boot, fiber_main, 0);
        setcontext(&g_sched.boot);
        die("setcontext failed");
    }
    finish_switch(g_sched.home_fake_stack, nullptr, nullptr);
    g_sched.current = nullptr;
}

dim3 thread_of(unsigned i, dim3 block)
{
    return dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
}

Fiber *prepare(unsigned i, dim3 block)
{
    Fiber *f = &g_sched.fibers[i];
    f->tid = thread_of(i, block);
    f->done = false;
    return f;
}

/* Runs one block to completion; false if its barriers diverged. seq: the
 * block's number in the launch, which picks the order of its threads. */
bool run_block(dim3 block, uint64_t seq)
{
    const unsigned n = block.x * block.y * block.z;
    reserve_fibers(n);
    /* Thread 0 first. If it never waits at a barrier, no thread of the
     * block may (each barrier must be reached by all), so the others run as
     * plain calls: cheaper than fibers, and the element-wise
     * kernels have no barrier at all. */
    Fiber *first = prepare(0, block);
    resume(first);
    if (first->done) {
        g_sched.direct = true;
        g_sched.direct_barrier = false;
        for (unsigned i = 1; i < n; i++) {
            threadIdx = thread_of(i, block);
            g_sched.body(g_sched.ctx);
        }
        g_sched.direct = false;
        return !g_sched.direct_barrier;
    }
    for (unsigned i = 1; i < n; i++)
        prepare(i, block);
    bool ok = true;
    for (unsigned phase = 0, live = n; live > 0; phase++) {
        /* Increasing or decreasing thread order, alternating between phases
         * and between neighbouring blocks, so every phase of a kernel runs
         * in both orders when the grid has two blocks or more. */
        const bool down = (phase + seq) % 2 != 0;
        (down ? g_machine.stats.phases_decreasing : g_machine.stats.phases_increasing)++;
        unsigned waiting = phase == 0 ? 1 : 0; /* thread 0 has run phase 0 */
        for (unsigned k = 0; k < n; k++) {
            Fiber *f = &g_sched.fibers[down ? n - 1 - k : k];
            if (f->done || (phase == 0 && f == first))
                continue;
            resume(f);
            waiting += !f->done;
        }
        /* Which __syncthreads a thread waits in is not checked: the
         * compiler may duplicate one call site into several. */
        if (waiting != 0 && waiting != live)
            ok = false; /* some threads left while others wait at a barrier */
        live = waiting;
    }
    return ok;
}

/* CUDA's limits on a launch (compute capability 3.0 and later). */
bool valid_config(dim3 g, dim3 b)
{
    return g.x >= 1 && g.y >= 1 && g.z >= 1 && b.x >= 1 && b.y >= 1 && b.z >= 1 &&
           g.x <= 2147483647u && g.y <= 65535u && g.z <= 65535u && b.x <= 1024u &&
           b.y <= 1024u && b.z <= 64u && (uint64_t)b.x * b.y * b.z <= kMaxBlockThreads;
}

/* Does [p, p + bytes) lie inside one live device allocation? */
bool device_range(const void *p, size_t bytes)
{
    const char *c = (const char *)p;
    auto it = g_machine.device_allocs.upper_bound(c);
    if (it == g_machine.device_allocs.begin())
        return false;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second;
}

} // namespace

void __syncthreads(void)
{
    if (g_sched.direct) {
        g_sched.direct_barrier = true; /* divergent: thread 0 saw no barrier */
        return;
    }
    if (!g_sched.current)
        die("__syncthreads called outside a kernel");
    yield_to_home();
}

namespace {

void run_grid(const std::function<void()> &body, dim3 grid, dim3 block)
{
    if (g_sched.current || g_sched.direct)
        die("a kernel launched a kernel (not emulated)");
    g_sched.body = [](void *p) { (*static_cast<const std::function<void()> *>(p))(); };
    g_sched.ctx = const_cast<std::function<void()> *>(&body);
    gridDim = grid;
    blockDim = block;
    bool ok = true;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                if (!run_block(block, g_machine.stats.blocks) && ok) {
                    fprintf(stderr,
                            "CUDA emulator: block (%u,%u,%u) of a %ux%ux%u grid of %ux%ux%u "
                            "threads: a __syncthreads was not reached by every thread\n",
                            x, y, z, grid.x, grid.y, grid.z, block.x, block.y, block.z);
                    ok = false;
                }
                g_machine.stats.blocks++;
            }
    g_machine.stats.gpu_threads += (uint64_t)grid.x * grid.y * grid.z * block.x * block.y * block.z;
    if (!ok) {
        g_machine.stats.failed_launches++;
        record(cudaErrorLaunchFailure);
    }
}

} // namespace

void ug_emu_launch_grid(const std::function<void()> &body, dim3 grid, dim3 block, size_t shared,
                        cudaStream_t stream)
{
    EMU_LOCKED;
    if (g_sched.current || g_sched.direct)
        die("a kernel launched a kernel (not emulated)");
    g_machine.stats.launches++;
    /* The module's kernels use static shared memory only. */
    if (!valid_config(grid, block) || shared != 0 || !stream_ok(stream)) {
        g_machine.stats.failed_launches++;
        if (Capture *c = capture_of(stream))
            c->invalid = true;
        record(stream_ok(stream) ? cudaErrorInvalidConfiguration : cudaErrorInvalidResourceHandle);
        return;
    }
    on_stream(stream, [body, grid, block] { run_grid(body, grid, block); });
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t cudaGetLastError(void)
{
    EMU_LOCKED;
    const cudaError_t e = g_machine.last_error;
    g_machine.last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    EMU_LOCKED;
    /* UG_EMU_DEVICES=N: a machine of N GPUs (one address space), for a
     * pipeline's stages or replicas on several */
    static bool configured;
    const char *devices = getenv("UG_EMU_DEVICES");
    if (!configured && devices && atoi(devices) >= 1 && atoi(devices) <= 8)
        g_machine.devices = atoi(devices);
    configured = true;
    *count = g_machine.devices;
    return record(g_machine.devices > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device)
{
    EMU_LOCKED;
    if (device < 0 || device >= g_machine.devices)
        return record(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "Emulated GPU");
    p->totalGlobalMem = g_machine.memory;
    p->multiProcessorCount = g_machine.sm_count;
    p->maxThreadsPerBlock = (int)kMaxBlockThreads;
    p->major = 8;
    p->minor = 6;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    EMU_LOCKED;
    if (device < 0 || device >= g_machine.devices)
        return record(cudaErrorInvalidDevice);
    g_machine.current_device = device;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, const void *func)
{
    EMU_LOCKED;
    if (!func)
        return record(cudaErrorInvalidValue);
    attr->maxThreadsPerBlock = (int)kMaxBlockThreads;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    EMU_LOCKED;
    if (forbidden_in_capture())
        return record(cudaErrorStreamCaptureUnsupported);
    if (bytes > g_machine.memory - g_machine.used)
        return record(cudaErrorMemoryAllocation);
    /* Exactly the bytes asked for, so AddressSanitizer (sanitizer builds)
     * catches a kernel reading or writing past a buffer; filled with 0xff,
     * a NaN in f32 and f16, so a kernel reading memory nobody wrote gives
     * NaN (as CUDA, cudaMalloc leaves the contents undefined). */
    char *p = (char *)malloc(bytes ? bytes : 1);
    if (!p)
        return record(cudaErrorMemoryAllocation);
    memset(p, 0xff, bytes);
    g_machine.device_allocs[p] = bytes;
    g_machine.used += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    EMU_LOCKED;
    if (forbidden_in_capture())
        return record(cudaErrorStreamCaptureUnsupported);
    if (!ptr)
        return cudaSuccess;
    auto it = g_machine.device_allocs.find((const char *)ptr);
    if (it == g_machine.device_allocs.end())
        return record(cudaErrorInvalidValue);
    g_machine.used -= it->second;
    g_machine.device_allocs.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags)
{
    EMU_LOCKED;
    if (flags != cudaHostAllocDefault)
        return record(cudaErrorInvalidValue);
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return record(cudaErrorMemoryAllocation);
    g_machine.host_allocs.insert(p);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
    EMU_LOCKED;
    if (g_machine.host_allocs.erase(ptr) == 0)
        return record(cudaErrorInvalidValue);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    EMU_LOCKED;
    /* The device side of a copy must lie inside one allocation: an offset
     * bug in the module's transfers fails here rather than corrupting. */
    const bool dst_dev = kind != cudaMemcpyDeviceToHost, src_dev = kind != cudaMemcpyHostToDevice;
    if (!stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    if ((dst_dev && !device_range(dst, bytes)) || (src_dev && !device_range(src, bytes))) {
        if (Capture *c = capture_of(stream))
            c->invalid = true;
        return record(cudaErrorInvalidValue);
    }
    /* Captured, the host side is read or written when the graph replays,
     * so it must still be there then (as with CUDA). Overlapping ranges
     * are an error (ASan reports them). */
    on_stream(stream, [dst, src, bytes] { memcpy(dst, src, bytes); });
    return cudaSuccess;
}

/* Both sides are device memory (of any of the machine's devices: one
 * address space), copied in order on stream. */
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t bytes,
                                cudaStream_t stream)
{
    EMU_LOCKED;
    if (dst_device < 0 || dst_device >= g_machine.devices || src_device < 0 || src_device >= g_machine.devices)
        return record(cudaErrorInvalidDevice);
    if (!stream_ok(stream))
        return record(cudaErrorInvalidResourceHandle);
    if (!device_range(dst, bytes) || !device_range(src, bytes)) {
        if (Capture *c = capture_of(stream))
            c->invalid = true;
        return record(cudaErrorInvalidValue);
    }
    on_stream(stream, [dst, src, bytes] { memcpy(dst, src, bytes); });
    return cudaSuccess;
}

extern "C" void ug_emu_configure(int devices, int sm_count, size_t memory_bytes)
{
    EMU_LOCKED;
    g_machine.devices = devices;
    g_machine.sm_count = sm_count;
    g_machine.memory = memory_bytes;
}

extern "C" void ug_emu_get_stats(ug_emu_stats *stats)
{
    EMU_LOCKED;
    *stats = g_machine.stats;
    stats->live_allocations = (int64_t)g_machine.device_allocs.size();
    stats->live_host_allocations = (int64_t)g_machine.host_allocs.size();
    stats->live_streams = (int64_t)g_machine.streams.size();
    stats->live_events = (int64_t)g_machine.events.size();
    stats->live_graphs = (int64_t)(g_machine.graphs.size() + g_machine.execs.size());
    stats->live_bytes = g_machine.used;
}

namespace {

/* At exit, as LeakSanitizer does: by then the library has closed every
 * device (core/runtime/device.c, at exit), so the module must have returned every
 * device allocation, pinned buffer and stream to the runtime, and no launch
 * may have failed unnoticed. Otherwise the process fails (status 1), which
 * fails whichever test ran on the emulated device. Declared after
 * g_machine, so it runs first. UG_EMU_EXIT_CHECK=0 turns it off for a
 * process that leaves objects open on purpose (as detect_leaks=0 does for
 * LeakSanitizer). */
struct ExitCheck {
    ~ExitCheck()
    {
        const char *check = getenv("UG_EMU_EXIT_CHECK");
        if (check && strcmp(check, "0") == 0)
            return;
        ug_emu_stats s;
        ug_emu_get_stats(&s);
        if (s.live_allocations == 0 && s.live_host_allocations == 0 && s.live_streams == 0 &&
            s.live_events == 0 && s.live_graphs == 0 && s.failed_launches == 0)
            return;
        fflush(stdout);
        fprintf(stderr,
                "CUDA emulator: at exit %lld device allocations (%zu bytes), %lld pinned host "
                "allocations, %lld streams, %lld events and %lld graphs are still live, and %llu "
                "launches failed\n",
                (long long)s.live_allocations, s.live_bytes, (long long)s.live_host_allocations,
                (long long)s.live_streams, (long long)s.live_events, (long long)s.live_graphs,
                (unsigned long long)s.failed_launches);
        fflush(stderr);
        _exit(1);
    }
} g_exit_check;

} // namespace

extern "C" uint16_t ug_emu_f32_to_f16(float value)
{
    return __half_as_ushort(__float2half_rn(value));
}

extern "C" float ug_emu_f16_to_f32(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
