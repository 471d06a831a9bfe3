/* Host references of the convolutional ops (see reference.h) in double
 * precision, written from PyTorch's definitions with plain loops: the
 * forward passes as direct sums over each window, the backward passes as
 * the scatter of each output's gradient onto what it read (the library's
 * kernels gather instead), so the two do not share a formulation. */
#include "reference.h"

#include <math.h>
#include <string.h>

int64_t ref_conv_out(int64_t in, int kernel, int stride, int padding, int dilation)
{
    const int64_t span = in + 2 * (int64_t)padding - (int64_t)dilation * (kernel - 1) - 1;
    /* floor division (span may be negative: no output) */
    const int64_t q = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
    return q + 1;
}

/* ---- conv2d ---- */

static int64_t conv_oh(const ref_conv_geom *p)
{
    return ref_conv_out(p->h, p->kh, p->stride[0], p->padding[0], p->dilation[0]);
}

static int64_t conv_ow(const ref_conv_geom *p)
{
    return ref_conv_out(p->w, p->kw, p->stride[1], p->padding[1], p->dilation[1]);
}

/* Calls visit for every (output, weight tap, input pixel) triple that the
 * convolution multiplies: the one loop nest both passes share. */
#define CONV_LOOPS(p, BODY)                                                                 \
    do {                                                                                    \
        const int64_t oh_ = conv_oh(p), ow_ = conv_ow(p);                                   \
        const int64_t cg_ = (p)->c / (p)->groups, ocg_ = (p)->oc / (p)->groups;             \
        for (int64_t b = 0; b < (p)->n; b++)                                                \
            for (int64_t o = 0; o < (p)->oc; o++)                                           \
                for (int64_t oy = 0; oy < oh_; oy++)                                        \
                    for (int64_t ox = 0; ox < ow_; ox++) {                                  \
                        const int64_t yi = ((b * (p)->oc + o) * oh_ + oy) * ow_ + ox;       \
                        const int64_t grp = o / ocg_;                                       \
                        for (int64_t ci = 0; ci < cg_; ci++)                                \
                            for (int ky = 0; ky < (p)->kh; ky++)                            \
                                for (int kx = 0; kx < (p)->kw; kx++) {                      \
                                    const int64_t iy = oy * (p)->stride[0] - (p)->padding[0] + \
                                                       (int64_t)ky * (p)->dilation[0];      \
                                    const int64_t ix = ox * (p)->stride[1] - (p)->padding[1] + \
                                                       (int64_t)kx * (p)->dilation[1];      \
                                    if (iy < 0 || iy >= (p)->h || ix < 0 || ix >= (p)->w)   \
                                        continue;                                           \
                                    const int64_t xi =                                      \
                                        ((b * (p)->c + grp * cg_ + ci) * (p)->h + iy) * (p)->w + ix; \
                                    const int64_t wi = ((o * cg_ + ci) * (p)->kh + ky) * (p)->kw + kx; \
                                    BODY;                                                   \
                                }                                                           \
                    }                                                                       \
    } while (0)

void ref_conv2d(const ref_conv_geom *p, const double *x, const double *weight, const double *bias,
                double *y)
{
    const int64_t ny = p->n * p->oc * conv_oh(p) * conv_ow(p), plane = conv_oh(p) * conv_ow(p);
    for (int64_t i = 0; i < ny; i++)
        y[i] = bias ? bias[i / plane % p->oc] : 0.0;
    CONV_LOOPS(p, y[yi] += x[xi] * weight[wi]);
}

void ref_conv2d_backward(const ref_conv_geom *p, const double *x, const double *weight,
                         const double *dy, double *dx, double *dweight, double *dbias)
{
    const int64_t plane = conv_oh(p) * conv_ow(p);
    if (dx)
        memset(dx, 0, (size_t)(p->n * p->c * p->h * p->w) * sizeof *dx);
    if (dweight)
        memset(dweight, 0, (size_t)(p->oc * (p->c / p->groups) * p->kh * p->kw) * sizeof *dweight);
    if (dbias) {
        memset(dbias, 0, (size_t)p->oc * sizeof *dbias);
        for (int64_t i = 0; i < p->n * p->oc * plane; i++)
            dbias[i / plane % p->oc] += dy[i];
    }
    CONV_LOOPS(p, {
        if (dx)
            dx[xi] += dy[yi] * weight[wi];
        if (dweight)
            dweight[wi] += dy[yi] * x[xi];
    });
}

/* ---- pooling ---- */

static int64_t pool_oh(const ref_pool_geom *p)
{
    return ref_conv_out(p->h, p->kernel[0], p->stride[0], p->padding[0], 1);
}

static int64_t pool_ow(const ref_pool_geom *p)
{
    return ref_conv_out(p->w, p->kernel[1], p->stride[1], p->padding[1], 1);
}

/* The offset of the first maximum of output (oy, ox) of a plane, or -1 if
 * the window holds no pixel. */
static int64_t first_max(const ref_pool_geom *p, const double *plane, int64_t oy, int64_t ox)
{
    int64_t best = -1;
    for (int ky = 0; ky < p->kernel[0]; ky++)
        for (int kx = 0; kx < p->kernel[1]; kx++) {
            const int64_t iy = oy * p->stride[0] - p->padding[0] + ky;
            const int64_t ix = ox * p->stride[1] - p->padding[1] + kx;
            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                continue;
            const int64_t at = iy * p->w + ix;
            if (best < 0)
                best = at;
            else if (!isnan(plane[best]) && (isnan(plane[at]) || plane[at] > plane[best]))
                best = at;
        }
    return best;
}

void ref_max_pool2d(const ref_pool_geom *p, const double *x, double *y, int64_t *index)
{
    const int64_t oh = pool_oh(p), ow = pool_ow(p);
    for (int64_t pl = 0; pl < p->planes; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t at = first_max(p, x + pl * p->h * p->w, oy, ox);
                const int64_t yi = (pl * oh + oy) * ow + ox;
                y[yi] = at < 0 ? -INFINITY : x[pl * p->h * p->w + at];
                if (index)
                    index[yi] = at;
            }
}

void ref_max_pool2d_backward(const ref_pool_geom *p, const double *x, const double *dy, double *dx)
{
    const int64_t oh = pool_oh(p), ow = pool_ow(p);
    memset(dx, 0, (size_t)(p->planes * p->h * p->w) * sizeof *dx);
    for (int64_t pl = 0; pl < p->planes; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t at = first_max(p, x + pl * p->h * p->w, oy, ox);
                if (at >= 0)
                    dx[pl * p->h * p->w + at] += dy[(pl * oh + oy) * ow + ox];
            }
}

/* PyTorch's avg_pool2d (count_include_pad, floor mode): the window
 * [start, start + kernel) clipped to the padded image [-padding, size +
 * padding) gives the divisor; the pixels are those inside [0, size). */
static double avg_divisor(const ref_pool_geom *p, int64_t oy, int64_t ox)
{
    int64_t y0 = oy * p->stride[0] - p->padding[0], x0 = ox * p->stride[1] - p->padding[1];
    int64_t y1 = y0 + p->kernel[0], x1 = x0 + p->kernel[1];
    if (y1 > p->h + p->padding[0])
        y1 = p->h + p->padding[0];
    if (x1 > p->w + p->padding[1])
        x1 = p->w + p->padding[1];
    return (double)((y1 - y0) * (x1 - x0));
}

void ref_avg_pool2d(const ref_pool_geom *p, const double *x, double *y)
{
    const int64_t oh = pool_oh(p), ow = pool_ow(p);
    for (int64_t pl = 0; pl < p->planes; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double sum = 0.0;
                for (int ky = 0; ky < p->kernel[0]; ky++)
                    for (int kx = 0; kx < p->kernel[1]; kx++) {
                        const int64_t iy = oy * p->stride[0] - p->padding[0] + ky;
                        const int64_t ix = ox * p->stride[1] - p->padding[1] + kx;
                        if (iy >= 0 && iy < p->h && ix >= 0 && ix < p->w)
                            sum += x[(pl * p->h + iy) * p->w + ix];
                    }
                y[(pl * oh + oy) * ow + ox] = sum / avg_divisor(p, oy, ox);
            }
}

void ref_avg_pool2d_backward(const ref_pool_geom *p, const double *dy, double *dx)
{
    const int64_t oh = pool_oh(p), ow = pool_ow(p);
    memset(dx, 0, (size_t)(p->planes * p->h * p->w) * sizeof *dx);
    for (int64_t pl = 0; pl < p->planes; pl++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                const double g = dy[(pl * oh + oy) * ow + ox] / avg_divisor(p, oy, ox);
                for (int ky = 0; ky < p->kernel[0]; ky++)
                    for (int kx = 0; kx < p->kernel[1]; kx++) {
                        const int64_t iy = oy * p->stride[0] - p->padding[0] + ky;
                        const int64_t ix = ox * p->stride[1] - p->padding[1] + kx;
                        if (iy >= 0 && iy < p->h && ix >= 0 && ix < p->w)
                            dx[(pl * p->h + iy) * p->w + ix] += g;
                    }
            }
}

/* ---- batch normalisation ---- */

/* The batch mean and biased variance of channel ch (two passes). */
static void channel_stats(const double *x, int64_t n, int64_t c, int64_t inner, int64_t ch,
                          double *mean, double *var)
{
    const double count = (double)(n * inner);
    double sum = 0.0, sq = 0.0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < inner; i++)
            sum += x[(b * c + ch) * inner + i];
    *mean = sum / count;
    for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < inner; i++) {
            const double d = x[(b * c + ch) * inner + i] - *mean;
            sq += d * d;
        }
    *var = sq / count;
}

void ref_batch_norm(const double *x, int64_t n, int64_t c, int64_t inner, const double *weight,
                    const double *bias, double *running_mean, double *running_var, bool training,
                    double momentum, double eps, double *y)
{
    const double count = (double)(n * inner);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        if (training) {
            channel_stats(x, n, c, inner, ch, &mean, &var);
            if (running_mean)
                running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mean;
            if (running_var)
                running_var[ch] = (1.0 - momentum) * running_var[ch] +
                                  momentum * var * count / (count - 1.0);
        } else {
            mean = running_mean[ch];
            var = running_var[ch];
        }
        const double rstd = 1.0 / sqrt(var + eps);
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = (b * c + ch) * inner + i;
                y[k] = (x[k] - mean) * rstd * weight[ch] + bias[ch];
            }
    }
}

/* Training: with xhat = (x - mean) rstd over the channel's m = n inner
 * elements, dx = rstd weight (dy - mean(dy) - xhat mean(dy xhat)). Eval: the
 * statistics are constants, dx = dy weight rstd. */
void ref_batch_norm_backward(const double *x, int64_t n, int64_t c, int64_t inner,
                             const double *weight, const double *running_mean,
                             const double *running_var, bool training, double eps,
                             const double *dy, double *dx, double *dweight, double *dbias)
{
    const double count = (double)(n * inner);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        if (training)
            channel_stats(x, n, c, inner, ch, &mean, &var);
        else {
            mean = running_mean[ch];
            var = running_var[ch];
        }
        const double rstd = 1.0 / sqrt(var + eps);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = (b * c + ch) * inner + i;
                sum_dy += dy[k];
                sum_dy_xhat += dy[k] * (x[k] - mean) * rstd;
            }
        if (dweight)
            dweight[ch] = sum_dy_xhat;
        if (dbias)
            dbias[ch] = sum_dy;
        if (!dx)
            continue;
        for (int64_t b = 0; b < n; b++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t k = (b * c + ch) * inner + i;
                const double xhat = (x[k] - mean) * rstd;
                dx[k] = training ? rstd * weight[ch] *
                                       (dy[k] - sum_dy / count - xhat * sum_dy_xhat / count)
                                 : dy[k] * weight[ch] * rstd;
            }
    }
}
