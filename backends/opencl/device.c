/* OpenCL devices: discovery over every platform and device type, device
 * facts, opening (context, queue, program, scratch) and closing, and the
 * backend's function table.
 *
 * Discovery runs once and is kept until shutdown; a missing ICD loader or
 * platform is not an error but zero devices with a one-line reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "backends/opencl/internal.h"

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

const ug_backend_host *ug_opencl_host;

typedef struct ug_opencl_devref {
    cl_platform_id platform;
    cl_device_id device;
} ug_opencl_devref;

/* Discovery results; g_lock makes device_count safe to call from any
 * thread and lets shutdown forget them. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_discovered;
static int g_count;
static ug_opencl_devref *g_devs;
static char g_reason[256];

static void discover_locked(void)
{
    g_discovered = true;
    g_count = 0;
    g_reason[0] = '\0';

    cl_uint nplat = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &nplat);
    if (err != CL_SUCCESS) {
        snprintf(g_reason, sizeof g_reason, "no OpenCL platform (clGetPlatformIDs: %d %s)", (int)err,
                 ug_opencl_error_name(err));
        return;
    }
    if (nplat == 0) {
        snprintf(g_reason, sizeof g_reason,
                 "no OpenCL platform (clGetPlatformIDs found none: is an ICD installed?)");
        return;
    }
    cl_platform_id *plats = ug_calloc(nplat, sizeof *plats);
    if (!plats) {
        snprintf(g_reason, sizeof g_reason, "out of host memory listing OpenCL platforms");
        return;
    }
    err = clGetPlatformIDs(nplat, plats, NULL);
    if (err != CL_SUCCESS) {
        snprintf(g_reason, sizeof g_reason, "no OpenCL platform (clGetPlatformIDs: %d %s)", (int)err,
                 ug_opencl_error_name(err));
        free(plats);
        return;
    }

    /* Two passes: count, then fill, so one allocation holds every device. */
    cl_uint total = 0;
    cl_int last_err = CL_SUCCESS;
    for (cl_uint p = 0; p < nplat; ++p) {
        cl_uint n = 0;
        err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n);
        if (err == CL_SUCCESS)
            total += n;
        else
            last_err = err;
    }
    if (total == 0) {
        if (last_err != CL_SUCCESS)
            snprintf(g_reason, sizeof g_reason, "no OpenCL device on %u platform(s) (clGetDeviceIDs: %d %s)",
                     (unsigned)nplat, (int)last_err, ug_opencl_error_name(last_err));
        else
            snprintf(g_reason, sizeof g_reason, "no OpenCL device on %u platform(s)",
                     (unsigned)nplat);
        free(plats);
        return;
    }
    g_devs = ug_calloc(total, sizeof *g_devs);
    cl_device_id *ids = ug_calloc(total, sizeof *ids);
    if (!g_devs || !ids) {
        free(g_devs);
        free(ids);
        g_devs = NULL;
        free(plats);
        snprintf(g_reason, sizeof g_reason, "out of host memory listing OpenCL devices");
        return;
    }
    int count = 0;
    for (cl_uint p = 0; p < nplat && (cl_uint)count < total; ++p) {
        cl_uint n = 0;
        err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, total - (cl_uint)count, ids, &n);
        if (err != CL_SUCCESS)
            continue;
        if (n > total - (cl_uint)count)
            n = total - (cl_uint)count;
        for (cl_uint i = 0; i < n; ++i) {
            g_devs[count].platform = plats[p];
            g_devs[count].device = ids[i];
            count++;
        }
    }
    free(ids);
    free(plats);
    g_count = count;
    if (count == 0)
        snprintf(g_reason, sizeof g_reason, "no OpenCL device (devices vanished while listing)");
}

/* Bounded copy and join: truncation of long vendor strings is intended. */
static void str_copy(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void str_join(char *dst, size_t len, const char *a, const char *b)
{
    str_copy(dst, len, a);
    size_t used = strlen(dst);
    if (used + 2 < len) {
        str_copy(dst + used, len - used, " (");
        used = strlen(dst);
        str_copy(dst + used, len - used, b);
        used = strlen(dst);
        if (used + 1 < len)
            str_copy(dst + used, len - used, ")");
    }
}

static int ug_opencl_device_count(char *reason, size_t reason_len)
{
    pthread_mutex_lock(&g_lock);
    if (!g_discovered)
        discover_locked();
    int count = g_count;
    if (reason && reason_len > 0)
        str_copy(reason, reason_len, count > 0 ? "" : g_reason);
    pthread_mutex_unlock(&g_lock);
    return count;
}

static ug_status devref_at(int index, ug_opencl_devref *out)
{
    int count = ug_opencl_device_count(NULL, 0);
    if (index < 0 || index >= count)
        return ug_opencl_host->set_error(UG_ERR_DEVICE, "OpenCL: no device opencl:%d (%d device%s found)",
                                         index, count, count == 1 ? "" : "s");
    pthread_mutex_lock(&g_lock);
    *out = g_devs[index];
    pthread_mutex_unlock(&g_lock);
    return UG_OK;
}

ug_status ug_opencl_device_string(cl_device_id device, cl_device_info what, char *out, size_t len)
{
    size_t size = 0;
    out[0] = '\0';
    cl_int err = clGetDeviceInfo(device, what, 0, NULL, &size);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetDeviceInfo", err);
    char *buf = ug_malloc(size + 1);
    if (!buf)
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
    err = clGetDeviceInfo(device, what, size, buf, NULL);
    if (err != CL_SUCCESS) {
        free(buf);
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetDeviceInfo", err);
    }
    buf[size] = '\0';
    str_copy(out, len, buf);
    free(buf);
    return UG_OK;
}

static ug_status platform_string(cl_platform_id platform, cl_platform_info what, char *out,
                                 size_t len)
{
    char buf[1024];
    size_t size = 0;
    out[0] = '\0';
    cl_int err = clGetPlatformInfo(platform, what, sizeof buf - 1, buf, &size);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetPlatformInfo", err);
    buf[size < sizeof buf ? size : sizeof buf - 1] = '\0';
    str_copy(out, len, buf);
    return UG_OK;
}

/* True when the space-separated extension list names ext exactly. */
static bool has_extension(const char *list, const char *ext)
{
    size_t n = strlen(ext);
    for (const char *p = list; (p = strstr(p, ext)) != NULL; p += n) {
        bool starts = p == list || p[-1] == ' ';
        bool ends = p[n] == '\0' || p[n] == ' ';
        if (starts && ends)
            return true;
    }
    return false;
}

static ug_status ug_opencl_device_info(int index, ug_device_info *info)
{
    ug_opencl_devref ref = {0};
    ug_status st = devref_at(index, &ref);
    if (st != UG_OK)
        return st;
    char vendor[256], plat_name[256], plat_version[256], driver[128];
    if ((st = ug_opencl_device_string(ref.device, CL_DEVICE_VENDOR, vendor, sizeof vendor)) != UG_OK ||
        (st = platform_string(ref.platform, CL_PLATFORM_NAME, plat_name, sizeof plat_name)) != UG_OK ||
        (st = platform_string(ref.platform, CL_PLATFORM_VERSION, plat_version, sizeof plat_version)) !=
            UG_OK ||
        (st = ug_opencl_device_string(ref.device, CL_DRIVER_VERSION, driver, sizeof driver)) != UG_OK ||
        (st = ug_opencl_device_string(ref.device, CL_DEVICE_NAME, info->name, sizeof info->name)) != UG_OK)
        return st;
    str_join(info->vendor, sizeof info->vendor, vendor, plat_name);
    str_join(info->driver, sizeof info->driver, driver, plat_version);

    cl_ulong global = 0, max_alloc = 0;
    cl_uint units = 0;
    size_t max_wg = 0;
    cl_device_type type = 0;
    cl_int err;
    if ((err = clGetDeviceInfo(ref.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL)) ||
        (err = clGetDeviceInfo(ref.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL)) ||
        (err = clGetDeviceInfo(ref.device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL)) ||
        (err = clGetDeviceInfo(ref.device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL)) ||
        (err = clGetDeviceInfo(ref.device, CL_DEVICE_TYPE, sizeof type, &type, NULL)))
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetDeviceInfo", err);
    info->global_memory = global;
    info->max_allocation = max_alloc;
    info->compute_units = units;
    info->max_work_group = max_wg;
    info->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;

    /* The extension string can be long (kilobytes on some GPUs). */
    size_t ext_size = 0;
    err = clGetDeviceInfo(ref.device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_size);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)", err);
    char *ext = ug_malloc(ext_size + 1);
    if (!ext)
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
    err = clGetDeviceInfo(ref.device, CL_DEVICE_EXTENSIONS, ext_size, ext, NULL);
    ext[ext_size] = '\0';
    info->fp16 = err == CL_SUCCESS && has_extension(ext, "cl_khr_fp16");
    free(ext);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(UG_ERR_BACKEND, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)", err);
    return UG_OK;
}

static void ug_opencl_device_close(ug_bdev *dev)
{
    if (!dev)
        return;
    ug_opencl_open_list_remove(dev);
    ug_opencl_finish_all(dev);
    ug_opencl_pins_release_all(dev);
    ug_opencl_program_release(dev);
    /* CLBlast keeps compiled programs per context; they would keep this
     * context alive (and leak) if not dropped now. */
    ug_opencl_gemm_release();
    ug_opencl_queue_close(&dev->main);
    if (dev->context)
        clReleaseContext(dev->context);
    pthread_mutex_destroy(&dev->launch_lock);
    pthread_mutex_destroy(&dev->pin_lock);
    pthread_mutex_destroy(&dev->streams_lock);
    pthread_mutex_destroy(&dev->tune_lock);
    free(dev->pins);
    free(dev);
}

static ug_status ug_opencl_device_open(int index, ug_bdev **out)
{
    *out = NULL;
    ug_opencl_devref ref = {0};
    ug_status st = devref_at(index, &ref);
    if (st != UG_OK)
        return st;
    ug_bdev *dev = ug_calloc(1, sizeof *dev);
    if (!dev)
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
    dev->index = index;
    dev->platform = ref.platform;
    dev->device = ref.device;
    pthread_mutex_init(&dev->launch_lock, NULL);
    pthread_mutex_init(&dev->pin_lock, NULL);
    pthread_mutex_init(&dev->streams_lock, NULL);
    pthread_mutex_init(&dev->tune_lock, NULL);

    char plat_name[256];
    if ((st = ug_opencl_device_string(dev->device, CL_DEVICE_NAME, dev->name, sizeof dev->name)) != UG_OK ||
        (st = ug_opencl_device_string(dev->device, CL_DRIVER_VERSION, dev->driver, sizeof dev->driver)) !=
            UG_OK ||
        (st = platform_string(dev->platform, CL_PLATFORM_VERSION, dev->platform_version,
                              sizeof dev->platform_version)) != UG_OK ||
        (st = platform_string(dev->platform, CL_PLATFORM_NAME, plat_name, sizeof plat_name)) != UG_OK)
        goto fail;
    dev->is_pocl = strstr(plat_name, "Portable Computing Language") != NULL ||
                   strstr(dev->platform_version, "PoCL") != NULL ||
                   strstr(dev->platform_version, "pocl") != NULL;
    cl_device_type type = 0;
    dev->is_cpu = clGetDeviceInfo(dev->device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
                  (type & CL_DEVICE_TYPE_CPU);

    cl_uint units = 1;
    clGetDeviceInfo(dev->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    /* Enough work-groups to fill every compute unit a few times over; the
     * reductions split long rows until they reach it. */
    dev->target_groups = (size_t)(units ? units : 1) * 8;
    if (dev->target_groups < 16)
        dev->target_groups = 16;

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
    dev->context = clCreateContext(props, 1, &dev->device, NULL, NULL, &err);
    if (!dev->context) {
        st = ug_opencl_fail(ug_opencl_status_of(err), "clCreateContext", err);
        goto fail;
    }
    if ((st = ug_opencl_queue_open(dev, &dev->main)) != UG_OK ||
        (st = ug_opencl_program_create(dev)) != UG_OK)
        goto fail;
    ug_opencl_gemm_open(dev);
    if (!ug_opencl_open_list_add(dev)) {
        st = ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
        goto fail;
    }
    *out = dev;
    return UG_OK;

fail:
    ug_opencl_device_close(dev);
    return st;
}

static void ug_opencl_shutdown(void)
{
    ug_opencl_gemm_release();
    pthread_mutex_lock(&g_lock);
    free(g_devs);
    g_devs = NULL;
    g_count = 0;
    g_discovered = false;
    pthread_mutex_unlock(&g_lock);
}

static ug_backend g_backend = UG_BACKEND_TABLE("opencl", ug_opencl);

const ug_backend *ug_opencl_backend(const ug_backend_host *host)
{
    ug_opencl_host = host;
    g_backend.autotune = ug_opencl_autotune;
    g_backend.conv_plan = ug_opencl_conv_plan;
    g_backend.conv2d = ug_opencl_conv2d;
    return &g_backend;
}
