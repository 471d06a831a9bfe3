/* The CPU backend's table: one device (the host), memory as aligned host
 * allocations, kernels run on the calling thread (the default stream) or
 * queued on a side stream (streams.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* cpu_set_t in OpenBLAS's cblas.h */
#endif
#include <cblas.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fault.h"
#include "backends/cpu/convs.h"
#include "backends/cpu/matmul_bf16.h"

enum { UG_CPU_ALIGN = 64 };

static ug_status no_host_set_error(ug_status status, const char *fmt, ...)
{
    (void)fmt;
    return status;
}

static const char *no_host_last_error(void) { return ""; }

static const ug_backend_host no_host = {.set_error = no_host_set_error,
                                        .last_error = no_host_last_error};
const ug_backend_host *ug_cpu_host = &no_host;

/* ---- device ---- */

static int ug_cpu_device_count(char *reason, size_t reason_len)
{
    if (reason && reason_len)
        reason[0] = '\0';
    return 1;
}

/* Copies the value of the first "key<spaces>: value" line of /proc/cpuinfo. */
static bool cpuinfo_field(const char *key, char *out, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    size_t klen = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0)
            continue;
        char *p = line + klen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != ':')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, "\r\n");
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == 0)
            continue;
        snprintf(out, len, "%.*s", (int)n, p);
        found = true;
    }
    fclose(f);
    return found;
}

static ug_status ug_cpu_device_info(int index, ug_device_info *info)
{
    if (index != 0)
        return UG_CPU_ERROR(UG_ERR_DEVICE, "cpu: there is one CPU device (index 0), not %d", index);
    /* Listing devices never fails on a bad UG_NUM_THREADS: opening does. */
    int threads = 1;
    ug_cpu_thread_budget(&threads, false);
    if (!cpuinfo_field("model name", info->name, sizeof info->name))
        snprintf(info->name, sizeof info->name, "host CPU");
    if (!cpuinfo_field("vendor_id", info->vendor, sizeof info->vendor))
        snprintf(info->vendor, sizeof info->vendor, "unknown");
    /* openblas_get_config() already starts with "OpenBLAS "; keep one. */
    const char *config = openblas_get_config();
    if (!config)
        config = "";
    if (strncmp(config, "OpenBLAS ", 9) == 0)
        config += 9;
    snprintf(info->driver, sizeof info->driver, "OpenBLAS %s", config);
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    uint64_t bytes = pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
    info->global_memory = bytes;
    info->max_allocation = bytes;
    info->compute_units = (uint32_t)threads;
    info->max_work_group = 1;
    /* bf16 products and convolutions run natively through oneDNN where the
     * processor has AVX512-BF16 or AMX; f16 is widened to f32 in every
     * kernel (ug_device_precision then has mixed precision compute in f32). */
    info->fp16 = false;
    info->bf16 = ug_cpu_native_bf16();
    info->is_gpu = false;
    return UG_OK;
}

static ug_status ug_cpu_device_open(int index, ug_bdev **out)
{
    *out = NULL;
    if (index != 0)
        return UG_CPU_ERROR(UG_ERR_DEVICE, "cpu: there is one CPU device (index 0), not %d", index);
    int threads = 1;
    ug_status st = ug_cpu_thread_budget(&threads, true);
    if (st != UG_OK)
        return st;
    ug_bdev *dev = ug_calloc(1, sizeof *dev);
    if (!dev)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory opening the device");
    st = ug_cpu_workers_create(threads, &dev->workers);
    if (st != UG_OK) {
        free(dev);
        return st;
    }
    dev->threads = threads;
    pthread_mutex_init(&dev->streams_lock, NULL);
#ifdef UG_CPU_ONEDNN
    st = ug_cpu_convs_create(&dev->convs);
    if (st == UG_OK && (st = ug_cpu_matmuls_create(&dev->matmuls)) != UG_OK)
        ug_cpu_convs_destroy(dev->convs);
    if (st != UG_OK) {
        ug_cpu_workers_destroy(dev->workers);
        pthread_mutex_destroy(&dev->streams_lock);
        free(dev);
        return st;
    }
#endif
    /* GEMM tiles run on our worker threads (gemm.c), each a single-threaded BLAS
     * call, so OpenBLAS starts no threads of its own. */
    openblas_set_num_threads(1);
    *out = dev;
    return UG_OK;
}

static void ug_cpu_device_close(ug_bdev *dev)
{
    if (!dev)
        return;
#ifdef UG_CPU_ONEDNN
    ug_cpu_matmuls_destroy(dev->matmuls);
    ug_cpu_convs_destroy(dev->convs);
#endif
    ug_cpu_workers_destroy(dev->workers);
    pthread_mutex_destroy(&dev->streams_lock);
    free(dev);
}

static void ug_cpu_shutdown(void) {}

/* ---- memory ---- */

static ug_status ug_cpu_alloc(ug_bdev *dev, size_t bytes, ug_mem *out)
{
    (void)dev;
    *out = NULL;
    /* Round up to the alignment (aligned_alloc wants a multiple); a
     * zero-byte request still gets a distinct block. */
    if (bytes > SIZE_MAX - UG_CPU_ALIGN)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
    size_t rounded = bytes == 0 ? UG_CPU_ALIGN
                                : (bytes + UG_CPU_ALIGN - 1) / UG_CPU_ALIGN * UG_CPU_ALIGN;
    void *p = aligned_alloc(UG_CPU_ALIGN, rounded);
    if (!p)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY,
                            "cpu: aligned_alloc of %zu bytes failed: the host is out of memory",
                            bytes);
    *out = p;
    return UG_OK;
}

static void ug_cpu_release(ug_bdev *dev, ug_mem mem)
{
    (void)dev;
    free(mem);
}

/* Every transfer is a memmove (a copy within one buffer may overlap), run
 * now or queued on the bound side stream. */
typedef struct move_args {
    void *dst;
    const void *src;
    size_t bytes;
} move_args;

static ug_status run_move(ug_bdev *dev, const void *args)
{
    (void)dev;
    const move_args *m = args;
    if (m->bytes)
        memmove(m->dst, m->src, m->bytes);
    return UG_OK;
}

static ug_status move(void *dst, const void *src, size_t bytes, bool blocking)
{
    move_args m = {dst, src, bytes};
    return ug_cpu_queue_bound() ? ug_cpu_queue_call(run_move, &m, sizeof m, blocking)
                                : run_move(NULL, &m);
}

static ug_status ug_cpu_write(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, const void *src,
                           size_t bytes, bool blocking)
{
    (void)dev;
    return move((char *)dst + dst_offset_bytes, src, bytes, blocking);
}

static ug_status ug_cpu_read(ug_bdev *dev, void *dst, ug_mem src, size_t src_offset_bytes,
                          size_t bytes, bool blocking)
{
    (void)dev;
    return move(dst, (const char *)src + src_offset_bytes, bytes, blocking);
}

static ug_status ug_cpu_copy(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, ug_mem src,
                          size_t src_offset_bytes, size_t bytes)
{
    (void)dev;
    return move((char *)dst + dst_offset_bytes, (const char *)src + src_offset_bytes, bytes, false);
}

static void *ug_cpu_host_alloc(ug_bdev *dev, size_t bytes)
{
    ug_mem p = NULL;
    if (ug_cpu_alloc(dev, bytes, &p) != UG_OK)
        return NULL;
    return p;
}

static void ug_cpu_host_free(ug_bdev *dev, void *ptr)
{
    (void)dev;
    free(ptr);
}

static ug_backend cpu_backend = UG_BACKEND_TABLE("cpu", ug_cpu);
static pthread_once_t cpu_backend_once = PTHREAD_ONCE_INIT;

/* Each family's entry runs its kernel now, or queues it (with a copy of
 * its arguments) while a side stream is bound. */
#define UG_CPU_QUEUED_(ctx, NAME, slot, type)                                            \
    static ug_status run_##slot(ug_bdev *dev, const void *a)                             \
    {                                                                                    \
        return ug_cpu_##slot(dev, (const type *)a);                                      \
    }                                                                                    \
    static ug_status queued_##slot(ug_bdev *dev, const type *a)                          \
    {                                                                                    \
        return ug_cpu_queue_bound() ? ug_cpu_queue_call(run_##slot, a, sizeof *a, false) \
                                    : ug_cpu_##slot(dev, a);                             \
    }
UG_KERNEL_FAMILIES(UG_CPU_QUEUED_, _)
#ifdef UG_CPU_ONEDNN
UG_OPTIONAL_KERNEL_FAMILIES(UG_CPU_QUEUED_, _)
#endif
#undef UG_CPU_QUEUED_

/* The queued entries, and the optional ones, which the table macro leaves
 * out. */
static void add_optional_entries(void)
{
#define UG_CPU_SET_QUEUED_(ctx, NAME, slot, type) cpu_backend.slot = queued_##slot;
    UG_KERNEL_FAMILIES(UG_CPU_SET_QUEUED_, _)
#ifdef UG_CPU_ONEDNN
    cpu_backend.conv_plan = ug_cpu_conv_plan;
    UG_OPTIONAL_KERNEL_FAMILIES(UG_CPU_SET_QUEUED_, _)
#endif
#undef UG_CPU_SET_QUEUED_
}

const ug_backend *ug_cpu_backend(const ug_backend_host *host)
{
    if (host && host->set_error)
        ug_cpu_host = host;
    pthread_once(&cpu_backend_once, add_optional_entries);
    return &cpu_backend;
}
