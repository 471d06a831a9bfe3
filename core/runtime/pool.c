/* The caching memory pool: one per device. Freed blocks are kept by size
 * class and handed out again, so a training loop stops calling the runtime's
 * allocator after its first steps. The pool also enforces a limit, because
 * some runtimes (POCL) do not enforce the memory size they report. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/monitor/registry.h"
#include "core/profile/hooks.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"

/* A block freed while side streams lived carries a fence: another stream
 * may still be using it, so it is reused or released only past the fence. */
typedef struct cached_block {
    ug_mem mem;
    size_t bytes;
    ug_fence *fence;
} cached_block;

struct ug_pool {
    pthread_mutex_t lock;
    cached_block *cache;
    size_t cache_count, cache_capacity;
    bool limit_from_env;
    ug_memory_stats stats;
    /* In use, cached and peak as of the last change, for the registry's
     * publisher, which reads them without the lock: taking it there would
     * order the registry's lock before the pool's, and the pool's waits
     * (fences, the profiler) before the device list's. */
    _Atomic uint64_t shown[3];
};

/* The figures changed (lock held): shown to the registry. */
static void note_change(ug_pool *pool)
{
    atomic_store_explicit(&pool->shown[0], pool->stats.bytes_in_use, memory_order_relaxed);
    atomic_store_explicit(&pool->shown[1], pool->stats.bytes_cached, memory_order_relaxed);
    atomic_store_explicit(&pool->shown[2], pool->stats.peak_bytes_in_use, memory_order_relaxed);
    ug_registry_changed();
}

void ug_pool_shown(const ug_device *device, uint64_t figures[3])
{
    for (int i = 0; i < 3; i++)
        figures[i] = atomic_load_explicit(&device->pool->shown[i], memory_order_relaxed);
}

/* Classes step by a quarter of the power of two below the size, so at most
 * 25% of a block is slack while similar sizes still share blocks. */
size_t ug_pool_block_bytes(size_t bytes)
{
    const size_t minimum = 512;
    if (bytes <= minimum)
        return minimum;
    size_t pow2 = minimum;
    while (pow2 <= bytes / 2)
        pow2 *= 2;
    size_t step = pow2 / 4;
    return (bytes + step - 1) / step * step;
}

ug_status ug_memory_parse_size(const char *text, uint64_t *bytes)
{
    if (!text || !bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_memory_parse_size: NULL argument");
    errno = 0;
    char *end = NULL;
    if (!isdigit((unsigned char)text[0]))
        goto bad;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno)
        goto bad;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: goto bad;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || (shift && value > (UINT64_MAX >> shift)))
        goto bad;
    *bytes = (uint64_t)value << shift;
    return UG_OK;
bad:
    return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                        "'%s' is not a memory size: write bytes or a number with K, M, G or T "
                        "(powers of 1024), e.g. 512M",
                        text);
}

ug_status ug_pool_create(ug_device *device, ug_pool **out)
{
    ug_pool *pool = ug_calloc(1, sizeof *pool);
    if (!pool)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory creating the pool",
                            device->info.id);
    const char *env = getenv("UG_MEMORY_LIMIT");
    if (env && *env) {
        if (ug_memory_parse_size(env, &pool->stats.limit) != UG_OK) {
            free(pool);
            return ug_prefix_error(UG_ERR_INVALID_ARGUMENT, "UG_MEMORY_LIMIT");
        }
        pool->limit_from_env = true;
    }
    pthread_mutex_init(&pool->lock, NULL);
    *out = pool;
    return UG_OK;
}

static void release_cache_locked(ug_device *device, ug_pool *pool)
{
    for (size_t i = 0; i < pool->cache_count; i++) {
        if (pool->cache[i].fence)
            (void)ug_fence_wait_free(device, pool->cache[i].fence); /* a failed wait: the device is lost */
        ug_call_release(device, pool->cache[i].mem);
    }
    pool->cache_count = 0;
    pool->stats.bytes_cached = 0;
}

void ug_pool_destroy(ug_device *device)
{
    ug_pool *pool = device->pool;
    if (!pool)
        return;
    release_cache_locked(device, pool);
    free(pool->cache);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
    device->pool = NULL;
}

static uint64_t effective_limit(const ug_device *device, const ug_pool *pool)
{
    return pool->stats.limit ? pool->stats.limit : device->info.global_memory;
}

void ug_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " bytes", bytes);
    else
        snprintf(buf, len, "%" PRIu64 " bytes (%.1f %s)", bytes, v, units[u]);
}

static ug_status out_of_memory(ug_device *device, ug_pool *pool, size_t bytes,
                               const char *purpose, const char *cause)
{
    char asked[64], used[64], cached[64], limit[64];
    ug_format_bytes(bytes, asked, sizeof asked);
    ug_format_bytes(pool->stats.bytes_in_use, used, sizeof used);
    ug_format_bytes(pool->stats.bytes_cached, cached, sizeof cached);
    ug_format_bytes(effective_limit(device, pool), limit, sizeof limit);
    pool->stats.out_of_memory++;
    const char *limit_kind = pool->stats.limit
                                 ? (pool->limit_from_env ? "limit (UG_MEMORY_LIMIT)" : "limit")
                                 : "device total";
    return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                        "out of memory on %s: asked for %s for %s; %s; in use %s, cached %s, "
                        "%s %s. Free tensors you no longer need, use a smaller batch, or raise "
                        "the limit (ug_memory_set_limit, UG_MEMORY_LIMIT)",
                        device->info.id, asked, purpose ? purpose : "a tensor", cause, used, cached,
                        limit_kind, limit);
}

static bool take_cached(ug_device *device, ug_pool *pool, size_t block, ug_mem *mem)
{
    for (size_t i = pool->cache_count; i-- > 0;) {
        cached_block *c = &pool->cache[i];
        if (c->bytes == block && (!c->fence || ug_fence_passed(device, c->fence))) {
            if (c->fence)
                (void)ug_fence_wait_free(device, c->fence); /* passed: returns at once */
            *mem = pool->cache[i].mem;
            pool->cache[i] = pool->cache[--pool->cache_count];
            pool->stats.bytes_cached -= block;
            return true;
        }
    }
    return false;
}

ug_status ug_pool_alloc(ug_device *device, size_t bytes, const char *purpose, ug_storage **out)
{
    ug_pool *pool = device->pool;
    ug_storage *storage = ug_calloc(1, sizeof *storage);
    if (!storage)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory for a tensor handle");
    size_t block = ug_pool_block_bytes(bytes);
    ug_status st = UG_OK;
    ug_mem mem = NULL;

    pthread_mutex_lock(&pool->lock);
    /* Injected per request, not per runtime call: a request the cache
     * serves fails too. */
    if (ug_fault_hit(UG_FAULT_DEVICE_ALLOC)) {
        st = out_of_memory(device, pool, bytes, purpose, "the allocation failed (injected by a test)");
    } else if (block > device->info.max_allocation && device->info.max_allocation) {
        char max[64];
        ug_format_bytes(device->info.max_allocation, max, sizeof max);
        char cause[160];
        snprintf(cause, sizeof cause, "the largest single buffer %s allows is %s",
                 device->info.id, max);
        st = out_of_memory(device, pool, bytes, purpose, cause);
    } else if (take_cached(device, pool, block, &mem)) {
        pool->stats.cache_hits++;
    } else {
        uint64_t limit = effective_limit(device, pool);
        for (int attempt = 0; attempt < 2; attempt++) {
            bool within = !limit || pool->stats.bytes_in_use + pool->stats.bytes_cached + block <= limit;
            if (within && ug_call_alloc(device, block, &mem) == UG_OK)
                break;
            mem = NULL;
            if (attempt == 0 && pool->stats.bytes_cached) {
                release_cache_locked(device, pool);
                pool->stats.retries++;
                continue;
            }
            st = out_of_memory(device, pool, bytes, purpose,
                               within ? "the runtime refused the allocation"
                                      : "that would pass the limit");
            break;
        }
        if (st == UG_OK)
            pool->stats.allocations++;
    }
    if (st == UG_OK) {
        pool->stats.bytes_in_use += block;
        if (pool->stats.bytes_in_use > pool->stats.peak_bytes_in_use)
            pool->stats.peak_bytes_in_use = pool->stats.bytes_in_use;
    }
    ug_memory_stats seen = pool->stats; /* for the profiler, outside the lock */
    note_change(pool); /* a refused request may have released the cache */
    pthread_mutex_unlock(&pool->lock);
    if (st == UG_OK && ug_profiling())
        ug_profile_memory(device, &seen);

    if (st != UG_OK) {
        free(storage);
        return st;
    }
    ug_device_retain(device);
    storage->device = device;
    storage->mem = mem;
    storage->bytes = bytes;
    storage->block_bytes = block;
    storage->refcount = 1;
    *out = storage;
    return UG_OK;
}

ug_status ug_storage_over_host(ug_device *device, void *address, size_t bytes, void (*give_back)(void *address),
                               ug_storage **out)
{
    *out = NULL;
    if (strcmp(device->backend->name, "cpu"))
        return ug_set_error(UG_ERR_UNSUPPORTED, "%s: the %s backend's memory is not the host's", device->info.id,
                            device->backend->name);
    ug_storage *storage = ug_calloc(1, sizeof *storage);
    if (!storage)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    ug_device_retain(device);
    *storage = (ug_storage){.device = device, .mem = address, .bytes = bytes, .block_bytes = bytes, .refcount = 1,
                            .give_back = give_back};
    *out = storage;
    return UG_OK;
}

void ug_storage_retain(ug_storage *storage)
{
    __atomic_add_fetch(&storage->refcount, 1, __ATOMIC_RELAXED);
}

void ug_storage_release(ug_storage *storage)
{
    if (!storage || __atomic_sub_fetch(&storage->refcount, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    ug_device *device = storage->device;
    if (storage->give_back) { /* after the work that may still use it */
        (void)ug_call_synchronize(device, "freeing a tensor");
        storage->give_back(storage->mem);
        free(storage);
        ug_device_close(device);
        return;
    }
    ug_pool *pool = device->pool;
    ug_fence *fence = NULL;
    if (__atomic_load_n(&device->live_streams, __ATOMIC_ACQUIRE) > 0 &&
        ug_fence_create(device, &fence) != UG_OK)
        (void)ug_call_synchronize(device, "freeing a tensor"); /* no fence: wait instead */
    pthread_mutex_lock(&pool->lock);
    pool->stats.bytes_in_use -= storage->block_bytes;
    bool kept = false;
    if (pool->cache_count == pool->cache_capacity) {
        size_t capacity = pool->cache_capacity ? pool->cache_capacity * 2 : 64;
        cached_block *grown = ug_realloc(pool->cache, capacity * sizeof *grown);
        if (grown) {
            pool->cache = grown;
            pool->cache_capacity = capacity;
        }
    }
    if (pool->cache_count < pool->cache_capacity) {
        pool->cache[pool->cache_count++] = (cached_block){storage->mem, storage->block_bytes, fence};
        pool->stats.bytes_cached += storage->block_bytes;
        kept = true;
    }
    if (!kept) { /* no room to remember it: give it back to the runtime */
        if (fence)
            (void)ug_fence_wait_free(device, fence);
        ug_call_release(device, storage->mem);
    }
    ug_memory_stats seen = pool->stats; /* for the profiler, outside the lock */
    note_change(pool);
    pthread_mutex_unlock(&pool->lock);
    if (ug_profiling())
        ug_profile_memory(device, &seen);
    free(storage);
    ug_device_close(device);
}

static ug_status check_device(ug_device *device, const char *op)
{
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: device is NULL", op);
    return UG_OK;
}

ug_status ug_memory_get_stats(ug_device *device, ug_memory_stats *stats)
{
    UG_TRY(check_device(device, "ug_memory_get_stats"));
    if (!stats)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_memory_get_stats: stats is NULL");
    pthread_mutex_lock(&device->pool->lock);
    *stats = device->pool->stats;
    stats->limit = effective_limit(device, device->pool);
    pthread_mutex_unlock(&device->pool->lock);
    return UG_OK;
}

ug_status ug_memory_reset_peak(ug_device *device)
{
    UG_TRY(check_device(device, "ug_memory_reset_peak"));
    pthread_mutex_lock(&device->pool->lock);
    device->pool->stats.peak_bytes_in_use = device->pool->stats.bytes_in_use;
    note_change(device->pool);
    pthread_mutex_unlock(&device->pool->lock);
    return UG_OK;
}

ug_status ug_memory_release_cache(ug_device *device)
{
    UG_TRY(check_device(device, "ug_memory_release_cache"));
    pthread_mutex_lock(&device->pool->lock);
    release_cache_locked(device, device->pool);
    note_change(device->pool);
    pthread_mutex_unlock(&device->pool->lock);
    return UG_OK;
}

ug_status ug_memory_set_limit(ug_device *device, uint64_t bytes)
{
    UG_TRY(check_device(device, "ug_memory_set_limit"));
    pthread_mutex_lock(&device->pool->lock);
    device->pool->stats.limit = bytes;
    device->pool->limit_from_env = false;
    pthread_mutex_unlock(&device->pool->lock);
    return UG_OK;
}

ug_status ug_host_alloc(ug_device *device, size_t bytes, void **ptr)
{
    UG_TRY(check_device(device, "ug_host_alloc"));
    if (!ptr)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_host_alloc: ptr is NULL");
    void *p = ug_call_host_alloc(device, bytes);
    if (!p)
        p = ug_malloc(bytes ? bytes : 1);
    if (!p)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                            "ug_host_alloc: could not allocate %zu bytes of host memory for %s",
                            bytes, device->info.id);
    *ptr = p;
    return UG_OK;
}

void ug_host_free(ug_device *device, void *ptr)
{
    if (!device || !ptr)
        return;
    if (!ug_call_host_free(device, ptr))
        free(ptr);
}
