/* Byte images made into a batch's values (backend.h, ug_augment_args):
 * the data set's table per byte, at each sample's crop and flip. */
#include "backends/cpu/internal.h"

typedef struct augment_job {
    const ug_augment_args *a;
    const uint8_t *x;
    const float *table;
    const int32_t *place;
    char *y;
} augment_job;

/* Rows (s, k, i) of w values each, b..e of n * c * h. */
static void augment_rows(void *vjob, int64_t b, int64_t e)
{
    const augment_job *j = vjob;
    const ug_augment_args *a = j->a;
    const int64_t c = a->c, h = a->h, w = a->w;
    float row[1024];
    for (int64_t r = b; r < e; r++) {
        const int64_t s = r / (c * h), i = r % h;
        const int32_t *p = j->place ? j->place + 3 * s : NULL;
        const int64_t si = i + (p ? p[0] - a->pad : 0);
        const uint8_t *image = j->x + (r - i) * w; /* of sample s, channel k */
        for (int64_t j0 = 0; j0 < w; j0 += 1024) {
            const int64_t n = w - j0 < 1024 ? w - j0 : 1024;
            for (int64_t jj = 0; jj < n; jj++) {
                const int64_t col = p && p[2] ? w - 1 - (j0 + jj) : j0 + jj;
                const int64_t sj = col + (p ? p[1] - a->pad : 0);
                const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;
                row[jj] = j->table[inside ? image[si * w + sj] : 0];
            }
            ug_cpu_store(j->y + (r * w + j0) * (int64_t)ug_dtype_size(a->y.dtype), a->y.dtype, n, row);
        }
    }
}

ug_status ug_cpu_augment(ug_bdev *dev, const ug_augment_args *a)
{
    if (a->x.dtype != UG_U8 || !ug_cpu_float_dtype(a->y.dtype) || a->table.dtype != UG_F32 ||
        (a->place.mem && a->place.dtype != UG_I32))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu augment: x u8, y f32, f16 or bf16, table f32 and place i32");
    if (a->n <= 0)
        return UG_OK;
    augment_job j = {.a = a, .x = (const uint8_t *)ug_cpu_ptr(a->x), .table = (const float *)ug_cpu_ptr(a->table),
                     .place = a->place.mem ? (const int32_t *)ug_cpu_ptr(a->place) : NULL, .y = ug_cpu_ptr(a->y)};
    ug_cpu_parallel_for(dev->workers, a->n * a->c * a->h, 64, augment_rows, &j);
    return UG_OK;
}
