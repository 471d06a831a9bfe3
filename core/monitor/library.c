/* Vendors' monitoring libraries loaded at run time (see internal.h): the
 * project declares the few functions it uses, nothing is linked, and a
 * machine without the library gets a reason instead. */
#include <dlfcn.h>
#include <stdio.h>

#include "core/monitor/internal.h"

void *ug_library_open(const char *what, const char *const *names, const ug_library_symbol *symbols, int count,
                      char *why, size_t len)
{
    void *handle = NULL;
    const char *loaded = NULL;
    for (int i = 0; names[i] && !handle; i++)
        if ((handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
            loaded = names[i];
    if (!handle) {
        snprintf(why, len, "%s is not installed (%s)", what, names[0] ? names[0] : "no library named");
        return NULL;
    }
    for (int i = 0; i < count; i++)
        if (!(*symbols[i].slot = dlsym(handle, symbols[i].name))) {
            snprintf(why, len, "%s (%s) has no %s", what, loaded, symbols[i].name);
            dlclose(handle);
            return NULL;
        }
    return handle;
}
