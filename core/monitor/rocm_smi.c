/* AMD GPUs through ROCm SMI (librocm_smi64), loaded at run time when
 * present, over the amdgpu sysfs figures: utilisation, VRAM, the edge
 * temperature and the average power. Clocks stay sysfs's: ROCm SMI's
 * frequency structure changed its layout between releases, which a
 * library declaring its own types cannot follow safely. The few
 * functions used are declared here from ROCm SMI's reference. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/monitor/internal.h"

typedef int rsmi_status;                   /* rsmi_status_t: 0 is RSMI_STATUS_SUCCESS */
enum { RSMI_MEM_TYPE_VRAM = 0, RSMI_TEMP_TYPE_EDGE = 0, RSMI_TEMP_CURRENT = 0 };

static struct {
    void *handle;
    char why[160];
    rsmi_status (*init)(uint64_t flags);
    rsmi_status (*busy)(uint32_t, uint32_t *);
    rsmi_status (*memory_used)(uint32_t, int, uint64_t *);
    rsmi_status (*memory_total)(uint32_t, int, uint64_t *);
    rsmi_status (*temperature)(uint32_t, uint32_t, int, int64_t *); /* millidegrees */
    rsmi_status (*power)(uint32_t, uint32_t, uint64_t *);           /* microwatts */
} rsmi;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char loaded_from[256];

static bool load(const char *library)
{
    if (loaded_from[0] && !strcmp(loaded_from, library))
        return rsmi.handle != NULL;
    if (rsmi.handle)
        dlclose(rsmi.handle);
    memset(&rsmi, 0, sizeof rsmi);
    snprintf(loaded_from, sizeof loaded_from, "%s", library);
    /* The soname follows ROCm's releases: the name given, else the known ones. */
    const char *known[] = {"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5",
                           "librocm_smi64.so.1", "librocm_smi64.so", NULL};
    const char *given[] = {library, NULL};
    const ug_library_symbol symbols[] = {
        {(void **)&rsmi.init, "rsmi_init"},
        {(void **)&rsmi.busy, "rsmi_dev_busy_percent_get"},
        {(void **)&rsmi.memory_used, "rsmi_dev_memory_usage_get"},
        {(void **)&rsmi.memory_total, "rsmi_dev_memory_total_get"},
        {(void **)&rsmi.temperature, "rsmi_dev_temp_metric_get"},
        {(void **)&rsmi.power, "rsmi_dev_power_ave_get"},
    };
    rsmi.handle = ug_library_open("ROCm SMI", *library ? given : known, symbols,
                                  (int)(sizeof symbols / sizeof symbols[0]), rsmi.why, sizeof rsmi.why);
    if (!rsmi.handle)
        return false;
    if (rsmi.init(0) != 0) {
        snprintf(rsmi.why, sizeof rsmi.why, "rsmi_init failed");
        dlclose(rsmi.handle);
        rsmi.handle = NULL;
        return false;
    }
    return true;
}

/* Takes value into f when the call succeeded; keeps f otherwise (the
 * sysfs figure or its reason). */
static void take(ug_sample_figure *f, rsmi_status rc, double value)
{
    if (rc == 0)
        f->value = value;
}

bool ug_rocm_smi_sample(const char *library, int index, ug_device_sample *s)
{
    if (!library)
        library = getenv("UG_ROCM_SMI_LIBRARY") ? getenv("UG_ROCM_SMI_LIBRARY") : "";
    pthread_mutex_lock(&lock);
    bool ok = load(library);
    if (ok) {
        uint32_t dev = (uint32_t)index, busy = 0;
        uint64_t used = 0, total = 0, power = 0;
        int64_t milli = 0;
        /* Each call before its value is read: arguments have no order. */
        rsmi_status rc = rsmi.busy(dev, &busy);
        take(&s->utilization, rc, busy);
        rc = rsmi.memory_used(dev, RSMI_MEM_TYPE_VRAM, &used);
        take(&s->memory_used, rc, (double)used);
        rc = rsmi.memory_total(dev, RSMI_MEM_TYPE_VRAM, &total);
        take(&s->memory_total, rc, (double)total);
        rc = rsmi.temperature(dev, RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_CURRENT, &milli);
        take(&s->temperature, rc, (double)milli / 1000.0);
        rc = rsmi.power(dev, 0, &power);
        take(&s->power, rc, (double)power * 1e-6);
        snprintf(s->source, sizeof s->source, "ROCm SMI and amdgpu sysfs");
    }
    pthread_mutex_unlock(&lock);
    return ok;
}
