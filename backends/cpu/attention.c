/* Fused attention (the attention family, backend.h): blocks of query rows
 * against tiles of keys with an online softmax, so nothing of size
 * q_len x kv_len is stored. The backward pass runs twice over the pairs:
 * once by query block (delta and dq), once by key block (dk and dv), each
 * result written by one worker, in a fixed order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/internal.h"
#include "backends/cpu/threads.h"

enum { QB = 16, KB = 64 }; /* query rows per work unit, keys per tile */

typedef struct attn_job {
    const ug_attention_args *a;
    int64_t blocks; /* row blocks per head */
    int failed;     /* a unit found no memory for its buffers (atomic) */
} attn_job;

/* A unit's buffers, or NULL with the job marked failed. */
static float *buffers(attn_job *job, int64_t floats)
{
    float *p = malloc(sizeof(float) * (size_t)floats);
    if (!p)
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    return p;
}

/* Rows [row, row + n) of a [.., rows, d] operand of head bh, as f32. */
static void load_rows(ug_kview v, int64_t rows, int64_t d, int64_t bh, int64_t row, int64_t n, float *out)
{
    const char *base = ug_cpu_ptr(v) + ((bh * rows + row) * d) * (int64_t)ug_dtype_size(v.dtype);
    ug_cpu_load(base, v.dtype, 1, n * d, out);
}

static void store_rows(ug_kview v, int64_t rows, int64_t d, int64_t bh, int64_t row, int64_t n, const float *in)
{
    char *base = ug_cpu_ptr(v) + ((bh * rows + row) * d) * (int64_t)ug_dtype_size(v.dtype);
    ug_cpu_store(base, v.dtype, n * d, in);
}

/* Eight running sums, one per lane, so the loop vectorises without
 * reordering any one sum (a single sum waits on each add in turn: the
 * backward pass ran at 7 GFLOP/s with it). */
static float dot(const float *a, const float *b, int64_t n)
{
    float lanes[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            lanes[k] += a[i + k] * b[i + k];
    float s = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* scale * q . k + mask, or -inf for a key the causal mask leaves out. */
static float score(const ug_attention_args *a, int64_t bh, int64_t i, int64_t j, const float *q, const float *k)
{
    if (a->causal && j > i)
        return -INFINITY;
    float s = a->scale * dot(q, k, a->head_dim);
    if (a->mask.mem) {
        const int64_t b = bh / a->heads, h = bh % a->heads;
        const int64_t at = b * a->mask_strides[0] + h * a->mask_strides[1] + i * a->mask_strides[2] +
                           j * a->mask_strides[3];
        float m;
        ug_cpu_load(ug_cpu_ptr(a->mask) + at * (int64_t)ug_dtype_size(a->mask.dtype), a->mask.dtype, 1, 1, &m);
        s += m;
    }
    return s;
}

/* The keys query rows [i0, i0 + n) can see: [0, end). */
static int64_t key_end(const ug_attention_args *a, int64_t i0, int64_t n)
{
    return a->causal && i0 + n < a->kv_len ? i0 + n : a->kv_len;
}

static void forward_units(void *ctx, int64_t begin, int64_t end)
{
    attn_job *job = ctx;
    const ug_attention_args *a = job->a;
    const int64_t d = a->head_dim;
    float *q = buffers(job, QB * d * 2 + KB * d * 2 + QB * KB);
    if (!q)
        return;
    float *acc = q + QB * d, *k = acc + QB * d, *v = k + KB * d, *s = v + KB * d;
    for (int64_t u = begin; u < end; u++) {
        const int64_t bh = u / job->blocks, i0 = u % job->blocks * QB;
        const int64_t n = a->q_len - i0 < QB ? a->q_len - i0 : QB;
        float m[QB], l[QB];
        load_rows(a->q, a->q_len, d, bh, i0, n, q);
        memset(acc, 0, sizeof(float) * (size_t)(n * d));
        for (int64_t r = 0; r < n; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        const int64_t keys = key_end(a, i0, n);
        for (int64_t j0 = 0; j0 < keys; j0 += KB) {
            const int64_t nk = keys - j0 < KB ? keys - j0 : KB;
            load_rows(a->k, a->kv_len, d, bh, j0, nk, k);
            load_rows(a->v, a->kv_len, d, bh, j0, nk, v);
            for (int64_t r = 0; r < n; r++) {
                float *sr = s + r * KB, top = -INFINITY;
                for (int64_t t = 0; t < nk; t++) {
                    sr[t] = score(a, bh, i0 + r, j0 + t, q + r * d, k + t * d);
                    top = sr[t] > top ? sr[t] : top;
                }
                if (top == -INFINITY)
                    continue;
                const float next = m[r] > top ? m[r] : top, correction = expf(m[r] - next);
                float *ar = acc + r * d;
                l[r] *= correction;
                for (int64_t c = 0; c < d; c++)
                    ar[c] *= correction;
                for (int64_t t = 0; t < nk; t++) {
                    const float p = expf(sr[t] - next);
                    l[r] += p;
                    for (int64_t c = 0; c < d; c++)
                        ar[c] += p * v[t * d + c];
                }
                m[r] = next;
            }
        }
        float *lse = (float *)(void *)ug_cpu_ptr(a->lse) + bh * a->q_len + i0;
        for (int64_t r = 0; r < n; r++) {
            const float inv = 1.0f / l[r];
            for (int64_t c = 0; c < d; c++)
                acc[r * d + c] *= inv;
            lse[r] = m[r] + logf(l[r]);
        }
        store_rows(a->o, a->q_len, d, bh, i0, n, acc);
    }
    free(q);
}

/* dq and delta by query block. */
static void dq_units(void *ctx, int64_t begin, int64_t end)
{
    attn_job *job = ctx;
    const ug_attention_args *a = job->a;
    const int64_t d = a->head_dim;
    float *q = buffers(job, QB * d * 3 + KB * d * 2);
    if (!q)
        return;
    float *dout = q + QB * d, *dq = dout + QB * d, *k = dq + QB * d, *v = k + KB * d;
    float o[UG_ATTENTION_MAX_HEAD_DIM];
    for (int64_t u = begin; u < end; u++) {
        const int64_t bh = u / job->blocks, i0 = u % job->blocks * QB;
        const int64_t n = a->q_len - i0 < QB ? a->q_len - i0 : QB;
        load_rows(a->q, a->q_len, d, bh, i0, n, q);
        load_rows(a->dout, a->q_len, d, bh, i0, n, dout);
        memset(dq, 0, sizeof(float) * (size_t)(n * d));
        const float *lse = (const float *)(const void *)ug_cpu_ptr(a->lse) + bh * a->q_len + i0;
        float *delta = (float *)(void *)ug_cpu_ptr(a->delta) + bh * a->q_len + i0;
        for (int64_t r = 0; r < n; r++) {
            load_rows(a->o, a->q_len, d, bh, i0 + r, 1, o);
            delta[r] = dot(dout + r * d, o, d);
        }
        const int64_t keys = key_end(a, i0, n);
        for (int64_t j0 = 0; j0 < keys; j0 += KB) {
            const int64_t nk = keys - j0 < KB ? keys - j0 : KB;
            load_rows(a->k, a->kv_len, d, bh, j0, nk, k);
            load_rows(a->v, a->kv_len, d, bh, j0, nk, v);
            for (int64_t r = 0; r < n; r++)
                for (int64_t t = 0; t < nk; t++) {
                    const float s = score(a, bh, i0 + r, j0 + t, q + r * d, k + t * d);
                    if (s == -INFINITY)
                        continue;
                    const float p = expf(s - lse[r]);
                    const float ds = p * (dot(dout + r * d, v + t * d, d) - delta[r]) * a->scale;
                    for (int64_t c = 0; c < d; c++)
                        dq[r * d + c] += ds * k[t * d + c];
                }
        }
        store_rows(a->dq, a->q_len, d, bh, i0, n, dq);
    }
    free(q);
}

/* dk and dv by key block: every query that sees them, in order. */
static void dkv_units(void *ctx, int64_t begin, int64_t end)
{
    attn_job *job = ctx;
    const ug_attention_args *a = job->a;
    const int64_t d = a->head_dim;
    float *k = buffers(job, QB * d * 4 + KB * d * 2);
    if (!k)
        return;
    float *v = k + QB * d, *dk = v + QB * d, *dv = dk + QB * d, *q = dv + QB * d, *dout = q + KB * d;
    for (int64_t u = begin; u < end; u++) {
        const int64_t bh = u / job->blocks, j0 = u % job->blocks * QB;
        const int64_t nk = a->kv_len - j0 < QB ? a->kv_len - j0 : QB;
        load_rows(a->k, a->kv_len, d, bh, j0, nk, k);
        load_rows(a->v, a->kv_len, d, bh, j0, nk, v);
        memset(dk, 0, sizeof(float) * (size_t)(2 * QB * d));
        const float *lse = (const float *)(const void *)ug_cpu_ptr(a->lse) + bh * a->q_len;
        const float *delta = (const float *)(const void *)ug_cpu_ptr(a->delta) + bh * a->q_len;
        for (int64_t i0 = a->causal ? j0 : 0; i0 < a->q_len; i0 += KB) {
            const int64_t n = a->q_len - i0 < KB ? a->q_len - i0 : KB;
            load_rows(a->q, a->q_len, d, bh, i0, n, q);
            load_rows(a->dout, a->q_len, d, bh, i0, n, dout);
            for (int64_t t = 0; t < nk; t++)
                for (int64_t r = 0; r < n; r++) {
                    const float s = score(a, bh, i0 + r, j0 + t, q + r * d, k + t * d);
                    if (s == -INFINITY)
                        continue;
                    const float p = expf(s - lse[i0 + r]);
                    const float ds = p * (dot(dout + r * d, v + t * d, d) - delta[i0 + r]) * a->scale;
                    for (int64_t c = 0; c < d; c++) {
                        dv[t * d + c] += p * dout[r * d + c];
                        dk[t * d + c] += ds * q[r * d + c];
                    }
                }
        }
        store_rows(a->dk, a->kv_len, d, bh, j0, nk, dk);
        store_rows(a->dv, a->kv_len, d, bh, j0, nk, dv);
    }
    free(k);
}

ug_status ug_cpu_attention(ug_bdev *dev, const ug_attention_args *a)
{
    const int64_t heads = a->batch * a->heads;
    if (heads <= 0 || a->head_dim <= 0 || a->head_dim > UG_ATTENTION_MAX_HEAD_DIM)
        return heads <= 0 ? UG_OK
                          : UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu attention: head dimension %lld",
                                         (long long)a->head_dim);
    /* Work per unit: a block of rows against every key. */
    const int64_t per_unit = QB * (a->kv_len > 0 ? a->kv_len : 1) * a->head_dim;
    const int64_t min_units = UG_CPU_MIN_PARALLEL / per_unit + 1;
    attn_job job = {.a = a, .blocks = (a->q_len + QB - 1) / QB};
    ug_cpu_parallel_for(dev->workers, heads * job.blocks, min_units, a->backward ? dq_units : forward_units, &job);
    attn_job keys = {.a = a, .blocks = (a->kv_len + QB - 1) / QB};
    if (a->backward)
        ug_cpu_parallel_for(dev->workers, heads * keys.blocks, min_units, dkv_units, &keys);
    if (job.failed || keys.failed)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu attention: no host memory for a work unit's buffers");
    return UG_OK;
}
