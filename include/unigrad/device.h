/* Devices of every backend, discovered at run time, opened by name. */
#ifndef UNIGRAD_DEVICE_H
#define UNIGRAD_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/dtype.h"
#include "unigrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_device ug_device;

typedef struct ug_device_info {
    char id[32];          /* "cpu", "opencl:0", "hip:1": the name that opens it */
    char backend[16];     /* "cpu", "opencl", "hip", "cuda" */
    char vendor[128];     /* vendor, and for OpenCL the platform */
    char name[128];
    char driver[128];     /* driver or runtime version */
    uint64_t global_memory;    /* bytes the device reports */
    uint64_t max_allocation;   /* largest single buffer, bytes */
    uint32_t compute_units;
    uint64_t max_work_group;
    /* Native half arithmetic. f16 and bf16 storage and mixed-precision
     * graphs work on every device; elsewhere they compute in f32. */
    bool fp16;
    bool bf16;
    bool is_gpu;
} ug_device_info;

/* Backends this build knows of, in registry order. */
UG_API int ug_backend_count(void);
/* Name, number of devices and, when there are none, the one-line reason. */
UG_API ug_status ug_backend_query(int backend, const char **name, int *device_count,
                           const char **reason);

/* Every device of every backend. */
UG_API int ug_device_count(void);
UG_API ug_status ug_device_info_at(int index, ug_device_info *info);

/* Opens "cpu", "opencl", "opencl:N", "hip", "hip:N", "cuda:N" or "auto"
 * (a GPU if there is one, else cpu; UG_DEVICE overrides "auto" and NULL).
 * Opening the same device twice returns the same handle; each open needs a
 * ug_device_close. */
UG_API ug_status ug_device_open(const char *name, ug_device **device);
UG_API void ug_device_close(ug_device *device);

UG_API ug_status ug_device_get_info(const ug_device *device, ug_device_info *info);
/* The mixed precision worth computing in on the device when asked for
 * `asked` (ug_graph_set_precision): asked where the device has native
 * arithmetic for it (info.fp16, info.bf16), else f32, since there each
 * half operation is widened to f32 and rounded back, slower than f32
 * itself. The trainer computes in it and takes its data in it. */
UG_API ug_dtype ug_device_precision(const ug_device *device, ug_dtype asked);
/* The device's id, e.g. "opencl:0". */
UG_API const char *ug_device_name(const ug_device *device);
/* Waits until all work queued on the device has finished. */
UG_API ug_status ug_device_synchronize(ug_device *device);

/* Tuning. On OpenCL, CLBlast's GEMM kernel parameters are chosen at the
 * device's first matrix product by timing a few candidate sets on
 * training-sized products (seconds on POCL, which compiles each set), and
 * cached in $XDG_CACHE_HOME/unigrad (else ~/.cache/unigrad) under the
 * device, driver and library versions, written atomically; later
 * processes load the choice, and a damaged cache is ignored with a warning
 * (ug_set_warning_handler) and measured again. UG_AUTOTUNE=0 in the
 * environment turns this off: fixed parameters, no cache.
 *
 * ug_device_autotune measures now (ahead of use, or again after a driver
 * change the key cannot see) and replaces the cached choice; report (may be
 * NULL) gets what was measured and chosen. On CUDA and HIP devices, whose
 * convolution algorithms are timed at each shape's first use instead (see
 * ug_set_deterministic in conv.h), report lists the algorithm of each
 * convolution planned in this process and those cached for the device.
 * Devices with nothing to tune (cpu) say so in report. A report longer
 * than report_len is cut, and its last line says so. */
UG_API ug_status ug_device_autotune(ug_device *device, char *report, size_t report_len);

/* Denormal (subnormal) floats flushed to zero on the CPU, as PyTorch's
 * torch.set_flush_denormal: x86 computes with them up to 100 times slower,
 * and training values can drift into their range. Applies to the calling
 * thread and the CPU backend's own threads (not OpenBLAS's). OpenCL CPU
 * devices (POCL) flush always: their kernels are built so. Returns false,
 * changing nothing, where the processor has no such mode. */
UG_API bool ug_set_flush_denormal(bool enabled);
/* Whether ug_set_flush_denormal last turned flushing on. */
UG_API bool ug_flush_denormal(void);

#ifdef __cplusplus
}
#endif
#endif
