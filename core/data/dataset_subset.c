/* Subsets of a data set (by index list, or a seeded validation split) that
 * share its storage. */
#include <math.h>
#include <stdlib.h>

#include "core/data/internal.h"
#include "base/error.h"
#include "base/fault.h"

/* Splits draw their permutation from a stream no loader epoch uses. */
static const uint64_t SPLIT_STREAM = ~(uint64_t)0;

ug_status ug_dataset_subset(const ug_dataset *ds, const int64_t *ids, int64_t count, ug_dataset **out)
{
    const char *op = "ug_dataset_subset";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!ds || !ids)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ds ? "ids" : "dataset");
    if (count < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: count %lld; a subset holds at least 1 sample",
                            op, (long long)count);
    for (int64_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= ds->count)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: ids[%lld] is %lld, outside the data set's samples 0..%lld", op,
                                (long long)i, (long long)ids[i], (long long)ds->count - 1);
    ug_dataset *sub = ug_calloc(1, sizeof *sub);
    int64_t *base_ids = ug_malloc((size_t)count * sizeof *base_ids);
    if (!sub || !base_ids) {
        free(sub);
        free(base_ids);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld indices", op,
                            (long long)count);
    }
    /* A subset of a subset reads the base directly. */
    for (int64_t i = 0; i < count; i++)
        base_ids[i] = ug_dataset_base_id(ds, ids[i]);
    const ug_dataset *base = ug_dataset_storage(ds);
    ug_dataset_retain(base);
    sub->refs = 1;
    sub->count = count;
    sub->features = ds->features;
    sub->scale = ds->scale;
    sub->shift = ds->shift;
    sub->base = (ug_dataset *)base;
    sub->ids = base_ids;
    *out = sub;
    return UG_OK;
}

ug_status ug_dataset_split(const ug_dataset *ds, double fraction, uint64_t seed, ug_dataset **first,
                           ug_dataset **second)
{
    const char *op = "ug_dataset_split";
    if (!first || !second)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, first ? "second" : "first");
    *first = *second = NULL;
    if (!ds)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dataset is NULL", op);
    int64_t n = ds->count;
    double want = isfinite(fraction) ? round(fraction * (double)n) : -1.0;
    if (!(fraction > 0.0 && fraction < 1.0) || want < 1.0 || want > (double)(n - 1))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: fraction %g of %lld samples leaves one side empty; give a fraction "
                            "in (0, 1) that puts at least one sample on each side",
                            op, fraction, (long long)n);
    int64_t second_count = (int64_t)want, first_count = n - second_count;
    int64_t *perm = ug_malloc((size_t)n * sizeof *perm);
    char *in_second = ug_calloc((size_t)n, 1);
    int64_t *ids = ug_malloc((size_t)n * sizeof *ids);
    ug_status st = UG_OK;
    if (!perm || !in_second || !ids) {
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld samples", op, (long long)n);
        goto done;
    }
    ug_shuffled_order(perm, n, true, seed, SPLIT_STREAM);
    for (int64_t i = 0; i < second_count; i++)
        in_second[perm[i]] = 1;
    /* Each side in the data set's order: ids[0..first_count) then the rest. */
    int64_t a = 0, b = first_count;
    for (int64_t i = 0; i < n; i++)
        ids[in_second[i] ? b++ : a++] = i;
    st = ug_dataset_subset(ds, ids, first_count, first);
    if (st == UG_OK)
        st = ug_dataset_subset(ds, ids + first_count, second_count, second);
    if (st != UG_OK) {
        ug_dataset_free(*first);
        *first = NULL;
        st = ug_prefix_error(st, "%s", op);
    }
done:
    free(perm);
    free(in_second);
    free(ids);
    return st;
}
