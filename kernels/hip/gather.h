/* The gather family (backend.h): rows of x picked or placed by index, their
 * bits moved unchanged (a kernel per element size), and the deterministic
 * sums of rows by index (a kernel per data type, f32 accumulation).
 * Device code: backends/hip/gather.hip launches it. */
#ifndef UG_KERNELS_HIP_GATHER_H
#define UG_KERNELS_HIP_GATHER_H

#include "kernels/hip/common.h"

typedef struct gather_k {
    void *y;
    const void *x, *index;
    bool wide_index; /* i64, else i32 */
    int64_t outer, inner, count, x_len, y_len, x_start, y_start, chunk;
} gather_k;

UG_DEV int64_t ug_index_at(const gather_k &k, int64_t j)
{
    return k.wide_index ? ((const int64_t *)k.index)[j] : (int64_t)((const int32_t *)k.index)[j];
}

/* One thread per element of [outer, count, inner]; R: an unsigned type of
 * the element's size. All one bits for an index outside [0, x_len). */
template <typename R>
__global__ void ug_gather_kernel(gather_k k)
{
    UG_FOR(i, k.outer * k.count * k.inner, int64_t) {
        const int64_t c = i % k.inner, row = i / k.inner, j = row % k.count, o = row / k.count;
        const int64_t p = k.index ? ug_index_at(k, j) : k.x_start + j;
        ((R *)k.y)[(o * k.y_len + k.y_start + j) * k.inner + c] =
            p < 0 || p >= k.x_len ? (R)~(R)0 : ((const R *)k.x)[(o * k.x_len + p) * k.inner + c];
    }
}

/* One thread per element of x [outer, count, inner], copied to row
 * index[j] of y; an index outside [0, y_len) skipped. */
template <typename R>
__global__ void ug_scatter_kernel(gather_k k)
{
    UG_FOR(i, k.outer * k.count * k.inner, int64_t) {
        const int64_t c = i % k.inner, row = i / k.inner, j = row % k.count, o = row / k.count;
        const int64_t v = ug_index_at(k, j);
        if (v >= 0 && v < k.y_len)
            ((R *)k.y)[(o * k.y_len + v) * k.inner + c] = ((const R *)k.x)[i];
    }
}

/* One thread per (o, chunk of rows, column c), c fastest: zeroes its
 * column of the chunk's rows, then adds x's rows whose index falls there,
 * in index order. T: x's type; y is f32. */
template <typename T>
__global__ void ug_gather_sum_kernel(gather_k k)
{
    const int64_t chunks = (k.y_len + k.chunk - 1) / k.chunk;
    UG_FOR(i, k.outer * chunks * k.inner, int64_t) {
        const int64_t c = i % k.inner, q = i / k.inner, o = q / chunks;
        const int64_t v0 = q % chunks * k.chunk, v1 = v0 + k.chunk < k.y_len ? v0 + k.chunk : k.y_len;
        float *row = (float *)k.y + o * k.y_len * k.inner + c;
        for (int64_t v = v0; v < v1; v++)
            row[v * k.inner] = 0.0f;
        const T *src = (const T *)k.x + o * k.count * k.inner + c;
        for (int64_t j = 0; j < k.count; j++) {
            const int64_t v = ug_index_at(k, j);
            if (v >= v0 && v < v1)
                row[v * k.inner] += ug_widen(src[j * k.inner]);
        }
    }
}

#endif
