/* Reductions of x viewed as [outer, len, inner] over len: what a block of
 * the reduce kernel (reduce.h) does, shared with the kernels whose last
 * block finishes with a reduction of what the others wrote (the
 * cross-entropy's mean, rowwise.h), so that both give the same bits.
 * How the work is cut into blocks and splits: backends/hip/reduce.hip
 * (ug_hip_reduce_plan). */
#ifndef UG_HIP_REDUCE_BLOCK_H
#define UG_HIP_REDUCE_BLOCK_H

#include "kernels/hip/common.h"

enum { R_SUM = 0, R_MAX, R_ARGMAX };

typedef struct reduce_k {
    int kind;            /* R_* */
    bool square;         /* SUMSQ, first pass */
    bool partial;        /* write f32 partials (and indices), not y */
    bool mean;           /* divide the result by count */
    float count;
    const char *x;
    int xt;
    const int32_t *xi;   /* argmax: indices from a partial pass, NULL on the first */
    char *y;             /* y (final) or f32 partials */
    int yt;
    int32_t *yi;         /* argmax partial indices */
    float *check;        /* a numeric check of the results, NULL: none */
    float *sum;          /* a running sum: sum += sum_alpha * y; NULL: none */
    float sum_alpha;
    const char *match;   /* argmax: y = (index == match), i32 or f32 (mt); NULL: none */
    int mt;
    int post;            /* the epilogue's post-op on the final results (UG_UNARY_COPY: none) */
    int64_t outer, len, inner, chunk, splits;
} reduce_k;

/* Is (v, vi) a better argmax candidate than (a, ai)? Index -1: none. */
UG_DEV bool ug_arg_better(float v, int32_t vi, float a, int32_t ai)
{
    if (vi < 0)
        return false;
    if (ai < 0)
        return true;
    if (ug_isnan(a))
        return ug_isnan(v) && vi < ai;
    if (ug_isnan(v))
        return true;
    return v > a || (v == a && vi < ai);
}

/* A block's share of a reduction: the block is bx x by threads, (tx, ty)
 * this one; it takes split s of len, for outer rows from o0 and column
 * blocks from cb0, in steps of o_step and cb_step (the reduce kernel's
 * grid; a kernel whose last block takes the whole reduction passes one
 * block's). */
UG_DEV void ug_reduce_block(const reduce_k &k, int tx, int ty, int bx, int by, int64_t s, int64_t o0,
                            int64_t o_step, int64_t cb0, int64_t cb_step)
{
    __shared__ float sv[UG_HIP_BLOCK];
    __shared__ int32_t si[UG_HIP_BLOCK];
    const int t = ty * bx + tx;
    const int64_t j0 = s * k.chunk, j1 = j0 + k.chunk < k.len ? j0 + k.chunk : k.len;
    const int64_t col_blocks = (k.inner + bx - 1) / bx;
    for (int64_t o = o0; o < k.outer; o += o_step) {
        for (int64_t cb = cb0; cb < col_blocks; cb += cb_step) {
            const int64_t i = cb * bx + tx;
            float acc = k.kind == R_SUM ? 0.0f : -INFINITY, comp = 0.0f;
            int32_t idx = -1;
            if (i < k.inner) {
                const int64_t base = o * k.len * k.inner + i;
                for (int64_t j = j0 + ty; j < j1; j += by) {
                    const int64_t at = base + j * k.inner;
                    float v = ug_ld(k.x, k.xt, at);
                    if (k.kind == R_SUM) {
                        if (k.square)
                            v *= v;
                        const float yv = v - comp, tt = acc + yv; /* Kahan */
                        /* Past an infinity the compensation would be
                         * inf - inf: the sum stays infinite, not NaN. */
                        comp = isfinite(tt) ? (tt - acc) - yv : 0.0f;
                        acc = tt;
                    } else if (k.kind == R_MAX) {
                        acc = ug_max_nan(acc, v);
                    } else {
                        const int32_t vi = k.xi ? k.xi[at] : (int32_t)j;
                        if (ug_arg_better(v, vi, acc, idx)) {
                            acc = v;
                            idx = vi;
                        }
                    }
                }
            }
            sv[t] = acc;
            si[t] = idx;
            __syncthreads();
            for (int h = by / 2; h > 0; h >>= 1) {
                if (ty < h) {
                    const int u = t + h * bx;
                    if (k.kind == R_SUM) {
                        sv[t] += sv[u];
                    } else if (k.kind == R_MAX) {
                        sv[t] = ug_max_nan(sv[t], sv[u]);
                    } else if (ug_arg_better(sv[u], si[u], sv[t], si[t])) {
                        sv[t] = sv[u];
                        si[t] = si[u];
                    }
                }
                __syncthreads();
            }
            if (ty == 0 && i < k.inner) {
                const float r = sv[tx];
                if (k.partial) {
                    const int64_t at = (o * k.splits + s) * k.inner + i;
                    ((float *)k.y)[at] = r;
                    if (k.yi)
                        k.yi[at] = si[tx];
                } else if (k.kind == R_ARGMAX && k.yt == UG_I32) {
                    ((int32_t *)k.y)[o * k.inner + i] = si[tx];
                } else if (k.kind == R_ARGMAX) { /* the index as a float, or whether it matches */
                    const int64_t at = o * k.inner + i;
                    float r = (float)si[tx];
                    if (k.match)
                        r = ug_epilogue_match(r, k.mt == UG_I32 ? (float)((const int32_t *)k.match)[at]
                                                                : ((const float *)k.match)[at]);
                    ug_st(k.y, k.yt, at, r);
                } else {
                    const float y = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, k.post, k.mean ? r / k.count : r);
                    ug_check_flag(k.check, ug_nonfinite(y));
                    ug_st(k.y, k.yt, o * k.inner + i, y);
                    if (k.sum)
                        k.sum[o * k.inner + i] += k.sum_alpha * y;
                }
            }
            __syncthreads();
        }
    }
}

#endif
