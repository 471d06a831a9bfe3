/* Dynamic loss scaling (ug_loss_scaling) on every device, against
 * torch.cuda.amp.GradScaler's rules worked out by hand, and against Adam's
 * update rule worked out here in double.
 *
 * The model: one parameter p (5 elements) and an input c, with
 *     loss = sum(p * c) + 0.5 * sum(p * p),  so  dloss/dp = c + p.
 * An inf or NaN in c makes the gradient non-finite: that is how a step's
 * overflow is injected.
 *
 * GradScaler's rules (defaults: scale 2^16, growth 2 every 2000 clean steps
 * in a row, backoff 0.5): the gradients are of loss * scale; a step with a
 * non-finite gradient leaves parameters and optimizer state untouched, does
 * not advance the optimizer's step count, multiplies the scale by the
 * backoff and restarts the clean-step count; otherwise the gradients are
 * divided by the scale (then clipped, when clipping is on) and the step is
 * taken. Scales are powers of two, so scaling and unscaling are exact: a
 * scaled run equals the unscaled rule to f32 rounding. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fault.h"
#include "core/io/safetensors.h"
#include "unigrad/checkpoint.h"
#include "harness.h"
#include "train_support.h"

enum { N = 5 };

typedef struct scaled_setup {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_tensor *param;
    ug_value *c;
    ug_tensor *clean, *overflow, *nan;  /* inputs: finite, one inf, one NaN */
    ug_value *graph_loss;
    float p0[N], c0[N];
} scaled_setup;

/* The model on dev with config (same p0 and c0 for every call of a test). */
static bool setup(ug_device *dev, const ug_optimizer_config *config, scaled_setup *s)
{
    th_seed(7);
    for (int i = 0; i < N; i++) {
        s->p0[i] = (float)th_uniform(-1.0, 1.0);
        s->c0[i] = (float)th_uniform(-1.0, 1.0);
    }
    int64_t n = N;
    float with_inf[N], with_nan[N];
    memcpy(with_inf, s->c0, sizeof with_inf);
    memcpy(with_nan, s->c0, sizeof with_nan);
    with_inf[2] = INFINITY;
    with_nan[3] = NAN;
    s->model = ts_model(dev, 1);
    s->clean = ts_tensor_f32(dev, 1, &n, s->c0);
    s->overflow = ts_tensor_f32(dev, 1, &n, with_inf);
    s->nan = ts_tensor_f32(dev, 1, &n, with_nan);
    if (!s->model || !s->clean || !s->overflow || !s->nan)
        return false;
    s->graph = ts_graph(s->model);
    if (!s->graph)
        return false;
    ug_graph *g = s->graph;
    ug_value *p = NULL, *pc = NULL, *pp = NULL, *s1 = NULL, *s2 = NULL, *half = NULL, *loss = NULL;
    ug_status st = ug_model_param(s->model, "p", 1, &n, UG_INIT_UNIFORM, 1.0f, &s->param);
    if (st == UG_OK) st = ug_model_write_param(s->model, "p", s->p0, sizeof s->p0);
    if (st == UG_OK) st = ug_graph_param(g, s->param, &p);
    if (st == UG_OK) st = ug_graph_input(g, "c", UG_F32, 1, &n, &s->c);
    if (st == UG_OK) st = ug_g_mul(g, p, s->c, &pc);
    if (st == UG_OK) st = ug_g_mul(g, p, p, &pp);
    if (st == UG_OK) st = ug_g_sum(g, pc, 0, true, &s1);
    if (st == UG_OK) st = ug_g_sum(g, pp, 0, true, &s2);
    if (st == UG_OK) st = ug_g_scale_shift(g, s2, 0.5f, 0.0f, &half);
    if (st == UG_OK) st = ug_g_add(g, s1, half, &loss);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    s->graph_loss = loss;
    if (st == UG_OK && !(s->opt = ts_optimizer(s->model, config)))
        return false;
    if (st == UG_OK) st = ug_graph_set_optimizer(g, s->opt);
    if (st == UG_OK) st = ug_graph_compile(g);
    if (st == UG_OK) st = ug_graph_bind(g, s->c, s->clean);
    if (st != UG_OK) {
        th_fail(TH_LOC, "building the graph returned %s: %s", ug_status_name(st), ug_last_error());
        return false;
    }
    return true;
}

static ug_optimizer_config scaled_adam(void)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 0.05f;
    c.loss_scaling.enabled = true;
    return c;
}

/* Runs one step on input (rebinding it). */
static bool step_on(scaled_setup *s, ug_tensor *input)
{
    ug_status st = ug_graph_bind(s->graph, s->c, input);
    if (st == UG_OK)
        st = ug_graph_run(s->graph);
    if (st != UG_OK)
        th_fail(TH_LOC, "a step returned %s: %s", ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

static bool read_floats(ug_tensor *t, float *out, size_t bytes)
{
    ug_status st = ug_tensor_download(t, out, bytes);
    if (st != UG_OK)
        th_fail(TH_LOC, "reading a tensor returned %s: %s", ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

static ug_loss_scaler_state scaler_state(const scaled_setup *s)
{
    ug_loss_scaler_state st = {0};
    CHECK_OK(ug_optimizer_loss_scaler(s->opt, &st));
    return st;
}

/* Adam (lr, default betas and eps) on grad = c + p in double, steps clean steps. */
static void adam_reference(const float *p0, const float *c0, float lr, int steps, double *p)
{
    double m[N] = {0}, v[N] = {0};
    for (int i = 0; i < N; i++)
        p[i] = p0[i];
    for (int t = 1; t <= steps; t++) {
        double bc1 = 1.0 - pow(0.9, t), bc2 = 1.0 - pow(0.999, t);
        for (int i = 0; i < N; i++) {
            double g = (double)c0[i] + p[i];
            m[i] = 0.9 * m[i] + 0.1 * g;
            v[i] = 0.999 * v[i] + 0.001 * g * g;
            p[i] -= (double)lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8);
        }
    }
}

static void check_against_adam(const scaled_setup *s, int clean_steps, const char *what)
{
    double want[N];
    float got[N];
    adam_reference(s->p0, s->c0, 0.05f, clean_steps, want);
    if (!read_floats(s->param, got, sizeof got))
        return;
    for (int i = 0; i < N; i++)
        CHECK_MSG(ts_close(got[i], want[i], 1e-5, 1e-6), "%s: p[%d] is %.9g, Adam's rule after %d steps gives %.9g",
                  what, i, (double)got[i], clean_steps, want[i]);
}

TS_HOST_TEST(defaults)
{
    (void)dev;
    ug_loss_scaling d = ug_optimizer_defaults(UG_ADAM).loss_scaling;
    CHECK(!d.enabled);
    CHECK(d.init_scale == 65536.0f && d.growth_factor == 2.0f && d.backoff_factor == 0.5f &&
          d.growth_interval == 2000);
}

/* Scaled steps take Adam's unscaled steps: the scale is divided out. */
TS_TEST(scaled_steps_follow_adam)
{
    ug_optimizer_config c = scaled_adam();
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    for (int k = 0; k < 3; k++)
        if (!step_on(&s, s.clean))
            return;
    check_against_adam(&s, 3, "three scaled steps");
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK(st.scale == 65536.0f && st.clean_steps == 3 && st.skipped_steps == 0);
    CHECK_EQ_I64(ug_optimizer_steps(s.opt), 3);
}

/* An inf, then a NaN: each step is skipped with everything bit for bit as
 * before, the scale halves, and the next clean step is Adam's third (the
 * skipped ones did not advance its count). */
TS_TEST(overflow_skips_the_step)
{
    ug_optimizer_config c = scaled_adam();
    scaled_setup s;
    if (!setup(dev, &c, &s) || !step_on(&s, s.clean) || !step_on(&s, s.clean))
        return;
    float before[3][N];
    ug_tensor *m = NULL, *v = NULL;
    REQUIRE_OK(ug_optimizer_state(s.opt, 0, 0, &m));
    REQUIRE_OK(ug_optimizer_state(s.opt, 0, 1, &v));
    if (!read_floats(s.param, before[0], sizeof before[0]) || !read_floats(m, before[1], sizeof before[1]) ||
        !read_floats(v, before[2], sizeof before[2]))
        return;
    ug_tensor *bad[2] = {s.overflow, s.nan};
    float want_scale[2] = {32768.0f, 16384.0f};
    for (int k = 0; k < 2; k++) {
        th_context("%s in the gradient", k ? "NaN" : "inf");
        if (!step_on(&s, bad[k]))
            return;
        float after[3][N];
        if (!read_floats(s.param, after[0], sizeof after[0]) || !read_floats(m, after[1], sizeof after[1]) ||
            !read_floats(v, after[2], sizeof after[2]))
            return;
        CHECK_MSG(memcmp(before, after, sizeof before) == 0,
                  "the parameter or Adam's moments changed in a skipped step");
        ug_loss_scaler_state st = scaler_state(&s);
        CHECK_MSG(st.scale == want_scale[k] && st.clean_steps == 0 && st.skipped_steps == k + 1,
                  "scale %g, clean steps %lld, skipped %lld; expected %g, 0, %d", (double)st.scale,
                  (long long)st.clean_steps, (long long)st.skipped_steps, (double)want_scale[k], k + 1);
    }
    th_context("%s", "");
    CHECK_EQ_I64(ug_optimizer_steps(s.opt), 4); /* the schedule's position counts every update run */
    if (!step_on(&s, s.clean))
        return;
    check_against_adam(&s, 3, "two clean steps, two skipped, one clean");
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK(st.scale == 16384.0f && st.clean_steps == 1 && st.skipped_steps == 2);
}

/* A scale so large that the scaled gradients overflow while the loss stays
 * finite (what a grown scale does in f16): the step is skipped and the
 * graph's numeric checks, on by default, report nothing, since the gradients
 * they would flag are the scaler's to handle. */
TS_TEST(scaled_overflow_is_not_a_numeric_error)
{
    ug_optimizer_config c = scaled_adam();
    c.loss_scaling.init_scale = 3e38f;
    scaled_setup s;
    if (!setup(dev, &c, &s) || !step_on(&s, s.clean))
        return;
    float loss = 0;
    CHECK_OK(ug_graph_read(s.graph, s.graph_loss, &loss, sizeof loss));
    CHECK(isfinite(loss));
    CHECK_OK(ug_graph_check(s.graph));
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK(st.scale == 1.5e38f && st.skipped_steps == 1);
    float p[N];
    if (read_floats(s.param, p, sizeof p))
        CHECK(memcmp(p, s.p0, sizeof p) == 0);
}

/* The scale doubles after growth_interval clean steps in a row, and not
 * before: 2000 by default. */
TS_TEST(growth_after_2000_clean_steps)
{
    ug_optimizer_config c = scaled_adam();
    c.lr = 1e-4f;
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    for (int k = 0; k < 1999; k++)
        if (!step_on(&s, s.clean))
            return;
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK_MSG(st.scale == 65536.0f && st.clean_steps == 1999, "after 1999 steps: scale %g, clean steps %lld",
              (double)st.scale, (long long)st.clean_steps);
    if (!step_on(&s, s.clean))
        return;
    st = scaler_state(&s);
    CHECK_MSG(st.scale == 131072.0f && st.clean_steps == 0 && st.skipped_steps == 0,
              "after 2000 steps: scale %g, clean steps %lld, skipped %lld; expected 131072, 0, 0",
              (double)st.scale, (long long)st.clean_steps, (long long)st.skipped_steps);
}

/* A hand-worked sequence with growth_interval 3, growth 4, backoff 0.25:
 * clean, clean, inf (the count restarts), clean x3 (growth), clean. */
TS_TEST(growth_and_backoff_sequence)
{
    ug_optimizer_config c = scaled_adam();
    c.loss_scaling.growth_interval = 3;
    c.loss_scaling.growth_factor = 4.0f;
    c.loss_scaling.backoff_factor = 0.25f;
    c.loss_scaling.init_scale = 1024.0f;
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    struct { bool overflow; float scale; int64_t clean, skipped; } want[] = {
        {false, 1024.0f, 1, 0}, {false, 1024.0f, 2, 0}, {true, 256.0f, 0, 1},
        {false, 256.0f, 1, 1},  {false, 256.0f, 2, 1},  {false, 1024.0f, 0, 1}, {false, 1024.0f, 1, 1},
    };
    for (int k = 0; k < (int)(sizeof want / sizeof want[0]); k++) {
        if (!step_on(&s, want[k].overflow ? s.overflow : s.clean))
            return;
        ug_loss_scaler_state st = scaler_state(&s);
        CHECK_MSG(st.scale == want[k].scale && st.clean_steps == want[k].clean && st.skipped_steps == want[k].skipped,
                  "after step %d: scale %g, clean steps %lld, skipped %lld; expected %g, %lld, %lld", k + 1,
                  (double)st.scale, (long long)st.clean_steps, (long long)st.skipped_steps, (double)want[k].scale,
                  (long long)want[k].clean, (long long)want[k].skipped);
    }
    check_against_adam(&s, 6, "six clean steps around a skipped one");
}

/* Clipping sees the unscaled gradients (PyTorch: unscale_, then
 * clip_grad_norm_): the clipped scaled run equals the clipped plain run
 * (test_optim checks that one against PyTorch's rule; the gradient's norm,
 * about 2, is clipped to 0.5). */
TS_TEST(clipping_after_unscaling)
{
    ug_optimizer_config plain = ug_optimizer_defaults(UG_SGD);
    plain.lr = 0.1f;
    plain.max_grad_norm = 0.5f;
    ug_optimizer_config scaled = plain;
    scaled.loss_scaling.enabled = true;
    scaled_setup a, b;
    if (!setup(dev, &plain, &a) || !setup(dev, &scaled, &b))
        return;
    for (int k = 0; k < 3; k++)
        if (!step_on(&a, a.clean) || !step_on(&b, b.clean))
            return;
    float pa[N], pb[N];
    if (!read_floats(a.param, pa, sizeof pa) || !read_floats(b.param, pb, sizeof pb))
        return;
    for (int i = 0; i < N; i++)
        CHECK_MSG(ts_close(pb[i], pa[i], 1e-6, 1e-7), "p[%d]: scaled and clipped %.9g, clipped %.9g", i,
                  (double)pb[i], (double)pa[i]);
}

/* Accumulated micro-batches carry the scale and are unscaled once. */
TS_TEST(accumulation)
{
    ug_optimizer_config c = scaled_adam();
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    for (int step = 0; step < 2; step++) {
        for (int k = 0; k < 3; k++)
            REQUIRE_OK(ug_graph_run_backward(s.graph));
        REQUIRE_OK(ug_graph_run_update(s.graph));
    }
    check_against_adam(&s, 2, "two updates of three accumulated micro-batches");
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK(st.scale == 65536.0f && st.clean_steps == 2);
}

/* 100 scaled steps make the host wait for the device not once. */
TS_TEST(no_host_waits_per_step)
{
    ug_optimizer_config c = scaled_adam();
    c.max_grad_norm = 1.0f;
    scaled_setup s;
    if (!setup(dev, &c, &s) || !step_on(&s, s.clean))
        return;
    REQUIRE_OK(ug_device_synchronize(dev));
    ug_fault_arm(UG_FAULT_HOST_WAIT, INT64_MAX); /* counts, never fails */
    for (int k = 0; k < 100; k++)
        if (!step_on(&s, k == 50 ? s.overflow : s.clean))
            break;
    int64_t waits = ug_fault_events(UG_FAULT_HOST_WAIT);
    ug_fault_arm(UG_FAULT_HOST_WAIT, 0);
    CHECK_MSG(waits == 0, "100 steps waited for the device %lld times", (long long)waits);
    /* the counter counts: reading the state is one wait */
    ug_fault_arm(UG_FAULT_HOST_WAIT, INT64_MAX);
    ug_loss_scaler_state st = scaler_state(&s);
    waits = ug_fault_events(UG_FAULT_HOST_WAIT);
    ug_fault_arm(UG_FAULT_HOST_WAIT, 0);
    CHECK_EQ_I64(waits, 1);
    CHECK(st.skipped_steps == 1 && st.scale == 32768.0f && st.clean_steps == 49);
}

/* The state is readable and settable for checkpoints, and checked. */
TS_TEST(state_round_trip)
{
    ug_optimizer_config c = scaled_adam();
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    REQUIRE_OK(ug_optimizer_set_steps(s.opt, 10));
    ug_loss_scaler_state set = {.scale = 512.0f, .clean_steps = 7, .skipped_steps = 3};
    REQUIRE_OK(ug_optimizer_set_loss_scaler(s.opt, &set));
    ug_loss_scaler_state got = scaler_state(&s);
    CHECK(got.scale == 512.0f && got.clean_steps == 7 && got.skipped_steps == 3);
    if (!step_on(&s, s.clean))
        return;
    got = scaler_state(&s);
    CHECK(got.scale == 512.0f && got.clean_steps == 8 && got.skipped_steps == 3);
    CHECK_EQ_I64(ug_optimizer_steps(s.opt), 11);

    ug_loss_scaler_state bad = set;
    bad.scale = 0.0f;
    CHECK_STATUS(ug_optimizer_set_loss_scaler(s.opt, &bad), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("scale 0");
    bad = set;
    bad.clean_steps = 2000;
    CHECK_STATUS(ug_optimizer_set_loss_scaler(s.opt, &bad), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("clean_steps 2000");
    bad = set;
    bad.skipped_steps = 12;
    CHECK_STATUS(ug_optimizer_set_loss_scaler(s.opt, &bad), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("skipped_steps 12");
    CHECK_STATUS(ug_optimizer_set_loss_scaler(s.opt, NULL), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_loss_scaler(NULL, &got), UG_ERR_INVALID_ARGUMENT);

    /* an optimizer without loss scaling has no scaler state */
    ug_optimizer_config plain = ug_optimizer_defaults(UG_ADAM);
    ug_optimizer *opt = ts_optimizer(s.model, &plain);
    if (!opt)
        return;
    CHECK_STATUS(ug_optimizer_loss_scaler(opt, &got), UG_ERR_STATE);
    CHECK_ERROR_HAS("no loss scaling");
    CHECK_STATUS(ug_optimizer_set_loss_scaler(opt, &set), UG_ERR_STATE);
}

TS_TEST(bad_config)
{
    ug_model *model = ts_model(dev, 1);
    ug_tensor *p = NULL;
    if (!model)
        return;
    REQUIRE_OK(ug_model_param(model, "p", 1, (int64_t[]){4}, UG_INIT_CONSTANT, 0.0f, &p));
    static const char *const what[] = {"init_scale 0", "growth_factor 1", "backoff_factor 1", "growth_interval 0"};
    for (int k = 0; k < 4; k++) {
        ug_optimizer_config c = scaled_adam();
        if (k == 0) c.loss_scaling.init_scale = 0.0f;
        if (k == 1) c.loss_scaling.growth_factor = 1.0f;
        if (k == 2) c.loss_scaling.backoff_factor = 1.0f;
        if (k == 3) c.loss_scaling.growth_interval = 0;
        ug_optimizer *opt = NULL;
        th_context("%s", what[k]);
        CHECK_STATUS(ug_optimizer_create(model, &c, &opt), UG_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("loss scaling needs");
        CHECK(opt == NULL);
    }
    th_context("%s", "");
}

/* The scale stays a normal f32 however many steps overflow (it would
 * reach 0 after 170 halvings from 2^16), and the next clean step applies
 * a finite update: at most lr per element, as Adam's steps are. */
TS_TEST(scale_stays_normal)
{
    ug_optimizer_config c = scaled_adam();
    scaled_setup s;
    if (!setup(dev, &c, &s))
        return;
    for (int k = 0; k < 170; k++)
        if (!step_on(&s, s.overflow))
            return;
    ug_loss_scaler_state st = scaler_state(&s);
    CHECK_MSG(st.scale == FLT_MIN, "scale %g after 170 skipped steps, expected FLT_MIN", (double)st.scale);
    CHECK_EQ_I64(st.skipped_steps, 170);
    float before[N], after[N];
    if (!read_floats(s.param, before, sizeof before) || !step_on(&s, s.clean) ||
        !read_floats(s.param, after, sizeof after))
        return;
    for (int i = 0; i < N; i++)
        CHECK_MSG(isfinite(after[i]) && fabsf(after[i] - before[i]) <= c.lr * 1.001f,
                  "p[%d] went from %g to %g in a clean step at the smallest scale", i, (double)before[i],
                  (double)after[i]);
    st = scaler_state(&s);
    CHECK(st.skipped_steps == 170 && st.clean_steps == 1);

    /* A scale that is not a normal f32 is refused where it enters. */
    c.loss_scaling.init_scale = 1e-40f;
    ug_optimizer *opt = NULL;
    CHECK_STATUS(ug_optimizer_create(s.model, &c, &opt), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("init_scale", "normal");
    ug_loss_scaler_state tiny = {.scale = 1e-40f};
    CHECK_STATUS(ug_optimizer_set_loss_scaler(s.opt, &tiny), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("normal f32");
}

/* Writes in's tensors and metadata to out with key set to value. */
static bool edit_metadata(const char *in, const char *out, const char *key, const char *value)
{
    ug_st_file *f = NULL;
    if (ug_st_open(in, &f) != UG_OK)
        return false;
    int count = ug_st_count(f), meta = ug_st_metadata_count(f);
    ug_st_entry *entries = th_alloc(sizeof *entries * (size_t)count);
    const char **keys = th_alloc(sizeof *keys * (size_t)(meta + 1));
    const char **values = th_alloc(sizeof *values * (size_t)(meta + 1));
    bool ok = true;
    for (int i = 0; i < count && ok; i++) {
        const ug_st_tensor *t = ug_st_at(f, i);
        void *data = th_alloc(t->bytes + 1);
        entries[i] = (ug_st_entry){t->name, t->dtype, t->ndim, t->shape, data};
        ok = ug_st_read(f, t, data, t->bytes) == UG_OK;
    }
    int n = 0;
    for (int i = 0; i < meta; i++, n++)
        ug_st_metadata_at(f, i, &keys[n], &values[n]);
    int at = 0;
    while (at < n && strcmp(keys[at], key) != 0)
        at++;
    keys[at] = key;
    values[at] = value;
    n += at == n;
    ok = ok && ug_st_save(out, entries, count, keys, values, n, 1) == UG_OK;
    ug_st_close(f);
    return ok;
}

/* A checkpoint whose loss-scaler state or step count the optimizer would
 * refuse is refused before anything is written: parameters, optimizer
 * state, step count and scaler stay as they were. */
TS_TEST(refused_checkpoint_changes_nothing)
{
    char dir[] = "/tmp/ug-test-scaler-XXXXXX", good[64], bad[64];
    REQUIRE(mkdtemp(dir));
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    ug_optimizer_config c = scaled_adam();
    scaled_setup s, t;
    ug_checkpoint *ck = NULL, *into = NULL;
    if (!setup(dev, &c, &s))
        goto done;
    for (int k = 0; k < 3; k++)
        if (!step_on(&s, s.clean))
            goto done;
    if (ug_checkpoint_create(&ck) != UG_OK || ug_checkpoint_add_optimizer(ck, s.opt) != UG_OK ||
        ug_checkpoint_save(ck, good) != UG_OK) {
        th_fail(TH_LOC, "saving: %s", ug_last_error());
        goto done;
    }
    c.loss_scaling.growth_interval = 2; /* the file's 3 clean steps do not fit */
    if (!setup(dev, &c, &t) || ug_checkpoint_create(&into) != UG_OK ||
        ug_checkpoint_add_optimizer(into, t.opt) != UG_OK) {
        th_fail(TH_LOC, "setting up: %s", ug_last_error());
        goto done;
    }
    static const struct {
        const char *key, *value, *message;
    } edits[] = {
        {NULL, NULL, "clean_steps 3 in [0, growth_interval 2)"},
        {"unigrad.scaler.scale", "inf", "scale inf"},
        {"unigrad.scaler.scale", "1e39", "scale inf"},
        {"unigrad.scaler.scale", "1e-40", "normal f32"},
        {"unigrad.scaler.scale", "0", "scale 0"},
        {"unigrad.optimizer.steps", "9223372036854775807", "unigrad.optimizer.steps"},
        {"unigrad.optimizer.steps", "16777300", "at most 2^24"},
        {"unigrad.scaler.skipped_steps", "4", "unigrad.scaler.skipped_steps"},
    };
    float p_before[N], m_before[N], p_after[N], m_after[N];
    ug_tensor *m = NULL;
    REQUIRE_OK(ug_optimizer_state(t.opt, 0, 0, &m));
    if (!read_floats(t.param, p_before, sizeof p_before) || !read_floats(m, m_before, sizeof m_before))
        goto done;
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        th_context("%s = %s", edits[e].key ? edits[e].key : "(as saved)", edits[e].value ? edits[e].value : "");
        const char *path = good;
        if (edits[e].key) {
            if (!edit_metadata(good, bad, edits[e].key, edits[e].value)) {
                th_fail(TH_LOC, "editing the file: %s", ug_last_error());
                continue;
            }
            path = bad;
        }
        CHECK_STATUS(ug_checkpoint_load(into, path), UG_ERR_FORMAT);
        CHECK_ERROR_HAS(edits[e].message);
        if (!read_floats(t.param, p_after, sizeof p_after) || !read_floats(m, m_after, sizeof m_after))
            break;
        CHECK_MSG(!memcmp(p_before, p_after, sizeof p_before) && !memcmp(m_before, m_after, sizeof m_before),
                  "the refused load changed the parameter or Adam's state");
        CHECK_EQ_I64(ug_optimizer_steps(t.opt), 0);
        ug_loss_scaler_state st = scaler_state(&t);
        CHECK(st.scale == 65536.0f && st.clean_steps == 0 && st.skipped_steps == 0);
    }
    th_context("%s", "");

    /* An optimizer with loss scaling from a checkpoint saved without: the
     * message names the setting. */
    ug_optimizer_config plain = ug_optimizer_defaults(UG_ADAM);
    ug_checkpoint_free(ck);
    ck = NULL;
    ug_optimizer *unscaled = ts_optimizer(s.model, &plain);
    if (unscaled && ug_checkpoint_create(&ck) == UG_OK && ug_checkpoint_add_optimizer(ck, unscaled) == UG_OK &&
        ug_checkpoint_save(ck, bad) == UG_OK) {
        CHECK_STATUS(ug_checkpoint_load(into, bad), UG_ERR_FORMAT);
        CHECK_ERROR_HAS("saved without loss scaling", "config.loss_scaling.enabled");
    } else {
        th_fail(TH_LOC, "saving without loss scaling: %s", ug_last_error());
    }
done:
    ug_checkpoint_free(ck);
    ug_checkpoint_free(into);
    unlink(good);
    unlink(bad);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(defaults),
        TH_DEVICE_TEST(scaled_steps_follow_adam),
        TH_DEVICE_TEST(overflow_skips_the_step),
        TH_DEVICE_TEST(scaled_overflow_is_not_a_numeric_error),
        TH_DEVICE_TEST(growth_after_2000_clean_steps),
        TH_DEVICE_TEST(growth_and_backoff_sequence),
        TH_DEVICE_TEST(clipping_after_unscaling),
        TH_DEVICE_TEST(accumulation),
        TH_DEVICE_TEST(no_host_waits_per_step),
        TH_DEVICE_TEST(state_round_trip),
        TH_DEVICE_TEST(bad_config),
        TH_DEVICE_TEST(scale_stays_normal),
        TH_DEVICE_TEST(refused_checkpoint_changes_nothing),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
