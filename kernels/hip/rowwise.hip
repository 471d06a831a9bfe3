/* Row-wise kernels: softmax / log-softmax, cross-entropy (forward and
 * backward) and LayerNorm (forward and backward). One block of 256 threads
 * per row (rows past the grid loop); row statistics come from block trees,
 * so long rows keep f32 accuracy. */
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

ug_status ug_hip_softmax(ug_bdev *dev, const ug_softmax_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    softmax_k k = {a->log, (int)a->x.dtype, ug_hip_ptr(&a->x), ug_hip_ptr(&a->y), a->rows, a->cols};
    ug_softmax_kernel<<<ug_hip_blocks(a->rows, 1), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("softmax");
}

/* ---- cross-entropy ---------------------------------------------------- */

typedef struct xent_k {
    const char *x;
    int xt;
    const int32_t *labels;
    char *loss, *grad;
    int loss_t, grad_t;
    const float *dloss;
    float *check; /* forward: a numeric check of the logits, NULL: none */
    int64_t rows, cols;
    float smoothing, scale;
    /* Forward: the row losses' mean, taken by the launch's last block to
     * finish (counted in *count), or not here (mean_in_last false). */
    bool mean_in_last;
    unsigned *count;
    reduce_k mean;
} xent_k;

__global__ void ug_xent_kernel(xent_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float nan = __int_as_float(0x7fc00000);
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const int64_t base = r * k.cols;
        const int32_t label = k.labels[r];
        const bool valid = label >= 0 && label < k.cols;
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
                float loss = nan;
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
        const float g = k.scale * (k.dloss ? k.dloss[0] : 1.0f), inv = 1.0f / s;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            float v = 0.0f;
            if (valid) {
                const float p = expf(ug_ld(k.x, k.xt, base + c) - m) * inv;
                v = (p - ((c == label ? on : 0.0f) + off)) * g;
            }
            ug_st(k.grad, k.grad_t, base + c, v);
        }
    }
    /* The row losses' mean, as the reduce kernel's one block would take
     * it (the same bits), saving its launch. */
    if (k.mean_in_last && ug_last_block(k.count, gridDim.x))
        ug_reduce_block(k.mean, 0, threadIdx.x, 1, UG_HIP_BLOCK, 0, 0, 1, 0, 1);
}

ug_status ug_hip_cross_entropy(ug_bdev *dev, const ug_xent_args *a)
{
    if (a->rows <= 0)
        return UG_OK;
    if (a->cols <= 0) /* no row kernel; the mean of what the losses hold */
        return a->mean.y.mem ? ug_hip_reduce(dev, &a->mean) : UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    xent_k k = {};
    k.x = ug_hip_ptr(&a->logits);
    k.xt = a->logits.dtype;
    k.labels = (const int32_t *)ug_hip_ptr(&a->labels);
    k.loss = ug_hip_ptr(&a->loss);
    k.loss_t = a->loss.dtype;
    k.grad = ug_hip_ptr(&a->grad);
    k.grad_t = a->grad.dtype;
    k.dloss = (const float *)ug_hip_ptr(&a->dloss);
    k.check = k.grad ? NULL : (float *)ug_hip_ptr(&a->check);
    if (k.check && a->check.dtype != UG_F32)
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: cross_entropy's check flag must be f32", UG_HIP_BACKEND);
    k.rows = a->rows;
    k.cols = a->cols;
    k.smoothing = a->smoothing;
    k.scale = a->scale;
    ug_hip_queue *q = ug_hip_current(dev);
    const bool with_mean = a->mean.y.mem && !k.grad;
    if (with_mean) {
        int bx;
        if ((st = ug_hip_reduce_plan(dev, &a->mean, &k.mean, &bx)) != UG_OK)
            return st;
        /* Where the reduce kernel would take it in one block (a batch's
         * row losses: fewer than 16384), the last block does. */
        k.mean_in_last = k.mean.splits == 1 && k.mean.outer == 1 && k.mean.inner == 1 && bx == 1;
        k.count = q->block_counts;
    }
    ug_xent_kernel<<<ug_hip_blocks(a->rows, 1), UG_HIP_BLOCK, 0, q->stream>>>(k);
    st = ug_hip_launched("cross_entropy");
    return st == UG_OK && with_mean && !k.mean_in_last ? ug_hip_reduce(dev, &a->mean) : st;
}

/* ---- LayerNorm -------------------------------------------------------- */

typedef struct layernorm_k {
    const float *x, *gamma, *beta, *dy;
    float *y, *mean, *rstd, *dx;
    int64_t rows, cols;
    float eps;
} layernorm_k;

__global__ void ug_layernorm_fwd_kernel(layernorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float inv_n = 1.0f / (float)k.cols;
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const float *x = k.x + r * k.cols;
        float s = 0.0f;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x)
            s += x[c];
        const float mean = ug_block_sum(s, sh) * inv_n;
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
            if (k.mean)
                k.mean[r] = mean;
            if (k.rstd)
                k.rstd[r] = rstd;
        }
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma. */
__global__ void ug_layernorm_bwd_kernel(layernorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const float inv_n = 1.0f / (float)k.cols;
    for (int64_t r = blockIdx.x; r < k.rows; r += gridDim.x) {
        const float *x = k.x + r * k.cols, *dy = k.dy + r * k.cols;
        const float mean = k.mean[r], rstd = k.rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float g = dy[c] * (k.gamma ? k.gamma[c] : 1.0f);
            sg += g;
            sgx += g * (x[c] - mean) * rstd;
        }
        const float mg = ug_block_sum(sg, sh) * inv_n, mgx = ug_block_sum(sgx, sh) * inv_n;
        float *dx = k.dx + r * k.cols;
        for (int64_t c = threadIdx.x; c < k.cols; c += blockDim.x) {
            const float g = dy[c] * (k.gamma ? k.gamma[c] : 1.0f);
            dx[c] = rstd * (g - mg - (x[c] - mean) * rstd * mgx);
        }
    }
}

ug_status ug_hip_layernorm(ug_bdev *dev, const ug_layernorm_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    layernorm_k k;
    k.x = (const float *)ug_hip_ptr(&a->x);
    k.gamma = (const float *)ug_hip_ptr(&a->gamma);
    k.beta = (const float *)ug_hip_ptr(&a->beta);
    k.dy = (const float *)ug_hip_ptr(&a->dy);
    k.y = (float *)ug_hip_ptr(&a->y);
    k.mean = (float *)ug_hip_ptr(&a->mean);
    k.rstd = (float *)ug_hip_ptr(&a->rstd);
    k.dx = (float *)ug_hip_ptr(&a->dx);
    k.rows = a->rows;
    k.cols = a->cols;
    k.eps = a->eps;
    const unsigned g = ug_hip_blocks(a->rows, 1);
    if (k.dx) {
        if (!k.dy || !k.mean || !k.rstd)
            return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                          "%s: layernorm backward needs dy, mean and rstd",
                                          UG_HIP_BACKEND);
        ug_layernorm_bwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    } else {
        ug_layernorm_fwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    }
    return ug_hip_launched("layernorm");
}
