/* Loading backend modules at run time. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/runtime/module.h"

#ifndef UG_INSTALL_LIBDIR
#define UG_INSTALL_LIBDIR "/usr/local/lib"
#endif

enum { UG_MAX_MODULES = 4 };
static void *loaded[UG_MAX_MODULES];
static int loaded_count;

/* The directory holding this library (or the executable it is linked into). */
static void own_directory(char *dir, size_t len)
{
    Dl_info info;
    dir[0] = '\0';
    if (dladdr((void *)own_directory, &info) && info.dli_fname) {
        snprintf(dir, len, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, len, ".");
    }
}

void *ug_module_open(const char *name, char *path, size_t path_len, char *reason, size_t reason_len)
{
    char file[64];
    snprintf(file, sizeof file, "libunigrad-%s.so", name);
    char dirs[8192] = "";
    const char *env = getenv("UG_BACKEND_PATH");
    if (env && *env)
        snprintf(dirs, sizeof dirs, "%s:", env);
    char own[4096];
    own_directory(own, sizeof own);
    size_t used = strlen(dirs);
    snprintf(dirs + used, sizeof dirs - used, "%s:%s", own, UG_INSTALL_LIBDIR);
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        if (!*dir)
            continue;
        snprintf(path, path_len, "%s/%s", dir, file);
        if (access(path, F_OK) != 0)
            continue;
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char *err = dlerror();
            snprintf(reason, reason_len, "%s did not load: %s", path, err ? err : "unknown error");
        }
        return handle; /* the first one found, loaded or not */
    }
    snprintf(reason, reason_len, "module %s not found (looked in UG_BACKEND_PATH, %s, %s)", file,
             own[0] ? own : "(library directory unknown)", UG_INSTALL_LIBDIR);
    return NULL;
}

const ug_backend *ug_module_load(const char *name, const ug_backend_host *host, char *reason,
                                 size_t reason_len)
{
    char path[4096];
    void *handle = ug_module_open(name, path, sizeof path, reason, reason_len);
    if (!handle)
        return NULL;
    ug_module_entry_fn entry;
    void *symbol = dlsym(handle, UG_MODULE_ENTRY_SYMBOL);
    memcpy(&entry, &symbol, sizeof entry); /* object to function pointer, as POSIX allows */
    if (!entry) {
        snprintf(reason, reason_len, "%s has no %s: not a unigrad backend module", path,
                 UG_MODULE_ENTRY_SYMBOL);
        dlclose(handle);
        return NULL;
    }
    const char *why = NULL;
    const ug_backend *backend = entry(UG_BACKEND_INTERFACE_VERSION, host, &why);
    if (!backend || backend->interface_version != UG_BACKEND_INTERFACE_VERSION) {
        snprintf(reason, reason_len, "%s: %s", path,
                 why ? why : "backend interface version differs from this libunigrad; rebuild "
                             "the module with the same unigrad version");
        dlclose(handle);
        return NULL;
    }
    if (loaded_count < UG_MAX_MODULES)
        loaded[loaded_count++] = handle;
    return backend;
}

void ug_modules_unload(void)
{
    /* Runtimes such as CUDA's register exit handlers of their own; closing
     * their libraries before exit would run those handlers on unmapped code,
     * so the handles stay open and are only forgotten. */
    loaded_count = 0;
}
