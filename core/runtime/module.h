/* Backends built as separate shared objects (HIP, CUDA), loaded with dlopen
 * so the core never depends on ROCm or CUDA. */
#ifndef UG_CORE_MODULE_H
#define UG_CORE_MODULE_H

#include <stddef.h>

#include "backends/backend.h"

/* Finds libunigrad-<name>.so in UG_BACKEND_PATH (colon-separated), next to
 * libunigrad, then in the install's library directory. NULL with a one-line
 * reason when it is absent, fails to load or has another interface version. */
const ug_backend *ug_module_load(const char *name, const ug_backend_host *host,
                                 char *reason, size_t reason_len);
void ug_modules_unload(void);
/* The shared object libunigrad-<name>.so, searched as above and opened
 * (its path in path); NULL with the reason. For other modules than
 * backends (the MPI engine). */
void *ug_module_open(const char *name, char *path, size_t path_len, char *reason, size_t reason_len);

#endif
