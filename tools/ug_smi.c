/* ug-smi: what every device is doing now, as nvidia-smi shows it for one
 * vendor: utilisation, memory, temperature, power and clocks where the
 * platform tells them (monitor.h), and the memory each running unigrad
 * process's pool holds on each device. "-" marks a figure the platform
 * does not give; the reasons follow the table (and are in --json). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json_string.h"
#include "unigrad/unigrad.h"

static void usage(FILE *to)
{
    fprintf(to, "usage: ug-smi [--device ID] [--json] [--watch SECONDS]\n"
                "Shows each device's utilisation, memory in use, temperature, power and clock\n"
                "(NVIDIA through NVML, AMD through the amdgpu driver's sysfs files, the CPU and\n"
                "POCL from /proc and /sys), and the memory each running unigrad process's pool\n"
                "holds there. '-' marks a figure the platform does not give; the reasons are\n"
                "listed below the table. --json prints one JSON object (one per line with\n"
                "--watch); --watch repeats every SECONDS until interrupted.\n");
}

/* The length of the valid UTF-8 sequence at s, 0 if none starts there
 * (a stray continuation byte, an overlong form, a surrogate, past
 * U+10FFFF). */
static size_t utf8_length(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

/* A JSON string of text that may hold any bytes (a process's command, a
 * path from the environment in a reason): JSON is UTF-8, so each byte
 * that starts no valid sequence becomes U+FFFD rather than making the
 * whole output unreadable to a JSON parser. */
static void json_text(const char *text)
{
    char clean[1024];
    size_t out = 0;
    for (const unsigned char *s = (const unsigned char *)text; *s && out + 4 < sizeof clean;) {
        size_t n = utf8_length(s);
        if (n == 0) {
            memcpy(clean + out, "\xef\xbf\xbd", 3);
            out += 3;
            s++;
        } else {
            memcpy(clean + out, s, n);
            out += n;
            s += n;
        }
    }
    clean[out] = '\0';
    json_string(stdout, clean);
}

/* JSON has no NaN or infinity: a figure that is not a finite number is
 * null, with its reason (the monitor gives one for every such figure). */
static void json_figure(const char *name, const ug_sample_figure *f)
{
    printf(",\"%s\":", name);
    if (!isfinite(f->value)) {
        printf("null,\"%s_why\":", name);
        json_text(f->why[0] ? f->why : "not a finite number");
    } else {
        printf("%.15g", f->value);
    }
}

static void print_json(const ug_device_sample *s, int count)
{
    printf("{\"time\":%lld,\"devices\":[", (long long)time(NULL));
    for (int d = 0; d < count; d++) {
        const ug_device_sample *x = &s[d];
        printf("%s{\"id\":", d ? "," : "");
        json_text(x->id);
        printf(",\"name\":");
        json_text(x->name);
        printf(",\"source\":");
        json_text(x->source);
        json_figure("utilization_percent", &x->utilization);
        json_figure("memory_used_bytes", &x->memory_used);
        json_figure("memory_total_bytes", &x->memory_total);
        json_figure("temperature_c", &x->temperature);
        json_figure("power_w", &x->power);
        json_figure("clock_mhz", &x->clock);
        json_figure("memory_clock_mhz", &x->memory_clock);
        printf(",\"processes\":[");
        int shown = x->process_count < UG_SAMPLE_MAX_PROCESSES ? x->process_count : UG_SAMPLE_MAX_PROCESSES;
        for (int p = 0; p < shown; p++) {
            const ug_sample_process *q = &x->processes[p];
            printf("%s{\"pid\":%lld,\"command\":", p ? "," : "", (long long)q->pid);
            json_text(q->command);
            printf(",\"bytes_in_use\":%llu,\"bytes_cached\":%llu,\"peak_bytes_in_use\":%llu}",
                   (unsigned long long)q->bytes_in_use, (unsigned long long)q->bytes_cached,
                   (unsigned long long)q->peak_bytes_in_use);
        }
        printf("]}");
    }
    printf("]}\n");
}

/* value formatted, or "-". */
static const char *fmt(char *buf, size_t len, const ug_sample_figure *f, const char *format, double scale)
{
    if (isnan(f->value))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, format, f->value * scale);
    return buf;
}

static const ug_sample_figure *figure_of(const ug_device_sample *s, int i)
{
    const ug_sample_figure *figures[] = {&s->utilization, &s->memory_used, &s->temperature, &s->power, &s->clock};
    return figures[i];
}

/* text in lines of at most 80 columns: two spaces before, four after a break. */
static void wrapped(const char *text)
{
    int column = printf("  ");
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (column > 4 && column + 1 + (int)word > 80)
            column = printf("\n    ") - 1;
        else if (p != text)
            column += printf(" ");
        column += printf("%.*s", (int)word, p);
        p += word;
        while (*p == ' ')
            p++;
    }
    printf("\n");
}

static void print_table(const ug_device_sample *s, int count)
{
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
    printf("ug-smi  %s\n", when);
    printf("%-9s %-22s %5s %17s %5s %7s %9s\n", "Device", "Name", "Util", "Memory used/total", "Temp",
           "Power", "Clock");
    const double gib = 1.0 / (1024.0 * 1024.0 * 1024.0);
    for (int d = 0; d < count; d++) {
        const ug_device_sample *x = &s[d];
        char util[16], used[16], total[16], temp[16], power[16], clock[16], memory[40];
        fmt(used, sizeof used, &x->memory_used, "%.1f", gib);
        fmt(total, sizeof total, &x->memory_total, "%.1f", gib);
        snprintf(memory, sizeof memory, "%s/%s GiB", used, total);
        printf("%-9.9s %-22.22s %5s %17s %5s %7s %9s\n", x->id, x->name,
               fmt(util, sizeof util, &x->utilization, "%.0f%%", 1.0), memory,
               fmt(temp, sizeof temp, &x->temperature, "%.0fC", 1.0),
               fmt(power, sizeof power, &x->power, "%.0fW", 1.0),
               fmt(clock, sizeof clock, &x->clock, "%.0fMHz", 1.0));
    }
    printf("\n%-9s %8s %-16s %12s %12s %12s\n", "Device", "PID", "Process", "Pool in use", "Cached", "Peak");
    int processes = 0;
    const double mib = 1.0 / (1024.0 * 1024.0);
    for (int d = 0; d < count; d++)
        for (int p = 0; p < s[d].process_count && p < UG_SAMPLE_MAX_PROCESSES; p++, processes++) {
            const ug_sample_process *q = &s[d].processes[p];
            printf("%-9.9s %8lld %-16.16s %8.1f MiB %8.1f MiB %8.1f MiB\n", s[d].id, (long long)q->pid, q->command,
                   (double)q->bytes_in_use * mib, (double)q->bytes_cached * mib, (double)q->peak_bytes_in_use * mib);
        }
    if (!processes)
        printf("no unigrad process holds memory on these devices\n");
    /* Each reason once, with the devices it applies to, wrapped at 80. */
    static const char *const names[] = {"utilisation", "memory", "temperature", "power", "clock"};
    bool header = false;
    for (int d = 0; d < count; d++)
        for (int i = 0; i < 5; i++) {
            const ug_sample_figure *f = figure_of(&s[d], i);
            bool earlier = false;
            for (int e = 0; e < d && !earlier; e++)
                earlier = isnan(figure_of(&s[e], i)->value) && !strcmp(figure_of(&s[e], i)->why, f->why);
            if (!isnan(f->value) || earlier)
                continue;
            if (!header)
                printf("\n'-' is not reported:\n");
            header = true;
            char line[512];
            int n = snprintf(line, sizeof line, "%s (%s", names[i], s[d].id);
            for (int e = d + 1; e < count; e++)
                if (isnan(figure_of(&s[e], i)->value) && !strcmp(figure_of(&s[e], i)->why, f->why))
                    n += snprintf(line + n, sizeof line - (size_t)n, ", %s", s[e].id);
            snprintf(line + n, sizeof line - (size_t)n, "): %s", f->why);
            wrapped(line);
        }
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    bool json = false;
    double watch = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            only = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--watch")) {
            char *end = NULL;
            watch = strtod(argv[++i], &end);
            if (*end || !(watch >= 0.1 && watch <= 86400)) {
                fprintf(stderr, "ug-smi: --watch takes seconds from 0.1 to 86400, not '%s'\n", argv[i]);
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    int count = ug_device_count(), shown = 0;
    ug_device_sample *samples = calloc(count > 0 ? (size_t)count : 1, sizeof *samples);
    if (!samples) {
        fprintf(stderr, "ug-smi: out of memory\n");
        return 1;
    }
    for (;;) {
        shown = 0;
        for (int i = 0; i < count; i++) {
            ug_device_info info;
            if (ug_device_info_at(i, &info) != UG_OK || (only && strcmp(info.id, only) != 0))
                continue;
            if (ug_device_sample_at(i, &samples[shown]) != UG_OK) {
                fprintf(stderr, "ug-smi: %s: %s\n", info.id, ug_last_error());
                free(samples);
                return 1;
            }
            shown++;
        }
        if (only && !shown) {
            fprintf(stderr, "ug-smi: no device '%s' (ug-devices lists them)\n", only);
            free(samples);
            return 2;
        }
        if (watch > 0 && !json && isatty(STDOUT_FILENO))
            printf("\033[H\033[2J"); /* a screen per sample, as watch(1) */
        if (json)
            print_json(samples, shown);
        else
            print_table(samples, shown);
        fflush(stdout);
        if (watch <= 0)
            break;
        struct timespec pause = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
        nanosleep(&pause, NULL);
    }
    free(samples);
    return 0;
}
