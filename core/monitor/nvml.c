/* NVIDIA GPUs through NVML, loaded at run time (nothing linked): the few
 * functions and types used here are declared from NVML's reference, so the
 * library builds without the driver's headers and runs without its
 * library. UG_NVML_LIBRARY names another library (the tests' double). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/monitor/internal.h"

typedef int nvml_return;                  /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
typedef struct { unsigned int gpu, memory; } nvml_utilization;   /* nvmlUtilization_t: percent */
typedef struct { unsigned long long total, free, used; } nvml_memory; /* nvmlMemory_t: bytes */
/* nvmlMemory_v2_t: its used leaves out what the driver reserves (about 1 GiB
 * on an H100), as nvidia-smi's memory.used does; version is the struct's size
 * with 2 in the top byte (NVML_STRUCT_VERSION). */
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvml_memory_v2;
#define NVML_MEMORY_V2_VERSION ((unsigned int)sizeof(nvml_memory_v2) | 2u << 24)
enum { NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_MEM = 2 };

static struct {
    void *handle;
    char why[160];
    nvml_return (*init)(void);
    const char *(*error_string)(nvml_return);
    nvml_return (*handle_by_index)(unsigned int, nvml_device *);
    nvml_return (*name)(nvml_device, char *, unsigned int);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*memory_v2)(nvml_device, nvml_memory_v2 *); /* NULL before driver 510 */
    nvml_return (*temperature)(nvml_device, int, unsigned int *);
    nvml_return (*power)(nvml_device, unsigned int *);
    nvml_return (*clock)(nvml_device, int, unsigned int *);
} nvml;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char loaded_from[256];

/* Loads library and initialises NVML once (again for another library). */
static bool load(const char *library)
{
    if (nvml.handle && !strcmp(loaded_from, library))
        return true;
    if (nvml.handle)
        dlclose(nvml.handle);
    memset(&nvml, 0, sizeof nvml);
    snprintf(loaded_from, sizeof loaded_from, "%s", library);
    const ug_library_symbol symbols[] = {
        {(void **)&nvml.init, "nvmlInit_v2"},
        {(void **)&nvml.error_string, "nvmlErrorString"},
        {(void **)&nvml.handle_by_index, "nvmlDeviceGetHandleByIndex_v2"},
        {(void **)&nvml.name, "nvmlDeviceGetName"},
        {(void **)&nvml.utilization, "nvmlDeviceGetUtilizationRates"},
        {(void **)&nvml.memory, "nvmlDeviceGetMemoryInfo"},
        {(void **)&nvml.temperature, "nvmlDeviceGetTemperature"},
        {(void **)&nvml.power, "nvmlDeviceGetPowerUsage"},
        {(void **)&nvml.clock, "nvmlDeviceGetClockInfo"},
    };
    const char *names[] = {library, NULL};
    nvml.handle = ug_library_open("NVML", names, symbols, (int)(sizeof symbols / sizeof symbols[0]), nvml.why,
                                  sizeof nvml.why);
    if (!nvml.handle)
        return false;
    *(void **)&nvml.memory_v2 = dlsym(nvml.handle, "nvmlDeviceGetMemoryInfo_v2");
    nvml_return rc = nvml.init();
    if (rc) {
        snprintf(nvml.why, sizeof nvml.why, "nvmlInit failed: %s", nvml.error_string(rc));
        dlclose(nvml.handle);
        nvml.handle = NULL;
        return false;
    }
    return true;
}

static void failed(ug_sample_figure *f, const char *call, nvml_return rc)
{
    ug_sample_missing(f, "%s: %s", call, nvml.error_string(rc));
}

bool ug_nvml_sample(const char *library, int index, ug_device_sample *s)
{
    if (!library)
        library = getenv("UG_NVML_LIBRARY") && *getenv("UG_NVML_LIBRARY") ? getenv("UG_NVML_LIBRARY")
                                                                         : "libnvidia-ml.so.1";
    pthread_mutex_lock(&lock);
    nvml_device dev = NULL;
    nvml_return rc = 0;
    bool ok = load(library);
    if (!ok)
        ug_sample_clear(s, nvml.why);
    else if ((rc = nvml.handle_by_index((unsigned int)index, &dev)) != 0) {
        char why[96];
        snprintf(why, sizeof why, "NVML has no device %d: %s", index, nvml.error_string(rc));
        ug_sample_clear(s, why);
        ok = false;
    }
    if (ok) {
        snprintf(s->source, sizeof s->source, "NVML");
        char name[96];
        if (nvml.name(dev, name, sizeof name) == 0)
            snprintf(s->name, sizeof s->name, "%s", name);
        nvml_utilization u;
        if ((rc = nvml.utilization(dev, &u)) == 0)
            s->utilization.value = u.gpu;
        else
            failed(&s->utilization, "nvmlDeviceGetUtilizationRates", rc);
        nvml_memory m;
        nvml_memory_v2 m2 = {.version = NVML_MEMORY_V2_VERSION};
        if (nvml.memory_v2 && nvml.memory_v2(dev, &m2) == 0) {
            s->memory_used.value = (double)m2.used;
            s->memory_total.value = (double)m2.total;
        } else if ((rc = nvml.memory(dev, &m)) == 0) {
            s->memory_used.value = (double)m.used;
            s->memory_total.value = (double)m.total;
        } else {
            failed(&s->memory_used, "nvmlDeviceGetMemoryInfo", rc);
            failed(&s->memory_total, "nvmlDeviceGetMemoryInfo", rc);
        }
        unsigned int v = 0;
        if ((rc = nvml.temperature(dev, NVML_TEMPERATURE_GPU, &v)) == 0)
            s->temperature.value = v;
        else
            failed(&s->temperature, "nvmlDeviceGetTemperature", rc);
        if ((rc = nvml.power(dev, &v)) == 0)
            s->power.value = v / 1000.0; /* milliwatts */
        else
            failed(&s->power, "nvmlDeviceGetPowerUsage", rc);
        if ((rc = nvml.clock(dev, NVML_CLOCK_GRAPHICS, &v)) == 0)
            s->clock.value = v;
        else
            failed(&s->clock, "nvmlDeviceGetClockInfo(graphics)", rc);
        if ((rc = nvml.clock(dev, NVML_CLOCK_MEM, &v)) == 0)
            s->memory_clock.value = v;
        else
            failed(&s->memory_clock, "nvmlDeviceGetClockInfo(memory)", rc);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}
