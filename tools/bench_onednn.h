/* oneDNN's convolution on the host, the baseline ug-bench conv sets beside
 * unigrad's. bench_onednn.c is built only when CMake finds oneDNN and
 * OpenMP (it then defines UG_BENCH_ONEDNN); the layer type is shared. */
#ifndef UG_BENCH_ONEDNN_H
#define UG_BENCH_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 2-D convolution over NCHW f32 with a bias: x [batch, channels, height,
 * width], weight [out_channels, channels, kernel, kernel], the same stride
 * and padding on both axes. */
typedef struct conv_layer {
    const char *name;
    int64_t batch, channels, height, width, out_channels;
    int kernel, stride, padding;
} conv_layer;

typedef struct onednn_conv_result {
    double forward_s, step_s; /* per call, each the faster algorithm's */
    char algorithm[64];       /* which: "direct", "auto (winograd)", ... */
    /* Each algorithm's primitives by oneDNN's names (forward, backward
     * data, backward weights) and, when auto chose others, their times. */
    char details[400];
} onednn_conv_result;

/* Times oneDNN's forward convolution (forward_training) alone and the
 * training step (forward, backward data, backward weights with the bias)
 * for about target_seconds each, with algorithm direct and with auto, on
 * the user's x, weight, bias and output gradient dy (NCHW, OIHW). Every
 * primitive takes its arguments in the layouts it chose, reordered from the
 * user's data once before the timing. y receives the forward result
 * (NCHW). Threads: the CPU device's budget. Returns false with the error
 * printed. */
bool onednn_conv_time(const conv_layer *layer, const float *x, const float *weight,
                      const float *bias, const float *dy, double target_seconds, float *y,
                      onednn_conv_result *result);

/* "oneDNN 2.6.3" and its CPU runtime. */
void onednn_describe(char *text, size_t size);

#endif
