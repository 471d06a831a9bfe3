/* Fault injection for the tests: after ug_fault_arm(kind, n), the n-th event
 * of that kind fails as the real failure would (a host allocation returns
 * NULL, a device allocation is refused by the runtime, a file call fails
 * with a realistic errno, a wait for a device fails; armed past reach, a
 * kind only counts). The library's host allocations go through ug_malloc
 * and friends for this. Not exported: the tests link the library's
 * objects. */
#ifndef UG_CORE_FAULT_H
#define UG_CORE_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ug_fault_kind {
    UG_FAULT_HOST_ALLOC,
    UG_FAULT_DEVICE_ALLOC,
    UG_FAULT_FILE_IO,     /* each call of an atomic file replacement (base/atomic_file.c) */
    UG_FAULT_HOST_WAIT,   /* the host waits for a device: a synchronisation or blocking transfer */
    UG_FAULT_KINDS
} ug_fault_kind;

/* Arms kind: its n-th event from now fails (n >= 1); 0 disarms. */
void ug_fault_arm(ug_fault_kind kind, int64_t n);
/* Events of kind since it was armed (whether or not one failed). */
int64_t ug_fault_events(ug_fault_kind kind);
/* Counts an event; true when this one must fail. */
bool ug_fault_hit(ug_fault_kind kind);

void *ug_malloc(size_t bytes);
void *ug_calloc(size_t count, size_t size);
void *ug_realloc(void *ptr, size_t bytes);

#endif
