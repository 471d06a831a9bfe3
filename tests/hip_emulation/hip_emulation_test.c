/* hip_kernels_emulated: the HIP/CUDA module's kernels, run on the CPU.
 *
 * The module's own sources (kernels/hip/ *.hip, backends/hip/ *.cpp) are
 * compiled with g++ against an emulated CUDA runtime (fake_cuda/,
 * emu_runtime.cpp: every GPU thread a fiber, __syncthreads a barrier) and
 * driven through the module's backend table, as the core drives it.
 *
 * What a pass proves: the kernels' logic and indexing (strides and
 * broadcasting, offsets, grid-stride loops, tiles and edges of the GEMM, the
 * two-pass split reduction, block trees in shared memory, barriers reached
 * by every thread, launch configurations within CUDA's limits) give the
 * results the backend interface (backends/backend.h) defines: the same as
 * the suite's double-precision references (tests/reference.c) within the
 * suite's tolerances where one exists, and the module's own definitions
 * otherwise (cross-entropy, LayerNorm, optimizers, f16, NaN propagation).
 * Uniform random numbers must equal the reference Philox bit for bit. The
 * vendor-BLAS path runs against a fake column-major cuBLAS (fake_cublas.c),
 * which checks the row- to column-major mapping.
 *
 * What it cannot prove: anything about real hardware or its compilers
 * (hipcc/nvcc code generation, device math functions, which here are
 * glibc's), races between blocks (they run one after another) or between
 * threads of a block beyond the two execution orders the scheduler tries,
 * anything that depends on the wavefront width (32 or 64; the kernels use no
 * warp intrinsics), memory limits, or performance. Grids past the 65535-block
 * cap are run for the element-wise kernels only: the row, reduction and GEMM
 * loops past it would take minutes here. It is the "cuda" flavour of the
 * module (UG_CUDA); the HIP flavour differs only in host-side discovery and
 * in random.hip's spelling of unfused f32 arithmetic. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_control.h"
#include "emu_test.h"

/* The module's entry (backends/hip/module.cpp), linked in directly. */
const ug_backend *ug_backend_module_entry(int host_version, const ug_backend_host *host,
                                          const char **reason);

#define EMU_SMS 8
#define EMU_MEMORY ((size_t)4 << 30)

const ug_backend *emu_backend;
ug_bdev *emu_dev;
bool emu_fake_cublas_loaded;
static int (*g_fake_calls)(void), (*g_fake_handles)(void);

static struct {
    const char *test;
    char context[256];
    int failures;
    ug_mem *mems;
    size_t n_mems, cap_mems;
    void **blocks;
    size_t n_blocks, cap_blocks;
    uint64_t rng;
    char last_error[1024];
} g;

/* ---- recording ---- */

static ug_status host_set_error(ug_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.last_error, sizeof g.last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *emu_last_error(void) { return g.last_error; }

static void fatal(const char *what)
{
    printf("fatal: %s\n", what);
    exit(2);
}

void emu_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g.failures++;
    if (g.failures > 20)
        return; /* one broken kernel should not bury the rest of the output */
    printf("    %s: %s:%d: %s%s%s%s\n", g.test ? g.test : "setup", file, line, msg,
           g.context[0] ? " [" : "", g.context, g.context[0] ? "]" : "");
}

void emu_context(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.context, sizeof g.context, fmt, ap);
    va_end(ap);
}

int emu_failures(void) { return g.failures; }

bool emu_ok(const char *file, int line, const char *text, ug_status st)
{
    if (st == UG_OK)
        return true;
    emu_fail(file, line, "%s returned status %d: %s", text, (int)st, g.last_error);
    return false;
}

/* ---- host memory ---- */

void *emu_alloc(size_t bytes)
{
    if (g.n_blocks == g.cap_blocks) {
        g.cap_blocks = g.cap_blocks ? 2 * g.cap_blocks : 64;
        g.blocks = realloc(g.blocks, g.cap_blocks * sizeof *g.blocks);
        if (!g.blocks)
            fatal("out of host memory");
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        fatal("out of host memory");
    g.blocks[g.n_blocks++] = p;
    return p;
}

void emu_seed(uint64_t seed) { g.rng = seed; }

/* splitmix64: deterministic, so a failure reproduces. */
double emu_uniform(double low, double high)
{
    uint64_t z = (g.rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return low + (high - low) * ldexp((double)(z >> 11), -53);
}

double *emu_random_values(int64_t n, double low, double high)
{
    double *v = emu_alloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = emu_uniform(low, high);
    return v;
}

void emu_round_to(ug_dtype dtype, double *values, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        values[i] = dtype == UG_F16 ? ref_f16_value(ref_f16_bits(values[i]))
                                    : ref_round_f32(values[i]);
}

/* ---- device buffers ---- */

size_t emu_dtype_size(ug_dtype dtype) { return dtype == UG_F16 ? 2 : dtype == UG_U8 ? 1 : 4; }

static void put(ug_dtype dtype, void *raw, int64_t i, double v)
{
    switch (dtype) {
    case UG_F16: ((uint16_t *)raw)[i] = ref_f16_bits(v); break;
    case UG_I32: ((int32_t *)raw)[i] = (int32_t)v; break;
    case UG_U8: ((uint8_t *)raw)[i] = (uint8_t)v; break;
    default: ((float *)raw)[i] = (float)v; break;
    }
}

static double get(ug_dtype dtype, const void *raw, int64_t i)
{
    switch (dtype) {
    case UG_F16: return ref_f16_value(((const uint16_t *)raw)[i]);
    case UG_I32: return ((const int32_t *)raw)[i];
    case UG_U8: return ((const uint8_t *)raw)[i];
    default: return ((const float *)raw)[i];
    }
}

/* The guard value. Floats: a signalling NaN with a payload, so a kernel
 * reading it computes NaN, and a result stored over it (arithmetic quiets
 * NaNs) changes its bits; odd bytes for the integer types. */
static void put_sentinel(ug_dtype dtype, void *raw, int64_t i)
{
    static const uint32_t f32 = 0x7fa5a5a5u;
    static const uint16_t f16 = 0x7d5au;
    switch (dtype) {
    case UG_F16: ((uint16_t *)raw)[i] = f16; break;
    case UG_U8: ((uint8_t *)raw)[i] = 0xa5; break;
    case UG_I32: ((int32_t *)raw)[i] = 0x5a5a5a5a; break;
    default: memcpy((char *)raw + 4 * i, &f32, 4); break;
    }
}

static ug_kview upload(ug_dtype dtype, const double *values, const void *raw, int64_t n)
{
    const size_t es = emu_dtype_size(dtype), total = (size_t)(EMU_LEAD + n + EMU_TAIL);
    unsigned char *host = malloc(total * es); /* freed at once: buffers reach 2^24 elements */
    if (!host)
        fatal("out of host memory");
    for (size_t i = 0; i < total; i++)
        put_sentinel(dtype, host, (int64_t)i);
    if (raw)
        memcpy(host + EMU_LEAD * es, raw, (size_t)n * es);
    for (int64_t i = 0; values && i < n; i++)
        put(dtype, host, EMU_LEAD + i, values[i]);
    ug_mem m = NULL;
    if (emu_backend->alloc(emu_dev, total * es, &m) != UG_OK ||
        emu_backend->write(emu_dev, m, 0, host, total * es, true) != UG_OK)
        fatal(g.last_error);
    free(host);
    if (g.n_mems == g.cap_mems) {
        g.cap_mems = g.cap_mems ? 2 * g.cap_mems : 64;
        g.mems = realloc(g.mems, g.cap_mems * sizeof *g.mems);
        if (!g.mems)
            fatal("out of host memory");
    }
    g.mems[g.n_mems++] = m;
    ug_kview v = {m, EMU_LEAD, dtype};
    return v;
}

ug_kview emu_upload(ug_dtype dtype, const double *values, int64_t n)
{
    return upload(dtype, values, NULL, n);
}

ug_kview emu_upload_raw(ug_dtype dtype, const void *raw, int64_t n)
{
    return upload(dtype, NULL, raw, n);
}

void *emu_download_raw(ug_kview v, int64_t n)
{
    const size_t es = emu_dtype_size(v.dtype);
    void *raw = emu_alloc((size_t)n * es);
    if (emu_backend->read(emu_dev, raw, v.mem, (size_t)v.offset * es, (size_t)n * es, true) !=
        UG_OK)
        emu_fail(__FILE__, __LINE__, "read failed: %s", g.last_error);
    return raw;
}

double *emu_download(ug_kview v, int64_t n)
{
    const void *raw = emu_download_raw(v, n);
    double *out = emu_alloc((size_t)n * sizeof *out);
    for (int64_t i = 0; i < n; i++)
        out[i] = get(v.dtype, raw, i);
    return out;
}

bool emu_guards_intact(ug_kview v, int64_t n)
{
    const size_t es = emu_dtype_size(v.dtype);
    unsigned char raw[4], want[4];
    put_sentinel(v.dtype, want, 0);
    /* The guards only: EMU_LEAD elements before the view, EMU_TAIL after. */
    for (int64_t i = -EMU_LEAD; i < n + EMU_TAIL; i++) {
        if (i == 0)
            i = n;
        const size_t at = (size_t)(v.offset + i) * es;
        if (emu_backend->read(emu_dev, raw, v.mem, at, es, true) != UG_OK ||
            memcmp(raw, want, es) != 0) {
            emu_fail(__FILE__, __LINE__, "guard element %lld of a view of %lld was overwritten",
                     (long long)i, (long long)n);
            return false;
        }
    }
    return true;
}

/* ---- comparisons (the definitions of tests/harness.c's th_compare) ---- */

bool emu_compare(const char *file, int line, const char *what, const double *got,
                 const double *ref, int64_t n, double tol)
{
    int special = 0;
    double num = 0.0, den = 0.0, worst_d = -1.0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i]) || isinf(got[i]) != isinf(ref[i]) ||
            (isinf(ref[i]) && got[i] != ref[i])) {
            if (special++ < 3)
                emu_fail(file, line, "%s: element %lld is %g, expected %g (NaN/inf differ)",
                         what, (long long)i, got[i], ref[i]);
            continue;
        }
        if (!isfinite(ref[i]))
            continue;
        const double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > worst_d) {
            worst_d = fabs(d);
            worst = i;
        }
    }
    const double nmse = den > 0.0 ? num / den : num;
    if (!(nmse <= tol))
        emu_fail(file, line, "%s: NMSE %.3e > %.1e over %lld elements; worst element %lld is "
                 "%.9g, expected %.9g", what, nmse, tol, (long long)n, (long long)worst,
                 got[worst], ref[worst]);
    return special == 0 && nmse <= tol;
}

bool emu_compare_bits(const char *file, int line, const char *what, const void *got,
                      const void *ref, int64_t n, size_t size)
{
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)got + (size_t)i * size, (const char *)ref + (size_t)i * size,
                   size) != 0 && bad++ == 0)
            first = i;
    if (bad)
        emu_fail(file, line, "%s: %lld of %lld elements differ in their bits, first %lld", what,
                 (long long)bad, (long long)n, (long long)first);
    return bad == 0;
}

/* ---- the module's setup and teardown, as tests ---- */

/* Is the libcublas.so.13 that the module will dlopen our fake? The test
 * sets RUNPATH and LD_LIBRARY_PATH to it, but a real cuBLAS earlier in the
 * search would get device pointers that are host memory: keep it out. */
static void find_fake_cublas(void)
{
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    void *calls = lib ? dlsym(lib, "ug_fake_cublas_calls") : NULL;
    void *handles = lib ? dlsym(lib, "ug_fake_cublas_live_handles") : NULL;
    if (calls && handles) {
        /* Kept open: the module's dlopen then finds this same library. */
        memcpy(&g_fake_calls, &calls, sizeof calls);
        memcpy(&g_fake_handles, &handles, sizeof handles);
        unsetenv("UG_GEMM");
        return;
    }
    printf("note: libcublas.so.13 is %s: the vendor-BLAS path is not tested\n",
           lib ? "not the test's fake (a real cuBLAS came first)" : "not found");
    if (lib)
        dlclose(lib);
    setenv("UG_GEMM", "own", 1); /* the module then never loads a cuBLAS */
}

int emu_fake_cublas_calls(void) { return g_fake_calls ? g_fake_calls() : 0; }

static void test_discovery(void)
{
    static const ug_backend_host host = {host_set_error}, no_host = {NULL};
    const char *reason = NULL;
    EMU_CHECK(!ug_backend_module_entry(UG_BACKEND_INTERFACE_VERSION + 1, &host, &reason) &&
                  reason && strstr(reason, "interface"),
              "a module for another interface version must refuse, with a reason");
    reason = NULL;
    EMU_CHECK(!ug_backend_module_entry(UG_BACKEND_INTERFACE_VERSION, &no_host, &reason) && reason,
              "no error callback: the module must refuse");
    emu_backend = ug_backend_module_entry(UG_BACKEND_INTERFACE_VERSION, &host, &reason);
    if (!emu_backend) {
        emu_fail(__FILE__, __LINE__, "module entry refused: %s", reason ? reason : "?");
        return;
    }
    EMU_CHECK(strcmp(emu_backend->name, "cuda") == 0, "table name %s", emu_backend->name);

    /* No GPU: zero devices and the reason, never an abort. */
    char why[400] = "";
    ug_emu_configure(0, EMU_SMS, EMU_MEMORY);
    EMU_CHECK(emu_backend->device_count(why, sizeof why) == 0 && strstr(why, "cudaErrorNoDevice"),
              "without devices: count must be 0 with the runtime's error, got \"%s\"", why);
    emu_backend->shutdown();

    ug_emu_configure(1, EMU_SMS, EMU_MEMORY);
    const int n = emu_backend->device_count(why, sizeof why);
    EMU_CHECK(n == 1, "one emulated device expected, got %d (%s)", n, why);
    ug_device_info info;
    if (n != 1 || !EMU_OK(emu_backend->device_info(0, &info)))
        return;
    EMU_CHECK(strcmp(info.vendor, "NVIDIA") == 0 &&
                  strcmp(info.name, "Emulated GPU (sm_86)") == 0 &&
                  info.compute_units == EMU_SMS && info.global_memory == EMU_MEMORY && info.is_gpu,
              "device info: %s / %s / %u units", info.vendor, info.name, info.compute_units);
    EMU_CHECK(emu_backend->device_info(1, &info) == UG_ERR_INVALID_ARGUMENT, "device 1 exists?");
    if (!EMU_OK(emu_backend->device_open(0, &emu_dev)))
        return;
    EMU_OK(emu_backend->device_info(0, &info));
    const char *want = g_fake_calls ? "gemm cuBLAS" : "gemm own (UG_GEMM=own)";
    EMU_CHECK(strstr(info.driver, want) != NULL, "driver \"%s\" should name %s", info.driver, want);
    emu_fake_cublas_loaded = g_fake_calls && g_fake_handles && g_fake_handles() == 1;
    EMU_CHECK(!g_fake_calls || emu_fake_cublas_loaded, "the module did not open a cuBLAS handle");
}

/* Closing the device returns everything: device memory (the reduction
 * scratch included), the stream, the cuBLAS handle; no launch failed. */
static void test_close(void)
{
    emu_backend->device_close(emu_dev);
    emu_dev = NULL;
    emu_backend->shutdown();
    ug_emu_stats s;
    ug_emu_get_stats(&s);
    printf("emulated %llu kernel launches, %llu blocks, %llu GPU threads\n",
           (unsigned long long)s.launches, (unsigned long long)s.blocks,
           (unsigned long long)s.gpu_threads);
    EMU_CHECK(s.live_allocations == 0 && s.live_bytes == 0,
              "%lld device allocations (%zu bytes) left after close", (long long)s.live_allocations,
              s.live_bytes);
    EMU_CHECK(s.live_host_allocations == 0, "%lld page-locked host allocations left",
              (long long)s.live_host_allocations);
    EMU_CHECK(s.live_streams == 0, "%lld streams left after close", (long long)s.live_streams);
    EMU_CHECK(s.failed_launches == 0, "%llu launches failed (see above)",
              (unsigned long long)s.failed_launches);
    EMU_CHECK(!g_fake_handles || g_fake_handles() == 0, "cuBLAS handle not destroyed");
}

/* ---- the run ---- */

typedef struct emu_test {
    const char *name;
    void (*fn)(void);
} emu_test;

static const emu_test g_tests[] = {
    {"f16_conversion", test_f16_conversion},
    {"unary_ops", test_unary_ops},
    {"unary_special_values", test_unary_special_values},
    {"unary_strided", test_unary_strided},
    {"unary_casts", test_unary_casts},
    {"binary_broadcast", test_binary_broadcast},
    {"binary_grads_and_fused", test_binary_grads_and_fused},
    {"binary_nan_and_alias", test_binary_nan_and_alias},
    {"reduce", test_reduce},
    {"reduce_nan", test_reduce_nan},
    {"reduce_long", test_reduce_long},
    {"gemm_own", test_gemm_own},
    {"gemm_vendor_mapping", test_gemm_vendor_mapping},
    {"softmax", test_softmax},
    {"cross_entropy", test_cross_entropy},
    {"layernorm", test_layernorm},
    {"random_uniform", test_random_uniform},
    {"random_normal", test_random_normal},
    {"optimizers", test_optimizers},
    {"memory", test_memory},
};

static void end_test(void)
{
    for (size_t i = 0; i < g.n_mems; i++)
        emu_backend->release(emu_dev, g.mems[i]);
    for (size_t i = 0; i < g.n_blocks; i++)
        free(g.blocks[i]);
    g.n_mems = g.n_blocks = 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool run(const char *name, void (*fn)(void), int index)
{
    g.test = name;
    g.failures = 0;
    g.context[0] = '\0';
    emu_seed(0x5eed0000u + (uint64_t)index);
    const double t0 = now_seconds();
    fn();
    end_test();
    g.context[0] = '\0';
    const double secs = now_seconds() - t0;
    printf("[%s] %s", g.failures ? "FAIL" : " OK ", name);
    if (secs >= 1.0)
        printf(" (%.1f s)", secs);
    printf("\n");
    fflush(stdout);
    return g.failures == 0;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL; /* a substring of test names */
    int passed = 0, failed = 0;
    find_fake_cublas();
    if (run("discovery", test_discovery, 0))
        passed++;
    else
        failed++;
    const int count = (int)(sizeof g_tests / sizeof g_tests[0]);
    for (int t = 0; t < count; t++) {
        if (filter && !strstr(g_tests[t].name, filter))
            continue;
        if (!emu_dev) {
            printf("[FAIL] %s: no emulated device (see discovery)\n", g_tests[t].name);
            failed++;
        } else if (run(g_tests[t].name, g_tests[t].fn, t + 1)) {
            passed++;
        } else {
            failed++;
        }
    }
    if (emu_backend) {
        if (run("close_frees_everything", test_close, count + 1))
            passed++;
        else
            failed++;
    }
    free(g.mems);
    free(g.blocks);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
