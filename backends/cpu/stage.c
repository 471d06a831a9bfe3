/* f32 staging of half views for the f32-only CPU kernels (stage.h). */
#include <stdlib.h>

#include "backends/cpu/stage.h"

void ug_cpu_stage_add(ug_cpu_stage *stage, ug_kview *view, int64_t numel, bool output)
{
    if (!view->mem || view->dtype == UG_F32 || stage->count == UG_CPU_STAGE_MAX)
        return;
    stage->entry[stage->count].view = view;
    stage->entry[stage->count].original = *view;
    stage->entry[stage->count].numel = numel;
    stage->entry[stage->count].output = output;
    stage->count++;
}

ug_status ug_cpu_stage_begin(ug_cpu_stage *stage, const char *kernel)
{
    for (int i = 0; i < stage->count; i++) {
        float *buf = malloc((size_t)stage->entry[i].numel * sizeof(float) + 1);
        if (!buf) {
            stage->count = i;
            for (int k = 0; k < i; k++)
                stage->entry[k].output = false; /* nothing was computed */
            ug_cpu_stage_end(stage);
            return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY,
                                "cpu %s: no host memory for an f32 copy of %lld %s elements",
                                kernel, (long long)stage->entry[i].numel,
                                ug_dtype_name(stage->entry[i].original.dtype));
        }
        if (!stage->entry[i].output)
            ug_cpu_load(ug_cpu_ptr(stage->entry[i].original), stage->entry[i].original.dtype, 1,
                        stage->entry[i].numel, buf);
        *stage->entry[i].view = (ug_kview){.mem = (ug_mem)buf, .offset = 0, .dtype = UG_F32};
    }
    return UG_OK;
}

void ug_cpu_stage_end(ug_cpu_stage *stage)
{
    for (int i = 0; i < stage->count; i++) {
        float *buf = (float *)stage->entry[i].view->mem;
        if (stage->entry[i].output)
            ug_cpu_store(ug_cpu_ptr(stage->entry[i].original), stage->entry[i].original.dtype,
                         stage->entry[i].numel, buf);
        free(buf);
        *stage->entry[i].view = stage->entry[i].original;
    }
    stage->count = 0;
}
