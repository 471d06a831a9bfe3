/* What a test (test_emulator.c) may ask of the emulated CUDA runtime
 * (emu_runtime.cpp) inside the emulated libunigrad-cuda.so: the machine it
 * pretends to be (before the library's discovery), and its bookkeeping. */
#ifndef UG_EMU_CONTROL_H
#define UG_EMU_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported by the emulated libunigrad-cuda.so (built with hidden
 * visibility, like the real module). */
#define UG_EMU_API __attribute__((visibility("default")))

/* Devices reported by cudaGetDeviceCount (0: cudaErrorNoDevice), their SM
 * count and the bytes cudaMalloc grants in all (beyond: out of memory). */
UG_EMU_API void ug_emu_configure(int devices, int sm_count, size_t memory_bytes);

typedef struct ug_emu_stats {
    uint64_t launches, blocks, gpu_threads;
    uint64_t failed_launches;  /* bad configuration or divergent barrier */
    /* Barrier phases whose GPU threads ran in increasing / decreasing order
     * (the two orders the scheduler alternates). */
    uint64_t phases_increasing, phases_decreasing;
    int64_t live_allocations;  /* cudaMalloc not yet freed */
    int64_t live_host_allocations;
    int64_t live_streams;
    int64_t live_events;
    int64_t live_graphs;       /* captured graphs and their instances */
    uint64_t graph_launches;
    size_t live_bytes;
} ug_emu_stats;
UG_EMU_API void ug_emu_get_stats(ug_emu_stats *stats);

/* The next count captures end invalidated (cudaStreamEndCapture:
 * cudaErrorStreamCaptureInvalidated), as an unsupported call would. */
UG_EMU_API void ug_emu_fail_captures(int count);

/* Work of a library beside the runtime (the stand-in cuBLAS) on stream:
 * fn(copy of ctx's bytes) now, or when the graph replays where the stream
 * is being captured. Returns a cudaError_t. */
UG_EMU_API int ug_emu_stream_work(void *stream, void (*fn)(const void *ctx), const void *ctx,
                                  size_t bytes);

/* The emulator's f16 conversions (cuda_fp16.h), for its self-check. */
UG_EMU_API uint16_t ug_emu_f32_to_f16(float value);
UG_EMU_API float ug_emu_f16_to_f32(uint16_t bits);

#ifdef __cplusplus
}
#endif
#endif
