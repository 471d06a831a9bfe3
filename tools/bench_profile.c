/* The profiler in ug-bench: what recording costs a step (the step timed
 * with the profiler off and on in alternating rounds, so a shared
 * machine's drift falls on both), and --trace's recording of a few steps. */
#include <string.h>

#include "bench.h"

typedef struct profiled {
    bool (*step)(void *ctx);
    void *ctx;
    ug_device *device;
} profiled;

/* One step inside a "step" range, as ug-train's steps are recorded. */
static bool profiled_step(void *arg)
{
    profiled *p = arg;
    return ug_profiler_range_push(p->device, "step") == UG_OK && p->step(p->ctx) &&
           ug_profiler_range_pop(p->device) == UG_OK;
}

static bool profiled_sync(void *arg)
{
    return ug_device_synchronize(((profiled *)arg)->device) == UG_OK;
}

bool bench_profiler_overhead(bool (*step)(void *ctx), void *ctx, ug_device *device, double target_seconds,
                             double *off_seconds, double *on_seconds, double *ratio)
{
    enum { ROUNDS = 5 };
    profiled p = {step, ctx, device};
    double each = target_seconds / (2 * ROUNDS), off[ROUNDS], on[ROUNDS], ratios[ROUNDS];
    long reps = 0;
    for (int r = 0; r < ROUNDS; r++) {
        ug_profiler *prof = NULL;
        if (!bench_time(profiled_step, profiled_sync, &p, r ? 1 : 3, each, &off[r], &reps) ||
            ug_profiler_start(device, &prof) != UG_OK)
            return false;
        bool timed = bench_time(profiled_step, profiled_sync, &p, 1, each, &on[r], &reps);
        ug_profiler_free(prof); /* reading the events' times is not the step's */
        if (!timed)
            return false;
        ratios[r] = on[r] / off[r];
    }
    *off_seconds = bench_median(off, ROUNDS);
    *on_seconds = bench_median(on, ROUNDS);
    *ratio = bench_median(ratios, ROUNDS);
    return true;
}

bool bench_trace(bool (*step)(void *ctx), void *ctx, ug_device *device, int steps, const char *path,
                 double *kernel_seconds)
{
    profiled p = {step, ctx, device};
    ug_profiler *prof = NULL;
    if (!profiled_sync(&p) || ug_profiler_start(device, &prof) != UG_OK)
        return false;
    bool ok = true;
    for (int i = 0; i < steps && ok; i++)
        ok = profiled_step(&p);
    ok = ok && profiled_sync(&p) && ug_profiler_stop(prof) == UG_OK && ug_profiler_write_trace(prof, path) == UG_OK;
    int64_t device_ns = 0;
    for (int i = 0; ok && i < ug_profiler_op_count(prof); i++) {
        ug_profile_op op;
        ok = ug_profiler_op_at(prof, UG_PROFILE_BY_DEVICE_TIME, i, &op) == UG_OK;
        if (ok && strcmp(op.family, "range") != 0)
            device_ns += op.device_ns;
    }
    *kernel_seconds = (double)device_ns * 1e-9 / steps;
    ug_profiler_free(prof);
    return ok;
}
