/* Reductions of x viewed as [outer, len, inner]: y[o * inner + i] reduces
 * x[o, :, i]. One kernel per x dtype serves every shape:
 *
 * - a work-group is TX x TY items: TX along inner (adjacent items read
 *   adjacent addresses), TY along len, combined by a tree in local memory;
 * - when there are too few groups to fill the device, the host splits len
 *   into `splits` chunks (pass 0 writes f32 partials [outer, splits, inner]
 *   to scratch, with indices for ARGMAX), and pass 1 reduces the partials
 *   with the same kernel (stage 1: x = partials, xidx = their indices);
 * - each item sums its share pairwise (ug_pw) and the group combines by a
 *   tree, so no sum is serial over more than UG_PW_BLOCK terms.
 *
 * MAX and ARGMAX propagate NaN (a NaN is the maximum; ARGMAX gives the
 * first NaN); ARGMAX ties go to the smallest index. y is f32/f16/bf16 (ydt),
 * or for ARGMAX also i32; ARGMAX may compare its index (UG_MATCH_PARAMS). */

/* The equality test an epilogue folds into argmax (backend.h's
 * ug_epilogue): r, the index as a float, becomes 1 where it equals
 * match[k] (i32 or f32 as a float), 0 elsewhere; r as it is when match_on
 * is 0. */
#define UG_MATCH_PARAMS const global uchar *match, ulong match_off, int match_on, int match_dt
inline float ug_match(const global uchar *match, ulong match_off, int match_on, int match_dt, long k, float r)
{
    if (!match_on)
        return r;
    const float m = match_dt == UG_DT_I32 ? (float)((const global int *)match)[match_off + k]
                                          : ((const global float *)match)[match_off + k];
    return ug_epilogue_match(r, m);
}

/* Does (va, ia) beat (vb, ib) for ARGMAX? */
inline bool ug_argmax_better(float va, int ia, float vb, int ib)
{
    if (isnan(va))
        return !isnan(vb) || ia < ib;
    if (isnan(vb))
        return false;
    return va > vb || (va == vb && ia < ib);
}

#define UG_REDUCE_KERNEL(T)                                                                  \
    kernel void reduce_##T(global uchar *y, ulong yoff, int ydt, const global UG_T_##T *x,   \
                           ulong xoff, const global int *xidx, long len,                     \
                           long inner, long splits, long chunk, int op, int stage,           \
                           float count, global float *pv, global int *pi, UG_CHECK_PARAMS,   \
                           UG_SUM_PARAMS, UG_MATCH_PARAMS, int post)                         \
    {                                                                                        \
        local float lv[UG_WG];                                                               \
        local int li[UG_WG];                                                                 \
        const int tx = get_local_id(0), ty = get_local_id(1);                                \
        const int TX = get_local_size(0), TY = get_local_size(1);                            \
        const long i = get_global_id(0);                                                     \
        const long og = get_group_id(1);                                                     \
        const long o = og / splits;                                                          \
        const long l0 = (og - o * splits) * chunk;                                           \
        const long l1 = min(len, l0 + chunk);                                                \
        const bool active = i < inner;                                                       \
        float acc;                                                                           \
        int idx = INT_MAX;                                                                   \
        if (op == UG_R_MAX || op == UG_R_ARGMAX) {                                           \
            acc = -INFINITY;                                                                 \
            for (long l = l0 + ty; active && l < l1; l += TY) {                              \
                const long e = (o * len + l) * inner + i;                                    \
                const float v = UG_LD_##T(x, xoff + e);                                      \
                if (op == UG_R_MAX) {                                                        \
                    acc = ug_max_nan(acc, v);                                                \
                } else {                                                                     \
                    const int vi = stage ? xidx[e] : (int)l;                                 \
                    if (ug_argmax_better(v, vi, acc, idx)) {                                 \
                        acc = v;                                                             \
                        idx = vi;                                                            \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        } else {                                                                             \
            const bool square = op == UG_R_SUMSQ && stage == 0;                              \
            ug_pw pw;                                                                        \
            ug_pw_init(&pw);                                                                 \
            for (long l = l0 + ty; active && l < l1; l += TY) {                              \
                const float v = UG_LD_##T(x, xoff + (o * len + l) * inner + i);              \
                ug_pw_add(&pw, square ? v * v : v);                                          \
            }                                                                                \
            acc = ug_pw_total(&pw);                                                          \
        }                                                                                    \
        const int slot = ty * TX + tx;                                                       \
        lv[slot] = acc;                                                                      \
        li[slot] = idx;                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                        \
        for (int s = TY / 2; s > 0; s >>= 1) {                                               \
            if (ty < s) {                                                                    \
                const int other = slot + s * TX;                                             \
                if (op == UG_R_MAX) {                                                        \
                    lv[slot] = ug_max_nan(lv[slot], lv[other]);                              \
                } else if (op == UG_R_ARGMAX) {                                              \
                    if (ug_argmax_better(lv[other], li[other], lv[slot], li[slot])) {        \
                        lv[slot] = lv[other];                                                \
                        li[slot] = li[other];                                                \
                    }                                                                        \
                } else {                                                                     \
                    lv[slot] += lv[other];                                                   \
                }                                                                            \
            }                                                                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                                    \
        }                                                                                    \
        if (ty != 0 || !active)                                                              \
            return;                                                                          \
        acc = lv[tx];                                                                        \
        idx = li[tx];                                                                        \
        if (splits > 1) {                                                                    \
            pv[og * inner + i] = acc;                                                        \
            pi[og * inner + i] = idx;                                                        \
        } else if (op == UG_R_ARGMAX && ydt == UG_DT_I32) {                                  \
            ((global int *)y)[yoff + o * inner + i] = idx;                                   \
        } else if (op == UG_R_ARGMAX) { /* the index as a float, or whether it matches */    \
            ug_store_dt(y, (long)yoff + o * inner + i, ydt,                                  \
                        ug_match(match, match_off, match_on, match_dt, o * inner + i, (float)idx)); \
        } else {                                                                             \
            const float r = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post,                     \
                                              op == UG_R_MEAN ? acc / count : acc);          \
            ug_check_flag(check, check_off, check_on, ug_nonfinite(r));                      \
            ug_store_dt(y, (long)yoff + o * inner + i, ydt, r);                              \
            ug_sum_add(sum, sum_off, sum_on, sum_alpha, o * inner + i, r);                   \
        }                                                                                    \
    }

UG_REDUCE_KERNEL(f32)
UG_REDUCE_KERNEL(f16)
UG_REDUCE_KERNEL(bf16)

/* Rows of f32 (inner == 1) on CPU devices (POCL): the kernel above puts a
 * row's terms along the group's second axis, which POCL's vectoriser
 * leaves alone (a gradient check's sum of 392000 values took 190 us).
 * Here each item takes a contiguous piece of its group's part of the row
 * and sums it in eight float lanes (vload8: SIMD without reassociating
 * one sum), then the group combines the items by a tree. With splits > 1
 * the groups' partials go to pv for the kernel above to finish (stage 1).
 * SUM, MEAN, SUMSQ and MAX; ARGMAX stays with the kernel above. */
kernel void reduce_rows_f32(global uchar *y, ulong yoff, int ydt, const global float *x, ulong xoff,
                            long len, long splits, long chunk, int op, float count,
                            global float *pv, UG_CHECK_PARAMS, UG_SUM_PARAMS, int post)
{
    local float lv[UG_WG];
    const int t = get_local_id(0), T = get_local_size(0);
    const long og = get_group_id(0), o = og / splits;
    const long l0 = (og - o * splits) * chunk, l1 = min(len, l0 + chunk);
    const long per = (l1 - l0 + T - 1) / T;
    const long begin = min(l1, l0 + t * per), end = min(l1, begin + per);
    const global float *row = x + xoff + o * len;
    const bool max = op == UG_R_MAX, square = op == UG_R_SUMSQ;
    float8 lanes = max ? (float8)(-INFINITY) : (float8)(0.0f);
    long l = begin;
    /* One loop per op: choosing per element, a gradient check's sum of
     * 392000 values took 35-40 us, against 26-30. */
    if (max)
        for (; l + 8 <= end; l += 8) {
            const float8 v = vload8(0, row + l);
            lanes = select(v, lanes, (lanes > v) || isnan(lanes));
        }
    else if (square)
        for (; l + 8 <= end; l += 8) {
            const float8 v = vload8(0, row + l);
            lanes = lanes + v * v;
        }
    else
        for (; l + 8 <= end; l += 8)
            lanes = lanes + vload8(0, row + l);
    float acc = max ? ug_max_nan(ug_max_nan(ug_max_nan(lanes.s0, lanes.s1), ug_max_nan(lanes.s2, lanes.s3)),
                                 ug_max_nan(ug_max_nan(lanes.s4, lanes.s5), ug_max_nan(lanes.s6, lanes.s7)))
                    : ((lanes.s0 + lanes.s1) + (lanes.s2 + lanes.s3)) +
                          ((lanes.s4 + lanes.s5) + (lanes.s6 + lanes.s7));
    for (; l < end; l++) {
        const float v = row[l];
        acc = max ? ug_max_nan(acc, v) : acc + (square ? v * v : v);
    }
    acc = max ? ug_wg_max(lv, acc) : ug_wg_sum(lv, acc);
    if (t != 0)
        return;
    if (splits > 1) {
        pv[og] = acc;
        return;
    }
    const float r = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, op == UG_R_MEAN ? acc / count : acc);
    ug_check_flag(check, check_off, check_on, ug_nonfinite(r));
    ug_store_dt(y, (long)yoff + o, ydt, r);
    ug_sum_add(sum, sum_off, sum_on, sum_alpha, o, r);
}

/* Columns of f32 (inner >= 16, len at most 1024: reduce.c) on CPU devices:
 * each item sums (or maxes) 16 adjacent columns of one outer slice down
 * len as one float16, a serial sum per column of at most 1024 terms.
 * The last vector of a slice moves back inside it
 * and stores only the columns the one before left. A bias gradient's sum
 * of 64 x 500 took 20-22 us through the kernel above with one item a
 * column: POCL does not vectorize across items around an inner loop.
 * SUM, MEAN, SUMSQ and MAX. */
kernel void reduce_cols_f32(global uchar *y, ulong yoff, int ydt, const global float *x, ulong xoff,
                            long outer, long len, long inner, int op, float count,
                            UG_CHECK_PARAMS, UG_SUM_PARAMS, int post)
{
    const long per = (inner + 15) / 16, item = get_global_id(0);
    if (item >= outer * per) /* the launch's rounding */
        return;
    const long o = item / per, first = (item - o * per) * 16;
    const long i0 = min(first, inner - 16);
    const global float *col = x + xoff + o * len * inner + i0;
    float16 acc;
    if (op == UG_R_MAX) {
        acc = (float16)(-INFINITY);
        for (long l = 0; l < len; l++) {
            const float16 v = vload16(0, col + l * inner);
            acc = select(v, acc, (acc > v) || isnan(acc));
        }
    } else if (op == UG_R_SUMSQ) {
        acc = (float16)(0.0f);
        for (long l = 0; l < len; l++) {
            const float16 v = vload16(0, col + l * inner);
            acc = acc + v * v;
        }
    } else {
        acc = (float16)(0.0f);
        for (long l = 0; l < len; l++)
            acc = acc + vload16(0, col + l * inner);
    }
    if (op == UG_R_MEAN)
        acc = acc / count;
    float out[16];
    vstore16(acc, 0, out);
    bool bad = false;
    for (int j = (int)(first - i0); j < 16; j++) {
        out[j] = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, post, out[j]);
        bad |= ug_nonfinite(out[j]);
        ug_store_dt(y, (long)yoff + o * inner + i0 + j, ydt, out[j]);
        ug_sum_add(sum, sum_off, sum_on, sum_alpha, o * inner + i0 + j, out[j]);
    }
    ug_check_flag(check, check_off, check_on, bad);
}
