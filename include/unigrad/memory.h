/* The per-device caching memory pool: statistics, limit, cache release, and
 * pinned host buffers. */
#ifndef UNIGRAD_MEMORY_H
#define UNIGRAD_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "unigrad/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_memory_stats {
    uint64_t bytes_in_use;      /* held by live tensors and graphs */
    uint64_t bytes_cached;      /* freed, kept by the pool for reuse */
    uint64_t peak_bytes_in_use; /* since creation or ug_memory_reset_peak */
    uint64_t allocations;       /* device allocations made (cache misses) */
    uint64_t cache_hits;        /* requests served from the cache */
    uint64_t retries;           /* times the cache was released to retry */
    uint64_t out_of_memory;     /* requests that failed for good */
    uint64_t limit;             /* bytes the pool may hold: the limit set, else the device's size */
} ug_memory_stats;

UG_API ug_status ug_memory_get_stats(ug_device *device, ug_memory_stats *stats);
UG_API ug_status ug_memory_reset_peak(ug_device *device);
/* Returns every cached block to the runtime. */
UG_API ug_status ug_memory_release_cache(ug_device *device);
/* Bytes in use plus cached may not pass this (0: the device's reported
 * size). UG_MEMORY_LIMIT (e.g. "512M", "2G") sets it when a device opens. */
UG_API ug_status ug_memory_set_limit(ug_device *device, uint64_t bytes);
/* Parses "123", "64K", "512M", "2G" (powers of 1024). */
UG_API ug_status ug_memory_parse_size(const char *text, uint64_t *bytes);

/* Choosing a batch size without an out-of-memory trial. bytes_of says
 * what a batch of rows would take on the device beyond the memory in use
 * now, from plans that allocate nothing (ug_graph_memory before compile,
 * ug_loader_device_bytes). The call picks the largest power of two up to
 * max_batch whose bytes, plus headroom times them (kept free for what
 * no plan sees: the runtime's own buffers, fragmentation), fit in the
 * limit (ug_memory_set_limit, UG_MEMORY_LIMIT, else the device's size)
 * less the bytes in use. *next_bytes:
 * what twice the batch would take (0 at max_batch). UG_ERR_OUT_OF_MEMORY
 * when not even one row fits. */
typedef ug_status (*ug_batch_bytes_fn)(void *context, int64_t batch, uint64_t *bytes);
UG_API ug_status ug_memory_fit_batch(ug_device *device, ug_batch_bytes_fn bytes_of, void *context,
                                     double headroom, int64_t max_batch, int64_t *batch,
                                     uint64_t *bytes, uint64_t *next_bytes);

/* Page-locked host memory for faster transfers where the backend offers it,
 * ordinary memory elsewhere. */
UG_API ug_status ug_host_alloc(ug_device *device, size_t bytes, void **ptr);
UG_API void ug_host_free(ug_device *device, void *ptr);

#ifdef __cplusplus
}
#endif
#endif
