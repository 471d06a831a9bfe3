/* Choosing the largest batch that fits the device's memory limit from
 * plans that allocate nothing (ug_memory_fit_batch). */
#include "core/runtime/internal.h"

ug_status ug_memory_fit_batch(ug_device *device, ug_batch_bytes_fn bytes_of, void *context, double headroom,
                              int64_t max_batch, int64_t *batch, uint64_t *bytes, uint64_t *next_bytes)
{
    const char *op = "ug_memory_fit_batch";
    if (!device || !bytes_of || !batch || !bytes || !next_bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (!(headroom >= 0.0 && headroom <= 10.0) || max_batch < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: headroom %g must be in [0, 10] and max_batch %lld at least 1",
                            op, headroom, (long long)max_batch);
    ug_memory_stats stats;
    UG_TRY(ug_memory_get_stats(device, &stats));
    double usable = (double)stats.limit - (double)stats.bytes_in_use;
    *batch = 0;
    *bytes = *next_bytes = 0;
    for (int64_t rows = 1;; rows *= 2) {
        uint64_t need = 0;
        UG_TRY(bytes_of(context, rows, &need));
        if ((double)need * (1.0 + headroom) > usable) {
            *next_bytes = need;
            break;
        }
        *batch = rows;
        *bytes = need;
        if (rows > max_batch / 2)
            break;
    }
    if (*batch == 0) {
        char need[64], lim[64], used[64];
        ug_format_bytes(*next_bytes, need, sizeof need);
        ug_format_bytes(stats.limit, lim, sizeof lim);
        ug_format_bytes(stats.bytes_in_use, used, sizeof used);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                            "%s: a batch of 1 needs %s and %.0f%% more on %s, but the limit is %s and %s are "
                            "in use; raise the limit (UG_MEMORY_LIMIT) or shrink the model",
                            op, need, 100.0 * headroom, device->info.id, lim, used);
    }
    return UG_OK;
}
