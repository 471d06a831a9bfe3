/* Reductions (kernels/hip/reduce.hip: column blocks, len split across
 * blocks with a second pass, NaN and ties) and GEMM (kernels/hip/gemm.hip,
 * and the vendor path of backends/hip/gemm.cpp through the fake cuBLAS). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_test.h"

/* ---- reductions ---- */

static const ref_reduce_op g_ref_reduce[] = {
    [UG_RKERNEL_SUM] = REF_RSUM,       [UG_RKERNEL_MEAN] = REF_RMEAN,
    [UG_RKERNEL_MAX] = REF_RMAX,       [UG_RKERNEL_ARGMAX] = REF_RARGMAX,
    [UG_RKERNEL_SUMSQ] = REF_RSUMSQ,
};

/* y[o*inner + i] = op over x[o, :, i]; the outer*inner results, or NULL. */
static double *run_reduce(ug_reduce_kind op, ug_kview x, ug_dtype yt, int64_t outer, int64_t len,
                          int64_t inner)
{
    ug_reduce_args a;
    memset(&a, 0, sizeof a);
    a.op = op;
    a.x = x;
    a.y = emu_upload(op == UG_RKERNEL_ARGMAX ? UG_I32 : yt, NULL, outer * inner);
    a.outer = outer;
    a.len = len;
    a.inner = inner;
    if (!EMU_OK(emu_backend->reduce(emu_dev, &a)) || !emu_guards_intact(a.y, outer * inner))
        return NULL;
    return emu_download(a.y, outer * inner);
}

static bool check_reduce(ug_reduce_kind op, ug_dtype yt, const int64_t shape[3],
                         const double *x, ug_kview xv)
{
    const int64_t n_out = shape[0] * shape[2];
    const double *got = run_reduce(op, xv, yt, shape[0], shape[1], shape[2]);
    if (!got || !emu_guards_intact(xv, shape[0] * shape[1] * shape[2]))
        return false;
    double *want = emu_alloc((size_t)n_out * sizeof *want);
    ref_reduce(g_ref_reduce[op], 3, shape, x, 1, false, want);
    if (op != UG_RKERNEL_ARGMAX)
        emu_round_to(yt, want, n_out);
    if (op == UG_RKERNEL_ARGMAX || op == UG_RKERNEL_MAX)
        return EMU_COMPARE("reduce", got, want, n_out, 0.0); /* exact */
    return EMU_COMPARE("reduce", got, want, n_out, th_tol(yt));
}

/* [outer, len, inner] shapes that take each path: one column per block or
 * 64, several column blocks, len split across blocks (two passes). */
void test_reduce(void)
{
    static const int64_t shapes[][3] = {
        {1, 1, 1},    {3, 7, 5},    {2, 1000, 1},  {1, 100000, 1},
        {2, 30000, 3}, {4, 5, 70},  {2, 3000, 130}, {9, 3, 1},
    };
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < n_shapes; s++) {
        const int64_t n = shapes[s][0] * shapes[s][1] * shapes[s][2];
        double *x = emu_random_values(n, -3, 3);
        for (int64_t i = 0; i < n; i += 97)
            x[i] = 2.75; /* ties: argmax must give the first */
        for (int k = 0; k < 2; k++) {
            const ug_dtype xt = k ? UG_F16 : UG_F32;
            /* f16 input on some shapes (keeps the run short). */
            if (xt == UG_F16 && s != 1 && s != 4 && s != 5)
                continue;
            emu_round_to(xt, x, n);
            ug_kview xv = emu_upload(xt, x, n);
            for (int op = UG_RKERNEL_SUM; op <= UG_RKERNEL_SUMSQ; op++) {
                emu_context("[%lld,%lld,%lld], op %d, dtype %d", (long long)shapes[s][0],
                            (long long)shapes[s][1], (long long)shapes[s][2], op, (int)xt);
                if (!check_reduce((ug_reduce_kind)op, xt, shapes[s], x, xv))
                    return;
            }
            if (xt == UG_F16) {
                emu_context("[%lld,%lld,%lld], mean of f16 into f32", (long long)shapes[s][0],
                            (long long)shapes[s][1], (long long)shapes[s][2]);
                if (!check_reduce(UG_RKERNEL_MEAN, UG_F32, shapes[s], x, xv))
                    return;
            }
        }
    }
}

/* max and argmax propagate NaN (argmax: the first NaN), across threads,
 * split blocks and both passes; all -inf gives -inf at index 0. */
void test_reduce_nan(void)
{
    static const struct {
        int64_t len, nan1, nan2; /* NaN positions; -1: none */
    } cases[] = {{6, 2, 4}, {300, 299, -1}, {100000, 70000, 90000}, {100000, 99999, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int inner = 1; inner <= 3; inner += 2) {
            const int64_t len = cases[c].len, n = len * inner;
            emu_context("len %lld, inner %d, NaN at %lld and %lld", (long long)len, inner,
                        (long long)cases[c].nan1, (long long)cases[c].nan2);
            double *x = emu_random_values(n, -1, 1);
            for (int i = 0; i < inner; i++) {
                x[cases[c].nan1 * inner + i] = NAN;
                if (cases[c].nan2 >= 0)
                    x[cases[c].nan2 * inner + i] = NAN;
            }
            ug_kview xv = emu_upload(UG_F32, x, n);
            const double *mx = run_reduce(UG_RKERNEL_MAX, xv, UG_F32, 1, len, inner);
            const double *am = run_reduce(UG_RKERNEL_ARGMAX, xv, UG_F32, 1, len, inner);
            if (!mx || !am)
                return;
            const int64_t first = cases[c].nan2 >= 0 && cases[c].nan2 < cases[c].nan1
                                      ? cases[c].nan2 : cases[c].nan1;
            for (int i = 0; i < inner; i++)
                EMU_CHECK(isnan(mx[i]) && am[i] == (double)first,
                          "column %d: max %g, argmax %g (want NaN, %lld)", i, mx[i], am[i],
                          (long long)first);
        }
    }
    emu_context("all -inf");
    const int64_t len = 50000;
    double *x = emu_alloc((size_t)len * sizeof *x);
    for (int64_t i = 0; i < len; i++)
        x[i] = -INFINITY;
    ug_kview xv = emu_upload(UG_F32, x, len);
    const double *mx = run_reduce(UG_RKERNEL_MAX, xv, UG_F32, 1, len, 1);
    const double *am = run_reduce(UG_RKERNEL_ARGMAX, xv, UG_F32, 1, len, 1);
    EMU_CHECK(mx && am && mx[0] == -INFINITY && am[0] == 0.0, "max %g, argmax %g",
              mx ? mx[0] : NAN, am ? am[0] : NAN);
}

/* 2^24 and more elements, as tests/test_reduce.c: sums stay exact or
 * accurate (no long serial f32 sum), argmax finds the first maximum. */
void test_reduce_long(void)
{
    const int64_t big = (int64_t)1 << 24, n = big + 3;
    float *host = emu_alloc((size_t)n * sizeof *host);
    ug_kview xv = emu_upload(UG_F32, NULL, n);
    const size_t at = (size_t)xv.offset * sizeof(float);

    emu_context("2^24 ones, and [4, 2^22] ones over axis 1");
    for (int64_t i = 0; i < n; i++)
        host[i] = 1.0f;
    if (!EMU_OK(emu_backend->write(emu_dev, xv.mem, at, host, (size_t)n * 4, true)))
        return;
    const double *sum = run_reduce(UG_RKERNEL_SUM, xv, UG_F32, 1, big, 1);
    const double *mean = run_reduce(UG_RKERNEL_MEAN, xv, UG_F32, 1, big, 1);
    const double *rows = run_reduce(UG_RKERNEL_SUM, xv, UG_F32, 4, big / 4, 1);
    EMU_CHECK(sum && sum[0] == 16777216.0, "sum of 2^24 ones is %.9g", sum ? sum[0] : NAN);
    EMU_CHECK(mean && mean[0] == 1.0, "mean of 2^24 ones is %.9g", mean ? mean[0] : NAN);
    for (int r = 0; rows && r < 4; r++)
        EMU_CHECK(rows[r] == 4194304.0, "row %d sums to %.9g", r, rows[r]);

    emu_context("2^24 x 0.1f");
    for (int64_t i = 0; i < n; i++)
        host[i] = 0.1f;
    if (!EMU_OK(emu_backend->write(emu_dev, xv.mem, at, host, (size_t)n * 4, true)))
        return;
    sum = run_reduce(UG_RKERNEL_SUM, xv, UG_F32, 1, big, 1);
    const double want_tenth = (double)0.1f * (double)big;
    if (sum)
        EMU_COMPARE("sum of 0.1f", sum, &want_tenth, 1, 1e-9);

    double *x = emu_random_values(n, 0, 1);
    emu_round_to(UG_F32, x, n);
    x[n - 7] = x[n - 2] = 5.0; /* the maximum, twice: argmax is the first */
    x[12345] = -3.0;
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)x[i];
    if (!EMU_OK(emu_backend->write(emu_dev, xv.mem, at, host, (size_t)n * 4, true)))
        return;
    for (int op = UG_RKERNEL_SUM; op <= UG_RKERNEL_SUMSQ; op++) {
        emu_context("op %d of 2^24+3 uniform values", op);
        const double *got = run_reduce((ug_reduce_kind)op, xv, UG_F32, 1, n, 1);
        double want;
        ref_reduce(g_ref_reduce[op], 1, &n, x, 0, true, &want);
        if (got)
            EMU_COMPARE("reduce", got, &want, 1,
                        op == UG_RKERNEL_MAX || op == UG_RKERNEL_ARGMAX ? 0.0 : 1e-9);
    }
    emu_guards_intact(xv, n);
}

/* ---- GEMM ---- */

typedef struct gemm_case {
    int64_t m, n, k;
} gemm_case;

/* Runs one GEMM with padded leading dimensions, odd batch strides, offsets,
 * NaN in every element the GEMM must not read, and checks C against the
 * suite's ref_matmul (NMSE, the suite's matmul tolerance) and, per element,
 * against the error bound of an f32 sum of k products, which catches a
 * single misplaced element the NMSE would average away. */
static bool check_gemm(gemm_case d, bool ta, bool tb, int64_t batch, bool shared_a)
{
    ug_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = ta;
    g.trans_b = tb;
    g.m = d.m;
    g.n = d.n;
    g.k = d.k;
    g.batch = batch;
    g.alpha = 1.5f;
    g.beta = batch == 1 ? 0.0f : -0.5f; /* beta 0 must not read C (it holds NaN) */
    /* Rows and columns of the stored A and B. */
    const int64_t ra = ta ? d.k : d.m, ca = ta ? d.m : d.k;
    const int64_t rb = tb ? d.n : d.k, cb = tb ? d.k : d.n;
    g.lda = ca + 3;
    g.ldb = cb + 1;
    g.ldc = d.n + 2;
    g.stride_a = shared_a ? 0 : ra * g.lda + 7;
    g.stride_b = rb * g.ldb + 5;
    g.stride_c = d.m * g.ldc + 3;
    const int64_t batch_a = shared_a ? 1 : batch;
    const int64_t size_a = (batch_a - 1) * g.stride_a + ra * g.lda,
                  size_b = (batch - 1) * g.stride_b + rb * g.ldb,
                  size_c = (batch - 1) * g.stride_c + d.m * g.ldc;
    /* Packed operands for the reference, and their absolute values. */
    double *pa = emu_random_values(batch_a * ra * ca, -1, 1);
    double *pb = emu_random_values(batch * rb * cb, -1, 1);
    double *pc = emu_random_values(batch * d.m * d.n, -1, 1);
    emu_round_to(UG_F32, pa, batch_a * ra * ca);
    emu_round_to(UG_F32, pb, batch * rb * cb);
    emu_round_to(UG_F32, pc, batch * d.m * d.n);
    double *A = emu_alloc((size_t)size_a * 8), *B = emu_alloc((size_t)size_b * 8),
           *C = emu_alloc((size_t)size_c * 8);
    for (int64_t i = 0; i < size_a; i++) A[i] = NAN;
    for (int64_t i = 0; i < size_b; i++) B[i] = NAN;
    for (int64_t i = 0; i < size_c; i++) C[i] = NAN;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t r = 0; b < batch_a && r < ra; r++)
            for (int64_t c = 0; c < ca; c++)
                A[b * g.stride_a + r * g.lda + c] = pa[(b * ra + r) * ca + c];
        for (int64_t r = 0; r < rb; r++)
            for (int64_t c = 0; c < cb; c++)
                B[b * g.stride_b + r * g.ldb + c] = pb[(b * rb + r) * cb + c];
        for (int64_t r = 0; g.beta != 0.0f && r < d.m; r++)
            for (int64_t c = 0; c < d.n; c++)
                C[b * g.stride_c + r * g.ldc + c] = pc[(b * d.m + r) * d.n + c];
    }
    g.a = emu_upload(UG_F32, A, size_a);
    g.b = emu_upload(UG_F32, B, size_b);
    g.c = emu_upload(UG_F32, C, size_c);
    if (!EMU_OK(emu_backend->gemm(emu_dev, &g)))
        return false;
    const double *got = emu_download(g.c, size_c);

    const int64_t sa3[3] = {batch_a, ra, ca}, sb3[3] = {batch, rb, cb};
    const int na = shared_a ? 2 : 3;
    const int64_t *sa = shared_a ? sa3 + 1 : sa3;
    double *ref = emu_alloc((size_t)(batch * d.m * d.n + 1) * 8);
    double *mag = emu_alloc((size_t)(batch * d.m * d.n + 1) * 8);
    double *abs_a = emu_alloc((size_t)(batch_a * ra * ca + 1) * 8);
    double *abs_b = emu_alloc((size_t)(batch * rb * cb + 1) * 8);
    for (int64_t i = 0; i < batch_a * ra * ca; i++) abs_a[i] = fabs(pa[i]);
    for (int64_t i = 0; i < batch * rb * cb; i++) abs_b[i] = fabs(pb[i]);
    int nout;
    int64_t sout[8];
    if (!ref_matmul(na, sa, pa, 3, sb3, pb, ta, tb, ref, &nout, sout) ||
        !ref_matmul(na, sa, abs_a, 3, sb3, abs_b, ta, tb, mag, &nout, sout)) {
        emu_fail(__FILE__, __LINE__, "ref_matmul refused the shapes");
        return false;
    }
    /* C's elements in the packed order; padding must still hold NaN. */
    const int64_t count = batch * d.m * d.n;
    double *gc = emu_alloc((size_t)(count + 1) * 8), *want = emu_alloc((size_t)(count + 1) * 8);
    int64_t bad = 0, pad_bad = 0, first_bad = -1;
    for (int64_t i = 0; i < size_c; i++) {
        const int64_t b = i / g.stride_c, r = i % g.stride_c / g.ldc, c = i % g.stride_c % g.ldc;
        const bool inside = b < batch && i % g.stride_c < d.m * g.ldc && c < d.n;
        if (!inside) {
            pad_bad += !isnan(got[i]);
            continue;
        }
        const int64_t p = (b * d.m + r) * d.n + c;
        const double c0 = g.beta != 0.0f ? pc[p] : 0.0;
        want[p] = g.alpha * ref[p] + g.beta * c0;
        gc[p] = got[i];
        const double bound = (double)(d.k + 4) * ldexp(1.0, -23) *
                             (fabs(g.alpha) * mag[p] + fabs(g.beta * c0)) + 1e-30;
        if (!(fabs(got[i] - want[p]) <= bound) && bad++ == 0)
            first_bad = p;
    }
    EMU_CHECK(pad_bad == 0, "%lld elements of C outside the matrices were written",
              (long long)pad_bad);
    EMU_CHECK(bad == 0, "%lld of %lld elements beyond the f32 error bound, first %lld: %.9g, "
              "expected %.9g", (long long)bad, (long long)count, (long long)first_bad,
              first_bad >= 0 ? gc[first_bad] : 0.0, first_bad >= 0 ? want[first_bad] : 0.0);
    return EMU_COMPARE("gemm", gc, want, count, TH_TOL_MATMUL) && bad == 0 && pad_bad == 0 &&
           emu_guards_intact(g.a, size_a) && emu_guards_intact(g.b, size_b) &&
           emu_guards_intact(g.c, size_c);
}

/* Edges of the 64x64 tiles, K not a multiple of 16, K = 0, one element;
 * every transpose; batches with their own or one shared A. */
static int gemm_all(void)
{
    static const gemm_case dims[] = {{1, 1, 1},   {70, 65, 33}, {64, 64, 16},
                                     {5, 130, 17}, {3, 4, 0},   {129, 3, 100}};
    int runs = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 3; v++) {
                const int64_t batch = v == 0 ? 1 : 3;
                emu_context("%lldx%lldx%lld, trans_a %d, trans_b %d, batch %lld%s",
                            (long long)dims[i].m, (long long)dims[i].n, (long long)dims[i].k,
                            t & 1, t >> 1, (long long)batch, v == 2 ? ", shared A" : "");
                runs++;
                if (!check_gemm(dims[i], t & 1, t >> 1, batch, v == 2))
                    return -1;
            }
    return runs;
}

void test_gemm_own(void)
{
    setenv("UG_GEMM", "own", 1); /* read on every call (blas.cpp) */
    const int calls = emu_fake_cublas_calls();
    gemm_all();
    EMU_CHECK(emu_fake_cublas_calls() == calls, "UG_GEMM=own still called cuBLAS");
    if (emu_fake_cublas_loaded)
        unsetenv("UG_GEMM");
}

/* The same through the vendor path: the module maps row-major onto
 * column-major cuBLAS by swapping A and B, m and n and the transposes. */
void test_gemm_vendor_mapping(void)
{
    if (!emu_fake_cublas_loaded) {
        emu_fail(__FILE__, __LINE__, "the fake libcublas.so.13 was not loaded (see the note "
                 "above): the test's RUNPATH/LD_LIBRARY_PATH must find it first");
        return;
    }
    const int calls = emu_fake_cublas_calls();
    const int runs = gemm_all();
    /* Every GEMM with m, n > 0 went to cuBLAS, none to the own kernel. */
    if (runs > 0)
        EMU_CHECK(emu_fake_cublas_calls() - calls == runs, "%d cuBLAS calls for %d GEMMs",
                  emu_fake_cublas_calls() - calls, runs);
}
