/* Rows picked, placed or summed by index (the gather family, backend.h):
 * gathers move each row's bytes with memcpy; the sums run over the
 * indices in order, each worker owning a band of every row's columns, so
 * the result is the same whatever the threads. */
#include <string.h>

#include "backends/cpu/internal.h"
#include "backends/cpu/threads.h"

/* Columns of a row summed by one work unit: a band long enough to
 * vectorise, short enough that a row's band stays in L1. */
enum { BAND = 512 };

static int64_t index_at(const char *index, ug_dtype dtype, int64_t j)
{
    if (dtype == UG_I64) {
        int64_t v;
        memcpy(&v, index + j * 8, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, index + j * 4, 4);
    return v;
}

typedef struct gather_job {
    const ug_gather_args *a;
    const char *x, *index;
    char *y;
    size_t es; /* bytes per element */
    int64_t bands;
} gather_job;

/* Units are the rows of y written: (o, j). */
static void gather_range(void *ctx, int64_t begin, int64_t end)
{
    const gather_job *g = ctx;
    const ug_gather_args *a = g->a;
    const size_t row = (size_t)a->inner * g->es;
    for (int64_t u = begin; u < end; u++) {
        const int64_t o = u / a->count, j = u % a->count;
        char *dst = g->y + ((o * a->y_len + a->y_start + j) * a->inner) * (int64_t)g->es;
        const int64_t p = g->index ? index_at(g->index, a->index.dtype, j) : a->x_start + j;
        if (p < 0 || p >= a->x_len)
            memset(dst, 0xff, row);
        else
            memcpy(dst, g->x + ((o * a->x_len + p) * a->inner) * (int64_t)g->es, row);
    }
}

/* Units are x's rows (o, j), each copied to row index[j] of y. */
static void scatter_range(void *ctx, int64_t begin, int64_t end)
{
    const gather_job *g = ctx;
    const ug_gather_args *a = g->a;
    const size_t row = (size_t)a->inner * g->es;
    for (int64_t u = begin; u < end; u++) {
        const int64_t o = u / a->count, j = u % a->count, v = index_at(g->index, a->index.dtype, j);
        if (v >= 0 && v < a->y_len)
            memcpy(g->y + ((o * a->y_len + v) * a->inner) * (int64_t)g->es,
                   g->x + ((o * a->count + j) * a->inner) * (int64_t)g->es, row);
    }
}

/* Units are (o, band of columns): each zeroes its band of every row of y,
 * then adds x's rows into it in index order. */
static UG_CPU_WIDE void accumulate_range(void *ctx, int64_t begin, int64_t end)
{
    const gather_job *g = ctx;
    const ug_gather_args *a = g->a;
    float staged[BAND];
    for (int64_t u = begin; u < end; u++) {
        const int64_t o = u / g->bands, c0 = u % g->bands * BAND;
        const int64_t n = a->inner - c0 < BAND ? a->inner - c0 : BAND;
        float *y = (float *)(void *)g->y + o * a->y_len * a->inner + c0;
        for (int64_t v = 0; v < a->y_len; v++)
            memset(y + v * a->inner, 0, (size_t)n * sizeof(float));
        for (int64_t j = 0; j < a->count; j++) {
            const int64_t v = index_at(g->index, a->index.dtype, j);
            if (v < 0 || v >= a->y_len)
                continue;
            const char *src = g->x + ((o * a->count + j) * a->inner + c0) * (int64_t)g->es;
            const float *xs = (const float *)(const void *)src;
            if (a->x.dtype != UG_F32) {
                ug_cpu_load(src, a->x.dtype, 1, n, staged);
                xs = staged;
            }
            float *dst = y + v * a->inner;
            for (int64_t c = 0; c < n; c++)
                dst[c] += xs[c];
        }
    }
}

ug_status ug_cpu_gather(ug_bdev *dev, const ug_gather_args *a)
{
    if (a->outer <= 0 || a->inner <= 0 || (a->count <= 0 && !a->accumulate))
        return UG_OK;
    gather_job g = {.a = a, .x = ug_cpu_ptr(a->x), .y = ug_cpu_ptr(a->y),
                    .index = a->index.mem ? ug_cpu_ptr(a->index) : NULL,
                    .es = ug_dtype_size(a->x.dtype)};
    if (!a->accumulate) {
        const int64_t rows = a->outer * a->count;
        ug_cpu_parallel_for(dev->workers, rows, UG_CPU_MIN_PARALLEL / a->inner + 1,
                            a->scatter ? scatter_range : gather_range, &g);
        return UG_OK;
    }
    if (a->y_len <= 0)
        return UG_OK;
    g.bands = (a->inner + BAND - 1) / BAND;
    const int64_t per_unit = (a->count + a->y_len) * (a->inner < BAND ? a->inner : BAND);
    ug_cpu_parallel_for(dev->workers, a->outer * g.bands, UG_CPU_MIN_PARALLEL / per_unit + 1,
                        accumulate_range, &g);
    return UG_OK;
}
