/* Convolutional networks: 2-D convolution, pooling, upsampling and batch normalisation
 * over NCHW tensors, eager (on tensors) and in graphs (differentiable), with
 * PyTorch's semantics and output sizes. x, the weight and the bias may be
 * f32, f16 or bf16 (the arithmetic is f32; the result has x's dtype);
 * batch norm's running statistics are f32. */
#ifndef UNIGRAD_CONV_H
#define UNIGRAD_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/graph.h"
#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zero-initialised fields take PyTorch's defaults: stride 1, padding 0,
 * dilation 1, groups 1. NULL params means all defaults. */
typedef struct ug_conv2d_params {
    int stride[2];   /* height, width */
    int padding[2];  /* zeros added on both sides */
    int dilation[2]; /* distance between kernel taps */
    int groups;      /* channels split into groups; = in channels is depthwise */
} ug_conv2d_params;

/* stride 0 takes the kernel size (PyTorch's default); padding is at most
 * half the kernel. */
typedef struct ug_pool2d_params {
    int kernel[2];
    int stride[2];
    int padding[2];
} ug_pool2d_params;

/* Output size along one axis, PyTorch's rule:
 * floor((in + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, or 0
 * when the window does not fit the padded input. -1 for arguments out of
 * range: in or padding negative, kernel, stride or dilation below 1, or a
 * padded size past INT64_MAX. */
UG_API int64_t ug_conv_output_size(int64_t in, int kernel, int stride, int padding, int dilation);

/* Convolutions run by a vendor's library (cuDNN on CUDA devices, MIOpen on
 * HIP ones) use, for each shape, the algorithm that was fastest when the
 * candidates were timed at its first use (as torch.backends.cudnn.benchmark),
 * the choice cached on disk per device, driver and library version
 * ($XDG_CACHE_HOME/unigrad, written atomically); UG_CONV=im2col in the
 * environment runs every convolution as im2col + GEMM instead.
 * Deterministic mode (on: ug_set_deterministic(true), or UG_DETERMINISTIC=1
 * in the environment) skips the timing and takes fixed algorithms that give
 * the same bits on every run (no atomic accumulation), at some cost in
 * speed. It applies to convolutions planned after the call and to matrix
 * products and attention run after it: on CUDA and HIP devices products go
 * through the vendor BLAS and attention through the library's own kernels
 * rather than whichever path timed faster (cuDNN's attention gradient sums
 * in an order that varies). Every other path of the library is
 * deterministic already. */
UG_API void ug_set_deterministic(bool enabled);
UG_API bool ug_deterministic(void);

/* x [N, C, H, W], weight [OC, C / groups, KH, KW], bias [OC] or NULL:
 * y [N, OC, OH, OW] (dtypes: f32, f16, bf16). */
UG_API ug_status ug_conv2d(const ug_tensor *x, const ug_tensor *weight, const ug_tensor *bias,
                           const ug_conv2d_params *params, ug_tensor **out);
/* The maximum of each window (NaN wins); y [N, C, OH, OW]. */
UG_API ug_status ug_max_pool2d(const ug_tensor *x, const ug_pool2d_params *params, ug_tensor **out);
/* The mean of each window, the padding counted as zeros (count_include_pad). */
UG_API ug_status ug_avg_pool2d(const ug_tensor *x, const ug_pool2d_params *params, ug_tensor **out);
/* The mean of each channel's image: [N, C, H, W] to [N, C, 1, 1]. */
UG_API ug_status ug_global_avg_pool2d(const ug_tensor *x, ug_tensor **out);
/* nn.AdaptiveAvgPool2d((out_h, out_w)): y [N, C, out_h, out_w], cell (i, j)
 * the mean of rows floor(i H / out_h) to ceil((i + 1) H / out_h) - 1 and
 * the columns likewise (bins may overlap, or repeat where out exceeds in). */
UG_API ug_status ug_adaptive_avg_pool2d(const ug_tensor *x, int64_t out_h, int64_t out_w, ug_tensor **out);
/* Nearest-neighbour upsampling by integer factors (torch.nn.Upsample with
 * scale_factor (scale_h, scale_w), mode "nearest"): y [N, C, H * scale_h,
 * W * scale_w], each pixel copied into a scale_h x scale_w block. */
UG_API ug_status ug_upsample2d(const ug_tensor *x, int scale_h, int scale_w, ug_tensor **out);
/* Batch normalisation per channel of x [N, C], [N, C, L] or [N, C, H, W]
 * (axis 1),
 * as torch.nn.functional.batch_norm: in training, the batch's mean and
 * biased variance normalise, and running_mean/running_var [C] move by
 * momentum toward the batch's mean and unbiased variance; otherwise the
 * running statistics normalise and stay. weight and bias [C]. */
UG_API ug_status ug_batch_norm(const ug_tensor *x, const ug_tensor *weight, const ug_tensor *bias,
                               ug_tensor *running_mean, ug_tensor *running_var, bool training,
                               float momentum, float eps, ug_tensor **out);

/* ---- in graphs ---- */

UG_API ug_status ug_g_conv2d(ug_graph *g, ug_value *x, ug_value *weight, ug_value *bias,
                             const ug_conv2d_params *params, ug_value **out);
UG_API ug_status ug_g_max_pool2d(ug_graph *g, ug_value *x, const ug_pool2d_params *params,
                                 ug_value **out);
UG_API ug_status ug_g_avg_pool2d(ug_graph *g, ug_value *x, const ug_pool2d_params *params,
                                 ug_value **out);
UG_API ug_status ug_g_global_avg_pool2d(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_adaptive_avg_pool2d(ug_graph *g, ug_value *x, int64_t out_h, int64_t out_w,
                                          ug_value **out);
UG_API ug_status ug_g_upsample2d(ug_graph *g, ug_value *x, int scale_h, int scale_w,
                                 ug_value **out);
/* Training or eval as the graph's mode at each run (ug_graph_set_training).
 * running_mean and running_var are model parameters (ug_graph_param) that
 * the op updates in training and that get no gradient: model state, saved
 * and copied with the model. */
UG_API ug_status ug_g_batch_norm(ug_graph *g, ug_value *x, ug_value *weight, ug_value *bias,
                                 ug_value *running_mean, ug_value *running_var, float momentum,
                                 float eps, ug_value **out);

#ifdef __cplusplus
}
#endif
#endif
