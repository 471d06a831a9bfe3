/* The HIP names the module uses, mapped onto CUDA's, so one source tree
 * builds with nvcc for NVIDIA GPUs.
 *
 * Why our own header: Debian's HIP headers for the NVIDIA platform do not
 * compile with CUDA 12/13 (removed cudaDeviceProp fields, changed
 * signatures). This maps only what the module uses; add a line here when the
 * sources start using another HIP call. Kernel syntax (__global__,
 * __shared__, <<<>>>, threadIdx, __syncthreads) is the same in both. */
#ifndef UG_HIP_TO_CUDA_H
#define UG_HIP_TO_CUDA_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* Types and constants. */
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipStream_t cudaStream_t
#define hipEvent_t cudaEvent_t
#define hipEventDisableTiming cudaEventDisableTiming
#define hipErrorNotReady cudaErrorNotReady
#define hipDeviceProp_t cudaDeviceProp
#define hipFuncAttributes cudaFuncAttributes
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipHostMallocDefault cudaHostAllocDefault
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice

/* Runtime calls (same arguments, same meaning). CUDA has no hipInit: the
 * runtime initialises itself on the first call. */
#define hipGetErrorName cudaGetErrorName
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipFuncGetAttributes cudaFuncGetAttributes
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpyPeerAsync cudaMemcpyPeerAsync
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventQuery cudaEventQuery
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipGraph_t cudaGraph_t
#define hipGraphExec_t cudaGraphExec_t
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamIsCapturing cudaStreamIsCapturing
#define hipStreamCaptureStatus cudaStreamCaptureStatus
#define hipStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define hipStreamEndCapture cudaStreamEndCapture
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy

#endif
