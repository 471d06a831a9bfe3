/* Reductions of x viewed as [outer, len, inner] into y[outer * inner].
 *
 * Accuracy: sums are pairwise. len is cut into fixed blocks (never
 * depending on the thread count, so results are the same for any
 * UG_NUM_THREADS); each block is summed by halving recursion down to small
 * leaves, and the block partials are combined pairwise again. A leaf sums
 * up to 1024 contiguous values in 16 or so interleaved lanes, or 32 rows of
 * a wide column tile, so the error grows with log(len), not len: 2^24 ones
 * sum to exactly 16777216.
 *
 * Work units: with inner == 1 a unit is one block of one row (vectorised
 * along len); with inner > 1 it is one block of rows of a tile of up to 64
 * neighbouring columns (vectorised across the tile). Units run in parallel,
 * so one long row (a full reduction) is split across threads as well.
 *
 * NaN: MAX and ARGMAX propagate NaN like torch.max/argmax: a row holding a
 * NaN has max NaN and argmax the index of its first NaN. Otherwise ARGMAX is
 * the first index of the maximum. */
#include <math.h>
#include <stdlib.h>

#include "base/fault.h"
#include "backends/cpu/internal.h"

enum { RED_W = 64, LEAF = 1024, LEAF_ROWS = 32, BLOCK_ELEMS = 65536, LANES = 16 };

typedef struct red_job {
    ug_reduce_kind op;
    const char *x;
    ug_dtype xt;
    char *y;
    ug_dtype yt;
    int64_t outer, len, inner;
    int64_t tiles, tw;   /* column tiles per outer index, tile width */
    int64_t brows, nblk; /* positions along len per block, blocks */
    float *part;         /* [pair][blk][tw] partials when nblk > 1 */
    int64_t *pidx;       /* same, argmax indices */
    ug_epilogue epi;     /* its match, check and sum (backend.h) */
} red_job;

static bool is_sum(ug_reduce_kind op)
{
    return op == UG_RKERNEL_SUM || op == UG_RKERNEL_MEAN || op == UG_RKERNEL_SUMSQ;
}

/* ---- inner == 1: contiguous rows ---- */

UG_CPU_WIDE
static float lanes_sum(const float *p, int64_t n, bool sq)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    if (sq) {
        for (; i + LANES <= n; i += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += p[i + k] * p[i + k];
        for (; i < n; i++)
            acc[i % LANES] += p[i] * p[i];
    } else {
        for (; i + LANES <= n; i += LANES)
            for (int k = 0; k < LANES; k++)
                acc[k] += p[i + k];
        for (; i < n; i++)
            acc[i % LANES] += p[i];
    }
    for (int s = LANES / 2; s > 0; s /= 2)
        for (int k = 0; k < s; k++)
            acc[k] += acc[k + s];
    return acc[0];
}

/* n elements of row from c0 as f32: in place for f32, else converted
 * (2-byte dtypes) into buf. */
static const float *leaf(const red_job *j, const char *row, int64_t c0, int64_t n, float *buf)
{
    if (j->xt == UG_F32)
        return (const float *)row + c0;
    ug_cpu_load(row + c0 * 2, j->xt, 1, n, buf);
    return buf;
}

UG_CPU_WIDE
static float row_sum(const red_job *j, const char *row, int64_t l0, int64_t l1)
{
    int64_t n = l1 - l0;
    if (n > LEAF) {
        int64_t mid = l0 + n / 2;
        return row_sum(j, row, l0, mid) + row_sum(j, row, mid, l1);
    }
    float buf[LEAF];
    const float *p = leaf(j, row, l0, n, buf);
    return lanes_sum(p, n, j->op == UG_RKERNEL_SUMSQ);
}

/* NaN-sticky max: once a lane holds NaN, v > NaN is false and it stays. */
UG_CPU_WIDE
static float row_max(const red_job *j, const char *row, int64_t l0, int64_t l1)
{
    float m[LANES];
    for (int k = 0; k < LANES; k++)
        m[k] = -INFINITY;
    float buf[LEAF];
    for (int64_t c0 = l0; c0 < l1; c0 += LEAF) {
        int64_t n = l1 - c0 < LEAF ? l1 - c0 : LEAF;
        const float *p = leaf(j, row, c0, n, buf);
        int64_t i = 0;
        for (; i + LANES <= n; i += LANES)
            for (int k = 0; k < LANES; k++) {
                float v = p[i + k];
                m[k] = (v > m[k] || v != v) ? v : m[k];
            }
        for (; i < n; i++) {
            float v = p[i];
            m[0] = (v > m[0] || v != v) ? v : m[0];
        }
    }
    float r = m[0];
    for (int k = 1; k < LANES; k++)
        r = (m[k] > r || m[k] != m[k]) ? m[k] : r;
    return r;
}

UG_CPU_WIDE
static float row_argmax(const red_job *j, const char *row, int64_t l0, int64_t l1, int64_t *idx)
{
    float best = -INFINITY;
    int64_t bi = l0;
    float buf[LEAF];
    for (int64_t c0 = l0; c0 < l1; c0 += LEAF) {
        int64_t n = l1 - c0 < LEAF ? l1 - c0 : LEAF;
        const float *p = leaf(j, row, c0, n, buf);
        for (int64_t i = 0; i < n; i++) {
            if (p[i] != p[i]) {
                *idx = c0 + i;
                return p[i];
            }
            if (p[i] > best) {
                best = p[i];
                bi = c0 + i;
            }
        }
    }
    *idx = bi;
    return best;
}

/* ---- inner > 1: a tile of w columns, rows inner apart ---- */

static const float *tile_row(const red_job *j, const char *base, int64_t l, int64_t w,
                             float *buf)
{
    if (j->xt == UG_F32)
        return (const float *)base + l * j->inner;
    ug_cpu_load(base + l * j->inner * 2, j->xt, 1, w, buf);
    return buf;
}

/* Few narrow columns (inner <= LANES): the rows are one contiguous run, so
 * sum it in L interleaved lanes, L a multiple of w; lane k holds column
 * k % w. Far fewer loop trips than row by row. */
UG_CPU_WIDE
static void narrow_sum(const float *p, int64_t n, int64_t w, bool sq, float *out)
{
    float acc[2 * LANES] = {0};
    int64_t lanes = w * ((LANES + w - 1) / w), i = 0;
    if (sq) {
        for (; i + lanes <= n; i += lanes)
            for (int64_t k = 0; k < lanes; k++)
                acc[k] += p[i + k] * p[i + k];
    } else {
        for (; i + lanes <= n; i += lanes)
            for (int64_t k = 0; k < lanes; k++)
                acc[k] += p[i + k];
    }
    for (int64_t k = 0; i + k < n; k++) /* whole rows remain: column k % w */
        acc[k] += sq ? p[i + k] * p[i + k] : p[i + k];
    for (int64_t c = 0; c < w; c++)
        out[c] = 0.0f;
    for (int64_t k = 0; k < lanes; k++)
        out[k % w] += acc[k];
}

static bool narrow(const red_job *j, int64_t w) { return w == j->inner && w <= LANES; }

UG_CPU_WIDE
static void col_sum(const red_job *j, const char *base, int64_t l0, int64_t l1, int64_t w,
                    float *out)
{
    int64_t n = l1 - l0;
    /* Leaves of about LEAF values when narrow, else LEAF_ROWS rows. */
    int64_t leaf_rows = narrow(j, w) ? LEAF / w : LEAF_ROWS;
    if (n > leaf_rows) {
        int64_t mid = l0 + n / 2;
        float tmp[RED_W];
        col_sum(j, base, l0, mid, w, out);
        col_sum(j, base, mid, l1, w, tmp);
        for (int64_t c = 0; c < w; c++)
            out[c] += tmp[c];
        return;
    }
    bool sq = j->op == UG_RKERNEL_SUMSQ;
    if (narrow(j, w)) {
        float flat[LEAF];
        const float *p = flat;
        if (j->xt == UG_F32)
            p = (const float *)base + l0 * w;
        else
            ug_cpu_load(base + l0 * w * 2, j->xt, 1, n * w, flat);
        narrow_sum(p, n * w, w, sq, out);
        return;
    }
    float buf[RED_W];
    for (int64_t c = 0; c < w; c++)
        out[c] = 0.0f;
    for (int64_t l = l0; l < l1; l++) {
        const float *r = tile_row(j, base, l, w, buf);
        if (sq)
            for (int64_t c = 0; c < w; c++)
                out[c] += r[c] * r[c];
        else
            for (int64_t c = 0; c < w; c++)
                out[c] += r[c];
    }
}

UG_CPU_WIDE
static void col_max(const red_job *j, const char *base, int64_t l0, int64_t l1, int64_t w,
                    float *out, int64_t *idx)
{
    float buf[RED_W];
    const float *r = tile_row(j, base, l0, w, buf);
    for (int64_t c = 0; c < w; c++) {
        out[c] = r[c];
        idx[c] = l0;
    }
    for (int64_t l = l0 + 1; l < l1; l++) {
        r = tile_row(j, base, l, w, buf);
        if (j->op == UG_RKERNEL_MAX) {
            for (int64_t c = 0; c < w; c++)
                out[c] = (r[c] > out[c] || r[c] != r[c]) ? r[c] : out[c];
        } else {
            /* Replace on greater, or on the first NaN (a NaN best stays). */
            for (int64_t c = 0; c < w; c++)
                if (r[c] > out[c] || (r[c] != r[c] && out[c] == out[c])) {
                    out[c] = r[c];
                    idx[c] = l;
                }
        }
    }
}

/* ---- units, combination, output ---- */

static void write_out(const red_job *j, int64_t pos, int64_t w, const float *val,
                      const int64_t *idx)
{
    if (j->op == UG_RKERNEL_ARGMAX && j->yt == UG_I32) {
        int32_t *y = (int32_t *)j->y + pos;
        for (int64_t c = 0; c < w; c++)
            y[c] = (int32_t)idx[c];
        return;
    }
    float tmp[RED_W]; /* argmax: the index as a float, or whether it matches */
    for (int64_t c = 0; c < w; c++)
        tmp[c] = j->op == UG_RKERNEL_ARGMAX ? (float)idx[c]
                 : j->op == UG_RKERNEL_MEAN ? val[c] / (float)j->len
                                            : val[c];
    ug_cpu_epilogue(&j->epi, tmp, pos, w); /* each position is one thread's */
    ug_cpu_store(j->y + pos * (int64_t)ug_dtype_size(j->yt), j->yt, w, tmp);
}

static void unit_geometry(const red_job *j, int64_t pair, int64_t *o, int64_t *i0, int64_t *w)
{
    *o = pair / j->tiles;
    *i0 = pair % j->tiles * j->tw;
    *w = j->inner - *i0 < j->tw ? j->inner - *i0 : j->tw;
}

static void run_unit(const red_job *j, int64_t u)
{
    int64_t pair = u / j->nblk, blk = u % j->nblk, o, i0, w;
    unit_geometry(j, pair, &o, &i0, &w);
    int64_t l0 = blk * j->brows;
    int64_t l1 = l0 + j->brows < j->len ? l0 + j->brows : j->len;
    float val[RED_W];
    int64_t idx[RED_W] = {0};
    size_t es = ug_dtype_size(j->xt);
    const char *base = j->x + (o * j->len * j->inner + i0) * (int64_t)es;
    if (j->inner == 1) {
        if (is_sum(j->op))
            val[0] = row_sum(j, base, l0, l1);
        else if (j->op == UG_RKERNEL_MAX)
            val[0] = row_max(j, base, l0, l1);
        else
            val[0] = row_argmax(j, base, l0, l1, &idx[0]);
    } else if (is_sum(j->op)) {
        col_sum(j, base, l0, l1, w, val);
    } else {
        col_max(j, base, l0, l1, w, val, idx);
    }
    if (j->nblk == 1) {
        write_out(j, o * j->inner + i0, w, val, idx);
        return;
    }
    float *pv = j->part + u * j->tw;
    for (int64_t c = 0; c < w; c++)
        pv[c] = val[c];
    if (j->pidx)
        for (int64_t c = 0; c < w; c++)
            j->pidx[u * j->tw + c] = idx[c];
}

static void units_range(void *vjob, int64_t begin, int64_t end)
{
    for (int64_t u = begin; u < end; u++)
        run_unit(vjob, u);
}

/* Pairwise sum of the partials of blocks [b0, b1) of one pair into out. */
UG_CPU_WIDE
static void combine_sum(const red_job *j, int64_t pair, int64_t b0, int64_t b1, int64_t w,
                        float *out)
{
    if (b1 - b0 == 1) {
        const float *p = j->part + (pair * j->nblk + b0) * j->tw;
        for (int64_t c = 0; c < w; c++)
            out[c] = p[c];
        return;
    }
    int64_t mid = b0 + (b1 - b0) / 2;
    float tmp[RED_W];
    combine_sum(j, pair, b0, mid, w, out);
    combine_sum(j, pair, mid, b1, w, tmp);
    for (int64_t c = 0; c < w; c++)
        out[c] += tmp[c];
}

static void combine_range(void *vjob, int64_t begin, int64_t end)
{
    const red_job *j = vjob;
    for (int64_t pair = begin; pair < end; pair++) {
        int64_t o, i0, w;
        unit_geometry(j, pair, &o, &i0, &w);
        float val[RED_W];
        int64_t idx[RED_W] = {0};
        if (is_sum(j->op)) {
            combine_sum(j, pair, 0, j->nblk, w, val);
        } else {
            /* In block order: an earlier block wins ties and keeps its NaN. */
            for (int64_t b = 0; b < j->nblk; b++) {
                const float *p = j->part + (pair * j->nblk + b) * j->tw;
                const int64_t *pi = j->pidx ? j->pidx + (pair * j->nblk + b) * j->tw : NULL;
                for (int64_t c = 0; c < w; c++) {
                    bool take = b == 0 || (val[c] == val[c] && (p[c] > val[c] || p[c] != p[c]));
                    if (take) {
                        val[c] = p[c];
                        if (pi)
                            idx[c] = pi[c];
                    }
                }
            }
        }
        write_out(j, o * j->inner + i0, w, val, idx);
    }
}

ug_status ug_cpu_reduce(ug_bdev *dev, const ug_reduce_args *args)
{
    if ((int)args->op < 0 || args->op > UG_RKERNEL_SUMSQ)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu reduce: bad op %d", (int)args->op);
    if (!ug_cpu_float_dtype(args->x.dtype) ||
        !(ug_cpu_float_dtype(args->y.dtype) || (args->op == UG_RKERNEL_ARGMAX && args->y.dtype == UG_I32)))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu reduce: dtypes %s -> %s not supported",
                            ug_dtype_name(args->x.dtype), ug_dtype_name(args->y.dtype));
    const ug_epilogue *e = &args->epi;
    if (e->check.mem && (e->check.dtype != UG_F32 || args->y.dtype != UG_F32))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu reduce: a check needs f32 results and an f32 flag");
    if (e->sum.mem && (e->sum.dtype != UG_F32 || args->y.dtype != UG_F32 || args->op == UG_RKERNEL_ARGMAX))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu reduce: a running sum needs f32 results, an f32 sum and no argmax");
    if (e->match.mem && (args->op != UG_RKERNEL_ARGMAX || args->y.dtype != UG_F32 ||
                         (e->match.dtype != UG_F32 && e->match.dtype != UG_I32)))
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu reduce: a comparison needs argmax, f32 results and i32 or f32 values");
    if (args->outer <= 0 || args->inner <= 0)
        return UG_OK;
    if (args->len < 1)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu reduce: len %lld < 1",
                            (long long)args->len);
    red_job j = {.op = args->op, .x = ug_cpu_ptr(args->x), .xt = args->x.dtype,
                 .y = ug_cpu_ptr(args->y), .yt = args->y.dtype, .outer = args->outer,
                 .len = args->len, .inner = args->inner, .epi = *e};
    j.tw = j.inner == 1 ? 1 : RED_W;
    j.tiles = (j.inner + j.tw - 1) / j.tw;
    /* Blocks of about BLOCK_ELEMS values, fixed by the shape alone. */
    j.brows = BLOCK_ELEMS / (j.inner < RED_W ? j.inner : RED_W);
    j.nblk = (j.len + j.brows - 1) / j.brows;
    int64_t pairs = j.outer * j.tiles, units = pairs * j.nblk;
    if (j.nblk > 1) {
        j.part = ug_malloc((size_t)units * (size_t)j.tw * sizeof *j.part);
        if (j.op == UG_RKERNEL_ARGMAX)
            j.pidx = ug_malloc((size_t)units * (size_t)j.tw * sizeof *j.pidx);
        if (!j.part || (j.op == UG_RKERNEL_ARGMAX && !j.pidx)) {
            free(j.part);
            free(j.pidx);
            return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY,
                                "cpu reduce: out of host memory for %lld partial results",
                                (long long)(units * j.tw));
        }
    }
    int64_t rows = j.len < j.brows ? j.len : j.brows;
    int64_t cols = j.inner < j.tw ? j.inner : j.tw;
    ug_cpu_parallel_for(dev->workers, units, UG_CPU_MIN_PARALLEL / (rows * cols) + 1, units_range, &j);
    if (j.nblk > 1)
        ug_cpu_parallel_for(dev->workers, pairs, UG_CPU_MIN_PARALLEL / (j.nblk * cols) + 1,
                            combine_range, &j);
    free(j.part);
    free(j.pidx);
    return UG_OK;
}
