/* Which kernels run an attention pass: the module's own (attention.hip) or
 * the vendor library's fused attention (attention_cudnn.cpp: cuDNN in the
 * CUDA flavour; the HIP flavour has none). A library's flash attention
 * beats the own one-row-per-thread kernels where it takes the shape (f16
 * and bf16 on the GPUs it supports), but not everywhere, so, as for the
 * GEMMs (gemm_choice.cpp), each pass and shape met first outside a capture
 * times both on the caller's operands (each writes every element of the
 * pass's outputs, which the chosen path then writes again), and the faster
 * runs that shape from then on: fixed for the device's life and cached per
 * device, driver and library version (choices.h).
 *
 * The own kernels run, untimed, where the library cannot take the pass
 * (attention_cudnn.cpp says why), in deterministic mode (the library's
 * gradient accumulates dq in an order that varies), with UG_AUTOTUNE=0, in
 * a capture, and with UG_ATTENTION=own; UG_ATTENTION=cudnn runs every pass
 * the library takes through it, untimed (the tests' way to reach it). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/choices.h"

constexpr int TIMED_RUNS = 3;
/* As the GEMMs' hold (gemm_choice.cpp): the GPU busy while the host
 * queues the timed rounds. */
constexpr long long HOLD_CYCLES = 1LL << 23;

typedef struct attention_shape {
    int backward, dtype, causal, masked;
    int64_t batch, heads, q_len, kv_len, head_dim;
} attention_shape;

static const char *const PATH_NAMES[UG_HIP_ATTENTION_PATHS] = {"own", "library"};

typedef struct attention_choice {
    attention_shape shape;
    int path;
    float ms[UG_HIP_ATTENTION_PATHS]; /* median times; -1: not timed, or refused */
    bool timed_here;
} attention_choice;

struct ug_hip_attentions {
    pthread_mutex_t lock;
    attention_choice *choices;
    int count, capacity;
    char key[600]; /* the library, the device and its driver */
    ug_hip_choice_file file;
};

static attention_shape shape_of(const ug_attention_args *a)
{
    return attention_shape{a->backward, (int)a->q.dtype, a->causal, a->mask.mem != NULL,
                           a->batch, a->heads, a->q_len, a->kv_len, a->head_dim};
}

static bool same_shape(const attention_shape *a, const attention_shape *b)
{
    return memcmp(a, b, sizeof *a) == 0; /* no padding: four ints, then int64s */
}

static const char *dtype_name(int t) { return t == UG_F16 ? "f16" : t == UG_BF16 ? "bf16" : "f32"; }

/* "backward bf16 64 6 256 256 64 causal none library 1.25 0.61": the pass,
 * the type, batch heads q_len kv_len head_dim, causal or full, mask or
 * none, the path, then each path's time in ms (-1: not one). */
static int format_line(const attention_choice *c, char *out, size_t len)
{
    const attention_shape *s = &c->shape;
    return snprintf(out, len, "%s %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %s %s %s %.6g %.6g\n",
                    s->backward ? "backward" : "forward", dtype_name(s->dtype), s->batch, s->heads, s->q_len,
                    s->kv_len, s->head_dim, s->causal ? "causal" : "full", s->masked ? "mask" : "none",
                    PATH_NAMES[c->path], (double)c->ms[0], (double)c->ms[1]);
}

static bool parse_line(const char *line, attention_choice *c)
{
    char pass[12], type[8], causal[8], mask[8], path[12];
    int used = 0;
    *c = attention_choice{};
    attention_shape *s = &c->shape;
    if (sscanf(line, "%11s %7s %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %7s %7s %11s %f %f%n",
               pass, type, &s->batch, &s->heads, &s->q_len, &s->kv_len, &s->head_dim, causal, mask, path,
               &c->ms[0], &c->ms[1], &used) != 12 ||
        line[used] != '\0')
        return false;
    s->backward = !strcmp(pass, "backward");
    s->dtype = !strcmp(type, "f16") ? UG_F16 : !strcmp(type, "bf16") ? UG_BF16 : -1;
    s->causal = !strcmp(causal, "causal");
    s->masked = !strcmp(mask, "mask");
    c->path = !strcmp(path, "own") ? UG_HIP_ATTENTION_OWN : !strcmp(path, "library") ? UG_HIP_ATTENTION_LIBRARY : -1;
    /* Values no timing could have written make the whole file suspect. */
    return (s->backward || !strcmp(pass, "forward")) && s->dtype >= 0 && (s->causal || !strcmp(causal, "full")) &&
           (s->masked || !strcmp(mask, "none")) && c->path >= 0 && s->batch > 0 && s->heads > 0 &&
           s->q_len > 0 && s->kv_len > 0 && s->head_dim > 0;
}

static int read_choice(const char *line, void *ctx)
{
    attention_choice *out = (attention_choice *)ctx, c;
    if (!parse_line(line, &c))
        return UG_HIP_CHOICE_UNREADABLE;
    if (!same_shape(&c.shape, &out->shape))
        return UG_HIP_CHOICE_OTHER;
    *out = c;
    return UG_HIP_CHOICE_FOUND;
}

static ug_status run_path(ug_bdev *dev, int path, const ug_attention_args *a)
{
    return path == UG_HIP_ATTENTION_LIBRARY ? ug_hip_library_attention(dev, a) : ug_hip_attention_own(dev, a);
}

/* Times both paths on a's operands: the median of TIMED_RUNS rounds after
 * a warm-up each (the library's first run also makes its plan), behind a
 * hold. A library that refuses the pass's graph loses with time -1; false:
 * nothing could be timed. */
static bool time_paths(ug_bdev *dev, const ug_attention_args *a, attention_choice *c)
{
    constexpr int EVENTS = 1 + TIMED_RUNS * UG_HIP_ATTENTION_PATHS;
    bool runs[UG_HIP_ATTENTION_PATHS];
    for (int p = 0; p < UG_HIP_ATTENTION_PATHS; p++)
        runs[p] = run_path(dev, p, a) == UG_OK;
    (void)hipGetLastError();
    if (!runs[UG_HIP_ATTENTION_OWN])
        return false;
    hipEvent_t ev[EVENTS] = {};
    bool ok = true;
    for (int i = 0; ok && i < EVENTS; i++)
        ok = hipEventCreateWithFlags(&ev[i], 0) == hipSuccess;
    hipStream_t stream = ug_hip_current(dev)->stream;
    ok = ok && ug_hip_gemm_hold(dev, HOLD_CYCLES) == UG_OK && hipEventRecord(ev[0], stream) == hipSuccess;
    for (int r = 0, e = 1; ok && r < TIMED_RUNS; r++)
        for (int p = 0; ok && p < UG_HIP_ATTENTION_PATHS; p++, e++) {
            if (runs[p])
                ok = run_path(dev, p, a) == UG_OK;
            ok = ok && hipEventRecord(ev[e], stream) == hipSuccess;
        }
    ok = ok && hipEventSynchronize(ev[EVENTS - 1]) == hipSuccess;
    float ms[UG_HIP_ATTENTION_PATHS][TIMED_RUNS];
    for (int r = 0, e = 1; ok && r < TIMED_RUNS; r++)
        for (int p = 0; ok && p < UG_HIP_ATTENTION_PATHS; p++, e++)
            ok = hipEventElapsedTime(&ms[p][r], ev[e - 1], ev[e]) == hipSuccess;
    (void)hipGetLastError();
    for (int i = 0; i < EVENTS; i++)
        if (ev[i])
            (void)hipEventDestroy(ev[i]);
    if (!ok)
        return false;
    c->path = UG_HIP_ATTENTION_OWN;
    for (int p = 0; p < UG_HIP_ATTENTION_PATHS; p++) {
        c->ms[p] = -1.0f;
        if (!runs[p])
            continue;
        float *v = ms[p];
        for (int i = 1; i < TIMED_RUNS; i++) /* the median */
            for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                const float t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        c->ms[p] = v[TIMED_RUNS / 2];
        if (c->ms[p] < c->ms[c->path])
            c->path = p;
    }
    c->timed_here = true;
    return true;
}

static bool env_is(const char *name, const char *value)
{
    const char *e = getenv(name);
    return e && strcmp(e, value) == 0;
}

int ug_hip_attention_path(ug_bdev *dev, const ug_attention_args *a)
{
    ug_hip_attentions *t = dev->attentions;
    if (env_is("UG_ATTENTION", "own") || ug_hip_library_attention_refusal(a))
        return UG_HIP_ATTENTION_OWN;
    if (env_is("UG_ATTENTION", "cudnn"))
        return UG_HIP_ATTENTION_LIBRARY;
    if (!t || a->deterministic || env_is("UG_AUTOTUNE", "0"))
        return UG_HIP_ATTENTION_OWN;
    attention_choice c{};
    c.shape = shape_of(a);
    pthread_mutex_lock(&t->lock);
    for (int i = 0; i < t->count; i++)
        if (same_shape(&t->choices[i].shape, &c.shape)) {
            const int path = t->choices[i].path;
            pthread_mutex_unlock(&t->lock);
            return path;
        }
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX);
    bool known = text && ug_hip_choices_find(&t->file, t->key, text, read_choice, &c);
    /* Met first in a capture: the own kernels now, timed at a later pass. */
    if (!known && text && !ug_hip_capturing(dev) && time_paths(dev, a, &c)) {
        known = true;
        char line[UG_HIP_CHOICE_LINE_MAX];
        const int n = format_line(&c, line, sizeof line);
        if (n > 0 && (size_t)n < sizeof line)
            ug_hip_choices_add(&t->file, t->key, line, text);
    }
    free(text);
    if (known && t->count == t->capacity) {
        const int capacity = t->capacity ? 2 * t->capacity : 8;
        attention_choice *grown = (attention_choice *)realloc(t->choices, (size_t)capacity * sizeof *grown);
        if (grown) {
            t->choices = grown;
            t->capacity = capacity;
        }
    }
    if (known && t->count < t->capacity) /* else chosen again next time */
        t->choices[t->count++] = c;
    pthread_mutex_unlock(&t->lock);
    return known ? c.path : UG_HIP_ATTENTION_OWN;
}

ug_status ug_hip_attentions_open(ug_bdev *dev, const char *device_key)
{
    ug_hip_attentions *t = (ug_hip_attentions *)calloc(1, sizeof *t);
    if (!t)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", UG_HIP_BACKEND);
    pthread_mutex_init(&t->lock, NULL);
    snprintf(t->key, sizeof t->key, "%s; %s; attention", ug_hip_library_attention_version(), device_key);
    t->file.name = UG_HIP_BACKEND "-attention";
    t->file.header = "unigrad attention choices 1\n";
    snprintf(t->file.what, sizeof t->file.what, "the attention choices' cache");
    dev->attentions = t;
    return UG_OK;
}

void ug_hip_attentions_close(ug_bdev *dev)
{
    if (!dev->attentions)
        return;
    pthread_mutex_destroy(&dev->attentions->lock);
    free(dev->attentions->choices);
    free(dev->attentions);
    dev->attentions = NULL;
}

/* "  backward bf16 64x6 heads, 256x256 rows, d 64, causal: library
 *   0.6100 ms (timed now) against own 1.2500" */
static void describe(const attention_choice *c, const char *source, char *line, size_t len)
{
    const attention_shape *s = &c->shape;
    int n = snprintf(line, len, "  %s %s %" PRId64 "x%" PRId64 " heads, %" PRId64 "x%" PRId64 " rows, d %" PRId64 "%s%s: %s\n",
                     s->backward ? "backward" : "forward", dtype_name(s->dtype), s->batch, s->heads, s->q_len,
                     s->kv_len, s->head_dim, s->causal ? ", causal" : "", s->masked ? ", masked" : "",
                     PATH_NAMES[c->path]);
    const int other = 1 - c->path;
    if (n > 0 && (size_t)n < len)
        snprintf(line + n, len - (size_t)n, "      %.4f ms (%s) against %s %.4f%s\n", (double)c->ms[c->path], source,
                 PATH_NAMES[other], (double)c->ms[other], c->ms[other] < 0.0f ? " (refused)" : "");
}

void ug_hip_attention_report(ug_bdev *dev, void (*say)(void *ctx, const char *line), void *ctx)
{
    ug_hip_attentions *t = dev->attentions;
    if (!t)
        return;
    char line[2 * UG_HIP_CHOICE_LINE_MAX], cached_line[UG_HIP_CHOICE_LINE_MAX];
    pthread_mutex_lock(&t->lock);
    snprintf(line, sizeof line, "attention: the own kernels, or %s's where faster\nchosen in this process: %d\n",
             ug_hip_library_attention_version(), t->count);
    say(ctx, line);
    for (int i = 0; i < t->count; i++) {
        describe(&t->choices[i], t->choices[i].timed_here ? "timed now" : "from the cache", line, sizeof line);
        say(ctx, line);
    }
    char *text = (char *)malloc(UG_HIP_CHOICES_TEXT_MAX);
    const char *at = text ? ug_hip_choices_read(&t->file, t->key, text) : NULL;
    if (at)
        say(ctx, "cached for this device and driver:\n");
    while (at && ug_hip_choices_next(&at, cached_line, sizeof cached_line)) {
        attention_choice c;
        if (parse_line(cached_line, &c)) {
            describe(&c, "cached", line, sizeof line);
            say(ctx, line);
        }
    }
    free(text);
    pthread_mutex_unlock(&t->lock);
}
