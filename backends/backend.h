/* The one internal interface between the core and a backend.
 *
 * A backend is a table of function pointers. The core validates every
 * argument (shapes, dtypes, devices, ranges) before it calls a backend, so a
 * backend checks only what its runtime can report. Buffers are opaque
 * handles (a cl_mem, a device pointer, a host pointer); every kernel argument
 * names a buffer plus an offset in elements, because OpenCL cannot offset a
 * cl_mem. Kernels and transfers are queued in order on a stream and may
 * return before they have run.
 *
 * Streams: every device has a default stream; stream_create makes side
 * streams, whose work runs independently of the others' except where a
 * stream waits for an event. The stream a queued entry (write, read, copy,
 * kernels) goes to is the one bound with stream_bind on the calling thread
 * for that device, else the default stream; the core binds around each call
 * (core/runtime/dispatch.c), so entries keep their arguments and backends keep the
 * binding in thread-local storage. synchronize waits for every stream.
 *
 * Errors: a backend returns a status and sets the message with
 * host->set_error (see ug_backend_host), naming the runtime call and its
 * error code. It never prints and never aborts.
 *
 * Optional entries may be NULL; the core reports UG_ERR_UNSUPPORTED then.
 *
 * This header is also compiled into the HIP/CUDA module, which is built
 * apart from the core and loaded with dlopen: UG_BACKEND_INTERFACE_VERSION
 * tells the two apart. */
#ifndef UG_BACKEND_H
#define UG_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "unigrad/device.h"
#include "unigrad/dtype.h"
#include "unigrad/status.h"

/* ug_unary_kind and ug_binary_kind, with the formulas of every op; Philox
 * and the random transforms. */
#include "kernels/common/elementwise.h"
#include "kernels/common/epilogue.h"
#include "kernels/common/optim_step.h"
#include "kernels/common/random.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UG_KERNEL_MAX_DIMS 8

typedef void *ug_mem;               /* a backend's buffer handle */
typedef struct ug_bdev ug_bdev;     /* a backend's per-device state */
typedef struct ug_bstream ug_bstream; /* a side stream (NULL: the device's default stream) */
typedef struct ug_bevent ug_bevent; /* a marker in a stream's work */

/* What the core lends a backend: error and warning reporting, so modules
 * loaded at run time need no symbols from the core. */
typedef struct ug_backend_host {
    ug_status (*set_error)(ug_status status, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;
    /* The calling thread's message, to carry a failure across threads. */
    const char *(*last_error)(void);
    /* A warning for the user (ug_set_warning_handler). */
    void (*warn)(const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 1, 2)))
#endif
        ;
    /* The tuning cache (base/cache_file.h), for modules, which link nothing
     * of the core: a text under name (a file name prefix, "cudnn-conv") and
     * key (everything the text depends on: device, driver, library
     * versions). cache_load: true with the text (NUL-terminated) when a
     * sound file holds it; false with why empty when there is none, or
     * saying what is wrong with the file (then the caller warns and
     * measures again). A text over text_len counts as damaged.
     * cache_store replaces the file atomically; failing (no usable cache
     * folder, a full disk) it leaves the old one and sets the message. */
    bool (*cache_load)(const char *name, const char *key, char *text, size_t text_len, char *why,
                       size_t why_len);
    ug_status (*cache_store)(const char *name, const char *key, const char *text);
} ug_backend_host;

/* Returns a failed status to the caller (backends do not include the
 * core's error.h). */
#define UG_BACKEND_TRY(expr)            \
    do {                                \
        ug_status ug_try_ = (expr);     \
        if (ug_try_ != UG_OK)           \
            return ug_try_;             \
    } while (0)

/* A device's list of side streams, for backends whose ug_bstream has a
 * next field: push s at head, or take s out of it. */
#define UG_STREAM_LIST_PUSH(head, s) \
    do {                             \
        (s)->next = *(head);         \
        *(head) = (s);               \
    } while (0)
#define UG_STREAM_LIST_REMOVE(head, s)                                  \
    do {                                                                \
        for (ug_bstream **ug_at_ = (head); *ug_at_; ug_at_ = &(*ug_at_)->next) \
            if (*ug_at_ == (s)) {                                       \
                *ug_at_ = (s)->next;                                    \
                break;                                                  \
            }                                                           \
    } while (0)

/* A tensor as a kernel sees it: contiguous from offset (in elements). */
typedef struct ug_kview {
    ug_mem mem;
    int64_t offset;
    ug_dtype dtype;
} ug_kview;


/* What a graph folds into a kernel as it stores its results (the core's
 * graph/plan.c and graph/check.c), the same struct in every family that
 * takes one, applied to each result r in this order (the math written
 * once for the three dialects in kernels/common/epilogue.h):
 *   pair (operand.mem set): r = r op e, or e op r where first, with
 *     alpha; e at row stride operand_rows (0: one value per column of the
 *     result's rows, a bias; the row's length: a matrix of its shape), in
 *     the result's dtype;
 *   post: r = post(r), a unary op whose formula reads only x (COPY: none);
 *   match (set): r = 1 where r equals match[i] (i32 or f32) as an f32,
 *     else 0;
 *   check (set, f32 [1]): set to NaN when r is NaN or infinite, else left;
 *   sum (set, f32 of the results' count): sum[i] += sum_alpha * r;
 * and r is stored in the result's dtype. Each family says which parts it
 * takes (the core gives no other) and, for check, the values it covers. */
typedef struct ug_epilogue {
    ug_kview operand;
    ug_binary_kind op;
    float alpha;
    bool first;
    int64_t operand_rows;
    ug_unary_kind post;
    ug_kview match, check, sum;
    float sum_alpha;
} ug_epilogue;

/* y[i] = f(x at the strided position of i). The output is contiguous with
 * numel = prod(shape); x is read through strides (in elements, 0 for a
 * broadcast axis), which makes this kernel also the transpose, the expand
 * and the cast. x.dtype is any dtype; y.dtype is f32, f16 or (COPY only)
 * equal to x.dtype. Arithmetic is in f32. */
typedef struct ug_unary_args {
    ug_unary_kind op;
    float alpha, beta;
    ug_kview y, x;
    int ndim;                              /* 1..8, already collapsed */
    int64_t shape[UG_KERNEL_MAX_DIMS];
    int64_t x_strides[UG_KERNEL_MAX_DIMS];
} ug_unary_args;


/* y[i] = a[..] op b[..]; a and b read through strides (0 for a
 * broadcast axis); y contiguous. All three have one dtype, f32 or f16, and y
 * may alias a or b exactly (same buffer and offset, contiguous). epi: its
 * post only (a fused activation). */
typedef struct ug_binary_args {
    ug_binary_kind op;
    ug_epilogue epi;
    float alpha;
    ug_kview y, a, b;
    int ndim;
    int64_t shape[UG_KERNEL_MAX_DIMS];
    int64_t a_strides[UG_KERNEL_MAX_DIMS];
    int64_t b_strides[UG_KERNEL_MAX_DIMS];
} ug_binary_args;

typedef enum ug_reduce_kind {
    UG_RKERNEL_SUM = 0,
    UG_RKERNEL_MEAN,
    UG_RKERNEL_MAX,
    UG_RKERNEL_ARGMAX,  /* y is i32 */
    UG_RKERNEL_SUMSQ
} ug_reduce_kind;

/* x is viewed as [outer, len, inner]; y[o*inner + i] reduces x[o, :, i].
 * A full reduction is outer = inner = 1. x is f32 or f16; y is f32 or f16
 * (ARGMAX: i32, or the index as a float: a cast of it folded in).
 * Accumulation is in f32 in a tree (not a serial sum) so 2^24+ elements
 * stay accurate. len >= 1.
 * epi: all but the pair, on the results as written: post (op not
 * ARGMAX), check and sum (y f32, op not ARGMAX: a numeric check, a
 * running sum); match of argmax's index as a float (y f32: a metric's
 * correct predictions). */
typedef struct ug_reduce_args {
    ug_reduce_kind op;
    ug_kview y, x;
    ug_epilogue epi;
    int64_t outer, len, inner;
} ug_reduce_args;

/* Row-major C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b] for b < batch,
 * where op(A) is M x K and op(B) is K x N. lda/ldb/ldc are row strides of the
 * stored matrices; stride_* are elements between batches (0 shares one
 * matrix). sum_batch: one C = alpha * sum over b of op(A[b]) op(B[b]) +
 * beta * C (stride_c unused). A and B share one dtype, f32, f16 or bf16;
 * C is f32 or A's dtype. Products accumulate in f32 whatever the dtypes
 * (mixed precision: half operands, f32 accumulation, C rounded once).
 * epi: its pair and post, on P = alpha op(A) op(B) + beta C, with the
 * operand's rows as C's (operand_rows 0 or n); given only for a C of
 * contiguous rows (ldc = n, stride_c = m n, its batches' rows one after
 * another) and never with sum_batch. A backend applies it in its
 * product's kernel or after it (backends/gemm_helpers.h). */
typedef struct ug_gemm_args {
    bool trans_a, trans_b, sum_batch;
    bool deterministic; /* ug_deterministic(): a backend choosing between paths by timing takes a fixed one */
    int64_t m, n, k;
    float alpha, beta;
    ug_kview a, b, c;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    int64_t batch;
    ug_epilogue epi;
} ug_gemm_args;

/* Softmax or log-softmax of each of rows rows of cols elements. f32/f16,
 * same dtype in and out. */
typedef struct ug_softmax_args {
    bool log;
    ug_kview y, x;
    int64_t rows, cols;
} ug_softmax_args;

/* Philox 4x32-10 with key (seed low 32, seed high 32). Element i uses
 * counter c = offset + i as (c low 32, c high 32, 0, 0) and draws words
 * r0, r1 of the output. uniform: low + (high-low) * (r0 >> 8) * 2^-24.
 * normal: u1 = ((r0 >> 8) + 1) * 2^-24, u2 = (r1 >> 8) * 2^-24,
 * mean + std * sqrt(-2 ln u1) * cos(2 pi u2), all computed as
 * kernels/common/random.h does (ug_random_value), so every device draws
 * the same bits. y is f32 or f16. */
typedef struct ug_random_args {
    bool normal;
    float p0, p1;          /* low, high or mean, stddev */
    uint64_t seed, offset;
    /* Optional f32 [1]: a graph's run count on the device, read when the
     * kernel runs; offset then grows by runs[0] << UG_RANDOM_RUN_SHIFT,
     * so a replayed launch draws each run's own numbers. */
    ug_kview runs;
    ug_kview y;
    int64_t n;
} ug_random_args;

/* Cross-entropy of logits [rows, cols] (f32) against labels [rows], i32
 * or i64, with label smoothing s: target = (1-s) onehot(label) + s/cols.
 * Row r is ignored when ignore is set and labels[r] == ignore_index; the
 * n rows not ignored count (n = rows without ignore).
 * Forward (grad.mem == NULL): loss[r] = -sum_c target_c log_softmax(x_r)_c,
 * 0 for an ignored row, NaN for a label outside [0, cols) not ignored.
 * Backward (grad.mem != NULL): grad[r,c] = (softmax(x_r)_c - target_c) * k,
 * k = scale * dloss[0] / count[0], dloss and count one-element f32
 * buffers, each read as 1 when its mem is NULL (loss not written); an
 * ignored row and a row whose label is outside [0, cols) get zeros.
 * epi (forward only): its check, of the logits as the rows read them. */
typedef struct ug_xent_args {
    ug_kview logits, labels, loss, grad, dloss, count;
    ug_epilogue epi;
    int64_t rows, cols;
    float smoothing, scale;
    bool ignore;
    int64_t ignore_index;
    /* Forward: then, when mean.y.mem is set, the loss's mean over the
     * rows not ignored: the REDUCE family's MEAN with these arguments (its
     * x the row losses, len rows, its epilogue on the mean as written),
     * the sum divided by n in place of len (NaN when n is 0), in the row
     * kernel's last block or as a reduction after it; and, when count.mem
     * is set, count[0] = n as an f32 (exact to 2^24 rows) for the backward
     * to read. By value: a backend may run the call after the caller's
     * frame is gone. */
    ug_reduce_args mean;
} ug_xent_args;

/* LayerNorm (torch.nn.functional.layer_norm) or, with rms, RMSNorm
 * (torch.nn.functional.rms_norm) over each row of x [rows, cols], all f32.
 * Per row: m = the mean of x (rms: m = 0, not computed), v = the mean of
 * (x - m)^2 (biased; rms: the mean of x^2), rstd = 1 / sqrt(v + eps) and
 * xhat = (x - m) * rstd.
 * Forward (dx.mem == NULL): y = xhat * gamma + beta, gamma [cols] absent
 * (mem NULL) taken as 1 and beta [cols] absent as 0; writes rstd[rows]
 * and, without rms, mean[rows], each only where given.
 * Backward (dx.mem != NULL): with g = dy * gamma (dy where gamma is
 * absent), dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), rms dropping
 * the mean(g) term; reads dy, x, rstd, gamma and, without rms, mean;
 * with terms.mem set, also terms = dy * xhat [rows, cols], which the core
 * sums over the rows for gamma's gradient (and dy for beta's). */
typedef struct ug_layernorm_args {
    ug_kview x, y, gamma, beta, mean, rstd, dy, dx, terms;
    int64_t rows, cols;
    float eps;
    bool rms;
} ug_layernorm_args;

/* The window geometry of a 2-D convolution or pooling over NCHW images:
 * planes = n * c images of h x w, a kh x kw window moved by stride (sh, sw)
 * over the image padded by (ph, pw), its taps dilation (dh, dw) apart, giving
 * oh x ow outputs (PyTorch's rule, computed by the core). */
typedef struct ug_window2d {
    int64_t n, c, h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, dh, dw;
} ug_window2d;

/* im2col (to_image false): col [n, c*kh*kw, oh*ow] from image [n, c, h, w];
 * row (ci*kh + ky)*kw + kx, column oy*ow + ox holds the tap's pixel or 0 in
 * the padding. col2im (to_image true): image = the sum, for each pixel, of
 * the col entries that read it (overwritten, not accumulated). image and
 * col share one dtype, f32, f16 or bf16. */
typedef struct ug_im2col_args {
    bool to_image;
    ug_kview image, col;
    ug_window2d win;
} ug_im2col_args;

/* A convolution by a library with its own kernels (oneDNN on the CPU), an
 * optional alternative to im2col + GEMM. Tensors are NCHW, the weight
 * [oc, c / groups, kh, kw], all contiguous; the pass's inputs (x, w, dy)
 * are of dtype, its output (y, dx or dw) of out_dtype (dtype, or f32 for a
 * half dtype: a cast folded in), the bias of bias_dtype (f32 by default,
 * 0). A backend's conv_plan answers that it does not run dtypes its
 * library lacks (half types where the processor has no arithmetic for
 * them): im2col runs those. FORWARD: y = conv(x, w)
 * (+ bias when bias.mem is set). BACKWARD_DATA: dx from dy and w.
 * BACKWARD_WEIGHTS: dw from x and dy (the bias gradient is the core's).
 * Outputs are overwritten. workspace holds workspace_bytes, the amount
 * conv_plan asked for. with_bias: the forward pass adds bias.
 * deterministic: the same inputs give the same bits on every run, and no
 * algorithm is chosen by timing (ug_set_deterministic). */
typedef enum ug_conv_pass {
    UG_CONV_FORWARD = 0,
    UG_CONV_BACKWARD_DATA,
    UG_CONV_BACKWARD_WEIGHTS
} ug_conv_pass;

typedef struct ug_conv_args {
    ug_conv_pass pass;
    ug_kview x, w, bias, y, dx, dw, dy, workspace;
    size_t workspace_bytes;
    ug_window2d win;
    int64_t oc;
    int groups;
    ug_dtype dtype, out_dtype, bias_dtype;
    bool with_bias;
    bool deterministic;
} ug_conv_args;

typedef enum ug_pool2d_kind {
    UG_POOL_MAX = 0, /* index[i] = the first maximum's h*w offset in its plane */
    UG_POOL_AVG      /* padding counted in the divisor (count_include_pad) */
} ug_pool2d_kind;

/* Forward (backward false): y [n, c, oh, ow] from x (index i32, MAX only).
 * Backward: dx [n, c, h, w] from dy (and index for MAX), overwritten. NaN
 * counts as the maximum, as in PyTorch. x, y, dy and dx share one dtype,
 * f32, f16 or bf16 (arithmetic in f32). dilation is 1. */
typedef struct ug_pool2d_args {
    ug_pool2d_kind kind;
    bool backward;
    ug_kview x, y, index, dy, dx;
    ug_window2d win;
} ug_pool2d_args;

/* Batch normalisation of x [n, c, inner] per channel (inner = h*w, or 1).
 * Forward, training: mean and rstd = 1/sqrt(var + eps) from the batch
 * (biased var) are written to mean/rstd [c]; when update_running, running
 * stats move by momentum toward the batch's (unbiased var). Forward, eval:
 * mean/rstd are written from the running stats, which stay. Both:
 * y = (x - mean) * rstd * weight + bias.
 * Backward: dweight = sum dy * xhat, dbias = sum dy, and dx: in training
 * rstd * weight * (dy - mean(dy) - xhat * mean(dy * xhat)), in eval
 * dy * rstd * weight. x, y, dy and dx share one dtype, f32, f16 or bf16;
 * the rest is f32, and so is all arithmetic. */
/* epi (forward): its post, RELU or none (kernels/common/batchnorm.h's
 * ug_bn_output). */
typedef struct ug_batchnorm_args {
    bool backward, training, update_running;
    ug_epilogue epi;
    ug_kview x, y, weight, bias, mean, rstd, running_mean, running_var;
    ug_kview dy, dx, dweight, dbias;
    int64_t n, c, inner;
    float eps, momentum;
} ug_batchnorm_args;

typedef enum ug_optim_kind {
    UG_OPTIM_SGD = 0,   /* PyTorch SGD: momentum, dampening, nesterov, weight decay */
    UG_OPTIM_ADAM,      /* PyTorch Adam: L2 weight decay added to the gradient */
    UG_OPTIM_ADAMW,     /* decoupled weight decay: p -= lr * wd * p */
    UG_OPTIM_STEP       /* the step's scalars, before the parameters' updates */
} ug_optim_kind;

/* One parameter's update, in one kernel. Every scalar that changes from
 * step to step is read from the step's gate (kernels/common/optim_step.h,
 * UG_GATE_SIZE f32 values), so the same launch serves every step: the
 * update does nothing when gate[UG_GATE_SKIP] is not 0, g is read as
 * g * gate[UG_GATE_FACTOR], the rate is gate[UG_GATE_LR], the update
 * t = gate[UG_GATE_STEP] (SGD's first step: t == 1) and Adam's bias
 * corrections are gate[UG_GATE_BC1] and gate[UG_GATE_BC2]. SGD: state0 =
 * momentum buffer (when momentum != 0). Adam/AdamW: state0 = m, state1 = v.
 * When copy.mem is set, the updated parameter is also stored there in
 * copy.dtype (f16 or bf16), the half copy that mixed-precision graphs
 * read; a skipped step leaves it as it is. All f32 but the copy.
 * weight_decay and lr_scale are the parameter's group's (optim.h): the
 * update's rate is gate[UG_GATE_LR] * lr_scale (lr_scale 1 leaves the
 * gate's rate exact).
 * With count > 0 the update is of count parameters at once (PyTorch's
 * multi-tensor apply), each tensors[i] a parameter's views, n and group
 * settings, one launch where the backend can (param, grad, state0,
 * state1, copy, n, weight_decay and lr_scale of the args unused).
 * epi: its check, of the gradient as the update reads it (a skipped step
 * reads no gradient and checks none).
 * UG_OPTIM_STEP: ug_optim_step with rule on state0 (UG_STEP_STATE_SIZE
 * values) and grad[0] (the gradients' sum of squares; grad.mem NULL when
 * the rule neither clips nor scales), writing the gate to param; n is 1. */
typedef struct ug_optim_tensor {
    ug_kview param, grad, state0, state1, copy;
    ug_epilogue epi;
    int64_t n;
    float weight_decay, lr_scale;
} ug_optim_tensor;

typedef struct ug_optim_args {
    ug_optim_kind kind;
    ug_kview param, grad, state0, state1, gate, copy;
    ug_epilogue epi;
    int64_t n;
    int count;
    const ug_optim_tensor *tensors;
    float weight_decay, lr_scale, momentum, dampening;
    bool nesterov;
    float beta1, beta2, eps;
    ug_step_rule rule;
} ug_optim_args;

/* Tensor i of a multi-tensor update as a one-tensor update. */
static inline ug_optim_args ug_optim_args_at(const ug_optim_args *a, int i)
{
    ug_optim_args one = *a;
    const ug_optim_tensor *t = &a->tensors[i];
    one.param = t->param;
    one.grad = t->grad;
    one.state0 = t->state0;
    one.state1 = t->state1;
    one.copy = t->copy;
    one.epi = t->epi;
    one.n = t->n;
    one.weight_decay = t->weight_decay;
    one.lr_scale = t->lr_scale;
    one.count = 0;
    one.tensors = NULL;
    return one;
}

/* A batch of byte images made into the batch's values on the device (the
 * loader's device conversion and augmentation): y [n, c, h, w] (f32, f16
 * or bf16) from x [n, c, h, w] (u8) as y(s, k, i, j) = table[b], b =
 * x(s, k, i + dy - pad, j' + dx - pad) with j' = w - 1 - j when flip, else
 * j, and b = 0 outside the image; (dy, dx, flip) = place[s] (i32 [n, 3]),
 * or with place.mem NULL, dy = dx = pad = 0 and no flip (conversion only).
 * table: f32 [256], the data set's value of each byte, so every device
 * gives the host's conversion bit for bit (then rounded once to y's
 * dtype, to nearest even). */
typedef struct ug_augment_args {
    ug_kview x, y, table, place;
    int64_t n, c, h, w;
    int pad;
} ug_augment_args;

/* Nearest-neighbour upsampling by integer factors (win.sh, win.sw), as
 * torch.nn.Upsample(mode="nearest"). Forward: y [n, c, oh, ow] with
 * oh = h * sh, ow = w * sw, y(oy, ox) = x(oy / sh, ox / sw). Backward: dx
 * [n, c, h, w], each pixel the sum of the sh x sw block of dy it was copied
 * to (overwritten). One dtype, f32, f16 or bf16 (arithmetic in f32); the
 * window's kernel, padding and dilation are unused. */
typedef struct ug_upsample2d_args {
    bool backward;
    ug_kview x, y, dy, dx;
    ug_window2d win;
} ug_upsample2d_args;

/* Rows along one axis picked, placed or summed by index (embedding
 * lookups, slices, concatenation, and their gradients). x is viewed as
 * [outer, x_len, inner] and y as [outer, y_len, inner]; index, when
 * index.mem is set, holds count entries, i32 or i64.
 * Gather (accumulate and scatter false): for j < count, y[o, y_start + j,
 * i] = x[o, p, i] with p = index[j] (index set) or x_start + j (not), the
 * bits of x moved unchanged (any dtype, y's the same); y's other elements
 * are left as they are. An index outside [0, x_len) gives an element of
 * all one bits (a NaN in a float dtype, -1 in a signed integer one).
 * Scatter (scatter true, index set, x_start and y_start 0): for j < count,
 * y[o, index[j], i] = x[o, j, i], bits moved; an index outside [0, y_len)
 * is skipped, y's other rows are left; where indices repeat, one of
 * their rows lands, which one unspecified (as PyTorch's index_copy_).
 * Accumulate (index set; x f32, f16 or bf16; y f32): every element of y
 * written, y[o, v, i] = the sum in f32, over j < count in increasing order
 * with index[j] == v, of x[o, j, i] (0 where there is none): the same bits
 * on every device, with no atomics. Indices outside [0, y_len) are
 * skipped. x_start and y_start are 0. */
typedef struct ug_gather_args {
    bool accumulate, scatter;
    ug_kview y, x, index;
    int64_t outer, inner, count, x_len, y_len, x_start, y_start;
} ug_gather_args;

/* Where an attention operand's rows lie: row i of head h of batch entry b
 * starts at element b * batch + h * head + i * row of its view, its
 * head_dim values contiguous. [batch, heads, rows, d] contiguous is
 * {heads * rows * d, rows * d, d}; q, k and v packed in one [batch, rows,
 * 3, heads, d] tensor (a linear layer's output) are each {rows * 3 * heads
 * * d, d, 3 * heads * d}, at offsets 0, heads * d and 2 * heads * d. */
typedef struct ug_attention_layout {
    int64_t batch, head, row;
} ug_attention_layout;

/* Scaled dot-product attention, fused (FlashAttention's online softmax:
 * memory linear in the sequence). q has q_len rows of head_dim for each
 * (batch, head) bh, k and v kv_len rows, one dtype (f32, f16 or bf16;
 * arithmetic in f32), each placed by its layout (dq, dk, dv take those of
 * q, k, v; dout o's). For query row i and key j: s[i, j] = scale * (q_i .
 * k_j) + mask[b, h, i, j] (mask.mem set: in q's dtype, read through
 * mask_strides over [batch, heads, q_len, kv_len], 0 for a broadcast
 * axis), the keys j > i left out where causal (PyTorch's is_causal: the
 * top-left triangle); p = softmax_j(s). With dropout > 0, z[i, j] is 0
 * where the uniform draw u of counter offset (+ runs[0] <<
 * UG_RANDOM_RUN_SHIFT where runs.mem is set) + (bh * q_len + i) * kv_len
 * + j under key seed (ug_random_args' draw) is below dropout, else 1 / (1
 * - dropout); without, 1.
 * Forward: o_i = sum_j p[i, j] z[i, j] v_j (o in q's dtype) and lse_i =
 * log sum_j exp(s[i, j]) (f32 [batch, heads, q_len]); a row with no key
 * left gives NaN in o and -inf in lse.
 * Backward (backward true): from dout, o and lse: delta_i = dout_i . o_i
 * (written to delta, f32 [batch, heads, q_len]), p recomputed as exp(s -
 * lse), dv_j = sum_i p z dout_i, ds[i, j] = p (z dout_i . v_j - delta_i),
 * dq_i = scale sum_j ds[i, j] k_j, dk_j = scale sum_i ds[i, j] q_i; each
 * written once. deterministic (ug_deterministic()): the same bits on every
 * run, and no path chosen by timing. */
typedef struct ug_attention_args {
    bool backward, causal, deterministic;
    float scale, dropout;
    uint64_t seed, offset;
    ug_kview q, k, v, o, lse, mask, runs;
    ug_kview dout, dq, dk, dv, delta;
    ug_attention_layout q_at, k_at, v_at, o_at;
    int64_t batch, heads, q_len, kv_len, head_dim;
    int64_t mask_strides[4];
} ug_attention_args;

/* The head dimensions the attention kernels take (their per-row buffers). */
#define UG_ATTENTION_MAX_HEAD_DIM 256

/* The kernel families, one line each: the enum name (UG_KERNEL_<NAME>), the
 * table slot and the argument struct. Everything that lists families is
 * generated from here: the enum, the names in messages, the slot typedefs
 * (ug_<slot>_fn) and slots of ug_backend, UG_BACKEND_TABLE, the core's
 * dispatch and the interface version. Optional families may be NULL in a
 * table (a library's own convolutions); UG_BACKEND_TABLE leaves them NULL. */
#define UG_KERNEL_FAMILIES(X, ctx)                        \
    X(ctx, UNARY, unary, ug_unary_args)                   \
    X(ctx, BINARY, binary, ug_binary_args)                \
    X(ctx, REDUCE, reduce, ug_reduce_args)                \
    X(ctx, GEMM, gemm, ug_gemm_args)                      \
    X(ctx, SOFTMAX, softmax, ug_softmax_args)             \
    X(ctx, RANDOM, random, ug_random_args)                \
    X(ctx, CROSS_ENTROPY, cross_entropy, ug_xent_args)    \
    X(ctx, LAYERNORM, layernorm, ug_layernorm_args)       \
    X(ctx, OPTIMIZER, optimizer, ug_optim_args)           \
    X(ctx, IM2COL, im2col, ug_im2col_args)                \
    X(ctx, POOL2D, pool2d, ug_pool2d_args)                \
    X(ctx, BATCHNORM, batchnorm, ug_batchnorm_args)      \
    X(ctx, UPSAMPLE2D, upsample2d, ug_upsample2d_args)   \
    X(ctx, AUGMENT, augment, ug_augment_args)             \
    X(ctx, GATHER, gather, ug_gather_args)                \
    X(ctx, ATTENTION, attention, ug_attention_args)
#define UG_OPTIONAL_KERNEL_FAMILIES(X, ctx) X(ctx, CONV, conv2d, ug_conv_args)

/* Declares a backend's kernel entries, <prefix>_<slot> of type ug_<slot>_fn
 * ("UG_BACKEND_KERNELS(ug_opencl)" declares ug_opencl_unary,
 * ug_opencl_binary, ...), the names UG_BACKEND_TABLE fills the table with.
 * Every backend's prefix is ug_<backend> (ug_cpu, ug_opencl, ug_hip), and
 * each family's entries live in the file of the same base name in every
 * backend (tests/structure/backend_layout.cmake checks both). */
#define UG_BACKEND_KERNEL_(prefix, NAME, slot, args) ug_##slot##_fn prefix##_##slot;
#define UG_BACKEND_KERNELS(prefix) UG_KERNEL_FAMILIES(UG_BACKEND_KERNEL_, prefix)

typedef enum ug_kernel_family {
#define UG_FAMILY_ENUM_(ctx, NAME, slot, args) UG_KERNEL_##NAME,
    UG_KERNEL_FAMILIES(UG_FAMILY_ENUM_, _) UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_ENUM_, _)
#undef UG_FAMILY_ENUM_
    UG_KERNEL_FAMILY_COUNT
} ug_kernel_family;

/* The signature of each entry, so a backend declares its functions by type
 * ("ug_alloc_fn ug_opencl_alloc;") and every signature is written once. */
typedef ug_status ug_alloc_fn(ug_bdev *dev, size_t bytes, ug_mem *out);
typedef void ug_release_fn(ug_bdev *dev, ug_mem mem);
typedef ug_status ug_write_fn(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, const void *src,
                              size_t bytes, bool blocking);
typedef ug_status ug_read_fn(ug_bdev *dev, void *dst, ug_mem src, size_t src_offset_bytes,
                             size_t bytes, bool blocking);
typedef ug_status ug_copy_fn(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, ug_mem src,
                             size_t src_offset_bytes, size_t bytes);
typedef ug_status ug_synchronize_fn(ug_bdev *dev);
/* Optional: bytes of src, on src_dev (another device of this backend), to
 * dst on dev, device to device where the devices can reach each other
 * (the runtime goes through the host where not), queued on dev's stream.
 * The caller has waited for src_dev's work. */
typedef ug_status ug_copy_peer_fn(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, ug_bdev *src_dev,
                                  ug_mem src, size_t src_offset_bytes, size_t bytes);
typedef void *ug_host_alloc_fn(ug_bdev *dev, size_t bytes);
typedef void ug_host_free_fn(ug_bdev *dev, void *ptr);
/* Streams and events: see the top of this file. stream_destroy finishes the
 * stream's work first. Events are recorded on a stream (NULL: default) and
 * complete when the work queued before them has; re-recording moves one.
 * elapsed: nanoseconds between two completed timing events, from the
 * device's own clock (the host's on the CPU). */
typedef ug_status ug_stream_create_fn(ug_bdev *dev, ug_bstream **out);
typedef void ug_stream_destroy_fn(ug_bdev *dev, ug_bstream *stream);
typedef void ug_stream_bind_fn(ug_bdev *dev, ug_bstream *stream);
typedef ug_status ug_stream_synchronize_fn(ug_bdev *dev, ug_bstream *stream);
typedef ug_status ug_event_create_fn(ug_bdev *dev, bool timing, ug_bevent **out);
typedef void ug_event_destroy_fn(ug_bdev *dev, ug_bevent *event);
typedef ug_status ug_event_record_fn(ug_bdev *dev, ug_bevent *event, ug_bstream *stream);
typedef ug_status ug_event_wait_fn(ug_bdev *dev, ug_bstream *stream, ug_bevent *event);
typedef ug_status ug_event_query_fn(ug_bdev *dev, ug_bevent *event, bool *done);
typedef ug_status ug_event_synchronize_fn(ug_bdev *dev, ug_bevent *event);
typedef ug_status ug_event_elapsed_fn(ug_bdev *dev, ug_bevent *start, ug_bevent *end,
                                      int64_t *nanoseconds);
/* What a library working on the device's own memory and streams needs:
 * mem's device address, and the calling thread's current stream
 * (cudaStream_t, hipStream_t; NCCL, RCCL), the device made current on the
 * thread. Where the memory is the host's (cpu), its host address and a
 * NULL stream, for MPI to work on in place. UG_ERR_UNSUPPORTED, saying
 * why, where the memory is neither (OpenCL buffers). */
typedef ug_status ug_native_fn(ug_bdev *dev, ug_mem mem, void **address, void **stream);
/* Capturing a stream's work to replay it with one launch (CUDA and HIP
 * graphs). Optional, all four or none: without them the core launches
 * each kernel. capture_begin: the work the calling thread issues to stream
 * (NULL: the device's default) is recorded from now on, not run.
 * capture_end: stops recording; *replay is the recorded work, or an error
 * says why the capture failed (an unsupported call in it: nothing of it
 * ran, and the caller issues the work again itself). replay runs the
 * recorded work on stream, in order; replay_free releases it. */
typedef ug_status ug_stream_capture_begin_fn(ug_bdev *dev, ug_bstream *stream);
typedef ug_status ug_stream_capture_end_fn(ug_bdev *dev, ug_bstream *stream, void **replay);
typedef ug_status ug_stream_replay_fn(ug_bdev *dev, ug_bstream *stream, void *replay);
typedef void ug_replay_free_fn(ug_bdev *dev, void *replay);
/* Measures the device's tunable choices (its GEMM's kernel parameters)
 * now, installs the fastest and caches them on disk per device, driver and
 * library version (base/cache_file.h), as a first use without a cache
 * would. report gets a few lines saying what was measured. Optional: NULL
 * where nothing is tuned. */
typedef ug_status ug_autotune_fn(ug_bdev *dev, char *report, size_t report_len);
#define UG_FAMILY_TYPEDEF_(ctx, NAME, slot, args) typedef ug_status ug_##slot##_fn(ug_bdev *dev, const args *a);
UG_KERNEL_FAMILIES(UG_FAMILY_TYPEDEF_, _)
UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_TYPEDEF_, _)
#undef UG_FAMILY_TYPEDEF_
/* Whether conv2d runs the convolution of args' pass and geometry (views
 * unused), and the workspace it needs; false: the core uses im2col. The
 * answer for the same geometry never changes. */
typedef ug_status ug_conv_plan_fn(ug_bdev *dev, const ug_conv_args *args, bool *runs,
                                  size_t *workspace_bytes);

typedef struct ug_backend {
    const char *name;       /* "cpu", "opencl", "hip", "cuda" */
    int interface_version;  /* UG_BACKEND_INTERFACE_VERSION */

    /* Discovers devices once (later calls return the same). With none,
     * writes a one-line reason ("no OpenCL platform: clGetPlatformIDs
     * returned -1001"). Never prints. */
    int (*device_count)(char *reason, size_t reason_len);
    /* Fills everything except id and backend, which the core sets. */
    ug_status (*device_info)(int index, ug_device_info *info);
    ug_status (*device_open)(int index, ug_bdev **out);
    void (*device_close)(ug_bdev *dev);
    /* Releases process-wide state (platform lists, loaded libraries). */
    void (*shutdown)(void);

    ug_alloc_fn *alloc;
    ug_release_fn *release;
    ug_write_fn *write;
    ug_read_fn *read;
    ug_copy_fn *copy;
    ug_synchronize_fn *synchronize;
    ug_copy_peer_fn *copy_peer; /* optional */
    /* Optional: page-locked host memory. */
    ug_host_alloc_fn *host_alloc;
    ug_host_free_fn *host_free;

    ug_stream_create_fn *stream_create;
    ug_stream_destroy_fn *stream_destroy;
    ug_stream_bind_fn *stream_bind;
    ug_stream_synchronize_fn *stream_synchronize;
    ug_event_create_fn *event_create;
    ug_event_destroy_fn *event_destroy;
    ug_event_record_fn *event_record;
    ug_event_wait_fn *event_wait;
    ug_event_query_fn *event_query;
    ug_event_synchronize_fn *event_synchronize;
    ug_event_elapsed_fn *event_elapsed;
    ug_native_fn *native;
    /* Optional (see ug_stream_capture_begin_fn). */
    ug_stream_capture_begin_fn *stream_capture_begin;
    ug_stream_capture_end_fn *stream_capture_end;
    ug_stream_replay_fn *stream_replay;
    ug_replay_free_fn *replay_free;
    /* Optional. */
    ug_autotune_fn *autotune;

#define UG_FAMILY_SLOT_(ctx, NAME, slot, args) ug_##slot##_fn *slot;
    UG_KERNEL_FAMILIES(UG_FAMILY_SLOT_, _)
    /* Optional, with conv_plan: a library's convolutions. */
    ug_conv_plan_fn *conv_plan;
    UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_SLOT_, _)
#undef UG_FAMILY_SLOT_
} ug_backend;

/* The interface version a module must have been built with. It is derived
 * from what the compiler sees (the families' positions and argument sizes,
 * the table's size, the unary and binary op lists of
 * kernels/common/elementwise.h), so a module built from other sources is
 * refused; bump the revision for a change of meaning that keeps every
 * size. */
#define UG_BACKEND_INTERFACE_REVISION 23
#define UG_FAMILY_SIGNATURE_(ctx, NAME, slot, args) +(UG_KERNEL_##NAME + 1) * (int)sizeof(args)
#define UG_BACKEND_INTERFACE_VERSION                                                          \
    (UG_BACKEND_INTERFACE_REVISION * 1000000 +                                               \
     (int)((sizeof(ug_backend) + 7 * sizeof(ug_backend_host) + 100 * UG_UNARY_COUNT + UG_BINARY_COUNT                    \
            UG_KERNEL_FAMILIES(UG_FAMILY_SIGNATURE_, _)                                      \
                UG_OPTIONAL_KERNEL_FAMILIES(UG_FAMILY_SIGNATURE_, _)) % 1000000))

/* The table of a backend whose entries are all named <prefix>_<entry>
 * (ug_cpu_alloc, ug_opencl_unary, ...): one line per backend, and every
 * backend names its functions alike. A backend leaving entries NULL lists its own. */
#define UG_BACKEND_TABLE(NAME, prefix)                                                   \
    {                                                                                    \
        .name = NAME, .interface_version = UG_BACKEND_INTERFACE_VERSION,                 \
        .device_count = prefix##_device_count, .device_info = prefix##_device_info,      \
        .device_open = prefix##_device_open, .device_close = prefix##_device_close,      \
        .shutdown = prefix##_shutdown, .alloc = prefix##_alloc,                          \
        .release = prefix##_release, .write = prefix##_write, .read = prefix##_read,     \
        .copy = prefix##_copy, .synchronize = prefix##_synchronize, .copy_peer = NULL,   \
        .host_alloc = prefix##_host_alloc, .host_free = prefix##_host_free,              \
        .stream_create = prefix##_stream_create, .stream_destroy = prefix##_stream_destroy, \
        .stream_bind = prefix##_stream_bind,                                             \
        .stream_synchronize = prefix##_stream_synchronize,                               \
        .event_create = prefix##_event_create, .event_destroy = prefix##_event_destroy,  \
        .event_record = prefix##_event_record, .event_wait = prefix##_event_wait,        \
        .event_query = prefix##_event_query,                                             \
        .event_synchronize = prefix##_event_synchronize,                                 \
        .event_elapsed = prefix##_event_elapsed, .native = prefix##_native,              \
        .stream_capture_begin = NULL, .stream_capture_end = NULL,                        \
        .stream_replay = NULL, .replay_free = NULL, .autotune = NULL,                    \
        UG_KERNEL_FAMILIES(UG_TABLE_SLOT_, prefix).conv_plan = NULL,                     \
        UG_OPTIONAL_KERNEL_FAMILIES(UG_TABLE_NULL_, prefix)                              \
    }
#define UG_TABLE_SLOT_(prefix, NAME, slot, args) .slot = prefix##_##slot,
#define UG_TABLE_NULL_(prefix, NAME, slot, args) .slot = NULL,

/* Built-in backends: each returns its table (filled even when the runtime is
 * absent: device_count then reports the reason). */
const ug_backend *ug_cpu_backend(const ug_backend_host *host);
const ug_backend *ug_opencl_backend(const ug_backend_host *host);

/* A run-time module exports this symbol: it returns its table, or NULL with
 * *reason set when host_version is not the module's. */
typedef const ug_backend *(*ug_module_entry_fn)(int host_version,
                                                 const ug_backend_host *host,
                                                 const char **reason);
#define UG_MODULE_ENTRY_SYMBOL "ug_backend_module_entry"


#ifdef __cplusplus
}
#endif
#endif
