/* Elementwise kernels: unary (also the cast, transpose and expand), binary
 * with broadcasting and a fused activation, and raw strided copies. The
 * operation is a run-time argument (uniform across the launch, so the
 * branch costs little); the dtypes are compile-time, one kernel per
 * combination. The formulas and op numbers come from
 * kernels/common/elementwise.h, which the host puts ahead of this file.
 * Each kind comes as a contiguous fast path and a strided path that reads
 * through up to 8 (shape, stride) pairs passed by value in a struct. */

/* y = op(x): y contiguous, x contiguous or strided. FILL never reads x. */
#define UG_UNARY_KERNELS(TI, TO)                                                         \
    kernel void unary_contig_##TI##_##TO(global UG_T_##TO *y, ulong yoff,                \
                                         const global UG_T_##TI *x, ulong xoff, long n,  \
                                         int op, float alpha, float beta)                \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float v = op == UG_UNARY_FILL ? 0.0f : UG_LD_##TI(x, xoff + i);                \
        UG_ST_##TO(y, yoff + i, ug_unary_op(op, v, alpha, beta));                        \
    }                                                                                    \
    kernel void unary_strided_##TI##_##TO(global UG_T_##TO *y, ulong yoff,               \
                                          const global UG_T_##TI *x, ulong xoff, long n, \
                                          int op, float alpha, float beta, int ndim,     \
                                          ug_layout1 lay)                                \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const long xi = xoff + ug_strided_offset(i, ndim, lay.shape, lay.xs);            \
        const float v = op == UG_UNARY_FILL ? 0.0f : UG_LD_##TI(x, xi);                      \
        UG_ST_##TO(y, yoff + i, ug_unary_op(op, v, alpha, beta));                        \
    }

UG_UNARY_KERNELS(f32, f32)
UG_UNARY_KERNELS(f32, f16)
UG_UNARY_KERNELS(f16, f32)
UG_UNARY_KERNELS(f16, f16)
UG_UNARY_KERNELS(i32, f32)
UG_UNARY_KERNELS(i32, f16)
UG_UNARY_KERNELS(u8, f32)
UG_UNARY_KERNELS(u8, f16)
UG_UNARY_KERNELS(f32, bf16)
UG_UNARY_KERNELS(f16, bf16)
UG_UNARY_KERNELS(i32, bf16)
UG_UNARY_KERNELS(u8, bf16)
UG_UNARY_KERNELS(i64, f32)
UG_UNARY_KERNELS(i64, f16)
UG_UNARY_KERNELS(i64, bf16)
UG_UNARY_KERNELS(bf16, f32)
UG_UNARY_KERNELS(bf16, f16)
UG_UNARY_KERNELS(bf16, bf16)

/* Same-dtype strided copy of raw elements (any dtype, bits preserved:
 * integers beyond 2^24, NaN payloads). Contiguous copies use clEnqueueCopyBuffer. */
#define UG_COPY_KERNEL(NAME, T)                                                          \
    kernel void copy_strided_##NAME(global T *y, ulong yoff, const global T *x,          \
                                    ulong xoff, long n, int ndim, ug_layout1 lay)        \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        y[yoff + i] = x[xoff + ug_strided_offset(i, ndim, lay.shape, lay.xs)];           \
    }

/* On CPU devices, the same a row at a time (see binary_rows below): the
 * row's offset is found once, and its elements step by the inner stride. */
#define UG_COPY_ROWS_KERNEL(NAME, T)                                                     \
    kernel void copy_rows_##NAME(global T *y, ulong yoff, const global T *x, ulong xoff, \
                                 long n, long inner, long step, int ndim, ug_layout1 lay) \
    {                                                                                    \
        const long per_row = (inner + UG_CHUNK - 1) / UG_CHUNK, item = get_global_id(0); \
        const long row = item / per_row, begin = (item - row * per_row) * UG_CHUNK;      \
        const long end = min(begin + UG_CHUNK, inner);                                   \
        if (row * inner >= n) /* the launch's rounding */                                \
            return;                                                                      \
        global T *out = y + yoff + row * inner;                                          \
        const global T *in = x + xoff + ug_strided_offset(row, ndim, lay.shape, lay.xs); \
        for (long j = begin; j < end; j++)                                               \
            out[j] = in[j * step];                                                       \
    }

#define UG_CHUNK 64 /* elements a work-item of the CPU devices' kernels takes */

UG_COPY_KERNEL(f32, uint)
UG_COPY_KERNEL(f16, ushort)
UG_COPY_KERNEL(i32, uint)
UG_COPY_KERNEL(u8, uchar)
UG_COPY_KERNEL(bf16, ushort)
UG_COPY_KERNEL(i64, ulong)
UG_COPY_ROWS_KERNEL(f32, uint)
UG_COPY_ROWS_KERNEL(f16, ushort)
UG_COPY_ROWS_KERNEL(i32, uint)
UG_COPY_ROWS_KERNEL(u8, uchar)
UG_COPY_ROWS_KERNEL(bf16, ushort)
UG_COPY_ROWS_KERNEL(i64, ulong)

/* y = post(a op b). y may alias a or b exactly: each item reads its inputs
 * before writing its own element, so no restrict and no hazard. */
#define UG_BINARY_KERNELS(T)                                                             \
    kernel void binary_contig_##T(global UG_T_##T *y, ulong yoff,                        \
                                  const global UG_T_##T *a, ulong aoff,                  \
                                  const global UG_T_##T *b, ulong boff, long n, int op,  \
                                  int post, float alpha)                                 \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float v = ug_binary_op(op, UG_LD_##T(a, aoff + i), UG_LD_##T(b, boff + i), \
                                     alpha);                                             \
        UG_ST_##T(y, yoff + i, ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, v));          \
    }                                                                                    \
    kernel void binary_strided_##T(global UG_T_##T *y, ulong yoff,                       \
                                   const global UG_T_##T *a, ulong aoff,                 \
                                   const global UG_T_##T *b, ulong boff, long n, int op, \
                                   int post, float alpha, int ndim, ug_layout2 lay)     \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float va = UG_LD_##T(a, aoff + ug_strided_offset(i, ndim, lay.shape, lay.as)); \
        const float vb = UG_LD_##T(b, boff + ug_strided_offset(i, ndim, lay.shape, lay.bs)); \
        const float v = ug_binary_op(op, va, vb, alpha);                                 \
        UG_ST_##T(y, yoff + i, ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, v));          \
    }

UG_BINARY_KERNELS(f32)
UG_BINARY_KERNELS(f16)
UG_BINARY_KERNELS(bf16)

/* On CPU devices (POCL) the contiguous f32 kinds run UG_CHUNK elements per
 * work-item with the op's switch outside the loop, so that each case's
 * loop is vectorized: the per-element switch of the kernels above, whose
 * other cases call exp and erf, keeps POCL from vectorizing them (32000
 * additions: 77 us against 8). A binary op's activation is a second pass
 * over the chunk, exact in f32. GPUs keep the kernels above, whose
 * neighbouring work-items read neighbouring elements.
 *
 * binary_chunked also takes the broadcasts of a bias or a per-feature
 * scale: y is `rows` rows of `period` elements, and an operand is either
 * as long as y (full) or one row repeated. A work-item takes UG_CHUNK
 * elements of one row, so both operands' reads stay contiguous (a bias
 * added through the strided kernel: 80 us for 64 x 500, against 8).
 * binary_rows takes any other strides: a work-item takes UG_CHUNK
 * elements of one row of y's innermost axis, finds each operand's offset
 * for the row once and steps by its inner stride (a column broadcast, 0;
 * a transposed view). */

kernel void unary_chunked(global float *y, ulong yoff, const global float *xs, ulong xoff, long n, int op,
                          float alpha, float beta)
{
    const long begin = get_global_id(0) * UG_CHUNK, end = min(begin + UG_CHUNK, n);
    global float *out = y + yoff;
    const global float *in = xs + xoff;
    switch (op) {
#define UG_CASE_(NAME, EXPR)                         \
    case UG_UNARY_##NAME:                            \
        for (long i = begin; i < end; i++) {         \
            const float x = in[i];                   \
            out[i] = (EXPR);                         \
        }                                            \
        break;
        UG_UNARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
}

kernel void binary_rows(global float *y, ulong yoff, const global float *as, ulong aoff,
                        const global float *bs, ulong boff, long n, long inner, long a_step, long b_step,
                        int op, int post, float alpha, int ndim, ug_layout2 lay)
{
    const long per_row = (inner + UG_CHUNK - 1) / UG_CHUNK, item = get_global_id(0);
    const long row = item / per_row, begin = (item - row * per_row) * UG_CHUNK;
    const long end = min(begin + UG_CHUNK, inner);
    if (row * inner >= n) /* the launch's rounding */
        return;
    global float *out = y + yoff + row * inner;
    const global float *left = as + aoff + ug_strided_offset(row, ndim, lay.shape, lay.as);
    const global float *right = bs + boff + ug_strided_offset(row, ndim, lay.shape, lay.bs);
    switch (op) {
#define UG_CASE_(NAME, EXPR)                                      \
    case UG_BINARY_##NAME:                                        \
        for (long i = begin; i < end; i++) {                      \
            const float a = left[i * a_step], b = right[i * b_step]; \
            out[i] = (EXPR);                                      \
        }                                                         \
        break;
        UG_BINARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
    for (long i = begin; post != UG_UNARY_COPY && i < end; i++)
        out[i] = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, out[i]);
}

kernel void binary_chunked(global float *y, ulong yoff, const global float *as, ulong aoff,
                           const global float *bs, ulong boff, long n, long period,
                           int a_full, int b_full, int op, int post, float alpha)
{
    const long per_row = (period + UG_CHUNK - 1) / UG_CHUNK, item = get_global_id(0);
    const long row = item / per_row, begin = (item - row * per_row) * UG_CHUNK;
    const long end = min(begin + UG_CHUNK, period), base = row * period;
    if (base >= n) /* the launch's rounding */
        return;
    global float *out = y + yoff + base;
    const global float *left = as + aoff + (a_full ? base : 0);
    const global float *right = bs + boff + (b_full ? base : 0);
    switch (op) {
#define UG_CASE_(NAME, EXPR)                         \
    case UG_BINARY_##NAME:                           \
        for (long i = begin; i < end; i++) {         \
            const float a = left[i], b = right[i];   \
            out[i] = (EXPR);                         \
        }                                            \
        break;
        UG_BINARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
    if (post == UG_UNARY_COPY)
        return;
    const float beta = 0.0f;
    alpha = 0.0f; /* the activation's, as the kernels above pass it */
    switch (post) {
#define UG_CASE_(NAME, EXPR)                         \
    case UG_UNARY_##NAME:                            \
        for (long i = begin; i < end; i++) {         \
            const float x = out[i];                  \
            out[i] = (EXPR);                         \
        }                                            \
        break;
        UG_UNARY_OPS(UG_CASE_)
#undef UG_CASE_
    }
}
