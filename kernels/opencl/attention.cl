/* The attention family (backend.h): one item per query row (the forward
 * pass, and delta and dq), or per key row (dk and dv), each looping over
 * the other side's rows with the row's values in private memory; the
 * online softmax keeps nothing of size q_len x kv_len. A kernel per dtype
 * T of q, k, v, o, the mask and the gradients; lse and delta are f32. */

#define UG_ATTENTION_PARAMS                                                                  \
    long batch_heads, long heads, long q_len, long kv_len, long d, float scale, int causal, \
        int has_mask, long ms0, long ms1, long ms2, long ms3

/* scale * q . k (already scaled dot) plus the mask; -inf where causal hides j. */
#define UG_ATTENTION_SCORE(T, dotv, bh, i, j)                                                         \
    (causal && (j) > (i) ? -INFINITY                                                                  \
                         : (dotv) * scale +                                                           \
                               (has_mask ? UG_LD_##T(mask, mask_off + ((bh) / heads) * ms0 +          \
                                                               ((bh) % heads) * ms1 + (i) * ms2 + (j) * ms3) \
                                         : 0.0f))

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
        const global UG_T_##T *qi = q + q_off + row * d;                                              \
        const global UG_T_##T *kh = k + k_off + bh * kv_len * d, *vh = v + v_off + bh * kv_len * d;   \
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
                dotv += qr[c] * UG_LD_##T(kh, j * d + c);                                             \
            const float s = UG_ATTENTION_SCORE(T, dotv, bh, i, j);                                    \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float next = fmax(m, s), correction = exp(m - next), p = exp(s - next);             \
            l = l * correction + p;                                                                   \
            for (long c = 0; c < d; c++)                                                              \
                acc[c] = acc[c] * correction + p * UG_LD_##T(vh, j * d + c);                          \
            m = next;                                                                                 \
        }                                                                                             \
        const float inv = 1.0f / l;                                                                   \
        for (long c = 0; c < d; c++)                                                                  \
            UG_ST_##T(o, o_off + row * d + c, acc[c] * inv);                                          \
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
        const global UG_T_##T *kh = k + k_off + bh * kv_len * d, *vh = v + v_off + bh * kv_len * d;   \
        float qr[UG_ATTENTION_MAX_D], gr[UG_ATTENTION_MAX_D], acc[UG_ATTENTION_MAX_D];                \
        float di = 0.0f;                                                                              \
        for (long c = 0; c < d; c++) {                                                                \
            qr[c] = UG_LD_##T(q + q_off + row * d, c);                                                \
            gr[c] = UG_LD_##T(dout + dout_off + row * d, c);                                          \
            di += gr[c] * UG_LD_##T(o + o_off + row * d, c);                                          \
            acc[c] = 0.0f;                                                                            \
        }                                                                                             \
        delta[delta_off + row] = di;                                                                  \
        const float li = lse[lse_off + row];                                                          \
        const long keys = causal && i + 1 < kv_len ? i + 1 : kv_len;                                  \
        for (long j = 0; j < keys; j++) {                                                             \
            float dotv = 0.0f, dp = 0.0f;                                                             \
            for (long c = 0; c < d; c++) {                                                            \
                dotv += qr[c] * UG_LD_##T(kh, j * d + c);                                             \
                dp += gr[c] * UG_LD_##T(vh, j * d + c);                                               \
            }                                                                                         \
            const float s = UG_ATTENTION_SCORE(T, dotv, bh, i, j);                                    \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float ds = exp(s - li) * (dp - di) * scale;                                         \
            for (long c = 0; c < d; c++)                                                              \
                acc[c] += ds * UG_LD_##T(kh, j * d + c);                                              \
        }                                                                                             \
        for (long c = 0; c < d; c++)                                                                  \
            UG_ST_##T(dq, dq_off + row * d + c, acc[c]);                                              \
    }                                                                                                 \
    kernel void attention_dkv_##T(global UG_T_##T *dk, ulong dk_off, global UG_T_##T *dv,            \
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
        const global UG_T_##T *qh = q + q_off + bh * q_len * d;                                       \
        const global UG_T_##T *gh = dout + dout_off + bh * q_len * d;                                 \
        float kr[UG_ATTENTION_MAX_D], vr[UG_ATTENTION_MAX_D], gk[UG_ATTENTION_MAX_D],                 \
            gv[UG_ATTENTION_MAX_D];                                                                   \
        for (long c = 0; c < d; c++) {                                                                \
            kr[c] = UG_LD_##T(k + k_off + row * d, c);                                                \
            vr[c] = UG_LD_##T(v + v_off + row * d, c);                                                \
            gk[c] = gv[c] = 0.0f;                                                                     \
        }                                                                                             \
        for (long i = causal ? j : 0; i < q_len; i++) {                                               \
            float dotv = 0.0f, dp = 0.0f;                                                             \
            for (long c = 0; c < d; c++) {                                                            \
                dotv += UG_LD_##T(qh, i * d + c) * kr[c];                                             \
                dp += UG_LD_##T(gh, i * d + c) * vr[c];                                               \
            }                                                                                         \
            const float s = UG_ATTENTION_SCORE(T, dotv, bh, i, j);                                    \
            if (s == -INFINITY)                                                                       \
                continue;                                                                             \
            const float p = exp(s - lse[lse_off + bh * q_len + i]);                                   \
            const float ds = p * (dp - delta[delta_off + bh * q_len + i]) * scale;                    \
            for (long c = 0; c < d; c++) {                                                            \
                gv[c] += p * UG_LD_##T(gh, i * d + c);                                                \
                gk[c] += ds * UG_LD_##T(qh, i * d + c);                                               \
            }                                                                                         \
        }                                                                                             \
        for (long c = 0; c < d; c++) {                                                                \
            UG_ST_##T(dk, dk_off + row * d + c, gk[c]);                                               \
            UG_ST_##T(dv, dv_off + row * d + c, gv[c]);                                               \
        }                                                                                             \
    }

UG_ATTENTION_KERNELS(f32)
UG_ATTENTION_KERNELS(f16)
UG_ATTENTION_KERNELS(bf16)
