/* A test double of NVML (libnvidia-ml.so.1): one GPU with fixed figures
 * and no power reading, for the monitor's NVML path (test_monitor.c,
 * ug_smi.sh). Signatures as NVML's reference declares them. */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvml_device_st *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

enum { SUCCESS = 0, ERROR_INVALID_ARGUMENT = 2, ERROR_NOT_SUPPORTED = 3 };
static int the_device;

nvmlReturn_t nvmlInit_v2(void) { return SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t r)
{
    return r == ERROR_NOT_SUPPORTED ? "Not Supported" : r == ERROR_INVALID_ARGUMENT ? "Invalid Argument" : "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (index != 0)
        return ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&the_device;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    (void)device;
    strncpy(name, "Fake H100", length);
    name[length - 1] = '\0';
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
    (void)device;
    u->gpu = 37;
    u->memory = 12;
    return SUCCESS;
}

/* The first call counts the driver's reserved 0.5 GiB as used, as NVML's
 * does; the monitor is expected to ask _v2, which leaves it out (1.5 GiB). */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
    (void)device;
    m->total = 80ull << 30;
    m->used = 2ull << 30;
    m->free = m->total - m->used;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
    (void)device;
    if (m->version != ((unsigned int)sizeof *m | 2u << 24))
        return ERROR_INVALID_ARGUMENT;
    m->total = 80ull << 30;
    m->reserved = 1ull << 29;
    m->used = 3ull << 29; /* 1.5 GiB */
    m->free = m->total - m->used - m->reserved;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *t)
{
    (void)device;
    if (sensor != 0)
        return ERROR_INVALID_ARGUMENT;
    *t = 41;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts)
{
    (void)device;
    (void)milliwatts;
    return ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz)
{
    (void)device;
    if (type == 0)
        *mhz = 1755;
    else if (type == 2)
        *mhz = 2619;
    else
        return ERROR_INVALID_ARGUMENT;
    return SUCCESS;
}
