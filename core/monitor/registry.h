/* Publishing this process's pool figures for ug-smi (registry.c). */
#ifndef UG_CORE_MONITOR_REGISTRY_H
#define UG_CORE_MONITOR_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "unigrad/device.h"

/* Device opened and closes: listed in the file meanwhile. */
void ug_registry_add(ug_device *device);
void ug_registry_remove(ug_device *device);
/* A pool changed: published when due. */
void ug_registry_changed(void);
/* A wait for a device finished: publishes changes noted too soon before. */
void ug_registry_wait_done(void);
/* The per-user folder of the files, created if needed; false with why. */
bool ug_registry_dir(char *dir, size_t len, char *why, size_t why_len);

#endif
