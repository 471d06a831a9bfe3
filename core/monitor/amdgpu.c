/* AMD GPUs through the amdgpu driver's sysfs files (class/drm/cardN/device/):
 * gpu_busy_percent, mem_info_vram_used and _total, the hwmon sensors
 * (temp1_input in millidegrees, power1_average or power1_input in
 * microwatts) and the clock levels pp_dpm_sclk / pp_dpm_mclk, whose
 * current level is marked "*". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/monitor/internal.h"

/* The current level of a pp_dpm_* file ("1: 1200Mhz *"), in MHz. */
static bool current_level(const char *root, const char *path, double *mhz)
{
    char full[512], line[128];
    snprintf(full, sizeof full, "%s/%s", root, path);
    FILE *f = ug_monitor_open(full);
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        int level = 0;
        found = strchr(line, '*') && sscanf(line, "%d: %lf", &level, mhz) == 2;
    }
    if (f)
        fclose(f);
    return found;
}

/* The hwmon folder of the card (device/hwmon/hwmonN), as "…/hwmonN/". */
static bool hwmon_of(const char *root, const char *device, char *out, size_t len)
{
    for (int i = 0; i < 64; i++) {
        double unused = 0;
        char path[256];
        snprintf(path, sizeof path, "%s/hwmon/hwmon%d/temp1_input", device, i);
        snprintf(out, len, "%s/hwmon/hwmon%d/", device, i);
        if (ug_read_number(root, path, &unused))
            return true;
        snprintf(path, sizeof path, "%s/hwmon/hwmon%d/power1_average", device, i);
        if (ug_read_number(root, path, &unused))
            return true;
    }
    return false;
}

static void figure(const char *root, const char *device, const char *file, double scale, ug_sample_figure *f,
                   const char *what)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", device, file);
    double v = 0;
    if (ug_read_number(root, path, &v))
        f->value = v * scale;
    else
        ug_sample_missing(f, "amdgpu gives no %s (%s/%s)", what, root, path);
}

bool ug_amdgpu_sample(const char *root, int card, ug_device_sample *s)
{
    char device[64] = "";
    int seen = 0;
    for (int i = 0; i < 64 && !device[0]; i++) {
        char path[64];
        double vendor = 0;
        snprintf(path, sizeof path, "class/drm/card%d/device/vendor", i);
        if (ug_read_number(root, path, &vendor) && vendor == 0x1002 && seen++ == card)
            snprintf(device, sizeof device, "class/drm/card%d/device", i);
    }
    if (!device[0]) {
        ug_sample_clear(s, "no amdgpu card in /sys/class/drm for this device");
        return false;
    }
    snprintf(s->source, sizeof s->source, "amdgpu sysfs");
    figure(root, device, "gpu_busy_percent", 1.0, &s->utilization, "utilisation");
    figure(root, device, "mem_info_vram_used", 1.0, &s->memory_used, "memory in use");
    figure(root, device, "mem_info_vram_total", 1.0, &s->memory_total, "memory size");
    char hwmon[128];
    if (hwmon_of(root, device, hwmon, sizeof hwmon)) {
        char path[192];
        double v = 0;
        snprintf(path, sizeof path, "%stemp1_input", hwmon);
        if (ug_read_number(root, path, &v))
            s->temperature.value = v / 1000.0;
        else
            ug_sample_missing(&s->temperature, "the card's hwmon has no temp1_input");
        snprintf(path, sizeof path, "%spower1_average", hwmon);
        bool power = ug_read_number(root, path, &v);
        if (!power) {
            snprintf(path, sizeof path, "%spower1_input", hwmon);
            power = ug_read_number(root, path, &v);
        }
        if (power)
            s->power.value = v * 1e-6;
        else
            ug_sample_missing(&s->power, "the card's hwmon has no power1_average or power1_input");
    } else {
        ug_sample_missing(&s->temperature, "the card has no hwmon sensors");
        ug_sample_missing(&s->power, "the card has no hwmon sensors");
    }
    char path[128];
    double mhz = 0;
    snprintf(path, sizeof path, "%s/pp_dpm_sclk", device);
    if (current_level(root, path, &mhz))
        s->clock.value = mhz;
    else
        ug_sample_missing(&s->clock, "no current level in %s", path);
    snprintf(path, sizeof path, "%s/pp_dpm_mclk", device);
    if (current_level(root, path, &mhz))
        s->memory_clock.value = mhz;
    else
        ug_sample_missing(&s->memory_clock, "no current level in %s", path);
    return true;
}
