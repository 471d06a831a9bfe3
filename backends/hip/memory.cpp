/* Device memory, transfers and the queue. Allocations are plain
 * hipMalloc/hipFree: the core's pool caches them. Every transfer is queued
 * on the current stream (the default one unless a side stream is bound),
 * so it is ordered with the kernels of that stream. */
#include "backends/hip/internal.h"

ug_status ug_hip_alloc(ug_bdev *dev, size_t bytes, ug_mem *out)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    void *p = NULL;
    hipError_t e = hipMalloc(&p, bytes);
    if (e == hipErrorOutOfMemory) {
        (void)hipGetLastError();
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY,
                                      "%s: %sMalloc of %zu bytes failed: %s (%d)", UG_HIP_BACKEND,
                                      UG_HIP_RT, bytes, hipGetErrorName(e), (int)e);
    }
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "Malloc");
    *out = p;
    return UG_OK;
}

void ug_hip_release(ug_bdev *dev, ug_mem mem)
{
    if (!mem || ug_hip_enter(dev) != UG_OK)
        return;
    /* hipFree waits for the device, so queued kernels using mem finish. */
    if (hipFree(mem) != hipSuccess)
        (void)hipGetLastError();
}

static ug_status finish(ug_bdev *dev, hipError_t e, const char *what, bool blocking)
{
    if (e != hipSuccess)
        return ug_hip_fail(UG_ERR_BACKEND, e, what);
    if (blocking) {
        e = hipStreamSynchronize(ug_hip_current(dev)->stream);
        if (e != hipSuccess)
            return ug_hip_fail(UG_ERR_BACKEND, e, UG_HIP_RT "StreamSynchronize");
    }
    return UG_OK;
}

ug_status ug_hip_write(ug_bdev *dev, ug_mem dst, size_t dst_off, const void *src, size_t bytes,
                       bool blocking)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK || bytes == 0)
        return st;
    hipError_t e = hipMemcpyAsync((char *)dst + dst_off, src, bytes, hipMemcpyHostToDevice,
                                  ug_hip_current(dev)->stream);
    return finish(dev, e, UG_HIP_RT "MemcpyAsync (host to device)", blocking);
}

ug_status ug_hip_read(ug_bdev *dev, void *dst, ug_mem src, size_t src_off, size_t bytes,
                      bool blocking)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK || bytes == 0)
        return st;
    hipError_t e = hipMemcpyAsync(dst, (const char *)src + src_off, bytes, hipMemcpyDeviceToHost,
                                  ug_hip_current(dev)->stream);
    return finish(dev, e, UG_HIP_RT "MemcpyAsync (device to host)", blocking);
}

ug_status ug_hip_copy(ug_bdev *dev, ug_mem dst, size_t dst_off, ug_mem src, size_t src_off,
                      size_t bytes)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK || bytes == 0)
        return st;
    hipError_t e = hipMemcpyAsync((char *)dst + dst_off, (const char *)src + src_off, bytes,
                                  hipMemcpyDeviceToDevice, ug_hip_current(dev)->stream);
    return finish(dev, e, UG_HIP_RT "MemcpyAsync (device to device)", false);
}

ug_status ug_hip_copy_peer(ug_bdev *dev, ug_mem dst, size_t dst_off, ug_bdev *src_dev, ug_mem src, size_t src_off,
                           size_t bytes)
{
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK || bytes == 0)
        return st;
    hipError_t e = hipMemcpyPeerAsync((char *)dst + dst_off, dev->ordinal, (const char *)src + src_off,
                                      src_dev->ordinal, bytes, ug_hip_current(dev)->stream);
    return finish(dev, e, UG_HIP_RT "MemcpyPeerAsync", false);
}

void *ug_hip_host_alloc(ug_bdev *dev, size_t bytes)
{
    if (ug_hip_enter(dev) != UG_OK)
        return NULL;
    void *p = NULL;
    if (hipHostMalloc(&p, bytes, hipHostMallocDefault) != hipSuccess) {
        (void)hipGetLastError();
        return NULL;
    }
    return p;
}

void ug_hip_host_free(ug_bdev *dev, void *ptr)
{
    (void)dev;
    if (ptr && hipHostFree(ptr) != hipSuccess)
        (void)hipGetLastError();
}

ug_status ug_hip_scratch(ug_bdev *dev, size_t bytes, void **out)
{
    ug_hip_queue *q = ug_hip_current(dev);
    if (q->scratch_bytes < bytes) {
        /* A graph captured earlier names the old buffer in its kernels, so
         * it is kept (until the queue closes), not freed: at least doubling
         * keeps what is kept under the new buffer's size. */
        if (q->scratch && q->retired_count == (int)(sizeof q->retired / sizeof q->retired[0]))
            return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: scratch grown too many times",
                                          UG_HIP_BACKEND);
        size_t want = q->scratch_bytes ? 2 * q->scratch_bytes : (size_t)1 << 20;
        want = want < bytes ? bytes : want;
        void *grown = NULL;
        hipError_t e = hipMalloc(&grown, want);
        if (e != hipSuccess)
            return ug_hip_fail(e == hipErrorOutOfMemory ? UG_ERR_OUT_OF_MEMORY : UG_ERR_BACKEND, e,
                               UG_HIP_RT "Malloc (scratch for partial results)");
        if (q->scratch)
            q->retired[q->retired_count++] = q->scratch;
        q->scratch = grown;
        q->scratch_bytes = want;
    }
    *out = q->scratch;
    return UG_OK;
}
