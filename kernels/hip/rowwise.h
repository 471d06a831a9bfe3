/* Row-wise kernels: softmax / log-softmax, cross-entropy (forward and
 * backward) and LayerNorm (forward and backward). One block of 256 threads
 * per row (rows past the grid loop); row statistics come from block trees,
 * so long rows keep f32 accuracy.
 * Device code: backends/hip/rowwise.hip launches it. */
#ifndef UG_KERNELS_HIP_ROWWISE_H
#define UG_KERNELS_HIP_ROWWISE_H

#include "kernels/hip/reduce_block.h"

/* ---- softmax ---------------------------------------------------------- */

typedef struct softmax_k {
    bool log;
    int t;
    const char *x;
    char *y;
    int64_t rows, cols;
} softmax_k;

__global__ void ug_softmax_kernel(softmax_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const int64_t base = r * k.cols;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x)
            m = ug_max_nan(m, ug_ld(k.x, k.t, base + c));
        m = ug_block_max(m, sh);
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x)
            s += expf(ug_ld(k.x, k.t, base + c) - m);
        s = ug_block_sum(s, sh);
        const float ls = logf(s), inv = 1.0f / s;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float d = ug_ld(k.x, k.t, base + c) - m;
            ug_st(k.y, k.t, base + c, k.log ? d - ls : expf(d) * inv);
        }
    }
}

/* ---- cross-entropy ---------------------------------------------------- */

typedef struct xent_k {
    const char *x;
    int xt;
    const char *labels;
    bool labels64; /* i64 labels, else i32 */
    bool ignore;   /* rows whose label is ignore_index count for nothing */
    int64_t ignore_index;
    char *loss, *grad;
    int loss_t, grad_t;
    const float *dloss;
    float *counted; /* forward: the rows not ignored, written with the mean; backward: read */
    float *check;   /* forward: a numeric check of the logits, NULL: none */
    int64_t rows, cols;
    float smoothing, scale;
    /* Forward: the mean over the rows not ignored, taken by the launch's
     * last block to finish (counted in *count) with the reduce kernel's
     * one-block code, its divisor the rows counted there. */
    bool with_mean;
    unsigned *count;
    reduce_k mean;
} xent_k;

UG_DEV int64_t ug_xent_label(const xent_k &k, int64_t r)
{
    return k.labels64 ? ((const int64_t *)k.labels)[r] : (int64_t)((const int32_t *)k.labels)[r];
}

__global__ void ug_xent_kernel(xent_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float nan = __int_as_float(0x7fc00000);
    /* backward: scale * dloss / the rows counted (each 1 when absent) */
    const float g = k.grad ? k.scale * (k.dloss ? k.dloss[0] : 1.0f) / (k.counted ? k.counted[0] : 1.0f) : 0.0f;
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const int64_t base = r * k.cols;
        const int64_t label = ug_xent_label(k, r);
        const bool ignored = k.ignore && label == k.ignore_index;
        const bool valid = !ignored && label >= 0 && label < k.cols;
        float m = -INFINITY;
        bool bad = false;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float v = ug_ld(k.x, k.xt, base + c);
            m = ug_max_nan(m, v);
            bad |= ug_nonfinite(v);
        }
        ug_check_flag(k.check, bad);
        m = ug_block_max(m, sh);
        float s = 0.0f, sd = 0.0f; /* sum exp(x - m), sum (x - m) */
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float d = ug_ld(k.x, k.xt, base + c) - m;
            s += expf(d);
            sd += d;
        }
        s = ug_block_sum(s, sh);
        const float ls = logf(s);
        const float on = 1.0f - k.smoothing, off = k.smoothing / (float)k.cols;
        if (!k.grad) {
            /* -sum_c target_c logp_c with logp_c = d_c - ls. */
            if (k.smoothing != 0.0f)
                sd = ug_block_sum(sd, sh);
            if (threadIdx.x == 0) {
                float loss = ignored ? 0.0f : nan;
                if (valid) {
                    const float lp = ug_ld(k.x, k.xt, base + label) - m - ls;
                    loss = -on * lp;
                    if (k.smoothing != 0.0f)
                        loss -= off * (sd - (float)k.cols * ls);
                }
                ug_st(k.loss, k.loss_t, r, loss);
            }
            continue;
        }
        const float inv = 1.0f / s;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            float v = 0.0f;
            if (valid) {
                const float p = expf(ug_ld(k.x, k.xt, base + c) - m) * inv;
                v = (p - ((c == label ? on : 0.0f) + off)) * g;
            }
            ug_st(k.grad, k.grad_t, base + c, v);
        }
    }
    if (!k.with_mean || !ug_last_block(k.count, gridDim.x))
        return;
    /* The rows not ignored (integers: exact in f32 to 2^24), then their
     * losses' mean as the reduce kernel's one block would take it with
     * that count (the same bits as a mean of every row when none is
     * ignored), saving both launches. */
    int64_t mine = 0;
    for (int64_t r = threadIdx.x; r < k.rows; r += blockDim.x)
        mine += !(k.ignore && ug_xent_label(k, r) == k.ignore_index);
    const float n = ug_block_sum((float)mine, sh);
    reduce_k mean = k.mean;
    mean.count = n;
    ug_reduce_block(mean, 0, threadIdx.x, 1, UG_HIP_BLOCK, 0, 0, 1, 0, 1);
    if (threadIdx.x == 0 && k.counted)
        k.counted[0] = n;
}

/* ---- LayerNorm -------------------------------------------------------- */

/* rms: RMSNorm, the mean taken as 0 (neither computed nor read). */
typedef struct layernorm_k {
    const float *x, *gamma, *beta, *dy;
    float *y, *mean, *rstd, *dx, *terms; /* terms: NULL, or dy * xhat written */
    int64_t rows, cols;
    float eps;
    bool rms;
} layernorm_k;

__global__ void ug_layernorm_fwd_kernel(layernorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float inv_n = 1.0f / (float)k.cols;
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const float *x = k.x + r * k.cols;
        float mean = 0.0f;
        if (!k.rms) {
            float s = 0.0f;
            for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x)
                s += x[c];
            mean = ug_block_sum(s, sh) * inv_n;
        }
        /* Two passes (mean, then squared deviations): no cancellation. */
        float q = 0.0f;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float d = x[c] - mean;
            q += d * d;
        }
        const float rstd = 1.0f / sqrtf(ug_block_sum(q, sh) * inv_n + k.eps);
        float *y = k.y + r * k.cols;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float h = (x[c] - mean) * rstd;
            y[c] = h * (k.gamma ? k.gamma[c] : 1.0f) + (k.beta ? k.beta[c] : 0.0f);
        }
        if (threadIdx.x == 0) {
            if (k.mean && !k.rms)
                k.mean[r] = mean;
            if (k.rstd)
                k.rstd[r] = rstd;
        }
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma; RMSNorm
 * drops the mean(g) term. */
__global__ void ug_layernorm_bwd_kernel(layernorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float inv_n = 1.0f / (float)k.cols;
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const float *x = k.x + r * k.cols, *dy = k.dy + r * k.cols;
        const float mean = k.rms ? 0.0f : k.mean[r], rstd = k.rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float g = dy[c] * (k.gamma ? k.gamma[c] : 1.0f);
            sg += g;
            sgx += g * (x[c] - mean) * rstd;
        }
        const float mg = k.rms ? 0.0f : ug_block_sum(sg, sh) * inv_n;
        const float mgx = ug_block_sum(sgx, sh) * inv_n;
        float *dx = k.dx + r * k.cols;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float g = dy[c] * (k.gamma ? k.gamma[c] : 1.0f);
            dx[c] = rstd * (g - mg - (x[c] - mean) * rstd * mgx);
            if (k.terms)
                k.terms[r * k.cols + c] = dy[c] * ((x[c] - mean) * rstd);
        }
    }
}

#endif
