/* Nearest-neighbour upsampling of NCHW images by integer factors, eager
 * and in graphs, defined once with its gradient (the sum of each pixel's
 * copies, kernel family upsample2d). */
#include <stdint.h>

#include "core/ops/op.h"
#include "unigrad/conv.h"

/* PyTorch's own limit is memory; a factor this large is a mistake. */
enum { MAX_SCALE = 1 << 16 };

static ug_op upsample_op(const ug_op_def *def, const char *name, int scale_h, int scale_w)
{
    ug_op op = {.def = def, .name = name};
    op.p.window.win = (ug_window2d){.sh = scale_h, .sw = scale_w, .kh = 1, .kw = 1, .dh = 1, .dw = 1};
    return op;
}

static ug_status upsample_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_images(op, &in[0]));
    const ug_window2d *win = &op->p.window.win;
    if (win->sh < 1 || win->sw < 1 || win->sh > MAX_SCALE || win->sw > MAX_SCALE)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: scale %dx%d; each factor must be an integer from 1 to %d", op->name,
                            win->sh, win->sw, MAX_SCALE);
    const int64_t *s = in[0].shape;
    if (s[2] > INT64_MAX / win->sh || s[3] > INT64_MAX / win->sw)
        return ug_set_error(UG_ERR_SHAPE, "%s: %lld x %lld pixels scaled %dx%d overflow", op->name,
                            (long long)s[2], (long long)s[3], win->sh, win->sw);
    out[0] = (ug_meta){.dtype = in[0].dtype, .ndim = 4, .shape = {s[0], s[1], s[2] * win->sh, s[3] * win->sw}};
    return UG_OK;
}

/* The window of a launch: the image's size from the smaller tensor. */
static ug_status upsample_run(const ug_op *op, const ug_tensor *image, const ug_tensor *upsampled,
                              ug_upsample2d_args *args)
{
    if (ug_tensor_numel(image) == 0)
        return UG_OK;
    args->win = op->p.window.win;
    ug_window_take_image(&args->win, image->shape);
    args->win.oh = upsampled->shape[2];
    args->win.ow = upsampled->shape[3];
    return ug_dispatch(ug_dev(image), UG_KERNEL_UPSAMPLE2D, op->name, UG_F32, args);
}

static ug_status upsample_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_upsample2d_args args = {.x = ug_kview_of(in[0]), .y = ug_kview_of(out[0])};
    return upsample_run(op, in[0], out[0], &args);
}

/* dx [N, C, H / sh, W / sw] from gy. */
static ug_status upsample_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                     int *nout)
{
    (void)nin;
    (void)nout;
    const ug_window2d *win = &op->p.window.win;
    const int64_t *s = in[0].shape;
    out[0] = (ug_meta){.dtype = in[0].dtype, .ndim = 4, .shape = {s[0], s[1], s[2] / win->sh, s[3] / win->sw}};
    return UG_OK;
}

static ug_status upsample_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_upsample2d_args args = {.backward = true, .dy = ug_kview_of(in[0]), .dx = ug_kview_of(out[0])};
    return upsample_run(op, out[0], in[0], &args);
}

static const ug_op_def upsample_grad = {.family = "upsample2d gradient", .infer = upsample_grad_infer,
                                        .launch = upsample_grad_launch};

static ug_status upsample_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    const ug_window2d *win = &n->op->p.window.win;
    ug_op op = upsample_op(&upsample_grad, "upsample2d gradient", win->sh, win->sw);
    ug_value *dx = NULL;
    UG_TRY(ug_op_graph(g, &op, 1, &gy, &dx));
    return ug_grad_give(g, n->in[0], dx);
}

static const ug_op_def upsample = {.family = "upsample2d", .infer = upsample_infer,
                                   .launch = upsample_launch, .backward = upsample_backward,
                                   .autocast = ug_autocast_follow};

ug_status ug_upsample2d(const ug_tensor *x, int scale_h, int scale_w, ug_tensor **out)
{
    ug_op op = upsample_op(&upsample, "upsample2d", scale_h, scale_w);
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_upsample2d(ug_graph *g, ug_value *x, int scale_h, int scale_w, ug_value **out)
{
    ug_op op = upsample_op(&upsample, "graph upsample2d", scale_h, scale_w);
    return ug_op_graph(g, &op, 1, &x, out);
}
