/* A step recorded on the host, the replay of backends without a captured
 * one (the CPU and OpenCL): while a thread records for a device, its
 * kernels and device-to-device copies for that device are kept (their
 * arguments copied) instead of run, as a CUDA capture keeps them; a replay
 * issues the kept calls in order, without any of the ops' host work
 * (shapes, views, plans, the graph's walk). Anything else the step would
 * do on the device (a read, an upload from host memory, a wait) cannot be
 * replayed from a recording: the recording fails with its name, and the
 * caller launches the step instead. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/runtime/dispatch.h"

typedef struct recorded_call {
    ug_kernel_family family; /* UG_KERNEL_FAMILY_COUNT: a copy */
    const char *op;
    ug_dtype dtype;
    void *args;              /* the family's args, or the copy's */
} recorded_call;

typedef struct recorded_copy {
    ug_mem dst, src;
    size_t dst_offset, src_offset, bytes;
} recorded_copy;

typedef struct host_recording {
    ug_device *device;
    recorded_call *calls;
    int count, capacity;
    const char *refused; /* what could not be recorded, or NULL */
    bool out_of_memory;
} host_recording;

static _Thread_local host_recording *recording;

bool ug_recording(const ug_device *device) { return recording && recording->device == device; }

ug_status ug_record_begin(ug_device *device)
{
    if (recording)
        return ug_set_error(UG_ERR_STATE, "this thread is recording a step already");
    if (!(recording = ug_calloc(1, sizeof *recording)))
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    recording->device = device;
    return UG_OK;
}

void ug_record_free(void *replay)
{
    host_recording *r = replay;
    if (!r)
        return;
    for (int i = 0; i < r->count; i++) {
        recorded_call *c = &r->calls[i];
        if (c->family == UG_KERNEL_OPTIMIZER)
            free((void *)((ug_optim_args *)c->args)->tensors);
        free(c->args);
    }
    free(r->calls);
    free(r);
}

ug_status ug_record_end(void **replay)
{
    host_recording *r = recording;
    recording = NULL;
    *replay = NULL;
    if (!r)
        return ug_set_error(UG_ERR_STATE, "this thread is not recording a step");
    if (r->refused || r->out_of_memory) {
        ug_status st = r->out_of_memory
                           ? ug_set_error(UG_ERR_OUT_OF_MEMORY, "recording the step ran out of host memory")
                           : ug_set_error(UG_ERR_UNSUPPORTED, "the step does %s, which a recording cannot "
                                          "replay", r->refused);
        ug_record_free(r);
        return st;
    }
    *replay = r;
    return UG_OK;
}

void ug_record_refuse(const char *what)
{
    if (!recording->refused)
        recording->refused = what;
}

/* A copy of bytes of args, and for a multi-tensor update of its tensor
 * list too (the launch's own array does not outlive it). */
static void *copy_args(ug_kernel_family family, const void *args, size_t bytes)
{
    void *copy = ug_malloc(bytes);
    if (!copy)
        return NULL;
    memcpy(copy, args, bytes);
    ug_optim_args *o = copy;
    if (family == UG_KERNEL_OPTIMIZER && o->count > 0) {
        size_t size = (size_t)o->count * sizeof *o->tensors;
        ug_optim_tensor *tensors = ug_malloc(size);
        if (!tensors) {
            free(copy);
            return NULL;
        }
        memcpy(tensors, o->tensors, size);
        o->tensors = tensors;
    } else if (family == UG_KERNEL_OPTIMIZER) {
        o->tensors = NULL;
    }
    return copy;
}

ug_status ug_record_call(ug_kernel_family family, const char *op, ug_dtype dtype, const void *args,
                         size_t bytes)
{
    host_recording *r = recording;
    if (r->out_of_memory)
        return UG_OK; /* reported at the end */
    if (r->count == r->capacity) {
        int capacity = r->capacity ? 2 * r->capacity : 64;
        recorded_call *grown = realloc(r->calls, (size_t)capacity * sizeof *grown);
        if (!grown) {
            r->out_of_memory = true;
            return UG_OK;
        }
        r->calls = grown;
        r->capacity = capacity;
    }
    void *copy = copy_args(family, args, bytes);
    if (!copy) {
        r->out_of_memory = true;
        return UG_OK;
    }
    r->calls[r->count++] = (recorded_call){family, op, dtype, copy};
    return UG_OK;
}

ug_status ug_record_copy(ug_mem dst, size_t dst_offset, ug_mem src, size_t src_offset, size_t bytes)
{
    recorded_copy c = {dst, src, dst_offset, src_offset, bytes};
    return ug_record_call(UG_KERNEL_FAMILY_COUNT, "copy", UG_U8, &c, sizeof c);
}

ug_status ug_record_replay(ug_device *device, void *replay)
{
    const host_recording *r = replay;
    for (int i = 0; i < r->count; i++) {
        const recorded_call *c = &r->calls[i];
        if (c->family == UG_KERNEL_FAMILY_COUNT) {
            const recorded_copy *k = c->args;
            UG_TRY(ug_call_copy(device, k->dst, k->dst_offset, k->src, k->src_offset, k->bytes,
                                "a replayed copy"));
        } else {
            UG_TRY(ug_dispatch(device, c->family, c->op, c->dtype, c->args));
        }
    }
    return UG_OK;
}
