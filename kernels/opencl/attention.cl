/* The attention family (backend.h): one item per query row (the forward
 * pass, and delta and dq), or per key row (dk and dv), each looping over
 * the other side's rows with the row's values in private memory; the
 * online softmax keeps nothing of size q_len x kv_len. A kernel per dtype
 * T of q, k, v, o, the mask and the gradients; lse and delta are f32.
 *
 * CPU devices (POCL) take the *_blocks kernels instead: an item takes
 * UG_AR rows of one head, held transposed ([d][UG_AR]), so every inner
 * loop runs across the rows with one value of the other side broadcast
 * and vectorises (one item per row kept POCL scalar: attention was 52 of
 * the GPT step's 135 ms). Work-groups of one item, as many as blocks. */

#define UG_ATTENTION_PARAMS                                                                           \
    long batch_heads, long heads, long q_len, long kv_len, long d, float scale, int causal,           \
        int has_mask, long ms0, long ms1, long ms2, long ms3, long q_b, long q_h, long q_r,           \
        long k_b, long k_h, long k_r, long v_b, long v_h, long v_r, long o_b, long o_h, long o_r,     \
        float dropout, float keep, ulong seed, ulong offset, const global float *runs,                \
        ulong runs_off, int has_runs

/* Dropout's factor for the probability of query i and key j of head bh
 * (backend.h's counters): 1 without dropout. */
#define UG_ATTENTION_KEEP(bh, i, j)                                                                   \
    (dropout > 0.0f ? ug_dropout_keep(seed,                                                           \
                                      offset + (has_runs ? (ulong)runs[runs_off] << UG_RANDOM_RUN_SHIFT : 0) + \
                                          (ulong)(((bh) * q_len + (i)) * kv_len + (j)),               \
                                      dropout, keep)                                                  \
                    : 1.0f)

/* Where head bh's rows of operand P start (backend.h's ug_attention_layout:
 * P_b, P_h, P_r); dq, dk, dv and dout take the layouts of q, k, v and o.
 * Computed once per item: a division in a conditional load is not hoisted
 * out of a loop (it could trap), and per element it took a third of the
 * POCL backward pass. */
#define UG_HEAD(P, bh) ((bh) / heads * P##_b + (bh) % heads * P##_h)
#define UG_HEADS_OF(bh)                                                                               \
    const long q_head = UG_HEAD(q, bh), k_head = UG_HEAD(k, bh), v_head = UG_HEAD(v, bh),             \
               o_head = UG_HEAD(o, bh), mask_head = (bh) / heads * ms0 + (bh) % heads * ms1

/* scale * q . k (already scaled dot) plus the mask (the head's at mask_head,
 * UG_HEADS_OF); -inf where causal hides j. */
#define UG_ATTENTION_SCORE(T, dotv, i, j)                                                             \
    (causal && (j) > (i) ? -INFINITY                                                                  \
                         : (dotv) * scale +                                                           \
                               (has_mask ? UG_LD_##T(mask, mask_off + mask_head + (i) * ms2 + (j) * ms3) : 0.0f))

#define UG_ATTENTION_KERNELS(T)                                                                       \
    kernel void attention_fwd_##T(global UG_T_##T *o, ulong o_off, global float *lse, ulong lse_off,  \
                                  const global UG_T_##T *q, ulong q_off, const global UG_T_##T *k,    \
                                  ulong k_off, const global UG_T_##T *v, ulong v_off,                 \
                                  const global UG_T_##T *mask, ulong mask_off, UG_ATTENTION_PARAMS)   \
    {                                                                                                 \
        const long row = get_global_id(0);                                                            \
        if (row >= batch_heads * q_len)                                                               \
            return;                                                                                   \
        const long bh = row / q_len, i = row % q_len;                                                 \
        UG_HEADS_OF(bh);                                                                              \
        const global UG_T_##T *qi = q + q_off + q_head + i * q_r;                                     \
        const global UG_T_##T *kh = k + k_off + k_head, *vh = v + v_off + v_head;                     \
        float qr[UG_ATTENTION_MAX_D], acc[UG_ATTENTION_MAX_D];                                        \
        for (long c = 0; c < d; c++) {                                                                \
            qr[c] = UG_LD_##T(qi, c);                                                                 \
            acc[c] = 0.0f;                                                                            \
        }                                                                                             \
        float m = -INFINITY, l = 0.0f;                                                                \
        const long keys = causal && i + 1 < kv_len ? i + 1 : kv_len;                                  \
        for (long j = 0; j < keys; j++) {                                                             \
            float dotv = 0.0f;                                                                        \
            for (long c = 0; c < d; c++)                                                              \
                dotv += qr[c] * UG_LD_##T(kh, j * k_r + c);                                           \
            const float s = UG_ATTENTION_SCORE(T, dotv, i, j);                                        \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float next = fmax(m, s), correction = exp(m - next), p = exp(s - next);             \
            const float kept = p * UG_ATTENTION_KEEP(bh, i, j);                                       \
            l = l * correction + p;                                                                   \
            for (long c = 0; c < d; c++)                                                              \
                acc[c] = acc[c] * correction + kept * UG_LD_##T(vh, j * v_r + c);                     \
            m = next;                                                                                 \
        }                                                                                             \
        const float inv = 1.0f / l;                                                                   \
        for (long c = 0; c < d; c++)                                                                  \
            UG_ST_##T(o, o_off + o_head + i * o_r + c, acc[c] * inv);                                 \
        lse[lse_off + row] = m + log(l);                                                              \
    }                                                                                                 \
    kernel void attention_dq_##T(global UG_T_##T *dq, ulong dq_off, global float *delta,              \
                                 ulong delta_off, const global UG_T_##T *dout, ulong dout_off,        \
                                 const global UG_T_##T *o, ulong o_off, const global float *lse,      \
                                 ulong lse_off, const global UG_T_##T *q, ulong q_off,                \
                                 const global UG_T_##T *k, ulong k_off, const global UG_T_##T *v,     \
                                 ulong v_off, const global UG_T_##T *mask, ulong mask_off,            \
                                 UG_ATTENTION_PARAMS)                                                 \
    {                                                                                                 \
        const long row = get_global_id(0);                                                            \
        if (row >= batch_heads * q_len)                                                               \
            return;                                                                                   \
        const long bh = row / q_len, i = row % q_len;                                                 \
        UG_HEADS_OF(bh);                                                                              \
        const global UG_T_##T *kh = k + k_off + k_head, *vh = v + v_off + v_head;                     \
        float qr[UG_ATTENTION_MAX_D], gr[UG_ATTENTION_MAX_D], acc[UG_ATTENTION_MAX_D];                \
        float di = 0.0f;                                                                              \
        for (long c = 0; c < d; c++) {                                                                \
            qr[c] = UG_LD_##T(q + q_off + q_head + i * q_r, c);                                       \
            gr[c] = UG_LD_##T(dout + dout_off + o_head + i * o_r, c);                                 \
            di += gr[c] * UG_LD_##T(o + o_off + o_head + i * o_r, c);                                 \
            acc[c] = 0.0f;                                                                            \
        }                                                                                             \
        delta[delta_off + row] = di;                                                                  \
        const float li = lse[lse_off + row];                                                          \
        const long keys = causal && i + 1 < kv_len ? i + 1 : kv_len;                                  \
        for (long j = 0; j < keys; j++) {                                                             \
            float dotv = 0.0f, dp = 0.0f;                                                             \
            for (long c = 0; c < d; c++) {                                                            \
                dotv += qr[c] * UG_LD_##T(kh, j * k_r + c);                                           \
                dp += gr[c] * UG_LD_##T(vh, j * v_r + c);                                             \
            }                                                                                         \
            const float s = UG_ATTENTION_SCORE(T, dotv, i, j);                                        \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float ds = exp(s - li) * (UG_ATTENTION_KEEP(bh, i, j) * dp - di) * scale;           \
            for (long c = 0; c < d; c++)                                                              \
                acc[c] += ds * UG_LD_##T(kh, j * k_r + c);                                            \
        }                                                                                             \
        for (long c = 0; c < d; c++)                                                                  \
            UG_ST_##T(dq, dq_off + q_head + i * q_r + c, acc[c]);                                     \
    }                                                                                                 \
    kernel void attention_dkv_##T(global UG_T_##T *dk, ulong dk_off, global UG_T_##T *dv,             \
                                  ulong dv_off, const global float *delta, ulong delta_off,           \
                                  const global UG_T_##T *dout, ulong dout_off,                        \
                                  const global float *lse, ulong lse_off,                             \
                                  const global UG_T_##T *q, ulong q_off, const global UG_T_##T *k,    \
                                  ulong k_off, const global UG_T_##T *v, ulong v_off,                 \
                                  const global UG_T_##T *mask, ulong mask_off, UG_ATTENTION_PARAMS)   \
    {                                                                                                 \
        const long row = get_global_id(0);                                                            \
        if (row >= batch_heads * kv_len)                                                              \
            return;                                                                                   \
        const long bh = row / kv_len, j = row % kv_len;                                               \
        UG_HEADS_OF(bh);                                                                              \
        const global UG_T_##T *qh = q + q_off + q_head;                                               \
        const global UG_T_##T *gh = dout + dout_off + o_head;                                         \
        float kr[UG_ATTENTION_MAX_D], vr[UG_ATTENTION_MAX_D], gk[UG_ATTENTION_MAX_D],                 \
            gv[UG_ATTENTION_MAX_D];                                                                   \
        for (long c = 0; c < d; c++) {                                                                \
            kr[c] = UG_LD_##T(k + k_off + k_head + j * k_r, c);                                       \
            vr[c] = UG_LD_##T(v + v_off + v_head + j * v_r, c);                                       \
            gk[c] = gv[c] = 0.0f;                                                                     \
        }                                                                                             \
        for (long i = causal ? j : 0; i < q_len; i++) {                                               \
            float dotv = 0.0f, dp = 0.0f;                                                             \
            for (long c = 0; c < d; c++) {                                                            \
                dotv += UG_LD_##T(qh, i * q_r + c) * kr[c];                                           \
                dp += UG_LD_##T(gh, i * o_r + c) * vr[c];                                             \
            }                                                                                         \
            const float s = UG_ATTENTION_SCORE(T, dotv, i, j);                                        \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float p = exp(s - lse[lse_off + bh * q_len + i]), z = UG_ATTENTION_KEEP(bh, i, j);  \
            const float ds = p * (z * dp - delta[delta_off + bh * q_len + i]) * scale;                \
            for (long c = 0; c < d; c++) {                                                            \
                gv[c] += p * z * UG_LD_##T(gh, i * o_r + c);                                          \
                gk[c] += ds * UG_LD_##T(qh, i * q_r + c);                                             \
            }                                                                                         \
        }                                                                                             \
        for (long c = 0; c < d; c++) {                                                                \
            UG_ST_##T(dk, dk_off + k_head + j * k_r + c, gk[c]);                                      \
            UG_ST_##T(dv, dv_off + v_head + j * v_r + c, gv[c]);                                      \
        }                                                                                             \
    }

UG_ATTENTION_KERNELS(f32)
UG_ATTENTION_KERNELS(f16)
UG_ATTENTION_KERNELS(bf16)

#define UG_AR 16 /* rows of a block: the vector's lanes */
#define UG_AK 16 /* keys of a forward tile */

/* Scores of a block, one a lane of a float16 (UG_AR and UG_AK are its
 * width) from their dot products: scaled, the mask added, -inf where
 * hidden. Rows: key j for rows i0 + r, hidden past n and where causal
 * hides j. Keys: row i for keys j0 + t, hidden past nk and where causal
 * hides the key. */
#define UG_LANES ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#define UG_ATTENTION_SCORES_ROWS(T, dots, i0, n, j)                                                   \
    ug_attention_scores_##T(dots, scale, (UG_LANES >= (int)(n)) | (causal ? UG_LANES < (int)((j) - (i0)) : (int16)0), \
                            (int)(n), has_mask, mask, mask_off + mask_head + (i0) * ms2 + (j) * ms3, ms2)
#define UG_ATTENTION_SCORES_KEYS(T, dots, i, j0, nk)                                                  \
    ug_attention_scores_##T(dots, scale, (UG_LANES >= (int)(nk)) | (causal ? UG_LANES > (int)((i) - (j0)) : (int16)0), \
                            (int)(nk), has_mask, mask, mask_off + mask_head + (i) * ms2 + (j0) * ms3, ms3)

#define UG_ATTENTION_SCORES_FN(T)                                                                     \
    inline float16 ug_attention_scores_##T(float16 dots, float scale, int16 hidden, int n, int has_mask, \
                                           const global UG_T_##T *mask, ulong at, long step)          \
    {                                                                                                 \
        float16 s = dots * scale;                                                                     \
        if (has_mask) {                                                                               \
            float m[16];                                                                              \
            for (int r = 0; r < 16; r++)                                                              \
                m[r] = r < n ? UG_LD_##T(mask, at + r * step) : 0.0f;                                 \
            s += vload16(0, m);                                                                       \
        }                                                                                             \
        return select(s, (float16)(-INFINITY), hidden);                                               \
    }
UG_ATTENTION_SCORES_FN(f32)
UG_ATTENTION_SCORES_FN(f16)
UG_ATTENTION_SCORES_FN(bf16)

#define UG_ATTENTION_BLOCK_KERNELS(T)                                                                 \
    kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_fwd_blocks_##T(              \
        global UG_T_##T *o, ulong o_off, global float *lse, ulong lse_off, const global UG_T_##T *q,  \
        ulong q_off, const global UG_T_##T *k, ulong k_off, const global UG_T_##T *v, ulong v_off,    \
        const global UG_T_##T *mask, ulong mask_off, UG_ATTENTION_PARAMS)                             \
    {                                                                                                 \
        const long blocks = (q_len + UG_AR - 1) / UG_AR, item = get_global_id(0);                     \
        if (item >= batch_heads * blocks)                                                             \
            return;                                                                                   \
        const long bh = item / blocks, i0 = (item - bh * blocks) * UG_AR;                             \
        UG_HEADS_OF(bh);                                                                              \
        const long n = min(q_len - i0, (long)UG_AR);                                                  \
        const global UG_T_##T *qh = q + q_off + q_head + i0 * q_r;                                    \
        const global UG_T_##T *kh = k + k_off + k_head, *vh = v + v_off + v_head;                     \
        float qt[UG_ATTENTION_MAX_D * UG_AR], acc[UG_ATTENTION_MAX_D * UG_AR], s[UG_AK * UG_AR], z[UG_AR]; \
        for (long c = 0; c < d; c++)                                                                  \
            for (int r = 0; r < UG_AR; r++) {                                                         \
                qt[c * UG_AR + r] = r < n ? UG_LD_##T(qh, r * q_r + c) : 0.0f;                        \
                acc[c * UG_AR + r] = 0.0f;                                                            \
            }                                                                                         \
        float16 m = -INFINITY, l = 0.0f;                                                              \
        const long keys = causal && i0 + n < kv_len ? i0 + n : kv_len;                                \
        for (long j0 = 0; j0 < keys; j0 += UG_AK) {                                                   \
            const long nk = min(keys - j0, (long)UG_AK);                                              \
            float16 next = m;                                                                         \
            for (long t = 0; t < nk; t++) {                                                           \
                float16 dots = 0.0f;                                                                  \
                for (long c = 0; c < d; c++)                                                          \
                    dots += vload16(0, qt + c * UG_AR) * UG_LD_##T(kh, (j0 + t) * k_r + c);           \
                const float16 st = UG_ATTENTION_SCORES_ROWS(T, dots, i0, n, j0 + t);                  \
                next = fmax(next, st);                                                                \
                vstore16(st, 0, s + t * UG_AR);                                                       \
            }                                                                                         \
            const float16 corr = select(exp(m - next), (float16)1.0f, next == (float16)(-INFINITY));  \
            l *= corr;                                                                                \
            m = next;                                                                                 \
            for (long t = 0; t < nk; t++) {                                                           \
                const float16 x = vload16(0, s + t * UG_AR);                                          \
                float16 p = select(exp(x - next), (float16)0.0f, x == (float16)(-INFINITY));          \
                l += p;                                                                               \
                if (dropout > 0.0f) {                                                                 \
                    for (int r = 0; r < UG_AR; r++)                                                   \
                        z[r] = r < n ? UG_ATTENTION_KEEP(bh, i0 + r, j0 + t) : 1.0f;                  \
                    p *= vload16(0, z);                                                               \
                }                                                                                     \
                vstore16(p, 0, s + t * UG_AR);                                                        \
            }                                                                                         \
            for (long c = 0; c < d; c++) {                                                            \
                float16 a = vload16(0, acc + c * UG_AR) * corr;                                       \
                for (long t = 0; t < nk; t++)                                                         \
                    a += vload16(0, s + t * UG_AR) * UG_LD_##T(vh, (j0 + t) * v_r + c);               \
                vstore16(a, 0, acc + c * UG_AR);                                                      \
            }                                                                                         \
        }                                                                                             \
        float lr[UG_AR], mr[UG_AR];                                                                   \
        vstore16(l, 0, lr);                                                                           \
        vstore16(m, 0, mr);                                                                           \
        for (long r = 0; r < n; r++) {                                                                \
            const float inv = 1.0f / lr[r];                                                            \
            for (long c = 0; c < d; c++)                                                              \
                UG_ST_##T(o, o_off + o_head + (i0 + r) * o_r + c, acc[c * UG_AR + r] * inv);          \
            lse[lse_off + bh * q_len + i0 + r] = mr[r] + log(lr[r]);                                    \
        }                                                                                             \
    }                                                                                                 \
    kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_dq_blocks_##T(               \
        global UG_T_##T *dq, ulong dq_off, global float *delta, ulong delta_off,                      \
        const global UG_T_##T *dout, ulong dout_off, const global UG_T_##T *o, ulong o_off,           \
        const global float *lse, ulong lse_off, const global UG_T_##T *q, ulong q_off,                \
        const global UG_T_##T *k, ulong k_off, const global UG_T_##T *v, ulong v_off,                 \
        const global UG_T_##T *mask, ulong mask_off, UG_ATTENTION_PARAMS)                             \
    {                                                                                                 \
        const long blocks = (q_len + UG_AR - 1) / UG_AR, item = get_global_id(0);                     \
        if (item >= batch_heads * blocks)                                                             \
            return;                                                                                   \
        const long bh = item / blocks, i0 = (item - bh * blocks) * UG_AR;                             \
        UG_HEADS_OF(bh);                                                                              \
        const long n = min(q_len - i0, (long)UG_AR), row0 = bh * q_len + i0;                          \
        const global UG_T_##T *kh = k + k_off + k_head, *vh = v + v_off + v_head;                     \
        float qt[UG_ATTENTION_MAX_D * UG_AR], gt[UG_ATTENTION_MAX_D * UG_AR];                         \
        float acc[UG_ATTENTION_MAX_D * UG_AR], li[UG_AR], di[UG_AR], z[UG_AR];             \
        for (int r = 0; r < UG_AR; r++) {                                                             \
            float sum = 0.0f;                                                                         \
            for (long c = 0; c < d; c++) {                                                            \
                const float g = r < n ? UG_LD_##T(dout + dout_off + o_head + (i0 + r) * o_r, c) : 0.0f; \
                qt[c * UG_AR + r] = r < n ? UG_LD_##T(q + q_off + q_head + (i0 + r) * q_r, c) : 0.0f; \
                gt[c * UG_AR + r] = g;                                                                \
                acc[c * UG_AR + r] = 0.0f;                                                            \
                sum += r < n ? g * UG_LD_##T(o + o_off + o_head + (i0 + r) * o_r, c) : 0.0f;          \
            }                                                                                         \
            di[r] = sum;                                                                              \
            li[r] = r < n ? lse[lse_off + row0 + r] : 0.0f;                                           \
            if (r < n)                                                                                \
                delta[delta_off + row0 + r] = sum;                                                    \
        }                                                                                             \
        const long keys = causal && i0 + n < kv_len ? i0 + n : kv_len;                                \
        const float16 liv = vload16(0, li), div = vload16(0, di);                                     \
        for (long j = 0; j < keys; j++) {                                                             \
            float16 scv = 0.0f, dpv = 0.0f;                                                           \
            for (long c = 0; c < d; c++) {                                                            \
                scv += vload16(0, qt + c * UG_AR) * UG_LD_##T(kh, j * k_r + c);                       \
                dpv += vload16(0, gt + c * UG_AR) * UG_LD_##T(vh, j * v_r + c);                       \
            }                                                                                         \
            if (dropout > 0.0f) {                                                                     \
                for (int r = 0; r < UG_AR; r++)                                                       \
                    z[r] = r < n ? UG_ATTENTION_KEEP(bh, i0 + r, j) : 1.0f;                           \
                dpv *= vload16(0, z);                                                                 \
            }                                                                                         \
            const float16 s = UG_ATTENTION_SCORES_ROWS(T, scv, i0, n, j);                             \
            const int16 dead = s == (float16)(-INFINITY);                                             \
            const float16 ds = select(exp(s - liv) * (dpv - div) * scale, (float16)0.0f, dead);       \
            for (long c = 0; c < d; c++) {                                                            \
                const float16 a = vload16(0, acc + c * UG_AR);                                        \
                vstore16(a + ds * UG_LD_##T(kh, j * k_r + c), 0, acc + c * UG_AR);                    \
            }                                                                                         \
        }                                                                                             \
        for (long r = 0; r < n; r++)                                                                  \
            for (long c = 0; c < d; c++)                                                              \
                UG_ST_##T(dq, dq_off + q_head + (i0 + r) * q_r + c, acc[c * UG_AR + r]);              \
    }                                                                                                 \
    kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_dkv_blocks_##T(              \
        global UG_T_##T *dk, ulong dk_off, global UG_T_##T *dv, ulong dv_off, const global float *delta, \
        ulong delta_off, const global UG_T_##T *dout, ulong dout_off, const global float *lse,        \
        ulong lse_off, const global UG_T_##T *q, ulong q_off, const global UG_T_##T *k, ulong k_off,  \
        const global UG_T_##T *v, ulong v_off, const global UG_T_##T *mask, ulong mask_off,           \
        UG_ATTENTION_PARAMS)                                                                          \
    {                                                                                                 \
        const long blocks = (kv_len + UG_AR - 1) / UG_AR, item = get_global_id(0);                    \
        if (item >= batch_heads * blocks)                                                             \
            return;                                                                                   \
        const long bh = item / blocks, j0 = (item - bh * blocks) * UG_AR;                             \
        UG_HEADS_OF(bh);                                                                              \
        const long nk = min(kv_len - j0, (long)UG_AR);                                                \
        const global UG_T_##T *qh = q + q_off + q_head;                                               \
        const global UG_T_##T *gh = dout + dout_off + o_head;                                         \
        float kt[UG_ATTENTION_MAX_D * UG_AR], vt[UG_ATTENTION_MAX_D * UG_AR];                         \
        float gk[UG_ATTENTION_MAX_D * UG_AR], gv[UG_ATTENTION_MAX_D * UG_AR];                         \
        float z[UG_AR]; /* dropout's factors, where there is dropout */                               \
        for (int t = 0; t < UG_AR; t++)                                                               \
            for (long c = 0; c < d; c++) {                                                            \
                kt[c * UG_AR + t] = t < nk ? UG_LD_##T(k + k_off + k_head + (j0 + t) * k_r, c) : 0.0f; \
                vt[c * UG_AR + t] = t < nk ? UG_LD_##T(v + v_off + v_head + (j0 + t) * v_r, c) : 0.0f; \
                gk[c * UG_AR + t] = gv[c * UG_AR + t] = 0.0f;                                         \
            }                                                                                         \
        for (long i = causal ? j0 : 0; i < q_len; i++) {                                              \
            float16 dots = 0.0f, dp = 0.0f;                                                           \
            for (long c = 0; c < d; c++) {                                                            \
                dots += UG_LD_##T(qh, i * q_r + c) * vload16(0, kt + c * UG_AR);                      \
                dp += UG_LD_##T(gh, i * o_r + c) * vload16(0, vt + c * UG_AR);                        \
            }                                                                                         \
            const float li = lse[lse_off + bh * q_len + i], di = delta[delta_off + bh * q_len + i];   \
            const float16 s = UG_ATTENTION_SCORES_KEYS(T, dots, i, j0, nk);                           \
            float16 p = select(exp(s - li), (float16)0.0f, s == (float16)(-INFINITY));                \
            if (dropout > 0.0f) {                                                                     \
                for (int t = 0; t < UG_AR; t++)                                                       \
                    z[t] = t < nk ? UG_ATTENTION_KEEP(bh, i, j0 + t) : 1.0f;                          \
                dp *= vload16(0, z);                                                                  \
            }                                                                                         \
            const float16 ds = p * (dp - di) * scale;                                                 \
            if (dropout > 0.0f)                                                                       \
                p *= vload16(0, z);                                                                   \
            for (long c = 0; c < d; c++) {                                                            \
                const float qv = UG_LD_##T(qh, i * q_r + c), gv1 = UG_LD_##T(gh, i * o_r + c);        \
                vstore16(vload16(0, gv + c * UG_AR) + p * gv1, 0, gv + c * UG_AR);                    \
                vstore16(vload16(0, gk + c * UG_AR) + ds * qv, 0, gk + c * UG_AR);                    \
            }                                                                                         \
        }                                                                                             \
        for (long t = 0; t < nk; t++)                                                                 \
            for (long c = 0; c < d; c++) {                                                            \
                UG_ST_##T(dk, dk_off + k_head + (j0 + t) * k_r + c, gk[c * UG_AR + t]);               \
                UG_ST_##T(dv, dv_off + v_head + (j0 + t) * v_r + c, gv[c * UG_AR + t]);               \
            }                                                                                         \
    }

UG_ATTENTION_BLOCK_KERNELS(f32)
UG_ATTENTION_BLOCK_KERNELS(f16)
UG_ATTENTION_BLOCK_KERNELS(bf16)
