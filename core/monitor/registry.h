/* Publishing this process's pool figures for ug-smi (registry.c). */
#ifndef UG_CORE_MONITOR_REGISTRY_H
#define UG_CORE_MONITOR_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "unigrad/device.h"

/* Device opened and closes: listed in the file meanwhile. */
void ug_registry_add(ug_device *device);
void ug_registry_remove(ug_device *device);
/* A pool changed: published within a quarter of a second by the
 * publisher thread. One relaxed atomic store: no lock, no system call. */
void ug_registry_changed(void);
/* The per-user folder of the files, created if needed; false with why. */
bool ug_registry_dir(char *dir, size_t len, char *why, size_t why_len);

#endif
