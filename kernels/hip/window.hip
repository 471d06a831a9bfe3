/* Convolution and pooling kernels (grid-stride, one thread per result
 * element, with the formulas of kernels/common/window.h) and batch
 * normalisation (one block per channel). All f32. */
#include "kernels/hip/common.h"
#include "kernels/common/window.h"

enum window_kind { IM2COL, COL2IM, MAXPOOL_FWD, MAXPOOL_BWD, AVGPOOL_FWD, AVGPOOL_BWD };

typedef struct window_k {
    int kind;
    const float *in;
    const int *index_in;
    float *out;
    int *index_out;
    int64_t count;
    ug_window2d w;
} window_k;

__global__ void ug_window_kernel(window_k k)
{
    const ug_window2d &w = k.w;
#define ARGS w.n, w.c, w.h, w.w, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < k.count;
         i += (int64_t)gridDim.x * blockDim.x) {
        switch (k.kind) {
        case IM2COL: k.out[i] = ug_im2col_at(k.in, i, ARGS); break;
        case COL2IM: k.out[i] = ug_col2im_at(k.in, i, ARGS); break;
        case MAXPOOL_FWD: {
            int at;
            k.out[i] = ug_maxpool_at(k.in, i, &at, ARGS);
            k.index_out[i] = at;
            break;
        }
        case MAXPOOL_BWD: k.out[i] = ug_maxpool_grad_at(k.in, k.index_in, i, ARGS); break;
        case AVGPOOL_FWD: k.out[i] = ug_avgpool_at(k.in, i, ARGS); break;
        default: k.out[i] = ug_avgpool_grad_at(k.in, i, ARGS); break;
        }
    }
#undef ARGS
}

static ug_status launch_window(ug_bdev *dev, window_k *k, const char *name)
{
    if (k->count <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    ug_window_kernel<<<ug_hip_blocks(k->count, UG_HIP_BLOCK), UG_HIP_BLOCK, 0, dev->stream>>>(*k);
    return ug_hip_launched(name);
}

ug_status ug_hip_im2col(ug_bdev *dev, const ug_im2col_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    if (a->to_image) {
        k.kind = COL2IM;
        k.in = (const float *)ug_hip_ptr(&a->col);
        k.out = (float *)ug_hip_ptr(&a->image);
        k.count = w.n * w.c * w.h * w.w;
        return launch_window(dev, &k, "col2im");
    }
    k.kind = IM2COL;
    k.in = (const float *)ug_hip_ptr(&a->image);
    k.out = (float *)ug_hip_ptr(&a->col);
    k.count = w.n * w.c * w.kh * w.kw * w.oh * w.ow;
    return launch_window(dev, &k, "im2col");
}

ug_status ug_hip_pool2d(ug_bdev *dev, const ug_pool_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    const bool max = a->kind == UG_POOL_MAX;
    if (a->backward) {
        k.kind = max ? MAXPOOL_BWD : AVGPOOL_BWD;
        k.in = (const float *)ug_hip_ptr(&a->dy);
        k.index_in = max ? (const int *)ug_hip_ptr(&a->index) : NULL;
        k.out = (float *)ug_hip_ptr(&a->dx);
        k.count = w.n * w.c * w.h * w.w;
    } else {
        k.kind = max ? MAXPOOL_FWD : AVGPOOL_FWD;
        k.in = (const float *)ug_hip_ptr(&a->x);
        k.out = (float *)ug_hip_ptr(&a->y);
        k.index_out = max ? (int *)ug_hip_ptr(&a->index) : NULL;
        k.count = w.n * w.c * w.oh * w.ow;
    }
    return launch_window(dev, &k, max ? "max pool" : "average pool");
}

typedef struct batchnorm_k {
    const float *x, *weight, *bias, *dy;
    float *y, *mean, *rstd, *running_mean, *running_var, *dx, *dweight, *dbias;
    int64_t n, c, inner;
    float eps, momentum;
    bool training, update_running;
} batchnorm_k;

/* Element j of channel ch in x [n, c, inner]. */
UG_DEV int64_t bn_at(const batchnorm_k &k, int64_t ch, int64_t j)
{
    return (j / k.inner * k.c + ch) * k.inner + j % k.inner;
}

__global__ void ug_batchnorm_fwd_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const int64_t count = k.n * k.inner;
    for (int64_t ch = blockIdx.x; ch < k.c; ch += gridDim.x) {
        float mean, rstd;
        if (k.training) {
            float s = 0.0f;
            for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
                s += k.x[bn_at(k, ch, j)];
            mean = ug_block_sum(s, sh) / (float)count;
            float q = 0.0f;
            for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
                const float d = k.x[bn_at(k, ch, j)] - mean;
                q += d * d;
            }
            q = ug_block_sum(q, sh);
            rstd = 1.0f / sqrtf(q / (float)count + k.eps);
            if (threadIdx.x == 0 && k.update_running) {
                k.running_mean[ch] = (1.0f - k.momentum) * k.running_mean[ch] + k.momentum * mean;
                k.running_var[ch] = (1.0f - k.momentum) * k.running_var[ch] +
                                    k.momentum * (q / (float)(count - 1));
            }
        } else {
            mean = k.running_mean[ch];
            rstd = 1.0f / sqrtf(k.running_var[ch] + k.eps);
        }
        if (threadIdx.x == 0) {
            k.mean[ch] = mean;
            k.rstd[ch] = rstd;
        }
        const float scale = rstd * k.weight[ch], shift = k.bias[ch] - mean * scale;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            k.y[at] = k.x[at] * scale + shift;
        }
    }
}

__global__ void ug_batchnorm_bwd_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const int64_t count = k.n * k.inner;
    for (int64_t ch = blockIdx.x; ch < k.c; ch += gridDim.x) {
        const float mean = k.mean[ch], rstd = k.rstd[ch];
        float s = 0.0f, sx = 0.0f;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            s += k.dy[at];
            sx += k.dy[at] * ((k.x[at] - mean) * rstd);
        }
        s = ug_block_sum(s, sh);
        sx = ug_block_sum(sx, sh);
        if (threadIdx.x == 0) {
            k.dweight[ch] = sx;
            k.dbias[ch] = s;
        }
        const float scale = rstd * k.weight[ch];
        const float mean_dy = k.training ? s / (float)count : 0.0f;
        const float mean_dy_xhat = k.training ? sx / (float)count : 0.0f;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float xhat = (k.x[at] - mean) * rstd;
            k.dx[at] = scale * (k.dy[at] - mean_dy - xhat * mean_dy_xhat);
        }
    }
}

ug_status ug_hip_batchnorm(ug_bdev *dev, const ug_batchnorm_args *a)
{
    if (a->c <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    batchnorm_k k;
    k.x = (const float *)ug_hip_ptr(&a->x);
    k.weight = (const float *)ug_hip_ptr(&a->weight);
    k.bias = (const float *)ug_hip_ptr(&a->bias);
    k.dy = (const float *)ug_hip_ptr(&a->dy);
    k.y = (float *)ug_hip_ptr(&a->y);
    k.mean = (float *)ug_hip_ptr(&a->mean);
    k.rstd = (float *)ug_hip_ptr(&a->rstd);
    k.running_mean = (float *)ug_hip_ptr(&a->running_mean);
    k.running_var = (float *)ug_hip_ptr(&a->running_var);
    k.dx = (float *)ug_hip_ptr(&a->dx);
    k.dweight = (float *)ug_hip_ptr(&a->dweight);
    k.dbias = (float *)ug_hip_ptr(&a->dbias);
    k.n = a->n;
    k.c = a->c;
    k.inner = a->inner;
    k.eps = a->eps;
    k.momentum = a->momentum;
    k.training = a->training;
    k.update_running = a->update_running;
    const unsigned g = ug_hip_blocks(a->c, 1);
    if (a->backward)
        ug_batchnorm_bwd_kernel<<<g, UG_HIP_BLOCK, 0, dev->stream>>>(k);
    else
        ug_batchnorm_fwd_kernel<<<g, UG_HIP_BLOCK, 0, dev->stream>>>(k);
    return ug_hip_launched("batch norm");
}
