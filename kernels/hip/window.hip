/* Convolution and pooling kernels (grid-stride, one thread per result
 * element, with the formulas of kernels/common/window.h) and batch
 * normalisation (one block per channel). The data (image and col; x, y, dy
 * and dx) are f32, f16 or bf16, one type per call and a kernel per type;
 * the index and batch norm's per-channel values are i32 and f32, and all
 * arithmetic is f32, each result rounded once to the data's type. */
#include "kernels/hip/common.h"
#include "kernels/common/window.h"

/* window.h's formulas for f16 and bf16 data: overloads of its f32 functions
 * (same names, by the pointer's type), so one template calls them all. */
#define UG_WINDOW_LD_WIDEN(p, i) ug_widen((p)[i])
UG_WINDOW_FUNCTIONS(, __half, UG_WINDOW_LD_WIDEN)
UG_WINDOW_FUNCTIONS(, ug_bf16, UG_WINDOW_LD_WIDEN)

enum window_kind { IM2COL, COL2IM, MAXPOOL_FWD, MAXPOOL_BWD, AVGPOOL_FWD, AVGPOOL_BWD };

typedef struct window_k {
    int kind;
    const void *in; /* T */
    const int *index_in;
    void *out;      /* T */
    int *index_out;
    int64_t count;
    ug_window2d w;
} window_k;

/* T: the data's type (float, __half, ug_bf16). */
template <typename T>
__global__ void ug_window_kernel(window_k k)
{
    const ug_window2d &w = k.w;
    const T *in = (const T *)k.in;
    T *out = (T *)k.out;
#define ARGS w.n, w.c, w.h, w.w, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < k.count;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v;
        switch (k.kind) {
        case IM2COL: v = ug_im2col_at(in, i, ARGS); break;
        case COL2IM: v = ug_col2im_at(in, i, ARGS); break;
        case MAXPOOL_FWD: {
            int at;
            v = ug_maxpool_at(in, i, &at, ARGS);
            k.index_out[i] = at;
            break;
        }
        case MAXPOOL_BWD: v = ug_maxpool_grad_at(in, k.index_in, i, ARGS); break;
        case AVGPOOL_FWD: v = ug_avgpool_at(in, i, ARGS); break;
        default: v = ug_avgpool_grad_at(in, i, ARGS); break;
        }
        out[i] = ug_narrow<T>(v);
    }
#undef ARGS
}

/* dtype: the type of in and out. */
static ug_status launch_window(ug_bdev *dev, window_k *k, ug_dtype dtype, const char *name)
{
    if (k->count <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    const unsigned g = ug_hip_blocks(k->count, UG_HIP_BLOCK);
    return ug_with_type(dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        ug_window_kernel<T><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(*k);
        return ug_hip_launched(name);
    });
}

ug_status ug_hip_im2col(ug_bdev *dev, const ug_im2col_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    if (a->to_image) {
        k.kind = COL2IM;
        k.in = ug_hip_ptr(&a->col);
        k.out = ug_hip_ptr(&a->image);
        k.count = w.n * w.c * w.h * w.w;
        return launch_window(dev, &k, a->col.dtype, "col2im");
    }
    k.kind = IM2COL;
    k.in = ug_hip_ptr(&a->image);
    k.out = ug_hip_ptr(&a->col);
    k.count = w.n * w.c * w.kh * w.kw * w.oh * w.ow;
    return launch_window(dev, &k, a->image.dtype, "im2col");
}

ug_status ug_hip_pool2d(ug_bdev *dev, const ug_pool2d_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    const bool max = a->kind == UG_POOL_MAX;
    /* The data's type from the view read (x may be unset going backward). */
    const ug_kview *in;
    if (a->backward) {
        k.kind = max ? MAXPOOL_BWD : AVGPOOL_BWD;
        in = &a->dy;
        k.index_in = max ? (const int *)ug_hip_ptr(&a->index) : NULL;
        k.out = ug_hip_ptr(&a->dx);
        k.count = w.n * w.c * w.h * w.w;
    } else {
        k.kind = max ? MAXPOOL_FWD : AVGPOOL_FWD;
        in = &a->x;
        k.out = ug_hip_ptr(&a->y);
        k.index_out = max ? (int *)ug_hip_ptr(&a->index) : NULL;
        k.count = w.n * w.c * w.oh * w.ow;
    }
    k.in = ug_hip_ptr(in);
    return launch_window(dev, &k, in->dtype, max ? "max pool" : "average pool");
}

typedef struct batchnorm_k {
    const void *x, *dy; /* T */
    void *y, *dx;       /* T */
    const float *weight, *bias;
    float *mean, *rstd, *running_mean, *running_var, *dweight, *dbias;
    int64_t n, c, inner;
    float eps, momentum;
    bool training, update_running;
} batchnorm_k;

/* Element j of channel ch in x [n, c, inner]. */
UG_DEV int64_t bn_at(const batchnorm_k &k, int64_t ch, int64_t j)
{
    return (j / k.inner * k.c + ch) * k.inner + j % k.inner;
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
            y[at] = ug_narrow<T>(ug_widen(x[at]) * scale + shift);
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
        const float scale = rstd * k.weight[ch];
        const float mean_dy = k.training ? s / (float)count : 0.0f;
        const float mean_dy_xhat = k.training ? sx / (float)count : 0.0f;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            const int64_t at = bn_at(k, ch, j);
            const float xhat = (ug_widen(x[at]) - mean) * rstd;
            dx[at] = ug_narrow<T>(scale * (ug_widen(dy[at]) - mean_dy - xhat * mean_dy_xhat));
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
