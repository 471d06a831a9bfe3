/* The profiler in ug-bench: what recording costs a step, timed with the
 * profiler off and on in alternating rounds so that a shared machine's
 * drift falls on both, and --trace's Chrome trace of the middle round's
 * steps, whose launches compare with those steps' own spans. */
#include <string.h>

#include "bench.h"

typedef struct profiled {
    bool (*step)(void *ctx);
    void *ctx;
    ug_device *device;
} profiled;

/* One step inside a "step" range, as the trainer's steps are recorded. */
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

/* The recorded steps' launches and the steps' own span on the device:
 * seconds per step, both from one recording, so that a machine busy
 * elsewhere stretches both alike (ug-bench's timed step is another run's). */
static bool launches_per_step(const ug_profiler *prof, double *launches_s, double *step_s)
{
    int64_t device_ns = 0, step_ns = 0, steps = 0;
    for (int i = 0; i < ug_profiler_op_count(prof); i++) {
        ug_profile_op op;
        if (ug_profiler_op_at(prof, UG_PROFILE_BY_DEVICE_TIME, i, &op) != UG_OK)
            return false;
        if (strcmp(op.family, "range") != 0)
            device_ns += op.device_ns;
        else if (strcmp(op.name, "step") == 0) {
            steps = op.calls;
            step_ns = op.device_ns;
        }
    }
    *launches_s = steps ? (double)device_ns * 1e-9 / (double)steps : 0.0;
    *step_s = steps ? (double)step_ns * 1e-9 / (double)steps : 0.0;
    return steps > 0;
}

bool bench_profiler_overhead(bool (*step)(void *ctx), void *ctx, ug_device *device, double target_seconds,
                             const char *trace, bench_profile_result *r)
{
    enum { ROUNDS = 5 };
    profiled p = {step, ctx, device};
    double each = target_seconds / (2 * ROUNDS), off[ROUNDS], on[ROUNDS], ratios[ROUNDS];
    long reps = 0;
    bench_settle(); /* after OpenBLAS's rounds */
    for (int round = 0; round < ROUNDS; round++) {
        ug_profiler *prof = NULL;
        if (!bench_time(profiled_step, profiled_sync, &p, round ? 1 : 3, each, &off[round], &reps) ||
            ug_profiler_start(device, &prof) != UG_OK)
            return false;
        bool ok = bench_time(profiled_step, profiled_sync, &p, 1, each, &on[round], &reps);
        if (ok && trace && round == ROUNDS / 2) { /* reading the events' times is not the step's */
            ok = ug_profiler_stop(prof) == UG_OK && ug_profiler_write_trace(prof, trace) == UG_OK &&
                 launches_per_step(prof, &r->traced_launches_s, &r->traced_step_s);
        }
        ug_profiler_free(prof);
        if (!ok)
            return false;
        ratios[round] = on[round] / off[round];
    }
    r->off_s = bench_median(off, ROUNDS);
    r->on_s = bench_median(on, ROUNDS);
    r->ratio = bench_median(ratios, ROUNDS);
    return true;
}
