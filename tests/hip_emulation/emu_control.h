/* What the (C) test driver may ask of the emulated CUDA runtime
 * (emu_runtime.cpp): the machine it pretends to be, and its bookkeeping. */
#ifndef UG_EMU_CONTROL_H
#define UG_EMU_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Devices reported by cudaGetDeviceCount (0: cudaErrorNoDevice), their SM
 * count and the bytes cudaMalloc grants in all (beyond: out of memory). */
void ug_emu_configure(int devices, int sm_count, size_t memory_bytes);

typedef struct ug_emu_stats {
    uint64_t launches, blocks, gpu_threads;
    uint64_t failed_launches;  /* bad configuration or divergent barrier */
    int64_t live_allocations;  /* cudaMalloc not yet freed */
    int64_t live_host_allocations;
    int64_t live_streams;
    size_t live_bytes;
} ug_emu_stats;
void ug_emu_get_stats(ug_emu_stats *stats);

/* The emulator's f16 conversions (cuda_fp16.h), for its self-check. */
uint16_t ug_emu_f32_to_f16(float value);
float ug_emu_f16_to_f32(uint16_t bits);

#ifdef __cplusplus
}
#endif
#endif
