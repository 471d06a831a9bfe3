/* The test harness (see harness.h). */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reference.h"

enum { TH_MAX_DEVICES = 64, TH_GUARD_BEFORE = 37, TH_GUARD_AFTER = 29 };

struct th_guard {
    ug_tensor *parent;
    ug_dtype dtype;
    int64_t before, count, after; /* elements */
    unsigned char *expected;      /* the parent's whole content as uploaded */
    unsigned char *sentinel;      /* one element's bytes */
};

typedef struct th_list {
    void **items;
    size_t count, capacity;
} th_list;

static struct {
    ug_device *devices[TH_MAX_DEVICES];
    int device_count;
    /* The current run. */
    const char *test;
    const char *device;
    int failures;
    bool skipped;
    char skip_reason[256];
    char context[256];
    th_list tensors, blocks;
    bool custom_sentinel;
    double sentinel;
    uint64_t rng;
} th;

static void list_push(th_list *list, void *item)
{
    if (list->count == list->capacity) {
        size_t cap = list->capacity ? list->capacity * 2 : 64;
        void **items = realloc(list->items, cap * sizeof *items);
        if (!items) {
            fprintf(stderr, "test harness: out of host memory\n");
            exit(2);
        }
        list->items = items;
        list->capacity = cap;
    }
    list->items[list->count++] = item;
}

/* ---- recording ---- */

void th_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    printf("    %s%s%s: %s:%d: %s%s%s%s\n", th.test ? th.test : "setup",
           th.device ? " on " : "", th.device ? th.device : "", base ? base + 1 : file, line,
           msg, th.context[0] ? " [" : "", th.context, th.context[0] ? "]" : "");
    fflush(stdout);
    th.failures++;
}

void th_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(th.skip_reason, sizeof th.skip_reason, fmt, ap);
    va_end(ap);
    th.skipped = true;
}

int th_failures(void) { return th.failures; }

void th_context(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(th.context, sizeof th.context, fmt, ap);
    va_end(ap);
}

bool th_check_status(const char *file, int line, const char *text, ug_status got,
                     ug_status want)
{
    if (got == want)
        return true;
    th_fail(file, line, "%s returned %s, expected %s (message: \"%s\")", text,
            ug_status_name(got), ug_status_name(want), ug_last_error());
    return false;
}

bool th_contains(const char *haystack, const char *needle)
{
    return haystack && needle && strstr(haystack, needle) != NULL;
}

bool th_check_error_has(const char *file, int line, ...)
{
    const char *msg = ug_last_error();
    bool ok = true;
    va_list ap;
    va_start(ap, line);
    for (const char *needle; (needle = va_arg(ap, const char *)) != NULL;) {
        if (!th_contains(msg, needle)) {
            th_fail(file, line, "ug_last_error() lacks \"%s\": \"%s\"", needle, msg ? msg : "(null)");
            ok = false;
        }
    }
    va_end(ap);
    return ok;
}

/* ---- tracked memory ---- */

void *th_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test harness: out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    list_push(&th.blocks, p);
    return p;
}

ug_tensor *th_track(ug_tensor *tensor)
{
    if (tensor)
        list_push(&th.tensors, tensor);
    return tensor;
}

void th_release(ug_tensor *tensor)
{
    for (size_t i = th.tensors.count; i-- > 0;) {
        if (th.tensors.items[i] == tensor) {
            th.tensors.items[i] = th.tensors.items[--th.tensors.count];
            ug_tensor_free(tensor);
            return;
        }
    }
    ug_tensor_free(tensor); /* not tracked: free it anyway */
}

static void release_all(void)
{
    for (size_t i = th.tensors.count; i-- > 0;)
        ug_tensor_free(th.tensors.items[i]);
    th.tensors.count = 0;
    for (size_t i = 0; i < th.blocks.count; i++)
        free(th.blocks.items[i]);
    th.blocks.count = 0;
}

/* ---- host data ---- */

static void store_value(ug_dtype dtype, void *base, int64_t i, double v)
{
    switch (dtype) {
    case UG_F32: ((float *)base)[i] = (float)v; break;
    case UG_F16: ((uint16_t *)base)[i] = ref_f16_bits(v); break;
    case UG_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case UG_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case UG_BF16: ((uint16_t *)base)[i] = ref_bf16_bits(v); break;
    case UG_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    }
}

static double load_value(ug_dtype dtype, const void *base, int64_t i)
{
    switch (dtype) {
    case UG_F32: return ((const float *)base)[i];
    case UG_F16: return ref_f16_value(((const uint16_t *)base)[i]);
    case UG_I32: return ((const int32_t *)base)[i];
    case UG_U8: return ((const uint8_t *)base)[i];
    case UG_BF16: return ref_bf16_value(((const uint16_t *)base)[i]);
    case UG_I64: return (double)((const int64_t *)base)[i];
    }
    return NAN;
}

static size_t elem_size(ug_dtype dtype)
{
    return ug_dtype_size(dtype);
}

void th_round_to(ug_dtype dtype, double *values, int64_t n)
{
    unsigned char tmp[8];
    for (int64_t i = 0; i < n; i++) {
        store_value(dtype, tmp, 0, values[i]);
        values[i] = load_value(dtype, tmp, 0);
    }
}

double *th_rounded_copy(ug_dtype dtype, const double *values, int64_t n)
{
    double *copy = th_alloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    memcpy(copy, values, (size_t)n * sizeof *copy);
    th_round_to(dtype, copy, n);
    return copy;
}

void th_seed(uint64_t seed) { th.rng = seed * 0x9E3779B97F4A7C15ull + 1; }

double th_uniform(double low, double high)
{
    /* splitmix64: good enough spread for test data, same on every run. */
    uint64_t z = (th.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return low + (high - low) * ldexp((double)(z >> 11), -53);
}

double *th_random_values(int64_t n, double low, double high)
{
    double *v = th_alloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = th_uniform(low, high);
    return v;
}

const char *th_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, len - pos, "[");
    for (int i = 0; i < ndim && pos < len; i++)
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (pos < len)
        snprintf(buf + pos, len - pos, "]");
    return buf;
}

/* ---- tensors ---- */

ug_tensor *th_tensor_at(const char *file, int line, ug_device *dev, ug_dtype dtype, int ndim,
                        const int64_t *shape, const double *values)
{
    int64_t n = ref_numel(ndim, shape);
    void *host = th_alloc((size_t)n * elem_size(dtype));
    for (int64_t i = 0; values && i < n; i++)
        store_value(dtype, host, i, values[i]);
    ug_tensor *t = NULL;
    ug_status s = ug_tensor_from_host(dev, dtype, ndim, shape, host, &t);
    if (s != UG_OK) {
        char buf[128];
        th_fail(file, line, "ug_tensor_from_host(%s %s) returned %s: %s", ug_dtype_name(dtype),
                th_shape_str(ndim, shape, buf, sizeof buf), ug_status_name(s), ug_last_error());
        return NULL;
    }
    return th_track(t);
}

void th_guard_sentinel(double value)
{
    th.custom_sentinel = true;
    th.sentinel = value;
}

static void sentinel_bytes(ug_dtype dtype, unsigned char *out)
{
    if (th.custom_sentinel) {
        store_value(dtype, out, 0, th.sentinel);
        return;
    }
    /* Quiet NaNs with a payload (a result that reads one turns NaN), and
     * distinctive patterns for the integer types. */
    uint32_t f32 = 0x7fc5a5a5u, i32 = 0x5a5a5a5au;
    uint64_t i64 = 0x5a5a5a5a5a5a5a5aull;
    uint16_t f16 = 0x7e5au, bf16 = 0x7fa5u;
    switch (dtype) {
    case UG_F32: memcpy(out, &f32, 4); break;
    case UG_F16: memcpy(out, &f16, 2); break;
    case UG_I32: memcpy(out, &i32, 4); break;
    case UG_U8: out[0] = 0xa5; break;
    case UG_BF16: memcpy(out, &bf16, 2); break;
    case UG_I64: memcpy(out, &i64, 8); break;
    }
}

ug_tensor *th_guarded_at(const char *file, int line, ug_device *dev, ug_dtype dtype, int ndim,
                         const int64_t *shape, const double *values, th_guard **guard)
{
    *guard = NULL;
    int64_t n = ref_numel(ndim, shape);
    if (n == 0) /* an empty view has nothing to guard */
        return th_tensor_at(file, line, dev, dtype, ndim, shape, values);
    th_guard *g = th_alloc(sizeof *g);
    size_t es = elem_size(dtype);
    g->dtype = dtype;
    g->before = TH_GUARD_BEFORE;
    g->count = n;
    g->after = TH_GUARD_AFTER;
    int64_t total = g->before + n + g->after;
    g->sentinel = th_alloc(es);
    sentinel_bytes(dtype, g->sentinel);
    g->expected = th_alloc((size_t)total * es);
    for (int64_t i = 0; i < total; i++)
        memcpy(g->expected + (size_t)i * es, g->sentinel, es);
    for (int64_t i = 0; values && i < n; i++)
        store_value(dtype, g->expected, g->before + i, values[i]);
    ug_tensor *parent = NULL, *slice = NULL, *view = NULL;
    ug_status s = ug_tensor_from_host(dev, dtype, 1, &total, g->expected, &parent);
    if (s != UG_OK) {
        th_fail(file, line, "guarded parent: ug_tensor_from_host returned %s: %s",
                ug_status_name(s), ug_last_error());
        return NULL;
    }
    g->parent = th_track(parent);
    s = ug_tensor_slice(parent, g->before, n, &slice);
    if (s != UG_OK) {
        th_fail(file, line, "guarded view: ug_tensor_slice returned %s: %s", ug_status_name(s),
                ug_last_error());
        return NULL;
    }
    th_track(slice);
    s = ug_tensor_reshape(slice, ndim, shape, &view);
    if (s != UG_OK) {
        th_fail(file, line, "guarded view: ug_tensor_reshape returned %s: %s", ug_status_name(s),
                ug_last_error());
        return NULL;
    }
    *guard = g;
    return th_track(view);
}

bool th_guard_check_at(const char *file, int line, th_guard *g, bool inside_too)
{
    if (!g)
        return true;
    size_t es = elem_size(g->dtype);
    int64_t total = g->before + g->count + g->after;
    unsigned char *now = th_alloc((size_t)total * es);
    ug_status s = ug_tensor_download(g->parent, now, (size_t)total * es);
    if (s != UG_OK) {
        th_fail(file, line, "guard download returned %s: %s", ug_status_name(s), ug_last_error());
        return false;
    }
    int bad = 0;
    for (int64_t i = 0; i < total; i++) {
        bool inside = i >= g->before && i < g->before + g->count;
        if (inside && !inside_too)
            continue;
        if (memcmp(now + (size_t)i * es, g->expected + (size_t)i * es, es) != 0) {
            if (bad < 4)
                th_fail(file, line, "%s element %lld of the guarded parent changed "
                        "(view is [%lld, %lld)): now %g, was %g",
                        inside ? "input" : "sentinel", (long long)i, (long long)g->before,
                        (long long)(g->before + g->count), load_value(g->dtype, now, i),
                        load_value(g->dtype, g->expected, i));
            bad++;
        }
    }
    if (bad > 4)
        th_fail(file, line, "... %d guarded elements changed in all", bad);
    return bad == 0;
}

void *th_download_raw_at(const char *file, int line, const ug_tensor *t)
{
    if (!t) {
        th_fail(file, line, "download of a NULL tensor");
        return NULL;
    }
    size_t bytes = ug_tensor_nbytes(t);
    void *host = th_alloc(bytes);
    ug_status s = ug_tensor_download(t, host, bytes);
    if (s != UG_OK) {
        th_fail(file, line, "ug_tensor_download returned %s: %s", ug_status_name(s),
                ug_last_error());
        return NULL;
    }
    return host;
}

double *th_download_at(const char *file, int line, const ug_tensor *t)
{
    void *raw = th_download_raw_at(file, line, t);
    if (!raw)
        return NULL;
    int64_t n = ug_tensor_numel(t);
    ug_dtype dtype = ug_tensor_dtype(t);
    double *v = th_alloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = load_value(dtype, raw, i);
    return v;
}

bool th_check_tensor_at(const char *file, int line, const ug_tensor *t, ug_dtype dtype,
                        int ndim, const int64_t *shape)
{
    if (!t) {
        th_fail(file, line, "tensor is NULL");
        return false;
    }
    bool ok = true;
    if (ug_tensor_dtype(t) != dtype) {
        th_fail(file, line, "dtype is %s, expected %s", ug_dtype_name(ug_tensor_dtype(t)),
                ug_dtype_name(dtype));
        ok = false;
    }
    int nd = ug_tensor_ndim(t);
    int64_t got[UG_MAX_DIMS] = {0};
    if (nd >= 0 && nd <= UG_MAX_DIMS)
        ug_tensor_shape(t, got);
    bool same = nd == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = got[i] == shape[i];
    if (!same) {
        char a[160], b[160];
        th_fail(file, line, "shape is %s (ndim %d), expected %s (ndim %d)",
                th_shape_str(nd >= 0 && nd <= UG_MAX_DIMS ? nd : 0, got, a, sizeof a), nd,
                th_shape_str(ndim, shape, b, sizeof b), ndim);
        ok = false;
    }
    if (ug_tensor_numel(t) != ref_numel(ndim, shape)) {
        th_fail(file, line, "numel is %lld, expected %lld", (long long)ug_tensor_numel(t),
                (long long)ref_numel(ndim, shape));
        ok = false;
    }
    return ok;
}

/* ---- comparison ---- */

double th_nmse(const double *got, const double *ref, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(got[i]))
            continue;
        double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? num / den : num; /* all-zero ref: the absolute error energy */
}

bool th_compare_at(const char *file, int line, const char *what, const double *got,
                   const double *ref, int64_t n, double tol)
{
    if (!got || !ref) {
        th_fail(file, line, "%s: nothing to compare", what);
        return false;
    }
    int special = 0;
    for (int64_t i = 0; i < n; i++) {
        bool gn = isnan(got[i]), rn = isnan(ref[i]);
        bool gi = isinf(got[i]), ri = isinf(ref[i]);
        bool bad = gn != rn || gi != ri || (ri && got[i] != ref[i]);
        if (bad) {
            if (special < 5)
                th_fail(file, line, "%s: element %lld is %g, expected %g (NaN/inf positions differ)",
                        what, (long long)i, got[i], ref[i]);
            special++;
        }
    }
    if (special > 5)
        th_fail(file, line, "%s: %d elements differ in NaN/inf", what, special);
    double nmse = th_nmse(got, ref, n);
    bool ok = special == 0 && nmse <= tol && !isnan(nmse);
    if (!(nmse <= tol)) {
        int64_t worst = 0;
        double worst_d = -1.0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs(got[i] - ref[i]);
            if (isfinite(d) && d > worst_d) {
                worst_d = d;
                worst = i;
            }
        }
        th_fail(file, line, "%s: NMSE %.3e > %.1e over %lld elements; worst element %lld is "
                "%.9g, expected %.9g", what, nmse, tol, (long long)n, (long long)worst,
                n ? got[worst] : 0.0, n ? ref[worst] : 0.0);
    }
    return ok;
}

bool th_compare_bits_at(const char *file, int line, const char *what, const void *got,
                        const void *ref, int64_t n, size_t size)
{
    if (!got || !ref) {
        th_fail(file, line, "%s: nothing to compare", what);
        return false;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *g = (const unsigned char *)got + (size_t)i * size;
        const unsigned char *r = (const unsigned char *)ref + (size_t)i * size;
        if (memcmp(g, r, size) != 0) {
            if (bad < 5) {
                uint32_t gv = 0, rv = 0;
                memcpy(&gv, g, size < 4 ? size : 4);
                memcpy(&rv, r, size < 4 ? size : 4);
                double gd = size == 4 ? (double)*(const float *)(const void *)g : ref_f16_value((uint16_t)gv);
                double rd = size == 4 ? (double)*(const float *)(const void *)r : ref_f16_value((uint16_t)rv);
                th_fail(file, line, "%s: element %lld is 0x%08x (%.9g), expected 0x%08x (%.9g)",
                        what, (long long)i, gv, gd, rv, rd);
            }
            bad++;
        }
    }
    if (bad > 5)
        th_fail(file, line, "%s: %lld of %lld elements differ", what, (long long)bad, (long long)n);
    return bad == 0;
}

/* ---- devices ---- */

ug_memory_stats th_stats(ug_device *dev)
{
    ug_memory_stats st;
    memset(&st, 0, sizeof st);
    ug_status s = ug_memory_get_stats(dev, &st);
    if (s != UG_OK)
        th_fail(TH_LOC, "ug_memory_get_stats returned %s: %s", ug_status_name(s), ug_last_error());
    return st;
}

int th_device_count(void) { return th.device_count; }
ug_device *th_device(int index) { return th.devices[index]; }

/* True if id is in the comma-separated list. */
static bool in_list(const char *list, const char *id)
{
    size_t len = strlen(id);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, id, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* Whether a device with this id exists (opened or not). */
static bool device_present(const char *id)
{
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) == UG_OK && strcmp(info.id, id) == 0)
            return true;
    }
    return false;
}

/* Why the backend named by id ("hip" of "hip:0") has no devices, or NULL. */
static const char *backend_reason(const char *id)
{
    size_t len = strcspn(id, ":");
    for (int b = 0; b < ug_backend_count(); b++) {
        const char *name = NULL, *reason = NULL;
        int n = 0;
        if (ug_backend_query(b, &name, &n, &reason) == UG_OK && strlen(name) == len &&
            strncmp(name, id, len) == 0)
            return n == 0 && reason && *reason ? reason : NULL;
    }
    return "this build has no such backend";
}

/* Runs that write kernels caches must not touch $HOME: ctest sets these to
 * build-tree folders; a direct run falls back to /tmp. */
static void default_env(void)
{
    if (!getenv("POCL_CACHE_DIR"))
        setenv("POCL_CACHE_DIR", "/tmp/unigrad-tests-pocl-cache", 1);
    if (!getenv("XDG_CACHE_HOME"))
        setenv("XDG_CACHE_HOME", "/tmp/unigrad-tests-cache", 1);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void result_line(const char *tag, const char *test, const char *device, double secs)
{
    if (device)
        printf("[%s] %s on %s", tag, test, device);
    else
        printf("[%s] %s", tag, test);
    if (th.skipped && !th.failures)
        printf(": skipped, %s", th.skip_reason);
    if (secs >= 1.0)
        printf(" (%.1f s)", secs);
    printf("\n");
    fflush(stdout);
}

int th_main(int argc, char **argv, const th_test *tests, int count)
{
    default_env();
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0, absent = 0;
    const char *focus = getenv("UG_TEST_FOCUS");
    bool need_devices = false;
    for (int i = 0; i < count; i++)
        need_devices |= tests[i].per_device;

    if (need_devices) {
        /* Say which backends have no devices, and why. */
        for (int b = 0; b < ug_backend_count(); b++) {
            const char *name = NULL, *reason = NULL;
            int n = 0;
            if (ug_backend_query(b, &name, &n, &reason) == UG_OK && n == 0)
                printf("note: backend %s has no devices: %s\n", name ? name : "?",
                       reason ? reason : "(no reason given)");
        }
        const char *only = getenv("UG_TEST_DEVICES");
        int total = ug_device_count();
        for (int i = 0; i < total && th.device_count < TH_MAX_DEVICES; i++) {
            ug_device_info info;
            memset(&info, 0, sizeof info);
            ug_status s = ug_device_info_at(i, &info);
            if (s != UG_OK) {
                printf("[FAIL] ug_device_info_at(%d) returned %s: %s\n", i, ug_status_name(s),
                       ug_last_error());
                failed++;
                continue;
            }
            if (only && *only && !in_list(only, info.id))
                continue;
            ug_device *dev = NULL;
            s = ug_device_open(info.id, &dev);
            if (s != UG_OK || !dev) {
                /* A device that is present must open. */
                printf("[FAIL] open %s returned %s: %s\n", info.id, ug_status_name(s),
                       ug_last_error());
                failed++;
                continue;
            }
            printf("device %s: %s, %s (%s)\n", info.id, info.name, info.vendor, info.driver);
            th.devices[th.device_count++] = dev;
        }
        /* Every device asked for by name must exist. */
        if (only && *only) {
            for (const char *p = only; *p;) {
                const char *end = strchr(p, ',');
                size_t n = end ? (size_t)(end - p) : strlen(p);
                char id[64];
                snprintf(id, sizeof id, "%.*s", (int)(n < 63 ? n : 63), p);
                bool found = false;
                for (int d = 0; d < th.device_count; d++)
                    found |= strcmp(ug_device_name(th.devices[d]), id) == 0;
                if (!found && id[0]) {
                    /* Absent hardware skips the run with its reason, unless
                     * the run requires it (CI: UG_TEST_REQUIRED_DEVICES). */
                    const char *required = getenv("UG_TEST_REQUIRED_DEVICES");
                    if (device_present(id) || (required && in_list(required, id))) {
                        printf("[FAIL] UG_TEST_DEVICES names %s, which is %s\n", id,
                               device_present(id) ? "present but did not open" : "required but not present");
                        failed++;
                    } else {
                        const char *why = backend_reason(id);
                        printf("[SKIP] %s is not present on this machine%s%s\n", id, why ? ": " : "", why ? why : "");
                        absent++;
                    }
                }
                if (!end)
                    break;
                p = end + 1;
            }
        }
        if (absent > 0 && failed == 0) {
            for (int d = 0; d < th.device_count; d++)
                ug_device_close(th.devices[d]);
            printf("0 passed, 0 failed, 1 skipped\n");
            return TH_SKIP_EXIT;
        }
        if (th.device_count == 0) {
            printf("[FAIL] no device to test\n");
            failed++;
        }
    }

    double start_all = now_seconds();
    for (int t = 0; t < count; t++) {
        if (filter && !strstr(tests[t].name, filter))
            continue;
        int runs = tests[t].per_device ? th.device_count : 1;
        for (int d = 0; d < runs; d++) {
            ug_device *dev = tests[t].per_device ? th.devices[d] : NULL;
            /* UG_TEST_FOCUS: per-device tests run on that device only, while
             * tests across devices still see every device listed. */
            if (dev && focus && *focus && strcmp(ug_device_name(dev), focus) != 0)
                continue;
            th.test = tests[t].name;
            th.device = dev ? ug_device_name(dev) : NULL;
            th.failures = 0;
            th.skipped = false;
            th.skip_reason[0] = '\0';
            th.context[0] = '\0';
            th.custom_sentinel = false;
            th_seed(0x5eed0000u + (uint64_t)t);
            ug_clear_error();
            uint64_t before[TH_MAX_DEVICES];
            for (int i = 0; i < th.device_count; i++)
                before[i] = th_stats(th.devices[i]).bytes_in_use;
            double t0 = now_seconds();
            tests[t].fn(dev);
            release_all();
            th.context[0] = '\0';
            /* Everything the test made is freed: the pools must agree. */
            for (int i = 0; i < th.device_count; i++) {
                ug_device_synchronize(th.devices[i]);
                uint64_t after = th_stats(th.devices[i]).bytes_in_use;
                if (after != before[i])
                    th_fail(TH_LOC, "leak: bytes_in_use on %s was %llu before the test and "
                            "%llu after every tensor was freed", ug_device_name(th.devices[i]),
                            (unsigned long long)before[i], (unsigned long long)after);
            }
            double secs = now_seconds() - t0;
            if (th.failures) {
                failed++;
                result_line("FAIL", th.test, th.device, secs);
            } else if (th.skipped) {
                skipped++;
                result_line("SKIP", th.test, th.device, secs);
            } else {
                passed++;
                result_line(" OK ", th.test, th.device, secs);
            }
        }
    }
    for (int d = 0; d < th.device_count; d++)
        ug_device_close(th.devices[d]);
    th.device_count = 0;
    free(th.tensors.items);
    free(th.blocks.items);
    printf("total time %.1f s\n", now_seconds() - start_all);
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
}
