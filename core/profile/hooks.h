/* What the runtime tells a running profiler (core/profile/profiler.c):
 * dispatch.c around each kernel, transfer and host wait, the pool when
 * its counters change, the graph runner which node is launching.
 *
 * Every hook is behind ug_profiling(), one relaxed atomic load: with no
 * profiler running nothing else is done and no event is created. */
#ifndef UG_CORE_PROFILE_HOOKS_H
#define UG_CORE_PROFILE_HOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/runtime/internal.h"

extern atomic_bool ug_profile_running;

static inline bool ug_profiling(void)
{
    return atomic_load_explicit(&ug_profile_running, memory_order_relaxed);
}

/* A launch being recorded: begin's timing event is queued before it. */
typedef struct ug_profile_span {
    int device;              /* the profiler's index of the device */
    int stream;              /* the profiler's index of the stream */
    ug_bevent *start, *end;
    int64_t host_start;      /* ns since the profiler started */
} ug_profile_span;

/* What was launched, for ug_profile_end: a kernel of family with its
 * arguments (read there, as the launch ends: its cost is worked out then,
 * since an argument may point at the launcher's stack), or a transfer of
 * bytes (family UG_KERNEL_FAMILY_COUNT). */
typedef struct ug_profile_launch {
    const char *name;        /* the graph node's label, the op's name, "upload", ... */
    ug_kernel_family family;
    const void *args;
    size_t args_size;
    ug_dtype dtype;
    double bytes;            /* a transfer's */
} ug_profile_launch;

/* True when the launch about to be queued on device's current stream is
 * recorded; then ug_profile_end must follow it, with its status. */
bool ug_profile_begin(ug_device *device, ug_profile_span *span);
void ug_profile_end(ug_device *device, ug_profile_span *span, const ug_profile_launch *launch,
                    ug_status status);

/* The host's clock as the profiler reads it (ns, CLOCK_MONOTONIC). */
int64_t ug_profile_clock(void);
/* A host wait on device that began at started (ug_profile_clock). */
void ug_profile_wait(ug_device *device, const char *what, int64_t started);
/* The pool's counters after a change. */
void ug_profile_memory(ug_device *device, const ug_memory_stats *stats);

/* The name the kernels launched by this thread take until set back to NULL
 * (a graph node's label); NULL: the op's own name. */
void ug_profile_set_label(const char *label);
const char *ug_profile_label(void);

#endif
