/* f32 copies of half views, for the CPU kernels written over f32 arrays
 * (im2col, upsampling): f16 and bf16 there are storage types, so
 * a call widens its half inputs into host buffers, runs the f32 kernel and
 * rounds its half outputs once. */
#ifndef UG_BACKENDS_CPU_STAGE_H
#define UG_BACKENDS_CPU_STAGE_H

#include "backends/cpu/internal.h"

enum { UG_CPU_STAGE_MAX = 4 };

typedef struct ug_cpu_stage {
    int count;
    struct {
        ug_kview *view;    /* in the caller's copy of the arguments */
        ug_kview original;
        int64_t numel;
        bool output;
    } entry[UG_CPU_STAGE_MAX];
} ug_cpu_stage;

/* Adds a view of numel elements (nothing when it is f32 or unset). */
void ug_cpu_stage_add(ug_cpu_stage *stage, ug_kview *view, int64_t numel, bool output);
/* Points every added half view at an f32 buffer, inputs widened. */
ug_status ug_cpu_stage_begin(ug_cpu_stage *stage, const char *kernel);
/* Rounds the outputs into the original views and frees the buffers. */
void ug_cpu_stage_end(ug_cpu_stage *stage);

/* The same a piece at a time, inside a kernel's tasks, for kernels whose
 * pieces are contiguous (pooling's planes): the piece is converted while
 * it is in the task's cache, on the task's thread. */

/* Elements [at, at + n) of v as f32: v's own memory when it is f32, else
 * widened into buf (n floats). */
static inline const float *ug_cpu_piece_in(ug_kview v, int64_t at, int64_t n, float *buf)
{
    if (v.dtype == UG_F32)
        return (const float *)(void *)ug_cpu_ptr(v) + at;
    ug_cpu_load(ug_cpu_ptr(v) + at * (int64_t)ug_dtype_size(v.dtype), v.dtype, 1, n, buf);
    return buf;
}

/* Where a kernel writes elements [at, ...) of v: v's memory when f32, else
 * buf, which ug_cpu_piece_out rounds into v. */
static inline float *ug_cpu_piece_at(ug_kview v, int64_t at, float *buf)
{
    return v.dtype == UG_F32 ? (float *)(void *)ug_cpu_ptr(v) + at : buf;
}

static inline void ug_cpu_piece_out(ug_kview v, int64_t at, int64_t n, const float *buf)
{
    if (v.dtype != UG_F32)
        ug_cpu_store(ug_cpu_ptr(v) + at * (int64_t)ug_dtype_size(v.dtype), v.dtype, n, buf);
}

#endif
