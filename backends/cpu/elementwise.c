/* Elementwise kernels: unary (also cast, transpose, expand, fill) and binary
 * with broadcasting and a fused activation.
 *
 * The strides are first collapsed (size-1 axes dropped, neighbours merged
 * where every operand steps evenly across them), so the common cases become
 * one inner run per row: all contiguous is one long run, a bias add is rows
 * with b's inner stride 1, a scalar is an inner stride of 0. Runs are cut
 * into blocks of BLK values; f32 operands with stride 1 are used in place,
 * anything else is gathered into a stack buffer as f32 first. The per-op
 * loops are plain array loops that gcc vectorises. */
#include <math.h>
#include <string.h>

#include "backends/collapse_axes.h"
#include "backends/cpu/internal.h"

enum { BLK = 512 };
enum { VV = 0, A_SCALAR = 1, B_SCALAR = 2, BOTH_SCALAR = 3 };

typedef struct ew_plan {
    int ndim, nin;
    int64_t shape[UG_KERNEL_MAX_DIMS];
    int64_t st[2][UG_KERNEL_MAX_DIMS];
    int64_t numel;
} ew_plan;

static void plan_init(ew_plan *p, int ndim, const int64_t *shape, int nin, const int64_t *s0,
                      const int64_t *s1)
{
    const int64_t *src[2] = {s0, s1};
    memset(p, 0, sizeof *p);
    p->nin = nin;
    p->numel = 1;
    for (int d = 0; d < ndim; d++)
        p->numel *= shape[d];
    p->ndim = ug_collapse_axes(ndim, shape, nin, src, p->shape, p->st);
}

/* Calls piece(job, output index, operand offsets, count) for blocks of at
 * most BLK outputs covering [begin, end); within a block every operand
 * steps by its innermost stride. */
typedef void (*piece_fn)(void *job, int64_t yi, const int64_t *off, int64_t n);

static void walk(const ew_plan *p, int64_t begin, int64_t end, piece_fn piece, void *job)
{
    int64_t coord[UG_KERNEL_MAX_DIMS], off[2] = {0, 0};
    int last = p->ndim - 1;
    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        coord[d] = rem % p->shape[d];
        rem /= p->shape[d];
        for (int k = 0; k < p->nin; k++)
            off[k] += coord[d] * p->st[k][d];
    }
    for (int64_t i = begin; i < end;) {
        int64_t run = p->shape[last] - coord[last];
        if (run > end - i)
            run = end - i;
        for (int64_t done = 0; done < run;) {
            int64_t n = run - done < BLK ? run - done : BLK;
            int64_t o[2] = {off[0] + done * p->st[0][last], off[1] + done * p->st[1][last]};
            piece(job, i + done, o, n);
            done += n;
        }
        i += run;
        coord[last] += run;
        for (int k = 0; k < p->nin; k++)
            off[k] += run * p->st[k][last];
        for (int d = last; d > 0 && coord[d] == p->shape[d]; d--) {
            coord[d] = 0;
            coord[d - 1]++;
            for (int k = 0; k < p->nin; k++)
                off[k] += p->st[k][d - 1] - p->shape[d] * p->st[k][d];
        }
    }
}

#define UN_CASE(KIND, EXPR)                                                                    \
    case KIND:                                                                                 \
        UG_CPU_IVDEP for (int64_t i = 0; i < n; i++)                                           \
        {                                                                                      \
            float x = in[i];                                                                   \
            (void)x; /* FILL's expression does not read it */                                  \
            y[i] = (EXPR);                                                                     \
        }                                                                                      \
        break;

/* y = f(x) over n contiguous floats; y may be in. The formulas are
 * kernels/common/elementwise.h's, expanded into one loop per op. */
UG_CPU_WIDE
static void unary_block(ug_unary_kind op, float alpha, float beta, const float *in, float *y,
                        int64_t n)
{
    if (op == UG_UNARY_FILL) { /* in is NULL: nothing is read */
        for (int64_t i = 0; i < n; i++)
            y[i] = beta;
        return;
    }
    switch (op) {
#define UN_OP(NAME, EXPR) UN_CASE(UG_UNARY_##NAME, EXPR)
        UG_UNARY_OPS(UN_OP)
#undef UN_OP
    case UG_UNARY_COUNT:
        break;
    }
}

#define BIN_CASE(KIND, EXPR)                                                                   \
    case KIND:                                                                                 \
        if (mode == VV) {                                                                      \
            UG_CPU_IVDEP for (int64_t i = 0; i < n; i++)                                       \
            {                                                                                  \
                float a = av[i], b = bv[i];                                                    \
                y[i] = (EXPR);                                                                 \
            }                                                                                  \
        } else if (mode == B_SCALAR) {                                                         \
            float b = bv[0];                                                                   \
            UG_CPU_IVDEP for (int64_t i = 0; i < n; i++)                                       \
            {                                                                                  \
                float a = av[i];                                                               \
                y[i] = (EXPR);                                                                 \
            }                                                                                  \
        } else if (mode == A_SCALAR) {                                                         \
            float a = av[0];                                                                   \
            UG_CPU_IVDEP for (int64_t i = 0; i < n; i++)                                       \
            {                                                                                  \
                float b = bv[i];                                                               \
                y[i] = (EXPR);                                                                 \
            }                                                                                  \
        } else {                                                                               \
            float a = av[0], b = bv[0], r = (EXPR);                                            \
            for (int64_t i = 0; i < n; i++)                                                    \
                y[i] = r;                                                                      \
        }                                                                                      \
        break;

/* y = a op b over n floats; a scalar operand is element 0 only; y may be av
 * or bv. */
UG_CPU_WIDE
static void binary_block(ug_binary_kind op, float alpha, int mode, const float *av,
                         const float *bv, float *y, int64_t n)
{
    switch (op) {
#define BIN_OP(NAME, EXPR) BIN_CASE(UG_BINARY_##NAME, EXPR)
        UG_BINARY_OPS(BIN_OP)
#undef BIN_OP
    case UG_BINARY_COUNT:
        break;
    }
}

/* ---- unary ---- */

typedef struct un_job {
    const ug_unary_args *args;
    ew_plan plan;
    const char *x;
    char *y;
} un_job;

static void unary_piece(void *vjob, int64_t yi, const int64_t *off, int64_t n)
{
    const un_job *j = vjob;
    const ug_unary_args *a = j->args;
    float tx[BLK], ty[BLK];
    int64_t sx = j->plan.st[0][j->plan.ndim - 1];
    const float *xs = tx;
    if (a->op == UG_UNARY_FILL)
        xs = NULL; /* x is not read */
    else if (a->x.dtype == UG_F32 && sx == 1)
        xs = (const float *)j->x + off[0];
    else
        ug_cpu_load(j->x + off[0] * (int64_t)ug_dtype_size(a->x.dtype), a->x.dtype, sx, n, tx);
    float *out = a->y.dtype == UG_F32 ? (float *)j->y + yi : ty;
    unary_block(a->op, a->alpha, a->beta, xs, out, n);
    if (a->y.dtype != UG_F32)
        ug_cpu_store(j->y + yi * 2, a->y.dtype, n, out);
}

/* COPY between equal dtypes moves the bits (keeps NaN payloads, any dtype). */
static void copy_piece(void *vjob, int64_t yi, const int64_t *off, int64_t n)
{
    const un_job *j = vjob;
    size_t es = ug_dtype_size(j->args->x.dtype);
    int64_t sx = j->plan.st[0][j->plan.ndim - 1];
    const char *src = j->x + off[0] * (int64_t)es;
    char *dst = j->y + yi * (int64_t)es;
    if (sx == 1) {
        memmove(dst, src, (size_t)n * es);
    } else if (sx == 0 && es == 4) { /* a broadcast (a bias over its positions) */
        uint32_t v;
        memcpy(&v, src, sizeof v);
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)dst)[i] = v;
    } else if (es == 8) {
        for (int64_t i = 0; i < n; i++)
            ((uint64_t *)dst)[i] = ((const uint64_t *)src)[i * sx];
    } else if (es == 4) {
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i * sx];
    } else if (es == 2) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i * sx];
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i * sx];
    }
}

static void unary_range(void *vjob, int64_t begin, int64_t end)
{
    un_job *j = vjob;
    bool raw = j->args->op == UG_UNARY_COPY && j->args->x.dtype == j->args->y.dtype;
    walk(&j->plan, begin, end, raw ? copy_piece : unary_piece, j);
}

/* ---- transposed reads ----
 * When x's innermost stride is large but the next axis has stride 1 (a
 * transpose of the last two axes), the walk above reads one element per
 * cache line. Instead, copy TT x TT tiles: x's columns are read
 * contiguously into a tile, rows of the tile are written out. A work unit
 * is one band of TT output rows of one outer index. */
enum { TT = 64 };

typedef struct tr_job {
    const un_job *u;
    int64_t rows, cols, col_stride, bands;
} tr_job;

/* Columns are copied into a tile first: reading them straight from x would
 * touch TT lines a large power of two apart, which share one L1 set. */
#define TILE_COPY_FN(NAME, T)                                                                  \
    static void NAME(const char *xsrc, char *ydst, int64_t nr, int64_t nc, int64_t col_stride, \
                     int64_t cols)                                                             \
    {                                                                                          \
        T tile[TT * TT];                                                                       \
        for (int64_t c = 0; c < nc; c++)                                                       \
            memcpy(tile + c * TT, (const T *)xsrc + c * col_stride, (size_t)nr * sizeof(T));  \
        for (int64_t r = 0; r < nr; r++)                                                       \
            for (int64_t c = 0; c < nc; c++)                                                   \
                ((T *)ydst)[r * cols + c] = tile[c * TT + r];                                  \
    }
TILE_COPY_FN(tile_copy8, uint64_t)
TILE_COPY_FN(tile_copy4, uint32_t)
TILE_COPY_FN(tile_copy2, uint16_t)
TILE_COPY_FN(tile_copy1, uint8_t)

static void transpose_range(void *vjob, int64_t begin, int64_t end)
{
    const tr_job *t = vjob;
    const un_job *j = t->u;
    const ug_unary_args *a = j->args;
    const ew_plan *p = &j->plan;
    bool raw = a->op == UG_UNARY_COPY && a->x.dtype == a->y.dtype;
    int64_t xs = (int64_t)ug_dtype_size(a->x.dtype), ys = (int64_t)ug_dtype_size(a->y.dtype);
    float tile[TT][TT], row[TT];
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t o = unit / t->bands, r0 = unit % t->bands * TT;
        int64_t nr = t->rows - r0 < TT ? t->rows - r0 : TT;
        int64_t xoff = r0, rem = o; /* offset of outer index o over axes [0, ndim-2) */
        for (int d = p->ndim - 3; d >= 0; d--) {
            xoff += rem % p->shape[d] * p->st[0][d];
            rem /= p->shape[d];
        }
        for (int64_t c0 = 0; c0 < t->cols; c0 += TT) {
            int64_t nc = t->cols - c0 < TT ? t->cols - c0 : TT;
            const char *xsrc = j->x + (xoff + c0 * t->col_stride) * xs;
            char *ydst = j->y + ((o * t->rows + r0) * t->cols + c0) * ys;
            if (raw) {
                if (xs == 8)
                    tile_copy8(xsrc, ydst, nr, nc, t->col_stride, t->cols);
                else if (xs == 4)
                    tile_copy4(xsrc, ydst, nr, nc, t->col_stride, t->cols);
                else if (xs == 2)
                    tile_copy2(xsrc, ydst, nr, nc, t->col_stride, t->cols);
                else
                    tile_copy1(xsrc, ydst, nr, nc, t->col_stride, t->cols);
                continue;
            }
            for (int64_t c = 0; c < nc; c++)
                ug_cpu_load(xsrc + c * t->col_stride * xs, a->x.dtype, 1, nr, tile[c]);
            for (int64_t r = 0; r < nr; r++) {
                for (int64_t c = 0; c < nc; c++)
                    row[c] = tile[c][r];
                float *out = a->y.dtype == UG_F32 ? (float *)ydst + r * t->cols : row;
                unary_block(a->op, a->alpha, a->beta, row, out, nc);
                if (a->y.dtype != UG_F32)
                    ug_cpu_store(ydst + r * t->cols * ys, a->y.dtype, nc, row);
            }
        }
    }
}

ug_status ug_cpu_unary(ug_bdev *dev, const ug_unary_args *args)
{
    if (args->ndim < 1 || args->ndim > UG_KERNEL_MAX_DIMS || (int)args->op < 0 ||
        args->op >= UG_UNARY_COUNT)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu unary: bad op %d or ndim %d",
                            (int)args->op, args->ndim);
    bool same = args->op == UG_UNARY_COPY && args->x.dtype == args->y.dtype;
    if (!same && !ug_cpu_float_dtype(args->y.dtype))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu unary: output dtype %s must be f32, f16 or bf16",
                            ug_dtype_name(args->y.dtype));
    un_job j = {.args = args, .x = args->x.mem ? ug_cpu_ptr(args->x) : NULL,
                .y = ug_cpu_ptr(args->y)};
    static const int64_t no_strides[UG_KERNEL_MAX_DIMS]; /* FILL reads no x */
    plan_init(&j.plan, args->ndim, args->shape, 1,
              args->op == UG_UNARY_FILL ? no_strides : args->x_strides, NULL);
    if (j.plan.numel <= 0)
        return UG_OK;
    int nd = j.plan.ndim;
    int64_t inner_stride = j.plan.st[0][nd - 1];
    if (nd >= 2 && j.plan.st[0][nd - 2] == 1 && (inner_stride > 1 || inner_stride < 0) &&
        j.plan.shape[nd - 1] >= 8) {
        tr_job t = {.u = &j, .rows = j.plan.shape[nd - 2], .cols = j.plan.shape[nd - 1],
                    .col_stride = inner_stride};
        t.bands = (t.rows + TT - 1) / TT;
        int64_t units = j.plan.numel / (t.rows * t.cols) * t.bands;
        int64_t per_unit = (t.rows < TT ? t.rows : TT) * t.cols;
        ug_cpu_parallel_for(dev->workers, units, UG_CPU_MIN_PARALLEL / per_unit + 1,
                            transpose_range, &t);
        return UG_OK;
    }
    ug_cpu_parallel_for(dev->workers, j.plan.numel, UG_CPU_MIN_PARALLEL, unary_range, &j);
    return UG_OK;
}

/* ---- binary ---- */

typedef struct bin_job {
    const ug_binary_args *args;
    ew_plan plan;
    const char *a, *b;
    char *y;
} bin_job;

/* Points *out at n floats of an operand: in place when f32 with stride 1,
 * one value when the stride is 0, else gathered into buf. Returns whether
 * it is a scalar. */
static bool operand(const char *base, ug_dtype dt, int64_t off, int64_t stride, int64_t n,
                    float *buf, const float **out)
{
    if (stride == 0) {
        ug_cpu_load(base + off * (int64_t)ug_dtype_size(dt), dt, 0, 1, buf);
        *out = buf;
        return true;
    }
    if (dt == UG_F32 && stride == 1) {
        *out = (const float *)base + off;
        return false;
    }
    ug_cpu_load(base + off * (int64_t)ug_dtype_size(dt), dt, stride, n, buf);
    *out = buf;
    return false;
}

static void binary_piece(void *vjob, int64_t yi, const int64_t *off, int64_t n)
{
    const bin_job *j = vjob;
    const ug_binary_args *a = j->args;
    float ta[BLK], tb[BLK], ty[BLK];
    int last = j->plan.ndim - 1;
    ug_dtype dt = a->y.dtype;
    const float *pa, *pb;
    int mode = VV;
    if (operand(j->a, dt, off[0], j->plan.st[0][last], n, ta, &pa))
        mode |= A_SCALAR;
    if (operand(j->b, dt, off[1], j->plan.st[1][last], n, tb, &pb))
        mode |= B_SCALAR;
    float *out = dt == UG_F32 ? (float *)j->y + yi : ty;
    binary_block(a->op, a->alpha, mode, pa, pb, out, n);
    if (a->epi.post != UG_UNARY_COPY)
        unary_block(a->epi.post, 0.0f, 0.0f, out, out, n);
    if (dt != UG_F32)
        ug_cpu_store(j->y + yi * 2, dt, n, out);
}

static void binary_range(void *vjob, int64_t begin, int64_t end)
{
    bin_job *j = vjob;
    walk(&j->plan, begin, end, binary_piece, j);
}

ug_status ug_cpu_binary(ug_bdev *dev, const ug_binary_args *args)
{
    if (args->ndim < 1 || args->ndim > UG_KERNEL_MAX_DIMS || (int)args->op < 0 ||
        args->op >= UG_BINARY_COUNT)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu binary: bad op %d or ndim %d",
                            (int)args->op, args->ndim);
    if ((unsigned)args->epi.post >= UG_UNARY_COUNT)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu binary: fused activation %d is not a unary op",
                            (int)args->epi.post);
    if (!ug_cpu_float_dtype(args->y.dtype) || args->a.dtype != args->y.dtype ||
        args->b.dtype != args->y.dtype)
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu binary: dtypes %s, %s -> %s must be one of f32, f16, bf16",
                            ug_dtype_name(args->a.dtype), ug_dtype_name(args->b.dtype),
                            ug_dtype_name(args->y.dtype));
    bin_job j = {.args = args, .a = ug_cpu_ptr(args->a), .b = ug_cpu_ptr(args->b),
                 .y = ug_cpu_ptr(args->y)};
    plan_init(&j.plan, args->ndim, args->shape, 2, args->a_strides, args->b_strides);
    if (j.plan.numel <= 0)
        return UG_OK;
    ug_cpu_parallel_for(dev->workers, j.plan.numel, UG_CPU_MIN_PARALLEL, binary_range, &j);
    return UG_OK;
}
