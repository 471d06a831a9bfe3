/* Batch normalisation on the CPU backend, parallel over channels, with the
 * formulas of kernels/common/batchnorm.h. A channel's values are n runs of
 * `inner` contiguous floats; its sums add short blocks in float and the
 * blocks in double, so a large batch keeps its statistics exact to f32. */
#include "backends/cpu/stage.h"
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

typedef struct bn_job {
    const ug_batchnorm_args *a;
} bn_job;

#define BN_F32(view) ((float *)ug_cpu_ptr(view))

UG_CPU_WIDE
static void bn_forward(void *ctx, int64_t begin, int64_t end)
{
    const ug_batchnorm_args *a = ((const bn_job *)ctx)->a;
    const float *x = BN_F32(a->x);
    float *y = BN_F32(a->y);
    const int64_t count = a->n * a->inner;
    for (int64_t c = begin; c < end; c++) {
        float mean, rstd;
        if (a->training) {
            double sum = 0.0, sq = 0.0;
            for (int64_t n = 0; n < a->n; n++)
                run_sums(x + (n * a->c + c) * a->inner, a->inner, 0.0f, &sum, NULL);
            mean = (float)(sum / (double)count);
            for (int64_t n = 0; n < a->n; n++) /* two passes: no cancellation */
                run_sums(x + (n * a->c + c) * a->inner, a->inner, mean, NULL, &sq);
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
            const float *p = x + (n * a->c + c) * a->inner;
            float *q = y + (n * a->c + c) * a->inner;
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
    }
}

UG_CPU_WIDE
static void bn_backward(void *ctx, int64_t begin, int64_t end)
{
    const ug_batchnorm_args *a = ((const bn_job *)ctx)->a;
    const float *x = BN_F32(a->x), *dy = BN_F32(a->dy);
    float *dx = BN_F32(a->dx);
    const int64_t count = a->n * a->inner;
    for (int64_t c = begin; c < end; c++) {
        const float mean = BN_F32(a->mean)[c], rstd = BN_F32(a->rstd)[c];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int64_t n = 0; n < a->n; n++) {
            const int64_t at = (n * a->c + c) * a->inner;
            grad_sums(dy + at, x + at, a->inner, mean, rstd, &sum_dy, &sum_dy_xhat);
        }
        BN_F32(a->dweight)[c] = (float)sum_dy_xhat;
        BN_F32(a->dbias)[c] = (float)sum_dy;
        const float k = ug_bn_scale(rstd, BN_F32(a->weight)[c]);
        const float mean_dy = a->training ? (float)(sum_dy / (double)count) : 0.0f;
        const float mean_dy_xhat = a->training ? (float)(sum_dy_xhat / (double)count) : 0.0f;
        for (int64_t n = 0; n < a->n; n++) {
            const int64_t at = (n * a->c + c) * a->inner;
            UG_CPU_IVDEP
            for (int64_t i = 0; i < a->inner; i++) {
                const float xhat = (x[at + i] - mean) * rstd;
                dx[at + i] = ug_bn_input_grad(k, dy[at + i], xhat, mean_dy, mean_dy_xhat);
            }
        }
    }
}

ug_status ug_cpu_batchnorm(ug_bdev *dev, const ug_batchnorm_args *in)
{
    ug_batchnorm_args staged = *in, *args = &staged;
    const int64_t numel = args->n * args->c * args->inner;
    ug_cpu_stage stage = {0};
    ug_cpu_stage_add(&stage, &staged.x, numel, false);
    if (args->backward) {
        ug_cpu_stage_add(&stage, &staged.dy, numel, false);
        ug_cpu_stage_add(&stage, &staged.dx, numel, true);
    } else {
        ug_cpu_stage_add(&stage, &staged.y, numel, true);
    }
    ug_status st = ug_cpu_stage_begin(&stage, "batchnorm");
    if (st != UG_OK)
        return st;
    bn_job j = {args};
    int64_t grain = UG_CPU_MIN_PARALLEL / (args->n * args->inner + 1) + 1;
    ug_cpu_parallel_for(dev->workers, args->c, grain, args->backward ? bn_backward : bn_forward, &j);
    ug_cpu_stage_end(&stage);
    return UG_OK;
}
