/* Checks of the emulated CUDA device itself (test emulator@cuda:0-emulated):
 * what the rest of the suite, run on the emulated cuda:0, cannot see from
 * the public API. The emulated module (libunigrad-cuda.so of this folder) is
 * opened here before the library opens it, to configure the machine it
 * emulates and to read its bookkeeping (emu_control.h); the library's own
 * dlopen then finds the same, already loaded module.
 *
 * - f16_conversion: the emulator's __float2half_rn / __half2float, which
 *   every f16 result of the module's kernels goes through, against the
 *   suite's converter: every half, the midpoints between neighbours, and
 *   floats of every magnitude.
 * - module_entry: the module refuses another interface version and a host
 *   without an error callback, with a reason.
 * - device_info: cuda:0 is the emulated GPU as configured here (sm_86:
 *   native f16 and bf16).
 * - vendor_gemm: the module loaded the fake cuBLAS of this folder (not a
 *   real one, which would get host pointers), every matmul with a non-empty
 *   result makes exactly one cuBLAS call (so the suite's matmul checks test
 *   the row- to column-major mapping), in f16 and bf16 the mixed-precision
 *   one (cublasGemmEx or its strided batched form) on a handle whose math
 *   mode keeps partial sums in f32, and UG_GEMM=own makes none.
 * - grid_beyond_block_cap: a cast over more elements than 65535 blocks of
 *   256 threads runs in one launch of exactly 65535 blocks (grid-stride
 *   loop), bit for bit.
 * - scheduler_orders: the block-level kernels (reductions, softmax) run
 *   their barrier phases in both thread orders.
 * - runtime_out_of_memory: with the pool's limit above the emulated
 *   memory, the runtime's refusal reaches the caller as out of memory and
 *   the pool recovers once memory is freed (POCL never refuses, so no other
 *   device tests this path).
 * - after every test, with the devices closed: the module returned all
 *   device memory, pinned memory, streams and its cuBLAS handle, and no
 *   launch failed (the emulator also checks the first three at exit of every
 *   process that loaded it).
 *
 * With UG_EMU_TEST_DEVICES=0 (test emulator_no_device) the emulator reports
 * no GPU: cuda has zero devices with the runtime's reason, and opening
 * cuda:0 fails cleanly. */
#define _GNU_SOURCE /* RTLD_NOLOAD, setenv */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "emu_control.h"
#include "harness.h"
#include "reference.h"

/* The emulated machine of this process: small memory keeps the
 * out-of-memory check cheap; 8 SMs as the module's default. */
#define EMU_SMS 8
#define EMU_MEMORY ((size_t)256 << 20)

typedef const ug_backend *(*entry_fn)(int, const ug_backend_host *, const char **);

static struct {
    void (*configure)(int, int, size_t);
    void (*get_stats)(ug_emu_stats *);
    uint16_t (*f32_to_f16)(float);
    float (*f16_to_f32)(uint16_t);
    entry_fn entry;
} emu;

/* A function pointer from dlsym, as POSIX allows. */
#define EMU_SYM(lib, dst, name)                                              \
    do {                                                                     \
        void *sym_ = dlsym(lib, name);                                       \
        memcpy(&(dst), &sym_, sizeof sym_);                                  \
    } while (0)

/* Opens the module the library will find first on UG_BACKEND_PATH. */
static bool open_emulator(void)
{
    const char *dirs = getenv("UG_BACKEND_PATH");
    char path[4096];
    if (!dirs || !*dirs) {
        printf("[FAIL] UG_BACKEND_PATH must name the emulated module's folder\n");
        return false;
    }
    snprintf(path, sizeof path, "%.*s/libunigrad-cuda.so", (int)strcspn(dirs, ":"), dirs);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept: the library shares it */
    if (!lib) {
        printf("[FAIL] %s did not load: %s\n", path, dlerror());
        return false;
    }
    EMU_SYM(lib, emu.configure, "ug_emu_configure");
    EMU_SYM(lib, emu.get_stats, "ug_emu_get_stats");
    EMU_SYM(lib, emu.f32_to_f16, "ug_emu_f32_to_f16");
    EMU_SYM(lib, emu.f16_to_f32, "ug_emu_f16_to_f32");
    EMU_SYM(lib, emu.entry, "ug_backend_module_entry");
    if (!emu.configure || !emu.get_stats || !emu.f32_to_f16 || !emu.f16_to_f32 || !emu.entry) {
        printf("[FAIL] %s is not the emulated module (no ug_emu_* symbols)\n", path);
        return false;
    }
    return true;
}

static ug_emu_stats stats(void)
{
    ug_emu_stats s;
    emu.get_stats(&s);
    return s;
}

/* The fake cuBLAS's counters, if the module loaded the fake. */
typedef struct fake_cublas {
    int (*calls)(void);
    int (*ex_calls)(void); /* the mixed-precision ones */
    int (*live_handles)(void);
    int (*math_mode)(void); /* the last cublasSetMathMode */
    int (*workspace_handles)(void); /* live handles with a workspace set */
} fake_cublas;

static bool find_fake_cublas(fake_cublas *f)
{
    memset(f, 0, sizeof *f);
    /* The module dlopens "libcublas.so.13"; NOLOAD returns what it got. */
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        return false;
    EMU_SYM(lib, f->calls, "ug_fake_cublas_calls");
    EMU_SYM(lib, f->ex_calls, "ug_fake_cublas_ex_calls");
    EMU_SYM(lib, f->live_handles, "ug_fake_cublas_live_handles");
    EMU_SYM(lib, f->math_mode, "ug_fake_cublas_math_mode");
    EMU_SYM(lib, f->workspace_handles, "ug_fake_cublas_workspace_handles");
    dlclose(lib); /* drops only the reference NOLOAD added */
    return f->calls && f->ex_calls && f->live_handles && f->math_mode && f->workspace_handles;
}

/* ---- host tests ---- */

static bool same_f16(float f) { return emu.f32_to_f16(f) == ref_f16_bits((double)f); }

static void test_f16_conversion(ug_device *dev)
{
    (void)dev;
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const double want = ref_f16_value((uint16_t)h);
        const float f = emu.f16_to_f32((uint16_t)h);
        if (isnan(want) ? !isnan(f) : ((double)f != want || !signbit(f) != !signbit(want))) {
            if (bad++ < 3)
                th_fail(TH_LOC, "f16 0x%04x decodes to %g, expected %g", h, (double)f, want);
            continue;
        }
        if (isnan(want))
            continue;
        /* Every half survives the round trip; the midpoint to the next half
         * (ties to even) and the floats either side round as the reference. */
        if (emu.f32_to_f16(f) != h && bad++ < 3)
            th_fail(TH_LOC, "f16 0x%04x does not survive f32 and back", h);
        if ((h & 0x7fffu) < 0x7c00u) {
            const double next = ref_f16_value((uint16_t)(h + 1));
            const float mid = isinf(next) ? copysignf(65520.0f, f) : (float)((want + next) / 2);
            const float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 2 * mid)};
            for (int p = 0; p < 3; p++)
                if (!same_f16(probes[p]) && bad++ < 3)
                    th_fail(TH_LOC, "%.9g converts to 0x%04x, expected 0x%04x", (double)probes[p],
                            emu.f32_to_f16(probes[p]), ref_f16_bits(probes[p]));
        }
    }
    /* Floats of every magnitude, f32 subnormals included, and special values. */
    for (int i = 0; i < 200000; i++) {
        const float f = (float)(ldexp(th_uniform(1.0, 2.0), (int)th_uniform(-150, 20)) *
                                (i % 2 ? -1.0 : 1.0));
        if (!same_f16(f) && bad++ < 3)
            th_fail(TH_LOC, "%.9g converts to 0x%04x, expected 0x%04x", (double)f,
                    emu.f32_to_f16(f), ref_f16_bits(f));
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, 65504.0f, 65519.99f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        CHECK_MSG(same_f16(special[i]), "%g converts to 0x%04x", (double)special[i],
                  emu.f32_to_f16(special[i]));
    CHECK_MSG(isnan(emu.f16_to_f32(emu.f32_to_f16(NAN))), "NaN must stay NaN");
}

static ug_status no_error(ug_status status, const char *fmt, ...)
{
    (void)fmt;
    return status;
}

static void test_module_entry(ug_device *dev)
{
    (void)dev;
    static const ug_backend_host host = {.set_error = no_error}, no_host = {.set_error = NULL};
    const char *reason = NULL;
    CHECK_MSG(!emu.entry(UG_BACKEND_INTERFACE_VERSION + 1, &host, &reason) && reason &&
                  th_contains(reason, "interface"),
              "a module asked for another interface version must refuse with a reason, said "
              "\"%s\"", reason ? reason : "(nothing)");
    reason = NULL;
    CHECK_MSG(!emu.entry(UG_BACKEND_INTERFACE_VERSION, &no_host, &reason) && reason,
              "without an error callback the module must refuse with a reason");
}

/* UG_EMU_TEST_DEVICES=0: the runtime reports cudaErrorNoDevice. */
static void test_no_device(ug_device *dev)
{
    (void)dev;
    bool found = false;
    for (int b = 0; b < ug_backend_count(); b++) {
        const char *name = NULL, *reason = NULL;
        int n = -1;
        REQUIRE_OK(ug_backend_query(b, &name, &n, &reason));
        if (strcmp(name, "cuda") != 0)
            continue;
        found = true;
        CHECK_EQ_I64(n, 0);
        CHECK_MSG(th_contains(reason, "cudaErrorNoDevice"),
                  "cuda without a GPU: the reason should name cudaErrorNoDevice, is \"%s\"",
                  reason ? reason : "(null)");
    }
    CHECK_MSG(found, "no cuda backend registered");
    ug_device *d = NULL;
    CHECK_MSG(ug_device_open("cuda:0", &d) != UG_OK && !d, "cuda:0 opened without a GPU");
    CHECK_ERROR_HAS("cuda:0");
}

/* ---- device tests (on cuda:0 only) ---- */

static void test_device_info(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    CHECK_MSG(strcmp(info.vendor, "NVIDIA") == 0 && strcmp(info.name, "Emulated GPU (sm_86)") == 0,
              "not the emulated GPU: %s, %s", info.vendor, info.name);
    CHECK_EQ_I64(info.compute_units, EMU_SMS);
    CHECK_EQ_I64(info.global_memory, EMU_MEMORY);
    CHECK_EQ_I64(info.max_allocation, EMU_MEMORY);
    CHECK(info.is_gpu && info.fp16 && info.bf16);
    CHECK_MSG(th_contains(info.driver, "CUDA runtime 13.0") && th_contains(info.driver, "gemm cuBLAS"),
              "driver \"%s\" should give the runtime version and the cuBLAS GEMM path", info.driver);
}

/* One matmul in dtype; returns the fake cuBLAS calls it made (in *ex the
 * mixed-precision ones), -1 on a failure. */
static int matmul_calls(ug_device *dev, const fake_cublas *f, ug_dtype dtype, int na,
                        const int64_t *sa, int nb, const int64_t *sb, bool ta, bool tb, int *ex)
{
    const int64_t n_a = ref_numel(na, sa), n_b = ref_numel(nb, sb);
    double *a = th_random_values(n_a, -1, 1), *b = th_random_values(n_b, -1, 1);
    th_round_to(dtype, a, n_a);
    th_round_to(dtype, b, n_b);
    ug_tensor *A = th_tensor(dev, dtype, na, sa, a), *B = th_tensor(dev, dtype, nb, sb, b);
    if (!A || !B)
        return -1;
    int no = 0;
    int64_t so[REF_MAX_DIMS];
    double *want = th_alloc(4096 * sizeof *want);
    if (!ref_matmul(na, sa, a, nb, sb, b, ta, tb, want, &no, so) || ref_numel(no, so) > 4096) {
        th_fail(TH_LOC, "test bug: shapes do not fit");
        return -1;
    }
    const int before = f->calls(), ex_before = f->ex_calls();
    ug_tensor *out = NULL;
    ug_status s = ug_matmul(A, B, ta, tb, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK) || !th_check_tensor(out, dtype, no, so))
        return -1;
    double *got = th_download(out);
    const int calls = f->calls() - before;
    *ex = f->ex_calls() - ex_before;
    /* f16 and bf16 round the result once: within the matmul tolerance. */
    if (!th_compare("matmul", got, want, ref_numel(no, so), TH_TOL_MATMUL))
        return -1;
    return calls;
}

static void test_vendor_gemm(ug_device *dev)
{
    fake_cublas f;
    if (!find_fake_cublas(&f)) {
        th_fail(TH_LOC, "the module did not load this folder's fake libcublas.so.13 (a real "
                "cuBLAS first on the search path, or none): the RUNPATH / LD_LIBRARY_PATH of "
                "the emulated module must find the fake");
        return;
    }
    CHECK_EQ_I64(f.live_handles(), 1); /* the device's handle */
    /* CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: a half C is rounded
     * once, from f32 sums. */
    CHECK_EQ_I64(f.math_mode(), 16);
    /* A workspace of its own, so that GEMMs in a captured step allocate nothing. */
    CHECK_EQ_I64(f.workspace_handles(), 1);
    static const struct {
        int na, nb;
        int64_t sa[3], sb[3];
        bool ta, tb;
    } cases[] = {
        {2, 2, {7, 5}, {5, 3}, false, false},   {2, 2, {5, 7}, {5, 3}, true, false},
        {2, 2, {7, 5}, {3, 5}, false, true},    {2, 2, {5, 7}, {3, 5}, true, true},
        {3, 2, {2, 4, 6}, {6, 5}, false, false}, /* batched, b shared */
        {2, 3, {4, 6}, {3, 6, 5}, false, false}, /* batched, a shared */
        {3, 3, {2, 6, 4}, {2, 5, 6}, true, true},
        {2, 2, {1, 65}, {65, 1}, false, false},
    };
    static const ug_dtype dtypes[] = {UG_F32, UG_F16, UG_BF16};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            for (int own = 0; own < 2; own++) {
                th_context("case %zu, %s%s", c, ug_dtype_name(dtypes[d]),
                           own ? ", UG_GEMM=own" : "");
                if (own)
                    setenv("UG_GEMM", "own", 1); /* the module reads it on every call */
                int ex = 0;
                const int calls = matmul_calls(dev, &f, dtypes[d], cases[c].na, cases[c].sa,
                                               cases[c].nb, cases[c].sb, cases[c].ta,
                                               cases[c].tb, &ex);
                unsetenv("UG_GEMM");
                if (calls >= 0)
                    CHECK_MSG(calls == (own ? 0 : 1) && ex == (own || d == 0 ? 0 : 1),
                              "%d cuBLAS calls (%d mixed-precision) for one matmul", calls, ex);
            }
        }
    }
    /* An empty product calls nothing. */
    th_context("empty");
    int ex = 0;
    CHECK_EQ_I64(matmul_calls(dev, &f, UG_F32, 2, (int64_t[]){0, 4}, 2, (int64_t[]){4, 3}, false,
                              false, &ex),
                 0);
}

static void test_grid_beyond_block_cap(ug_device *dev)
{
    /* 65535 blocks of 256 threads cover 16776960 elements. */
    const int64_t n = 65535LL * 256 + 777;
    uint8_t *x = th_alloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint8_t)(i % 251);
    ug_tensor *t = NULL, *y = NULL;
    REQUIRE_OK(ug_tensor_from_host(dev, UG_U8, 1, &n, x, &t));
    th_track(t);
    REQUIRE_OK(ug_device_synchronize(dev));
    const ug_emu_stats before = stats();
    REQUIRE_OK(ug_cast(t, UG_F16, &y));
    th_track(y);
    REQUIRE_OK(ug_device_synchronize(dev));
    const ug_emu_stats after = stats();
    CHECK_EQ_I64(after.launches - before.launches, 1);
    CHECK_EQ_I64(after.blocks - before.blocks, 65535);
    const uint16_t *got = th_download_raw(y);
    REQUIRE(got);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != ref_f16_bits((double)(i % 251)) && bad++ == 0)
            first = i;
    CHECK_MSG(bad == 0, "%lld of %lld elements wrong, the first at %lld", (long long)bad,
              (long long)n, (long long)first);
}

/* Work that a launch's last block to finish completes costs no launch of
 * its own: split K's sums (UG_GEMM=own-split) and the cross-entropy's
 * mean are one launch each, and give the host's results. */
static void test_last_block_folds(ug_device *dev)
{
    /* 64x120 over K = 700 on 8 SMs: two 64x64 tiles, each in 8 slices of K. */
    const int64_t m = 64, k = 700, n = 120, sa[] = {m, k}, sb[] = {k, n};
    double *a = th_random_values(m * k, -1, 1), *b = th_random_values(k * n, -1, 1);
    ug_tensor *A = th_tensor(dev, UG_F32, 2, sa, a), *B = th_tensor(dev, UG_F32, 2, sb, b), *C = NULL;
    REQUIRE(A && B);
    REQUIRE_OK(ug_device_synchronize(dev));
    setenv("UG_GEMM", "own-split", 1); /* the module reads it on every call */
    ug_emu_stats before = stats();
    const ug_status st = ug_matmul(A, B, false, false, &C);
    unsetenv("UG_GEMM");
    th_track(C);
    REQUIRE_OK(st);
    REQUIRE_OK(ug_device_synchronize(dev));
    CHECK_EQ_I64(stats().launches - before.launches, 1);
    double *want = th_alloc((size_t)(m * n) * sizeof *want);
    int no;
    int64_t so[REF_MAX_DIMS];
    REQUIRE(ref_matmul(2, sa, a, 2, sb, b, false, false, want, &no, so));
    th_compare("split K", th_download(C), want, m * n, TH_TOL_MATMUL);

    /* The cross-entropy of 64 rows of 10 logits: its mean, in double. */
    enum { ROWS = 64, COLS = 10 };
    double *x = th_random_values(ROWS * COLS, -3, 3), mean = 0.0;
    int32_t labels[ROWS];
    for (int r = 0; r < ROWS; r++) {
        labels[r] = (r * 7) % COLS;
        double lse = 0.0;
        for (int c = 0; c < COLS; c++)
            lse += exp(x[r * COLS + c]);
        mean += (log(lse) - x[r * COLS + labels[r]]) / ROWS;
    }
    const int64_t xs[] = {ROWS, COLS}, ys[] = {ROWS};
    ug_tensor *X = th_tensor(dev, UG_F32, 2, xs, x), *Y = NULL;
    REQUIRE(X);
    REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 1, ys, labels, &Y));
    th_track(Y);
    ug_model *model = NULL;
    REQUIRE_OK(ug_model_create(dev, 1, &model));
    ug_graph *g = NULL;
    ug_value *xv = NULL, *yv = NULL, *loss = NULL;
    float got = NAN;
    if (CHECK_STATUS(ug_graph_create(model, &g), UG_OK) &&
        CHECK_STATUS(ug_graph_input(g, "logits", UG_F32, 2, xs, &xv), UG_OK) &&
        CHECK_STATUS(ug_graph_input(g, "labels", UG_I32, 1, ys, &yv), UG_OK) &&
        CHECK_STATUS(ug_g_cross_entropy(g, xv, yv, 0.0f, &loss), UG_OK) &&
        CHECK_STATUS(ug_graph_keep(g, loss), UG_OK) && CHECK_STATUS(ug_graph_compile(g), UG_OK) &&
        CHECK_STATUS(ug_graph_bind(g, xv, X), UG_OK) && CHECK_STATUS(ug_graph_bind(g, yv, Y), UG_OK) &&
        CHECK_STATUS(ug_graph_run(g), UG_OK) &&
        CHECK_STATUS(ug_device_synchronize(dev), UG_OK)) {
        before = stats();
        if (CHECK_STATUS(ug_graph_run(g), UG_OK) && CHECK_STATUS(ug_device_synchronize(dev), UG_OK))
            CHECK_EQ_I64(stats().launches - before.launches, 1);
        if (CHECK_STATUS(ug_graph_read(g, loss, &got, sizeof got), UG_OK))
            CHECK_MSG(fabs(got - mean) <= 1e-5 * (1.0 + fabs(mean)), "cross-entropy %.8g, want %.8g",
                      (double)got, mean);
    }
    ug_graph_free(g);
    ug_model_free(model);
}

static void test_scheduler_orders(ug_device *dev)
{
    const ug_emu_stats before = stats();
    const int64_t shape[2] = {6, 1000};
    double *x = th_random_values(6000, -3, 3);
    th_round_to(UG_F32, x, 6000);
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, x);
    REQUIRE(t);
    ug_tensor *sum = NULL, *sm = NULL;
    REQUIRE_OK(ug_sum(t, 1, &sum));
    th_track(sum);
    REQUIRE_OK(ug_softmax(t, &sm));
    th_track(sm);
    double want_sum[6], *want_sm = th_alloc(6000 * sizeof *want_sm);
    ref_reduce(REF_RSUM, 2, shape, x, 1, false, want_sum);
    ref_softmax(x, want_sm, 6, 1000, false);
    th_compare("sum", th_download(sum), want_sum, 6, TH_TOL_F32);
    th_compare("softmax", th_download(sm), want_sm, 6000, TH_TOL_F32);
    const ug_emu_stats after = stats();
    const uint64_t up = after.phases_increasing - before.phases_increasing;
    const uint64_t down = after.phases_decreasing - before.phases_decreasing;
    CHECK_MSG(up > 0 && down > 0, "barrier phases ran %llu times in increasing and %llu in "
              "decreasing thread order: both orders must run", (unsigned long long)up,
              (unsigned long long)down);
}

static void test_runtime_out_of_memory(ug_device *dev)
{
    /* Two blocks of 5/8 of the emulated memory: the second does not fit. */
    const int64_t n = (int64_t)(EMU_MEMORY / 4 * 5 / 8);
    REQUIRE_OK(ug_memory_set_limit(dev, (uint64_t)EMU_MEMORY * 4));
    ug_tensor *a = NULL, *b = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, &n, &a));
    th_track(a);
    const ug_memory_stats before = th_stats(dev);
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &b), UG_ERR_OUT_OF_MEMORY))
        CHECK_ERROR_HAS("cuda:0", "the runtime refused the allocation");
    else
        th_track(b);
    CHECK_EQ_I64(th_stats(dev).out_of_memory - before.out_of_memory, 1);
    /* Freed, the memory is there again. */
    th_release(a);
    REQUIRE_OK(ug_memory_release_cache(dev));
    b = NULL;
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &b), UG_OK))
        th_track(b);
    REQUIRE_OK(ug_memory_set_limit(dev, 0)); /* back to the device's size */
}

/* With every device closed: nothing of the module is left. */
static int check_all_returned(void)
{
    const ug_emu_stats s = stats();
    fake_cublas f;
    const bool have_fake = find_fake_cublas(&f);
    printf("emulated %llu kernel launches, %llu blocks, %llu GPU threads; barrier phases in "
           "increasing / decreasing order: %llu / %llu\n",
           (unsigned long long)s.launches, (unsigned long long)s.blocks,
           (unsigned long long)s.gpu_threads, (unsigned long long)s.phases_increasing,
           (unsigned long long)s.phases_decreasing);
    int failed = 0;
    if (s.live_allocations || s.live_bytes || s.live_host_allocations || s.live_streams) {
        printf("[FAIL] after close: %lld device allocations (%zu bytes), %lld pinned "
               "allocations, %lld streams left\n",
               (long long)s.live_allocations, s.live_bytes, (long long)s.live_host_allocations,
               (long long)s.live_streams);
        failed++;
    }
    if (s.failed_launches) {
        printf("[FAIL] %llu launches failed\n", (unsigned long long)s.failed_launches);
        failed++;
    }
    if (have_fake && f.live_handles() != 0) {
        printf("[FAIL] %d cuBLAS handles not destroyed at close\n", f.live_handles());
        failed++;
    }
    if (!failed)
        printf("[ OK ] close returned every allocation, stream and cuBLAS handle\n");
    return failed;
}

int main(int argc, char **argv)
{
    if (!open_emulator())
        return 1;
    const char *devices = getenv("UG_EMU_TEST_DEVICES");
    if (devices && strcmp(devices, "0") == 0) {
        emu.configure(0, EMU_SMS, EMU_MEMORY);
        static const th_test none[] = {TH_HOST_TEST(no_device)};
        return th_main(argc, argv, none, 1);
    }
    emu.configure(1, EMU_SMS, EMU_MEMORY);
    static const th_test tests[] = {
        TH_HOST_TEST(f16_conversion),
        TH_HOST_TEST(module_entry),
        TH_DEVICE_TEST(device_info),
        TH_DEVICE_TEST(vendor_gemm),
        TH_DEVICE_TEST(grid_beyond_block_cap),
        TH_DEVICE_TEST(last_block_folds),
        TH_DEVICE_TEST(scheduler_orders),
        TH_DEVICE_TEST(runtime_out_of_memory),
    };
    int status = th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
    if (check_all_returned() && status == 0)
        status = 1;
    return status;
}
