/* Row kernels of the CPU backend: softmax / log-softmax, cross-entropy and
 * LayerNorm, each parallel over rows. Rows are streamed in chunks (f16 is
 * converted chunk by chunk), so a row of any length needs no allocation.
 * Row sums are accumulated in double, in eight lanes combined in a fixed
 * order (LANE_SUM): double keeps long rows accurate, and the lanes let the
 * loops vectorise (one running sum waits on each add in turn) while every
 * vector width still gives the same bits. */
#include <math.h>

#include "backends/cpu/internal.h"

enum { CH = 1024 };

/* out = the sum over i < n of EXPR (which reads i), in double lanes. */
#define LANE_SUM(out, n, i, EXPR)                                                                   \
    do {                                                                                          \
        double l_[8] = {0};                                                                       \
        int64_t b_ = 0;                                                                           \
        for (; b_ + 8 <= (n); b_ += 8)                                                            \
            for (int e_ = 0; e_ < 8; e_++) {                                                      \
                const int64_t i = b_ + e_;                                                        \
                l_[e_] += (double)(EXPR);                                                         \
            }                                                                                     \
        for (int64_t i = b_; i < (n); i++)                                                        \
            l_[i - b_] += (double)(EXPR);                                                         \
        out = ((l_[0] + l_[4]) + (l_[1] + l_[5])) + ((l_[2] + l_[6]) + (l_[3] + l_[7]));          \
    } while (0)

/* n values of a row from element off on, as f32: in place for f32. */
static const float *chunk(const char *row, ug_dtype dt, int64_t off, int64_t n, float *buf)
{
    if (dt == UG_F32)
        return (const float *)row + off;
    ug_cpu_load(row + off * (int64_t)ug_dtype_size(dt), dt, 1, n, buf);
    return buf;
}

static int64_t chunk_len(int64_t c0, int64_t cols) { return cols - c0 < CH ? cols - c0 : CH; }

/* Largest value of a row; NaNs are skipped here and reach the result
 * through the sum of exponentials instead. */
UG_CPU_WIDE
static float row_max(const char *row, ug_dtype dt, int64_t cols)
{
    float buf[CH], l[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t c0 = 0; c0 < cols; c0 += CH) { /* in lanes, as the sums: the same maximum, faster */
        int64_t n = chunk_len(c0, cols), b = 0;
        const float *p = chunk(row, dt, c0, n, buf);
        for (; b + 8 <= n; b += 8)
            for (int e = 0; e < 8; e++)
                l[e] = p[b + e] > l[e] ? p[b + e] : l[e];
        for (int64_t i = b; i < n; i++)
            l[i - b] = p[i] > l[i - b] ? p[i] : l[i - b];
    }
    float m = l[0];
    for (int e = 1; e < 8; e++)
        m = l[e] > m ? l[e] : m;
    return m;
}

UG_CPU_WIDE
static double row_sum_exp(const char *row, ug_dtype dt, int64_t cols, float m)
{
    float buf[CH], e[CH];
    double s = 0.0;
    for (int64_t c0 = 0; c0 < cols; c0 += CH) {
        int64_t n = chunk_len(c0, cols);
        const float *p = chunk(row, dt, c0, n, buf);
        for (int64_t i = 0; i < n; i++) /* apart from the sum, so both loops vectorise */
            e[i] = ug_lane_expf(p[i] - m);
        double part;
        LANE_SUM(part, n, i, e[i]);
        s += part;
    }
    return s;
}

/* Rows per task so a task holds about UG_CPU_MIN_PARALLEL values. */
static int64_t row_grain(int64_t cols) { return UG_CPU_MIN_PARALLEL / (cols > 0 ? cols : 1) + 1; }

/* ---- softmax ---- */

typedef struct sm_job {
    const ug_softmax_args *args;
    const char *x;
    char *y;
} sm_job;

UG_CPU_WIDE
static void softmax_range(void *vjob, int64_t r0, int64_t r1)
{
    const sm_job *j = vjob;
    const ug_softmax_args *a = j->args;
    ug_dtype dt = a->x.dtype;
    int64_t es = (int64_t)ug_dtype_size(dt), cols = a->cols;
    float buf[CH], out_buf[CH];
    for (int64_t r = r0; r < r1; r++) {
        const char *xr = j->x + r * cols * es;
        char *yr = j->y + r * cols * es;
        /* Subtracting the row max keeps every exponent <= 0. */
        float m = row_max(xr, dt, cols);
        if (dt == UG_F32 && !a->log) {
            /* One expf per value: keep the exponentials in y, then divide
             * (y may be x: x is not read again). */
            float *yf = (float *)yr;
            const float *xf = (const float *)xr;
            for (int64_t c = 0; c < cols; c++)
                yf[c] = ug_lane_expf(xf[c] - m);
            double s;
            LANE_SUM(s, cols, c, yf[c]);
            float sf = (float)s;
            for (int64_t c = 0; c < cols; c++)
                yf[c] = yf[c] / sf;
            continue;
        }
        float s = (float)row_sum_exp(xr, dt, cols, m);
        float log_s = logf(s);
        for (int64_t c0 = 0; c0 < cols; c0 += CH) {
            int64_t n = chunk_len(c0, cols);
            const float *p = chunk(xr, dt, c0, n, buf);
            float *out = dt == UG_F32 ? (float *)yr + c0 : out_buf;
            if (a->log)
                for (int64_t i = 0; i < n; i++)
                    out[i] = (p[i] - m) - log_s;
            else
                for (int64_t i = 0; i < n; i++)
                    out[i] = ug_lane_expf(p[i] - m) / s;
            if (dt != UG_F32)
                ug_cpu_store(yr + c0 * es, dt, n, out);
        }
    }
}

ug_status ug_cpu_softmax(ug_bdev *dev, const ug_softmax_args *args)
{
    if (!ug_cpu_float_dtype(args->x.dtype) || args->y.dtype != args->x.dtype)
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu softmax: dtypes %s -> %s must be f32, f16 or bf16, equal",
                            ug_dtype_name(args->x.dtype), ug_dtype_name(args->y.dtype));
    if (args->rows <= 0 || args->cols <= 0)
        return UG_OK;
    sm_job j = {.args = args, .x = ug_cpu_ptr(args->x), .y = ug_cpu_ptr(args->y)};
    ug_cpu_parallel_for(dev->workers, args->rows, row_grain(args->cols), softmax_range, &j);
    return UG_OK;
}

/* ---- cross-entropy ---- */

typedef struct xent_job {
    const ug_xent_args *args;
    const float *x;
    const char *labels;
    float *loss, *grad;
    float k; /* backward: scale * dloss[0] / count[0] (each 1 when absent) */
} xent_job;

/* Row r's label, i32 or i64. */
static int64_t xent_label(const ug_xent_args *a, const char *labels, int64_t r)
{
    return a->labels.dtype == UG_I64 ? ((const int64_t *)(const void *)labels)[r]
                                     : ((const int32_t *)(const void *)labels)[r];
}

static bool xent_ignored(const ug_xent_args *a, int64_t label) { return a->ignore && label == a->ignore_index; }

UG_CPU_WIDE
static void xent_range(void *vjob, int64_t r0, int64_t r1)
{
    const xent_job *j = vjob;
    const ug_xent_args *a = j->args;
    int64_t cols = a->cols;
    float sm = a->smoothing;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * cols;
        if (!j->grad && a->epi.check.mem && ug_cpu_any_nonfinite(x, cols))
            ug_cpu_set_check(a->epi.check);
        int64_t label = xent_label(a, j->labels, r);
        bool ignored = xent_ignored(a, label);
        if (ignored || label < 0 || label >= cols) {
            if (j->grad)
                for (int64_t c = 0; c < cols; c++)
                    j->grad[r * cols + c] = 0.0f;
            else
                j->loss[r] = ignored ? 0.0f : NAN;
            continue;
        }
        float m = row_max((const char *)x, UG_F32, cols);
        double s = row_sum_exp((const char *)x, UG_F32, cols, m);
        if (!j->grad) {
            /* -sum target*log_softmax = -(1-s) lp[label] - s * mean(lp),
             * with lp = (x - m) - log(sum). The smoothing term is skipped
             * at s == 0 so a -inf logit elsewhere gives no 0 * inf. */
            float log_s = logf((float)s);
            float loss = -(1.0f - sm) * ((x[label] - m) - log_s);
            if (sm != 0.0f) {
                double sx;
                LANE_SUM(sx, cols, c, x[c] - m);
                loss -= sm * ((float)(sx / (double)cols) - log_s);
            }
            j->loss[r] = loss;
        } else {
            float inv_s = (float)(1.0 / s), off = sm / (float)cols, on = (1.0f - sm) + off;
            float *g = j->grad + r * cols;
            for (int64_t c = 0; c < cols; c++) {
                float t = c == label ? on : off;
                g[c] = (ug_lane_expf(x[c] - m) * inv_s - t) * j->k;
            }
        }
    }
}

static ug_status cross_entropy_rows(ug_bdev *dev, const ug_xent_args *args)
{
    bool backward = args->grad.mem != NULL;
    if (args->logits.dtype != UG_F32 || (args->labels.dtype != UG_I32 && args->labels.dtype != UG_I64) ||
        (backward ? args->grad.dtype != UG_F32 || (args->dloss.mem && args->dloss.dtype != UG_F32)
                  : !args->loss.mem || args->loss.dtype != UG_F32) ||
        (args->count.mem && args->count.dtype != UG_F32) ||
        (args->epi.check.mem && args->epi.check.dtype != UG_F32))
        return UG_CPU_ERROR(UG_ERR_DTYPE,
                            "cpu cross_entropy: needs f32 logits, i32 or i64 labels and an f32 %s and count",
                            backward ? "grad and dloss" : "loss");
    if (args->rows <= 0)
        return UG_OK;
    xent_job j = {.args = args, .x = (const float *)ug_cpu_ptr(args->logits), .labels = ug_cpu_ptr(args->labels)};
    if (backward) {
        j.grad = (float *)ug_cpu_ptr(args->grad);
        j.k = args->scale * (args->dloss.mem ? *(const float *)ug_cpu_ptr(args->dloss) : 1.0f) /
              (args->count.mem ? *(const float *)ug_cpu_ptr(args->count) : 1.0f);
    } else {
        j.loss = (float *)ug_cpu_ptr(args->loss);
    }
    if (args->cols <= 0) {
        /* No class can match a label: NaN losses (0 ignored), nothing to
         * differentiate. */
        if (!backward)
            for (int64_t r = 0; r < args->rows; r++)
                j.loss[r] = xent_ignored(args, xent_label(args, j.labels, r)) ? 0.0f : NAN;
        return UG_OK;
    }
    ug_cpu_parallel_for(dev->workers, args->rows, row_grain(args->cols), xent_range, &j);
    return UG_OK;
}

/* The mean over the rows not ignored: the reduction's sum (its pairwise
 * order, no epilogue yet) divided by their count, then the epilogue, as
 * the reduction's MEAN would store it with len the count. */
static ug_status cross_entropy_mean(ug_bdev *dev, const ug_xent_args *args)
{
    const ug_reduce_args *m = &args->mean;
    if (m->y.dtype != UG_F32)
        return UG_CPU_ERROR(UG_ERR_DTYPE, "cpu cross_entropy: the mean must be f32, not %s",
                            ug_dtype_name(m->y.dtype));
    ug_reduce_args sum = *m;
    sum.op = UG_RKERNEL_SUM;
    memset(&sum.epi, 0, sizeof sum.epi);
    sum.epi.post = UG_UNARY_COPY;
    UG_BACKEND_TRY(ug_cpu_reduce(dev, &sum));
    int64_t n = args->rows;
    if (args->ignore) {
        const char *labels = ug_cpu_ptr(args->labels);
        for (int64_t r = 0; r < args->rows; r++)
            n -= xent_ignored(args, xent_label(args, labels, r));
    }
    float *y = (float *)ug_cpu_ptr(m->y), r = *y / (float)n;
    ug_cpu_epilogue(&m->epi, &r, 0, 1);
    *y = r;
    if (args->count.mem)
        *(float *)ug_cpu_ptr(args->count) = (float)n;
    return UG_OK;
}

ug_status ug_cpu_cross_entropy(ug_bdev *dev, const ug_xent_args *args)
{
    const ug_status st = cross_entropy_rows(dev, args);
    return st == UG_OK && args->mean.y.mem && args->rows > 0 ? cross_entropy_mean(dev, args) : st;
}

/* ---- LayerNorm ---- */

typedef struct ln_job {
    const ug_layernorm_args *args;
    const float *x, *gamma, *beta, *dy;
    float *y, *mean, *rstd, *dx, *terms;
} ln_job;

UG_CPU_WIDE
static void layernorm_fwd_range(void *vjob, int64_t r0, int64_t r1)
{
    const ln_job *j = vjob;
    int64_t cols = j->args->cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * cols;
        float *y = j->y + r * cols;
        double s = 0.0, v;
        if (!j->args->rms) /* RMSNorm's "mean" is 0 */
            LANE_SUM(s, cols, c, x[c]);
        float mean = (float)(s / (double)cols);
        /* Two passes, biased variance (divide by cols) as PyTorch. */
        LANE_SUM(v, cols, c, (double)(x[c] - mean) * (x[c] - mean));
        float rstd = 1.0f / sqrtf((float)(v / (double)cols) + j->args->eps);
        for (int64_t c = 0; c < cols; c++) {
            float t = (x[c] - mean) * rstd;
            if (j->gamma)
                t *= j->gamma[c];
            if (j->beta)
                t += j->beta[c];
            y[c] = t;
        }
        if (j->mean && !j->args->rms)
            j->mean[r] = mean;
        if (j->rstd)
            j->rstd[r] = rstd;
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma;
 * RMSNorm: mean 0 and no mean(g) term. */
UG_CPU_WIDE
static void layernorm_bwd_range(void *vjob, int64_t r0, int64_t r1)
{
    const ln_job *j = vjob;
    int64_t cols = j->args->cols;
    const bool rms = j->args->rms;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * cols, *dy = j->dy + r * cols;
        float *dx = j->dx + r * cols;
        float mean = rms ? 0.0f : j->mean[r], rstd = j->rstd[r];
        const float *gamma = j->gamma;
        double sg, sgx;
        LANE_SUM(sg, cols, c, gamma ? dy[c] * gamma[c] : dy[c]);
        LANE_SUM(sgx, cols, c, (double)(gamma ? dy[c] * gamma[c] : dy[c]) * ((x[c] - mean) * rstd));
        float mg = rms ? 0.0f : (float)(sg / (double)cols), mgx = (float)(sgx / (double)cols);
        for (int64_t c = 0; c < cols; c++) {
            float g = j->gamma ? dy[c] * j->gamma[c] : dy[c];
            float xhat = (x[c] - mean) * rstd;
            dx[c] = rstd * (g - mg - xhat * mgx);
        }
        float *terms = j->terms ? j->terms + r * cols : NULL;
        for (int64_t c = 0; terms && c < cols; c++)
            terms[c] = dy[c] * ((x[c] - mean) * rstd);
    }
}

static const float *opt_f32(ug_kview v) { return v.mem ? (const float *)ug_cpu_ptr(v) : NULL; }

ug_status ug_cpu_layernorm(ug_bdev *dev, const ug_layernorm_args *args)
{
    bool backward = args->dx.mem != NULL;
    bool missing = backward ? !args->dy.mem || (!args->mean.mem && !args->rms) || !args->rstd.mem : !args->y.mem;
    if (args->x.dtype != UG_F32 || missing)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT,
                            "cpu layernorm: needs f32 x and %s",
                            backward ? (args->rms ? "dy and rstd" : "dy, mean and rstd") : "y");
    if (args->rows <= 0 || args->cols <= 0)
        return UG_OK;
    ln_job j = {.args = args, .x = opt_f32(args->x), .gamma = opt_f32(args->gamma),
                .beta = opt_f32(args->beta), .dy = opt_f32(args->dy),
                .y = (float *)opt_f32(args->y), .mean = (float *)opt_f32(args->mean),
                .rstd = (float *)opt_f32(args->rstd), .dx = (float *)opt_f32(args->dx),
                .terms = (float *)opt_f32(args->terms)};
    ug_cpu_parallel_for(dev->workers, args->rows, row_grain(args->cols),
                        backward ? layernorm_bwd_range : layernorm_fwd_range, &j);
    return UG_OK;
}
