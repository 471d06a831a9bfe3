/* One sample of a device (monitor.h): the source its vendor and kind call
 * for, and the unigrad processes holding memory on it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/regular_file.h"
#include "core/monitor/internal.h"
#include "unigrad/device.h"

void ug_sample_missing(ug_sample_figure *f, const char *fmt, ...)
{
    f->value = NAN;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->why, sizeof f->why, fmt, ap);
    va_end(ap);
}

void ug_sample_clear(ug_device_sample *s, const char *why)
{
    ug_sample_figure *figures[] = {&s->utilization, &s->memory_used, &s->memory_total, &s->temperature,
                                   &s->power, &s->clock, &s->memory_clock};
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
        ug_sample_missing(figures[i], "%s", why);
}

FILE *ug_monitor_open(const char *path)
{
    /* Absent files are the common case (hwmon0..63 probed in turn): no
     * open, and no message set, for them. */
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return NULL;
    int fd = -1;
    if (ug_open_regular_file(path, "a monitoring file", &fd, NULL) != UG_OK)
        return NULL; /* replaced by something else since the stat */
    FILE *f = fdopen(fd, "r");
    if (!f)
        close(fd);
    return f;
}

/* The range of each figure: what a device can report, not what is usual. */
static void check_figure(ug_sample_figure *f, const char *what, double least, double most)
{
    if (isnan(f->value))
        return; /* missing already, with its reason */
    if (isfinite(f->value) && f->value >= least && f->value <= most)
        return;
    ug_sample_missing(f, "the source gave %g, not a possible %s", f->value, what);
}

void ug_sample_check(ug_device_sample *s)
{
    /* /proc/stat's idle and iowait counters may step back between two
     * readings, which puts a true figure a little past 0 or 100. */
    if (isfinite(s->utilization.value) && s->utilization.value >= -5 && s->utilization.value <= 105)
        s->utilization.value = fmin(100.0, fmax(0.0, s->utilization.value));
    check_figure(&s->utilization, "utilisation (percent)", 0, 100);
    check_figure(&s->memory_used, "memory size (bytes)", 0, 0x1p64);
    check_figure(&s->memory_total, "memory size (bytes)", 0, 0x1p64);
    check_figure(&s->temperature, "temperature (degrees Celsius)", -273.15, 1000);
    check_figure(&s->power, "power (watts)", 0, 1e6);
    check_figure(&s->clock, "clock (MHz)", 0, 1e6);
    check_figure(&s->memory_clock, "clock (MHz)", 0, 1e6);
}

bool ug_read_number(const char *root, const char *path, double *value)
{
    char full[640], text[64];
    snprintf(full, sizeof full, "%s/%s", root, path);
    FILE *f = ug_monitor_open(full);
    if (!f)
        return false;
    bool read = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    char *end = NULL;
    double v = read ? strtod(text, &end) : 0.0;
    if (!read || end == text || !isfinite(v))
        return false;
    *value = v;
    return true;
}

static const char *root(const char *variable, const char *fallback)
{
    const char *r = getenv(variable);
    return r && *r ? r : fallback;
}

/* The device's position among the devices before it of its own kind:
 * cuda:N is NVML's N, hip:N the N-th amdgpu card, an OpenCL GPU the
 * count of its vendor's OpenCL GPUs before it. */
static int ordinal(int index, const ug_device_info *info)
{
    int n = 0;
    for (int i = 0; i < index; i++) {
        ug_device_info other;
        if (ug_device_info_at(i, &other) == UG_OK && !strcmp(other.backend, info->backend) &&
            other.is_gpu == info->is_gpu && !strcmp(other.vendor, info->vendor))
            n++;
    }
    return n;
}

static bool vendor_is(const ug_device_info *info, const char *name)
{
    char lower[260];
    snprintf(lower, sizeof lower, "%s %s", info->vendor, info->name);
    for (char *c = lower; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    return strstr(lower, name) != NULL;
}

/* An OpenCL device on the host's processor (POCL): its memory is the
 * host's, of which it reports a part that it does not enforce and that a
 * pool holds to instead (UG_MEMORY_LIMIT aside). Its total is that part, as
 * ug-devices gives it; the host's memory in use is the cpu row's, not this
 * device's, and unigrad's pools on it are its processes. */
static void processor_device_memory(const ug_device_info *info, ug_device_sample *s)
{
    if (info->global_memory)
        s->memory_total.value = (double)info->global_memory;
    else
        ug_sample_missing(&s->memory_total, "%s reports no memory size", info->id);
    ug_sample_missing(&s->memory_used,
                      "%s's memory is the host's, whose use is the cpu row's; unigrad's pools on it are "
                      "listed by process",
                      info->id);
}

ug_status ug_device_sample_at(int index, ug_device_sample *s)
{
    if (!s)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_device_sample_at: sample is NULL");
    ug_device_info info;
    UG_TRY(ug_device_info_at(index, &info));
    memset(s, 0, sizeof *s);
    snprintf(s->id, sizeof s->id, "%s", info.id);
    snprintf(s->name, sizeof s->name, "%s", info.name);
    ug_sample_clear(s, "not reported for this device");
    const char *sys = root("UG_SYSFS_ROOT", "/sys");
    if (!info.is_gpu) {
        ug_host_sample(root("UG_PROCFS_ROOT", "/proc"), sys, s);
        if (strcmp(info.backend, "cpu") != 0)
            processor_device_memory(&info, s);
    } else if (!strcmp(info.backend, "cuda") || vendor_is(&info, "nvidia")) {
        ug_nvml_sample(NULL, ordinal(index, &info), s);
    } else if (!strcmp(info.backend, "hip") || vendor_is(&info, "amd") || vendor_is(&info, "advanced micro")) {
        ug_amdgpu_sample(sys, ordinal(index, &info), s);
        ug_rocm_smi_sample(NULL, ordinal(index, &info), s);
    } else {
        snprintf(s->source, sizeof s->source, "none");
        ug_sample_clear(s, "no monitoring source for this vendor's GPUs");
    }
    ug_sample_check(s);
    ug_registry_processes(info.id, s);
    return UG_OK;
}
