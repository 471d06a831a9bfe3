/* Uniform and normal random numbers (kernels/common/random.h): element i
 * uses counter offset + i, so any split across threads gives the same
 * values. */
#include "backends/cpu/internal.h"

enum { RBLK = 512 };

typedef struct rand_job {
    const ug_random_args *args;
    uint64_t offset;
    char *y;
} rand_job;

static void random_range(void *vjob, int64_t begin, int64_t end)
{
    const rand_job *j = vjob;
    const ug_random_args *a = j->args;
    float buf[RBLK];
    for (int64_t b0 = begin; b0 < end; b0 += RBLK) {
        int64_t n = end - b0 < RBLK ? end - b0 : RBLK;
        float *out = a->y.dtype == UG_F32 ? (float *)j->y + b0 : buf;
        for (int64_t i = 0; i < n; i++)
            out[i] = ug_random_value(a->seed, j->offset + (uint64_t)(b0 + i), a->normal, a->p0,
                                     a->p1);
        if (a->y.dtype != UG_F32)
            ug_cpu_store(j->y + b0 * 2, a->y.dtype, n, out);
    }
}

ug_status ug_cpu_random(ug_bdev *dev, const ug_random_args *args)
{
    if (!ug_cpu_float_dtype(args->y.dtype))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu random: output dtype %s must be f32, f16 or bf16",
                            ug_dtype_name(args->y.dtype));
    if (args->n <= 0)
        return UG_OK;
    rand_job j = {.args = args, .offset = args->offset, .y = ug_cpu_ptr(args->y)};
    if (args->runs.mem)
        j.offset += (uint64_t)*(const float *)ug_cpu_ptr(args->runs) << UG_RANDOM_RUN_SHIFT;
    /* Philox costs ~10x an add per element: parallelise sooner. */
    ug_cpu_parallel_for(dev->workers, args->n, UG_CPU_MIN_PARALLEL / 8, random_range, &j);
    return UG_OK;
}
