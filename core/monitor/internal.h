/* The monitor's sources (monitor.h), each filling what it knows of a
 * sample and the reasons for the rest. Roots and library names are
 * parameters so the tests can point them at doubles. */
#ifndef UG_CORE_MONITOR_INTERNAL_H
#define UG_CORE_MONITOR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "unigrad/monitor.h"

/* Sets a figure missing, with why (printf-style). */
void ug_sample_missing(ug_sample_figure *f, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Every figure missing with why: the starting point of a sample. */
void ug_sample_clear(ug_device_sample *s, const char *why);
/* A number read from the file at root/path; false when it cannot be read
 * or is not finite. */
bool ug_read_number(const char *root, const char *path, double *value);
/* fopen(path, "r") for files the library does not control (/proc, /sys,
 * the registry's): NULL, and nothing waited on, for anything but a
 * regular file (a FIFO there would block the open or the reads for ever). */
FILE *ug_monitor_open(const char *path);
/* Each figure that is not finite or outside what the quantity can be
 * (a negative size, 10^6 degrees) made missing with the value in why;
 * utilisation a little outside 0-100 (counters that moved back) clamped. */
void ug_sample_check(ug_device_sample *s);

/* library.c: a vendor's library loaded at run time with the symbols the
 * monitor declares. */
typedef struct ug_library_symbol {
    void **slot;
    const char *name;
} ug_library_symbol;
/* The first of names (ended by NULL) that loads, with every symbol found;
 * else NULL with why ("NVML is not installed (...)", "... has no f"). */
void *ug_library_open(const char *what, const char *const *names, const ug_library_symbol *symbols, int count,
                      char *why, size_t len);

/* host.c: the CPU from root_proc (/proc) and root_sys (/sys). */
void ug_host_sample(const char *root_proc, const char *root_sys, ug_device_sample *s);
/* amdgpu.c: the card-th amdgpu card (counted among /sys/class/drm's
 * cards whose vendor is 0x1002, in name order) under root_sys. */
bool ug_amdgpu_sample(const char *root_sys, int card, ug_device_sample *s);
/* rocm_smi.c: ROCm SMI device index through library (NULL: the
 * installed librocm_smi64, or UG_ROCM_SMI_LIBRARY) over what s holds:
 * the figures it gives replace them, the others stay. */
bool ug_rocm_smi_sample(const char *library, int index, ug_device_sample *s);
/* nvml.c: NVML device index through library (NULL: libnvidia-ml.so.1,
 * or UG_NVML_LIBRARY). false with the reason in the figures. */
bool ug_nvml_sample(const char *library, int index, ug_device_sample *s);
/* registry.c: the processes that published memory on device id. */
void ug_registry_processes(const char *id, ug_device_sample *s);

#endif
