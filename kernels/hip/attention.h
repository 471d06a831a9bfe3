/* The attention family (backend.h): one thread per query row (the forward
 * pass, and delta and dq), or per key row (dk and dv), each looping over
 * the other side's rows with its row's values in registers; the online
 * softmax keeps nothing of size q_len x kv_len. T: the type of q, k, v, o,
 * the mask and the gradients (float, __half, ug_bf16); lse and delta are
 * f32.
 * Device code: backends/hip/attention.hip launches it. */
#ifndef UG_KERNELS_HIP_ATTENTION_H
#define UG_KERNELS_HIP_ATTENTION_H

#include "kernels/common/random.h"
#include "kernels/hip/common.h"

typedef struct attention_k {
    const void *q, *k, *v, *mask, *dout, *o;
    void *out, *dk, *dv; /* out: o forward, dq backward */
    float *lse, *delta;
    int64_t batch_heads, heads, q_len, kv_len, d;
    int64_t ms[4];
    /* Row strides (backend.h's ug_attention_layout) of q, k, v and o: batch,
     * head, row; dq, dk, dv and dout take those of q, k, v and o. */
    int64_t at[4][3];
    /* Dropout (backend.h): p, 1 / (1 - p), the key, the first counter and
     * the graph's run count (NULL: none). */
    float dropout, keep;
    uint64_t seed, offset;
    const float *runs;
    float scale;
    bool causal;
} attention_k;

/* scale * (q . k) plus the mask; -inf where causal hides key j. */
template <typename T>
UG_DEV float ug_attention_score(const attention_k &k, float dot, int64_t bh, int64_t i, int64_t j)
{
    if (k.causal && j > i)
        return -INFINITY;
    float s = dot * k.scale;
    if (k.mask)
        s += ug_widen(((const T *)k.mask)[(bh / k.heads) * k.ms[0] + (bh % k.heads) * k.ms[1] + i * k.ms[2] +
                                          j * k.ms[3]]);
    return s;
}

enum { UG_AT_Q, UG_AT_K, UG_AT_V, UG_AT_O };

/* Where row i of head bh of the operand laid out as at[which] starts. */
UG_DEV int64_t ug_attention_row(const attention_k &k, int which, int64_t bh, int64_t i)
{
    return bh / k.heads * k.at[which][0] + bh % k.heads * k.at[which][1] + i * k.at[which][2];
}

/* Dropout's factor for the probability of query i and key j of head bh: 1
 * without dropout. */
UG_DEV float ug_attention_keep(const attention_k &k, int64_t bh, int64_t i, int64_t j)
{
    if (!(k.dropout > 0.0f))
        return 1.0f;
    const uint64_t first = k.offset + (k.runs ? (uint64_t)k.runs[0] << UG_RANDOM_RUN_SHIFT : 0);
    return ug_dropout_keep(k.seed, first + (uint64_t)((bh * k.q_len + i) * k.kv_len + j), k.dropout, k.keep);
}

template <typename T>
__global__ void ug_attention_forward(attention_k k)
{
    const T *q = (const T *)k.q, *key = (const T *)k.k, *v = (const T *)k.v;
    T *o = (T *)k.out;
    UG_FOR(row, k.batch_heads * k.q_len, int64_t) {
        const int64_t bh = row / k.q_len, i = row % k.q_len, d = k.d;
        const T *kh = key + ug_attention_row(k, UG_AT_K, bh, 0), *vh = v + ug_attention_row(k, UG_AT_V, bh, 0);
        const T *qi = q + ug_attention_row(k, UG_AT_Q, bh, i);
        const int64_t k_step = k.at[UG_AT_K][2], v_step = k.at[UG_AT_V][2];
        float qr[UG_ATTENTION_MAX_HEAD_DIM], acc[UG_ATTENTION_MAX_HEAD_DIM];
        for (int64_t c = 0; c < d; c++) {
            qr[c] = ug_widen(qi[c]);
            acc[c] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        const int64_t keys = k.causal && i + 1 < k.kv_len ? i + 1 : k.kv_len;
        for (int64_t j = 0; j < keys; j++) {
            float dot = 0.0f;
            for (int64_t c = 0; c < d; c++)
                dot += qr[c] * ug_widen(kh[j * k_step + c]);
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float next = fmaxf(m, s), correction = expf(m - next), p = expf(s - next);
            const float kept = p * ug_attention_keep(k, bh, i, j);
            l = l * correction + p;
            for (int64_t c = 0; c < d; c++)
                acc[c] = acc[c] * correction + kept * ug_widen(vh[j * v_step + c]);
            m = next;
        }
        const float inv = 1.0f / l;
        T *oi = o + ug_attention_row(k, UG_AT_O, bh, i);
        for (int64_t c = 0; c < d; c++)
            oi[c] = ug_narrow<T>(acc[c] * inv);
        k.lse[row] = m + logf(l);
    }
}

template <typename T>
__global__ void ug_attention_dq(attention_k k)
{
    const T *q = (const T *)k.q, *key = (const T *)k.k, *v = (const T *)k.v, *dout = (const T *)k.dout,
            *o = (const T *)k.o;
    T *dq = (T *)k.out;
    UG_FOR(row, k.batch_heads * k.q_len, int64_t) {
        const int64_t bh = row / k.q_len, i = row % k.q_len, d = k.d;
        const T *kh = key + ug_attention_row(k, UG_AT_K, bh, 0), *vh = v + ug_attention_row(k, UG_AT_V, bh, 0);
        const int64_t k_step = k.at[UG_AT_K][2], v_step = k.at[UG_AT_V][2], qi = ug_attention_row(k, UG_AT_Q, bh, i),
                      oi = ug_attention_row(k, UG_AT_O, bh, i);
        float qr[UG_ATTENTION_MAX_HEAD_DIM], gr[UG_ATTENTION_MAX_HEAD_DIM], acc[UG_ATTENTION_MAX_HEAD_DIM];
        float di = 0.0f;
        for (int64_t c = 0; c < d; c++) {
            qr[c] = ug_widen(q[qi + c]);
            gr[c] = ug_widen(dout[oi + c]);
            di += gr[c] * ug_widen(o[oi + c]);
            acc[c] = 0.0f;
        }
        k.delta[row] = di;
        const float li = k.lse[row];
        const int64_t keys = k.causal && i + 1 < k.kv_len ? i + 1 : k.kv_len;
        for (int64_t j = 0; j < keys; j++) {
            float dot = 0.0f, dp = 0.0f;
            for (int64_t c = 0; c < d; c++) {
                dot += qr[c] * ug_widen(kh[j * k_step + c]);
                dp += gr[c] * ug_widen(vh[j * v_step + c]);
            }
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float ds = expf(s - li) * (ug_attention_keep(k, bh, i, j) * dp - di) * k.scale;
            for (int64_t c = 0; c < d; c++)
                acc[c] += ds * ug_widen(kh[j * k_step + c]);
        }
        for (int64_t c = 0; c < d; c++)
            dq[qi + c] = ug_narrow<T>(acc[c]);
    }
}

template <typename T>
__global__ void ug_attention_dkv(attention_k k)
{
    const T *q = (const T *)k.q, *key = (const T *)k.k, *v = (const T *)k.v, *dout = (const T *)k.dout;
    T *dk = (T *)k.dk, *dv = (T *)k.dv;
    UG_FOR(row, k.batch_heads * k.kv_len, int64_t) {
        const int64_t bh = row / k.kv_len, j = row % k.kv_len, d = k.d;
        const T *qh = q + ug_attention_row(k, UG_AT_Q, bh, 0), *gh = dout + ug_attention_row(k, UG_AT_O, bh, 0);
        const int64_t q_step = k.at[UG_AT_Q][2], g_step = k.at[UG_AT_O][2], kj = ug_attention_row(k, UG_AT_K, bh, j),
                      vj = ug_attention_row(k, UG_AT_V, bh, j);
        float kr[UG_ATTENTION_MAX_HEAD_DIM], vr[UG_ATTENTION_MAX_HEAD_DIM], gk[UG_ATTENTION_MAX_HEAD_DIM],
            gv[UG_ATTENTION_MAX_HEAD_DIM];
        for (int64_t c = 0; c < d; c++) {
            kr[c] = ug_widen(key[kj + c]);
            vr[c] = ug_widen(v[vj + c]);
            gk[c] = gv[c] = 0.0f;
        }
        for (int64_t i = k.causal ? j : 0; i < k.q_len; i++) {
            float dot = 0.0f, dp = 0.0f;
            for (int64_t c = 0; c < d; c++) {
                dot += ug_widen(qh[i * q_step + c]) * kr[c];
                dp += ug_widen(gh[i * g_step + c]) * vr[c];
            }
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float p = expf(s - k.lse[bh * k.q_len + i]), z = ug_attention_keep(k, bh, i, j);
            const float ds = p * (z * dp - k.delta[bh * k.q_len + i]) * k.scale;
            for (int64_t c = 0; c < d; c++) {
                gv[c] += p * z * ug_widen(gh[i * g_step + c]);
                gk[c] += ds * ug_widen(qh[i * q_step + c]);
            }
        }
        for (int64_t c = 0; c < d; c++) {
            dk[kj + c] = ug_narrow<T>(gk[c]);
            dv[vj + c] = ug_narrow<T>(gv[c]);
        }
    }
}

#endif
