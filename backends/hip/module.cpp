/* The module's entry point and backend table, device discovery, info,
 * open/close. Plain C style in C++ (the file is compiled by hipcc or nvcc).
 * Nothing here prints or aborts: with no driver or no device, discovery
 * records a one-line reason and reports zero devices. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/internal.h"

#define UG_HIP_MAX_DEVICES 64

const ug_backend_host *ug_hip_host = NULL;

/* Discovery results, filled once (under the lock) and then read-only. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_discovered = false;
static int g_count = 0;
static int g_ordinal[UG_HIP_MAX_DEVICES];
static ug_device_info g_info[UG_HIP_MAX_DEVICES];
static ug_bdev *g_open[UG_HIP_MAX_DEVICES];
static char g_reason[400];
static char g_versions[64];

ug_status ug_hip_fail(ug_status status, hipError_t err, const char *what)
{
    (void)hipGetLastError(); /* runtimes keep the last error: clear it */
    return ug_hip_host->set_error(status, "%s: %s returned %s (%d): %s", UG_HIP_BACKEND, what,
                                  hipGetErrorName(err), (int)err, hipGetErrorString(err));
}

ug_status ug_hip_enter(ug_bdev *dev)
{
    hipError_t e = hipSetDevice(dev->ordinal);
    return e == hipSuccess ? UG_OK : ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "SetDevice");
}

ug_status ug_hip_launched(const char *kernel)
{
    hipError_t e = hipGetLastError();
    if (e == hipSuccess)
        return UG_OK;
    return ug_hip_host->set_error(UG_ERR_BACKEND, "%s: launching kernel %s failed: %s (%d): %s",
                                  UG_HIP_BACKEND, kernel, hipGetErrorName(e), (int)e,
                                  hipGetErrorString(e));
}

static void format_versions(void)
{
    int rt = 0, drv = 0;
    (void)hipRuntimeGetVersion(&rt);
    (void)hipDriverGetVersion(&drv);
#ifdef UG_CUDA
    /* CUDA encodes 1000 * major + 10 * minor. */
    snprintf(g_versions, sizeof g_versions, "CUDA runtime %d.%d, driver %d.%d", rt / 1000,
             rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
#else
    /* HIP encodes 10^7 * major + 10^5 * minor + patch. */
    snprintf(g_versions, sizeof g_versions, "HIP runtime %d.%d.%d, driver %d", rt / 10000000,
             rt / 100000 % 100, rt % 100000, drv);
#endif
}

/* Whether the GPU computes in bf16 natively (f16 it does on every
 * supported one): NVIDIA from Ampere (sm_80); AMD on MI200 (gfx90a), MI300
 * (gfx94x), MI350 (gfx950) and RDNA3 onwards (gfx11xx, gfx12xx). */
static bool native_bf16(const hipDeviceProp_t &p)
{
#ifdef UG_CUDA
    return p.major >= 8;
#else
    static const char *const families[] = {"gfx90a", "gfx94", "gfx95", "gfx11", "gfx12"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strncmp(p.gcnArchName, families[i], strlen(families[i])) == 0)
            return true;
    return false;
#endif
}

/* Whether the n characters at item are one of the comma-separated list's. */
static bool in_list(const char *list, const char *item, size_t n)
{
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, item, n) == 0)
            return true;
        p += len + (end ? 1 : 0);
    }
    return false;
}

/* Whether the module holds machine code for arch ("sm_90", or HIP's
 * "gfx90a:sramecc+:xnack-", whose features after ':' are not targets). */
static bool arch_built(const char *arch)
{
#ifdef UG_CUDA
#ifndef UG_CUDA_ARCH_LIST /* the emulated runtime's build: every device is proved */
#define UG_CUDA_ARCH_LIST ""
#endif
    return strncmp(arch, "sm_", 3) == 0 && in_list(UG_CUDA_ARCH_LIST, arch + 3, strlen(arch + 3));
#else
    return in_list(UG_HIP_TARGET_LIST, arch, strcspn(arch, ":"));
#endif
}

/* Fills g_info[g_count] from device ordinal, or writes why it is skipped. */
static bool add_device(int ordinal, char *why, size_t why_len)
{
    hipDeviceProp_t p;
    memset(&p, 0, sizeof p);
    hipError_t e = hipGetDeviceProperties(&p, ordinal);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        snprintf(why, why_len, "%sGetDeviceProperties(%d) returned %s (%d)", UG_HIP_RT, ordinal,
                 hipGetErrorName(e), (int)e);
        return false;
    }
#ifdef UG_CUDA
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d", p.major, p.minor);
#else
    char arch[64];
    snprintf(arch, sizeof arch, "%.63s", p.gcnArchName);
#endif
    /* A device the module has no code for (an architecture missing from
     * UG_HIP_TARGETS, or older than the CUDA targets) fails every launch:
     * leave it out so "auto" does not pick it. An architecture built
     * exactly needs no proof; any other is proved by loading the kernels,
     * which creates the device's context (some 500 MiB on an H100, held by
     * every process that only lists devices, ug-smi's included). */
    hipFuncAttributes fa;
    e = hipSuccess;
    if (!arch_built(arch)) {
        e = hipSetDevice(ordinal);
        if (e == hipSuccess)
            e = hipFuncGetAttributes(&fa, ug_hip_probe_kernel());
    }
    if (e != hipSuccess) {
        (void)hipGetLastError();
        snprintf(why, why_len,
                 "device %d (%.60s, %s) has no kernels in this module: %s (%d); rebuild with "
#ifdef UG_CUDA
                 "UG_CUDA_ARCHS"
#else
                 "UG_HIP_TARGETS"
#endif
                 " including it",
                 ordinal, p.name, arch, hipGetErrorName(e), (int)e);
        return false;
    }
    ug_device_info *info = &g_info[g_count];
    memset(info, 0, sizeof *info);
#ifdef UG_CUDA
    snprintf(info->vendor, sizeof info->vendor, "NVIDIA");
#else
    snprintf(info->vendor, sizeof info->vendor, "AMD");
#endif
    snprintf(info->name, sizeof info->name, "%.90s (%.30s)", p.name, arch);
    info->global_memory = p.totalGlobalMem;
    info->max_allocation = p.totalGlobalMem;
    info->compute_units = (uint32_t)p.multiProcessorCount;
    info->max_work_group = (uint64_t)p.maxThreadsPerBlock;
    info->fp16 = true;
    info->bf16 = native_bf16(p);
    info->is_gpu = true;
    g_ordinal[g_count++] = ordinal;
    return true;
}

#ifndef UG_CUDA
#ifndef UG_HIP_TARGET_LIST
#error "UG_HIP_TARGET_LIST (the --offload-arch list, comma-separated) must be defined"
#endif
#ifndef UG_KFD_NODES /* a test build may point this elsewhere */
#define UG_KFD_NODES "/sys/class/kfd/kfd/topology/nodes"
#endif

/* Is gfx (e.g. "gfx90a") one of the targets this module was built for? */
static bool built_for(const char *gfx) { return in_list(UG_HIP_TARGET_LIST, gfx, strlen(gfx)); }

/* ROCm 5.x aborts the process ("hipErrorNoBinaryForGpu: Unable to find code
 * object for all current devices!") at its first call when a loaded fat
 * binary, this module's included, lacks code for any GPU it sees. So before
 * any HIP call, read each GPU's ISA from the KFD topology (as
 * rocm_agent_enumerator does) and refuse if one is missing. Device masks
 * (ROCR/HIP/CUDA_VISIBLE_DEVICES) mean the user picked GPUs: trust them. */
static bool gpus_covered(char *why, size_t why_len)
{
    if (getenv("ROCR_VISIBLE_DEVICES") || getenv("HIP_VISIBLE_DEVICES") ||
        getenv("CUDA_VISIBLE_DEVICES"))
        return true;
    /* HSA_OVERRIDE_GFX_VERSION ("10.3.0") makes every GPU report that ISA. */
    unsigned ov[3];
    const char *override = getenv("HSA_OVERRIDE_GFX_VERSION");
    const bool have_ov = override && sscanf(override, "%u.%u.%u", &ov[0], &ov[1], &ov[2]) == 3;
    for (int node = 0;; node++) {
        char path[128], line[128];
        snprintf(path, sizeof path, "%s/%d/properties", UG_KFD_NODES, node);
        FILE *f = fopen(path, "r");
        if (!f)
            return true; /* nodes are numbered from 0 without gaps */
        unsigned long version = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "gfx_target_version %lu", &version) == 1)
                break;
        fclose(f);
        if (version == 0)
            continue; /* a CPU node */
        /* major * 10000 + minor * 100 + stepping: gfx<major><minor hex><stepping hex> */
        unsigned v[3] = {(unsigned)(version / 10000), (unsigned)(version / 100 % 100),
                         (unsigned)(version % 100)};
        if (have_ov)
            memcpy(v, ov, sizeof v);
        char gfx[32];
        snprintf(gfx, sizeof gfx, "gfx%u%x%x", v[0], v[1], v[2]);
        if (!built_for(gfx)) {
            snprintf(why, why_len,
                     "GPU %s (KFD node %d) has no code in libunigrad-hip.so (built for %s) and "
                     "ROCm would abort on it: rebuild with UG_HIP_TARGETS including %s, or hide "
                     "it with ROCR_VISIBLE_DEVICES",
                     gfx, node, UG_HIP_TARGET_LIST, gfx);
            return false;
        }
    }
}
#endif

static void discover(void)
{
    g_count = 0;
    g_reason[0] = '\0';
    hipError_t e;
#ifndef UG_CUDA
    char why0[320];
    if (!gpus_covered(why0, sizeof why0)) {
        snprintf(g_reason, sizeof g_reason, "no usable HIP device: %s", why0);
        return;
    }
    e = hipInit(0);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        snprintf(g_reason, sizeof g_reason, "no HIP device: hipInit returned %s (%d)",
                 hipGetErrorName(e), (int)e);
        return;
    }
#endif
    int n = 0;
    e = hipGetDeviceCount(&n);
    if (e != hipSuccess || n <= 0) {
        (void)hipGetLastError();
        snprintf(g_reason, sizeof g_reason, "no %s device: %sGetDeviceCount returned %s (%d), count %d",
                 UG_HIP_DISPLAY, UG_HIP_RT, hipGetErrorName(e), (int)e, n);
        return;
    }
    format_versions();
    char why[200] = "";
    for (int i = 0; i < n && g_count < UG_HIP_MAX_DEVICES; i++)
        add_device(i, why, sizeof why);
    if (g_count == 0) {
        snprintf(g_reason, sizeof g_reason, "no usable %s device: %s", UG_HIP_DISPLAY, why);
        return;
    }
    ug_hip_blas_load();
}

static int ug_hip_device_count(char *reason, size_t reason_len)
{
    pthread_mutex_lock(&g_lock);
    if (!g_discovered) {
        discover();
        g_discovered = true;
    }
    int n = g_count;
    if (n == 0 && reason && reason_len > 0)
        snprintf(reason, reason_len, "%s", g_reason);
    pthread_mutex_unlock(&g_lock);
    return n;
}

static ug_status ug_hip_device_info(int index, ug_device_info *info)
{
    if (index < 0 || index >= ug_hip_device_count(NULL, 0))
        return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: no device %d", UG_HIP_BACKEND,
                                      index);
    pthread_mutex_lock(&g_lock);
    *info = g_info[index];
    /* The driver string also says which GEMM runs (vendor BLAS or own). */
    snprintf(info->driver, sizeof info->driver, "%s; gemm %s; conv %s", g_versions,
             ug_hip_blas_path(g_open[index]), ug_hip_conv_path());
    pthread_mutex_unlock(&g_lock);
    return UG_OK;
}

static ug_status ug_hip_device_open(int index, ug_bdev **out)
{
    if (index < 0 || index >= ug_hip_device_count(NULL, 0))
        return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: no device %d", UG_HIP_BACKEND,
                                      index);
    ug_bdev *dev = (ug_bdev *)calloc(1, sizeof *dev);
    if (!dev)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", UG_HIP_BACKEND);
    dev->index = index;
    dev->ordinal = g_ordinal[index];
    dev->sm_count = g_info[index].compute_units > 0 ? (int)g_info[index].compute_units : 1;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK) {
        free(dev);
        return st;
    }
    char key[sizeof g_info[0].name + sizeof g_versions + 8];
    snprintf(key, sizeof key, "%s; %s", g_info[index].name, g_versions);
    st = ug_hip_convs_open(dev, key);
    if (st == UG_OK)
        st = ug_hip_gemms_open(dev, key);
    if (st == UG_OK)
        st = ug_hip_attentions_open(dev, key);
    if (st == UG_OK)
        st = ug_hip_queue_open(dev, &dev->main);
    if (st != UG_OK) {
        ug_hip_attentions_close(dev);
        ug_hip_gemms_close(dev);
        ug_hip_convs_close(dev);
        free(dev);
        return st;
    }
    pthread_mutex_init(&dev->streams_lock, NULL);
    pthread_mutex_lock(&g_lock);
    g_open[index] = dev;
    pthread_mutex_unlock(&g_lock);
    *out = dev;
    return UG_OK;
}

static void ug_hip_device_close(ug_bdev *dev)
{
    if (!dev)
        return;
    if (ug_hip_enter(dev) == UG_OK) {
        ug_hip_queue_close(&dev->main);
    }
    ug_hip_convs_close(dev);
    ug_hip_gemms_close(dev);
    ug_hip_attentions_close(dev);
    pthread_mutex_destroy(&dev->streams_lock);
    (void)hipGetLastError();
    pthread_mutex_lock(&g_lock);
    if (g_open[dev->index] == dev)
        g_open[dev->index] = NULL;
    pthread_mutex_unlock(&g_lock);
    free(dev);
}

/* Forgets discovery. The runtime and the vendor BLAS stay loaded (other
 * code in the process may use them, and see gemm.cpp). Devices must be
 * closed first. */
static void ug_hip_shutdown(void)
{
    pthread_mutex_lock(&g_lock);
    g_discovered = false;
    g_count = 0;
    memset(g_open, 0, sizeof g_open);
    pthread_mutex_unlock(&g_lock);
}

static ug_backend g_backend = UG_BACKEND_TABLE(UG_HIP_BACKEND, ug_hip);

/* The one exported symbol (the module is built with hidden visibility). */
extern "C" __attribute__((visibility("default"))) const ug_backend *
ug_backend_module_entry(int host_version, const ug_backend_host *host, const char **reason)
{
    static char why[160];
    if (host_version != UG_BACKEND_INTERFACE_VERSION) {
        snprintf(why, sizeof why,
                 "libunigrad-%s was built for backend interface %d, the library has %d: "
                 "rebuild the module with the library",
                 UG_HIP_BACKEND, UG_BACKEND_INTERFACE_VERSION, host_version);
        if (reason)
            *reason = why;
        return NULL;
    }
    if (!host || !host->set_error) {
        if (reason)
            *reason = "libunigrad-" UG_HIP_BACKEND ": no host error callback given";
        return NULL;
    }
    ug_hip_host = host;
    g_backend.copy_peer = ug_hip_copy_peer;
    g_backend.stream_capture_begin = ug_hip_stream_capture_begin;
    g_backend.stream_capture_end = ug_hip_stream_capture_end;
    g_backend.stream_replay = ug_hip_stream_replay;
    g_backend.replay_free = ug_hip_replay_free;
    g_backend.autotune = ug_hip_autotune;
    g_backend.conv_plan = ug_hip_conv_plan;
    g_backend.conv2d = ug_hip_conv2d;
    return &g_backend;
}
