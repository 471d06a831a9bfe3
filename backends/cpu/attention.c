/* Fused attention (the attention family, backend.h) on the CPU: one work
 * unit per head. The forward pass takes blocks of query rows against tiles
 * of keys with an online softmax, so nothing of size q_len x kv_len is
 * stored; the backward pass recomputes each tile's scores once and
 * accumulates dq, dk and dv into the head's own buffers (linear in the
 * sequence length), every sum in key or query order.
 *
 * Within a tile the work is small matrix products laid out so that the
 * innermost loop runs along a row (keys, or head dimensions) with one
 * value broadcast: it vectorises without reordering any one sum, so a
 * score is the same bits in both passes and at every vector width. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/internal.h"
#include "backends/cpu/threads.h"
#include "kernels/common/random.h"

enum { QB = 16, KB = 64 }; /* query rows per block, keys per tile */

/* Sixteen floats as one value: GCC and clang lower it to the widest
 * vectors a clone targets (one AVX-512 register, two AVX2, four SSE2). */
typedef float v16 __attribute__((vector_size(64)));
enum { CHUNKS = KB / 16 };

/* Unaligned loads and stores of 16 floats (through memory: a vector passed
 * by value would take a different ABI in each clone). */
#define LOAD16(v, p) memcpy(&(v), (p), sizeof(v16))
#define STORE16(p, v) memcpy((p), &(v), sizeof(v16))

typedef struct attn_job {
    const ug_attention_args *a;
    int64_t keys;     /* kv_len rounded up to 16: the transposed operands' row length */
    uint64_t counter; /* dropout's first counter, the run's part added */
    float keep;       /* dropout's factor for a kept probability: 1 / (1 - p) */
    int failed;   /* a unit found no memory for its buffers (atomic) */
} attn_job;

/* A unit's buffers, or NULL with the job marked failed. */
static float *buffers(attn_job *job, int64_t floats)
{
    float *p = malloc(sizeof(float) * (size_t)floats);
    if (!p)
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    return p;
}

/* The first element of head bh's rows in an operand laid out as at. */
static char *head_start(const ug_attention_args *a, ug_kview v, ug_attention_layout at, int64_t bh)
{
    const int64_t first = bh / a->heads * at.batch + bh % a->heads * at.head;
    return ug_cpu_ptr(v) + first * (int64_t)ug_dtype_size(v.dtype);
}

/* Rows [0, n) of head bh of an operand, as f32 rows of d. */
static void load_head(const ug_attention_args *a, ug_kview v, ug_attention_layout at, int64_t n, int64_t bh,
                      float *out)
{
    const char *p = head_start(a, v, at, bh);
    const int64_t d = a->head_dim, row_bytes = at.row * (int64_t)ug_dtype_size(v.dtype);
    if (at.row == d)
        ug_cpu_load(p, v.dtype, 1, n * d, out);
    else
        for (int64_t r = 0; r < n; r++)
            ug_cpu_load(p + r * row_bytes, v.dtype, 1, d, out + r * d);
}

static void store_head(const ug_attention_args *a, ug_kview v, ug_attention_layout at, int64_t n, int64_t bh,
                       const float *in)
{
    char *p = head_start(a, v, at, bh);
    const int64_t d = a->head_dim, row_bytes = at.row * (int64_t)ug_dtype_size(v.dtype);
    if (at.row == d)
        ug_cpu_store(p, v.dtype, n * d, in);
    else
        for (int64_t r = 0; r < n; r++)
            ug_cpu_store(p + r * row_bytes, v.dtype, d, in + r * d);
}

/* rows (n x d) transposed into out (d x ld), columns n..ld zero. */
static void transpose(const float *rows, int64_t n, int64_t d, int64_t ld, float *out)
{
    memset(out, 0, sizeof(float) * (size_t)(d * ld));
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < d; c++)
            out[c * ld + r] = rows[r * d + c];
}

/* Two output rows over nc chunks of 16 columns, the sums held in
 * registers (nc is a constant where this is inlined): o += sum over k < m,
 * in order, of w[k * ws] * b[k * ldb + ...]. */
static inline __attribute__((always_inline)) void accumulate2(const float *w0, const float *w1, int64_t ws,
                                                              int64_t m, const float *b, int64_t ldb, int nc,
                                                              float *o0, float *o1)
{
    v16 s0[CHUNKS], s1[CHUNKS];
    for (int j = 0; j < nc; j++) {
        LOAD16(s0[j], o0 + 16 * j);
        LOAD16(s1[j], o1 + 16 * j);
    }
    for (int64_t k = 0; k < m; k++) {
        const float x0 = w0[k * ws], x1 = w1[k * ws];
        for (int j = 0; j < nc; j++) {
            v16 v;
            LOAD16(v, b + k * ldb + 16 * j);
            s0[j] += x0 * v;
            s1[j] += x1 * v;
        }
    }
    for (int j = 0; j < nc; j++) {
        STORE16(o0 + 16 * j, s0[j]);
        STORE16(o1 + 16 * j, s1[j]);
    }
}

/* out[r * KB + t] = sum over c, in order, of a[r * d + c] * bt[c * ld + t],
 * for n rows and the columns t < w rounded up to 16 (bt has them). */
UG_CPU_WIDE
static void tile_products(const float *a, int64_t n, int64_t d, const float *bt, int64_t ld, int64_t w,
                          float *out)
{
    const int nc = (int)((w + 15) / 16);
    for (int64_t r = 0; r < n; r += 2) {
        const float *a0 = a + r * d, *a1 = r + 1 < n ? a0 + d : a0; /* an odd last row twice */
        float *o0 = out + r * KB, *o1 = r + 1 < n ? o0 + KB : o0;
        for (int t = 0; t < 16 * nc; t++)
            o0[t] = o1[t] = 0.0f;
        switch (nc) {
        case 1: accumulate2(a0, a1, 1, d, bt, ld, 1, o0, o1); break;
        case 2: accumulate2(a0, a1, 1, d, bt, ld, 2, o0, o1); break;
        case 3: accumulate2(a0, a1, 1, d, bt, ld, 3, o0, o1); break;
        default: accumulate2(a0, a1, 1, d, bt, ld, CHUNKS, o0, o1); break;
        }
    }
}

/* out[i * d + c] += sum over k < m, in order, of W(i, k) * b[k * d + c] for
 * i < n, where W(i, k) is w[i * KB + k], or w[k * KB + i] with transposed;
 * columns past the last whole 16 one value at a time, in the same order. */
UG_CPU_WIDE
static void tile_accumulate(const float *w, bool transposed, int64_t n, int64_t m, const float *b, int64_t d,
                            float *out)
{
    const int64_t row_step = transposed ? 1 : KB, ws = transposed ? KB : 1;
    for (int64_t i = 0; i < n; i += 2) {
        const bool pair = i + 1 < n;
        const float *w0 = w + i * row_step, *w1 = pair ? w0 + row_step : w0;
        float *o0 = out + i * d, *o1 = pair ? o0 + d : o0;
        for (int64_t c0 = 0; c0 + 16 <= d; c0 += 16 * CHUNKS) {
            const int64_t whole = (d - c0) / 16;
            switch (whole < CHUNKS ? whole : CHUNKS) {
            case 1: accumulate2(w0, w1, ws, m, b + c0, d, 1, o0 + c0, o1 + c0); break;
            case 2: accumulate2(w0, w1, ws, m, b + c0, d, 2, o0 + c0, o1 + c0); break;
            case 3: accumulate2(w0, w1, ws, m, b + c0, d, 3, o0 + c0, o1 + c0); break;
            default: accumulate2(w0, w1, ws, m, b + c0, d, CHUNKS, o0 + c0, o1 + c0); break;
            }
        }
        for (int64_t c = d / 16 * 16; c < d; c++)
            for (int64_t k = 0; k < m; k++) {
                o0[c] += w0[k * ws] * b[k * d + c];
                if (pair)
                    o1[c] += w1[k * ws] * b[k * d + c];
            }
    }
}

/* Raw products to scores: scale, the additive mask, -inf where the causal
 * mask hides a key; s[r * KB + t] pairs query i0 + r with key j0 + t. */
UG_CPU_WIDE
static void finish_scores(const ug_attention_args *a, int64_t bh, int64_t i0, int64_t j0, int64_t n, int64_t m,
                          float *s)
{
    if (!a->mask.mem) {
        const float scale = a->scale;
        for (int64_t r = 0; r < n; r++) {
            float *sr = s + r * KB;
            const int64_t last = a->causal ? i0 + r - j0 : m; /* the last key row r sees, from j0 */
            for (int64_t t = 0; t < m; t++)
                sr[t] = t > last ? -INFINITY : scale * sr[t];
        }
        return;
    }
    const int64_t b = bh / a->heads, h = bh % a->heads;
    for (int64_t r = 0; r < n; r++)
        for (int64_t t = 0; t < m; t++) {
            const int64_t i = i0 + r, j = j0 + t;
            const int64_t at = b * a->mask_strides[0] + h * a->mask_strides[1] + i * a->mask_strides[2] +
                               j * a->mask_strides[3];
            float add;
            ug_cpu_load(ug_cpu_ptr(a->mask) + at * (int64_t)ug_dtype_size(a->mask.dtype), a->mask.dtype, 1, 1, &add);
            s[r * KB + t] = a->causal && j > i ? -INFINITY : a->scale * s[r * KB + t] + add;
        }
}

/* Dropout's factors for a tile, z[r * KB + t] for query i0 + r and key
 * j0 + t (backend.h's counters), or NULL without dropout. */
static const float *dropout_tile(const attn_job *job, int64_t bh, int64_t i0, int64_t j0, int64_t n, int64_t m,
                                 float *z)
{
    const ug_attention_args *a = job->a;
    if (!(a->dropout > 0.0f))
        return NULL;
    for (int64_t r = 0; r < n; r++) {
        const uint64_t first = job->counter + (uint64_t)((bh * a->q_len + i0 + r) * a->kv_len + j0);
        for (int64_t t = 0; t < m; t++)
            z[r * KB + t] = ug_dropout_keep(a->seed, first + (uint64_t)t, a->dropout, job->keep);
    }
    return z;
}

/* The forward pass's tile: running maxima m and sums l of n rows, and acc
 * (n x d, scaled by exp(-m)) take scores s (n x nk) and values v; z (NULL:
 * none) drops probabilities after they are summed. */
UG_CPU_WIDE
static void online_softmax(float *s, int64_t n, int64_t nk, const float *v, int64_t d, float *m, float *l,
                           float *acc, const float *z)
{
    const int64_t eights = (nk + 7) / 8 * 8; /* columns to nk rounded up to 16 are products */
    for (int64_t r = 0; r < n; r++) {
        float *sr = s + r * KB, top = -INFINITY;
        for (int64_t t = 0; t < nk; t++)
            top = sr[t] > top ? sr[t] : top;
        if (top == -INFINITY) { /* every key of the tile hidden */
            for (int64_t t = 0; t < nk; t++)
                sr[t] = 0.0f;
            continue;
        }
        const float next = m[r] > top ? m[r] : top, correction = ug_lane_expf(m[r] - next);
        for (int64_t t = 0; t < nk; t++)
            sr[t] = ug_lane_expf(sr[t] - next);
        for (int64_t t = nk; t < eights; t++)
            sr[t] = 0.0f;
        float lanes[8] = {0}; /* eight running sums: the same at every vector width */
        for (int64_t t0 = 0; t0 < eights; t0 += 8)
            for (int e = 0; e < 8; e++)
                lanes[e] += sr[t0 + e];
        l[r] = l[r] * correction +
               (((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7])));
        for (int64_t c = 0; c < d; c++)
            acc[r * d + c] *= correction;
        m[r] = next;
        for (int64_t t = 0; z && t < nk; t++)
            sr[t] *= z[r * KB + t];
    }
    tile_accumulate(s, false, n, nk, v, d, acc);
}

/* A tile's probabilities and score gradients in place: p = exp(s - lse)
 * in s, ds = p (dp - delta) scale in dp, lse and delta by query row; with
 * dropout's factors z, p z in s and ds = p (z dp - delta) scale. */
UG_CPU_WIDE
static void tile_gradients(float *restrict s, float *restrict dp, int64_t n, int64_t m, const float *lse,
                           const float *delta, float scale, const float *restrict z)
{
    for (int64_t r = 0; r < n; r++) {
        float *restrict sr = s + r * KB, *restrict dr = dp + r * KB;
        const float row_lse = lse[r], row_delta = delta[r];
        for (int64_t t = 0; t < m; t++)
            sr[t] = sr[t] == -INFINITY ? 0.0f : ug_lane_expf(sr[t] - row_lse);
        if (!z) {
            for (int64_t t = 0; t < m; t++)
                dr[t] = sr[t] * (dr[t] - row_delta) * scale;
            continue;
        }
        const float *restrict zr = z + r * KB;
        for (int64_t t = 0; t < m; t++) {
            dr[t] = sr[t] * (zr[t] * dr[t] - row_delta) * scale;
            sr[t] *= zr[t];
        }
    }
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
    const int64_t d = a->head_dim, tq = a->q_len, tk = a->kv_len, ld = job->keys;
    float *q = buffers(job, 2 * tq * d + 2 * ld * d + 2 * QB * KB);
    if (!q)
        return;
    float *o = q + tq * d, *kt = o + tq * d, *v = kt + ld * d, *s = v + ld * d, *z = s + QB * KB;
    for (int64_t bh = begin; bh < end; bh++) {
        load_head(a, a->q, a->q_at, tq, bh, q);
        load_head(a, a->k, a->k_at, tk, bh, v); /* v as scratch for the keys' rows */
        transpose(v, tk, d, ld, kt);
        load_head(a, a->v, a->v_at, tk, bh, v);
        float *lse = (float *)(void *)ug_cpu_ptr(a->lse) + bh * tq;
        for (int64_t i0 = 0; i0 < tq; i0 += QB) {
            const int64_t n = tq - i0 < QB ? tq - i0 : QB, keys = key_end(a, i0, n);
            float m[QB], l[QB], *acc = o + i0 * d;
            memset(acc, 0, sizeof(float) * (size_t)(n * d));
            for (int64_t r = 0; r < n; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
            }
            for (int64_t j0 = 0; j0 < keys; j0 += KB) {
                const int64_t nk = keys - j0 < KB ? keys - j0 : KB;
                tile_products(q + i0 * d, n, d, kt + j0, ld, nk, s);
                finish_scores(a, bh, i0, j0, n, nk, s);
                online_softmax(s, n, nk, v + j0 * d, d, m, l, acc, dropout_tile(job, bh, i0, j0, n, nk, z));
            }
            for (int64_t r = 0; r < n; r++) {
                const float inv = 1.0f / l[r];
                for (int64_t c = 0; c < d; c++)
                    acc[r * d + c] *= inv;
                lse[i0 + r] = m[r] + logf(l[r]);
            }
        }
        store_head(a, a->o, a->o_at, tq, bh, o);
    }
    free(q);
}

/* Each key tile against every query block that sees it: dq by query row
 * in key order, dk and dv by key row in query order. */
static void backward_units(void *ctx, int64_t begin, int64_t end)
{
    attn_job *job = ctx;
    const ug_attention_args *a = job->a;
    const int64_t d = a->head_dim, tq = a->q_len, tk = a->kv_len, ld = job->keys;
    float *q = buffers(job, 4 * tq * d + 5 * ld * d + 3 * QB * KB);
    if (!q)
        return;
    float *dout = q + tq * d, *o = dout + tq * d, *dq = o + tq * d, *k = dq + tq * d, *kt = k + ld * d;
    float *vt = kt + ld * d, *dk = vt + ld * d, *dv = dk + ld * d, *s = dv + ld * d, *dp = s + QB * KB;
    float *z = dp + QB * KB;
    for (int64_t bh = begin; bh < end; bh++) {
        load_head(a, a->q, a->q_at, tq, bh, q);
        load_head(a, a->dout, a->o_at, tq, bh, dout);
        load_head(a, a->o, a->o_at, tq, bh, o);
        load_head(a, a->v, a->v_at, tk, bh, k); /* k as scratch for the values' rows */
        transpose(k, tk, d, ld, vt);
        load_head(a, a->k, a->k_at, tk, bh, k);
        transpose(k, tk, d, ld, kt);
        const float *lse = (const float *)(const void *)ug_cpu_ptr(a->lse) + bh * tq;
        float *delta = (float *)(void *)ug_cpu_ptr(a->delta) + bh * tq;
        for (int64_t i = 0; i < tq; i++) {
            float sum = 0.0f;
            for (int64_t c = 0; c < d; c++)
                sum += dout[i * d + c] * o[i * d + c];
            delta[i] = sum;
        }
        memset(dq, 0, sizeof(float) * (size_t)(tq * d));
        memset(dk, 0, sizeof(float) * (size_t)(2 * ld * d));
        for (int64_t j0 = 0; j0 < tk; j0 += KB) {
            const int64_t nk = tk - j0 < KB ? tk - j0 : KB;
            for (int64_t i0 = a->causal ? j0 / QB * QB : 0; i0 < tq; i0 += QB) {
                const int64_t n = tq - i0 < QB ? tq - i0 : QB;
                const int64_t seen = key_end(a, i0, n) - j0, w = seen < nk ? seen : nk; /* keys the block sees */
                tile_products(q + i0 * d, n, d, kt + j0, ld, w, s);
                finish_scores(a, bh, i0, j0, n, w, s);
                tile_products(dout + i0 * d, n, d, vt + j0, ld, w, dp);
                tile_gradients(s, dp, n, w, lse + i0, delta + i0, a->scale, dropout_tile(job, bh, i0, j0, n, w, z));
                tile_accumulate(dp, false, n, w, k + j0 * d, d, dq + i0 * d);
                tile_accumulate(s, true, w, n, dout + i0 * d, d, dv + j0 * d);
                tile_accumulate(dp, true, w, n, q + i0 * d, d, dk + j0 * d);
            }
        }
        store_head(a, a->dq, a->q_at, tq, bh, dq);
        store_head(a, a->dk, a->k_at, tk, bh, dk);
        store_head(a, a->dv, a->v_at, tk, bh, dv);
    }
    free(q);
}

ug_status ug_cpu_attention(ug_bdev *dev, const ug_attention_args *a)
{
    const int64_t heads = a->batch * a->heads;
    if (heads <= 0 || a->head_dim <= 0 || a->head_dim > UG_ATTENTION_MAX_HEAD_DIM)
        return heads <= 0 ? UG_OK
                          : UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu attention: head dimension %lld",
                                         (long long)a->head_dim);
    attn_job job = {.a = a, .keys = (a->kv_len + 15) / 16 * 16, .counter = a->offset,
                    .keep = 1.0f / (1.0f - a->dropout)};
    if (a->dropout > 0.0f && a->runs.mem)
        job.counter += (uint64_t)*(const float *)(const void *)ug_cpu_ptr(a->runs) << UG_RANDOM_RUN_SHIFT;
    /* Work per head: every query against every key. */
    const int64_t per_head = (a->q_len > 0 ? a->q_len : 1) * (a->kv_len > 0 ? a->kv_len : 1) * a->head_dim;
    ug_cpu_parallel_for(dev->workers, heads, UG_CPU_MIN_PARALLEL / per_head + 1,
                        a->backward ? backward_units : forward_units, &job);
    if (job.failed)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu attention: no host memory for a head's buffers");
    return UG_OK;
}
