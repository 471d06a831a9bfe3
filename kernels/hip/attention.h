/* The attention family (backend.h): one thread per query row (the forward
 * pass, and delta and dq), or per key row (dk and dv), each looping over
 * the other side's rows with its row's values in registers; the online
 * softmax keeps nothing of size q_len x kv_len. T: the type of q, k, v, o,
 * the mask and the gradients (float, __half, ug_bf16); lse and delta are
 * f32.
 * Device code: backends/hip/attention.hip launches it. */
#ifndef UG_KERNELS_HIP_ATTENTION_H
#define UG_KERNELS_HIP_ATTENTION_H

#include "kernels/hip/common.h"

typedef struct attention_k {
    const void *q, *k, *v, *mask, *dout, *o;
    void *out, *dk, *dv; /* out: o forward, dq backward */
    float *lse, *delta;
    int64_t batch_heads, heads, q_len, kv_len, d;
    int64_t ms[4];
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

template <typename T>
__global__ void ug_attention_forward(attention_k k)
{
    const T *q = (const T *)k.q, *key = (const T *)k.k, *v = (const T *)k.v;
    T *o = (T *)k.out;
    UG_FOR(row, k.batch_heads * k.q_len, int64_t) {
        const int64_t bh = row / k.q_len, i = row % k.q_len, d = k.d;
        const T *kh = key + bh * k.kv_len * d, *vh = v + bh * k.kv_len * d;
        float qr[UG_ATTENTION_MAX_HEAD_DIM], acc[UG_ATTENTION_MAX_HEAD_DIM];
        for (int64_t c = 0; c < d; c++) {
            qr[c] = ug_widen(q[row * d + c]);
            acc[c] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        const int64_t keys = k.causal && i + 1 < k.kv_len ? i + 1 : k.kv_len;
        for (int64_t j = 0; j < keys; j++) {
            float dot = 0.0f;
            for (int64_t c = 0; c < d; c++)
                dot += qr[c] * ug_widen(kh[j * d + c]);
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float next = fmaxf(m, s), correction = expf(m - next), p = expf(s - next);
            l = l * correction + p;
            for (int64_t c = 0; c < d; c++)
                acc[c] = acc[c] * correction + p * ug_widen(vh[j * d + c]);
            m = next;
        }
        const float inv = 1.0f / l;
        for (int64_t c = 0; c < d; c++)
            o[row * d + c] = ug_narrow<T>(acc[c] * inv);
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
        const T *kh = key + bh * k.kv_len * d, *vh = v + bh * k.kv_len * d;
        float qr[UG_ATTENTION_MAX_HEAD_DIM], gr[UG_ATTENTION_MAX_HEAD_DIM], acc[UG_ATTENTION_MAX_HEAD_DIM];
        float di = 0.0f;
        for (int64_t c = 0; c < d; c++) {
            qr[c] = ug_widen(q[row * d + c]);
            gr[c] = ug_widen(dout[row * d + c]);
            di += gr[c] * ug_widen(o[row * d + c]);
            acc[c] = 0.0f;
        }
        k.delta[row] = di;
        const float li = k.lse[row];
        const int64_t keys = k.causal && i + 1 < k.kv_len ? i + 1 : k.kv_len;
        for (int64_t j = 0; j < keys; j++) {
            float dot = 0.0f, dp = 0.0f;
            for (int64_t c = 0; c < d; c++) {
                dot += qr[c] * ug_widen(kh[j * d + c]);
                dp += gr[c] * ug_widen(vh[j * d + c]);
            }
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float ds = expf(s - li) * (dp - di) * k.scale;
            for (int64_t c = 0; c < d; c++)
                acc[c] += ds * ug_widen(kh[j * d + c]);
        }
        for (int64_t c = 0; c < d; c++)
            dq[row * d + c] = ug_narrow<T>(acc[c]);
    }
}

template <typename T>
__global__ void ug_attention_dkv(attention_k k)
{
    const T *q = (const T *)k.q, *key = (const T *)k.k, *v = (const T *)k.v, *dout = (const T *)k.dout;
    T *dk = (T *)k.dk, *dv = (T *)k.dv;
    UG_FOR(row, k.batch_heads * k.kv_len, int64_t) {
        const int64_t bh = row / k.kv_len, j = row % k.kv_len, d = k.d;
        const T *qh = q + bh * k.q_len * d, *gh = dout + bh * k.q_len * d;
        float kr[UG_ATTENTION_MAX_HEAD_DIM], vr[UG_ATTENTION_MAX_HEAD_DIM], gk[UG_ATTENTION_MAX_HEAD_DIM],
            gv[UG_ATTENTION_MAX_HEAD_DIM];
        for (int64_t c = 0; c < d; c++) {
            kr[c] = ug_widen(key[row * d + c]);
            vr[c] = ug_widen(v[row * d + c]);
            gk[c] = gv[c] = 0.0f;
        }
        for (int64_t i = k.causal ? j : 0; i < k.q_len; i++) {
            float dot = 0.0f, dp = 0.0f;
            for (int64_t c = 0; c < d; c++) {
                dot += ug_widen(qh[i * d + c]) * kr[c];
                dp += ug_widen(gh[i * d + c]) * vr[c];
            }
            const float s = ug_attention_score<T>(k, dot, bh, i, j);
            if (s == -INFINITY)
                continue;
            const float p = expf(s - k.lse[bh * k.q_len + i]);
            const float ds = p * (dp - k.delta[bh * k.q_len + i]) * k.scale;
            for (int64_t c = 0; c < d; c++) {
                gv[c] += p * ug_widen(gh[i * d + c]);
                gk[c] += ds * ug_widen(qh[i * d + c]);
            }
        }
        for (int64_t c = 0; c < d; c++) {
            dk[row * d + c] = ug_narrow<T>(gk[c]);
            dv[row * d + c] = ug_narrow<T>(gv[c]);
        }
    }
}

#endif
