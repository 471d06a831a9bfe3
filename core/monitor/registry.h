/* Publishing this process's pool figures for ug-smi (registry.c). */
#ifndef UG_CORE_MONITOR_REGISTRY_H
#define UG_CORE_MONITOR_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/device.h"

/* Device opened and closes: listed in the file meanwhile. */
void ug_registry_add(ug_device *device);
void ug_registry_remove(ug_device *device);
/* A pool changed: published within a quarter of a second by the
 * publisher thread. One relaxed atomic store: no lock, no system call. */
void ug_registry_changed(void);
/* pool.c: the device's bytes in use, cached and peak as of its pool's
 * last change, read without the pool's lock (which is never taken under
 * the registry's: the pool waits on fences and the profiler under it). */
void ug_pool_shown(const ug_device *device, uint64_t figures[3]);
/* The per-user folder of the files, created if needed; false with why. */
bool ug_registry_dir(char *dir, size_t len, char *why, size_t why_len);

#endif
