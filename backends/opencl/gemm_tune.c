/* CLBlast's GEMM kernel parameters, measured on each device.
 *
 * CLBlast ships parameters per device in a database; for devices it does
 * not know (POCL's CPU devices above all) it falls back to defaults that
 * run 3-5x slower than sets measured there. At the first product big enough
 * to matter, each candidate set below is installed
 * (CLBlastOverrideParameters), checked for exact results and timed on the
 * three products of a training step (forward, the input's and the weight's
 * gradient, at batch 64, 768 -> 512); the fastest stays installed and is
 * cached (base/cache_file.h) under the device's name, its driver, the
 * platform and CLBlast's version, so later processes load it, each after
 * one check: the set within CLBlast's rules and the device's limits
 * (gemm_choice.h), then exact on the three products; a set that fails
 * either is ignored with a warning for the fixed one. A process
 * that finds another tuning the same device waits for it (a lock file
 * beside the cache) rather than measuring on a busy device.
 *
 * A few hand-picked sets rather than CLBlast's own tuner: its search
 * compiles hundreds of kernels (minutes on POCL, where a compile takes
 * seconds), while the sets below span what has won on CPUs (8- or 16-wide
 * vectors for POCL's vectoriser, tiles in local memory or not) and on GPUs,
 * and CLBlast's own choice is always one of them. UG_AUTOTUNE=0 skips all
 * this for fixed parameters: the POCL set on POCL's CPU devices, CLBlast's
 * own elsewhere. */
#include <clblast_c.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "backends/opencl/gemm_choice.h"
#include "backends/opencl/internal.h"
#include "base/cache_file.h"
#include "base/clock.h"
#include "base/fault.h"

/* The POCL set was picked by timing candidates on POCL 3.1 (2 AVX2 cores,
 * CLBlast 1.5.3): 69-73 GFLOP/s at 1024^3 where CLBlast's defaults give
 * 15-20. Its products of at least 64^3 multiply-adds go through the Xgemm
 * kernel rather than XgemmDirect, whose tuned sets took ~55 s to compile. */
static const struct {
    const char *label;
    gemm_params params;
} candidates[] = {
    {"CLBlast's database", {{0}, 0}}, /* read at run time: database_params */
    {"POCL: 64x64 tiles in local memory, 8-wide",
     {{0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, 64}},
    {"64x64 tiles in registers, 8-wide",
     {{0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 0, 0, 1, 1, 8, 8}, 64}},
    {"64x64 tiles in local memory, 16-wide",
     {{0, 1, 32, 2, 4, 4, 64, 4, 4, 64, 1, 1, 1, 1, 16, 16}, 64}},
    {"GPU: 64x64 tiles, 16x16 threads, 4-wide",
     {{0, 1, 16, 2, 16, 16, 64, 16, 16, 64, 1, 1, 0, 0, 4, 4}, 0}},
};
enum { CANDIDATES = sizeof candidates / sizeof candidates[0], DATABASE_SET = 0, POCL_SET = 1 };

#define TUNE_MAGIC "UGCLBTN1"
#define TUNE_MAX_BYTES 4096

/* The timed products, row-major m x n x k with A and B transposed or
 * not: a training step's three at batch 64 for a 768 -> 512 layer. */
static const struct {
    bool ta, tb;
    size_t m, n, k;
} shapes[] = {{false, false, 64, 512, 768}, {false, true, 64, 768, 512}, {true, false, 768, 512, 64}};
enum { SHAPES = sizeof shapes / sizeof shapes[0], OPERAND = 768 * 512, ROUNDS = 3, BATCH = 4 };

/* CLBlast's own set for each device this process has met, read before
 * anything was installed over it: CLBlast cannot go back to its database
 * once overridden, so choosing it again means installing it as a set. */
static pthread_mutex_t database_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    cl_device_id device;
    gemm_params params;
} databases[16];
static int database_count;

static void note_database(ug_bdev *dev)
{
    pthread_mutex_lock(&database_lock);
    int i = 0;
    while (i < database_count && databases[i].device != dev->device)
        i++;
    if (i == database_count && i < (int)(sizeof databases / sizeof databases[0])) {
        gemm_params p = {{0}, 0};
        if (ug_opencl_clblast_database(dev->device, "Xgemm", ug_opencl_xgemm_names, XGEMM_PARAMS, p.xgemm) &&
            ug_opencl_clblast_database(dev->device, "GemmRoutine",
                                       (const char *const[]){"XGEMM_MIN_INDIRECT_SIZE"}, 1,
                                       &p.min_indirect)) {
            databases[i].device = dev->device;
            databases[i].params = p;
            database_count++;
        }
    }
    pthread_mutex_unlock(&database_lock);
}

static bool database_params(ug_bdev *dev, gemm_params *out)
{
    pthread_mutex_lock(&database_lock);
    bool found = false;
    for (int i = 0; i < database_count && !found; ++i) {
        if (databases[i].device == dev->device) {
            *out = databases[i].params;
            found = true;
        }
    }
    pthread_mutex_unlock(&database_lock);
    return found;
}

/* Candidate i's set; false for CLBlast's when it was never read. A set
 * without its own switch to the indirect kernel takes CLBlast's. */
static bool candidate_params(ug_bdev *dev, int i, gemm_params *out)
{
    gemm_params own = {{0}, 0};
    bool known = database_params(dev, &own);
    *out = i == DATABASE_SET ? own : candidates[i].params;
    if (!out->min_indirect)
        out->min_indirect = known ? own.min_indirect : 0;
    return (i != DATABASE_SET || known) && out->min_indirect;
}

static ug_status install(ug_bdev *dev, const gemm_params *p)
{
    static const char *const routine_names[] = {"XGEMM_MIN_INDIRECT_SIZE"};
    CLBlastStatusCode code =
        CLBlastOverrideParameters(dev->device, "Xgemm", CLBlastPrecisionSingle, XGEMM_PARAMS,
                                  (const char **)ug_opencl_xgemm_names, p->xgemm);
    if (code == CLBlastSuccess)
        code = CLBlastOverrideParameters(dev->device, "GemmRoutine", CLBlastPrecisionSingle, 1,
                                         (const char **)routine_names, &p->min_indirect);
    if (code != CLBlastSuccess)
        return ug_opencl_host->set_error(UG_ERR_BACKEND, "CLBlastOverrideParameters: %d %s", (int)code,
                                         ug_opencl_clblast_error_name(code));
    return UG_OK;
}

/* The fixed choice: the POCL set on POCL's CPU devices (its database has
 * none for them), CLBlast's own elsewhere. */
static void install_builtin(ug_bdev *dev)
{
    gemm_params own;
    /* A refusal leaves what was installed before: it still computes. */
    if (dev->is_pocl && dev->is_cpu)
        install(dev, &candidates[POCL_SET].params);
    else if (database_params(dev, &own))
        install(dev, &own);
}

/* ---- measuring ---- */

typedef struct bench {
    cl_mem a, b, c;
    float *host_a, *host_b, *host_c;
    double *expected[SHAPES];
} bench;

/* Multiples of 1/8 up to 6/8: every partial sum of the products is a
 * multiple of 1/64 below 2^9, exact in f32 in any order, so a candidate
 * either gives exactly the double-precision reference or is broken. */
static float operand_value(size_t i, unsigned salt)
{
    return (float)((int)((i * 7 + salt) % 13) - 6) / 8.0f;
}

static void reference(int s, const float *a, const float *b, double *out)
{
    size_t m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
    for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < n; ++j) {
            double sum = 0;
            for (size_t p = 0; p < k; ++p) {
                double x = shapes[s].ta ? a[p * m + i] : a[i * k + p];
                double y = shapes[s].tb ? b[j * k + p] : b[p * n + j];
                sum += x * y;
            }
            out[i * n + j] = sum;
        }
    }
}

static void bench_release(bench *b)
{
    if (b->a)
        clReleaseMemObject(b->a);
    if (b->b)
        clReleaseMemObject(b->b);
    if (b->c)
        clReleaseMemObject(b->c);
    free(b->host_a);
    free(b->host_b);
    free(b->host_c);
    for (int s = 0; s < SHAPES; ++s)
        free(b->expected[s]);
}

static ug_status bench_create(ug_bdev *dev, bench *b)
{
    memset(b, 0, sizeof *b);
    cl_int err = CL_SUCCESS;
    const size_t bytes = OPERAND * sizeof(float);
    b->a = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (b->a)
        b->b = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (b->b)
        b->c = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!b->c) {
        bench_release(b);
        return ug_opencl_fail(ug_opencl_status_of(err), "clCreateBuffer for the GEMM tuning", err);
    }
    b->host_a = ug_malloc(bytes);
    b->host_b = ug_malloc(bytes);
    b->host_c = ug_malloc(bytes);
    bool ok = b->host_a && b->host_b && b->host_c;
    for (int s = 0; s < SHAPES && ok; ++s)
        ok = (b->expected[s] = ug_malloc(shapes[s].m * shapes[s].n * sizeof(double))) != NULL;
    if (!ok) {
        bench_release(b);
        return ug_opencl_host->set_error(UG_ERR_OUT_OF_MEMORY, "OpenCL: out of host memory");
    }
    for (size_t i = 0; i < OPERAND; ++i) {
        b->host_a[i] = operand_value(i, 0);
        b->host_b[i] = operand_value(i, 5);
    }
    for (int s = 0; s < SHAPES; ++s)
        reference(s, b->host_a, b->host_b, b->expected[s]);
    cl_command_queue queue = ug_opencl_current(dev)->queue;
    if ((err = clEnqueueWriteBuffer(queue, b->a, CL_TRUE, 0, bytes, b->host_a, 0, NULL, NULL)) !=
            CL_SUCCESS ||
        (err = clEnqueueWriteBuffer(queue, b->b, CL_TRUE, 0, bytes, b->host_b, 0, NULL, NULL)) !=
            CL_SUCCESS) {
        bench_release(b);
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueWriteBuffer for the GEMM tuning", err);
    }
    return UG_OK;
}

/* Enqueues one product on the queue the step's work goes to, as ug_opencl_gemm
 * would. */
static ug_status run_shape(ug_bdev *dev, bench *b, int s)
{
    size_t m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
    size_t lda = shapes[s].ta ? m : k, ldb = shapes[s].tb ? k : n;
    cl_command_queue queue = ug_opencl_current(dev)->queue;
    pthread_mutex_lock(&dev->launch_lock);
    CLBlastStatusCode code = CLBlastSgemm(
        CLBlastLayoutRowMajor, shapes[s].ta ? CLBlastTransposeYes : CLBlastTransposeNo,
        shapes[s].tb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, 1.0f, b->a, 0, lda, b->b,
        0, ldb, 0.0f, b->c, 0, n, &queue, NULL);
    pthread_mutex_unlock(&dev->launch_lock);
    if (code != CLBlastSuccess)
        return ug_opencl_host->set_error(UG_ERR_BACKEND, "CLBlastSgemm: %d %s", (int)code,
                                         ug_opencl_clblast_error_name(code));
    return UG_OK;
}

static ug_status finish(ug_bdev *dev)
{
    cl_int err = clFinish(ug_opencl_current(dev)->queue);
    return err == CL_SUCCESS ? UG_OK
                             : ug_opencl_fail(ug_opencl_status_of(err), "clFinish for the GEMM tuning", err);
}

/* Runs shape s once and compares every element with the double-precision
 * reference; C is first filled with NaN, so elements a kernel leaves
 * unwritten count as wrong too. */
static ug_status check_shape(ug_bdev *dev, bench *b, int s)
{
    size_t count = shapes[s].m * shapes[s].n;
    const cl_float nan_pattern = NAN;
    cl_command_queue queue = ug_opencl_current(dev)->queue;
    cl_int err = clEnqueueFillBuffer(queue, b->c, &nan_pattern, sizeof nan_pattern, 0,
                                     count * sizeof(float), 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueFillBuffer for the GEMM tuning", err);
    UG_BACKEND_TRY(run_shape(dev, b, s));
    err = clEnqueueReadBuffer(queue, b->c, CL_TRUE, 0, count * sizeof(float), b->host_c, 0, NULL,
                              NULL);
    if (err != CL_SUCCESS)
        return ug_opencl_fail(ug_opencl_status_of(err), "clEnqueueReadBuffer for the GEMM tuning", err);
    for (size_t i = 0; i < count; ++i) {
        if ((double)b->host_c[i] != b->expected[s][i])
            return ug_opencl_host->set_error(
                UG_ERR_BACKEND, "a wrong product (%g for %g at %zu of %zux%zux%zu)", b->host_c[i],
                b->expected[s][i], i, shapes[s].m, shapes[s].n, shapes[s].k);
    }
    return UG_OK;
}

/* The products' time, each the best of ROUNDS batches of BATCH back to
 * back, by the host's clock (a CLBlast routine may run several kernels:
 * padding, transposes), after a first run (which compiles) whose product
 * is checked. */
static ug_status measure(ug_bdev *dev, bench *b, double *seconds)
{
    UG_BACKEND_TRY(finish(dev)); /* the step's earlier work is not timed */
    *seconds = 0;
    for (int s = 0; s < SHAPES; ++s) {
        UG_BACKEND_TRY(check_shape(dev, b, s));
        double best = INFINITY;
        for (int r = 0; r < ROUNDS; ++r) {
            double start = ug_seconds_now();
            for (int i = 0; i < BATCH; ++i)
                UG_BACKEND_TRY(run_shape(dev, b, s));
            UG_BACKEND_TRY(finish(dev));
            double t = (ug_seconds_now() - start) / BATCH;
            best = t < best ? t : best;
        }
        *seconds += best;
    }
    return UG_OK;
}

/* What the device allows a kernel, for gemm_params_legal; a figure the
 * device does not give stays 0 (not checked). */
static void device_limits(ug_bdev *dev, gemm_limits *limits)
{
    memset(limits, 0, sizeof *limits);
    size_t group = 0, items[3] = {0, 0, 0};
    cl_ulong local = 0;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof group, &group, NULL) ==
        CL_SUCCESS)
        limits->work_group = group;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL) ==
        CL_SUCCESS) {
        limits->work_item[0] = items[0];
        limits->work_item[1] = items[1];
    }
    if (clGetDeviceInfo(dev->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL) ==
        CL_SUCCESS)
        limits->local_bytes = local > SIZE_MAX ? SIZE_MAX : (size_t)local;
}

/* The one check a cached set gets before it is trusted: legal for the
 * device, then installed and exact on the tuning's three products. The
 * products go through the Xgemm kernel whatever the set's switch to it
 * (XGEMM_MIN_INDIRECT_SIZE): a switch above their size is lowered for the
 * check, then the set is installed as cached. On failure (why says what
 * was wrong) the caller installs the fixed set. */
static bool verify(ug_bdev *dev, const gemm_params *p, char *why, size_t why_len)
{
    gemm_limits limits;
    device_limits(dev, &limits);
    if (!gemm_params_legal(p, &limits, why, why_len))
        return false;
    gemm_params checked = *p;
    const size_t smallest = shapes[0].m * shapes[0].n * shapes[0].k; /* all three are equal */
    if ((double)checked.min_indirect * checked.min_indirect * checked.min_indirect > (double)smallest)
        checked.min_indirect = 1;
    bench b;
    ug_status st = bench_create(dev, &b);
    if (st == UG_OK) {
        if ((st = finish(dev)) == UG_OK && (st = install(dev, &checked)) == UG_OK)
            for (int s = 0; s < SHAPES && st == UG_OK; ++s)
                st = check_shape(dev, &b, s);
        bench_release(&b);
    }
    if (st == UG_OK && checked.min_indirect != p->min_indirect)
        st = install(dev, p);
    if (st != UG_OK)
        snprintf(why, why_len, "%s", ug_opencl_host->last_error());
    return st == UG_OK;
}

/* ---- the cache ---- */

static int cache_key(ug_bdev *dev, char *key, size_t len)
{
    return snprintf(key, len, "CLBlast %d.%d.%d Xgemm f32, tuner 1\n%s\n%s\n%s",
                    CLBLAST_VERSION_MAJOR, CLBLAST_VERSION_MINOR, CLBLAST_VERSION_PATCH,
                    dev->name, dev->driver, dev->platform_version);
}

/* ---- choosing ---- */

/* Appends a formatted line to the report (which may be NULL). */
static void say(char *report, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *report, size_t len, const char *fmt, ...)
{
    if (!report || !len)
        return;
    size_t used = strnlen(report, len);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report + used, len - used, fmt, ap);
    va_end(ap);
}

/* Times every candidate and installs the fastest. Candidates that fail (a
 * kernel the device refuses, a wrong product) are reported and passed
 * over. */
static ug_status search(ug_bdev *dev, gemm_choice *choice, char *report, size_t report_len)
{
    bench b;
    UG_BACKEND_TRY(bench_create(dev, &b));
    say(report, report_len, "  each set's time for 64x512x768 NN, 64x768x512 NT, 768x512x64 TN\n");
    choice->seconds = INFINITY;
    gemm_limits limits;
    device_limits(dev, &limits);
    for (int i = 0; i < CANDIDATES; ++i) {
        gemm_params p;
        double seconds;
        char why[160];
        if (!candidate_params(dev, i, &p)) {
            say(report, report_len, "  %-42s not known to CLBlast's C++ API\n",
                candidates[i].label);
            continue;
        }
        if (!gemm_params_legal(&p, &limits, why, sizeof why)) {
            say(report, report_len, "  %-42s not for this device: %s\n", candidates[i].label, why);
            continue;
        }
        ug_status st = install(dev, &p);
        if (st == UG_OK)
            st = measure(dev, &b, &seconds);
        if (st != UG_OK) {
            say(report, report_len, "  %-42s failed: %s\n", candidates[i].label,
                ug_opencl_host->last_error());
            continue;
        }
        say(report, report_len, "  %-42s %8.0f us\n", candidates[i].label, 1e6 * seconds);
        if (seconds < choice->seconds) {
            choice->seconds = seconds;
            choice->params = p;
            snprintf(choice->label, sizeof choice->label, "%s", candidates[i].label);
        }
    }
    bench_release(&b);
    if (!(choice->seconds < INFINITY))
        return ug_opencl_host->set_error(
            UG_ERR_BACKEND, "OpenCL: no GEMM parameter set worked on %s; see the report", dev->name);
    say(report, report_len, "  chosen: %s\n", choice->label);
    return install(dev, &choice->params);
}

/* Another process tuning the same device holds this lock; waiting for it
 * beats measuring on a device it keeps busy. Best effort: without a lock
 * file, or after a minute, this process measures anyway. */
static int lock_path(const char *path)
{
    char lock[PATH_MAX + 8];
    if (snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock)
        return -1;
    /* O_NONBLOCK: a FIFO put at the lock path must not stop the open. */
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0)
        return -1;
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; ++tries) {
        if (errno != EWOULDBLOCK || tries >= 1200) {
            close(fd);
            return -1;
        }
        usleep(50000);
    }
    return fd;
}

/* Loads the cached choice (unless again) or measures and caches one, and
 * applies it; the caller holds tune_lock. */
static ug_status tune(ug_bdev *dev, bool again, char *report, size_t report_len)
{
    char key[1024], path[PATH_MAX], why[PATH_MAX + 128];
    int key_len = cache_key(dev, key, sizeof key);
    bool cache = key_len > 0 && (size_t)key_len < sizeof key &&
                 ug_cache_path("clblast-gemm", key, (size_t)key_len, ".txt", path, sizeof path);
    int lock = cache ? lock_path(path) : -1;
    gemm_choice choice = {0};
    ug_status st = UG_OK;
    say(report, report_len, "%s: CLBlast %d.%d.%d's SGEMM\n", dev->name, CLBLAST_VERSION_MAJOR,
        CLBLAST_VERSION_MINOR, CLBLAST_VERSION_PATCH);
    bool loaded = false, refused = false;
    if (cache && !again) {
        unsigned char *text = NULL;
        size_t size = 0;
        ug_cache_result r = ug_cache_load(path, TUNE_MAGIC, key, (size_t)key_len, TUNE_MAX_BYTES,
                                          &text, &size, why, sizeof why);
        if (r == UG_CACHE_HIT && !gemm_choice_parse((const char *)text, &choice)) {
            snprintf(why, sizeof why, "%s holds no choice it can use", path);
            r = UG_CACHE_DAMAGED;
        }
        free(text);
        if (r == UG_CACHE_DAMAGED)
            ug_opencl_host->warn("the GEMM tuning cache %s; measuring again", why);
        /* A sound file may still hold a set CLBlast computes wrongly with
         * (written by another version, edited by hand, or one the device's
         * compiler gets wrong): checked once before use, and passed over
         * for the fixed set, not measured and overwritten, since such a
         * file points at a bug or an edit a person should look at. */
        char problem[512];
        if (r == UG_CACHE_HIT && !verify(dev, &choice.params, problem, sizeof problem)) {
            ug_opencl_host->warn("the GEMM tuning cache %s holds CLBlast parameters that cannot be used "
                                 "on %s (%s); it is ignored and the fixed parameters are used: delete "
                                 "the file, or run 'ug-bench tune' (ug_device_autotune) to measure "
                                 "and save new ones",
                                 path, dev->name, problem);
            install_builtin(dev);
            say(report, report_len, "  ignored %s: %s\n", path, problem);
            refused = true;
        } else if (r == UG_CACHE_HIT) {
            say(report, report_len, "  loaded from %s: %s\n", path, choice.label);
            loaded = true;
        }
    }
    if (!loaded && !refused && (st = search(dev, &choice, report, report_len)) == UG_OK) {
        char text[512];
        gemm_choice_format(&choice, text, sizeof text);
        if (cache &&
            ug_cache_store(path, TUNE_MAGIC, key, (size_t)key_len, text, strlen(text)) == UG_OK)
            say(report, report_len, "  saved to %s\n", path);
        else
            say(report, report_len, "  not saved: %s\n",
                cache ? ug_opencl_host->last_error() : "no usable cache folder");
    }
    if (lock >= 0)
        close(lock);
    dev->gemm_tuned = true;
    return st;
}

ug_status ug_opencl_autotune(ug_bdev *dev, char *report, size_t report_len)
{
    if (report && report_len)
        report[0] = '\0';
    pthread_mutex_lock(&dev->tune_lock);
    ug_status st = tune(dev, true, report, report_len);
    pthread_mutex_unlock(&dev->tune_lock);
    return st;
}

void ug_opencl_gemm_open(ug_bdev *dev)
{
    note_database(dev);
    install_builtin(dev);
}

/* Tuning never fails a product: a device that cannot be tuned keeps its
 * fixed parameters, with a warning. */
void ug_opencl_gemm_ready(ug_bdev *dev)
{
    pthread_mutex_lock(&dev->tune_lock);
    if (!dev->gemm_tuned) {
        const char *env = getenv("UG_AUTOTUNE");
        if (env && strcmp(env, "0") == 0) {
            dev->gemm_tuned = true;
        } else if (tune(dev, false, NULL, 0) != UG_OK) {
            ug_opencl_host->warn("OpenCL: tuning the GEMM on %s failed (%s); it keeps fixed parameters",
                                 dev->name, ug_opencl_host->last_error());
            install_builtin(dev);
        }
    }
    pthread_mutex_unlock(&dev->tune_lock);
}
