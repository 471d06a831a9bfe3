/* The gather family (backend.h): rows of x picked or placed by index
 * (bits moved unchanged, a kernel per element size and index dtype), and
 * the deterministic sums of rows by index. */

/* y[o, y_start + j, c] = x[o, p, c], p = index[j] or x_start + j; all one
 * bits for an index outside [0, x_len). One item per element of
 * [outer, count, inner]. RAW: an unsigned type of the element's size. */
#define UG_GATHER_KERNEL(NAME, RAW, IDX, INAME)                                              \
    kernel void gather_##NAME##_##INAME(global RAW *y, ulong yoff, const global RAW *x,       \
                                        ulong xoff, const global IDX *index, ulong ioff,      \
                                        int has_index, long outer, long inner, long count,    \
                                        long x_len, long y_len, long x_start, long y_start)   \
    {                                                                                         \
        const long i = get_global_id(0);                                                      \
        if (i >= outer * count * inner)                                                       \
            return;                                                                           \
        const long c = i % inner, row = i / inner, j = row % count, o = row / count;          \
        const long p = has_index ? (long)index[ioff + j] : x_start + j;                       \
        y[yoff + (o * y_len + y_start + j) * inner + c] =                                     \
            p < 0 || p >= x_len ? (RAW) ~(RAW)0 : x[xoff + (o * x_len + p) * inner + c];       \
    }

/* y[o, index[j], c] = x[o, j, c]; an index outside [0, y_len) skipped. */
#define UG_SCATTER_KERNEL(NAME, RAW, IDX, INAME)                                             \
    kernel void gather_scatter_##NAME##_##INAME(global RAW *y, ulong yoff, const global RAW *x, \
                                                ulong xoff, const global IDX *index,           \
                                                ulong ioff, long outer, long inner,            \
                                                long count, long y_len)                        \
    {                                                                                          \
        const long i = get_global_id(0);                                                       \
        if (i >= outer * count * inner)                                                        \
            return;                                                                            \
        const long c = i % inner, row = i / inner, j = row % count, o = row / count;           \
        const long v = (long)index[ioff + j];                                                  \
        if (v >= 0 && v < y_len)                                                               \
            y[yoff + (o * y_len + v) * inner + c] = x[xoff + i];                               \
    }

#define UG_GATHER_KERNELS(NAME, RAW)            \
    UG_GATHER_KERNEL(NAME, RAW, int, i32)       \
    UG_GATHER_KERNEL(NAME, RAW, long, i64)      \
    UG_SCATTER_KERNEL(NAME, RAW, int, i32)      \
    UG_SCATTER_KERNEL(NAME, RAW, long, i64)

UG_GATHER_KERNELS(f32, uint)
UG_GATHER_KERNELS(f16, ushort)
UG_GATHER_KERNELS(bf16, ushort)
UG_GATHER_KERNELS(i32, uint)
UG_GATHER_KERNELS(u8, uchar)
UG_GATHER_KERNELS(i64, ulong)

/* y[o, v, c] (f32) = the sum over j in increasing order with index[j] == v
 * of x[o, j, c]. An item owns column c of the rows [v0, v0 + chunk) of one
 * o: it zeroes them, then adds x's rows whose index falls there. Items are
 * (o, chunk, c), c fastest. */
#define UG_ACCUMULATE_KERNEL(T, IDX, INAME)                                                   \
    kernel void gather_sum_##T##_##INAME(global float *y, ulong yoff, const global UG_T_##T *x, \
                                         ulong xoff, const global IDX *index, ulong ioff,     \
                                         long outer, long inner, long count, long y_len,      \
                                         long chunk)                                          \
    {                                                                                         \
        const long chunks = (y_len + chunk - 1) / chunk;                                      \
        const long i = get_global_id(0);                                                      \
        if (i >= outer * chunks * inner)                                                      \
            return;                                                                           \
        const long c = i % inner, q = i / inner, o = q / chunks;                              \
        const long v0 = q % chunks * chunk, v1 = min(v0 + chunk, y_len);                      \
        global float *row = y + yoff + o * y_len * inner + c;                                 \
        for (long v = v0; v < v1; v++)                                                        \
            row[v * inner] = 0.0f;                                                            \
        const global UG_T_##T *src = x + xoff + o * count * inner + c;                        \
        for (long j = 0; j < count; j++) {                                                    \
            const long v = (long)index[ioff + j];                                             \
            if (v >= v0 && v < v1)                                                            \
                row[v * inner] += UG_LD_##T(src, j * inner);                                  \
        }                                                                                     \
    }

#define UG_ACCUMULATE_KERNELS(T)              \
    UG_ACCUMULATE_KERNEL(T, int, i32)         \
    UG_ACCUMULATE_KERNEL(T, long, i64)

UG_ACCUMULATE_KERNELS(f32)
UG_ACCUMULATE_KERNELS(f16)
UG_ACCUMULATE_KERNELS(bf16)
