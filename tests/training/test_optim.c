/* Optimizers, learning-rate schedules and gradient clipping, on every
 * device, against PyTorch's documented update rules worked out here in
 * double.
 *
 * The model: parameters p_k (k < 2, 150 elements each: on CPU OpenCL devices
 * a work-item updates 64, sixteen at a time, so 150 leaves a tail of 6) and
 * inputs c_k, with
 *     loss = sum_k [ sum(p_k * c_k) + 0.5 * sum(p_k * p_k) ]
 * so the gradient is known in closed form: dloss/dp_k = c_k + p_k. Each
 * case runs three optimizer steps (some more) and compares the parameters
 * after every step with the reference.
 *
 * The reference rules, from the torch.optim documentation (t counts steps
 * from 1, lr_t is the schedule's rate for update t-1 counted from 0):
 *   SGD:   g = grad + wd * p
 *          if momentum: b = g on the first step, else b = momentum * b + (1 - dampening) * g
 *                       g = nesterov ? g + momentum * b : b
 *          p = p - lr * g
 *   Adam:  g = grad + wd * p                      (L2 penalty in the gradient)
 *          m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *          p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *   AdamW: p = p - lr * wd * p                    (decoupled), then Adam with g = grad
 *   clip_grad_norm_(max_norm): total = sqrt(sum over every gradient element of g^2),
 *          coef = min(1, max_norm / (total + 1e-6)), every g *= coef (before the
 *          optimizer, so before weight decay).
 *   StepLR: lr * gamma^floor(step / step_size).
 *   Cosine with linear warm-up (the library's documented schedule): for
 *          step < warmup, lr * (step + 1) / warmup (the warm-up reaches lr on its
 *          last step, so step 0 is not wasted with a zero rate); then
 *          min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with
 *          progress = min(1, (step - warmup) / (total - warmup)).
 *
 * Tolerance: parameters are f32 near 1 whose updates are computed in f32,
 * so each step adds a few ulp (1.2e-7 at 1); over three steps that is well
 * below |p - ref| <= 1e-6 |ref| + 1e-7, while a wrong rule (no bias
 * correction, dampening on the first step, weight decay coupled or not,
 * clipping after weight decay) moves a parameter by 1e-4 or more. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { OP_PARAMS = 2, OP_N = 150 };

static const double PI = 3.14159265358979323846;

#define REL_TOL 1e-6
#define ABS_TOL 1e-7

/* ---- reference ---- */

typedef struct ref_optim {
    ug_optimizer_config c;
    int params;
    int64_t steps;
    double p[OP_PARAMS][OP_N], c_in[OP_PARAMS][OP_N];
    double buf[OP_PARAMS][OP_N], m[OP_PARAMS][OP_N], v[OP_PARAMS][OP_N];
} ref_optim;

static double ref_lr(const ug_optimizer_config *c, int64_t step)
{
    switch (c->schedule) {
    case UG_SCHEDULE_STEP:
        return (double)c->lr * pow((double)c->gamma, (double)(step / c->step_size));
    case UG_SCHEDULE_COSINE: {
        if (step < c->warmup_steps)
            return (double)c->lr * (double)(step + 1) / (double)c->warmup_steps;
        double progress = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
        if (progress > 1.0)
            progress = 1.0;
        return (double)c->min_lr + ((double)c->lr - (double)c->min_lr) * (1.0 + cos(PI * progress)) / 2.0;
    }
    default:
        return c->lr;
    }
}

static void ref_step(ref_optim *r)
{
    const ug_optimizer_config *c = &r->c;
    double g[OP_PARAMS][OP_N];
    double total = 0.0;
    for (int k = 0; k < r->params; k++)
        for (int i = 0; i < OP_N; i++) {
            g[k][i] = r->c_in[k][i] + r->p[k][i];
            total += g[k][i] * g[k][i];
        }
    if (c->max_grad_norm > 0.0f) {
        double coef = (double)c->max_grad_norm / (sqrt(total) + 1e-6);
        if (coef > 1.0)
            coef = 1.0;
        for (int k = 0; k < r->params; k++)
            for (int i = 0; i < OP_N; i++)
                g[k][i] *= coef;
    }
    double lr = ref_lr(c, r->steps), wd = c->weight_decay;
    int64_t t = r->steps + 1;
    double b1 = c->beta1, b2 = c->beta2;
    for (int k = 0; k < r->params; k++) {
        for (int i = 0; i < OP_N; i++) {
            double *p = &r->p[k][i], gi = g[k][i];
            if (c->type == UG_SGD) {
                gi += wd * *p;
                if (c->momentum != 0.0f) {
                    double *b = &r->buf[k][i];
                    *b = t == 1 ? gi : (double)c->momentum * *b + (1.0 - (double)c->dampening) * gi;
                    gi = c->nesterov ? gi + (double)c->momentum * *b : *b;
                }
                *p -= lr * gi;
            } else {
                if (c->type == UG_ADAM)
                    gi += wd * *p;
                else
                    *p -= lr * wd * *p;
                double *m = &r->m[k][i], *v = &r->v[k][i];
                *m = b1 * *m + (1.0 - b1) * gi;
                *v = b2 * *v + (1.0 - b2) * gi * gi;
                double mhat = *m / (1.0 - pow(b1, (double)t)), vhat = *v / (1.0 - pow(b2, (double)t));
                *p -= lr * mhat / (sqrt(vhat) + (double)c->eps);
            }
        }
    }
    r->steps++;
}

/* ---- the device side ---- */

typedef struct op_setup {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_tensor *param[OP_PARAMS];
    ug_value *loss;
    int params;
} op_setup;

/* Builds the model, the graph (with the optimizer) and the reference, with
 * the same starting values. False (failure recorded) on error. */
static bool setup(ug_device *dev, const ug_optimizer_config *c, int params, op_setup *s, ref_optim *r)
{
    memset(s, 0, sizeof *s);
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->params = params;
    th_seed(0x0971); /* the same starting values and inputs for every setup */
    s->params = params;
    s->model = ts_model(dev, 5);
    s->graph = s->model ? ts_graph(s->model) : NULL;
    if (!s->graph)
        return false;
    ug_graph *g = s->graph;
    int64_t n = OP_N;
    ug_value *total = NULL;
    ug_tensor *cin[OP_PARAMS] = {0};
    ug_value *cval[OP_PARAMS] = {0};
    ug_status st = UG_OK;
    for (int k = 0; k < params && st == UG_OK; k++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", k);
        float pf[OP_N], cf[OP_N];
        for (int i = 0; i < OP_N; i++) {
            pf[i] = (float)th_uniform(-1.0, 1.0);
            cf[i] = (float)th_uniform(-1.0, 1.0);
            r->p[k][i] = pf[i];
            r->c_in[k][i] = cf[i];
        }
        cin[k] = ts_tensor_f32(dev, 1, &n, cf);
        if (!cin[k])
            return false;
        ug_value *p = NULL, *pc = NULL, *pp = NULL, *s1 = NULL, *s2 = NULL, *half = NULL, *term = NULL;
        st = ug_model_param(s->model, name, 1, &n, UG_INIT_UNIFORM, 1.0f, &s->param[k]);
        if (st == UG_OK) st = ug_model_write_param(s->model, name, pf, sizeof pf);
        if (st == UG_OK) st = ug_graph_param(g, s->param[k], &p);
        if (st == UG_OK) st = ug_graph_input(g, k ? "c1" : "c0", UG_F32, 1, &n, &cval[k]);
        if (st == UG_OK) st = ug_g_mul(g, p, cval[k], &pc);
        if (st == UG_OK) st = ug_g_mul(g, p, p, &pp);
        if (st == UG_OK) st = ug_g_sum(g, pc, 0, true, &s1);
        if (st == UG_OK) st = ug_g_sum(g, pp, 0, true, &s2);
        if (st == UG_OK) st = ug_g_scale_shift(g, s2, 0.5f, 0.0f, &half);
        if (st == UG_OK) st = ug_g_add(g, s1, half, &term);
        if (st == UG_OK) {
            if (total)
                st = ug_g_add(g, total, term, &total);
            else
                total = term;
        }
    }
    s->loss = total;
    if (st == UG_OK) st = ug_graph_backward(g, total);
    if (st != UG_OK) {
        th_fail(TH_LOC, "building the graph returned %s: %s", ug_status_name(st), ug_last_error());
        return false;
    }
    s->opt = ts_optimizer(s->model, c);
    if (!s->opt)
        return false;
    if (st == UG_OK) st = ug_graph_set_optimizer(g, s->opt);
    if (st == UG_OK) st = ug_graph_compile(g);
    for (int k = 0; k < params && st == UG_OK; k++)
        st = ug_graph_bind(g, cval[k], cin[k]);
    if (st != UG_OK) {
        th_fail(TH_LOC, "compiling the graph returned %s: %s", ug_status_name(st), ug_last_error());
        return false;
    }
    return true;
}

/* Compares every parameter with the reference; false on a mismatch. */
static bool check_params(const op_setup *s, const ref_optim *r, const char *what)
{
    bool ok = true;
    for (int k = 0; k < s->params; k++) {
        float got[OP_N];
        ug_status st = ug_tensor_download(s->param[k], got, sizeof got);
        if (st != UG_OK) {
            th_fail(TH_LOC, "reading p%d returned %s: %s", k, ug_status_name(st), ug_last_error());
            return false;
        }
        for (int i = 0; i < OP_N; i++) {
            if (!ts_close(got[i], r->p[k][i], REL_TOL, ABS_TOL)) {
                th_fail(TH_LOC, "%s: p%d[%d] is %.9g, PyTorch's rule gives %.9g (difference %.3g)", what, k, i,
                        (double)got[i], r->p[k][i], (double)got[i] - r->p[k][i]);
                ok = false;
            }
        }
    }
    return ok;
}

/* Runs steps steps on the device and the reference, checking after each. */
static void run_and_check(ug_device *dev, const char *name, const ug_optimizer_config *c, int params, int steps)
{
    th_context("%s", name);
    op_setup s;
    ref_optim r;
    if (!setup(dev, c, params, &s, &r))
        return;
    for (int step = 0; step < steps; step++) {
        float want_lr = (float)ref_lr(c, step);
        float got_lr = ug_optimizer_current_lr(s.opt);
        CHECK_MSG(ts_close(got_lr, want_lr, 1e-6, 0.0), "step %d: current lr %.9g, expected %.9g", step,
                  (double)got_lr, (double)want_lr);
        CHECK_EQ_I64(ug_optimizer_steps(s.opt), step);
        ug_status st = ug_graph_run(s.graph);
        if (st != UG_OK) {
            th_fail(TH_LOC, "ug_graph_run returned %s: %s", ug_status_name(st), ug_last_error());
            return;
        }
        ref_step(&r);
        char what[48];
        snprintf(what, sizeof what, "after step %d", step + 1);
        if (!check_params(&s, &r, what))
            break;
    }
    CHECK_EQ_I64(ug_optimizer_steps(s.opt), steps);
    ts_cleanup();
    th_context("%s", "");
}

static ug_optimizer_config sgd(float lr, float momentum, float dampening, bool nesterov, float wd)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_SGD);
    c.lr = lr;
    c.momentum = momentum;
    c.dampening = dampening;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    return c;
}

TS_TEST(defaults)
{
    (void)dev;
    ug_optimizer_config s = ug_optimizer_defaults(UG_SGD), a = ug_optimizer_defaults(UG_ADAM),
                        w = ug_optimizer_defaults(UG_ADAMW);
    CHECK(s.type == UG_SGD && s.momentum == 0.0f && s.dampening == 0.0f && !s.nesterov && s.weight_decay == 0.0f);
    CHECK(a.type == UG_ADAM && a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-8f &&
          a.weight_decay == 0.0f);
    CHECK(w.type == UG_ADAMW && w.lr == 1e-3f && w.beta1 == 0.9f && w.beta2 == 0.999f && w.eps == 1e-8f &&
          w.weight_decay == 1e-2f);
    CHECK(s.schedule == UG_SCHEDULE_CONSTANT && a.schedule == UG_SCHEDULE_CONSTANT && a.max_grad_norm == 0.0f);
}

TS_TEST(sgd)
{
    ug_optimizer_config c;
    c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    run_and_check(dev, "SGD plain", &c, 1, 3);
    c = sgd(0.1f, 0.9f, 0.0f, false, 0.0f);
    run_and_check(dev, "SGD momentum 0.9", &c, 1, 3);
    c = sgd(0.1f, 0.9f, 0.1f, false, 0.0f);
    run_and_check(dev, "SGD momentum 0.9 dampening 0.1", &c, 1, 3);
    c = sgd(0.1f, 0.9f, 0.0f, true, 0.0f);
    run_and_check(dev, "SGD nesterov 0.9", &c, 1, 3);
    c = sgd(0.1f, 0.0f, 0.0f, false, 0.1f);
    run_and_check(dev, "SGD weight decay 0.1", &c, 1, 3);
    c = sgd(0.05f, 0.8f, 0.0f, true, 0.05f);
    run_and_check(dev, "SGD nesterov 0.8 weight decay 0.05, two parameters", &c, 2, 3);
}

TS_TEST(adam)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    run_and_check(dev, "Adam defaults", &c, 1, 3);
    c.lr = 0.05f;
    run_and_check(dev, "Adam lr 0.05", &c, 2, 3);
    c.weight_decay = 0.1f;
    run_and_check(dev, "Adam lr 0.05 weight decay 0.1 (L2)", &c, 1, 3);
    c.beta1 = 0.5f;
    c.beta2 = 0.9f;
    c.eps = 1e-3f;
    run_and_check(dev, "Adam betas (0.5, 0.9) eps 1e-3 weight decay 0.1", &c, 1, 3);
}

TS_TEST(adamw)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
    run_and_check(dev, "AdamW defaults (weight decay 1e-2)", &c, 1, 3);
    c.lr = 0.05f;
    c.weight_decay = 0.1f;
    run_and_check(dev, "AdamW lr 0.05 weight decay 0.1 (decoupled)", &c, 2, 3);
    c.weight_decay = 0.0f;
    run_and_check(dev, "AdamW without weight decay", &c, 1, 3);
}

TS_TEST(clipping)
{
    /* The two gradients c + p have a global norm around 2: 0.5 clips, 100 does not. */
    ug_optimizer_config c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    c.max_grad_norm = 0.5f;
    run_and_check(dev, "SGD clipped to norm 0.5", &c, 2, 3);
    c.weight_decay = 0.2f; /* clipping applies to the gradient before weight decay */
    run_and_check(dev, "SGD clipped to norm 0.5 with weight decay", &c, 2, 3);
    c.max_grad_norm = 100.0f;
    run_and_check(dev, "SGD max norm 100 (not clipped)", &c, 2, 3);
    c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 0.05f;
    c.max_grad_norm = 0.3f;
    run_and_check(dev, "Adam clipped to norm 0.3", &c, 2, 3);
    c = sgd(0.1f, 0.9f, 0.0f, false, 0.0f);
    c.max_grad_norm = 0.25f;
    run_and_check(dev, "SGD momentum clipped to norm 0.25", &c, 1, 4);

    /* The clipped norm itself: after one SGD step with lr 1, the change of
     * every parameter is the clipped gradient, whose global norm is max_norm
     * * total / (total + 1e-6). */
    c = sgd(1.0f, 0.0f, 0.0f, false, 0.0f);
    c.max_grad_norm = 0.5f;
    th_context("global norm after clipping");
    op_setup s;
    ref_optim r;
    if (!setup(dev, &c, 2, &s, &r))
        return;
    float before[OP_PARAMS][OP_N], after[OP_PARAMS][OP_N];
    for (int k = 0; k < 2; k++)
        REQUIRE_OK(ug_tensor_download(s.param[k], before[k], sizeof before[k]));
    REQUIRE_OK(ug_graph_run(s.graph));
    double norm = 0.0, total = 0.0;
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(ug_tensor_download(s.param[k], after[k], sizeof after[k]));
        for (int i = 0; i < OP_N; i++) {
            double d = (double)before[k][i] - (double)after[k][i];
            double gr = r.c_in[k][i] + r.p[k][i];
            norm += d * d;
            total += gr * gr;
        }
    }
    total = sqrt(total);
    REQUIRE(total > 1.0); /* the case must clip */
    CHECK_MSG(ts_close(sqrt(norm), 0.5 * total / (total + 1e-6), 1e-5, 0.0),
              "norm of the clipped gradient %.9g, expected %.9g", sqrt(norm), 0.5 * total / (total + 1e-6));
}

TS_TEST(schedule_step)
{
    ug_optimizer_config c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    c.schedule = UG_SCHEDULE_STEP;
    c.step_size = 2;
    c.gamma = 0.5f;
    run_and_check(dev, "SGD StepLR step 2 gamma 0.5", &c, 1, 6);
    c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 0.05f;
    c.schedule = UG_SCHEDULE_STEP;
    c.step_size = 1;
    c.gamma = 0.3f;
    run_and_check(dev, "Adam StepLR step 1 gamma 0.3", &c, 1, 4);

    /* The rate at any step, set with ug_optimizer_set_steps. */
    c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    c.schedule = UG_SCHEDULE_STEP;
    c.step_size = 3;
    c.gamma = 0.1f;
    ug_model *m = ts_model(dev, 1);
    REQUIRE(m);
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, (int64_t[]){3}, UG_INIT_UNIFORM, 1.0f, &t));
    ug_optimizer *o = ts_optimizer(m, &c);
    REQUIRE(o);
    for (int64_t step = 0; step < 12; step++) {
        REQUIRE_OK(ug_optimizer_set_steps(o, step));
        CHECK_EQ_I64(ug_optimizer_steps(o), step);
        double want = 0.1 * pow(0.1, (double)(step / 3));
        CHECK_MSG(ts_close(ug_optimizer_current_lr(o), want, 1e-6, 0.0), "step %lld: lr %.9g, expected %.9g",
                  (long long)step, (double)ug_optimizer_current_lr(o), want);
    }
}

TS_TEST(schedule_cosine)
{
    ug_optimizer_config c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 2;
    c.total_steps = 6;
    c.min_lr = 0.01f;
    run_and_check(dev, "SGD cosine warm-up 2 total 6", &c, 1, 8);
    c.type = UG_ADAMW;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = 1e-8f;
    c.weight_decay = 0.1f;
    c.warmup_steps = 0;
    c.total_steps = 3;
    c.min_lr = 0.0f;
    run_and_check(dev, "AdamW cosine no warm-up total 3", &c, 1, 5);

    /* The curve itself: warm-up rises linearly to lr, the cosine falls to
     * min_lr at total_steps and stays there. */
    c = sgd(0.2f, 0.0f, 0.0f, false, 0.0f);
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 4;
    c.total_steps = 14;
    c.min_lr = 0.02f;
    ug_model *m = ts_model(dev, 1);
    REQUIRE(m);
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, (int64_t[]){3}, UG_INIT_UNIFORM, 1.0f, &t));
    ug_optimizer *o = ts_optimizer(m, &c);
    REQUIRE(o);
    double previous = 0.0;
    for (int64_t step = 0; step < 20; step++) {
        REQUIRE_OK(ug_optimizer_set_steps(o, step));
        double got = ug_optimizer_current_lr(o), want = ref_lr(&c, step);
        CHECK_MSG(ts_close(got, want, 1e-6, 0.0), "step %lld: lr %.9g, expected %.9g", (long long)step, got, want);
        if (step < 4)
            CHECK_MSG(got > previous && got <= 0.2f, "warm-up step %lld: lr %.9g after %.9g", (long long)step, got,
                      previous);
        else if (step <= 14)
            CHECK_MSG(got <= previous + 1e-7, "cosine step %lld: lr %.9g rose from %.9g", (long long)step, got,
                      previous);
        previous = got;
    }
    REQUIRE_OK(ug_optimizer_set_steps(o, 4));
    CHECK(ts_close(ug_optimizer_current_lr(o), 0.2, 1e-6, 0.0));
    REQUIRE_OK(ug_optimizer_set_steps(o, 9)); /* half way: (lr + min_lr) / 2 */
    CHECK(ts_close(ug_optimizer_current_lr(o), 0.11, 1e-6, 0.0));
    REQUIRE_OK(ug_optimizer_set_steps(o, 14));
    CHECK(ts_close(ug_optimizer_current_lr(o), 0.02, 1e-6, 0.0));
    REQUIRE_OK(ug_optimizer_set_steps(o, 1000));
    CHECK(ts_close(ug_optimizer_current_lr(o), 0.02, 1e-6, 0.0));
}

/* Optimizer state: counts, Adam's m and v and SGD's momentum buffer after
 * one step, and a run resumed from written state matching an uninterrupted
 * one bitwise. */
TS_TEST(state)
{
    op_setup s;
    ref_optim r;
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 0.05f;
    c.weight_decay = 0.1f;
    th_context("Adam state");
    if (!setup(dev, &c, 2, &s, &r))
        return;
    CHECK_EQ_I64(ug_optimizer_state_count(s.opt), 2);
    REQUIRE_OK(ug_graph_run(s.graph));
    ref_step(&r);
    check_params(&s, &r, "after step 1");
    for (int k = 0; k < 2; k++) {
        ug_tensor *m = NULL, *v = NULL;
        REQUIRE_OK(ug_optimizer_state(s.opt, k, 0, &m));
        REQUIRE_OK(ug_optimizer_state(s.opt, k, 1, &v));
        REQUIRE(ug_tensor_numel(m) == OP_N && ug_tensor_numel(v) == OP_N);
        float mf[OP_N], vf[OP_N];
        REQUIRE_OK(ug_tensor_download(m, mf, sizeof mf));
        REQUIRE_OK(ug_tensor_download(v, vf, sizeof vf));
        for (int i = 0; i < OP_N; i++) {
            CHECK_MSG(ts_close(mf[i], r.m[k][i], 1e-6, 1e-9), "m of p%d[%d] is %.9g, expected %.9g", k, i,
                      (double)mf[i], r.m[k][i]);
            CHECK_MSG(ts_close(vf[i], r.v[k][i], 1e-6, 1e-12), "v of p%d[%d] is %.9g, expected %.9g", k, i,
                      (double)vf[i], r.v[k][i]);
        }
    }
    ug_tensor *none = NULL;
    CHECK_STATUS(ug_optimizer_state(s.opt, 0, 2, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("slot 2");
    CHECK_STATUS(ug_optimizer_state(s.opt, 2, 0, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_state(s.opt, -1, 0, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_set_steps(s.opt, -1), UG_ERR_INVALID_ARGUMENT);
    CHECK_EQ_I64(ug_optimizer_steps(s.opt), 1);

    /* Resume: a second model and optimizer get step 1's parameters and
     * state and the step count, then both take step 2. */
    op_setup s2;
    ref_optim r2;
    th_context("Adam resumed from state");
    if (!setup(dev, &c, 2, &s2, &r2))
        return;
    for (int k = 0; k < 2; k++) {
        float buf[OP_N];
        REQUIRE_OK(ug_tensor_download(s.param[k], buf, sizeof buf));
        REQUIRE_OK(ug_tensor_upload(s2.param[k], buf, sizeof buf));
        for (int slot = 0; slot < 2; slot++) {
            ug_tensor *from = NULL, *to = NULL;
            REQUIRE_OK(ug_optimizer_state(s.opt, k, slot, &from));
            REQUIRE_OK(ug_optimizer_state(s2.opt, k, slot, &to));
            REQUIRE_OK(ug_tensor_download(from, buf, sizeof buf));
            REQUIRE_OK(ug_tensor_upload(to, buf, sizeof buf));
        }
    }
    REQUIRE_OK(ug_optimizer_set_steps(s2.opt, 1));
    REQUIRE_OK(ug_graph_run(s.graph));
    REQUIRE_OK(ug_graph_run(s2.graph));
    ref_step(&r);
    check_params(&s2, &r, "resumed, after step 2");
    for (int k = 0; k < 2; k++) {
        float a[OP_N], b[OP_N];
        REQUIRE_OK(ug_tensor_download(s.param[k], a, sizeof a));
        REQUIRE_OK(ug_tensor_download(s2.param[k], b, sizeof b));
        th_compare_bits("resumed parameter", b, a, OP_N, sizeof(float));
    }
    CHECK_EQ_I64(ug_optimizer_steps(s2.opt), 2);

    /* SGD with momentum keeps one buffer (the first step's gradient), without none. */
    ts_cleanup();
    th_context("SGD state");
    c = sgd(0.1f, 0.9f, 0.1f, false, 0.0f);
    if (!setup(dev, &c, 1, &s, &r))
        return;
    CHECK_EQ_I64(ug_optimizer_state_count(s.opt), 1);
    REQUIRE_OK(ug_graph_run(s.graph));
    ref_step(&r);
    ug_tensor *buf = NULL;
    REQUIRE_OK(ug_optimizer_state(s.opt, 0, 0, &buf));
    float bf[OP_N];
    REQUIRE_OK(ug_tensor_download(buf, bf, sizeof bf));
    for (int i = 0; i < OP_N; i++)
        CHECK_MSG(ts_close(bf[i], r.buf[0][i], 1e-6, 1e-9), "momentum buffer[%d] is %.9g, expected %.9g", i,
                  (double)bf[i], r.buf[0][i]);
    ts_cleanup();
    c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    if (!setup(dev, &c, 1, &s, &r))
        return;
    CHECK_EQ_I64(ug_optimizer_state_count(s.opt), 0);
    CHECK_STATUS(ug_optimizer_state(s.opt, 0, 0, &buf), UG_ERR_INVALID_ARGUMENT);
}

/* A bad configuration: UG_ERR_INVALID_ARGUMENT, a message naming the
 * problem, and no optimizer. */
static void expect_bad(ug_model *m, const ug_optimizer_config *c, const char *what, const char *needle)
{
    th_context("%s", what);
    ug_optimizer *o = (ug_optimizer *)(uintptr_t)1;
    if (CHECK_STATUS(ug_optimizer_create(m, c, &o), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS(needle);
    CHECK(o == NULL);
    if (o && o != (ug_optimizer *)(uintptr_t)1)
        ug_optimizer_free(o);
}

TS_TEST(bad_config)
{
    ug_model *m = ts_model(dev, 1);
    REQUIRE(m);
    ug_optimizer *o = NULL;
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    /* No parameters yet. */
    CHECK_STATUS(ug_optimizer_create(m, &c, &o), UG_ERR_STATE);
    CHECK_ERROR_HAS("no parameters");
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, (int64_t[]){3}, UG_INIT_UNIFORM, 1.0f, &t));

    c = sgd(-0.1f, 0.0f, 0.0f, false, 0.0f);
    expect_bad(m, &c, "negative lr", "learning rate");
    c = sgd(NAN, 0.0f, 0.0f, false, 0.0f);
    expect_bad(m, &c, "NaN lr", "learning rate");
    c = ug_optimizer_defaults(UG_ADAM);
    c.lr = -1e-3f;
    expect_bad(m, &c, "Adam negative lr", "learning rate");
    c = sgd(0.1f, 0.0f, 0.0f, true, 0.0f);
    expect_bad(m, &c, "nesterov without momentum", "Nesterov");
    c = sgd(0.1f, 0.9f, 0.1f, true, 0.0f);
    expect_bad(m, &c, "nesterov with dampening", "dampening");
    c = sgd(0.1f, -0.5f, 0.0f, false, 0.0f);
    expect_bad(m, &c, "negative momentum", "momentum");
    c = sgd(0.1f, 0.0f, 0.0f, false, -0.1f);
    expect_bad(m, &c, "negative weight decay", "weight decay");
    c = ug_optimizer_defaults(UG_ADAM);
    c.beta1 = 1.0f;
    expect_bad(m, &c, "beta1 = 1", "betas");
    c = ug_optimizer_defaults(UG_ADAMW);
    c.beta2 = -0.1f;
    expect_bad(m, &c, "beta2 < 0", "betas");
    c = ug_optimizer_defaults(UG_ADAM);
    c.beta2 = 1.5f;
    expect_bad(m, &c, "beta2 > 1", "betas");
    c = ug_optimizer_defaults(UG_ADAM);
    c.eps = -1.0f;
    expect_bad(m, &c, "negative eps", "eps");
    c = ug_optimizer_defaults(UG_ADAM);
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 10;
    c.total_steps = 10;
    expect_bad(m, &c, "cosine total == warmup", "cosine");
    c.total_steps = 5;
    expect_bad(m, &c, "cosine total < warmup", "cosine");
    c.warmup_steps = 0;
    c.total_steps = 0;
    expect_bad(m, &c, "cosine total 0", "cosine");
    c = ug_optimizer_defaults(UG_SGD);
    c.schedule = UG_SCHEDULE_STEP;
    c.step_size = 0;
    expect_bad(m, &c, "step schedule step_size 0", "step_size");
    c = ug_optimizer_defaults(UG_SGD);
    c.max_grad_norm = -1.0f;
    expect_bad(m, &c, "negative max_grad_norm", "max_grad_norm");
    /* Settings that can only make NaN, infinite or negative learning rates
     * or updates. */
    c = ug_optimizer_defaults(UG_SGD);
    c.schedule = UG_SCHEDULE_STEP;
    c.gamma = NAN;
    expect_bad(m, &c, "step schedule gamma NaN", "gamma");
    c.gamma = -2.0f;
    expect_bad(m, &c, "step schedule gamma -2", "gamma");
    c.gamma = 0.0f;
    expect_bad(m, &c, "step schedule gamma 0", "gamma");
    c = ug_optimizer_defaults(UG_ADAM);
    c.schedule = UG_SCHEDULE_COSINE;
    c.total_steps = 10;
    c.min_lr = NAN;
    expect_bad(m, &c, "cosine min_lr NaN", "min_lr");
    c.min_lr = -1.0f;
    expect_bad(m, &c, "cosine min_lr -1", "min_lr");
    c = sgd(0.1f, 0.9f, NAN, false, 0.0f);
    expect_bad(m, &c, "dampening NaN", "dampening");
    c = sgd(0.1f, INFINITY, 0.0f, false, 0.0f);
    expect_bad(m, &c, "momentum inf", "momentum");
    c = sgd(0.1f, 0.0f, 0.0f, false, INFINITY);
    expect_bad(m, &c, "weight decay inf", "weight decay");
    c = ug_optimizer_defaults(UG_ADAMW);
    c.weight_decay = INFINITY;
    expect_bad(m, &c, "AdamW weight decay inf", "weight decay");
    c = ug_optimizer_defaults(UG_ADAM);
    c.eps = INFINITY;
    expect_bad(m, &c, "eps inf", "eps");
    c = sgd(INFINITY, 0.0f, 0.0f, false, 0.0f);
    expect_bad(m, &c, "lr inf", "learning rate");
    c = ug_optimizer_defaults(UG_SGD);
    c.type = (ug_optim_type)7;
    expect_bad(m, &c, "unknown type", "type");
    c = ug_optimizer_defaults(UG_SGD);
    c.schedule = (ug_schedule)9;
    expect_bad(m, &c, "unknown schedule", "schedule");
    th_context("%s", "");
    CHECK_STATUS(ug_optimizer_create(m, NULL, &o), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_create(NULL, &c, &o), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_create(m, &c, NULL), UG_ERR_INVALID_ARGUMENT);

    /* Attaching: before backward, twice, from another model. */
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    c = sgd(0.1f, 0.0f, 0.0f, false, 0.0f);
    ug_optimizer *opt = ts_optimizer(m, &c);
    REQUIRE(opt);
    ug_value *w = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_param(g, t, &w));
    REQUIRE_OK(ug_g_sum(g, w, 0, true, &loss));
    CHECK_STATUS(ug_graph_set_optimizer(g, opt), UG_ERR_STATE);
    CHECK_ERROR_HAS("ug_graph_backward");
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_model *other = ts_model(dev, 2);
    REQUIRE(other);
    ug_tensor *t2 = NULL;
    REQUIRE_OK(ug_model_param(other, "w", 1, (int64_t[]){3}, UG_INIT_UNIFORM, 1.0f, &t2));
    ug_optimizer *foreign = ts_optimizer(other, &c);
    REQUIRE(foreign);
    CHECK_STATUS(ug_graph_set_optimizer(g, foreign), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("another model");
    CHECK_STATUS(ug_graph_set_optimizer(g, NULL), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    CHECK_STATUS(ug_graph_set_optimizer(g, opt), UG_ERR_STATE);
    CHECK_ERROR_HAS("already has an optimizer");
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_run(g));
    CHECK_EQ_I64(ug_optimizer_steps(opt), 1);

    /* A step count the next update would overflow is refused and changes
     * nothing; the largest one taken still gives finite parameters. */
    CHECK_STATUS(ug_optimizer_set_steps(opt, INT64_MAX), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("steps 9223372036854775807", "2^53");
    CHECK_STATUS(ug_optimizer_set_steps(opt, UG_OPTIMIZER_MAX_STEPS + 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_set_steps(opt, -1), UG_ERR_INVALID_ARGUMENT);
    CHECK_EQ_I64(ug_optimizer_steps(opt), 1);
    REQUIRE_OK(ug_optimizer_set_steps(opt, UG_OPTIMIZER_MAX_STEPS));
    REQUIRE_OK(ug_graph_run(g));
    CHECK(ug_optimizer_steps(opt) == UG_OPTIMIZER_MAX_STEPS + 1);
    float w_after[3];
    REQUIRE_OK(ug_tensor_download(t, w_after, sizeof w_after));
    for (int i = 0; i < 3; i++)
        CHECK_MSG(isfinite(w_after[i]), "w[%d] is %g after a step at 2^53", i, (double)w_after[i]);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(defaults),
        TH_DEVICE_TEST(sgd),
        TH_DEVICE_TEST(adam),
        TH_DEVICE_TEST(adamw),
        TH_DEVICE_TEST(clipping),
        TH_DEVICE_TEST(schedule_step),
        TH_DEVICE_TEST(schedule_cosine),
        TH_DEVICE_TEST(state),
        TH_DEVICE_TEST(bad_config),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
