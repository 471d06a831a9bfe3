/* Host reference implementations in double precision (see reference.h). */
#include "reference.h"

#include <math.h>
#include <string.h>

int64_t ref_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

bool ref_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout,
                         int64_t *sout)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        /* Align from the right; a missing axis counts as 1. */
        int ia = na - n + i, ib = nb - n + i;
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        sout[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

int64_t ref_broadcast_offset(int nout, const int64_t *sout, int64_t idx, int n,
                             const int64_t *s)
{
    int64_t off = 0, stride = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int64_t coord = idx % sout[i];
        idx /= sout[i];
        int j = n - nout + i;
        if (j >= 0) {
            if (s[j] != 1)
                off += coord * stride;
            stride *= s[j];
        }
    }
    return off;
}

void ref_binary(double (*f)(double a, double b), int na, const int64_t *sa, const double *a, int nb,
                const int64_t *sb, const double *b, double *out)
{
    int nout;
    int64_t sout[REF_MAX_DIMS];
    if (!ref_broadcast_shape(na, sa, nb, sb, &nout, sout))
        return;
    int64_t n = ref_numel(nout, sout);
    for (int64_t i = 0; i < n; i++)
        out[i] = f(a[ref_broadcast_offset(nout, sout, i, na, sa)],
                   b[ref_broadcast_offset(nout, sout, i, nb, sb)]);
}

void ref_scale_shift(const double *x, double *y, int64_t n, double scale, double shift)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = scale * x[i] + shift;
}

void ref_reduce(ref_reduce_op op, int ndim, const int64_t *shape, const double *x, int axis,
                bool all, double *out)
{
    int64_t outer = 1, len = 1, inner = 1;
    if (all) {
        len = ref_numel(ndim, shape);
    } else {
        for (int i = 0; i < axis; i++)
            outer *= shape[i];
        len = shape[axis];
        for (int i = axis + 1; i < ndim; i++)
            inner *= shape[i];
    }
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            const double *p = x + o * len * inner + in;
            double acc = 0.0, best = -INFINITY;
            int64_t best_i = 0;
            for (int64_t l = 0; l < len; l++) {
                double v = p[l * inner];
                acc += op == REF_RSUMSQ ? v * v : v;
                /* Strictly greater: ties keep the first. A NaN is the
                 * maximum and the first NaN its index, as torch.max/argmax. */
                if (l == 0 || v > best || (isnan(v) && !isnan(best))) {
                    best = v;
                    best_i = l;
                }
            }
            double r;
            switch (op) {
            case REF_RSUM: r = acc; break;
            case REF_RMEAN: r = acc / (double)len; break;
            case REF_RMAX: r = best; break;
            case REF_RARGMAX: r = (double)best_i; break;
            default: r = acc; break;
            }
            out[o * inner + in] = r;
        }
    }
}

bool ref_matmul(int na, const int64_t *sa, const double *a, int nb, const int64_t *sb,
                const double *b, bool ta, bool tb, double *out, int *nout, int64_t *sout)
{
    if (na < 2 || nb < 2)
        return false;
    int64_t m = ta ? sa[na - 1] : sa[na - 2], ka = ta ? sa[na - 2] : sa[na - 1];
    int64_t kb = tb ? sb[nb - 1] : sb[nb - 2], n = tb ? sb[nb - 2] : sb[nb - 1];
    if (ka != kb)
        return false;
    int64_t k = ka;
    /* Batch dims: the operand with more than two axes gives them; if both
     * have them they must be equal. */
    const int64_t *batch_shape = na > 2 ? sa : sb;
    int nbatch = (na > 2 ? na : nb) - 2;
    if (na > 2 && nb > 2) {
        if (na != nb)
            return false;
        for (int i = 0; i < na - 2; i++)
            if (sa[i] != sb[i])
                return false;
    }
    if (nbatch < 0)
        nbatch = 0;
    int64_t batch = ref_numel(nbatch, batch_shape);
    int64_t stride_a = na > 2 ? m * k : 0, stride_b = nb > 2 ? k * n : 0;
    for (int64_t bi = 0; bi < batch; bi++) {
        const double *A = a + bi * stride_a, *B = b + bi * stride_b;
        double *C = out + bi * m * n;
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                double acc = 0.0;
                for (int64_t p = 0; p < k; p++) {
                    double av = ta ? A[p * m + i] : A[i * k + p];
                    double bv = tb ? B[j * k + p] : B[p * n + j];
                    acc += av * bv;
                }
                C[i * n + j] = acc;
            }
        }
    }
    for (int i = 0; i < nbatch; i++)
        sout[i] = batch_shape[i];
    sout[nbatch] = m;
    sout[nbatch + 1] = n;
    *nout = nbatch + 2;
    return true;
}

void ref_softmax(const double *x, double *y, int64_t rows, int64_t cols, bool log_form)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *yr = y + r * cols;
        double mx = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            if (xr[c] > mx)
                mx = xr[c];
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++)
            sum += exp(xr[c] - mx);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = log_form ? (xr[c] - mx) - log(sum) : exp(xr[c] - mx) / sum;
    }
}

void ref_transpose(int ndim, const int64_t *shape, const double *x, double *y)
{
    int64_t rows = shape[ndim - 2], cols = shape[ndim - 1];
    int64_t batch = ref_numel(ndim - 2, shape);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                y[b * rows * cols + j * rows + i] = x[b * rows * cols + i * cols + j];
}

uint16_t ref_f16_bits(double x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x))
        return (uint16_t)(sign | 0x7e00u);
    double a = fabs(x);
    /* 65520 is halfway between 65504 (largest, odd mantissa) and 2^16:
     * ties-to-even rounds it to infinity. */
    if (a >= 65520.0)
        return (uint16_t)(sign | 0x7c00u);
    if (a < ldexp(1.0, -14)) {
        /* Subnormal: units of 2^-24; 1024 units becomes the smallest normal,
         * whose encoding is the same integer. */
        double q = nearbyint(a * ldexp(1.0, 24));
        return (uint16_t)(sign | (uint16_t)q);
    }
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): a in [2^(e-1), 2^e) */
    int exponent = e - 1;
    double q = nearbyint(ldexp(a, 10 - exponent)); /* in [1024, 2048] */
    if (q >= 2048.0) {
        q = 1024.0;
        exponent++;
    }
    if (exponent + 15 >= 31)
        return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)((exponent + 15) << 10) | (uint16_t)(q - 1024.0));
}

double ref_f16_value(uint16_t bits)
{
    double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    int exponent = (bits >> 10) & 0x1f;
    int mantissa = bits & 0x3ff;
    if (exponent == 0x1f)
        return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0)
        return sign * ldexp((double)mantissa, -24);
    return sign * ldexp((double)(mantissa + 1024), exponent - 25);
}

uint16_t ref_bf16_bits(double x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x))
        return 0x7fc0u;
    double a = fabs(x);
    /* Halfway between the largest finite value, (2 - 2^-7) 2^127 with an
     * odd mantissa, and 2^128: ties-to-even rounds it to infinity. */
    if (a >= ldexp(2.0 - ldexp(1.0, -8), 127))
        return (uint16_t)(sign | 0x7f80u);
    if (a < ldexp(1.0, -126)) /* subnormal: units of 2^-133 */
        return (uint16_t)(sign | (uint16_t)nearbyint(a * ldexp(1.0, 133)));
    int e;
    frexp(a, &e);
    int exponent = e - 1;
    double q = nearbyint(ldexp(a, 7 - exponent)); /* in [128, 256] */
    if (q >= 256.0) {
        q = 128.0;
        exponent++;
    }
    return (uint16_t)(sign | (uint16_t)((exponent + 127) << 7) | (uint16_t)(q - 128.0));
}

double ref_bf16_value(uint16_t bits)
{
    double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    int exponent = (bits >> 7) & 0xff;
    int mantissa = bits & 0x7f;
    if (exponent == 0xff)
        return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0)
        return sign * ldexp((double)mantissa, -133);
    return sign * ldexp((double)(mantissa + 128), exponent - 134);
}

/* Philox 4x32 constants: multipliers and Weyl key increments (the golden
 * ratio and sqrt(3)-1 in 32-bit fixed point). */
#define REF_PHILOX_M0 0xD2511F53u
#define REF_PHILOX_M1 0xCD9E8D57u
#define REF_PHILOX_W0 0x9E3779B9u
#define REF_PHILOX_W1 0xBB67AE85u

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += REF_PHILOX_W0;
            k1 += REF_PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)REF_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)REF_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void ref_philox_words(uint64_t seed, uint64_t index, uint32_t *r0, uint32_t *r1)
{
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    ref_philox4x32_10(ctr, key, out);
    *r0 = out[0];
    *r1 = out[1];
}

double ref_random_uniform(uint64_t seed, uint64_t index, double low, double high)
{
    uint32_t r0, r1;
    ref_philox_words(seed, index, &r0, &r1);
    return low + (high - low) * ldexp((double)(r0 >> 8), -24);
}

double ref_random_normal(uint64_t seed, uint64_t index, double mean, double stddev)
{
    uint32_t r0, r1;
    ref_philox_words(seed, index, &r0, &r1);
    double u1 = ldexp((double)(r0 >> 8) + 1.0, -24);
    double u2 = ldexp((double)(r1 >> 8), -24);
    const double two_pi = 6.283185307179586476925286766559;
    return mean + stddev * sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
}

void ref_layernorm(const double *x, const double *gamma, const double *beta, double *y,
                   int64_t rows, int64_t cols, double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < cols; j++)
            mean += xr[j];
        mean /= (double)cols;
        for (int64_t j = 0; j < cols; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        var /= (double)cols;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = (xr[j] - mean) * rstd * (gamma ? gamma[j] : 1.0) + (beta ? beta[j] : 0.0);
    }
}

void ref_rmsnorm(const double *x, const double *gamma, double *y, int64_t rows, int64_t cols, double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double squares = 0.0;
        for (int64_t j = 0; j < cols; j++)
            squares += xr[j] * xr[j];
        const double rms = sqrt(squares / (double)cols + eps);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = xr[j] / rms * (gamma ? gamma[j] : 1.0);
    }
}

void ref_cross_entropy(const double *x, const double *labels, double *loss, int64_t rows,
                       int64_t cols, double smoothing)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        if (!(labels[r] >= 0 && labels[r] < (double)cols)) {
            loss[r] = NAN;
            continue;
        }
        int64_t label = (int64_t)labels[r];
        double mx = xr[0], sum = 0.0, total = 0.0;
        for (int64_t j = 1; j < cols; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        for (int64_t j = 0; j < cols; j++)
            sum += exp(xr[j] - mx);
        double lse = mx + log(sum);
        for (int64_t j = 0; j < cols; j++) {
            double t = (1.0 - smoothing) * (j == label ? 1.0 : 0.0) + smoothing / (double)cols;
            total -= t * (xr[j] - lse);
        }
        loss[r] = total;
    }
}

double ref_cross_entropy_mean(const double *x, const int64_t *labels, int64_t rows, int64_t cols,
                              double smoothing, bool ignore, int64_t ignore_index, double *dx)
{
    double total = 0.0, label = 0.0, loss = 0.0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        n += !(ignore && labels[r] == ignore_index);
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        const bool counted = !(ignore && labels[r] == ignore_index);
        if (counted) {
            label = (double)labels[r];
            ref_cross_entropy(xr, &label, &loss, 1, cols, smoothing);
            total += loss;
        }
        if (!dx)
            continue;
        double mx = xr[0], sum = 0.0;
        for (int64_t j = 1; j < cols; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        for (int64_t j = 0; j < cols; j++)
            sum += exp(xr[j] - mx);
        for (int64_t j = 0; j < cols; j++) {
            const double t = (1.0 - smoothing) * (j == labels[r] ? 1.0 : 0.0) + smoothing / (double)cols;
            const bool valid = counted && labels[r] >= 0 && labels[r] < cols;
            dx[r * cols + j] = valid ? (exp(xr[j] - mx) / sum - t) / (double)n : 0.0;
        }
    }
    return n ? total / (double)n : NAN;
}
