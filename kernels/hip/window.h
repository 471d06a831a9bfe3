/* Convolution, pooling and upsampling kernels (grid-stride, one thread per result
 * element, with the formulas of kernels/common/window.h). The data (image
 * and col) are f32, f16 or bf16, one type per call and a kernel per type;
 * the pooling index is i32, and all arithmetic is f32, each result rounded
 * once to the data's type.
 * Device code: backends/hip/window.hip launches it. */
#ifndef UG_KERNELS_HIP_WINDOW_H
#define UG_KERNELS_HIP_WINDOW_H

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

#endif
