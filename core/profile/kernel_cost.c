/* What each kernel family moves and computes (see kernel_cost.h). The
 * figures are the least a launch must do, so a profile's GB/s and GFLOP/s
 * compare a kernel with the machine's limits. */
#include "core/profile/kernel_cost.h"

#include <stdio.h>

static double size_of(ug_kview v) { return v.mem ? (double)ug_dtype_size(v.dtype) : 0.0; }

static double elements(int ndim, const int64_t *shape)
{
    double n = 1.0;
    for (int i = 0; i < ndim; i++)
        n *= (double)shape[i];
    return n;
}

/* Elements a strided operand really holds: broadcast axes (stride 0) once. */
static double distinct(int ndim, const int64_t *shape, const int64_t *strides)
{
    double n = 1.0;
    for (int i = 0; i < ndim; i++)
        if (strides[i])
            n *= (double)shape[i];
    return n;
}

static void flat(ug_kernel_cost *c, double n) { snprintf(c->shape, sizeof c->shape, "[%.0f]", n); }

static void image(ug_kernel_cost *c, const ug_window2d *w)
{
    snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lldx%lld k%dx%d", (long long)w->n, (long long)w->c,
             (long long)w->h, (long long)w->w, w->kh, w->kw);
}

static void unary(const ug_unary_args *a, ug_kernel_cost *c)
{
    double n = elements(a->ndim, a->shape);
    bool reads = a->op != UG_UNARY_FILL;
    c->bytes = n * size_of(a->y) + (reads ? distinct(a->ndim, a->shape, a->x_strides) * size_of(a->x) : 0.0);
    c->flops = a->op == UG_UNARY_COPY || a->op == UG_UNARY_FILL ? 0.0 : n;
    flat(c, n);
}

static void binary(const ug_binary_args *a, ug_kernel_cost *c)
{
    double n = elements(a->ndim, a->shape);
    c->bytes = n * size_of(a->y) + distinct(a->ndim, a->shape, a->a_strides) * size_of(a->a) +
               distinct(a->ndim, a->shape, a->b_strides) * size_of(a->b);
    c->flops = n * (a->epi.post == UG_UNARY_COPY ? 1.0 : 2.0);
    flat(c, n);
}

static void gemm(const ug_gemm_args *a, ug_kernel_cost *c)
{
    double m = (double)a->m, n = (double)a->n, k = (double)a->k, batch = (double)a->batch;
    double out = a->sum_batch ? 1.0 : batch;
    c->flops = 2.0 * m * n * k * batch;
    c->bytes = (m * k * size_of(a->a) + k * n * size_of(a->b)) * batch +
               m * n * size_of(a->c) * out * (a->beta != 0.0f ? 2.0 : 1.0);
    if (batch > 1)
        snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld x%lld", (long long)a->m, (long long)a->n,
                 (long long)a->k, (long long)a->batch);
    else
        snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld", (long long)a->m, (long long)a->n,
                 (long long)a->k);
}

static void conv(const ug_conv_args *a, ug_kernel_cost *c)
{
    const ug_window2d *w = &a->win;
    double per_out = (double)(w->c / (a->groups > 0 ? a->groups : 1)) * w->kh * w->kw;
    double outs = (double)w->n * (double)a->oc * (double)w->oh * (double)w->ow;
    double x = (double)w->n * w->c * w->h * w->w, y = outs, weights = (double)a->oc * per_out;
    c->flops = 2.0 * outs * per_out;
    c->bytes = 4.0 * (x + y + weights); /* conv2d runs in f32 */
    image(c, w);
}

void ug_kernel_cost_of(ug_kernel_family family, const void *args, ug_kernel_cost *c)
{
    *c = (ug_kernel_cost){0};
    switch (family) {
    case UG_KERNEL_UNARY: unary(args, c); break;
    case UG_KERNEL_BINARY: binary(args, c); break;
    case UG_KERNEL_GEMM: gemm(args, c); break;
    case UG_KERNEL_CONV: conv(args, c); break;
    case UG_KERNEL_REDUCE: {
        const ug_reduce_args *a = args;
        double in = (double)a->outer * (double)a->len * (double)a->inner, out = (double)a->outer * (double)a->inner;
        c->bytes = in * size_of(a->x) + out * size_of(a->y);
        c->flops = in;
        flat(c, in);
        break;
    }
    case UG_KERNEL_SOFTMAX: {
        const ug_softmax_args *a = args;
        double n = (double)a->rows * (double)a->cols;
        c->bytes = n * (size_of(a->x) + size_of(a->y));
        c->flops = 4.0 * n; /* max, exp, sum, scale */
        snprintf(c->shape, sizeof c->shape, "%lldx%lld", (long long)a->rows, (long long)a->cols);
        break;
    }
    case UG_KERNEL_RANDOM: {
        const ug_random_args *a = args;
        c->bytes = (double)a->n * size_of(a->y);
        flat(c, (double)a->n);
        break;
    }
    case UG_KERNEL_CROSS_ENTROPY: {
        const ug_xent_args *a = args;
        double n = (double)a->rows * (double)a->cols;
        c->bytes = n * (size_of(a->logits) + size_of(a->grad)) + (double)a->rows * (size_of(a->labels) + size_of(a->loss));
        c->flops = 4.0 * n;
        if (a->mean.y.mem) { /* the row losses read again (and the labels, counting), their mean written */
            c->bytes += (double)a->rows * (size_of(a->loss) + (a->ignore ? size_of(a->labels) : 0.0)) +
                        size_of(a->mean.y) + size_of(a->count);
            c->flops += (double)a->rows;
        }
        snprintf(c->shape, sizeof c->shape, "%lldx%lld", (long long)a->rows, (long long)a->cols);
        break;
    }
    case UG_KERNEL_LAYERNORM: {
        const ug_layernorm_args *a = args;
        double n = (double)a->rows * (double)a->cols;
        c->bytes = n * (size_of(a->x) + size_of(a->y) + size_of(a->dy) + size_of(a->dx));
        /* RMSNorm has no mean: no sum of x, no x - mean, no sum of g */
        c->flops = (a->dx.mem ? (a->rms ? 6.0 : 8.0) : (a->rms ? 3.0 : 5.0)) * n;
        snprintf(c->shape, sizeof c->shape, "%lldx%lld", (long long)a->rows, (long long)a->cols);
        break;
    }
    case UG_KERNEL_OPTIMIZER: {
        const ug_optim_args *a = args;
        double n = 0.0;
        /* the parameter and each state read and written, the gradient read;
         * a multi-tensor update's tensors summed */
        for (int i = 0; i < (a->count > 0 ? a->count : 1); i++) {
            const ug_optim_args one = a->count > 0 ? ug_optim_args_at(a, i) : *a;
            n += (double)one.n;
            c->bytes += (double)one.n * (2.0 * size_of(one.param) + size_of(one.grad) + 2.0 * size_of(one.state0) +
                                         2.0 * size_of(one.state1) + size_of(one.copy));
        }
        c->flops = n * (a->kind == UG_OPTIM_SGD ? 4.0 : 12.0);
        flat(c, n);
        break;
    }
    case UG_KERNEL_IM2COL: {
        const ug_im2col_args *a = args;
        const ug_window2d *w = &a->win;
        double col = (double)w->n * w->c * w->kh * w->kw * w->oh * w->ow;
        c->bytes = col * size_of(a->col) + (double)w->n * w->c * w->h * w->w * size_of(a->image);
        image(c, w);
        break;
    }
    case UG_KERNEL_POOL2D: {
        const ug_pool2d_args *a = args;
        const ug_window2d *w = &a->win;
        double in = (double)w->n * w->c * w->h * w->w, out = (double)w->n * w->c * w->oh * w->ow;
        c->bytes = a->backward ? out * (size_of(a->dy) + size_of(a->index)) + in * size_of(a->dx)
                               : in * size_of(a->x) + out * (size_of(a->y) + size_of(a->index));
        c->flops = out * w->kh * w->kw;
        image(c, w);
        break;
    }
    case UG_KERNEL_BATCHNORM: {
        const ug_batchnorm_args *a = args;
        double n = (double)a->n * (double)a->c * (double)a->inner;
        /* statistics then normalisation: x read twice; backward reads dy twice too */
        c->bytes = a->backward ? n * (2.0 * size_of(a->x) + 2.0 * size_of(a->dy) + size_of(a->dx))
                               : n * ((a->training ? 2.0 : 1.0) * size_of(a->x) + size_of(a->y));
        c->flops = (a->backward ? 8.0 : 5.0) * n;
        snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lld", (long long)a->n, (long long)a->c,
                 (long long)a->inner);
        break;
    }
    case UG_KERNEL_AUGMENT: {
        const ug_augment_args *a = args;
        const double n = (double)a->n * (double)a->c * (double)a->h * (double)a->w;
        c->bytes = n * (1.0 + size_of(a->y)) + (a->place.mem ? 12.0 * (double)a->n : 0.0) + 1024.0;
        snprintf(c->shape, sizeof c->shape, "%lldx%lldx%lldx%lld", (long long)a->n, (long long)a->c,
                 (long long)a->h, (long long)a->w);
        break;
    }
    case UG_KERNEL_UPSAMPLE2D: {
        const ug_upsample2d_args *a = args;
        const ug_window2d *w = &a->win;
        double in = (double)w->n * w->c * w->h * w->w, out = (double)w->n * w->c * w->oh * w->ow;
        c->bytes = a->backward ? in * size_of(a->dx) + out * size_of(a->dy) : in * size_of(a->x) + out * size_of(a->y);
        c->flops = a->backward ? out : 0.0;
        image(c, w);
        break;
    }
    case UG_KERNEL_GATHER: {
        const ug_gather_args *a = args;
        const double moved = (double)a->outer * a->count * a->inner;
        c->bytes = moved * (size_of(a->x) + (a->accumulate ? 0.0 : size_of(a->y))) +
                   (a->accumulate ? (double)a->outer * a->y_len * a->inner * size_of(a->y) : 0.0) +
                   (a->index.mem ? (double)a->count * size_of(a->index) : 0.0);
        c->flops = a->accumulate ? moved : 0.0;
        snprintf(c->shape, sizeof c->shape, "[%lld,%lld,%lld]", (long long)a->outer, (long long)a->count,
                 (long long)a->inner);
        break;
    }
    case UG_KERNEL_ATTENTION: {
        const ug_attention_args *a = args;
        const double heads = (double)a->batch * a->heads, d = (double)a->head_dim;
        double pairs = heads * (double)a->q_len * (double)a->kv_len;
        if (a->causal) /* the lower triangle of each head's [q_len, kv_len] */
            pairs = heads * (a->q_len <= a->kv_len ? (double)a->q_len * (a->q_len + 1) / 2
                                                   : (double)a->kv_len * (a->kv_len + 1) / 2 +
                                                         (double)(a->q_len - a->kv_len) * a->kv_len);
        /* s and p v forward; backward s again (twice: the dq and the dk, dv
         * passes), dout . v twice, and the three products */
        c->flops = pairs * d * (a->backward ? 14.0 : 4.0);
        const double qo = heads * (double)a->q_len * d, kv = heads * (double)a->kv_len * d;
        c->bytes = size_of(a->q) * (a->backward ? 4 * qo + 4 * kv : 2 * qo + 2 * kv);
        snprintf(c->shape, sizeof c->shape, "[%lld,%lld,%lld,%lld]", (long long)a->batch, (long long)a->heads,
                 (long long)a->q_len, (long long)a->head_dim);
        break;
    }
    case UG_KERNEL_FAMILY_COUNT:
        break;
    }
}
