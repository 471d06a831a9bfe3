/* Device samples (monitor.h) from each source against test doubles: a
 * fake amdgpu sysfs tree, a fake libnvidia-ml.so.1 (fake_nvml.c, its path
 * in UG_TEST_FAKE_NVML) and librocm_smi64 (fake_rocm_smi.c), a fake /proc and /sys for the CPU, each figure
 * worked out by hand from the files; missing figures NaN with a reason,
 * impossible ones (infinite, 10^297 degrees) missing too; the pool
 * registry (this process listed, a dead one's file removed, a FIFO passed
 * over unopened); the memory total of a device on the host's processor as
 * the device reports it. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, nanosleep, mkfifo, setenv */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/monitor/internal.h"
#include "core/monitor/registry.h"
#include "children.h"
#include "harness.h"

#define EXPECT(cond) ((cond) ? true : (th_fail(TH_LOC, "%s", #cond), false))

static char root[64];

/* Writes text to root/path, creating its folders. */
static void put(const char *path, const char *fmt, ...)
{
    char full[512];
    snprintf(full, sizeof full, "%s/%s", root, path);
    for (char *slash = strchr(full + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(full, 0700);
        *slash = '/';
    }
    FILE *f = fopen(full, "w");
    if (!f) {
        th_fail(TH_LOC, "cannot write %s", full);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void new_root(void)
{
    snprintf(root, sizeof root, "/tmp/ug-monitor-XXXXXX");
    if (!mkdtemp(root))
        th_fail(TH_LOC, "mkdtemp failed");
}

static void remove_root(void)
{
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", root);
    if (system(command) != 0)
        th_fail(TH_LOC, "could not remove %s", root);
}

#define CHECK_NEAR(got, want) CHECK_MSG(fabs((got) - (want)) <= 1e-9 * fabs(want), "%s is %.9g, expected %.9g", #got, (double)(got), (double)(want))

static void test_amdgpu(ug_device *dev)
{
    (void)dev;
    new_root();
    put("class/drm/card0/device/vendor", "0x8086\n"); /* another vendor's card comes first */
    put("class/drm/card1/device/vendor", "0x1002\n");
    put("class/drm/card1/device/gpu_busy_percent", "37\n");
    put("class/drm/card1/device/mem_info_vram_used", "1073741824\n");
    put("class/drm/card1/device/mem_info_vram_total", "17163091968\n");
    put("class/drm/card1/device/hwmon/hwmon3/temp1_input", "45000\n");
    put("class/drm/card1/device/hwmon/hwmon3/power1_average", "87000000\n");
    put("class/drm/card1/device/pp_dpm_sclk", "0: 500Mhz\n1: 2100Mhz *\n2: 2500Mhz\n");
    put("class/drm/card1/device/pp_dpm_mclk", "0: 96Mhz\n1: 1000Mhz *\n");
    put("class/drm/card2/device/vendor", "0x1002\n"); /* a second card without sensors */
    put("class/drm/card2/device/gpu_busy_percent", "5\n");
    ug_device_sample s;
    memset(&s, 0, sizeof s);
    if (EXPECT(ug_amdgpu_sample(root, 0, &s))) {
        CHECK(strcmp(s.source, "amdgpu sysfs") == 0);
        CHECK_NEAR(s.utilization.value, 37.0);
        CHECK_NEAR(s.memory_used.value, 1073741824.0);
        CHECK_NEAR(s.memory_total.value, 17163091968.0);
        CHECK_NEAR(s.temperature.value, 45.0);
        CHECK_NEAR(s.power.value, 87.0);
        CHECK_NEAR(s.clock.value, 2100.0);
        CHECK_NEAR(s.memory_clock.value, 1000.0);
    }
    memset(&s, 0, sizeof s);
    if (EXPECT(ug_amdgpu_sample(root, 1, &s))) {
        CHECK_NEAR(s.utilization.value, 5.0);
        CHECK(isnan(s.memory_used.value) && strstr(s.memory_used.why, "mem_info_vram_used"));
        CHECK(isnan(s.temperature.value) && strstr(s.temperature.why, "no hwmon"));
        CHECK(isnan(s.clock.value) && strstr(s.clock.why, "pp_dpm_sclk"));
    }
    CHECK(!ug_amdgpu_sample(root, 2, &s));
    CHECK(isnan(s.utilization.value) && strstr(s.utilization.why, "no amdgpu card"));
    remove_root();
}

/* ROCm SMI over a sysfs card without sensors: its temperature, power and
 * memory replace sysfs's, the utilisation it fails stays sysfs's. */
static void test_rocm_smi(ug_device *dev)
{
    (void)dev;
    const char *fake = getenv("UG_TEST_FAKE_ROCM_SMI");
    REQUIRE(fake && *fake);
    new_root();
    put("class/drm/card0/device/vendor", "0x1002\n");
    put("class/drm/card0/device/gpu_busy_percent", "12\n");
    put("class/drm/card0/device/pp_dpm_sclk", "0: 800Mhz *\n");
    ug_device_sample s;
    memset(&s, 0, sizeof s);
    REQUIRE(ug_amdgpu_sample(root, 0, &s));
    CHECK(isnan(s.temperature.value) && isnan(s.power.value) && isnan(s.memory_used.value));
    if (EXPECT(ug_rocm_smi_sample(fake, 0, &s))) {
        CHECK_NEAR(s.utilization.value, 12.0); /* ROCm SMI's failed: sysfs's stays */
        CHECK_NEAR(s.temperature.value, 61.0);
        CHECK_NEAR(s.power.value, 95.5);
        CHECK_NEAR(s.memory_used.value, 3.0 * 1073741824.0);
        CHECK_NEAR(s.memory_total.value, 16.0 * 1073741824.0);
        CHECK_NEAR(s.clock.value, 800.0);
        CHECK(strstr(s.source, "ROCm SMI") != NULL);
    }
    ug_device_sample t = s;
    CHECK(!ug_rocm_smi_sample("/nonexistent/librocm_smi64.so.7", 0, &t));
    CHECK_NEAR(t.power.value, 95.5); /* nothing changed without the library */
    remove_root();
}

static void test_nvml(ug_device *dev)
{
    (void)dev;
    const char *fake = getenv("UG_TEST_FAKE_NVML");
    REQUIRE(fake && *fake);
    ug_device_sample s;
    memset(&s, 0, sizeof s);
    ug_sample_clear(&s, "unset");
    if (EXPECT(ug_nvml_sample(fake, 0, &s))) {
        CHECK(strcmp(s.source, "NVML") == 0 && strcmp(s.name, "Fake H100") == 0);
        CHECK_NEAR(s.utilization.value, 37.0);
        CHECK_NEAR(s.memory_used.value, 1.5 * 1073741824.0);
        CHECK_NEAR(s.memory_total.value, 80.0 * 1073741824.0);
        CHECK_NEAR(s.temperature.value, 41.0);
        CHECK_NEAR(s.clock.value, 1755.0);
        CHECK_NEAR(s.memory_clock.value, 2619.0);
        CHECK_MSG(isnan(s.power.value) && strstr(s.power.why, "nvmlDeviceGetPowerUsage: Not Supported"),
                  "power %g (%s)", s.power.value, s.power.why);
    }
    CHECK(!ug_nvml_sample(fake, 1, &s));
    CHECK(isnan(s.memory_used.value) && strstr(s.memory_used.why, "NVML has no device 1"));
    CHECK(!ug_nvml_sample("/nonexistent/libnvidia-ml.so.1", 0, &s));
    CHECK(isnan(s.temperature.value) && strstr(s.temperature.why, "NVML is not installed"));
}

static void test_host(ug_device *dev)
{
    (void)dev;
    new_root();
    put("proc/stat", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n");
    put("proc/meminfo", "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20480000 kB\n");
    put("sys/class/hwmon/hwmon0/name", "acpitz\n");
    put("sys/class/hwmon/hwmon0/temp1_input", "30000\n");
    put("sys/class/hwmon/hwmon1/name", "k10temp\n");
    put("sys/class/hwmon/hwmon1/temp1_input", "52500\n");
    put("sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "2000000\n");
    put("sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", "3000000\n");
    put("sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    char proc[96], sys[96];
    snprintf(proc, sizeof proc, "%s/proc", root);
    snprintf(sys, sizeof sys, "%s/sys", root);
    ug_device_sample s;
    memset(&s, 0, sizeof s);
    ug_host_sample(proc, sys, &s); /* counters that do not move: no interval */
    CHECK(isnan(s.utilization.value));
    CHECK_NEAR(s.memory_total.value, 24576000.0 * 1024);
    CHECK_NEAR(s.memory_used.value, (24576000.0 - 20480000.0) * 1024);
    CHECK_NEAR(s.temperature.value, 52.5); /* the CPU's driver, not the board's zone */
    CHECK_NEAR(s.clock.value, 2500.0);
    CHECK(isnan(s.memory_clock.value) && s.memory_clock.why[0]);
    /* Between the last reading and the next: busy 150 -> 450 of 1000 -> 1600. */
    put("proc/stat", "cpu  300 0 150 1000 150 0 0 0 0 0\n");
    put("sys/class/powercap/intel-rapl:0/energy_uj", "3000000\n");
    nanosleep(&(struct timespec){0, 60000000}, NULL);
    ug_host_sample(proc, sys, &s);
    CHECK_NEAR(s.utilization.value, 100.0 * 300.0 / 600.0);
    CHECK_MSG(s.power.value > 0 && s.power.value <= 2.0 / 0.06, "power %g W from 2 J over >= 0.06 s", s.power.value);
    remove_root();
    ug_host_sample(proc, sys, &s); /* the files gone */
    CHECK(isnan(s.utilization.value) && strstr(s.utilization.why, "/stat"));
    CHECK(isnan(s.memory_total.value) && isnan(s.temperature.value) && isnan(s.clock.value));
}

static int cpu_index(void)
{
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) == UG_OK && strcmp(info.id, "cpu") == 0)
            return i;
    }
    return -1;
}

static void test_registry(ug_device *dev)
{
    (void)dev;
    ug_device *cpu = NULL;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_tensor_create(cpu, UG_F32, 1, (int64_t[]){1 << 20}, &t));
    th_track(t);
    /* A process that has exited left its file: a stale entry. */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    REQUIRE(child > 0);
    waitpid(child, NULL, 0);
    char dir[400], why[160], stale[512];
    REQUIRE(ug_registry_dir(dir, sizeof dir, why, sizeof why));
    snprintf(stale, sizeof stale, "%s/%ld.pool", dir, (long)child);
    FILE *f = fopen(stale, "w");
    REQUIRE(f);
    fprintf(f, "unigrad-pool 1\npid %ld\nstart 1\ncommand gone\ndevice cpu 999 0 999\n", (long)child);
    fclose(f);
    CHECK_OK(ug_device_synchronize(cpu)); /* publishes what was noted too soon before */
    nanosleep(&(struct timespec){0, 600000000}, NULL);
    CHECK_OK(ug_device_synchronize(cpu));
    ug_device_sample s;
    REQUIRE_OK(ug_device_sample_at(cpu_index(), &s));
    bool mine = false;
    for (int i = 0; i < s.process_count && i < UG_SAMPLE_MAX_PROCESSES; i++) {
        CHECK_MSG(s.processes[i].pid != child, "the dead process %ld is listed", (long)child);
        if (s.processes[i].pid == getpid()) {
            mine = true;
            CHECK_MSG(s.processes[i].bytes_in_use >= 4u << 20, "in use %llu",
                      (unsigned long long)s.processes[i].bytes_in_use);
        }
    }
    CHECK_MSG(mine, "this process (%ld) is not among the %d listed", (long)getpid(), s.process_count);
    CHECK_MSG(access(stale, F_OK) != 0, "the stale file %s was not removed", stale);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 077) == 0);
    th_release(t);
    ug_device_close(cpu);
}

/* A device on the host's processor (the CPU, POCL's OpenCL device): the
 * sample's memory total is the size the device reports, as ug-devices
 * lists it and as a pool holds to. The old sample gave POCL's device the
 * host's whole memory (23.5 GiB against the 7.1 it reports), and its
 * used was the host's, which may pass that. */
static void test_host_device_totals(ug_device *dev)
{
    (void)dev;
    int checked = 0;
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        ug_device_sample s;
        REQUIRE_OK(ug_device_info_at(i, &info));
        if (info.is_gpu)
            continue; /* the driver's figure: see the README */
        REQUIRE_OK(ug_device_sample_at(i, &s));
        CHECK_MSG(s.memory_total.value == (double)info.global_memory,
                  "%s: the sample's total %.0f, the device's %llu (%s)", info.id, s.memory_total.value,
                  (unsigned long long)info.global_memory, s.memory_total.why);
        if (strcmp(info.id, "cpu") != 0)
            CHECK_MSG(isnan(s.memory_used.value) && strstr(s.memory_used.why, "the host's"),
                      "%s: memory used %g (%s)", info.id, s.memory_used.value, s.memory_used.why);
        checked++;
    }
    CHECK(checked >= 1); /* the CPU at least */
}

/* Files that give numbers no device can have: an infinite memory size
 * (10^308 kB), clocks that sum to infinity, 10^297 degrees. Each figure is
 * missing with the value in its reason, never inf (which ug-smi --json
 * printed bare, not JSON) or an absurd number. */
static void test_impossible_figures(ug_device *dev)
{
    (void)dev;
    new_root();
    put("proc/stat", "cpu  100 0 50 800 50 0 0 0 0 0\n");
    put("proc/meminfo", "MemTotal: 1e308 kB\nMemAvailable: 1 kB\n");
    put("proc/cpuinfo", "cpu MHz : 1e308\ncpu MHz : 1e308\n");
    put("sys/class/hwmon/hwmon0/name", "k10temp\n");
    put("sys/class/hwmon/hwmon0/temp1_input", "1e300\n");
    char proc[96], sys[96];
    snprintf(proc, sizeof proc, "%s/proc", root);
    snprintf(sys, sizeof sys, "%s/sys", root);
    setenv("UG_PROCFS_ROOT", proc, 1);
    setenv("UG_SYSFS_ROOT", sys, 1);
    ug_device_sample s;
    REQUIRE_OK(ug_device_sample_at(cpu_index(), &s));
    unsetenv("UG_PROCFS_ROOT");
    unsetenv("UG_SYSFS_ROOT");
    CHECK_MSG(isnan(s.memory_total.value) && strstr(s.memory_total.why, "gave inf"), "memory total %g (%s)",
              s.memory_total.value, s.memory_total.why);
    CHECK_MSG(isnan(s.memory_used.value) && strstr(s.memory_used.why, "gave inf"), "memory used %g (%s)",
              s.memory_used.value, s.memory_used.why);
    CHECK_MSG(isnan(s.clock.value) && strstr(s.clock.why, "gave inf"), "clock %g (%s)", s.clock.value,
              s.clock.why);
    CHECK_MSG(isnan(s.temperature.value) && strstr(s.temperature.why, "gave 1e+297"), "temperature %g (%s)",
              s.temperature.value, s.temperature.why);
    ug_sample_figure *all[] = {&s.utilization, &s.memory_used, &s.memory_total, &s.temperature,
                               &s.power, &s.clock, &s.memory_clock};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK_MSG(isfinite(all[i]->value) || (isnan(all[i]->value) && all[i]->why[0]),
                  "figure %zu is %g, with reason '%s'", i, all[i]->value, all[i]->why);
    /* The checks alone, by hand: utilisation 100.4 (idle counters that
     * stepped back) clamped, -3 degrees kept, a negative size refused. */
    memset(&s, 0, sizeof s);
    s.utilization.value = 100.4;
    s.temperature.value = -3;
    s.memory_used.value = -1;
    s.power.value = 2e6;
    ug_sample_check(&s);
    CHECK_NEAR(s.utilization.value, 100.0);
    CHECK_NEAR(s.temperature.value, -3.0);
    CHECK(isnan(s.memory_used.value) && strstr(s.memory_used.why, "gave -1"));
    CHECK(isnan(s.power.value) && strstr(s.power.why, "gave 2e+06"));
    remove_root();
}

/* --list-odd: 0 if a sample lists the parent under the odd entry's
 * command, its control characters replaced, with its 7 bytes. */
static int list_odd_child(void)
{
    ug_device_sample s;
    bool listed = false;
    if (ug_device_sample_at(cpu_index(), &s) == UG_OK)
        for (int i = 0; i < s.process_count && i < UG_SAMPLE_MAX_PROCESSES; i++)
            listed |= s.processes[i].pid == getppid() && strcmp(s.processes[i].command, "odd?]0;x?name") == 0 &&
                      s.processes[i].bytes_in_use == 7;
    return listed ? 0 : 1;
}

/* Anyone of this user may put anything in the registry's folder: a FIFO
 * named *.pool is passed over, not waited on (the child, ended after
 * 30 s, fails the old code well before ctest's timeout), and a command's
 * control characters do not reach the terminal. */
static void test_registry_refuses_odd_files(ug_device *dev)
{
    (void)dev;
    char dir[400], why[160], fifo[512], odd[512];
    REQUIRE(ug_registry_dir(dir, sizeof dir, why, sizeof why));
    snprintf(fifo, sizeof fifo, "%s/test-fifo-%ld.pool", dir, (long)getpid());
    snprintf(odd, sizeof odd, "%s/test-odd-%ld.pool", dir, (long)getpid());
    unlink(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    /* This process's start, field 22 of /proc/self/stat, so the entry is
     * current. */
    char stat_line[1024] = "";
    FILE *f = fopen("/proc/self/stat", "r");
    REQUIRE(f);
    size_t n = fread(stat_line, 1, sizeof stat_line - 1, f);
    fclose(f);
    stat_line[n] = '\0';
    char *p = strrchr(stat_line, ')');
    for (int field = 2; p && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    REQUIRE(p);
    unsigned long long start = strtoull(p, NULL, 10);
    f = fopen(odd, "w");
    REQUIRE(f);
    fprintf(f, "unigrad-pool 1\npid %ld\nstart %llu\ncommand odd\033]0;x\007name\ndevice cpu 7 0 7\n",
            (long)getpid(), start);
    fclose(f);
    const char *const args[] = {"test_monitor", "--list-odd", NULL};
    fflush(NULL);
    int status = th_wait_child(th_spawn_self(args, NULL, NULL, NULL), 30);
    CHECK_MSG(status != 128 + SIGALRM, "sampling waited on the FIFO %s (ended after 30 s)", fifo);
    CHECK_MSG(status == 0, "the entry %s was not listed with its command's control characters replaced (status %d)",
              odd, status);
    unlink(fifo);
    unlink(odd);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list-odd") == 0)
        return list_odd_child();
    static const th_test tests[] = {
        TH_HOST_TEST(amdgpu),
        TH_HOST_TEST(rocm_smi),
        TH_HOST_TEST(nvml),
        TH_HOST_TEST(host),
        TH_HOST_TEST(registry),
        TH_HOST_TEST(host_device_totals),
        TH_HOST_TEST(impossible_figures),
        TH_HOST_TEST(registry_refuses_odd_files),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
