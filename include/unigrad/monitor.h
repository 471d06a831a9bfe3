/* What a device is doing now, as nvidia-smi shows it for one vendor:
 * utilisation, memory, temperature, power and clocks where the platform
 * tells them, and the memory each running unigrad process's pool holds on
 * it. NVIDIA GPUs through NVML (libnvidia-ml.so.1, loaded when asked),
 * AMD GPUs through the amdgpu driver's sysfs files, the CPU and POCL's
 * OpenCL device from /proc and /sys. ug-smi prints these.
 *
 * A figure the platform does not give is NaN, with the reason in its
 * why field ("no temperature sensor in /sys/class/hwmon"), never 0. */
#ifndef UNIGRAD_MONITOR_H
#define UNIGRAD_MONITOR_H

#include <stdint.h>

#include "unigrad/export.h"
#include "unigrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { UG_SAMPLE_MAX_PROCESSES = 16 };

/* A figure and, when it is NaN, why. */
typedef struct ug_sample_figure {
    double value;
    char why[160];
} ug_sample_figure;

/* A unigrad process's pool on the device, as it last published it. */
typedef struct ug_sample_process {
    int64_t pid;
    char command[32];
    uint64_t bytes_in_use, bytes_cached, peak_bytes_in_use;
} ug_sample_process;

typedef struct ug_device_sample {
    char id[32];                       /* "cpu", "opencl:0", "cuda:0" */
    char name[128];
    char source[48];                   /* "NVML", "amdgpu sysfs", "/proc and /sys" */
    ug_sample_figure utilization;      /* percent busy since the previous sample (first: over 0.1 s) */
    ug_sample_figure memory_used;      /* bytes (the CPU: the system's memory in use; POCL's
                                        * device: not given, its memory being the host's) */
    ug_sample_figure memory_total;     /* bytes: the size the device reports (ug-devices'
                                        * MEMORY, a pool's default limit); a GPU's driver's */
    ug_sample_figure temperature;      /* degrees Celsius */
    ug_sample_figure power;            /* watts */
    ug_sample_figure clock;            /* MHz: the cores' (GPU: graphics clock) */
    ug_sample_figure memory_clock;     /* MHz */
    int process_count;                 /* unigrad processes with memory here (the first 16 listed) */
    ug_sample_process processes[UG_SAMPLE_MAX_PROCESSES];
} ug_device_sample;

/* One sample of device index (as ug_device_info_at), without opening it. */
UG_API ug_status ug_device_sample_at(int index, ug_device_sample *sample);

#ifdef __cplusplus
}
#endif
#endif
