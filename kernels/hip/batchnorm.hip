/* Batch normalisation, one block per channel, with the formulas of
 * kernels/common/batchnorm.h. x, y, dy and dx are f32, f16 or bf16 (a
 * kernel per type); weights, statistics and arithmetic are f32, each result
 * rounded once to the data's type. */
#include "kernels/hip/common.h"
#include "kernels/common/batchnorm.h"

typedef struct batchnorm_k {
    const void *x, *dy; /* T */
    void *y, *dx;       /* T */
    const float *weight, *bias;
    float *mean, *rstd, *running_mean, *running_var, *dweight, *dbias;
    int64_t n, c, inner;
    float eps, momentum;
    bool training, update_running, relu;
} batchnorm_k;

UG_DEV int64_t bn_at(const batchnorm_k &k, int64_t ch, int64_t j)
{
    return ug_bn_index(j, ch, k.c, k.inner);
}

/* T: the type of x, y, dy and dx (float, __half, ug_bf16). */
template <typename T>
__global__ void ug_batchnorm_fwd_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const T *x = (const T *)k.x;
    T *y = (T *)k.y;
    const int64_t count = k.n * k.inner;
    for (int64_t ch = blockIdx.x; ch < k.c; ch += gridDim.x) {
        float mean, rstd;
        if (k.training) {
            float s = 0.0f;
            for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
                s += ug_widen(x[bn_at(k, ch, j)]);
            mean = ug_block_sum(s, sh) / (float)count;
            float q = 0.0f;
            for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
                const float d = ug_widen(x[bn_at(k, ch, j)]) - mean;
                q += d * d;
            }
            q = ug_block_sum(q, sh);
            rstd = ug_bn_rstd(q / (float)count, k.eps);
            if (threadIdx.x == 0 && k.update_running) {
                k.running_mean[ch] = ug_bn_running(k.running_mean[ch], k.momentum, mean);
                k.running_var[ch] = ug_bn_running(k.running_var[ch], k.momentum, q / (float)(count - 1));
            }
        } else {
            mean = k.running_mean[ch];
            rstd = ug_bn_rstd(k.running_var[ch], k.eps);
        }
        if (threadIdx.x == 0) {
            k.mean[ch] = mean;
            k.rstd[ch] = rstd;
        }
        const float scale = ug_bn_scale(rstd, k.weight[ch]);
        const float shift = ug_bn_shift(mean, scale, k.bias[ch]);
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            y[at] = ug_narrow<T>(ug_bn_output(ug_widen(x[at]), scale, shift, k.relu));
        }
    }
}

template <typename T>
__global__ void ug_batchnorm_bwd_kernel(batchnorm_k k)
{
    __shared__ float sh[UG_HIP_BLOCK];
    const T *x = (const T *)k.x, *dy = (const T *)k.dy;
    T *dx = (T *)k.dx;
    const int64_t count = k.n * k.inner;
    for (int64_t ch = blockIdx.x; ch < k.c; ch += gridDim.x) {
        const float mean = k.mean[ch], rstd = k.rstd[ch];
        float s = 0.0f, sx = 0.0f;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float g = ug_widen(dy[at]);
            s += g;
            sx += g * ((ug_widen(x[at]) - mean) * rstd);
        }
        s = ug_block_sum(s, sh);
        sx = ug_block_sum(sx, sh);
        if (threadIdx.x == 0) {
            k.dweight[ch] = sx;
            k.dbias[ch] = s;
        }
        const float scale = ug_bn_scale(rstd, k.weight[ch]);
        const float mean_dy = k.training ? s / (float)count : 0.0f;
        const float mean_dy_xhat = k.training ? sx / (float)count : 0.0f;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float xhat = (ug_widen(x[at]) - mean) * rstd;
            dx[at] = ug_narrow<T>(ug_bn_input_grad(scale, ug_widen(dy[at]), xhat, mean_dy, mean_dy_xhat));
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
    k.x = ug_hip_ptr(&a->x);
    k.dy = ug_hip_ptr(&a->dy);
    k.y = ug_hip_ptr(&a->y);
    k.dx = ug_hip_ptr(&a->dx);
    k.weight = (const float *)ug_hip_ptr(&a->weight);
    k.bias = (const float *)ug_hip_ptr(&a->bias);
    k.mean = (float *)ug_hip_ptr(&a->mean);
    k.rstd = (float *)ug_hip_ptr(&a->rstd);
    k.running_mean = (float *)ug_hip_ptr(&a->running_mean);
    k.running_var = (float *)ug_hip_ptr(&a->running_var);
    k.dweight = (float *)ug_hip_ptr(&a->dweight);
    k.dbias = (float *)ug_hip_ptr(&a->dbias);
    k.n = a->n;
    k.c = a->c;
    k.inner = a->inner;
    k.eps = a->eps;
    k.momentum = a->momentum;
    k.training = a->training;
    k.update_running = a->update_running;
    k.relu = a->relu;
    const unsigned g = ug_hip_blocks(a->c, 1);
    return ug_with_type(a->x.dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        if (a->backward)
            ug_batchnorm_bwd_kernel<T><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
        else
            ug_batchnorm_fwd_kernel<T><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
        return ug_hip_launched("batch norm");
    });
}
