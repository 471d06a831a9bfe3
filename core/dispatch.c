/* The one path from the core into a backend (see dispatch.h). */
#include "core/dispatch.h"

#include "core/fault.h"

int ug_call_device_count(const ug_backend *backend, char *reason, size_t reason_len)
{
    return backend->device_count(reason, reason_len);
}

ug_status ug_call_device_info(const ug_backend *backend, int index, ug_device_info *info)
{
    return backend->device_info(index, info);
}

ug_status ug_call_device_open(const ug_backend *backend, int index, ug_bdev **out)
{
    return backend->device_open(index, out);
}

void ug_call_device_close(const ug_backend *backend, ug_bdev *bdev) { backend->device_close(bdev); }

void ug_call_shutdown(const ug_backend *backend)
{
    if (backend->shutdown)
        backend->shutdown();
}

ug_status ug_call_alloc(ug_device *device, size_t bytes, ug_mem *out)
{
    *out = NULL;
    return device->backend->alloc(device->bdev, bytes, out);
}

void ug_call_release(ug_device *device, ug_mem mem) { device->backend->release(device->bdev, mem); }

void *ug_call_host_alloc(ug_device *device, size_t bytes)
{
    return device->backend->host_alloc ? device->backend->host_alloc(device->bdev, bytes) : NULL;
}

bool ug_call_host_free(ug_device *device, void *ptr)
{
    if (!device->backend->host_free)
        return false;
    device->backend->host_free(device->bdev, ptr);
    return true;
}

static ug_status injected_wait_failure(void)
{
    return ug_set_error(UG_ERR_BACKEND, "the wait failed (injected fault)");
}

static ug_status on_device(ug_status st, const char *what, const char *preposition,
                           const ug_device *device)
{
    return st == UG_OK ? st : ug_prefix_error(st, "%s %s %s", what, preposition, device->info.id);
}

ug_status ug_call_write(ug_device *device, ug_mem dst, size_t dst_offset, const void *src,
                        size_t bytes, bool blocking, const char *what)
{
    ug_status st = blocking && ug_fault_hit(UG_FAULT_HOST_WAIT)
                       ? injected_wait_failure()
                       : device->backend->write(device->bdev, dst, dst_offset, src, bytes, blocking);
    return on_device(st, what, "to", device);
}

ug_status ug_call_read(ug_device *device, void *dst, ug_mem src, size_t src_offset, size_t bytes,
                       bool blocking, const char *what)
{
    ug_status st = blocking && ug_fault_hit(UG_FAULT_HOST_WAIT)
                       ? injected_wait_failure()
                       : device->backend->read(device->bdev, dst, src, src_offset, bytes, blocking);
    return on_device(st, what, "from", device);
}

ug_status ug_call_copy(ug_device *device, ug_mem dst, size_t dst_offset, ug_mem src,
                       size_t src_offset, size_t bytes, const char *what)
{
    ug_status st = device->backend->copy(device->bdev, dst, dst_offset, src, src_offset, bytes);
    return on_device(st, what, "on", device);
}

ug_status ug_call_synchronize(ug_device *device, const char *what)
{
    ug_status st = ug_fault_hit(UG_FAULT_HOST_WAIT) ? injected_wait_failure()
                                                    : device->backend->synchronize(device->bdev);
    return on_device(st, what, "on", device);
}

static const char *const family_names[] = {
#define UG_FAMILY_NAME_(ctx, NAME, slot, args) [UG_KERNEL_##NAME] = #slot,
    UG_KERNEL_FAMILIES(UG_FAMILY_NAME_, _) UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_NAME_, _)
#undef UG_FAMILY_NAME_
};

ug_status ug_dispatch(ug_device *d, ug_kernel_family family, const char *op, ug_dtype dtype,
                      const void *args)
{
    const ug_backend *b = d->backend;
    ug_status st = UG_ERR_UNSUPPORTED;
    bool present = false;
    switch (family) {
#define UG_FAMILY_CALL_(ctx, NAME, slot, type)          \
    case UG_KERNEL_##NAME:                              \
        present = b->slot != NULL;                      \
        if (present)                                    \
            st = b->slot(d->bdev, (const type *)args);  \
        break;
        UG_KERNEL_FAMILIES(UG_FAMILY_CALL_, _)
        UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_CALL_, _)
#undef UG_FAMILY_CALL_
    case UG_KERNEL_FAMILY_COUNT:
        break;
    }
    if (!present)
        return ug_set_error(UG_ERR_UNSUPPORTED,
                            "%s (%s) on %s: the %s backend has no %s kernel; run it on another "
                            "device (ug-devices lists them)",
                            op, ug_dtype_name(dtype), d->info.id, b->name,
                            (unsigned)family < UG_KERNEL_FAMILY_COUNT ? family_names[family] : "such");
    if (st != UG_OK)
        return ug_prefix_error(st, "%s (%s) on %s", op, ug_dtype_name(dtype), d->info.id);
    return UG_OK;
}

ug_status ug_call_conv_plan(ug_device *device, const ug_conv_args *args, bool *runs,
                            size_t *workspace_bytes, const char *op)
{
    *runs = false;
    *workspace_bytes = 0;
    if (!device->backend->conv_plan)
        return UG_OK;
    ug_status st = device->backend->conv_plan(device->bdev, args, runs, workspace_bytes);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s on %s", op, device->info.id);
}
