/* A module that claims another backend interface version: the loader must
 * refuse it with a reason instead of calling into it. */
#include "backends/backend.h"

static const ug_backend future_backend = {
    .name = "cuda",
    .interface_version = UG_BACKEND_INTERFACE_VERSION + 1,
};

const ug_backend *ug_backend_module_entry(int host_version, const ug_backend_host *host, const char **reason)
{
    (void)host_version;
    (void)host;
    (void)reason;
    return &future_backend;
}
