/* Which GEMM runs a shape: the vendor BLAS, or the module's own kernel
 * with a 64x64 or a 128x128 tile, its dot kernel for a small C, or its
 * 64x64 tile over slices of K summed after (kernels/hip/gemm.h, gemm_own.hip). A
 * vendor library tuned for large products can lose to a plain kernel on
 * the small ones a training step is made of, and which own kernel wins
 * depends on how many blocks fill the GPU; so each shape's first product
 * (outside a capture) times every candidate, on the device, on the
 * caller's operands into a C of the module's own, and the fastest runs
 * that shape from then on: fixed for the device's life, and cached per
 * device, driver and library version (choices.h), so a later process
 * skips the timing. With UG_GEMM=own, or where the library cannot run the
 * product, the candidates are the own kernels; UG_GEMM=own64 (or another
 * own kernel's name) runs that kernel, untimed.
 *
 * Nothing is timed where the choice must not depend on a measurement, and
 * the vendor (else the own kernel that suits the shape,
 * ug_hip_gemm_default_path) runs: UG_AUTOTUNE=0 (as for CLBlast's
 * parameters on OpenCL, no cache read or written), deterministic mode
 * (ug_set_deterministic: a process whose cache is gone could time another
 * path faster and round differently), a product met first inside a
 * capture (timing synchronises, which a capture forbids), and one whose C
 * would take more than TIMING_C_LIMIT. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/choices.h"

/* Larger products are the vendor's (and timing them would cost more than
 * a tiled kernel could win back). */
#define TIMING_C_LIMIT ((size_t)64 << 20)
constexpr int TIMED_RUNS = 3;
/* A product of fewer flops runs SMALL_REPEATS times back to back in each
 * round: alone, its few microseconds would be lost in the gap between two
 * events; repeated, the time is the kernels' and the gaps a step's replay
 * also has between them. */
constexpr double SMALL_FLOPS = 1 << 27;
constexpr int SMALL_REPEATS = 8;
/* The hold before the timed rounds (ug_hip_gemm_hold): about 4 ms at an
 * H100's clock, 6 on a GPU at 1.4 GHz; a host issues the rounds (at most
 * 5 candidates x 3 rounds x 8 repeats of at most 2 launches, and the
 * events) in a fraction of that. */
constexpr long long HOLD_CYCLES = 1LL << 23;

typedef struct gemm_shape {
    int a_type, c_type; /* ug_dtype */
    int ta, tb;
    int64_t m, n, k, batch;
    bool epilogue; /* an epilogue folded in: the library's path launches it after */
    bool vendor; /* the library is a candidate */
} gemm_shape;

static const char *const PATH_NAMES[UG_HIP_GEMM_PATHS] = {"vendor", "own64", "own128", "own-dot", "own-split"};

typedef enum choice_source { FROM_CACHE, TIMED_NOW, UNTIMED } choice_source;

typedef struct gemm_choice {
    gemm_shape shape;
    int path;                     /* ug_hip_gemm_path */
    float ms[UG_HIP_GEMM_PATHS]; /* the median time of each candidate; -1: not one */
    choice_source source;
} gemm_choice;

struct ug_hip_gemms {
    pthread_mutex_t lock;
    gemm_choice *choices;
    int count, capacity;
    char key[600]; /* the library, the device and its driver */
    ug_hip_choice_file file;
};

static bool same_shape(const gemm_shape *a, const gemm_shape *b)
{
    return a->a_type == b->a_type && a->c_type == b->c_type && a->ta == b->ta && a->tb == b->tb &&
           a->m == b->m && a->n == b->n && a->k == b->k && a->batch == b->batch && a->epilogue == b->epilogue &&
           a->vendor == b->vendor;
}

static gemm_shape shape_of(const ug_gemm_args *a, bool vendor)
{
    return gemm_shape{(int)a->a.dtype, (int)a->c.dtype, (int)a->trans_a, (int)a->trans_b,
                      a->m, a->n, a->k, a->batch, a->epi.operand.mem != NULL, vendor};
}

static const char *dtype_name(int t) { return t == UG_F16 ? "f16" : t == UG_BF16 ? "bf16" : "f32"; }

static int dtype_of(const char *name)
{
    return !strcmp(name, "f16") ? UG_F16 : !strcmp(name, "bf16") ? UG_BF16 : !strcmp(name, "f32") ? UG_F32 : -1;
}

static int path_of(const char *name)
{
    for (int p = 0; p < UG_HIP_GEMM_PATHS; p++)
        if (!strcmp(name, PATH_NAMES[p]))
            return p;
    return -1;
}

/* "f32 f32 NT 64 500 784 1 epilogue all own64 0.0123 0.0081 ...": the
 * types of A and C, the transposes, m n k batch, epilogue or none (an
 * elementwise op folded in), the candidates (all, or own: the own
 * kernels), the path, and each candidate's time in ms (-1: not one). */
static int format_line(const gemm_choice *c, char *out, size_t len)
{
    const gemm_shape *s = &c->shape;
    return snprintf(out, len,
                    "%s %s %c%c %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %s %s %s %.6g %.6g %.6g %.6g %.6g\n",
                    dtype_name(s->a_type), dtype_name(s->c_type), s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m,
                    s->n, s->k, s->batch, s->epilogue ? "epilogue" : "none", s->vendor ? "all" : "own",
                    PATH_NAMES[c->path], (double)c->ms[0], (double)c->ms[1], (double)c->ms[2], (double)c->ms[3],
                    (double)c->ms[4]);
}

static bool parse_line(const char *line, gemm_choice *c)
{
    char a[8], cc[8], trans[4], epilogue[12], candidates[8], path[12];
    int used = 0;
    *c = gemm_choice{};
    gemm_shape *s = &c->shape;
    if (sscanf(line, "%7s %7s %3s %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %11s %7s %11s %f %f %f %f %f%n",
               a, cc, trans, &s->m, &s->n, &s->k, &s->batch, epilogue, candidates, path, &c->ms[0], &c->ms[1],
               &c->ms[2], &c->ms[3], &c->ms[4], &used) != 15 ||
        line[used] != '\0' || strlen(trans) != 2)
        return false;
    s->a_type = dtype_of(a);
    s->c_type = dtype_of(cc);
    s->ta = trans[0] == 'T';
    s->tb = trans[1] == 'T';
    s->epilogue = strcmp(epilogue, "epilogue") == 0;
    s->vendor = strcmp(candidates, "all") == 0;
    c->path = path_of(path);
    /* Values no timing could have written make the whole file suspect. */
    return s->a_type >= 0 && s->c_type >= 0 && strchr("NT", trans[0]) && strchr("NT", trans[1]) &&
           (s->epilogue || strcmp(epilogue, "none") == 0) &&
           (s->vendor || strcmp(candidates, "own") == 0) && c->path >= 0 &&
           (s->vendor || c->path != UG_HIP_GEMM_VENDOR) && s->m > 0 && s->n > 0 && s->k >= 0 && s->batch > 0;
}

/* The cached choice for a shape: the reader of choices.h (out holds the
 * shape sought). */
static int read_choice(const char *line, void *ctx)
{
    gemm_choice *out = (gemm_choice *)ctx, c;
    if (!parse_line(line, &c))
        return UG_HIP_CHOICE_UNREADABLE;
    if (!same_shape(&c.shape, &out->shape))
        return UG_HIP_CHOICE_OTHER;
    *out = c;
    return UG_HIP_CHOICE_FOUND;
}

static float median(float v[TIMED_RUNS])
{
    for (int i = 1; i < TIMED_RUNS; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            const float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[TIMED_RUNS / 2];
}

static ug_status run_path(ug_bdev *dev, int path, const ug_gemm_args *a, ug_gemm_fn *vendor)
{
    return path == UG_HIP_GEMM_VENDOR ? vendor(dev, a) : ug_hip_gemm_own_path(dev, a, path);
}

/* Times each candidate's product of a (the vendor's where vendor is not
 * NULL, and the own kernels that can run it) into a C of the module's own
 * (beta 0: nothing the caller holds changes), the median of TIMED_RUNS
 * after a warm-up each, run back to back behind a hold. false: not timed
 * (a C too large, no memory for it, or a failed call). */
static bool time_paths(ug_bdev *dev, const ug_gemm_args *a, ug_gemm_fn *vendor, gemm_choice *c)
{
    constexpr int EVENTS = 1 + TIMED_RUNS * (int)UG_HIP_GEMM_PATHS;
    int paths[UG_HIP_GEMM_PATHS], count = 0;
    for (int p = vendor ? UG_HIP_GEMM_VENDOR : UG_HIP_GEMM_OWN_64; p < UG_HIP_GEMM_PATHS; p++)
        if (p == UG_HIP_GEMM_VENDOR || ug_hip_gemm_own_fits(dev, a, p))
            paths[count++] = p;
    /* In double: batch, m and n each fit an int, their product need not. */
    const double c_bytes = (double)a->batch * (double)a->m * (double)a->n * (double)ug_hip_dtype_size(a->c.dtype);
    void *scratch = NULL;
    hipEvent_t ev[EVENTS] = {};
    bool ok = c_bytes <= (double)TIMING_C_LIMIT && hipMalloc(&scratch, (size_t)c_bytes) == hipSuccess;
    for (int i = 0; ok && i < EVENTS; i++)
        ok = hipEventCreateWithFlags(&ev[i], 0) == hipSuccess;
    const double flops = 2.0 * (double)a->batch * (double)a->m * (double)a->n * (double)a->k;
    const int repeats = flops < SMALL_FLOPS ? SMALL_REPEATS : 1;
    ug_gemm_args t = *a;
    t.c = ug_kview{scratch, 0, a->c.dtype};
    t.ldc = a->n;
    t.stride_c = a->m * a->n;
    t.beta = 0.0f;
    hipStream_t stream = ug_hip_current(dev)->stream;
    for (int i = 0; ok && i < count; i++)
        ok = run_path(dev, paths[i], &t, vendor) == UG_OK;
    ok = ok && ug_hip_gemm_hold(dev, HOLD_CYCLES) == UG_OK && hipEventRecord(ev[0], stream) == hipSuccess;
    /* Rounds of every candidate in turn, so a drift in the GPU's clock
     * falls on all of them. */
    for (int r = 0, e = 1; ok && r < TIMED_RUNS; r++)
        for (int i = 0; ok && i < count; i++, e++) {
            for (int n = 0; ok && n < repeats; n++)
                ok = run_path(dev, paths[i], &t, vendor) == UG_OK;
            ok = ok && hipEventRecord(ev[e], stream) == hipSuccess;
        }
    ok = ok && hipEventSynchronize(ev[TIMED_RUNS * count]) == hipSuccess;
    float ms[UG_HIP_GEMM_PATHS][TIMED_RUNS];
    for (int r = 0, e = 1; ok && r < TIMED_RUNS; r++)
        for (int i = 0; ok && i < count; i++, e++)
            ok = hipEventElapsedTime(&ms[paths[i]][r], ev[e - 1], ev[e]) == hipSuccess;
    (void)hipGetLastError();
    for (int i = 0; i < EVENTS; i++)
        if (ev[i])
            (void)hipEventDestroy(ev[i]);
    if (scratch) {
        (void)hipStreamSynchronize(stream); /* the runs may still read it after a failure */
        (void)hipFree(scratch);
    }
    if (!ok)
        return false;
    for (int p = 0; p < UG_HIP_GEMM_PATHS; p++)
        c->ms[p] = -1.0f;
    c->path = paths[0];
    for (int i = 0; i < count; i++) {
        c->ms[paths[i]] = median(ms[paths[i]]) / (float)repeats;
        if (c->ms[paths[i]] < c->ms[c->path])
            c->path = paths[i];
    }
    c->source = TIMED_NOW;
    return true;
}

static bool autotune_off(void)
{
    const char *e = getenv("UG_AUTOTUNE");
    return e && strcmp(e, "0") == 0;
}

bool ug_hip_capturing(ug_bdev *dev)
{
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    const bool known = hipStreamIsCapturing(ug_hip_current(dev)->stream, &status) == hipSuccess;
    (void)hipGetLastError();
    return !known || status != hipStreamCaptureStatusNone;
}

int ug_hip_gemm_forced_path(void)
{
    const char *e = getenv("UG_GEMM");
    const int path = e ? path_of(e) : -1;
    return path == UG_HIP_GEMM_VENDOR ? -1 : path;
}

int ug_hip_gemm_path(ug_bdev *dev, const ug_gemm_args *a, ug_gemm_fn *vendor)
{
    const int forced = ug_hip_gemm_forced_path();
    if (forced >= 0)
        return forced;
    ug_hip_gemms *g = dev->gemms;
    const int fallback = vendor ? UG_HIP_GEMM_VENDOR : ug_hip_gemm_default_path(dev, a);
    if (!g || a->deterministic || autotune_off())
        return fallback;
    const gemm_shape shape = shape_of(a, vendor != NULL);
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->count; i++)
        if (same_shape(&g->choices[i].shape, &shape)) {
            const int path = g->choices[i].path;
            pthread_mutex_unlock(&g->lock);
            return path;
        }
    gemm_choice c{};
    c.shape = shape;
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX);
    bool known = text && ug_hip_choices_find(&g->file, g->key, text, read_choice, &c);
    if (!known)
        c = gemm_choice{shape, fallback, {-1.0f, -1.0f, -1.0f, -1.0f, -1.0f}, UNTIMED};
    /* Met first in a capture: the fallback now, timed at a later product. */
    if (!known && text && !ug_hip_capturing(dev)) {
        known = true;
        char line[UG_HIP_CHOICE_LINE_MAX];
        const int n = time_paths(dev, a, vendor, &c) ? format_line(&c, line, sizeof line) : 0;
        if (n > 0 && (size_t)n < sizeof line) /* else too large, or no memory for its C: untimed */
            ug_hip_choices_add(&g->file, g->key, line, text);
    }
    free(text);
    if (known && g->count == g->capacity) {
        const int capacity = g->capacity ? 2 * g->capacity : 16;
        gemm_choice *grown = (gemm_choice *)realloc(g->choices, (size_t)capacity * sizeof *grown);
        if (grown) {
            g->choices = grown;
            g->capacity = capacity;
        }
    }
    if (known && g->count < g->capacity) /* else chosen again next time */
        g->choices[g->count++] = c;
    pthread_mutex_unlock(&g->lock);
    return c.path;
}

ug_status ug_hip_gemms_open(ug_bdev *dev, const char *device_key)
{
    ug_hip_gemms *g = (ug_hip_gemms *)calloc(1, sizeof *g);
    if (!g)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", UG_HIP_BACKEND);
    pthread_mutex_init(&g->lock, NULL);
    const char *library = ug_hip_blas_version();
    snprintf(g->key, sizeof g->key, "%s; %s; gemm", library, device_key);
    g->file.name = UG_HIP_BACKEND "-gemm";
    g->file.header = "unigrad GEMM choices 3\n"; /* 2: five paths' times; 3: epilogue or none */
    snprintf(g->file.what, sizeof g->file.what, "the GEMM choices' cache");
    dev->gemms = g;
    return UG_OK;
}

void ug_hip_gemms_close(ug_bdev *dev)
{
    if (!dev->gemms)
        return;
    pthread_mutex_destroy(&dev->gemms->lock);
    free(dev->gemms->choices);
    free(dev->gemms);
    dev->gemms = NULL;
}

/* "  f32 NT 64x500x784: own64 0.0081 ms (timed now)" and, on lines of
 * their own to fit 80 columns, "      against vendor 0.0123, own128 0.0110". */
static void describe(const gemm_choice *c, char *line, size_t len)
{
    const gemm_shape *s = &c->shape;
    int n = snprintf(line, len, "  %s %c%c %" PRId64 "x%" PRId64 "x%" PRId64 "%s%s: %s", dtype_name(s->a_type),
                     s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, s->batch > 1 ? " batched" : "",
                     s->epilogue ? "+epilogue" : "", PATH_NAMES[c->path]);
    if (c->source == UNTIMED) {
        if (n > 0 && (size_t)n < len)
            snprintf(line + n, len - (size_t)n, " (not timed: too large, or no memory)\n");
        return;
    }
    if (n > 0 && (size_t)n < len)
        n += snprintf(line + n, len - (size_t)n, " %.4f ms (%s)\n      against", (double)c->ms[c->path],
                      c->source == TIMED_NOW ? "timed now" : "from the cache");
    const char *sep = " ";
    const char *newline = n > 0 && (size_t)n < len ? strrchr(line, '\n') : NULL;
    int line_start = newline ? (int)(newline - line) + 1 : 0;
    for (int p = 0; p < UG_HIP_GEMM_PATHS; p++)
        if (p != c->path && c->ms[p] >= 0.0f && n > 0 && (size_t)n < len) {
            char item[48];
            snprintf(item, sizeof item, "%s %.4f", PATH_NAMES[p], (double)c->ms[p]);
            if (n - line_start + (int)strlen(sep) + (int)strlen(item) > 78) {
                sep = ",\n             ";
                line_start = n + 2; /* past the comma and the newline */
            }
            n += snprintf(line + n, len - (size_t)n, "%s%s", sep, item);
            sep = ", ";
        }
    if (n > 0 && (size_t)n < len)
        snprintf(line + n, len - (size_t)n, "\n");
}

void ug_hip_gemm_report(ug_bdev *dev, void (*say)(void *ctx, const char *line), void *ctx)
{
    ug_hip_gemms *g = dev->gemms;
    if (!g)
        return;
    char line[UG_HIP_CHOICE_LINE_MAX + 64], cached_line[UG_HIP_CHOICE_LINE_MAX];
    pthread_mutex_lock(&g->lock);
    snprintf(line, sizeof line, "GEMM: %s, or the own kernels where faster\n"
             "chosen in this process: %d\n", ug_hip_blas_path(dev), g->count);
    say(ctx, line);
    for (int i = 0; i < g->count; i++) {
        describe(&g->choices[i], line, sizeof line);
        say(ctx, line);
    }
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX);
    const char *at = text ? ug_hip_choices_read(&g->file, g->key, text) : NULL;
    if (at)
        say(ctx, "cached for this device and driver:\n");
    while (at && ug_hip_choices_next(&at, cached_line, sizeof cached_line)) {
        gemm_choice c;
        if (parse_line(cached_line, &c)) {
            describe(&c, line, sizeof line);
            say(ctx, line);
        }
    }
    free(text);
    pthread_mutex_unlock(&g->lock);
}
