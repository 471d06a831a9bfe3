/* Batch normalisation with the formulas of kernels/common/batchnorm.h. x,
 * y, dy and dx are f32, f16 or bf16 (a kernel per type); weights,
 * statistics and arithmetic are f32, each result rounded once to the
 * data's type.
 *
 * A channel holds n * inner values, 100 thousand for a CNN's first layer
 * at batch 128, and a network few channels: one block a channel left most
 * of a GPU idle (350 us a pass on an H100). So each channel is cut into
 * chunks, a block each, in two launches: the first writes each chunk's
 * partial statistics (forward: its count, mean and sum of squared
 * deviations; backward: its sums of dy and dy xhat) to the queue's
 * scratch; the second merges a channel's partials in chunk order (so the
 * result does not depend on timing), in every block of the channel, and
 * applies them to the block's chunk; the channel's first block also
 * writes the per-channel results. Evaluation's forward pass needs no
 * statistics and runs the second launch alone.
 * Device code: backends/hip/batchnorm.hip launches it. */
#ifndef UG_KERNELS_HIP_BATCHNORM_H
#define UG_KERNELS_HIP_BATCHNORM_H

#include "kernels/hip/common.h"
#include "kernels/common/batchnorm.h"

enum { BN_FORWARD_PARTS = 3, BN_BACKWARD_PARTS = 2, BN_MIN_CHUNK = 2048 };

typedef struct batchnorm_k {
    const void *x, *dy; /* T */
    void *y, *dx;       /* T */
    const float *weight, *bias;
    float *mean, *rstd, *running_mean, *running_var, *dweight, *dbias;
    float *parts;       /* [c, chunks, BN_*_PARTS] */
    int64_t n, c, inner, count, chunk, chunks;
    float eps, momentum;
    bool training, update_running, relu;
} batchnorm_k;

/* The channel's j-th value: 32-bit division where the sizes allow (64-bit
 * division takes a GPU tens of instructions). */
UG_DEV int64_t bn_at(const batchnorm_k &k, int64_t ch, int64_t j)
{
    if (k.count <= UINT32_MAX) {
        const uint32_t row = (uint32_t)j / (uint32_t)k.inner;
        return ((int64_t)row * k.c + ch) * k.inner + ((uint32_t)j - row * (uint32_t)k.inner);
    }
    return ug_bn_index(j, ch, k.c, k.inner);
}

/* The block's chunk of channel ch: [*j0, *j1). */
UG_DEV void bn_chunk(const batchnorm_k &k, int64_t b, int64_t *j0, int64_t *j1)
{
    *j0 = b * k.chunk;
    *j1 = *j0 + k.chunk < k.count ? *j0 + k.chunk : k.count;
}

/* Grid (chunks, channels): each chunk's count, mean and sum of squared
 * deviations from its mean (two passes over the chunk, as accurate as
 * the whole channel's two). */
template <typename T>
__global__ void ug_batchnorm_stats_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const T *x = (const T *)k.x;
    for (int64_t ch = blockIdx.y; ch < k.c; ch += gridDim.y) {
        int64_t j0, j1;
        bn_chunk(k, blockIdx.x, &j0, &j1);
        float s = 0.0f;
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x)
            s += ug_widen(x[bn_at(k, ch, j)]);
        const float mean = ug_block_sum(s, sh) / (float)(j1 - j0);
        float q = 0.0f;
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            const float d = ug_widen(x[bn_at(k, ch, j)]) - mean;
            q += d * d;
        }
        q = ug_block_sum(q, sh);
        if (threadIdx.x == 0) {
            float *p = k.parts + (ch * k.chunks + blockIdx.x) * BN_FORWARD_PARTS;
            p[0] = (float)(j1 - j0);
            p[1] = mean;
            p[2] = q;
        }
    }
}

/* Grid (chunks, channels): the channel's statistics (merged from the
 * chunks' in order, Chan's pairwise formulas, in training; the running
 * ones in evaluation), then y over the block's chunk. */
template <typename T>
__global__ void ug_batchnorm_fwd_kernel(batchnorm_k k)
{
    __shared__ float stat[2]; /* mean, rstd */
    const T *x = (const T *)k.x;
    T *y = (T *)k.y;
    for (int64_t ch = blockIdx.y; ch < k.c; ch += gridDim.y) {
        if (threadIdx.x == 0) {
            float mean, rstd;
            if (k.training) {
                float count = 0.0f, m2 = 0.0f;
                mean = 0.0f;
                for (int64_t b = 0; b < k.chunks; b++) {
                    const float *p = k.parts + (ch * k.chunks + b) * BN_FORWARD_PARTS;
                    const float total = count + p[0], delta = p[1] - mean;
                    mean += delta * (p[0] / total);
                    m2 += p[2] + delta * delta * (count * p[0] / total);
                    count = total;
                }
                rstd = ug_bn_rstd(m2 / (float)k.count, k.eps);
                if (blockIdx.x == 0 && k.update_running) {
                    k.running_mean[ch] = ug_bn_running(k.running_mean[ch], k.momentum, mean);
                    k.running_var[ch] = ug_bn_running(k.running_var[ch], k.momentum, m2 / (float)(k.count - 1));
                }
            } else {
                mean = k.running_mean[ch];
                rstd = ug_bn_rstd(k.running_var[ch], k.eps);
            }
            if (blockIdx.x == 0) {
                k.mean[ch] = mean;
                k.rstd[ch] = rstd;
            }
            stat[0] = mean;
            stat[1] = rstd;
        }
        __syncthreads();
        const float scale = ug_bn_scale(stat[1], k.weight[ch]);
        const float shift = ug_bn_shift(stat[0], scale, k.bias[ch]);
        int64_t j0, j1;
        bn_chunk(k, blockIdx.x, &j0, &j1);
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            y[at] = ug_narrow<T>(ug_bn_output(ug_widen(x[at]), scale, shift, k.relu));
        }
        __syncthreads(); /* stat is written again for the next channel */
    }
}

/* Grid (chunks, channels): each chunk's sums of dy and dy xhat. */
template <typename T>
__global__ void ug_batchnorm_grad_sums_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const T *x = (const T *)k.x, *dy = (const T *)k.dy;
    for (int64_t ch = blockIdx.y; ch < k.c; ch += gridDim.y) {
        const float mean = k.mean[ch], rstd = k.rstd[ch];
        int64_t j0, j1;
        bn_chunk(k, blockIdx.x, &j0, &j1);
        float s = 0.0f, sx = 0.0f;
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float g = ug_widen(dy[at]);
            s += g;
            sx += g * ((ug_widen(x[at]) - mean) * rstd);
        }
        s = ug_block_sum(s, sh);
        sx = ug_block_sum(sx, sh);
        if (threadIdx.x == 0) {
            float *p = k.parts + (ch * k.chunks + blockIdx.x) * BN_BACKWARD_PARTS;
            p[0] = s;
            p[1] = sx;
        }
    }
}

/* Grid (chunks, channels): the channel's sums, added in chunk order, then
 * dx over the block's chunk. */
template <typename T>
__global__ void ug_batchnorm_bwd_kernel(batchnorm_k k)
{
    __shared__ float sums[2]; /* of dy, of dy xhat */
    const T *x = (const T *)k.x, *dy = (const T *)k.dy;
    T *dx = (T *)k.dx;
    for (int64_t ch = blockIdx.y; ch < k.c; ch += gridDim.y) {
        if (threadIdx.x == 0) {
            float s = 0.0f, sx = 0.0f;
            for (int64_t b = 0; b < k.chunks; b++) {
                const float *p = k.parts + (ch * k.chunks + b) * BN_BACKWARD_PARTS;
                s += p[0];
                sx += p[1];
            }
            if (blockIdx.x == 0) {
                k.dweight[ch] = sx;
                k.dbias[ch] = s;
            }
            sums[0] = s;
            sums[1] = sx;
        }
        __syncthreads();
        const float mean = k.mean[ch], rstd = k.rstd[ch];
        const float scale = ug_bn_scale(rstd, k.weight[ch]);
        const float mean_dy = k.training ? sums[0] / (float)k.count : 0.0f;
        const float mean_dy_xhat = k.training ? sums[1] / (float)k.count : 0.0f;
        int64_t j0, j1;
        bn_chunk(k, blockIdx.x, &j0, &j1);
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float xhat = (ug_widen(x[at]) - mean) * rstd;
            dx[at] = ug_narrow<T>(ug_bn_input_grad(scale, ug_widen(dy[at]), xhat, mean_dy, mean_dy_xhat));
        }
        __syncthreads(); /* sums is written again for the next channel */
    }
}

#endif
