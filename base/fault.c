/* Fault injection (fault.h). Disarmed, each hook costs one relaxed atomic
 * load. */
#include <stdlib.h>

#include "base/fault.h"

static int64_t armed_at[UG_FAULT_KINDS]; /* 0: disarmed */
static int64_t events[UG_FAULT_KINDS];

void ug_fault_arm(ug_fault_kind kind, int64_t n)
{
    __atomic_store_n(&events[kind], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&armed_at[kind], n, __ATOMIC_RELEASE);
}

int64_t ug_fault_events(ug_fault_kind kind) { return __atomic_load_n(&events[kind], __ATOMIC_RELAXED); }

bool ug_fault_hit(ug_fault_kind kind)
{
    int64_t at = __atomic_load_n(&armed_at[kind], __ATOMIC_ACQUIRE);
    if (!at)
        return false;
    return __atomic_add_fetch(&events[kind], 1, __ATOMIC_RELAXED) == at;
}

void *ug_malloc(size_t bytes) { return ug_fault_hit(UG_FAULT_HOST_ALLOC) ? NULL : malloc(bytes); }

void *ug_calloc(size_t count, size_t size)
{
    return ug_fault_hit(UG_FAULT_HOST_ALLOC) ? NULL : calloc(count, size);
}

void *ug_realloc(void *ptr, size_t bytes)
{
    return ug_fault_hit(UG_FAULT_HOST_ALLOC) ? NULL : realloc(ptr, bytes);
}
