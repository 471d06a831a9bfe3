/* The CPU's figures (and POCL's device, which is the CPU) from /proc and
 * /sys: utilisation from /proc/stat's counters between two readings,
 * memory from /proc/meminfo, temperature from the CPU's hwmon driver or a
 * package thermal zone, power from RAPL's energy counter between the same
 * two readings, the cores' mean clock from cpufreq or /proc/cpuinfo. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, clock_gettime */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "core/monitor/internal.h"

typedef struct reading {
    double seconds;           /* CLOCK_MONOTONIC */
    double busy, total;       /* /proc/stat's jiffies */
    double energy_uj;         /* RAPL package energy; NaN: not readable */
} reading;

static bool take(const char *root_proc, const char *root_sys, reading *r)
{
    r->seconds = ug_seconds_now();
    char path[512];
    snprintf(path, sizeof path, "%s/stat", root_proc);
    FILE *f = ug_monitor_open(path);
    if (!f)
        return false;
    double v[8] = {0};
    int n = fscanf(f, "cpu %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return false;
    r->total = 0;
    for (int i = 0; i < n; i++)
        r->total += v[i];
    r->busy = r->total - v[3] - (n > 4 ? v[4] : 0); /* less idle and iowait */
    if (!ug_read_number(root_sys, "class/powercap/intel-rapl:0/energy_uj", &r->energy_uj))
        r->energy_uj = NAN;
    return true;
}

/* A figure computed from the files, or missing when the arithmetic gave
 * NaN (infinite counters subtracted): NaN means "missing" to every reader,
 * so it must come with its reason. Infinite values stay for
 * ug_sample_check to report with the value. */
static void computed(ug_sample_figure *f, double value, const char *from)
{
    if (isnan(value))
        ug_sample_missing(f, "%s gives no finite figure", from);
    else
        f->value = value;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reading previous;
static bool have_previous;
static char previous_root[256];

/* Two readings at least 0.1 s apart: the previous call's and now. */
static bool interval(const char *root_proc, const char *root_sys, reading *a, reading *b)
{
    pthread_mutex_lock(&lock);
    bool same_root = have_previous && strcmp(previous_root, root_proc) == 0;
    *a = previous;
    bool ok = take(root_proc, root_sys, b);
    if (ok && (!same_root || b->seconds - a->seconds < 0.05)) {
        *a = *b;
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        ok = take(root_proc, root_sys, b);
    }
    if (ok) {
        previous = *b;
        have_previous = true;
        snprintf(previous_root, sizeof previous_root, "%s", root_proc);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

static void memory(const char *root_proc, ug_device_sample *s)
{
    char path[512], line[256];
    snprintf(path, sizeof path, "%s/meminfo", root_proc);
    FILE *f = ug_monitor_open(path);
    double total = NAN, available = NAN, kb = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lf kB", &kb) == 1)
            total = kb * 1024.0;
        else if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            available = kb * 1024.0;
    }
    if (f)
        fclose(f);
    if (isnan(total) || isnan(available)) {
        ug_sample_missing(&s->memory_used, "%s has no MemTotal and MemAvailable", path);
        ug_sample_missing(&s->memory_total, "%s has no MemTotal", path);
        return;
    }
    computed(&s->memory_total, total, path);
    computed(&s->memory_used, total - available, path);
}

/* The CPU's temperature: a hwmon driver of CPUs, else a package zone. */
static void temperature(const char *root_sys, ug_device_sample *s)
{
    static const char *const drivers[] = {"k10temp", "coretemp", "zenpower", "cpu_thermal", NULL};
    char path[512], name[64];
    for (int i = 0; i < 64; i++) {
        snprintf(path, sizeof path, "%s/class/hwmon/hwmon%d/name", root_sys, i);
        FILE *f = ug_monitor_open(path);
        if (!f)
            continue;
        bool read = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\n")] = '\0';
        for (int d = 0; read && drivers[d]; d++) {
            double milli = 0;
            snprintf(path, sizeof path, "class/hwmon/hwmon%d/temp1_input", i);
            if (!strcmp(name, drivers[d]) && ug_read_number(root_sys, path, &milli)) {
                s->temperature.value = milli / 1000.0;
                return;
            }
        }
    }
    ug_sample_missing(&s->temperature, "no CPU temperature sensor in %s/class/hwmon (a virtual machine?)", root_sys);
}

static void clock_mhz(const char *root_proc, const char *root_sys, ug_device_sample *s)
{
    double sum = 0, khz = 0;
    int n = 0;
    char path[512];
    for (; n < 4096; n++) {
        snprintf(path, sizeof path, "devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq", n);
        if (!ug_read_number(root_sys, path, &khz))
            break;
        sum += khz / 1000.0;
    }
    if (!n) { /* no cpufreq (virtual machines): the kernel's figure per core */
        snprintf(path, sizeof path, "%s/cpuinfo", root_proc);
        FILE *f = ug_monitor_open(path);
        char line[256];
        double mhz = 0;
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "cpu MHz : %lf", &mhz) == 1) {
                sum += mhz;
                n++;
            }
        if (f)
            fclose(f);
    }
    if (n)
        computed(&s->clock, sum / n, "the cores' clocks");
    else
        ug_sample_missing(&s->clock, "neither cpufreq nor %s/cpuinfo gives the cores' clock", root_proc);
    ug_sample_missing(&s->memory_clock, "not reported for the CPU's memory");
}

void ug_host_sample(const char *root_proc, const char *root_sys, ug_device_sample *s)
{
    snprintf(s->source, sizeof s->source, "/proc and /sys");
    reading a, b;
    if (interval(root_proc, root_sys, &a, &b) && b.total > a.total) {
        computed(&s->utilization, 100.0 * (b.busy - a.busy) / (b.total - a.total), "/proc/stat");
        if (!isnan(a.energy_uj) && !isnan(b.energy_uj) && b.energy_uj >= a.energy_uj)
            computed(&s->power, (b.energy_uj - a.energy_uj) * 1e-6 / (b.seconds - a.seconds),
                     "RAPL's energy counter");
        else
            ug_sample_missing(&s->power, "RAPL's energy counter %s/class/powercap/intel-rapl:0/energy_uj is "
                              "absent or readable by root only", root_sys);
    } else {
        ug_sample_missing(&s->utilization, "%s/stat has no cpu line", root_proc);
        ug_sample_missing(&s->power, "no interval to measure over");
    }
    memory(root_proc, s);
    temperature(root_sys, s);
    clock_mhz(root_proc, root_sys, s);
}
