/* Statistics and affine transforms of a data set's values (normalisation). */
#include <math.h>

#include "core/data_internal.h"
#include "core/error.h"

ug_status ug_dataset_stats(const ug_dataset *ds, double *mean, double *stddev)
{
    if (!ds || !mean || !stddev)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_dataset_stats: NULL argument");
    size_t n = (size_t)ds->count * (size_t)ds->features;
    if (n == 0)
        return ug_set_error(UG_ERR_SHAPE, "ug_dataset_stats: the data set is empty");
    /* Two passes in double: exact enough for 47M values, unlike a running sum of squares. */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ds->x[i]))
            return ug_set_error(UG_ERR_FORMAT,
                                "ug_dataset_stats: sample %lld, feature %lld is %g; the data must "
                                "be finite",
                                (long long)(i / (size_t)ds->features),
                                (long long)(i % (size_t)ds->features), (double)ds->x[i]);
        sum += ds->x[i];
    }
    double m = sum / (double)n, squares = 0.0;
    for (size_t i = 0; i < n; i++)
        squares += ((double)ds->x[i] - m) * ((double)ds->x[i] - m);
    *mean = m;
    *stddev = sqrt(squares / (double)n);
    return UG_OK;
}

ug_status ug_dataset_transform(ug_dataset *ds, float scale, float shift)
{
    if (!ds)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_dataset_transform: dataset is NULL");
    if (!isfinite(scale) || !isfinite(shift))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_dataset_transform: scale %g and shift %g must be finite",
                            (double)scale, (double)shift);
    size_t n = (size_t)ds->count * (size_t)ds->features;
    for (size_t i = 0; i < n; i++)
        ds->x[i] = scale * ds->x[i] + shift;
    return UG_OK;
}
