/* Convolutions through the vendor's library (conv_library.h: cuDNN or
 * MIOpen), the core's conv_plan and conv2d entries. The core asks at plan
 * time whether the library runs a pass and with how much workspace; the
 * answer, and the algorithm, are fixed per shape for the device's life:
 *
 * - By default the algorithm is the fastest of the library's candidates,
 *   timed by the library at the shape's first plan (cudnnFind*, as
 *   torch.backends.cudnn.benchmark; MIOpen's exhaustive find). The choice
 *   is cached per device, driver and library version through the core's
 *   tuning cache (written atomically), so a later process skips the
 *   timing; a damaged cache is ignored with a warning and measured again.
 * - Deterministic mode (ug_conv_args.deterministic) takes the library's
 *   fixed deterministic algorithm, untimed and uncached.
 * - A search that fails, or a library that does not take the shape, leaves
 *   the pass to the core's im2col + GEMM: tuning never fails a product.
 *
 * Each queue (stream) gets its own library handle at its first
 * convolution, outside any capture: the first step of a replayed graph is
 * launched, which creates it before the second is captured. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/choices.h"
#include "backends/hip/conv_library.h"

/* What identifies a pass: the core's arguments less the views. */
typedef struct plan_key {
    ug_hip_conv_shape shape;
    bool deterministic;
} plan_key;

typedef struct plan_entry {
    plan_key key;
    bool runs;
    ug_hip_conv_algo algo;
    bool timed_here; /* searched by this process (else cached, or fixed) */
} plan_entry;

struct ug_hip_convs {
    pthread_mutex_t lock;
    plan_entry *plans;
    int count, capacity;
    char device_key[400]; /* the device and its driver, for the cache key */
    ug_hip_choice_file file;
};

/* The library, loaded once per process. */
static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_tried, g_loaded;
static char g_version[32], g_why[200];

static const ug_hip_conv_library *library(void)
{
    pthread_mutex_lock(&g_load_lock);
    if (!g_tried) {
        const ug_hip_conv_library *lib = ug_hip_conv_vendor();
        g_loaded = lib->load(g_version, sizeof g_version, g_why, sizeof g_why);
        g_tried = true;
    }
    bool loaded = g_loaded;
    pthread_mutex_unlock(&g_load_lock);
    return loaded ? ug_hip_conv_vendor() : NULL;
}

const char *ug_hip_conv_path(void)
{
    static char text[240];
    const ug_hip_conv_library *lib = library();
    if (lib)
        snprintf(text, sizeof text, "%s %s", lib->label, g_version);
    else
        snprintf(text, sizeof text, "im2col (%s)", g_why);
    return text;
}

static const char *pass_name(ug_conv_pass pass)
{
    return pass == UG_CONV_FORWARD ? "forward" : pass == UG_CONV_BACKWARD_DATA ? "data" : "weights";
}

/* args' geometry in ints, or false where a size does not fit one (or the
 * tensors' element count does not: the libraries index with ints). */
static bool shape_of(const ug_conv_args *a, ug_hip_conv_shape *s)
{
    const ug_window2d *w = &a->win;
    const int64_t sizes[] = {w->n, w->c, w->h, w->w, a->oc, w->oh, w->ow};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < 1 || sizes[i] > INT_MAX)
            return false;
    if (w->n * w->c * w->h * w->w > INT_MAX || w->n * a->oc * w->oh * w->ow > INT_MAX)
        return false;
    /* The padded image and the dilated window, which the libraries compute
     * in int too. */
    if (w->h + 2 * (int64_t)w->ph > INT_MAX || w->w + 2 * (int64_t)w->pw > INT_MAX ||
        (int64_t)w->dh * (w->kh - 1) + 1 > INT_MAX || (int64_t)w->dw * (w->kw - 1) + 1 > INT_MAX)
        return false;
    *s = ug_hip_conv_shape{a->pass, (int)w->n, (int)w->c, (int)w->h, (int)w->w, (int)a->oc,
                           (int)w->oh, (int)w->ow, w->kh, w->kw, w->sh, w->sw, w->ph, w->pw,
                           w->dh, w->dw, a->groups, a->pass == UG_CONV_FORWARD && a->with_bias};
    return true;
}

static bool same_shape(const ug_hip_conv_shape *a, const ug_hip_conv_shape *b)
{
    return a->pass == b->pass && a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w &&
           a->oc == b->oc && a->oh == b->oh && a->ow == b->ow && a->kh == b->kh &&
           a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->ph == b->ph &&
           a->pw == b->pw && a->dh == b->dh && a->dw == b->dw && a->groups == b->groups &&
           a->bias == b->bias;
}

/* "forward pass of x 128x1x28x28, weight 32x1x3x3, stride 1x1, padding
 * 1x1", dilation and groups only where not 1. */
static void describe(const ug_hip_conv_shape *s, char *out, size_t len)
{
    int n = snprintf(out, len, "%s pass of x %dx%dx%dx%d, weight %dx%dx%dx%d, stride %dx%d, padding %dx%d",
                     pass_name(s->pass), s->n, s->c, s->h, s->w, s->oc, s->c / s->groups, s->kh,
                     s->kw, s->sh, s->sw, s->ph, s->pw);
    if (n > 0 && (size_t)n < len && (s->dh != 1 || s->dw != 1))
        n += snprintf(out + n, len - (size_t)n, ", dilation %dx%d", s->dh, s->dw);
    if (n > 0 && (size_t)n < len && s->groups != 1)
        snprintf(out + n, len - (size_t)n, ", %d groups", s->groups);
}

/* ---- the cache file ------------------------------------------------------ */

/* Everything a choice depends on: the library's version, the device, its
 * driver, and the math (f32, no tensor-core rounding). */
static void cache_key(const ug_hip_convs *c, char *out, size_t len)
{
    snprintf(out, len, "%s %s; %s; f32", ug_hip_conv_vendor()->label, g_version, c->device_key);
}

static int format_line(const plan_entry *e, char *out, size_t len)
{
    const ug_hip_conv_shape *s = &e->key.shape;
    return snprintf(out, len, "%s %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %zu %.6g\n",
                    pass_name(s->pass), s->n, s->c, s->h, s->w, s->oc, s->oh, s->ow, s->kh, s->kw,
                    s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->groups, (int)s->bias,
                    e->algo.algo, e->algo.workspace, (double)e->algo.ms);
}

static bool parse_line(const char *line, plan_entry *e)
{
    char pass[16];
    int bias = 0, used = 0;
    ug_hip_conv_shape *s = &e->key.shape;
    *e = plan_entry{};
    if (sscanf(line, "%15s %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %zu %f%n", pass,
               &s->n, &s->c, &s->h, &s->w, &s->oc, &s->oh, &s->ow, &s->kh, &s->kw, &s->sh,
               &s->sw, &s->ph, &s->pw, &s->dh, &s->dw, &s->groups, &bias, &e->algo.algo,
               &e->algo.workspace, &e->algo.ms, &used) != 21 ||
        (line[used] != '\n' && line[used] != '\0'))
        return false;
    if (strcmp(pass, "forward") == 0)
        s->pass = UG_CONV_FORWARD;
    else if (strcmp(pass, "data") == 0)
        s->pass = UG_CONV_BACKWARD_DATA;
    else if (strcmp(pass, "weights") == 0)
        s->pass = UG_CONV_BACKWARD_WEIGHTS;
    else
        return false;
    s->bias = bias != 0;
    e->runs = true;
    /* Values no search could have written make the whole file suspect. */
    return s->n > 0 && s->c > 0 && s->h > 0 && s->w > 0 && s->oc > 0 && s->oh > 0 && s->ow > 0 &&
           s->kh > 0 && s->kw > 0 && s->sh > 0 && s->sw > 0 && s->ph >= 0 && s->pw >= 0 &&
           s->dh > 0 && s->dw > 0 && s->groups > 0 && (bias == 0 || bias == 1) &&
           e->algo.algo >= 0 && e->algo.workspace <= UG_HIP_CONV_WORKSPACE_LIMIT;
}

/* The cached choice for a shape: the reader of choices.h. */
typedef struct conv_sought {
    const ug_hip_conv_shape *shape;
    ug_hip_conv_algo *out;
} conv_sought;

static int read_choice(const char *line, void *ctx)
{
    const conv_sought *sought = (const conv_sought *)ctx;
    plan_entry e;
    if (!parse_line(line, &e))
        return UG_HIP_CHOICE_UNREADABLE;
    if (!same_shape(&e.key.shape, sought->shape))
        return UG_HIP_CHOICE_OTHER;
    *sought->out = e.algo;
    return UG_HIP_CHOICE_FOUND;
}

/* The cached choice for shape, if the device's file has a sound one. A
 * damaged file is reported once per device and then passed over (the next
 * store replaces it). */
static bool cached_choice(ug_hip_convs *c, const ug_hip_conv_shape *shape, ug_hip_conv_algo *out,
                          char *text)
{
    char key[600];
    cache_key(c, key, sizeof key);
    conv_sought sought = {shape, out};
    return ug_hip_choices_find(&c->file, key, text, read_choice, &sought);
}

/* Adds e's line to the device's cache file. */
static void store_choice(ug_hip_convs *c, const plan_entry *e, char *text)
{
    char line[UG_HIP_CHOICE_LINE_MAX], key[600];
    cache_key(c, key, sizeof key);
    const int n = format_line(e, line, sizeof line);
    if (n > 0 && (size_t)n < sizeof line)
        ug_hip_choices_add(&c->file, key, line, text);
}

/* ---- handles and plans --------------------------------------------------- */

/* The current queue's handle, made at its first convolution. */
static ug_status queue_handle(ug_bdev *dev, const ug_hip_conv_library *lib, void **out)
{
    ug_hip_queue *q = ug_hip_current(dev);
    if (!q->dnn) {
        int rc = lib->open(&q->dnn, q->stream);
        (void)hipGetLastError();
        if (rc != 0) {
            q->dnn = NULL;
            return ug_hip_host->set_error(UG_ERR_BACKEND, "%s: creating a %s handle returned status %d",
                                          UG_HIP_BACKEND, lib->label, rc);
        }
    }
    *out = q->dnn;
    return UG_OK;
}

ug_status ug_hip_dnn_handle(ug_bdev *dev, void **out)
{
    const ug_hip_conv_library *lib = library();
    if (!lib)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: %s", UG_HIP_BACKEND, g_why);
    return queue_handle(dev, lib, out);
}

void ug_hip_conv_close(ug_hip_queue *q)
{
    if (q->dnn)
        ug_hip_conv_vendor()->close(q->dnn);
    q->dnn = NULL;
}

ug_status ug_hip_convs_open(ug_bdev *dev, const char *device_key)
{
    dev->convs = (ug_hip_convs *)calloc(1, sizeof *dev->convs);
    if (!dev->convs)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory",
                                      UG_HIP_BACKEND);
    pthread_mutex_init(&dev->convs->lock, NULL);
    snprintf(dev->convs->device_key, sizeof dev->convs->device_key, "%s", device_key);
    ug_hip_choice_file *f = &dev->convs->file;
    f->name = ug_hip_conv_vendor()->cache_name;
    f->header = "unigrad convolution choices 1\n";
    snprintf(f->what, sizeof f->what, "the %s algorithm cache", ug_hip_conv_vendor()->label);
    return UG_OK;
}

void ug_hip_convs_close(ug_bdev *dev)
{
    if (!dev->convs)
        return;
    pthread_mutex_destroy(&dev->convs->lock);
    free(dev->convs->plans);
    free(dev->convs);
    dev->convs = NULL;
}

/* Chooses the algorithm of a new key: fixed, cached or searched. false
 * (with a warning where something failed) leaves the pass to im2col. */
static bool choose(ug_bdev *dev, const ug_hip_conv_library *lib, plan_entry *e)
{
    ug_hip_convs *c = dev->convs;
    char what[256];
    void *handle = NULL;
    ug_status st = queue_handle(dev, lib, &handle);
    if (st == UG_OK && e->key.deterministic) {
        st = lib->fixed(handle, &e->key.shape, &e->algo);
        return st == UG_OK;
    }
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX);
    if (!text)
        return false;
    bool chosen = false;
    if (st == UG_OK && !(chosen = cached_choice(c, &e->key.shape, &e->algo, text))) {
        ug_hip_conv_algo found[UG_HIP_CONV_MAX_ALGOS];
        int count = 0;
        st = lib->search(handle, &e->key.shape, UG_HIP_CONV_WORKSPACE_LIMIT, found,
                         UG_HIP_CONV_MAX_ALGOS, &count);
        if (st == UG_OK && count > 0) {
            e->algo = found[0];
            e->timed_here = chosen = true;
            store_choice(c, e, text);
        }
    }
    free(text);
    if (st != UG_OK) {
        describe(&e->key.shape, what, sizeof what);
        ug_hip_host->warn("%s: %s could not choose an algorithm for the %s (%s); it runs as "
                          "im2col + GEMM", UG_HIP_BACKEND, lib->label, what,
                          ug_hip_host->last_error());
    }
    return chosen;
}

/* The plan of args' pass, made at its first use; false where the library
 * does not run it. The caller holds no lock. */
static bool plan_of(ug_bdev *dev, const ug_conv_args *args, plan_entry *out)
{
    const ug_hip_conv_library *lib = library();
    plan_key key{};
    if (!lib || !dev->convs || !shape_of(args, &key.shape) || args->dtype != UG_F32 || args->out_dtype != UG_F32 ||
        (args->with_bias && args->bias_dtype != UG_F32)) /* its descriptors are f32 */
        return false;
    key.deterministic = args->deterministic;
    ug_hip_convs *c = dev->convs;
    /* Held through a search: another thread planning the same shape waits
     * for its answer instead of timing it again. */
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->count; i++)
        if (same_shape(&c->plans[i].key.shape, &key.shape) &&
            c->plans[i].key.deterministic == key.deterministic) {
            *out = c->plans[i];
            pthread_mutex_unlock(&c->lock);
            return out->runs;
        }
    plan_entry e{};
    e.key = key;
    e.runs = choose(dev, lib, &e);
    if (c->count == c->capacity) {
        int capacity = c->capacity ? 2 * c->capacity : 16;
        plan_entry *grown = (plan_entry *)realloc(c->plans, (size_t)capacity * sizeof *grown);
        if (grown) {
            c->plans = grown;
            c->capacity = capacity;
        }
    }
    if (c->count < c->capacity) /* else planned again next time */
        c->plans[c->count++] = e;
    pthread_mutex_unlock(&c->lock);
    *out = e;
    return e.runs;
}

ug_status ug_hip_conv_plan(ug_bdev *dev, const ug_conv_args *args, bool *runs,
                           size_t *workspace_bytes)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    plan_entry e;
    *runs = plan_of(dev, args, &e);
    *workspace_bytes = *runs ? e.algo.workspace : 0;
    return UG_OK;
}

ug_status ug_hip_conv2d(ug_bdev *dev, const ug_conv_args *a)
{
    UG_BACKEND_TRY(ug_hip_enter(dev));
    plan_entry e;
    if (!plan_of(dev, a, &e))
        return ug_hip_host->set_error(UG_ERR_STATE, "%s: conv2d called for a pass that conv_plan "
                                      "left to im2col", UG_HIP_BACKEND);
    if (a->workspace_bytes < e.algo.workspace)
        return ug_hip_host->set_error(UG_ERR_STATE, "%s: conv2d given %zu bytes of workspace; its "
                                      "algorithm needs %zu", UG_HIP_BACKEND, a->workspace_bytes,
                                      e.algo.workspace);
    const ug_hip_conv_library *lib = ug_hip_conv_vendor();
    void *handle = NULL;
    UG_BACKEND_TRY(queue_handle(dev, lib, &handle));
    return lib->run(handle, &e.key.shape, e.algo.algo, a);
}

typedef struct report_text {
    char *text;
    size_t len, used;
} report_text;

static void append(void *ctx, const char *line)
{
    report_text *r = (report_text *)ctx;
    if (r->used < r->len) {
        const int n = snprintf(r->text + r->used, r->len - r->used, "%s", line);
        r->used += n > 0 ? (size_t)n : 0;
    }
}

/* Lists the GEMM and attention choices (gemm_choice.cpp,
 * attention_choice.cpp), then the device's convolution
 * plans of this process and the choices its cache file holds (any
 * process's): nothing is timed again here, as a plan's answer must never
 * change while graphs hold its workspace. */
ug_status ug_hip_autotune(ug_bdev *dev, char *report, size_t report_len)
{
    const ug_hip_conv_library *lib = library();
    if (report_len)
        report[0] = '\0';
    report_text gemms = {report, report_len, 0};
    ug_hip_gemm_report(dev, append, &gemms);
    ug_hip_attention_report(dev, append, &gemms);
    size_t used = gemms.used;
#define SAY(...)                                                                        \
    do {                                                                                \
        if (used < report_len) {                                                        \
            int n_ = snprintf(report + used, report_len - used, __VA_ARGS__);           \
            used += n_ > 0 ? (size_t)n_ : 0;                                            \
        }                                                                               \
    } while (0)
    if (!lib) {
        SAY("%s: convolutions run as im2col + GEMM (%s); nothing to tune\n", UG_HIP_BACKEND, g_why);
        return UG_OK;
    }
    UG_BACKEND_TRY(ug_hip_enter(dev));
    char what[256];
    ug_hip_convs *c = dev->convs;
    pthread_mutex_lock(&c->lock);
    SAY("%s %s: convolution algorithms, timed at each shape's first plan\n", lib->label, g_version);
    SAY("planned in this process: %d\n", c->count);
    for (int i = 0; i < c->count; i++) {
        const plan_entry *e = &c->plans[i];
        describe(&e->key.shape, what, sizeof what);
        if (!e->runs)
            SAY("  %s\n      im2col + GEMM\n", what);
        else if (e->key.deterministic)
            SAY("  %s\n      %s (deterministic, untimed)\n", what,
                lib->algo_name(e->key.shape.pass, e->algo.algo));
        else
            SAY("  %s\n      %s, %.4f ms, %zu bytes of workspace (%s)\n", what,
                lib->algo_name(e->key.shape.pass, e->algo.algo), (double)e->algo.ms, e->algo.workspace,
                e->timed_here ? "timed now" : "from the cache");
    }
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX), key[600], line[UG_HIP_CHOICE_LINE_MAX];
    cache_key(c, key, sizeof key);
    const char *at = text ? ug_hip_choices_read(&c->file, key, text) : NULL;
    if (at)
        SAY("cached for this device and driver:\n");
    while (at && ug_hip_choices_next(&at, line, sizeof line)) {
        plan_entry e;
        if (parse_line(line, &e)) {
            describe(&e.key.shape, what, sizeof what);
            SAY("  %s\n      %s, %.4f ms\n", what, lib->algo_name(e.key.shape.pass, e.algo.algo),
                (double)e.algo.ms);
        }
    }
    free(text);
    pthread_mutex_unlock(&c->lock);
#undef SAY
    return UG_OK;
}
