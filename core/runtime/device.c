/* The device registry: every backend this build knows, their devices, and
 * opening devices by name. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache_file.h"
#include "base/fault.h"
#include "core/monitor/registry.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"
#include "core/runtime/module.h"

enum { UG_MAX_BACKENDS = 8, UG_REASON_LEN = 512 };

typedef struct registry_entry {
    const char *name;
    const ug_backend *backend;   /* NULL when the module did not load */
    int device_count;
    char reason[UG_REASON_LEN];
    ug_device **devices;         /* opened devices, by backend index */
} registry_entry;

static registry_entry registry[UG_MAX_BACKENDS];
static int registry_size;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* The modules' tuning cache: text files of choices, one magic for all
 * (what a file holds is told apart by its name and key). */
#define MODULE_CACHE_MAGIC "UGTUNE01"

static bool module_cache_path(const char *name, const char *key, char *path, size_t len)
{
    return name && key && ug_cache_path(name, key, strlen(key), ".txt", path, len);
}

static bool module_cache_load(const char *name, const char *key, char *text, size_t text_len,
                              char *why, size_t why_len)
{
    char path[PATH_MAX];
    if (why_len)
        why[0] = '\0';
    if (!text || !text_len || !module_cache_path(name, key, path, sizeof path))
        return false;
    unsigned char *data = NULL;
    size_t size = 0;
    ug_cache_result r = ug_cache_load(path, MODULE_CACHE_MAGIC, key, strlen(key), text_len - 1,
                                      &data, &size, why, why_len);
    if (r == UG_CACHE_HIT && memchr(data, '\0', size)) {
        snprintf(why, why_len, "%s holds a NUL byte", path);
        r = UG_CACHE_DAMAGED;
    }
    if (r == UG_CACHE_HIT) {
        memcpy(text, data, size);
        text[size] = '\0';
    }
    free(data);
    return r == UG_CACHE_HIT;
}

static ug_status module_cache_store(const char *name, const char *key, const char *text)
{
    char path[PATH_MAX];
    if (!text || !module_cache_path(name, key, path, sizeof path))
        return ug_set_error(UG_ERR_IO, "no usable cache folder: set XDG_CACHE_HOME or HOME");
    return ug_cache_store(path, MODULE_CACHE_MAGIC, key, strlen(key), text, strlen(text));
}

static const ug_backend_host host_api = {.set_error = ug_set_error,
                                         .last_error = ug_last_error,
                                         .warn = ug_warn,
                                         .cache_load = module_cache_load,
                                         .cache_store = module_cache_store};

const ug_backend_host *ug_host_api(void) { return &host_api; }

static void add_backend(const char *name, const ug_backend *backend, const char *why_absent)
{
    registry_entry *e = &registry[registry_size++];
    e->name = name;
    e->backend = backend;
    if (!backend) {
        snprintf(e->reason, sizeof e->reason, "%s", why_absent);
        return;
    }
    e->device_count = ug_call_device_count(backend, e->reason, sizeof e->reason);
    if (e->device_count < 0)
        e->device_count = 0;
    if (e->device_count > 0) {
        e->reason[0] = '\0';
        e->devices = ug_calloc((size_t)e->device_count, sizeof *e->devices);
        if (!e->devices) {
            e->device_count = 0;
            snprintf(e->reason, sizeof e->reason, "out of host memory listing devices");
        }
    } else if (!e->reason[0]) {
        snprintf(e->reason, sizeof e->reason, "the runtime reports no devices");
    }
}

static void registry_shutdown(void)
{
    for (int i = 0; i < registry_size; i++) {
        registry_entry *e = &registry[i];
        for (int d = 0; e->devices && d < e->device_count; d++) {
            ug_device *dev = e->devices[d];
            if (dev) { /* never closed by the program: release it now */
                ug_streams_destroy(dev);
                ug_pool_destroy(dev);
                ug_call_device_close(e->backend, dev->bdev);
                free(dev);
            }
        }
        free(e->devices);
        if (e->backend)
            ug_call_shutdown(e->backend);
    }
    registry_size = 0;
    ug_modules_unload();
}

/* Every backend, in registry order: built in (its table) or a run-time
 * module (libunigrad-<name>.so), and its rank when "auto" looks for a GPU
 * (1 first; 0: never picked as a GPU). Adding a backend is a line here. */
static const struct {
    const char *name;
    const ug_backend *(*builtin)(const ug_backend_host *host); /* NULL: a module */
    const char *not_built;                                      /* built in, but left out */
    int auto_rank;
} backends[] = {
    {"cpu", ug_cpu_backend, NULL, 0},
#ifdef UG_HAVE_OPENCL
    {"opencl", ug_opencl_backend, NULL, 3},
#else
    {"opencl", NULL, "not built: OpenCL or CLBlast was missing at configure time", 3},
#endif
    {"hip", NULL, NULL, 1},
    {"cuda", NULL, NULL, 2},
};
enum { BACKEND_COUNT = sizeof backends / sizeof backends[0] };
_Static_assert((int)BACKEND_COUNT <= (int)UG_MAX_BACKENDS, "raise UG_MAX_BACKENDS");

static void registry_init(void)
{
    for (int i = 0; i < BACKEND_COUNT; i++) {
        char why[UG_REASON_LEN] = "";
        const ug_backend *b = NULL;
        if (backends[i].builtin)
            b = backends[i].builtin(&host_api);
        else if (backends[i].not_built)
            snprintf(why, sizeof why, "%s", backends[i].not_built);
        else
            b = ug_module_load(backends[i].name, &host_api, why, sizeof why);
        add_backend(backends[i].name, b, why);
    }
    atexit(registry_shutdown);
}

static void ensure_registry(void) { pthread_once(&registry_once, registry_init); }

int ug_backend_count(void)
{
    ensure_registry();
    return registry_size;
}

ug_status ug_backend_query(int backend, const char **name, int *device_count,
                           const char **reason)
{
    ensure_registry();
    if (backend < 0 || backend >= registry_size)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_backend_query: backend %d out of range (this build has %d)",
                            backend, registry_size);
    if (name)
        *name = registry[backend].name;
    if (device_count)
        *device_count = registry[backend].device_count;
    if (reason)
        *reason = registry[backend].reason;
    return UG_OK;
}

int ug_device_count(void)
{
    ensure_registry();
    int n = 0;
    for (int i = 0; i < registry_size; i++)
        n += registry[i].device_count;
    return n;
}

static ug_status fill_info(registry_entry *e, int index, ug_device_info *info)
{
    memset(info, 0, sizeof *info);
    UG_TRY(ug_call_device_info(e->backend, index, info));
    if (strcmp(e->name, "cpu") == 0)
        snprintf(info->id, sizeof info->id, "cpu");
    else
        snprintf(info->id, sizeof info->id, "%s:%d", e->name, index);
    snprintf(info->backend, sizeof info->backend, "%s", e->name);
    return UG_OK;
}

ug_status ug_device_info_at(int index, ug_device_info *info)
{
    ensure_registry();
    if (!info)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_info_at: info is NULL");
    int first = 0;
    for (int i = 0; i < registry_size; i++) {
        if (index >= first && index < first + registry[i].device_count)
            return fill_info(&registry[i], index - first, info);
        first += registry[i].device_count;
    }
    return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                        "ug_device_info_at: index %d out of range (%d devices)", index, first);
}

static void list_devices(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < registry_size && used < len; i++) {
        registry_entry *e = &registry[i];
        for (int d = 0; d < e->device_count && used < len; d++) {
            int n = strcmp(e->name, "cpu") == 0
                        ? snprintf(buf + used, len - used, "%scpu", used ? ", " : "")
                        : snprintf(buf + used, len - used, "%s%s:%d", used ? ", " : "", e->name, d);
            used += n > 0 ? (size_t)n : 0;
        }
    }
}

/* "auto": the first GPU by the backends' auto_rank (the vendor runtimes
 * before OpenCL), else the CPU. The registry is in backends[] order. */
static bool pick_auto(int *backend, int *index)
{
    for (int rank = 1; rank <= BACKEND_COUNT; rank++) {
        for (int i = 0; i < registry_size; i++) {
            registry_entry *e = &registry[i];
            if (backends[i].auto_rank != rank)
                continue;
            for (int d = 0; d < e->device_count; d++) {
                ug_device_info info;
                if (ug_call_device_info(e->backend, d, &info) == UG_OK && info.is_gpu) {
                    *backend = i;
                    *index = d;
                    return true;
                }
            }
        }
    }
    for (int i = 0; i < registry_size; i++) {
        if (strcmp(registry[i].name, "cpu") == 0 && registry[i].device_count > 0) {
            *backend = i;
            *index = 0;
            return true;
        }
    }
    return false;
}

static ug_status parse_name(const char *name, int *backend, int *index)
{
    char available[1024];
    if (strcmp(name, "auto") == 0) {
        if (pick_auto(backend, index))
            return UG_OK;
        return ug_set_error(UG_ERR_DEVICE, "ug_device_open: no device available");
    }
    const char *colon = strchr(name, ':');
    size_t prefix = colon ? (size_t)(colon - name) : strlen(name);
    long number = 0;
    if (colon) {
        char *end = NULL;
        if (!isdigit((unsigned char)colon[1]))
            goto bad;
        number = strtol(colon + 1, &end, 10);
        if (*end != '\0' || number > 1000000)
            goto bad;
    }
    for (int i = 0; i < registry_size; i++) {
        registry_entry *e = &registry[i];
        if (strlen(e->name) != prefix || strncmp(e->name, name, prefix) != 0)
            continue;
        if (number >= e->device_count) {
            list_devices(available, sizeof available);
            if (e->device_count == 0)
                return ug_set_error(UG_ERR_DEVICE,
                                    "ug_device_open: '%s': the %s backend has no devices (%s); "
                                    "available: %s",
                                    name, e->name, e->reason, available);
            return ug_set_error(UG_ERR_DEVICE,
                                "ug_device_open: '%s': the %s backend has %d device(s) "
                                "(%s:0..%s:%d); available: %s",
                                name, e->name, e->device_count, e->name, e->name,
                                e->device_count - 1, available);
        }
        *backend = i;
        *index = (int)number;
        return UG_OK;
    }
bad:
    list_devices(available, sizeof available);
    return ug_set_error(UG_ERR_DEVICE,
                        "ug_device_open: unknown device name '%s': use cpu, opencl[:N], "
                        "hip[:N], cuda[:N] or auto; available here: %s",
                        name, available);
}

static ug_status open_entry(int b, int index, ug_device **out)
{
    registry_entry *e = &registry[b];
    ug_device *dev = e->devices[index];
    if (dev) {
        dev->refcount++;
        *out = dev;
        return UG_OK;
    }
    dev = ug_calloc(1, sizeof *dev);
    if (!dev)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_device_open: out of host memory");
    dev->backend = e->backend;
    dev->backend_index = index;
    dev->refcount = 1;
    ug_streams_init(dev);
    ug_status st = fill_info(e, index, &dev->info);
    if (st == UG_OK) {
        st = ug_call_device_open(e->backend, index, &dev->bdev);
        if (st != UG_OK)
            ug_prefix_error(st, "ug_device_open: %s", dev->info.id);
    }
    if (st == UG_OK) {
        st = ug_pool_create(dev, &dev->pool);
        if (st != UG_OK)
            ug_call_device_close(e->backend, dev->bdev);
    }
    if (st != UG_OK) {
        pthread_mutex_destroy(&dev->stream_lock);
        free(dev);
        return st;
    }
    e->devices[index] = dev;
    ug_registry_add(dev);
    *out = dev;
    return UG_OK;
}

ug_status ug_device_open(const char *name, ug_device **device)
{
    ensure_registry();
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_open: device is NULL");
    *device = NULL;
    const char *env = getenv("UG_DEVICE");
    if (!name || strcmp(name, "auto") == 0)
        name = (env && *env) ? env : "auto";
    int b = 0, index = 0;
    pthread_mutex_lock(&registry_lock);
    ug_status st = parse_name(name, &b, &index);
    if (st == UG_OK)
        st = open_entry(b, index, device);
    pthread_mutex_unlock(&registry_lock);
    return st;
}

void ug_device_retain(ug_device *device)
{
    pthread_mutex_lock(&registry_lock);
    device->refcount++;
    pthread_mutex_unlock(&registry_lock);
}

void ug_device_close(ug_device *device)
{
    if (!device)
        return;
    pthread_mutex_lock(&registry_lock);
    if (--device->refcount == 0) {
        for (int i = 0; i < registry_size; i++)
            if (registry[i].backend == device->backend)
                registry[i].devices[device->backend_index] = NULL;
        ug_registry_remove(device); /* before its pool goes */
        ug_streams_destroy(device);
        ug_pool_destroy(device);
        ug_call_device_close(device->backend, device->bdev);
        free(device);
    }
    pthread_mutex_unlock(&registry_lock);
}

ug_status ug_device_get_info(const ug_device *device, ug_device_info *info)
{
    if (!device || !info)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_get_info: %s is NULL",
                            device ? "info" : "device");
    *info = device->info;
    return UG_OK;
}

ug_dtype ug_device_precision(const ug_device *device, ug_dtype asked)
{
    if (!device || (asked == UG_F16 && !device->info.fp16) || (asked == UG_BF16 && !device->info.bf16))
        return UG_F32;
    return asked;
}

const char *ug_device_name(const ug_device *device) { return device ? device->info.id : "(null)"; }

ug_status ug_device_synchronize(ug_device *device)
{
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_synchronize: device is NULL");
    return ug_call_synchronize(device, "ug_device_synchronize");
}

ug_status ug_device_autotune(ug_device *device, char *report, size_t report_len)
{
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_autotune: device is NULL");
    if (report && report_len)
        report[0] = '\0';
    if (!device->backend->autotune) {
        if (report && report_len)
            snprintf(report, report_len, "%s: nothing to tune\n", device->info.id);
        return UG_OK;
    }
    ug_status st = ug_call_autotune(device, report, report_len);
    /* A report that filled its buffer was cut: its last line says so. */
    static const char cut[] = "\n... (cut: the report is longer than its buffer)\n";
    if (report && report_len > sizeof cut && strlen(report) + 1 >= report_len)
        memcpy(report + report_len - sizeof cut, cut, sizeof cut);
    return st;
}
