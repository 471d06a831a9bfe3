/* A CPU stand-in for the part of the CUDA runtime that the HIP/CUDA module
 * uses (backends/hip/hip_to_cuda.h maps the module's HIP names onto these),
 * so the module's own kernels (kernels/hip/ *.h, launched by
 * backends/hip/ *.hip) and host code (backends/hip/ *.cpp) compile with
 * g++ and run without a GPU.
 *
 * Device memory is host memory; every call completes before it returns (the
 * stream order is trivially kept), except on a stream being captured
 * (cudaStreamBeginCapture), whose work is recorded into a graph and runs
 * when the graph is launched. A launch runs every block of the grid, one
 * after another, each GPU thread as a fiber (emu_runtime.cpp).
 * launch_to_call.cmake rewrites `k<<<grid, block, shared, stream>>>(args)`
 * into ug_emu_launcher(grid, block, shared, stream).run(k, args): the
 * arguments are evaluated and copied at the launch, as CUDA does.
 *
 * Only what the module uses is here: add a call when the module starts
 * using one (the build fails until then, which is the point). */
#ifndef UG_EMU_CUDA_RUNTIME_H
#define UG_EMU_CUDA_RUNTIME_H

#ifndef __cplusplus
#error "the emulated CUDA runtime is C++ (the module's sources are)"
#endif

#include <math.h>
#include <stddef.h>

#include <functional>
#include <stdint.h>
#include <string.h>

/* Kernel-language qualifiers. __shared__ becomes static: the blocks of a
 * launch run one at a time, so one copy per kernel is one copy per block. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* CUDA's vector type, as the kernels load four floats of shared memory. */
struct float4 {
    float x, y, z, w;
};

/* Set by the scheduler before it resumes a GPU thread. */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

/* Waits until every thread of the block has arrived (a fiber switch). */
void __syncthreads(void);

/* The blocks of a launch run one at a time, and a block's threads switch
 * only at barriers: an add is atomic as it stands, and a fence has
 * nothing to order. */
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    const unsigned old = *p;
    *p = old + v;
    return old;
}
inline void __threadfence(void) {}

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureWrongThread = 908
} cudaError_t;

typedef struct ug_emu_stream *cudaStream_t;
typedef struct ug_emu_event *cudaEvent_t;
typedef struct ug_emu_graph *cudaGraph_t;
typedef struct ug_emu_graph_exec *cudaGraphExec_t;
/* Global and thread-local capture forbid, on the capturing thread (and
 * for global, every thread), the calls that are not stream-ordered:
 * allocation, synchronisation; they fail with
 * cudaErrorStreamCaptureUnsupported and invalidate the capture. */
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount, maxThreadsPerBlock, major, minor;
};
struct cudaFuncAttributes {
    int maxThreadsPerBlock;
};
enum cudaMemcpyKind {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
};
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

/* Every call records its error as the "last error" (as CUDA does); launches
 * report a bad configuration or a divergent __syncthreads only there. */
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, const void *func);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t bytes,
                                cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
/* Capture: the stream's work from Begin to End becomes a graph (a failed
 * call in between invalidates it: End then returns
 * cudaErrorStreamCaptureInvalidated and no graph); an instance of it
 * replays that work, in order, on the stream it is launched on. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2
};
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                          unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
/* Kernels run when launched, so an event completes when recorded, and its
 * time is the host's clock then. */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* Device intrinsics. The CPU rounds every f32 operation to nearest (the
 * module is built with -ffp-contract=off, so nothing is fused). */
inline float __int_as_float(int i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
/* The SM's cycle counter: here each read advances it by 2^20, so a kernel
 * that spins for a count of cycles (the GEMM timing's hold) ends after a
 * few reads, as every emulated launch must before the call returns. */
long long clock64(void);

/* Runs body() once per GPU thread of every block of grid (body is the
 * rewritten launch: a call of the kernel with its arguments), now or, on
 * a stream being captured, when the graph replays. */
void ug_emu_launch_grid(const std::function<void()> &body, dim3 grid, dim3 block, size_t shared,
                        cudaStream_t stream);

/* A launch's configuration; run(kernel, args...) copies the arguments now
 * (evaluated at the launch, as CUDA does) into the body that runs. */
struct ug_emu_launcher {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    ug_emu_launcher(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), shared(s), stream(st)
    {
    }
    template <class K, class... A> void run(K kernel, A... args) const
    {
        ug_emu_launch_grid([kernel, args...]() { kernel(args...); }, grid, block, shared, stream);
    }
};

#endif
