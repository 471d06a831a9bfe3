/* Convolution, pooling and upsampling kernels (grid-stride, one thread per result
 * element, with the formulas of kernels/common/window.h). The data (image
 * and col) are f32, f16 or bf16, one type per call and a kernel per type;
 * the pooling index is i32, and all arithmetic is f32, each result rounded
 * once to the data's type. */
#include "kernels/hip/common.h"
#include "kernels/common/window.h"

/* window.h's formulas for f16 and bf16 data: overloads of its f32 functions
 * (same names, by the pointer's type), so one template calls them all. */
#define UG_WINDOW_LD_WIDEN(p, i) ug_widen((p)[i])
UG_WINDOW_FUNCTIONS(, __half, UG_WINDOW_LD_WIDEN)
UG_WINDOW_FUNCTIONS(, ug_bf16, UG_WINDOW_LD_WIDEN)

enum window_kind {
    IM2COL, COL2IM, MAXPOOL_FWD, MAXPOOL_BWD, AVGPOOL_FWD, AVGPOOL_BWD, UPSAMPLE_FWD, UPSAMPLE_BWD
};

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
        case AVGPOOL_BWD: v = ug_avgpool_grad_at(in, i, ARGS); break;
        case UPSAMPLE_FWD: v = ug_upsample_at(in, i, ARGS); break;
        default: v = ug_upsample_grad_at(in, i, ARGS); break;
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

ug_status ug_hip_upsample2d(ug_bdev *dev, const ug_upsample2d_args *a)
{
    const ug_window2d &w = a->win;
    window_k k;
    memset(&k, 0, sizeof k);
    k.w = w;
    const ug_kview *in = a->backward ? &a->dy : &a->x;
    k.kind = a->backward ? UPSAMPLE_BWD : UPSAMPLE_FWD;
    k.in = ug_hip_ptr(in);
    k.out = ug_hip_ptr(a->backward ? &a->dx : &a->y);
    k.count = a->backward ? w.n * w.c * w.h * w.w : w.n * w.c * w.oh * w.ow;
    return launch_window(dev, &k, in->dtype, "upsample");
}
