/* Convolutions with stride 1 in f32 on CPU devices (POCL) without im2col
 * columns: the passes' operand planes are framed with their padding
 * (kernels/opencl/conv.cl says how), then one launch a pass sums
 * the taps straight from the frames. The core's im2col + GEMM runs every
 * other convolution (strides, groups, half types, GPUs: there the columns
 * cost less than the products). ResNet-20's step on two cores: the
 * columns' writes and reads were half of POCL's time. */
#include "backends/opencl/internal.h"
#include "base/error.h"

/* Frames of one pass's images take at most this much of the workspace:
 * larger batches run in chunks of images. */
#define UG_CONV_DIRECT_BUDGET_VALUES ((int64_t)1 << 20)

/* A frame: rows of wp values, hp of them at `plane` values apart, the
 * image at (top, left); positions [0, len) computed, len a multiple of 16,
 * and every read of a tap's window inside the plane. */
typedef struct conv_frame {
    int64_t top, left, hp, wp, plane, len;
} conv_frame;

/* The geometry of one pass: the framed operand (x, or dy for the input
 * gradient), its channels, the outputs' rows (channels) and size, the
 * packed weights' values, and the values an image needs in the workspace. */
typedef struct conv_direct {
    conv_frame f;
    int64_t channels, rows, oh, ow, packed, per_image;
} conv_direct;

static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

/* Whether the pass runs here, and its geometry. */
static bool direct_geometry(const ug_bdev *dev, const ug_conv_args *a, conv_direct *d)
{
    const ug_window2d *w = &a->win;
    if (!dev->is_cpu || a->dtype != UG_F32 || a->out_dtype != UG_F32 || a->groups != 1 || w->sh != 1 ||
        w->sw != 1 || (a->with_bias && a->bias_dtype != UG_F32))
        return false;
    /* a dimension far past any image: the products below cannot overflow */
    const int64_t most = (int64_t)1 << 20;
    if (w->h > most || w->w > most || w->c > most || a->oc > most || (int64_t)w->kh * w->dh > most ||
        (int64_t)w->kw * w->dw > most || w->ph > most || w->pw > most)
        return false;
    const int64_t reach_y = (int64_t)(w->kh - 1) * w->dh, reach_x = (int64_t)(w->kw - 1) * w->dw;
    if (a->pass != UG_CONV_BACKWARD_DATA) { /* x framed by its padding */
        const conv_frame f = {.top = w->ph, .left = w->pw, .hp = w->h + 2 * w->ph, .wp = w->w + 2 * w->pw};
        *d = (conv_direct){.f = f, .channels = w->c, .rows = a->oc, .oh = w->oh, .ow = w->ow};
    } else {
        /* the forward pass of dy framed by the taps' reach less the padding,
         * with the taps reversed: needs padding within the reach */
        if (w->ph > reach_y || w->pw > reach_x)
            return false;
        const int64_t top = reach_y - w->ph, left = reach_x - w->pw;
        const conv_frame f = {.top = top, .left = left, .hp = w->oh + 2 * top, .wp = w->ow + 2 * left};
        *d = (conv_direct){.f = f, .channels = a->oc, .rows = w->c, .oh = w->h, .ow = w->w};
    }
    d->f.len = round16(d->oh * d->f.wp);
    d->f.plane = round16(d->f.len + reach_y * d->f.wp + reach_x);
    if (d->oh * d->f.wp > most * most / 4 || d->f.plane * d->channels > most * most / 4)
        return false;
    d->per_image = d->channels * d->f.plane;
    if (a->pass == UG_CONV_BACKWARD_WEIGHTS)
        d->per_image += a->oc * d->f.len; /* dy framed with zeros where no output is */
    else
        d->packed = d->channels * w->kh * w->kw * round16(d->rows);
    return true;
}

ug_status ug_opencl_conv_plan(ug_bdev *dev, const ug_conv_args *args, bool *runs, size_t *workspace_bytes)
{
    conv_direct d;
    *runs = direct_geometry(dev, args, &d);
    *workspace_bytes = 0;
    if (*runs) {
        int64_t budget = UG_CONV_DIRECT_BUDGET_VALUES / d.per_image, images = args->win.n;
        int64_t chunk = budget < 1 ? 1 : budget < images ? budget : images;
        *workspace_bytes = (size_t)(d.packed + chunk * d.per_image) * sizeof(float);
    }
    return UG_OK;
}

static ug_status kernel_of(ug_bdev *dev, ug_opencl_family family, const ug_opencl_kernel **k)
{
    return ug_opencl_kernel_for(dev, family, UG_F32, UG_F32, k);
}

/* Frames `planes` planes of h x w from src into dst. */
static ug_status frame_planes(ug_bdev *dev, const conv_frame *f, cl_mem dst, cl_ulong dst_off, cl_mem src,
                              cl_ulong src_off, int64_t planes, int64_t h, int64_t w)
{
    const ug_opencl_kernel *k;
    UG_TRY(kernel_of(dev, UG_OPENCL_FRAME_PLANES, &k));
    cl_long n = planes, ch = h, cw = w, hp = f->hp, wp = f->wp, top = f->top, left = f->left, plane = f->plane;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(dst), UG_OPENCL_ARG(dst_off), UG_OPENCL_ARG(src),
                            UG_OPENCL_ARG(src_off), UG_OPENCL_ARG(n), UG_OPENCL_ARG(ch),
                            UG_OPENCL_ARG(cw), UG_OPENCL_ARG(hp), UG_OPENCL_ARG(wp),
                            UG_OPENCL_ARG(top), UG_OPENCL_ARG(left), UG_OPENCL_ARG(plane)};
    return ug_opencl_launch_1d(dev, k, (size_t)(planes * f->hp), args, 12);
}

/* The forward pass (or the input gradient's, flip) of `images` frames. */
static ug_status direct_pass(ug_bdev *dev, const ug_conv_args *a, const conv_direct *d, cl_mem packed,
                             cl_ulong packed_off, cl_mem frames, cl_ulong frames_off, ug_kview out,
                             int64_t images)
{
    const ug_opencl_kernel *k;
    UG_TRY(kernel_of(dev, UG_OPENCL_CONV_DIRECT, &k));
    UG_OPENCL_VIEW(y, out);
    cl_mem bias = (cl_mem)(a->with_bias ? a->bias.mem : a->w.mem); /* never read without */
    cl_ulong bias_off = a->with_bias ? (cl_ulong)a->bias.offset : 0;
    cl_int with_bias = a->with_bias, kh = a->win.kh, kw = a->win.kw, dh = a->win.dh, dw = a->win.dw;
    cl_long m = d->rows, mp = round16(d->rows), kc = d->channels, wp = d->f.wp, plane = d->f.plane,
            oh = d->oh, ow = d->ow;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),         UG_OPENCL_ARG(y_off),      UG_OPENCL_ARG(packed),
                            UG_OPENCL_ARG(packed_off), UG_OPENCL_ARG(frames),    UG_OPENCL_ARG(frames_off),
                            UG_OPENCL_ARG(bias),      UG_OPENCL_ARG(bias_off),   UG_OPENCL_ARG(with_bias),
                            UG_OPENCL_ARG(m),         UG_OPENCL_ARG(mp),         UG_OPENCL_ARG(kc),
                            UG_OPENCL_ARG(kh),        UG_OPENCL_ARG(kw),         UG_OPENCL_ARG(dh),
                            UG_OPENCL_ARG(dw),        UG_OPENCL_ARG(wp),         UG_OPENCL_ARG(plane),
                            UG_OPENCL_ARG(oh),        UG_OPENCL_ARG(ow)};
    const size_t local[3] = {1, 1, 1};
    const size_t global[3] = {(size_t)d->f.len / 16, (size_t)mp / 16, (size_t)images};
    return ug_opencl_launch(dev, k, 3, global, local, args, sizeof args / sizeof args[0]);
}

static ug_status pack_weights(ug_bdev *dev, const ug_conv_args *a, const conv_direct *d, cl_mem dst,
                              cl_ulong dst_off)
{
    const ug_opencl_kernel *k;
    UG_TRY(kernel_of(dev, UG_OPENCL_CONV_PACK, &k));
    UG_OPENCL_VIEW(w, a->w);
    cl_long m = d->rows, mp = round16(d->rows), kc = d->channels, taps = (cl_long)a->win.kh * a->win.kw;
    cl_int flip = a->pass == UG_CONV_BACKWARD_DATA;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(dst), UG_OPENCL_ARG(dst_off), UG_OPENCL_ARG(w), UG_OPENCL_ARG(w_off),
                            UG_OPENCL_ARG(m),   UG_OPENCL_ARG(mp),      UG_OPENCL_ARG(kc), UG_OPENCL_ARG(taps),
                            UG_OPENCL_ARG(flip)};
    return ug_opencl_launch_1d(dev, k, (size_t)d->packed, args, 9);
}

/* dw from `images` frames of x and of dy (beta: 1 adds to dw). */
static ug_status wgrad_pass(ug_bdev *dev, const ug_conv_args *a, const conv_direct *d, cl_mem ws,
                            cl_ulong x_frames, cl_ulong dy_frames, int64_t images, float beta)
{
    const ug_opencl_kernel *k;
    UG_TRY(kernel_of(dev, UG_OPENCL_CONV_WGRAD, &k));
    UG_OPENCL_VIEW(dw, a->dw);
    cl_int kh = a->win.kh, kw = a->win.kw, dh = a->win.dh, dwid = a->win.dw;
    cl_long m = a->oc, n = d->channels * kh * kw, kc = d->channels, wp = d->f.wp, plane = d->f.plane,
            len = d->f.len, entries = images;
    cl_float b = beta;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(dw), UG_OPENCL_ARG(dw_off), UG_OPENCL_ARG(ws),
                            UG_OPENCL_ARG(dy_frames), UG_OPENCL_ARG(ws), UG_OPENCL_ARG(x_frames),
                            UG_OPENCL_ARG(m), UG_OPENCL_ARG(n), UG_OPENCL_ARG(kc), UG_OPENCL_ARG(kh),
                            UG_OPENCL_ARG(kw), UG_OPENCL_ARG(dh), UG_OPENCL_ARG(dwid), UG_OPENCL_ARG(wp),
                            UG_OPENCL_ARG(plane), UG_OPENCL_ARG(len), UG_OPENCL_ARG(entries), UG_OPENCL_ARG(b)};
    const size_t local[3] = {1, 1, 1};
    const size_t global[3] = {(size_t)(m + 3) / 4, (size_t)(n + 3) / 4, 1};
    return ug_opencl_launch(dev, k, 3, global, local, args, sizeof args / sizeof args[0]);
}

ug_status ug_opencl_conv2d(ug_bdev *dev, const ug_conv_args *a)
{
    conv_direct d;
    if (!direct_geometry(dev, a, &d))
        return ug_opencl_host->set_error(UG_ERR_UNSUPPORTED, "OpenCL: no direct convolution for this pass "
                                         "(stride 1, f32, one group, CPU devices only)");
    const ug_window2d *w = &a->win;
    const int64_t room = (int64_t)(a->workspace_bytes / sizeof(float)) - d.packed;
    const int64_t chunk = room / d.per_image < w->n ? room / d.per_image : w->n;
    if (chunk < 1 && w->n > 0)
        return ug_opencl_host->set_error(UG_ERR_STATE,
                                         "OpenCL: a convolution's workspace of %zu bytes holds no image's "
                                         "frames (%lld values)", a->workspace_bytes, (long long)d.per_image);
    UG_OPENCL_VIEW(ws, a->workspace);
    const cl_ulong frames = ws_off + (cl_ulong)d.packed;
    if (a->pass != UG_CONV_BACKWARD_WEIGHTS)
        UG_TRY(pack_weights(dev, a, &d, ws, ws_off));
    /* an image's values of x and of dy */
    const int64_t x_image = w->c * w->h * w->w, dy_image = a->oc * w->oh * w->ow;
    UG_OPENCL_VIEW(x, a->x);
    UG_OPENCL_VIEW(dy, a->dy);
    for (int64_t first = 0; first < w->n; first += chunk) {
        const int64_t images = w->n - first < chunk ? w->n - first : chunk;
        if (a->pass != UG_CONV_BACKWARD_WEIGHTS) {
            /* the forward pass of x into y, or of dy (taps reversed) into dx */
            const bool forward = a->pass == UG_CONV_FORWARD;
            UG_TRY(forward ? frame_planes(dev, &d.f, ws, frames, x, x_off + (cl_ulong)(first * x_image),
                                          images * w->c, w->h, w->w)
                           : frame_planes(dev, &d.f, ws, frames, dy, dy_off + (cl_ulong)(first * dy_image),
                                          images * a->oc, w->oh, w->ow));
            ug_kview out = forward ? a->y : a->dx;
            out.offset += first * (forward ? dy_image : x_image);
            UG_TRY(direct_pass(dev, a, &d, ws, ws_off, ws, frames, out, images));
        } else {
            const cl_ulong dy_frames = frames + (cl_ulong)(images * w->c * d.f.plane);
            /* dy laid out on x's frame rows, zeros where no output is */
            const conv_frame g = {.hp = w->oh, .wp = d.f.wp, .plane = d.f.len};
            UG_TRY(frame_planes(dev, &d.f, ws, frames, x, x_off + (cl_ulong)(first * x_image), images * w->c,
                                w->h, w->w));
            UG_TRY(frame_planes(dev, &g, ws, dy_frames, dy, dy_off + (cl_ulong)(first * dy_image), images * a->oc,
                                w->oh, w->ow));
            UG_TRY(wgrad_pass(dev, a, &d, ws, frames, dy_frames, images, first ? 1.0f : 0.0f));
        }
    }
    return UG_OK;
}
