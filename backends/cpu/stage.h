/* f32 copies of half views, for the CPU kernels written over f32 arrays
 * (im2col, pooling, batch norm): f16 and bf16 there are storage types, so
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

#endif
