/* Batch normalisation on the CPU backend, parallel over channels, with the
 * formulas of kernels/common/batchnorm.h. A channel's values are n runs of
 * `inner` contiguous floats; its sums add short blocks in float and the
 * blocks in double, so a large batch keeps its statistics exact to f32.
 * Half tensors are widened a channel at a time inside the tasks. */
#include <stdlib.h>

#include "backends/cpu/internal.h"
#include "kernels/common/batchnorm.h"

/* Sums over a run: sixteen float lanes (independent additions the compiler
 * vectorises) over blocks short enough that float loses nothing that
 * matters, each block's total then added in double. */
enum { LANES = 16, BLOCK = 1024 };

static double lanes_total(const float *acc)
{
    double t = 0.0;
    for (int l = 0; l < LANES; l++)
        t += acc[l];
    return t;
}

/* sum of p[i] - shift (sq NULL), or of its square (sum NULL). */
UG_CPU_WIDE
static void run_sums(const float *p, int64_t n, float shift, double *sum, double *sq)
{
    for (int64_t start = 0; start < n; start += BLOCK) {
        const int64_t len = n - start < BLOCK ? n - start : BLOCK;
        const float *q = p + start;
        float acc[LANES] = {0};
        int64_t i = 0;
        if (sq) {
            for (; i + LANES <= len; i += LANES)
                for (int l = 0; l < LANES; l++)
                    acc[l] += (q[i + l] - shift) * (q[i + l] - shift);
            for (; i < len; i++)
                acc[0] += (q[i] - shift) * (q[i] - shift);
            *sq += lanes_total(acc);
        } else {
            for (; i + LANES <= len; i += LANES)
                for (int l = 0; l < LANES; l++)
                    acc[l] += q[i + l] - shift;
            for (; i < len; i++)
                acc[0] += q[i] - shift;
            *sum += lanes_total(acc);
        }
    }
}

/* sum of dy, and of dy * (x - mean) * rstd. */
UG_CPU_WIDE
static void grad_sums(const float *dy, const float *x, int64_t n, float mean, float rstd,
                      double *sum_dy, double *sum_dy_xhat)
{
    for (int64_t start = 0; start < n; start += BLOCK) {
        const int64_t len = n - start < BLOCK ? n - start : BLOCK;
        const float *d = dy + start, *v = x + start;
        float s[LANES] = {0}, q[LANES] = {0};
        int64_t i = 0;
        for (; i + LANES <= len; i += LANES)
            for (int l = 0; l < LANES; l++) {
                s[l] += d[i + l];
                q[l] += d[i + l] * ((v[i + l] - mean) * rstd);
            }
        for (; i < len; i++) {
            s[0] += d[i];
            q[0] += d[i] * ((v[i] - mean) * rstd);
        }
        *sum_dy += lanes_total(s);
        *sum_dy_xhat += lanes_total(q);
    }
}

#define BN_F32(view) ((float *)ug_cpu_ptr(view))

/* A channel's values: n runs of `inner`, run i at base + i * stride. */
typedef struct channel {
    float *base;
    int64_t stride;
} channel;

/* Channel c of v: in place when v is f32; a half v's runs are widened into
 * buf (n * inner floats) once, so the passes over the channel that follow
 * read f32 from the task's cache, and the tensor is read from memory once
 * at half the bytes. */
static channel channel_of(const ug_batchnorm_args *a, ug_kview v, int64_t c, float *buf)
{
    if (v.dtype == UG_F32)
        return (channel){BN_F32(v) + c * a->inner, a->c * a->inner};
    for (int64_t n = 0; n < a->n; n++)
        ug_cpu_load(ug_cpu_ptr(v) + (n * a->c + c) * a->inner * (int64_t)ug_dtype_size(v.dtype), v.dtype, 1,
                    a->inner, buf + n * a->inner);
    return (channel){buf, a->inner};
}

/* Rounds a half v's channel c from its f32 copy (channel_of's buf). */
static void channel_out(const ug_batchnorm_args *a, ug_kview v, int64_t c, const channel *values)
{
    for (int64_t n = 0; v.dtype != UG_F32 && n < a->n; n++)
        ug_cpu_store(ug_cpu_ptr(v) + (n * a->c + c) * a->inner * (int64_t)ug_dtype_size(v.dtype), v.dtype,
                     a->inner, values->base + n * values->stride);
}

/* f32 copies of two channels for a task on half tensors; NULL when every
 * tensor is f32. */
static float *channel_buffers(const ug_batchnorm_args *a, bool *failed)
{
    bool half = a->x.dtype != UG_F32 || (a->backward ? a->dy.dtype != UG_F32 || a->dx.dtype != UG_F32
                                                     : a->y.dtype != UG_F32);
    if (!half)
        return NULL;
    float *buf = malloc((size_t)(2 * a->n * a->inner) * sizeof *buf + 1);
    if (!buf)
        __atomic_store_n(failed, true, __ATOMIC_RELAXED);
    return buf;
}

typedef struct bn_job {
    const ug_batchnorm_args *a;
    bool failed; /* a task's f32 copies of half channels could not be allocated */
} bn_job;

UG_CPU_WIDE
static void bn_forward(void *ctx, int64_t begin, int64_t end)
{
    bn_job *j = ctx;
    const ug_batchnorm_args *a = j->a;
    float *buf = channel_buffers(a, &j->failed);
    if (!buf && j->failed)
        return;
    const int64_t count = a->n * a->inner;
    for (int64_t c = begin; c < end; c++) {
        const channel x = channel_of(a, a->x, c, buf);
        /* a half y: in buf, over x's copy if it is there (x is not read after) */
        const channel y = a->y.dtype == UG_F32 ? channel_of(a, a->y, c, NULL) : (channel){buf, a->inner};
        float mean, rstd;
        if (a->training) {
            double sum = 0.0, sq = 0.0;
            for (int64_t n = 0; n < a->n; n++)
                run_sums(x.base + n * x.stride, a->inner, 0.0f, &sum, NULL);
            mean = (float)(sum / (double)count);
            for (int64_t n = 0; n < a->n; n++) /* two passes: no cancellation */
                run_sums(x.base + n * x.stride, a->inner, mean, NULL, &sq);
            rstd = ug_bn_rstd((float)(sq / (double)count), a->eps);
            if (a->update_running) {
                float *rm = BN_F32(a->running_mean), *rv = BN_F32(a->running_var);
                rm[c] = ug_bn_running(rm[c], a->momentum, mean);
                rv[c] = ug_bn_running(rv[c], a->momentum, (float)(sq / (double)(count - 1)));
            }
        } else {
            mean = BN_F32(a->running_mean)[c];
            rstd = ug_bn_rstd(BN_F32(a->running_var)[c], a->eps);
        }
        BN_F32(a->mean)[c] = mean;
        BN_F32(a->rstd)[c] = rstd;
        const float scale = ug_bn_scale(rstd, BN_F32(a->weight)[c]);
        const float shift = ug_bn_shift(mean, scale, BN_F32(a->bias)[c]);
        for (int64_t n = 0; n < a->n; n++) {
            const float *p = x.base + n * x.stride;
            float *q = y.base + n * y.stride;
            if (a->epi.post == UG_UNARY_RELU) { /* two loops, each with its formula fixed: both vectorise */
                UG_CPU_IVDEP
                for (int64_t i = 0; i < a->inner; i++)
                    q[i] = ug_bn_output(p[i], scale, shift, true);
            } else {
                UG_CPU_IVDEP
                for (int64_t i = 0; i < a->inner; i++)
                    q[i] = ug_bn_output(p[i], scale, shift, false);
            }
        }
        channel_out(a, a->y, c, &y);
    }
    free(buf);
}

UG_CPU_WIDE
static void bn_backward(void *ctx, int64_t begin, int64_t end)
{
    bn_job *j = ctx;
    const ug_batchnorm_args *a = j->a;
    float *buf = channel_buffers(a, &j->failed);
    if (!buf && j->failed)
        return;
    const int64_t count = a->n * a->inner;
    for (int64_t c = begin; c < end; c++) {
        const channel x = channel_of(a, a->x, c, buf);
        const channel dy = channel_of(a, a->dy, c, buf ? buf + count : NULL);
        /* a half dx: over dy's copy when it is half, else in buf, over x's copy
         * if it is there (each element read before it is written) */
        const channel dx = a->dx.dtype == UG_F32 ? channel_of(a, a->dx, c, NULL)
                           : a->dy.dtype != UG_F32 ? dy : (channel){buf, a->inner};
        const float mean = BN_F32(a->mean)[c], rstd = BN_F32(a->rstd)[c];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int64_t n = 0; n < a->n; n++)
            grad_sums(dy.base + n * dy.stride, x.base + n * x.stride, a->inner, mean, rstd, &sum_dy, &sum_dy_xhat);
        BN_F32(a->dweight)[c] = (float)sum_dy_xhat;
        BN_F32(a->dbias)[c] = (float)sum_dy;
        const float k = ug_bn_scale(rstd, BN_F32(a->weight)[c]);
        const float mean_dy = a->training ? (float)(sum_dy / (double)count) : 0.0f;
        const float mean_dy_xhat = a->training ? (float)(sum_dy_xhat / (double)count) : 0.0f;
        for (int64_t n = 0; n < a->n; n++) {
            const float *xs = x.base + n * x.stride, *dys = dy.base + n * dy.stride;
            float *dxs = dx.base + n * dx.stride;
            UG_CPU_IVDEP
            for (int64_t i = 0; i < a->inner; i++) {
                const float xhat = (xs[i] - mean) * rstd;
                dxs[i] = ug_bn_input_grad(k, dys[i], xhat, mean_dy, mean_dy_xhat);
            }
        }
        channel_out(a, a->dx, c, &dx);
    }
    free(buf);
}

ug_status ug_cpu_batchnorm(ug_bdev *dev, const ug_batchnorm_args *args)
{
    bn_job j = {args, false};
    int64_t grain = UG_CPU_MIN_PARALLEL / (args->n * args->inner + 1) + 1;
    ug_cpu_parallel_for(dev->workers, args->c, grain, args->backward ? bn_backward : bn_forward, &j);
    if (j.failed)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu batchnorm: no host memory for the f32 copies of two "
                            "channels of %lld values; use smaller batches", (long long)(args->n * args->inner));
    return UG_OK;
}
