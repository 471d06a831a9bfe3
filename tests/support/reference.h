/* Host reference implementations in double precision, written from the
 * definitions and independent of the library (nothing here calls unigrad). */
#ifndef UG_TESTS_REFERENCE_H
#define UG_TESTS_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#define REF_MAX_DIMS 8

int64_t ref_numel(int ndim, const int64_t *shape);

/* NumPy broadcasting of two shapes; false if they do not broadcast. */
bool ref_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb,
                         int *nout, int64_t *sout);

/* Element of an operand of shape s (n dims, right-aligned to the output's
 * nout dims sout, size-1 axes repeated) read at output index idx. */
int64_t ref_broadcast_offset(int nout, const int64_t *sout, int64_t idx, int n,
                             const int64_t *s);

/* out = f(a, b) elementwise over the broadcast shape of a and b (the
 * elementwise ops' formulas are their rows in op_table.c). */
void ref_binary(double (*f)(double a, double b), int na, const int64_t *sa, const double *a,
                int nb, const int64_t *sb, const double *b, double *out);

void ref_scale_shift(const double *x, double *y, int64_t n, double scale, double shift);

typedef enum ref_reduce_op {
    REF_RSUM, REF_RMEAN, REF_RMAX, REF_RARGMAX, REF_RSUMSQ
} ref_reduce_op;
/* Reduces x (shape) over axis (already non-negative), or over everything
 * when all. argmax gives the first index of the maximum; a NaN counts as
 * the maximum (max NaN, argmax its first index). out holds numel/len
 * values. */
void ref_reduce(ref_reduce_op op, int ndim, const int64_t *shape, const double *x, int axis,
                bool all, double *out);

/* Batched matmul of the last two axes. a is [.., M, K] ([.., K, M] if ta), b
 * is [.., K, N] ([.., N, K] if tb); a 2-D operand is shared by every batch;
 * otherwise batch dims must be equal. Writes out and its shape; false if the
 * shapes do not fit. */
bool ref_matmul(int na, const int64_t *sa, const double *a, int nb, const int64_t *sb,
                const double *b, bool ta, bool tb, double *out, int *nout, int64_t *sout);

/* Softmax (or log-softmax) of each of rows rows of cols elements. */
void ref_softmax(const double *x, double *y, int64_t rows, int64_t cols, bool log);

/* LayerNorm over the last axis (biased variance, as torch.nn.LayerNorm):
 * y = (x - mean) / sqrt(var + eps) * gamma + beta, rows of cols elements;
 * gamma NULL: 1, beta NULL: 0. */
void ref_layernorm(const double *x, const double *gamma, const double *beta, double *y,
                   int64_t rows, int64_t cols, double eps);
/* RMSNorm over the last axis (torch.nn.functional.rms_norm):
 * y = x / sqrt(mean(x^2) + eps) * gamma; gamma NULL: 1. */
void ref_rmsnorm(const double *x, const double *gamma, double *y, int64_t rows, int64_t cols, double eps);

/* Per-row cross-entropy -sum_c t_c log_softmax(x)_c with the target
 * t = (1-s) onehot(label) + s/cols (torch's label_smoothing s); a label
 * outside [0, cols) gives NaN. labels hold integers. */
void ref_cross_entropy(const double *x, const double *labels, double *loss, int64_t rows,
                       int64_t cols, double smoothing);
/* torch.nn.functional.cross_entropy(x [rows, cols], labels [rows],
 * ignore_index, label_smoothing) with reduction 'mean': the mean of
 * ref_cross_entropy's row losses over the n rows whose label is not
 * ignore_index (every row when !ignore); NaN when n is 0. dx (NULL: not
 * wanted) receives its gradient [rows, cols]: (softmax(x_r) - t_r) / n on
 * the rows counted, 0 on the others. */
double ref_cross_entropy_mean(const double *x, const int64_t *labels, int64_t rows, int64_t cols,
                              double smoothing, bool ignore, int64_t ignore_index, double *dx);

/* Swaps the last two axes of an ndim >= 2 tensor. */
void ref_transpose(int ndim, const int64_t *shape, const double *x, double *y);

/* IEEE binary16 from double, rounding to nearest even, and back. */
uint16_t ref_f16_bits(double x);
double ref_f16_value(uint16_t bits);
/* bfloat16 from double, rounding to nearest even (NaN to 0x7fc0), and back. */
uint16_t ref_bf16_bits(double x);
double ref_bf16_value(uint16_t bits);
/* Nearest float (round to nearest even), as a C cast does. */
static inline double ref_round_f32(double x) { return (double)(float)x; }

/* Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC11): counter ctr, key key, writes 4 words. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The words r0, r1 the library draws for counter index (= offset + i). */
void ref_philox_words(uint64_t seed, uint64_t index, uint32_t *r0, uint32_t *r1);
/* uniform: low + (high-low) * (r0 >> 8) * 2^-24, exactly in double. */
double ref_random_uniform(uint64_t seed, uint64_t index, double low, double high);
/* Box-Muller: u1 = ((r0>>8)+1) 2^-24, u2 = (r1>>8) 2^-24,
 * mean + std sqrt(-2 ln u1) cos(2 pi u2). */
double ref_random_normal(uint64_t seed, uint64_t index, double mean, double stddev);

/* ---- convolutional networks (reference_conv.c), NCHW, as PyTorch ---- */

/* floor((in + 2 padding - dilation (kernel - 1) - 1) / stride) + 1 */
int64_t ref_conv_out(int64_t in, int kernel, int stride, int padding, int dilation);

/* x [n, c, h, w], weight [oc, c / groups, kh, kw], bias [oc]: every field
 * explicit (no defaults). */
typedef struct ref_conv_geom {
    int64_t n, c, h, w, oc;
    int kh, kw, stride[2], padding[2], dilation[2], groups;
} ref_conv_geom;
/* y [n, oc, oh, ow] (oh, ow from ref_conv_out); bias may be NULL. */
void ref_conv2d(const ref_conv_geom *p, const double *x, const double *weight, const double *bias,
                double *y);
/* The gradients of sum(y * dy): dx [n, c, h, w], dweight, dbias [oc]; any
 * may be NULL. */
void ref_conv2d_backward(const ref_conv_geom *p, const double *x, const double *weight,
                         const double *dy, double *dx, double *dweight, double *dbias);

/* Pooling over x [n, c, h, w] (planes = n * c), windows kernel moved by
 * stride over the image padded by padding (explicit, stride >= 1). */
typedef struct ref_pool_geom {
    int64_t planes, h, w;
    int kernel[2], stride[2], padding[2];
} ref_pool_geom;
/* The maximum of each window's pixels (padding ignored); a NaN is the
 * maximum. index (may be NULL) receives, per output, the offset in its
 * plane (y * w + x) of the first maximum in row-major window order (the
 * first NaN when there is one). */
void ref_max_pool2d(const ref_pool_geom *p, const double *x, double *y, int64_t *index);
/* dx = each output's dy added at its first maximum. */
void ref_max_pool2d_backward(const ref_pool_geom *p, const double *x, const double *dy, double *dx);
/* count_include_pad: the sum of the window's pixels divided by the window's
 * size clipped to the padded image. */
void ref_avg_pool2d(const ref_pool_geom *p, const double *x, double *y);
void ref_avg_pool2d_backward(const ref_pool_geom *p, const double *dy, double *dx);

/* Batch normalisation of x [n, c, inner] per channel (inner = h * w, or 1
 * for [n, c]). training: the batch's mean and biased variance normalise,
 * and running_mean/running_var (may be NULL) become (1 - momentum) running
 * + momentum batch, the variance unbiased (n inner - 1); otherwise the
 * running statistics normalise. y = (x - mean) / sqrt(var + eps) weight +
 * bias. */
void ref_batch_norm(const double *x, int64_t n, int64_t c, int64_t inner, const double *weight,
                    const double *bias, double *running_mean, double *running_var, bool training,
                    double momentum, double eps, double *y);
/* The gradients of sum(y * dy) (running statistics as given, not updated):
 * dx, dweight, dbias [c]; any may be NULL. */
void ref_batch_norm_backward(const double *x, int64_t n, int64_t c, int64_t inner,
                             const double *weight, const double *running_mean,
                             const double *running_var, bool training, double eps,
                             const double *dy, double *dx, double *dweight, double *dbias);

#endif
