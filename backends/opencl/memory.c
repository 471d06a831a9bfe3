/* Device buffers, transfers and pinned host memory.
 *
 * A ug_mem is a cl_mem. Transfers go straight to the runtime: clEnqueue*
 * calls are thread-safe, so a data-loader thread may upload while the main
 * thread launches kernels, and no lock is taken here. */
#include <stdlib.h>

#include "base/fault.h"
#include "backends/opencl/internal.h"

ug_status ug_opencl_alloc(ug_bdev *dev, size_t bytes, ug_mem *out)
{
    *out = NULL;
    /* OpenCL refuses empty buffers; an empty tensor still gets a handle. */
    if (bytes == 0)
        bytes = 4;
    cl_int err;
    cl_mem mem = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!mem) {
        if (err == CL_INVALID_BUFFER_SIZE) {
            cl_ulong max_alloc = 0;
            clGetDeviceInfo(dev->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                            &max_alloc, NULL);
            return ug_opencl_host->set_error(
                UG_ERR_OUT_OF_MEMORY,
                "OpenCL: clCreateBuffer of %zu bytes failed: %d %s (the device's largest "
                "single buffer is %llu bytes)",
                bytes, (int)err, ug_opencl_error_name(err), (unsigned long long)max_alloc);
        }
        return ug_opencl_host->set_error(ug_opencl_status_of(err),
                                         "OpenCL: clCreateBuffer of %zu bytes failed: %d %s", bytes, (int)err,
                                         ug_opencl_error_name(err));
    }
    *out = mem;
    return UG_OK;
}

void ug_opencl_release(ug_bdev *dev, ug_mem mem)
{
    (void)dev;
    /* The runtime defers the free until queued commands using it are done,
     * so releasing right after an asynchronous launch is safe. */
    if (mem)
        clReleaseMemObject((cl_mem)mem);
}

ug_status ug_opencl_write(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, const void *src, size_t bytes,
                          bool blocking)
{
    if (bytes == 0)
        return UG_OK;
    cl_event *own_event = NULL; /* asked for where a bracket times it (streams.c) */
    cl_command_queue queue = ug_opencl_transfer_queue(dev, &own_event);
    cl_int err = clEnqueueWriteBuffer(queue, (cl_mem)dst, blocking ? CL_TRUE : CL_FALSE, dst_offset_bytes, bytes,
                                      src, 0, NULL, own_event);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueWriteBuffer", err);
    return UG_OK;
}

ug_status ug_opencl_read(ug_bdev *dev, void *dst, ug_mem src, size_t src_offset_bytes, size_t bytes,
                         bool blocking)
{
    if (bytes == 0)
        return UG_OK;
    cl_event *own_event = NULL;
    cl_command_queue queue = ug_opencl_transfer_queue(dev, &own_event);
    cl_int err = clEnqueueReadBuffer(queue, (cl_mem)src, blocking ? CL_TRUE : CL_FALSE, src_offset_bytes, bytes,
                                     dst, 0, NULL, own_event);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueReadBuffer", err);
    return UG_OK;
}

ug_status ug_opencl_copy(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, ug_mem src,
                         size_t src_offset_bytes, size_t bytes)
{
    if (bytes == 0 || (dst == src && dst_offset_bytes == src_offset_bytes))
        return UG_OK;
    cl_event *own_event = NULL;
    cl_command_queue queue = ug_opencl_transfer_queue(dev, &own_event);
    cl_int err = clEnqueueCopyBuffer(queue, (cl_mem)src, (cl_mem)dst, src_offset_bytes, dst_offset_bytes, bytes, 0,
                                     NULL, own_event);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueCopyBuffer", err);
    return UG_OK;
}


/* Pinned memory: a buffer the runtime allocates in host memory
 * (CL_MEM_ALLOC_HOST_PTR), mapped once for the host's lifetime of it. The
 * table maps the pointer back to its cl_mem for host_free. */
void *ug_opencl_host_alloc(ug_bdev *dev, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    cl_int err;
    cl_mem mem = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes,
                                NULL, &err);
    if (!mem) {
        ug_opencl_host->set_error(ug_opencl_status_of(err),
                                  "OpenCL: clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) of %zu bytes failed: "
                                  "%d %s",
                                  bytes, (int)err, ug_opencl_error_name(err));
        return NULL;
    }
    ug_opencl_not_bracketed(); /* the map is queued: a transfer after it is not alone in a bracket */
    void *ptr = clEnqueueMapBuffer(dev->main.queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes,
                                   0, NULL, NULL, &err);
    if (!ptr) {
        clReleaseMemObject(mem);
        ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueMapBuffer", err);
        return NULL;
    }
    pthread_mutex_lock(&dev->pin_lock);
    if (dev->pin_count == dev->pin_cap) {
        size_t cap = dev->pin_cap ? dev->pin_cap * 2 : 16;
        ug_opencl_pin *pins = ug_realloc(dev->pins, cap * sizeof *pins);
        if (!pins) {
            pthread_mutex_unlock(&dev->pin_lock);
            clEnqueueUnmapMemObject(dev->main.queue, mem, ptr, 0, NULL, NULL);
            clReleaseMemObject(mem);
            ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
            return NULL;
        }
        dev->pins = pins;
        dev->pin_cap = cap;
    }
    dev->pins[dev->pin_count].ptr = ptr;
    dev->pins[dev->pin_count].mem = mem;
    dev->pin_count++;
    pthread_mutex_unlock(&dev->pin_lock);
    return ptr;
}

static void unpin(ug_bdev *dev, ug_opencl_pin pin)
{
    /* The unmap is queued after any transfer still reading the memory, and
     * the release waits for the unmap. */
    ug_opencl_not_bracketed();
    clEnqueueUnmapMemObject(dev->main.queue, pin.mem, pin.ptr, 0, NULL, NULL);
    clReleaseMemObject(pin.mem);
}

void ug_opencl_host_free(ug_bdev *dev, void *ptr)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&dev->pin_lock);
    for (size_t i = 0; i < dev->pin_count; ++i) {
        if (dev->pins[i].ptr == ptr) {
            ug_opencl_pin pin = dev->pins[i];
            dev->pins[i] = dev->pins[--dev->pin_count];
            pthread_mutex_unlock(&dev->pin_lock);
            unpin(dev, pin);
            return;
        }
    }
    pthread_mutex_unlock(&dev->pin_lock);
    /* Not ours: ignoring it is safer than freeing foreign memory. */
}

void ug_opencl_pins_release_all(ug_bdev *dev)
{
    pthread_mutex_lock(&dev->pin_lock);
    for (size_t i = 0; i < dev->pin_count; ++i)
        unpin(dev, dev->pins[i]);
    dev->pin_count = 0;
    pthread_mutex_unlock(&dev->pin_lock);
    if (dev->main.queue)
        clFinish(dev->main.queue);
}
