/* Statistics and affine transforms of a data set's values (normalisation).
 * A transform composes into the data set's scale and shift, applied when
 * batches are assembled, so it touches no stored value. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "core/data/internal.h"
#include "base/error.h"
#include "base/fault.h"

/* Samples whose values a callback data set's statistics read at a time. */
enum { STATS_CHUNK = 256 };

/* Two passes over the values: the sum, then the squares about the mean. */
typedef struct stats_pass {
    bool second;
    double count, sum, mean, squares;
    int64_t bad_sample, bad_feature;
    float bad_value;
} stats_pass;

static bool visit(stats_pass *p, const float *values, int64_t first_sample, int64_t samples, int64_t features)
{
    for (int64_t i = 0; i < samples * features; i++) {
        float v = values[i];
        if (!isfinite(v)) {
            p->bad_sample = first_sample + i / features;
            p->bad_feature = i % features;
            p->bad_value = v;
            return false;
        }
        if (p->second)
            p->squares += ((double)v - p->mean) * ((double)v - p->mean);
        else
            p->sum += v;
    }
    if (!p->second)
        p->count += (double)(samples * features);
    return true;
}

/* One pass over every value through ug_dataset_gather, so the statistics
 * are those of the values batches hold. */
static ug_status pass(const ug_dataset *ds, stats_pass *p)
{
    int64_t features = ds->features;
    float *x = ug_malloc((size_t)STATS_CHUNK * (size_t)features * sizeof(float));
    void *y = ug_malloc((size_t)STATS_CHUNK * ug_dataset_y_bytes(ds));
    int64_t *ids = ug_malloc(2 * STATS_CHUNK * sizeof *ids);
    ug_status st = UG_OK;
    if (!x || !y || !ids)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int64_t first = 0; st == UG_OK && first < ds->count; first += STATS_CHUNK) {
        int64_t n = ds->count - first < STATS_CHUNK ? ds->count - first : STATS_CHUNK;
        for (int64_t i = 0; i < n; i++)
            ids[i] = first + i;
        st = ug_dataset_gather(ds, ids, n, UG_F32, x, y, ids + STATS_CHUNK, NULL);
        if (st == UG_OK && !visit(p, x, first, n, features))
            st = ug_set_error(UG_ERR_FORMAT, "sample %lld, feature %lld is %g; the data must be finite",
                              (long long)p->bad_sample, (long long)p->bad_feature, (double)p->bad_value);
    }
    free(x);
    free(y);
    free(ids);
    return st;
}

/* Bytes: 256 possible values, so a histogram gives the exact moments. */
static void byte_moments(const ug_dataset *ds, double *mean, double *stddev)
{
    const ug_dataset *base = ug_dataset_storage(ds);
    uint64_t hist[256] = {0};
    for (int64_t i = 0; i < ds->count; i++) {
        const unsigned char *row = (const unsigned char *)base->x + ug_dataset_base_id(ds, i) * ds->features;
        for (int64_t f = 0; f < ds->features; f++)
            hist[row[f]]++;
    }
    double n = (double)ds->count * (double)ds->features, sum = 0.0, squares = 0.0;
    for (int v = 0; v < 256; v++)
        sum += (double)hist[v] * (double)(ds->scale * (float)v + ds->shift);
    double m = sum / n;
    for (int v = 0; v < 256; v++) {
        double d = (double)(ds->scale * (float)v + ds->shift) - m;
        squares += (double)hist[v] * d * d;
    }
    *mean = m;
    *stddev = sqrt(squares / n);
}

ug_status ug_dataset_stats(const ug_dataset *ds, double *mean, double *stddev)
{
    if (!ds || !mean || !stddev)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_dataset_stats: NULL argument");
    const ug_dataset *base = ug_dataset_storage(ds);
    if (!base->fill && base->x_dtype == UG_U8) {
        byte_moments(ds, mean, stddev);
        return UG_OK;
    }
    /* Two passes in double: exact enough for 47M values, unlike a running
     * sum of squares. */
    stats_pass p = {0};
    ug_status st = pass(ds, &p);
    if (st == UG_OK) {
        p.mean = p.sum / p.count;
        p.second = true;
        st = pass(ds, &p);
    }
    if (st != UG_OK)
        return ug_prefix_error(st, "ug_dataset_stats");
    *mean = p.mean;
    *stddev = sqrt(p.squares / p.count);
    return UG_OK;
}

/* The largest finite magnitude the data set stores (bytes: 255); -1 when
 * a callback makes the values (gather checks those). */
static double largest_stored(const ug_dataset *ds)
{
    const ug_dataset *base = ug_dataset_storage(ds);
    if (base->fill)
        return -1.0;
    if (base->x_dtype == UG_U8)
        return 255.0;
    double largest = 0.0;
    const float *x = base->x;
    for (int64_t i = 0; i < base->count * base->features; i++)
        if (isfinite(x[i]) && fabs((double)x[i]) > largest)
            largest = fabs((double)x[i]);
    return largest;
}

ug_status ug_dataset_transform(ug_dataset *ds, float scale, float shift)
{
    const char *op = "ug_dataset_transform";
    if (!ds)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dataset is NULL", op);
    if (!isfinite(scale) || !isfinite(shift))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: scale %g and shift %g must be finite", op,
                            (double)scale, (double)shift);
    /* Composed, every value the batches will hold must stay a finite f32:
     * |scale| * largest + |shift|, with a margin for f32 rounding. */
    float composed_shift = scale * ds->shift + shift, composed_scale = scale * ds->scale;
    double largest = largest_stored(ds);
    if (!isfinite(composed_scale) || !isfinite(composed_shift) ||
        fabs((double)composed_scale) * largest + fabs((double)composed_shift) > 0.99 * FLT_MAX)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: scale %g and shift %g composed with the data set's (%g, %g) make values up to "
                            "%g * %g + %g, which overflow f32; the data set is unchanged",
                            op, (double)scale, (double)shift, (double)ds->scale, (double)ds->shift,
                            (double)scale * ds->scale, largest < 0 ? 1.0 : largest, (double)scale * ds->shift + shift);
    ds->shift = composed_shift;
    ds->scale = composed_scale;
    return UG_OK;
}
