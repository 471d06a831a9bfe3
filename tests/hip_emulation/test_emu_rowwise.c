/* Row-wise kernels (kernels/hip/rowwise.hip: softmax, cross-entropy,
 * LayerNorm), random numbers (random.hip), optimizers (optimizer.hip) and
 * the module's memory functions (backends/hip/memory.cpp). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu_test.h"

/* ---- softmax ---- */

void test_softmax(void)
{
    static const int64_t shapes[][2] = {{1, 1}, {3, 1000}, {5, 257}, {2, 4096}, {7, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int k = 0; k < 2; k++)
            for (int lg = 0; lg < 2; lg++) {
                const ug_dtype t = k ? UG_F16 : UG_F32;
                const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
                emu_context("%lldx%lld, dtype %d, %s", (long long)rows, (long long)cols, (int)t,
                            lg ? "log" : "plain");
                double *x = emu_random_values(n, -8, 8), *want = emu_alloc((size_t)n * 8);
                if (cols > 1)
                    x[1] = -INFINITY; /* a masked entry: probability 0 */
                emu_round_to(t, x, n);
                ref_softmax(x, want, rows, cols, lg != 0);
                emu_round_to(t, want, n);
                ug_softmax_args a = {lg != 0, emu_upload(t, NULL, n), emu_upload(t, x, n), rows,
                                     cols};
                if (!EMU_OK(emu_backend->softmax(emu_dev, &a)) || !emu_guards_intact(a.y, n) ||
                    !EMU_COMPARE("softmax", emu_download(a.y, n), want, n, th_tol(t)))
                    return;
            }
}

/* ---- cross-entropy (backend.h's definition, in double) ---- */

void test_cross_entropy(void)
{
    static const int64_t shapes[][2] = {{6, 300}, {3, 1}, {4, 7}};
    const float scale = 0.25f, dloss = 0.7f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int sm = 0; sm < 2; sm++) {
            const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
            const float smoothing = sm ? 0.1f : 0.0f;
            emu_context("%lldx%lld, smoothing %g", (long long)rows, (long long)cols, smoothing);
            double *x = emu_random_values(n, -6, 6), *labels = emu_alloc((size_t)rows * 8);
            emu_round_to(UG_F32, x, n);
            for (int64_t r = 0; r < rows; r++)
                labels[r] = (double)((r * 37) % cols);
            labels[rows - 1] = -1.0; /* invalid: NaN loss, zero gradient */
            if (rows > 3)
                labels[1] = (double)cols;
            double *want_loss = emu_alloc((size_t)rows * 8), *want_grad = emu_alloc((size_t)n * 8);
            for (int64_t r = 0; r < rows; r++) {
                const double *xr = x + r * cols;
                const bool valid = labels[r] >= 0 && labels[r] < (double)cols;
                double mx = -INFINITY, se = 0.0, loss = 0.0;
                for (int64_t c = 0; c < cols; c++)
                    mx = fmax(mx, xr[c]);
                for (int64_t c = 0; c < cols; c++)
                    se += exp(xr[c] - mx);
                const double lse = mx + log(se);
                for (int64_t c = 0; c < cols; c++) {
                    const double target = (c == (int64_t)labels[r] ? 1.0 - smoothing : 0.0) +
                                          (double)smoothing / (double)cols;
                    loss -= target * (xr[c] - lse);
                    want_grad[r * cols + c] =
                        valid ? (exp(xr[c] - lse) - target) * scale * dloss : 0.0;
                }
                want_loss[r] = valid ? loss : NAN;
            }
            const double dl = dloss;
            ug_xent_args a;
            memset(&a, 0, sizeof a);
            a.logits = emu_upload(UG_F32, x, n);
            a.labels = emu_upload(UG_I32, labels, rows);
            a.loss = emu_upload(UG_F32, NULL, rows);
            a.rows = rows;
            a.cols = cols;
            a.smoothing = smoothing;
            a.scale = scale;
            if (!EMU_OK(emu_backend->cross_entropy(emu_dev, &a)) ||
                !EMU_COMPARE("loss", emu_download(a.loss, rows), want_loss, rows, TH_TOL_F32))
                return;
            a.grad = emu_upload(UG_F32, NULL, n);
            a.dloss = emu_upload(UG_F32, &dl, 1);
            if (!EMU_OK(emu_backend->cross_entropy(emu_dev, &a)) ||
                !emu_guards_intact(a.grad, n) || !emu_guards_intact(a.loss, rows) ||
                !EMU_COMPARE("gradient", emu_download(a.grad, n), want_grad, n, TH_TOL_F32))
                return;
        }
}

/* ---- LayerNorm ---- */

void test_layernorm(void)
{
    static const int64_t shapes[][2] = {{4, 517}, {3, 1}, {2, 64}};
    const float eps = 1e-5f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int affine = 0; affine < 2; affine++) {
            const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
            emu_context("%lldx%lld, %s", (long long)rows, (long long)cols,
                        affine ? "gamma and beta" : "no gamma, no beta");
            double *x = emu_random_values(n, -3, 5), *dy = emu_random_values(n, -1, 1);
            double *gamma = emu_random_values(cols, 0.5, 1.5);
            double *beta = emu_random_values(cols, -1, 1);
            emu_round_to(UG_F32, x, n);
            emu_round_to(UG_F32, dy, n);
            emu_round_to(UG_F32, gamma, cols);
            emu_round_to(UG_F32, beta, cols);
            double *y = emu_alloc((size_t)n * 8), *dx = emu_alloc((size_t)n * 8);
            double *mean = emu_alloc((size_t)rows * 8), *rstd = emu_alloc((size_t)rows * 8);
            for (int64_t r = 0; r < rows; r++) {
                const double *xr = x + r * cols, *dyr = dy + r * cols;
                double mu = 0.0, var = 0.0, sg = 0.0, sgx = 0.0;
                for (int64_t c = 0; c < cols; c++)
                    mu += xr[c] / (double)cols;
                for (int64_t c = 0; c < cols; c++)
                    var += (xr[c] - mu) * (xr[c] - mu) / (double)cols;
                mean[r] = mu;
                rstd[r] = 1.0 / sqrt(var + eps);
                for (int64_t c = 0; c < cols; c++) {
                    const double h = (xr[c] - mu) * rstd[r], g = dyr[c] * (affine ? gamma[c] : 1.0);
                    y[r * cols + c] = affine ? h * gamma[c] + beta[c] : h;
                    sg += g;
                    sgx += g * h;
                }
                for (int64_t c = 0; c < cols; c++) {
                    const double h = (xr[c] - mu) * rstd[r], g = dyr[c] * (affine ? gamma[c] : 1.0);
                    dx[r * cols + c] = rstd[r] * (g - sg / (double)cols - h * sgx / (double)cols);
                }
            }
            ug_layernorm_args a;
            memset(&a, 0, sizeof a);
            a.x = emu_upload(UG_F32, x, n);
            a.y = emu_upload(UG_F32, NULL, n);
            a.mean = emu_upload(UG_F32, NULL, rows);
            a.rstd = emu_upload(UG_F32, NULL, rows);
            if (affine) {
                a.gamma = emu_upload(UG_F32, gamma, cols);
                a.beta = emu_upload(UG_F32, beta, cols);
            }
            a.rows = rows;
            a.cols = cols;
            a.eps = eps;
            if (!EMU_OK(emu_backend->layernorm(emu_dev, &a)) ||
                !EMU_COMPARE("y", emu_download(a.y, n), y, n, TH_TOL_F32) ||
                !EMU_COMPARE("mean", emu_download(a.mean, rows), mean, rows, TH_TOL_F32) ||
                !EMU_COMPARE("rstd", emu_download(a.rstd, rows), rstd, rows, TH_TOL_F32))
                return;
            a.dy = emu_upload(UG_F32, dy, n);
            a.dx = emu_upload(UG_F32, NULL, n);
            if (!EMU_OK(emu_backend->layernorm(emu_dev, &a)) || !emu_guards_intact(a.dx, n) ||
                !emu_guards_intact(a.y, n) ||
                !EMU_COMPARE("dx", emu_download(a.dx, n), dx, n, TH_TOL_F32))
                return;
        }
}

/* ---- random ---- */

static ug_kview draw(ug_dtype t, int64_t n, bool normal, uint64_t seed, uint64_t offset, float p0,
                     float p1)
{
    ug_random_args a;
    memset(&a, 0, sizeof a);
    a.normal = normal;
    a.p0 = p0;
    a.p1 = p1;
    a.seed = seed;
    a.offset = offset;
    a.y = emu_upload(t, NULL, n);
    a.n = n;
    if (!EMU_OK(emu_backend->random(emu_dev, &a)) || !emu_guards_intact(a.y, n))
        a.y.mem = NULL;
    return a.y;
}

/* Bit for bit the reference Philox on ranges where low + (high-low) u is
 * exact in f32 (as tests/test_random.c), within rounding elsewhere. */
void test_random_uniform(void)
{
    static const struct {
        uint64_t seed, offset;
        float low, high;
    } cases[] = {
        {0, 0, 0.0f, 1.0f},
        {42, 0, 0.0f, 1.0f},
        {0x123456789abcdef0ull, 1000, -2.0f, 2.0f}, /* the key's high word matters */
        {7, 0x00000001fffffff0ull, 0.0f, 1.0f},     /* counters cross 2^32 */
        {~0ull, 0xfffffffffffff000ull, -2.0f, 2.0f},
    };
    static const int64_t sizes[] = {1, 257, 4099};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int k = 0; k < 2; k++) {
                const int64_t n = sizes[s];
                const ug_dtype t = k ? UG_F16 : UG_F32;
                emu_context("seed 0x%llx offset 0x%llx [%g,%g), %lld elements, dtype %d",
                            (unsigned long long)cases[c].seed, (unsigned long long)cases[c].offset,
                            cases[c].low, cases[c].high, (long long)n, (int)t);
                ug_kview y = draw(t, n, false, cases[c].seed, cases[c].offset, cases[c].low,
                                  cases[c].high);
                if (!y.mem)
                    return;
                float *want = emu_alloc((size_t)n * 4);
                uint16_t *want_h = emu_alloc((size_t)n * 2);
                for (int64_t i = 0; i < n; i++) {
                    want[i] = (float)ref_random_uniform(cases[c].seed,
                                                        cases[c].offset + (uint64_t)i,
                                                        cases[c].low, cases[c].high);
                    want_h[i] = ref_f16_bits(want[i]);
                }
                const void *ref = t == UG_F16 ? (const void *)want_h : (const void *)want;
                if (!EMU_COMPARE_BITS("uniform", emu_download_raw(y, n), ref, n, emu_dtype_size(t)))
                    return;
            }
    emu_context("[-0.3, 1.9)");
    const int64_t n = 4097;
    const float low = -0.3f, high = 1.9f; /* high - low = 2.2f: products round */
    ug_kview y = draw(UG_F32, n, false, 1234, 77, low, high);
    const double *got = y.mem ? emu_download(y, n) : NULL;
    int bad = 0;
    for (int64_t i = 0; got && i < n; i++) {
        const double want = ref_random_uniform(1234, 77 + (uint64_t)i, low, high);
        bad += fabs(got[i] - want) > 1e-6 || !(got[i] >= low && got[i] < high);
    }
    EMU_CHECK(got && bad == 0, "%d elements off the reference or outside [low, high)", bad);
    /* ... and bit for bit the unfused f32 formula of backend.h, which every
     * backend evaluates (the same draw on every device). */
    float *want = emu_alloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r0, r1;
        ref_philox_words(1234, 77 + (uint64_t)i, &r0, &r1);
        const float u = (float)(r0 >> 8) * 0x1p-24f, range = high - low, scaled = range * u;
        want[i] = low + scaled;
    }
    if (y.mem)
        EMU_COMPARE_BITS("uniform in f32", emu_download_raw(y, n), want, n, 4);
}

void test_random_normal(void)
{
    static const int64_t sizes[] = {1, 4099};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int k = 0; k < 2; k++) {
            const int64_t n = sizes[s];
            const ug_dtype t = k ? UG_F16 : UG_F32;
            emu_context("%lld elements, dtype %d", (long long)n, (int)t);
            ug_kview y = draw(t, n, true, 99, 0xfffffff0ull, 0.5f, 3.0f);
            if (!y.mem)
                return;
            double *want = emu_alloc((size_t)n * 8);
            for (int64_t i = 0; i < n; i++)
                want[i] = ref_random_normal(99, 0xfffffff0ull + (uint64_t)i, 0.5, 3.0);
            emu_round_to(t, want, n);
            if (!EMU_COMPARE("normal", emu_download(y, n), want, n, th_tol(t)))
                return;
        }
}

/* ---- optimizers (PyTorch's update rules, backend.h; in double) ---- */

typedef struct optim_case {
    ug_optim_kind kind;
    float wd, momentum, dampening, eps;
    bool nesterov, first_step, scaled;
} optim_case;

void test_optimizers(void)
{
    static const optim_case cases[] = {
        {UG_OPTIM_SGD, 0.0f, 0.9f, 0.0f, 0, false, false, false},
        {UG_OPTIM_SGD, 0.1f, 0.9f, 0.2f, 0, false, true, false},
        {UG_OPTIM_SGD, 0.1f, 0.9f, 0.0f, 0, true, false, true},
        {UG_OPTIM_SGD, 0.01f, 0.0f, 0.0f, 0, false, false, false}, /* no momentum, no state */
        {UG_OPTIM_ADAM, 0.0f, 0, 0, 1e-8f, false, false, false},
        {UG_OPTIM_ADAM, 0.1f, 0, 0, 1e-3f, false, false, true}, /* eps that matters */
        {UG_OPTIM_ADAMW, 0.1f, 0, 0, 1e-8f, false, false, false},
        {UG_OPTIM_ADAMW, 0.05f, 0, 0, 1e-3f, false, false, true},
    };
    const int64_t n = 3001;
    const float lr = 0.01f, beta1 = 0.9f, beta2 = 0.999f, gscale = 0.5f;
    const float bc1 = 1.0f - powf(beta1, 3), bc2 = 1.0f - powf(beta2, 3); /* step 3 */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const optim_case *o = &cases[c];
        emu_context("case %zu (kind %d)", c, (int)o->kind);
        double *p = emu_random_values(n, -1, 1), *g = emu_random_values(n, -1, 1);
        double *s0 = emu_random_values(n, -0.1, 0.1), *s1 = emu_random_values(n, 0, 0.01);
        emu_round_to(UG_F32, p, n);
        emu_round_to(UG_F32, g, n);
        emu_round_to(UG_F32, s0, n);
        emu_round_to(UG_F32, s1, n);
        const bool has_state = o->kind != UG_OPTIM_SGD || o->momentum != 0.0f;
        const double scale_v = gscale;
        ug_optim_args a;
        memset(&a, 0, sizeof a);
        a.kind = o->kind;
        a.param = emu_upload(UG_F32, p, n);
        a.grad = emu_upload(UG_F32, g, n);
        if (has_state)
            a.state0 = emu_upload(UG_F32, s0, n);
        if (o->kind != UG_OPTIM_SGD)
            a.state1 = emu_upload(UG_F32, s1, n);
        if (o->scaled)
            a.grad_scale = emu_upload(UG_F32, &scale_v, 1);
        a.n = n;
        a.lr = lr;
        a.weight_decay = o->wd;
        a.momentum = o->momentum;
        a.dampening = o->dampening;
        a.nesterov = o->nesterov;
        a.first_step = o->first_step;
        a.beta1 = beta1;
        a.beta2 = beta2;
        a.eps = o->eps;
        a.bias_correction1 = bc1;
        a.bias_correction2 = bc2;
        if (!EMU_OK(emu_backend->optimizer(emu_dev, &a)))
            return;
        double *p0 = emu_alloc((size_t)n * 8);
        memcpy(p0, p, (size_t)n * 8);
        for (int64_t i = 0; i < n; i++) {
            double gi = g[i] * (o->scaled ? gscale : 1.0);
            if (o->kind == UG_OPTIM_SGD) {
                if (o->wd != 0.0f)
                    gi += o->wd * p[i];
                if (o->momentum != 0.0f) {
                    s0[i] = o->first_step ? gi : o->momentum * s0[i] + (1.0 - o->dampening) * gi;
                    gi = o->nesterov ? gi + o->momentum * s0[i] : s0[i];
                }
                p[i] -= lr * gi;
                continue;
            }
            if (o->kind == UG_OPTIM_ADAMW)
                p[i] *= 1.0 - (double)lr * o->wd;
            else if (o->wd != 0.0f)
                gi += o->wd * p[i];
            s0[i] += (1.0 - beta1) * (gi - s0[i]);
            s1[i] = beta2 * s1[i] + (1.0 - beta2) * gi * gi;
            p[i] -= (lr / bc1) * (s0[i] / (sqrt(s1[i]) / sqrt(bc2) + o->eps));
        }
        /* The updates, not the parameters: an update is about lr times
         * smaller than its parameter, and an error in it would vanish in
         * the parameter's NMSE. */
        double *got = emu_download(a.param, n);
        for (int64_t i = 0; i < n; i++) {
            got[i] -= p0[i];
            p[i] -= p0[i];
        }
        if (!EMU_COMPARE("update", got, p, n, TH_TOL_F32) ||
            (has_state && !EMU_COMPARE("state0", emu_download(a.state0, n), s0, n, TH_TOL_F32)) ||
            (o->kind != UG_OPTIM_SGD &&
             !EMU_COMPARE("state1", emu_download(a.state1, n), s1, n, TH_TOL_F32)) ||
            !emu_guards_intact(a.param, n) || (has_state && !emu_guards_intact(a.state0, n)))
            return;
    }
    emu_context("missing state");
    ug_optim_args a;
    memset(&a, 0, sizeof a);
    a.kind = UG_OPTIM_ADAM;
    a.param = emu_upload(UG_F32, NULL, 4);
    a.grad = emu_upload(UG_F32, NULL, 4);
    a.n = 4;
    EMU_CHECK(emu_backend->optimizer(emu_dev, &a) == UG_ERR_INVALID_ARGUMENT,
              "Adam without its state must be refused");
}

/* ---- memory (memory.cpp) ---- */

void test_memory(void)
{
    const int64_t n = 1000;
    double *x = emu_random_values(n, -1, 1);
    ug_kview a = emu_upload(UG_F32, x, n), b = emu_upload(UG_F32, NULL, n);
    /* A device-to-device copy at byte offsets, then a read back. */
    if (EMU_OK(emu_backend->copy(emu_dev, b.mem, (size_t)(b.offset + 10) * 4, a.mem,
                                 (size_t)(a.offset + 20) * 4, 500 * 4)) &&
        EMU_OK(emu_backend->synchronize(emu_dev))) {
        const double *got = emu_download(b, n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += i >= 10 && i < 510 ? got[i] != (double)(float)x[i + 10] : !isnan(got[i]);
        EMU_CHECK(bad == 0, "%d elements wrong after the copy", bad);
        emu_guards_intact(b, n);
    }
    EMU_OK(emu_backend->copy(emu_dev, b.mem, 0, a.mem, 0, 0));
    EMU_OK(emu_backend->write(emu_dev, b.mem, 0, x, 0, true));

    /* Beyond the device: UG_ERR_OUT_OF_MEMORY with the runtime's words. */
    ug_mem big = NULL;
    const ug_status st = emu_backend->alloc(emu_dev, (size_t)64 << 30, &big);
    EMU_CHECK(st == UG_ERR_OUT_OF_MEMORY && strstr(emu_last_error(), "cudaMalloc") &&
                  strstr(emu_last_error(), "cudaErrorMemoryAllocation"),
              "64 GiB: status %d, \"%s\"", (int)st, emu_last_error());
    if (st == UG_OK)
        emu_backend->release(emu_dev, big);

    void *pinned = emu_backend->host_alloc(emu_dev, 4096);
    EMU_CHECK(pinned != NULL, "host_alloc failed");
    if (pinned) {
        memset(pinned, 1, 4096);
        emu_backend->host_free(emu_dev, pinned);
    }
}
