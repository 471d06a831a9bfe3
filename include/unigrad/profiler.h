/* Profiling: where a device's time goes, as torch.profiler shows it.
 *
 * Between start and stop, every kernel launched on the profiled devices is
 * recorded with its name (a training graph's node label, "fc1/matmul",
 * "fc1/add+relu", "fc1/backward/matmul", "fc1.weight/update/adam"; an eager
 * op's name), its kernel
 * family ("gemm", "unary", ...), shape, dtype, the bytes it moves and the
 * floating-point operations it does, the host's time to issue it, and its
 * start and end on the device, per stream, from timing events. Transfers,
 * host waits and the memory pool's counters are recorded too, and named
 * ranges (ug_profiler_range_push) mark steps or phases on the host and on
 * the device.
 *
 *     ug_profiler *prof;
 *     ug_profiler_start(NULL, &prof);                 // every device
 *     for (int step = 0; step < 5; step++) {
 *         ug_profiler_range_push(dev, "step");
 *         ug_graph_run(graph);
 *         ug_profiler_range_pop(dev);
 *     }
 *     ug_profiler_stop(prof);                         // waits for the devices
 *     ug_profiler_write_trace(prof, "trace.json");    // ui.perfetto.dev, chrome://tracing
 *     ug_profiler_print_table(prof, UG_PROFILE_BY_DEVICE_TIME, 15, stdout);
 *     ug_profiler_free(prof);
 *
 * While no profiler runs, launching costs one atomic load more and no
 * events are created. One profiler runs at a time in a process. */
#ifndef UNIGRAD_PROFILER_H
#define UNIGRAD_PROFILER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "unigrad/device.h"
#include "unigrad/export.h"
#include "unigrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_profiler ug_profiler;

/* Starts recording on device, or on every device when device is NULL
 * (those opened later too). Waits for the device's queued work first, so
 * the device's clock can be placed on the host's. UG_ERR_STATE while
 * another profiler is running. */
UG_API ug_status ug_profiler_start(ug_device *device, ug_profiler **out);
/* Stops recording, waits for the recorded work to finish and reads its
 * device times. The results below are available from then on. */
UG_API ug_status ug_profiler_stop(ug_profiler *profiler);
/* Stops it if running; NULL is ignored. */
UG_API void ug_profiler_free(ug_profiler *profiler);

/* A named range on this thread (torch.profiler.record_function): recorded
 * on the host and, with device, on the thread's current stream of device,
 * where the kernels queued inside it nest. Ranges nest; each push needs a
 * pop on the same thread. Without a running profiler both do nothing and
 * return UG_OK. */
UG_API ug_status ug_profiler_range_push(ug_device *device, const char *name);
UG_API ug_status ug_profiler_range_pop(ug_device *device);

/* Writes the recording as a Chrome trace (the Trace Event format that
 * Perfetto and chrome://tracing open): a process per device with a thread
 * per stream, a process for the host with a thread per host thread,
 * complete ("X") events in microseconds, counter ("C") events for the pool
 * and metadata ("M") events naming them. The file is replaced atomically. */
UG_API ug_status ug_profiler_write_trace(const ug_profiler *profiler, const char *path);

/* One row of the summary: the launches of one name on one device. */
typedef struct ug_profile_op {
    const char *name;    /* "fc1/matmul", "upload", "step" (a range) */
    const char *family;  /* "gemm", "unary", ..., "transfer", "range"; "several" for a
                          * graph node launching kernels of more than one family */
    const char *device;  /* "cpu", "opencl:0" */
    int64_t calls;
    int64_t device_ns;   /* summed device time (for a range: its span on the device) */
    int64_t host_ns;     /* summed host time spent issuing them */
    double flops;        /* summed floating-point operations (0: not counted) */
    double bytes;        /* summed bytes read and written */
} ug_profile_op;

typedef enum ug_profile_order {
    UG_PROFILE_BY_DEVICE_TIME = 0,
    UG_PROFILE_BY_HOST_TIME,
    UG_PROFILE_BY_CALLS
} ug_profile_order;

/* The summary's rows (kernels and transfers; ranges come after them),
 * sorted by order, largest first. */
UG_API int ug_profiler_op_count(const ug_profiler *profiler);
UG_API ug_status ug_profiler_op_at(const ug_profiler *profiler, ug_profile_order order, int index,
                                   ug_profile_op *op);
/* Prints the top rows (rows <= 0: all) as a table, key_averages().table()
 * style, in 80 columns: name, calls, device time (total, share), host time,
 * GFLOP/s and GB/s. */
UG_API ug_status ug_profiler_print_table(const ug_profiler *profiler, ug_profile_order order, int rows,
                                         FILE *out);

#ifdef __cplusplus
}
#endif
#endif
