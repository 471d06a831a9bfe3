/* conv2d over NCHW tensors: the backend's convolution library where it has
 * one that takes the shape, otherwise im2col and the device's GEMM, eager
 * and in graphs, defined once with its gradients; and the window geometry
 * pooling shares. */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/conv.h"
#include "unigrad/ops.h"

int64_t ug_conv_output_size(int64_t in, int kernel, int stride, int padding, int dilation)
{
    if (in < 0 || stride < 1 || dilation < 1 || kernel < 1 || padding < 0)
        return -1;
    /* dilation (kernel - 1) + 1 <= 2^62 always fits; the padded size may
     * not, for an in near INT64_MAX. */
    int64_t span = (int64_t)dilation * (kernel - 1) + 1, padded;
    if (__builtin_add_overflow(in, 2 * (int64_t)padding, &padded))
        return -1;
    int64_t room = padded - span;
    return room < 0 ? 0 : room / stride + 1;
}

ug_status ug_infer_images(const ug_op *op, const ug_meta *x)
{
    UG_TRY(ug_infer_float(op, x, "x"));
    if (x->ndim != 4) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE, "%s: x is %s; expected images [N, C, H, W]", op->name,
                            ug_format_shape(x->ndim, x->shape, s, sizeof s));
    }
    return UG_OK;
}

/* The window's output size, or an error naming the axis when it has none. */
ug_status ug_window_outputs(const ug_op *op, ug_window2d *win)
{
    win->oh = ug_conv_output_size(win->h, win->kh, win->sh, win->ph, win->dh);
    win->ow = ug_conv_output_size(win->w, win->kw, win->sw, win->pw, win->dw);
    if (win->oh < 1 || win->ow < 1)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: the %dx%d window (dilation %dx%d) does not fit the %lldx%lld image "
                            "padded by %dx%d: no output; pad more or use a smaller kernel",
                            op->name, win->kh, win->kw, win->dh, win->dw, (long long)win->h,
                            (long long)win->w, win->ph, win->pw);
    return UG_OK;
}

void ug_window_take_image(ug_window2d *win, const int64_t *shape)
{
    win->n = shape[0];
    win->c = shape[1];
    win->h = shape[2];
    win->w = shape[3];
}

/* x may be f32, f16 or bf16 (the kernels compute in f32). A convolution
 * runs in x's half dtype when its weight has it too, otherwise in f32 with
 * the result rounded to x's dtype (ug_op_eager_cast). */
static ug_dtype conv_dtype(ug_dtype x, ug_dtype weight)
{
    return x != UG_F32 && ug_dtype_is_float(x) && weight == x ? x : UG_F32;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static ug_kview view_at(ug_kview v, int64_t offset)
{
    v.offset += offset;
    return v;
}

/* im2col of win.n images from image into col, or col2im back (to_image). */
static ug_status launch_im2col(const char *op, ug_device *dev, bool to_image, ug_kview image,
                               ug_kview col, const ug_window2d *win)
{
    if (win->n * win->c * win->h * win->w == 0 || win->oh * win->ow == 0)
        return UG_OK;
    ug_im2col_args args = {.to_image = to_image, .image = image, .col = col, .win = *win};
    return ug_dispatch(dev, UG_KERNEL_IM2COL, op, UG_F32, &args);
}

/* ---- conv2d: in x [N, C, H, W], weight [OC, C/G, KH, KW], bias [OC] ---- */

static int or_one(int v) { return v ? v : 1; }

/* On the CPU device a convolution runs in chunks of images whose im2col
 * columns fit in cache: each chunk's columns are made and multiplied while
 * they are still there, instead of the whole batch's going out to memory
 * and back (the columns are kernel-size times the image). A GPU takes the
 * whole batch at once, for parallelism. An OpenCL device on a CPU (POCL)
 * sits between: each launch costs tens of microseconds and a product of
 * one image's columns is too small for its GEMM to reach speed (a
 * ResNet's 16-channel convolutions ran at 4 GFLOP/s an image at a time),
 * so it takes chunks of up to 4 MiB of columns (ResNet-20's step measured
 * the same with 64 MiB, whose scratch took 16 MiB more). */
#define UG_CONV_CPU_CHUNK_BYTES ((int64_t)1 << 20)
#define UG_CONV_OPENCL_CPU_CHUNK_BYTES ((int64_t)4 << 20)

/* The op's window and groups from the public parameters (NULL: defaults),
 * for device (NULL: the whole batch at once). */
static ug_op conv_op(const ug_op_def *def, const char *name, const ug_conv2d_params *p,
                     ug_device *device)
{
    ug_conv2d_params d = p ? *p : (ug_conv2d_params){0};
    ug_op op = {.def = def, .name = name};
    op.p.conv.device = device;
    op.p.conv.win = (ug_window2d){.sh = or_one(d.stride[0]), .sw = or_one(d.stride[1]),
                                  .ph = d.padding[0], .pw = d.padding[1],
                                  .dh = or_one(d.dilation[0]), .dw = or_one(d.dilation[1])};
    op.p.conv.groups = or_one(d.groups);
    return op;
}

static ug_status conv_check_params(const ug_op *op)
{
    const ug_window2d *w = &op->p.conv.win;
    if (w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1 || w->ph < 0 || w->pw < 0 ||
        op->p.conv.groups < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: stride %dx%d, dilation %dx%d, padding %dx%d, groups %d: strides, "
                            "dilations and groups must be positive and padding not negative",
                            op->name, w->sh, w->sw, w->dh, w->dw, w->ph, w->pw, op->p.conv.groups);
    return UG_OK;
}

/* Images per chunk: on a device on the host's processor as many as fit its
 * chunk's bytes of columns (at least one), otherwise all of them. Counted
 * in f32 whatever the dtype: a half graph's chunks then take as many
 * images as an f32 one's, in half the scratch, as its activations. */
static int64_t chunk_images(const ug_op *op, int64_t images, int64_t col_per_image)
{
    int64_t bytes = col_per_image * (int64_t)sizeof(float);
    const ug_device *d = op->p.conv.device;
    if (!d || d->info.is_gpu || bytes == 0)
        return images;
    const bool host = strcmp(d->backend->name, "cpu") == 0;
    int64_t fit = (host ? UG_CONV_CPU_CHUNK_BYTES : UG_CONV_OPENCL_CPU_CHUNK_BYTES) / bytes;
    return fit < 1 ? 1 : fit < images ? fit : images;
}

/* Elements of one image's im2col columns: [c * kh * kw, oh * ow]. */
static int64_t image_columns(const ug_window2d *w)
{
    return w->c * w->kh * w->kw * w->oh * w->ow;
}

/* -1: not yet read from UG_DETERMINISTIC. */
static _Atomic int g_deterministic = -1;

void ug_set_deterministic(bool enabled) { g_deterministic = enabled; }

bool ug_deterministic(void)
{
    int d = g_deterministic;
    if (d < 0) {
        const char *env = getenv("UG_DETERMINISTIC");
        int from_env = env && *env && strcmp(env, "0") != 0;
        /* A concurrent ug_set_deterministic wins over the environment. */
        atomic_compare_exchange_strong(&g_deterministic, &d, from_env);
        d = g_deterministic;
    }
    return d == 1;
}

/* Whether UG_CONV=im2col keeps every convolution off the libraries. */
static bool library_refused(void)
{
    const char *env = getenv("UG_CONV");
    return env && strcmp(env, "im2col") == 0;
}

/* The library's pass of args (views unset, the bias's dtype set) on the
 * op's device in dtype: whether it runs it and with how much workspace. */
static ug_status library_plan(const ug_op *op, ug_dtype dtype, ug_conv_args *args, bool *runs,
                              size_t *bytes)
{
    *runs = false;
    *bytes = 0;
    ug_device *d = op->p.conv.device;
    if (!d || library_refused())
        return UG_OK;
    args->dtype = dtype;
    args->groups = op->p.conv.groups;
    args->deterministic = ug_deterministic();
    return ug_call_conv_plan(d, args, runs, bytes, op->name);
}

/* Values of one image's partial weight gradient, kept on a GPU: there one
 * batched GEMM into every image's partial and one sum over the images
 * replace a GEMM launch per image (the vendors' BLAS has no batched call
 * that sums), which left a convolution's backward pass bound by launches.
 * 0 for the other passes and on the CPU, whose chunks sum in place. */
static int64_t dw_partial_values(const ug_op *op, const ug_conv_args *args)
{
    const ug_device *d = op->p.conv.device;
    if (args->pass != UG_CONV_BACKWARD_WEIGHTS || !d || !d->info.is_gpu)
        return 0;
    return args->oc * (args->win.c / op->p.conv.groups) * args->win.kh * args->win.kw;
}

/* A pass's scratch (1-D): the im2col columns of a chunk of images (and
 * their partial weight gradients), or the library's workspace when it runs
 * the pass and needs more. */
static ug_status conv_scratch(const ug_op *op, ug_dtype dtype, ug_conv_args *args,
                              ug_meta *scratch)
{
    bool runs = false;
    size_t bytes = 0;
    UG_TRY(library_plan(op, dtype, args, &runs, &bytes));
    /* Overflow-checked: a huge kernel, stride or dilation must be refused
     * here, not wrap into a small scratch. */
    const ug_window2d *w = &args->win;
    int64_t columns = 0, per_image = 0, words = 0;
    UG_TRY(ug_checked_numel(5, (int64_t[]){w->c, w->kh, w->kw, w->oh, w->ow}, ug_dtype_size(dtype), op->name,
                            &columns));
    if (__builtin_add_overflow(columns, dw_partial_values(op, args), &per_image) ||
        __builtin_mul_overflow(chunk_images(op, w->n, per_image), per_image, &words))
        return ug_set_error(UG_ERR_SHAPE, "%s: the im2col columns of %lld images of %lld values overflow",
                            op->name, (long long)w->n, (long long)per_image);
    const size_t size = ug_dtype_size(dtype);
    int64_t library_words = (int64_t)((bytes + size - 1) / size);
    if (runs && library_words > words)
        words = library_words;
    /* Columns in the op's dtype, or the library's workspace in as many bytes. */
    *scratch = (ug_meta){.dtype = dtype, .ndim = 1, .shape = {words > 0 ? words : 1}};
    return UG_OK;
}

/* A pass's geometry, per group, and how it runs in its scratch: by the
 * library when it takes the shape and the scratch holds its workspace,
 * otherwise im2col in chunks of `chunk` images (the rows bound may be fewer
 * than planned, and the library may answer otherwise for them). */
typedef struct conv_pass {
    ug_window2d win;
    int groups;
    int64_t oc, ohw, taps, cg_k, ocg, chunk;
    int64_t partials; /* values of an image's partial weight gradient, after the columns */
    bool library;
} conv_pass;

static ug_status plan_pass(const ug_op *op, ug_conv_args *args, const ug_tensor *scratch, conv_pass *p)
{
    bool runs = false;
    size_t bytes = 0;
    UG_TRY(library_plan(op, scratch->dtype, args, &runs, &bytes));
    const ug_window2d *w = &args->win;
    *p = (conv_pass){.win = *w, .groups = op->p.conv.groups, .oc = args->oc, .ohw = w->oh * w->ow,
                     .taps = (int64_t)w->kh * w->kw};
    p->cg_k = w->c / p->groups * p->taps;
    p->ocg = p->oc / p->groups;
    p->library = runs && bytes <= (size_t)ug_tensor_numel(scratch) * ug_dtype_size(scratch->dtype);
    p->partials = dw_partial_values(op, args);
    int64_t per_image = image_columns(w) + p->partials;
    p->chunk = per_image ? min64(ug_tensor_numel(scratch) / per_image, w->n) : w->n;
    if (!p->library && p->chunk < 1 && w->n > 0)
        return ug_set_error(UG_ERR_STATE, "%s: its scratch holds %lld values, less than one image's "
                            "%lld im2col columns and partials", op->name, (long long)ug_tensor_numel(scratch),
                            (long long)per_image);
    return UG_OK;
}

/* Runs the pass in args (planned by plan_pass, its views set) with the
 * library, in workspace. */
static ug_status library_run(const ug_op *op, ug_conv_args *args, const ug_tensor *workspace)
{
    args->workspace = ug_kview_of(workspace);
    args->workspace_bytes = (size_t)ug_tensor_numel(workspace) * ug_dtype_size(workspace->dtype);
    return ug_dispatch(ug_dev(workspace), UG_KERNEL_CONV, op->name, workspace->dtype, args);
}

static ug_status conv_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    const ug_meta *x = &in[0], *wt = &in[1];
    UG_TRY(ug_infer_images(op, x));
    if (wt->dtype != x->dtype)
        return ug_set_error(UG_ERR_DTYPE, "%s: x is %s and weight %s; they must share a dtype",
                            op->name, ug_dtype_name(x->dtype), ug_dtype_name(wt->dtype));
    UG_TRY(conv_check_params(op));
    char sx[96], sw[96];
    int groups = op->p.conv.groups;
    if (wt->ndim != 4 || x->shape[1] % groups != 0 || wt->shape[0] % groups != 0 ||
        wt->shape[1] * groups != x->shape[1] || wt->shape[2] < 1 || wt->shape[3] < 1)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: x is %s and weight %s with %d group(s); the weight must be "
                            "[out, in / groups, KH, KW] with in and out divisible by groups",
                            op->name, ug_format_shape(x->ndim, x->shape, sx, sizeof sx),
                            ug_format_shape(wt->ndim, wt->shape, sw, sizeof sw), groups);
    if (nin == 3) {
        UG_TRY(ug_infer_float(op, &in[2], "bias"));
        if (in[2].ndim != 1 || in[2].shape[0] != wt->shape[0])
            return ug_set_error(UG_ERR_SHAPE, "%s: bias is %s; expected [%lld] (one per output channel)",
                                op->name, ug_format_shape(in[2].ndim, in[2].shape, sx, sizeof sx),
                                (long long)wt->shape[0]);
    }
    if (wt->shape[2] > INT_MAX || wt->shape[3] > INT_MAX)
        return ug_set_error(UG_ERR_SHAPE, "%s: weight %s; a kernel is at most %d wide", op->name,
                            ug_format_shape(wt->ndim, wt->shape, sw, sizeof sw), INT_MAX);
    ug_window2d win = op->p.conv.win;
    ug_window_take_image(&win, x->shape);
    win.kh = (int)wt->shape[2];
    win.kw = (int)wt->shape[3];
    UG_TRY(ug_window_outputs(op, &win));
    out[0] = (ug_meta){.dtype = x->dtype, .ndim = 4, .shape = {win.n, wt->shape[0], win.oh, win.ow}};
    ug_conv_args args = {.pass = UG_CONV_FORWARD, .win = win, .oc = wt->shape[0], .with_bias = nin == 3,
                         .bias_dtype = nin == 3 ? in[2].dtype : UG_F32, .out_dtype = x->dtype};
    UG_TRY(conv_scratch(op, x->dtype, &args, &out[1]));
    *nout = 2;
    return UG_OK;
}

/* The window of a launch: the op's strides with the tensors' sizes. */
static ug_window2d conv_window(const ug_op *op, const ug_tensor *x, const ug_tensor *w,
                               const ug_tensor *y)
{
    ug_window2d win = op->p.conv.win;
    ug_window_take_image(&win, x->shape);
    win.kh = (int)w->shape[2];
    win.kw = (int)w->shape[3];
    win.oh = y->shape[2];
    win.ow = y->shape[3];
    return win;
}

/* Per group, C[b] = op(A[b]) op(B[b]) over the batch of images (or, with
 * sum_batch, C = beta C + their sum). */
typedef struct conv_gemm {
    bool ta, tb, sum_batch;
    int64_t m, n, k;
    ug_kview a, b, c;
    int64_t lda, ldb, ldc;
    int64_t group_a, group_b, group_c;    /* elements between groups */
    int64_t stride_a, stride_b, stride_c; /* elements between images */
    float beta;
} conv_gemm;

static ug_status conv_gemm_run(const char *op, ug_device *dev, const conv_gemm *cg, int groups,
                               int64_t images)
{
    for (int g = 0; g < groups; g++) {
        ug_gemm_args args = {.trans_a = cg->ta, .trans_b = cg->tb, .sum_batch = cg->sum_batch,
                             .deterministic = ug_deterministic(), .m = cg->m, .n = cg->n, .k = cg->k,
                             .alpha = 1.0f, .beta = cg->beta,
                             .a = view_at(cg->a, g * cg->group_a),
                             .b = view_at(cg->b, g * cg->group_b),
                             .c = view_at(cg->c, g * cg->group_c),
                             .lda = cg->lda, .ldb = cg->ldb, .ldc = cg->ldc,
                             .stride_a = cg->stride_a, .stride_b = cg->stride_b,
                             .stride_c = cg->stride_c, .batch = images};
        UG_TRY(ug_dispatch(dev, UG_KERNEL_GEMM, op, UG_F32, &args));
    }
    return UG_OK;
}

/* The chunk of images [first, first + count) of a window. */
static ug_window2d chunk_window(const ug_window2d *win, int64_t count)
{
    ug_window2d part = *win;
    part.n = count;
    return part;
}

static ug_status conv_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *x = in[0], *w = in[1], *bias = op->p.conv.bias ? in[2] : NULL;
    ug_tensor *y = out[0], *col = out[1];
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    ug_conv_args args = {.pass = UG_CONV_FORWARD, .x = ug_kview_of(x), .w = ug_kview_of(w),
                         .y = ug_kview_of(y), .win = conv_window(op, x, w, y), .oc = w->shape[0],
                         .with_bias = bias != NULL, .bias_dtype = bias ? bias->dtype : UG_F32,
                         .out_dtype = y->dtype};
    if (bias)
        args.bias = ug_kview_of(bias);
    conv_pass p;
    UG_TRY(plan_pass(op, &args, col, &p));
    if (p.library)
        return library_run(op, &args, col);
    for (int64_t first = 0; first < p.win.n; first += p.chunk) {
        ug_window2d part = chunk_window(&p.win, min64(p.chunk, p.win.n - first));
        ug_kview y_part = view_at(args.y, first * p.oc * p.ohw);
        UG_TRY(launch_im2col(op->name, ug_dev(x), false, view_at(args.x, first * p.win.c * p.win.h * p.win.w),
                             ug_kview_of(col), &part));
        if (bias) { /* y starts as the bias, and the products add to it */
            ug_unary_args fill = {.op = UG_UNARY_COPY, .y = y_part, .x = args.bias,
                                  .ndim = 3, .shape = {part.n, p.oc, p.ohw}, .x_strides = {0, 1, 0}};
            UG_TRY(ug_dispatch(ug_dev(y), UG_KERNEL_UNARY, op->name, UG_F32, &fill));
        }
        conv_gemm cg = {.m = p.ocg, .n = p.ohw, .k = p.cg_k,
                        .a = args.w, .b = ug_kview_of(col), .c = y_part,
                        .lda = p.cg_k, .ldb = p.ohw, .ldc = p.ohw,
                        .group_a = p.ocg * p.cg_k, .group_b = p.cg_k * p.ohw, .group_c = p.ocg * p.ohw,
                        .stride_a = 0, .stride_b = p.win.c * p.taps * p.ohw, .stride_c = p.oc * p.ohw,
                        .beta = bias ? 1.0f : 0.0f};
        UG_TRY(conv_gemm_run(op->name, ug_dev(y), &cg, p.groups, part.n));
    }
    return UG_OK;
}

/* dx: in gy [N, OC, OH, OW], weight; the image size is the op's. */
static ug_status conv_dx_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    const ug_meta *gy = &in[0], *wt = &in[1];
    ug_window2d win = op->p.conv.win;
    win.n = gy->shape[0];
    win.oh = gy->shape[2];
    win.ow = gy->shape[3];
    out[0] = (ug_meta){.dtype = gy->dtype, .ndim = 4, .shape = {win.n, win.c, win.h, win.w}};
    ug_conv_args args = {.pass = UG_CONV_BACKWARD_DATA, .win = win, .oc = wt->shape[0], .out_dtype = gy->dtype};
    UG_TRY(conv_scratch(op, gy->dtype, &args, &out[1]));
    *nout = 2;
    return UG_OK;
}

static ug_status conv_dx_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *gy = in[0], *w = in[1];
    ug_tensor *dx = out[0], *dcol = out[1];
    if (ug_tensor_numel(dx) == 0)
        return UG_OK;
    ug_conv_args args = {.pass = UG_CONV_BACKWARD_DATA, .dx = ug_kview_of(dx), .w = ug_kview_of(w),
                         .dy = ug_kview_of(gy), .win = conv_window(op, dx, w, gy), .oc = w->shape[0],
                         .out_dtype = dx->dtype};
    conv_pass p;
    UG_TRY(plan_pass(op, &args, dcol, &p));
    if (p.library)
        return library_run(op, &args, dcol);
    for (int64_t first = 0; first < p.win.n; first += p.chunk) {
        ug_window2d part = chunk_window(&p.win, min64(p.chunk, p.win.n - first));
        /* dcol[n, g] = W[g]^T gy[n, g] */
        conv_gemm cg = {.ta = true, .m = p.cg_k, .n = p.ohw, .k = p.ocg,
                        .a = args.w, .b = view_at(args.dy, first * p.oc * p.ohw),
                        .c = ug_kview_of(dcol), .lda = p.cg_k, .ldb = p.ohw, .ldc = p.ohw,
                        .group_a = p.ocg * p.cg_k, .group_b = p.ocg * p.ohw, .group_c = p.cg_k * p.ohw,
                        .stride_a = 0, .stride_b = p.oc * p.ohw, .stride_c = p.win.c * p.taps * p.ohw};
        UG_TRY(conv_gemm_run(op->name, ug_dev(dx), &cg, p.groups, part.n));
        UG_TRY(launch_im2col(op->name, ug_dev(dx), true, view_at(args.dx, first * p.win.c * p.win.h * p.win.w),
                             ug_kview_of(dcol), &part));
    }
    return UG_OK;
}

const ug_op_def ug_op_conv2d_dx = {.family = "conv2d input gradient", .infer = conv_dx_infer,
                                   .launch = conv_dx_launch};

/* dweight: in gy, x; the kernel size is the op's. */
static ug_status conv_dw_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    const ug_meta *gy = &in[0], *x = &in[1];
    ug_window2d win = op->p.conv.win;
    ug_window_take_image(&win, x->shape);
    win.oh = gy->shape[2];
    win.ow = gy->shape[3];
    out[0] = (ug_meta){.dtype = gy->dtype, .ndim = 4,
                       .shape = {gy->shape[1], win.c / op->p.conv.groups, win.kh, win.kw}};
    ug_conv_args args = {.pass = UG_CONV_BACKWARD_WEIGHTS, .win = win, .oc = gy->shape[1], .out_dtype = gy->dtype};
    UG_TRY(conv_scratch(op, gy->dtype, &args, &out[1]));
    if (gy->dtype != UG_F32) { /* the gradient of a half copy of an f32 weight is written as f32 (a cast
                                * folded in, plan.c): scratch for that too */
        ug_meta f32_out;
        args.out_dtype = UG_F32;
        UG_TRY(conv_scratch(op, gy->dtype, &args, &f32_out));
        if (f32_out.shape[0] > out[1].shape[0])
            out[1] = f32_out;
    }
    *nout = 2;
    return UG_OK;
}

static ug_status conv_dw_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *gy = in[0], *x = in[1];
    ug_tensor *dw = out[0], *col = out[1];
    if (ug_tensor_numel(dw) == 0)
        return UG_OK;
    ug_conv_args args = {.pass = UG_CONV_BACKWARD_WEIGHTS, .x = ug_kview_of(x), .dw = ug_kview_of(dw),
                         .dy = ug_kview_of(gy), .win = conv_window(op, x, dw, gy), .oc = dw->shape[0],
                         .out_dtype = dw->dtype};
    if (args.win.n == 0)
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, 0.0f, dw, NULL);
    conv_pass p;
    UG_TRY(plan_pass(op, &args, col, &p));
    if (p.library)
        return library_run(op, &args, col);
    for (int64_t first = 0; first < p.win.n; first += p.chunk) {
        ug_window2d part = chunk_window(&p.win, min64(p.chunk, p.win.n - first));
        UG_TRY(launch_im2col(op->name, ug_dev(x), false, view_at(args.x, first * p.win.c * p.win.h * p.win.w),
                             ug_kview_of(col), &part));
        /* dW[g] = the sum over images of gy[n, g] col[n, g]^T */
        conv_gemm cg = {.tb = true, .sum_batch = true, .m = p.ocg, .n = p.cg_k, .k = p.ohw,
                        .a = view_at(args.dy, first * p.oc * p.ohw), .b = ug_kview_of(col),
                        .c = args.dw, .lda = p.ohw, .ldb = p.ohw, .ldc = p.cg_k,
                        .group_a = p.ocg * p.ohw, .group_b = p.cg_k * p.ohw, .group_c = p.ocg * p.cg_k,
                        .stride_a = p.oc * p.ohw, .stride_b = p.win.c * p.taps * p.ohw,
                        .beta = first ? 1.0f : 0.0f};
        if (p.partials && p.chunk == p.win.n) {
            /* Every image's product into the partials ([groups, images,
             * OC/G x C/G x taps], after the columns), then their sum. */
            ug_kview partials = view_at(ug_kview_of(col), p.chunk * image_columns(&p.win));
            int64_t per_group = p.ocg * p.cg_k;
            cg.sum_batch = false;
            cg.c = partials;
            cg.group_c = part.n * per_group;
            cg.stride_c = per_group;
            cg.beta = 0.0f;
            UG_TRY(conv_gemm_run(op->name, ug_dev(dw), &cg, p.groups, part.n));
            ug_reduce_args sum = {.op = UG_RKERNEL_SUM, .y = args.dw, .x = partials,
                                  .outer = p.groups, .len = part.n, .inner = per_group};
            UG_TRY(ug_dispatch(ug_dev(dw), UG_KERNEL_REDUCE, op->name, UG_F32, &sum));
            continue;
        }
        UG_TRY(conv_gemm_run(op->name, ug_dev(dw), &cg, p.groups, part.n));
    }
    return UG_OK;
}

const ug_op_def ug_op_conv2d_dw = {.family = "conv2d weight gradient", .infer = conv_dw_infer,
                                   .launch = conv_dw_launch, .absorb = ug_absorbs_cast};

static ug_status conv_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *w = n->in[1], *bias = n->op->p.conv.bias ? n->in[2] : NULL;
    ug_op op = *n->op;
    op.p.conv.win.c = ug_value_dim(x, 1);
    op.p.conv.win.h = ug_value_dim(x, 2);
    op.p.conv.win.w = ug_value_dim(x, 3);
    op.p.conv.win.kh = (int)ug_value_dim(w, 2);
    op.p.conv.win.kw = (int)ug_value_dim(w, 3);
    if (ug_grad_needed(x)) {
        op.def = &ug_op_conv2d_dx;
        op.name = "conv2d input gradient";
        ug_value *in[2] = {gy, w}, *dx = NULL;
        UG_TRY(ug_op_graph(g, &op, 2, in, &dx));
        UG_TRY(ug_grad_give(g, x, dx));
    }
    if (ug_grad_needed(w)) {
        op.def = &ug_op_conv2d_dw;
        op.name = "conv2d weight gradient";
        ug_value *in[2] = {gy, x}, *dw = NULL;
        UG_TRY(ug_op_graph(g, &op, 2, in, &dw));
        UG_TRY(ug_grad_give(g, w, dw));
    }
    if (bias && ug_grad_needed(bias)) { /* the sum over images and positions */
        int64_t flat[3] = {ug_value_dim(gy, 0), ug_value_dim(gy, 1), ug_value_dim(gy, 2) * ug_value_dim(gy, 3)};
        ug_value *gy3 = NULL, *per_image = NULL, *db = NULL;
        UG_TRY(ug_g_reshape(g, gy, 3, flat, &gy3));
        UG_TRY(ug_g_reduce_axes(g, gy3, UG_RKERNEL_SUM, 2, false, false, &per_image));
        UG_TRY(ug_g_reduce_axes(g, per_image, UG_RKERNEL_SUM, 0, false, false, &db));
        UG_TRY(ug_grad_give(g, bias, db));
    }
    return UG_OK;
}

const ug_op_def ug_op_conv2d = {.family = "conv2d", .infer = conv_infer, .launch = conv_launch,
                                .backward = conv_backward, .inputs = {"x", "weight", "bias"},
                                .autocast = ug_autocast_half};

ug_status ug_conv2d(const ug_tensor *x, const ug_tensor *weight, const ug_tensor *bias,
                    const ug_conv2d_params *params, ug_tensor **out)
{
    ug_op op = conv_op(&ug_op_conv2d, "conv2d", params, x ? ug_dev(x) : NULL);
    op.p.conv.bias = bias != NULL;
    const ug_tensor *in[3] = {x, weight, bias};
    ug_dtype common = UG_AS_GIVEN;
    if (x && weight) /* NULLs are named by ug_op_eager_cast */
        common = conv_dtype(x->dtype, weight->dtype);
    const ug_dtype want[3] = {common, common, UG_AS_GIVEN};
    return ug_op_eager_cast(&op, bias ? 3 : 2, in, want, out);
}

ug_status ug_g_conv2d(ug_graph *g, ug_value *x, ug_value *weight, ug_value *bias,
                      const ug_conv2d_params *params, ug_value **out)
{
    ug_op op = conv_op(&ug_op_conv2d, "graph conv2d", params, g ? ug_graph_device(g) : NULL);
    op.p.conv.bias = bias != NULL;
    ug_value *in[3] = {x, weight, bias};
    /* In a mixed-precision graph autocast gives x and the weight its dtype. */
    ug_dtype common = UG_AS_GIVEN;
    if (g && ug_graph_precision(g) == UG_F32 && x && weight)
        common = conv_dtype(ug_value_dtype(x), ug_value_dtype(weight));
    const ug_dtype want[3] = {common, common, UG_AS_GIVEN};
    return ug_op_graph_cast(g, &op, bias ? 3 : 2, in, want, out);
}
