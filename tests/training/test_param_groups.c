/* Parameter groups (optim.h), on every device, against PyTorch's update
 * rules worked out here in double with each group's settings, and a
 * parameter tied to two uses in a graph.
 *
 * The model: parameters p_k of 1, 2 and 4 dimensions named as a GPT's
 * ("wte.weight", "h.fc.bias", "ln_f.weight", ...) and inputs c_k, with
 *     loss = sum_k [ sum(p_k * c_k) + 0.5 * sum(p_k * p_k) ]
 * so the gradient is c_k + p_k in closed form (as test_optim.c). Each case
 * runs several steps and compares every parameter with the reference after
 * each. The reference (from the torch.optim documentation, per group):
 *   clip_grad_norm_ over every parameter of every group: total = the norm of
 *     all gradients, coef = min(1, max_norm / (total + 1e-6));
 *   lr_k = lr_scale of p_k's group times the schedule's rate (test_optim.c's
 *     StepLR and cosine with warm-up), wd_k its group's weight decay (the
 *     configuration's outside every group);
 *   SGD: g += wd_k p; momentum, dampening, Nesterov as PyTorch; p -= lr_k g
 *   Adam: g += wd_k p, then Adam;  AdamW: p -= lr_k wd_k p, then Adam.
 * Which group holds each parameter is written out by hand for each case
 * (never asked of the library), so a rule that chooses wrongly, a setting
 * that does not reach the kernels or a multi-tensor launch that applies
 * one tensor's settings to another fails. Tolerances as test_optim.c's: a
 * few f32 ulps a step, where a wrong rate or decay moves a parameter by
 * 1e-4 or more. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

#define REL_TOL 2e-6
#define ABS_TOL 2e-7

static const double PI = 3.14159265358979323846;

typedef struct param_spec {
    const char *name;
    int ndim;
    int64_t shape[4];
} param_spec;

/* A GPT's kinds of parameters: matrices (2-D and a 4-D kernel), vectors. */
static const param_spec GPT[] = {
    {"wte.weight", 2, {10, 15}},    {"h.fc.weight", 2, {12, 15}}, {"h.fc.bias", 1, {70}},
    {"ln_f.weight", 1, {150}},      {"conv.weight", 4, {2, 3, 4, 5}}, {"h.proj.weight", 2, {9, 8}},
};
enum { GPT_PARAMS = sizeof GPT / sizeof GPT[0], MAX_PARAMS = 24 };

static int64_t numel(const param_spec *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* ---- the reference ---- */

typedef struct ref_param {
    int64_t n;
    double wd, scale; /* the parameter's group's, written out by each case */
    double *p, *c, *buf, *m, *v;
} ref_param;

typedef struct ref_run {
    ug_optimizer_config c;
    int count;
    int64_t steps;
    ref_param ps[MAX_PARAMS];
} ref_run;

static double ref_lr(const ug_optimizer_config *c, int64_t step)
{
    if (c->schedule == UG_SCHEDULE_STEP)
        return (double)c->lr * pow((double)c->gamma, (double)(step / c->step_size));
    if (c->schedule != UG_SCHEDULE_COSINE)
        return c->lr;
    if (step < c->warmup_steps)
        return (double)c->lr * (double)(step + 1) / (double)c->warmup_steps;
    double progress = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    progress = progress > 1.0 ? 1.0 : progress;
    return (double)c->min_lr + ((double)c->lr - (double)c->min_lr) * (1.0 + cos(PI * progress)) / 2.0;
}

static void ref_step(ref_run *r)
{
    const ug_optimizer_config *c = &r->c;
    double total = 0.0;
    for (int k = 0; k < r->count; k++)
        for (int64_t i = 0; i < r->ps[k].n; i++) {
            const double g = r->ps[k].c[i] + r->ps[k].p[i];
            total += g * g;
        }
    double coef = 1.0;
    if (c->max_grad_norm > 0.0f) {
        coef = (double)c->max_grad_norm / (sqrt(total) + 1e-6);
        coef = coef > 1.0 ? 1.0 : coef;
    }
    const int64_t t = r->steps + 1;
    const double b1 = c->beta1, b2 = c->beta2, mom = c->momentum;
    for (int k = 0; k < r->count; k++) {
        ref_param *q = &r->ps[k];
        const double lr = ref_lr(c, r->steps) * q->scale, wd = q->wd;
        for (int64_t i = 0; i < q->n; i++) {
            double *p = &q->p[i], g = (q->c[i] + *p) * coef;
            if (c->type == UG_SGD) {
                g += wd * *p;
                if (mom != 0.0) {
                    q->buf[i] = t == 1 ? g : mom * q->buf[i] + (1.0 - (double)c->dampening) * g;
                    g = c->nesterov ? g + mom * q->buf[i] : q->buf[i];
                }
                *p -= lr * g;
                continue;
            }
            if (c->type == UG_ADAM)
                g += wd * *p;
            else
                *p -= lr * wd * *p;
            q->m[i] = b1 * q->m[i] + (1.0 - b1) * g;
            q->v[i] = b2 * q->v[i] + (1.0 - b2) * g * g;
            const double mhat = q->m[i] / (1.0 - pow(b1, (double)t)), vhat = q->v[i] / (1.0 - pow(b2, (double)t));
            *p -= lr * mhat / (sqrt(vhat) + (double)c->eps);
        }
    }
    r->steps++;
}

/* ---- the device side ---- */

typedef struct run_setup {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_tensor *param[MAX_PARAMS];
    int count;
} run_setup;

/* The model of specs with the loss above, the optimizer of c and the
 * reference, from the same values; wd and scale: each parameter's group's
 * settings as the case expects them. False (failure recorded) on error. */
static bool setup(ug_device *dev, const ug_optimizer_config *c, const param_spec *specs, int count,
                  const double *wd, const double *scale, run_setup *s, ref_run *r)
{
    memset(s, 0, sizeof *s);
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->count = s->count = count;
    th_seed(0x6209);
    s->model = ts_model(dev, 5);
    s->graph = s->model ? ts_graph(s->model) : NULL;
    if (!s->graph)
        return false;
    ug_graph *g = s->graph;
    ug_value *total = NULL, *cval[MAX_PARAMS] = {0};
    ug_tensor *cin[MAX_PARAMS] = {0};
    ug_status st = UG_OK;
    for (int k = 0; k < count && st == UG_OK; k++) {
        const int64_t n = numel(&specs[k]);
        ref_param *q = &r->ps[k];
        *q = (ref_param){.n = n, .wd = wd[k], .scale = scale[k]};
        q->p = th_alloc((size_t)n * sizeof(double));
        q->c = th_alloc((size_t)n * sizeof(double));
        q->buf = th_alloc((size_t)n * sizeof(double));
        q->m = th_alloc((size_t)n * sizeof(double));
        q->v = th_alloc((size_t)n * sizeof(double));
        float *pf = th_alloc((size_t)n * sizeof *pf), *cf = th_alloc((size_t)n * sizeof *cf);
        for (int64_t i = 0; i < n; i++) {
            q->p[i] = pf[i] = (float)th_uniform(-1.0, 1.0);
            q->c[i] = cf[i] = (float)th_uniform(-1.0, 1.0);
            q->buf[i] = q->m[i] = q->v[i] = 0.0;
        }
        cin[k] = ts_tensor_f32(dev, specs[k].ndim, specs[k].shape, cf);
        if (!cin[k])
            return false;
        char input[32];
        snprintf(input, sizeof input, "c%d", k);
        ug_value *p = NULL, *pc = NULL, *pp = NULL, *s1 = NULL, *s2 = NULL, *term = NULL;
        st = ug_model_param(s->model, specs[k].name, specs[k].ndim, specs[k].shape, UG_INIT_UNIFORM, 1.0f,
                            &s->param[k]);
        if (st == UG_OK) st = ug_model_write_param(s->model, specs[k].name, pf, (size_t)n * sizeof *pf);
        if (st == UG_OK) st = ug_graph_param(g, s->param[k], &p);
        if (st == UG_OK) st = ug_graph_input(g, input, UG_F32, specs[k].ndim, specs[k].shape, &cval[k]);
        if (st == UG_OK) st = ug_g_mul(g, p, cval[k], &pc);
        if (st == UG_OK) st = ug_g_mul(g, p, p, &pp);
        if (st == UG_OK) st = ug_g_sum(g, pc, 0, true, &s1);
        if (st == UG_OK) st = ug_g_sum(g, pp, 0, true, &s2);
        if (st == UG_OK) st = ug_g_scale_shift(g, s2, 0.5f, 0.0f, &s2);
        if (st == UG_OK) st = ug_g_add(g, s1, s2, &term);
        if (st == UG_OK) st = total ? ug_g_add(g, total, term, &total) : (total = term, UG_OK);
    }
    if (st == UG_OK) st = ug_graph_backward(g, total);
    if (st != UG_OK) {
        th_fail(TH_LOC, "building the graph returned %s: %s", ug_status_name(st), ug_last_error());
        return false;
    }
    s->opt = ts_optimizer(s->model, c);
    if (!s->opt)
        return false;
    st = ug_graph_set_optimizer(g, s->opt);
    if (st == UG_OK) st = ug_graph_compile(g);
    for (int k = 0; k < count && st == UG_OK; k++)
        st = ug_graph_bind(g, cval[k], cin[k]);
    if (st != UG_OK)
        th_fail(TH_LOC, "compiling the graph returned %s: %s", ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

static bool check_params(const run_setup *s, const ref_run *r, const param_spec *specs, int step)
{
    for (int k = 0; k < s->count; k++) {
        const float *got = ts_download_f32(s->param[k]);
        if (!got)
            return false;
        for (int64_t i = 0; i < r->ps[k].n; i++)
            if (!ts_close(got[i], r->ps[k].p[i], REL_TOL, ABS_TOL)) {
                th_fail(TH_LOC, "after step %d: %s[%lld] is %.9g, PyTorch's rule with its group's settings gives "
                        "%.9g", step, specs[k].name, (long long)i, (double)got[i], r->ps[k].p[i]);
                return false;
            }
    }
    return true;
}

/* Runs steps steps of case name beside the reference; group[k] is the
 * group the case expects parameter k in (-1: none). */
static void run_case(ug_device *dev, const char *name, const ug_optimizer_config *c, const param_spec *specs,
                     int count, const int *group, int steps)
{
    th_context("%s", name);
    double wd[MAX_PARAMS], scale[MAX_PARAMS];
    for (int k = 0; k < count; k++) {
        wd[k] = group[k] >= 0 ? c->groups[group[k]].weight_decay : c->weight_decay;
        scale[k] = group[k] >= 0 ? c->groups[group[k]].lr_scale : 1.0;
    }
    run_setup s;
    static ref_run r;
    if (!setup(dev, c, specs, count, wd, scale, &s, &r))
        return;
    for (int k = 0; k < count; k++) {
        int got = -2;
        CHECK_OK(ug_optimizer_param_group(s.opt, k, &got));
        CHECK_MSG(got == group[k], "%s is in group %d, expected %d", specs[k].name, got, group[k]);
    }
    for (int step = 1; step <= steps; step++) {
        ug_status st = ug_graph_run(s.graph);
        if (st != UG_OK) {
            th_fail(TH_LOC, "ug_graph_run returned %s: %s", ug_status_name(st), ug_last_error());
            break;
        }
        ref_step(&r);
        if (!check_params(&s, &r, specs, step))
            break;
    }
    ts_cleanup();
    th_context("%s", "");
}

static bool is_bias(const char *name, int ndim, const int64_t *shape, void *user)
{
    (void)ndim, (void)shape;
    ++*(int *)user;
    const size_t len = strlen(name);
    return len >= 5 && !strcmp(name + len - 5, ".bias");
}

static ug_param_group names_group(const char *name, const char *pattern, float weight_decay, float lr_scale)
{
    ug_param_group g = ug_param_group_defaults();
    snprintf(g.name, sizeof g.name, "%s", name);
    snprintf(g.pattern, sizeof g.pattern, "%s", pattern);
    g.weight_decay = weight_decay;
    g.lr_scale = lr_scale;
    return g;
}

/* nanoGPT's optimizer: AdamW decaying only the matrices, warm-up and cosine
 * decay, clipping at 1.0; the vectors at half the rate. */
TS_TEST(adamw_decay_matrices_only)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
    c.lr = 0.05f;
    c.weight_decay = 0.1f;
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 2;
    c.total_steps = 8;
    c.min_lr = 0.005f;
    c.max_grad_norm = 1.0f;
    REQUIRE_OK(ug_optimizer_decay_matrices_only(&c));
    REQUIRE(c.group_count == 2 && !strcmp(c.groups[0].name, "decay") && !strcmp(c.groups[1].name, "no_decay"));
    CHECK(c.groups[0].weight_decay == 0.1f && c.groups[1].weight_decay == 0.0f);
    c.groups[1].lr_scale = 0.5f;
    const int group[GPT_PARAMS] = {0, 0, 1, 1, 0, 0};
    run_case(dev, "AdamW, decay matrices only, vectors at half rate, cosine, clip 1.0", &c, GPT, GPT_PARAMS,
             group, 7);
    c.schedule = UG_SCHEDULE_CONSTANT;
    c.max_grad_norm = 0.0f;
    c.groups[0].lr_scale = 3.0f;
    run_case(dev, "AdamW, decay matrices only, matrices at three times the rate", &c, GPT, GPT_PARAMS, group, 4);
}

/* Groups by name patterns and by a predicate, the rest outside any group,
 * with Adam's L2 decay. */
TS_TEST(adam_names_and_predicate)
{
    int calls = 0;
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 0.01f;
    c.weight_decay = 0.01f; /* outside the groups */
    const ug_param_group embeddings = names_group("embeddings", "wte.* conv.weigh?", 0.05f, 2.0f);
    REQUIRE_OK(ug_optimizer_add_group(&c, &embeddings));
    ug_param_group biases = ug_param_group_defaults();
    snprintf(biases.name, sizeof biases.name, "biases");
    biases.select = UG_SELECT_PREDICATE;
    biases.predicate = is_bias;
    biases.user = &calls;
    biases.lr_scale = 0.25f;
    REQUIRE_OK(ug_optimizer_add_group(&c, &biases));
    const int group[GPT_PARAMS] = {0, -1, 1, -1, 0, -1};
    run_case(dev, "Adam, groups by names and by predicate, the rest the configuration's", &c, GPT, GPT_PARAMS,
             group, 5);
    CHECK_MSG(calls == GPT_PARAMS, "the predicate was called %d times for %d parameters", calls, GPT_PARAMS);
}

/* clip_grad_norm_ over model.parameters(): a group at rate 0 still counts
 * in the norm that scales every other group's gradients. SGD with
 * Nesterov momentum and a step schedule. */
TS_TEST(clipping_spans_every_group)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_SGD);
    c.lr = 0.1f;
    c.momentum = 0.9f;
    c.nesterov = true;
    c.weight_decay = 0.02f;
    c.schedule = UG_SCHEDULE_STEP;
    c.step_size = 2;
    c.gamma = 0.5f;
    c.max_grad_norm = 2.0f;
    const ug_param_group frozen = names_group("frozen", "h.fc.weight", 0.5f, 0.0f);
    const ug_param_group norms = names_group("norms", "ln_?.weight", 0.0f, 3.0f);
    REQUIRE_OK(ug_optimizer_add_group(&c, &frozen));
    REQUIRE_OK(ug_optimizer_add_group(&c, &norms));
    const int group[GPT_PARAMS] = {-1, 0, -1, 1, -1, -1};
    run_case(dev, "SGD Nesterov, a frozen group inside the clipped norm", &c, GPT, GPT_PARAMS, group, 5);
}

/* More parameters than a HIP/CUDA launch takes (16): each tensor of every
 * launch keeps its own group's settings. */
TS_TEST(many_parameters_in_one_launch)
{
    param_spec specs[20];
    char names[20][24];
    int group[20];
    for (int k = 0; k < 20; k++) {
        const bool bias = k % 2;
        snprintf(names[k], sizeof names[k], "layer%d.%s", k / 2, bias ? "bias" : "weight");
        specs[k] = bias ? (param_spec){names[k], 1, {5 + k}} : (param_spec){names[k], 2, {3, 4 + k}};
        group[k] = bias;
    }
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
    c.lr = 0.02f;
    c.weight_decay = 0.2f;
    REQUIRE_OK(ug_optimizer_decay_matrices_only(&c));
    c.groups[1].lr_scale = 0.5f;
    run_case(dev, "AdamW over 20 parameters, alternating groups", &c, specs, 20, group, 3);
}

/* The optimizer's launches in a step: the same with groups as without. */
static int64_t optimizer_launches(ug_device *dev, const ug_optimizer_config *c)
{
    static ref_run r;
    run_setup s;
    const double ones[GPT_PARAMS] = {1, 1, 1, 1, 1, 1};
    if (!setup(dev, c, GPT, GPT_PARAMS, ones, ones, &s, &r))
        return -1;
    int64_t calls = -1;
    ug_profiler *prof = NULL;
    if (ug_graph_run(s.graph) == UG_OK && ug_profiler_start(dev, &prof) == UG_OK &&
        ug_graph_run(s.graph) == UG_OK && ug_profiler_stop(prof) == UG_OK) {
        calls = 0;
        ug_profile_op op;
        for (int i = 0; i < ug_profiler_op_count(prof); i++)
            if (ug_profiler_op_at(prof, UG_PROFILE_BY_CALLS, i, &op) == UG_OK && !strcmp(op.family, "optimizer"))
                calls += op.calls;
    } else {
        th_fail(TH_LOC, "profiling a step: %s", ug_last_error());
    }
    ug_profiler_free(prof);
    ts_cleanup();
    return calls;
}

TS_TEST(groups_add_no_launch)
{
    ug_optimizer_config plain = ug_optimizer_defaults(UG_ADAMW), grouped = plain;
    const ug_param_group fast = names_group("fast", "h.proj.weight", 0.3f, 4.0f);
    const ug_param_group vectors = {.name = "vectors", .select = UG_SELECT_VECTORS, .lr_scale = 0.5f};
    REQUIRE_OK(ug_optimizer_add_group(&grouped, &fast));
    REQUIRE_OK(ug_optimizer_add_group(&grouped, &vectors));
    const int64_t without = optimizer_launches(dev, &plain), with = optimizer_launches(dev, &grouped);
    printf("    %s: %lld optimizer launches a step without groups, %lld with two groups and the rest\n",
           ug_device_name(dev), (long long)without, (long long)with);
    CHECK(without >= 2); /* the step's scalars and at least one update */
    CHECK_EQ_I64(with, without);
}

/* ---- a tied parameter: an embedding table that is also the output head ---- */

enum { VOCAB = 7, DIM = 5, TOKENS = 6 };

/* d loss / d W for loss = mean cross-entropy(take(W, idx) W^T, labels):
 * the head's part dlogits^T x plus the embedding's dx scattered to the
 * rows idx picked. */
static void tied_gradient(const double *w, const int32_t *idx, const int32_t *labels, double *grad)
{
    double x[TOKENS][DIM], dl[TOKENS][VOCAB];
    memset(grad, 0, sizeof(double) * VOCAB * DIM);
    for (int b = 0; b < TOKENS; b++) {
        double logits[VOCAB], top = -INFINITY, sum = 0.0;
        for (int d = 0; d < DIM; d++)
            x[b][d] = w[idx[b] * DIM + d];
        for (int v = 0; v < VOCAB; v++) {
            logits[v] = 0.0;
            for (int d = 0; d < DIM; d++)
                logits[v] += x[b][d] * w[v * DIM + d];
            top = fmax(top, logits[v]);
        }
        for (int v = 0; v < VOCAB; v++)
            sum += exp(logits[v] - top);
        for (int v = 0; v < VOCAB; v++)
            dl[b][v] = (exp(logits[v] - top) / sum - (v == labels[b])) / TOKENS;
    }
    for (int b = 0; b < TOKENS; b++)
        for (int d = 0; d < DIM; d++) {
            double dx = 0.0;
            for (int v = 0; v < VOCAB; v++) {
                grad[v * DIM + d] += dl[b][v] * x[b][d]; /* the head */
                dx += dl[b][v] * w[v * DIM + d];
            }
            grad[idx[b] * DIM + d] += dx; /* the embedding */
        }
}

/* ug_graph_param of one tensor twice (ug_g_take's table and the head's
 * matmul weight): one gradient, the sum of both uses; one update per step
 * (SGD: p -= lr g, not twice that), clipped by the norm of that one sum. */
TS_TEST(tied_parameter)
{
    const int32_t idx[TOKENS] = {3, 1, 3, 6, 0, 3}, labels[TOKENS] = {1, 2, 0, 6, 3, 3};
    th_seed(0x71ed);
    float wf[VOCAB * DIM];
    double w[VOCAB * DIM], grad[VOCAB * DIM];
    for (int i = 0; i < VOCAB * DIM; i++)
        w[i] = wf[i] = (float)th_uniform(-1.0, 1.0);
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    ug_tensor *table = NULL;
    REQUIRE_OK(ug_model_param(m, "wte.weight", 2, (int64_t[]){VOCAB, DIM}, UG_INIT_UNIFORM, 1.0f, &table));
    REQUIRE_OK(ug_model_write_param(m, "wte.weight", wf, sizeof wf));
    ug_value *tokens = NULL, *targets = NULL, *embedding = NULL, *head = NULL, *x = NULL, *logits = NULL,
             *loss = NULL, *gw = NULL;
    const int64_t rows = TOKENS;
    REQUIRE_OK(ug_graph_input(g, "idx", UG_I32, 1, &rows, &tokens));
    REQUIRE_OK(ug_graph_input(g, "labels", UG_I32, 1, &rows, &targets));
    REQUIRE_OK(ug_graph_param(g, table, &embedding));
    REQUIRE_OK(ug_g_take(g, embedding, tokens, 0, &x));
    REQUIRE_OK(ug_graph_param(g, table, &head)); /* the same tensor, used again */
    CHECK(head == embedding);
    REQUIRE_OK(ug_g_matmul(g, x, head, false, true, &logits));
    REQUIRE_OK(ug_g_cross_entropy(g, logits, targets, 0.0f, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_grad(g, embedding, &gw));
    ug_optimizer_config c = ug_optimizer_defaults(UG_SGD);
    c.lr = 0.5f;
    c.max_grad_norm = 0.05f;
    ug_optimizer *opt = ts_optimizer(m, &c);
    REQUIRE(opt);
    CHECK_EQ_I64(ug_optimizer_param_count(opt), 1);
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_keep(g, gw));
    REQUIRE_OK(ug_graph_compile(g));
    ug_tensor *idx_t = ts_tensor_i32(dev, TOKENS, idx), *labels_t = ts_tensor_i32(dev, TOKENS, labels);
    REQUIRE(idx_t && labels_t);
    REQUIRE_OK(ug_graph_bind(g, tokens, idx_t));
    REQUIRE_OK(ug_graph_bind(g, targets, labels_t));
    for (int step = 1; step <= 3; step++) {
        REQUIRE_OK(ug_graph_run(g));
        tied_gradient(w, idx, labels, grad);
        float got[VOCAB * DIM];
        REQUIRE_OK(ug_graph_read(g, gw, got, sizeof got));
        double got_d[VOCAB * DIM], norm = 0.0;
        for (int i = 0; i < VOCAB * DIM; i++) {
            got_d[i] = got[i];
            norm += grad[i] * grad[i];
        }
        th_context("step %d", step);
        th_compare("the tied table's gradient", got_d, grad, VOCAB * DIM, 1e-10);
        norm = sqrt(norm);
        REQUIRE(norm > 2.0 * c.max_grad_norm); /* the case must clip */
        const double coef = c.max_grad_norm / (norm + 1e-6);
        for (int i = 0; i < VOCAB * DIM; i++)
            w[i] -= c.lr * coef * grad[i];
        REQUIRE_OK(ug_tensor_download(table, wf, sizeof wf));
        for (int i = 0; i < VOCAB * DIM; i++)
            if (!ts_close(wf[i], w[i], 1e-5, 1e-7)) {
                th_fail(TH_LOC, "wte.weight[%d] is %.9g after step %d, one clipped SGD step of the summed "
                        "gradient gives %.9g", i, (double)wf[i], step, w[i]);
                break;
            }
    }
    th_context("%s", "");
}

/* ---- what the optimizer refuses ---- */

static bool never(const char *name, int ndim, const int64_t *shape, void *user)
{
    (void)name, (void)ndim, (void)shape, (void)user;
    return false;
}

/* ug_optimizer_create refuses c with status want and a message holding
 * part (the configuration is as given, not through ug_optimizer_add_group). */
static void refused(ug_model *m, const ug_optimizer_config *c, const char *part, const char *part2)
{
    ug_optimizer *opt = NULL;
    if (CHECK_STATUS(ug_optimizer_create(m, c, &opt), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS(part, part2);
    CHECK(opt == NULL);
    ug_optimizer_free(opt);
}

TS_TEST(refusals)
{
    ug_model *m = ts_model(dev, 1);
    REQUIRE(m);
    for (int k = 0; k < GPT_PARAMS; k++) {
        ug_tensor *t = NULL;
        REQUIRE_OK(ug_model_param(m, GPT[k].name, GPT[k].ndim, GPT[k].shape, UG_INIT_UNIFORM, 1.0f, &t));
    }
    const ug_optimizer_config base = ug_optimizer_defaults(UG_ADAMW);
    ug_optimizer_config c = base;
    /* A parameter two groups choose. */
    REQUIRE_OK(ug_optimizer_decay_matrices_only(&c));
    c.groups[c.group_count++] = names_group("embeddings", "wte.weight", 0.0f, 1.0f);
    refused(m, &c, "'wte.weight' is chosen by group 'decay' and group 'embeddings'", "one group");
    /* A name, glob or predicate that chooses nothing. */
    c = base;
    c.groups[c.group_count++] = names_group("typo", "wte.weight ln_f.wieght", 0.0f, 1.0f);
    refused(m, &c, "group 'typo': 'ln_f.wieght' matches no parameter", "ln_f.weight");
    c.groups[0] = names_group("", "*.nothing", 0.0f, 1.0f);
    refused(m, &c, "group 0: '*.nothing' matches no parameter", "wte.weight");
    c.groups[0] = ug_param_group_defaults();
    c.groups[0].select = UG_SELECT_PREDICATE;
    c.groups[0].predicate = never;
    refused(m, &c, "its predicate chose none of the model's 6 parameters", NULL);
    /* Settings and fields. */
    c.groups[0] = names_group("g", "wte.weight", -0.1f, 1.0f);
    refused(m, &c, "weight_decay -0.1 and lr_scale 1 must be finite and >= 0", NULL);
    c.groups[0] = names_group("g", "wte.weight", 0.0f, INFINITY);
    refused(m, &c, "lr_scale inf must be finite", NULL);
    c.groups[0] = names_group("g", "wte.weight", NAN, 1.0f);
    refused(m, &c, "weight_decay nan", NULL);
    c.groups[0] = names_group("g", "   ", 0.0f, 1.0f);
    refused(m, &c, "group 'g' chooses by name (UG_SELECT_NAMES) and its pattern is empty", NULL);
    c.groups[0] = names_group("g", "*.bias", 0.0f, 1.0f);
    c.groups[0].select = UG_SELECT_MATRICES;
    refused(m, &c, "group 'g' has a pattern (\"*.bias\") but does not choose by name", NULL);
    c.groups[0] = ug_param_group_defaults();
    c.groups[0].select = UG_SELECT_PREDICATE;
    refused(m, &c, "select UG_SELECT_PREDICATE needs a predicate", NULL);
    c.groups[0] = names_group("g", "wte.weight", 0.0f, 1.0f);
    c.groups[0].predicate = never;
    refused(m, &c, "a predicate is only for select UG_SELECT_PREDICATE", NULL);
    c.groups[0] = names_group("g", "wte.weight", 0.0f, 1.0f);
    c.groups[0].select = (ug_param_select)7;
    refused(m, &c, "select 7 is not a ug_param_select", NULL);
    c.groups[0] = names_group("g", "wte.weight", 0.0f, 1.0f);
    memset(c.groups[0].name, 'x', sizeof c.groups[0].name);
    refused(m, &c, "group 0's name is not a string of at most 31 characters", NULL);
    c.groups[0] = names_group("g", "wte.weight", 0.0f, 1.0f);
    memset(c.groups[0].pattern, 'w', sizeof c.groups[0].pattern);
    refused(m, &c, "the pattern of group 'g' is not a string of at most 255 characters", NULL);
    c.groups[0] = names_group("same", "wte.weight", 0.0f, 1.0f);
    c.groups[c.group_count++] = names_group("same", "h.fc.bias", 0.0f, 1.0f);
    refused(m, &c, "groups 0 and 1 are both named 'same'", NULL);
    c.group_count = 1;
    c.lr = 1e30f;
    c.groups[0] = names_group("huge", "wte.weight", 0.0f, 1e10f);
    refused(m, &c, "group 'huge': lr_scale 1e+10 times the learning rate 1e+30 must stay below FLT_MAX / 2", NULL);
    c.lr = base.lr;
    c.group_count = UG_OPTIMIZER_MAX_GROUPS + 1;
    refused(m, &c, "group_count 9 must be 0 to 8", NULL);
    c.group_count = -1;
    refused(m, &c, "group_count -1 must be 0 to 8", NULL);

    /* ug_optimizer_add_group: checked as it enters, the config unchanged on error. */
    c = base;
    const ug_param_group empty = ug_param_group_defaults();
    if (CHECK_STATUS(ug_optimizer_add_group(&c, &empty), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ug_optimizer_add_group", "pattern is empty");
    CHECK(c.group_count == 0);
    for (int k = 0; k < UG_OPTIMIZER_MAX_GROUPS; k++) {
        char name[16];
        snprintf(name, sizeof name, "g%d", k);
        const ug_param_group one = names_group(name, "wte.weight", 0.0f, 1.0f);
        CHECK_OK(ug_optimizer_add_group(&c, &one));
    }
    const ug_param_group ninth = names_group("g9", "wte.weight", 0.0f, 1.0f);
    if (CHECK_STATUS(ug_optimizer_add_group(&c, &ninth), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("has 8 groups; at most 8");
    CHECK(c.group_count == UG_OPTIMIZER_MAX_GROUPS);
    c.group_count = UG_OPTIMIZER_MAX_GROUPS - 1;
    if (CHECK_STATUS(ug_optimizer_decay_matrices_only(&c), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ug_optimizer_decay_matrices_only", "at most 8");
    CHECK(c.group_count == UG_OPTIMIZER_MAX_GROUPS - 1);
    CHECK_STATUS(ug_optimizer_add_group(NULL, &ninth), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_add_group(&c, NULL), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_decay_matrices_only(NULL), UG_ERR_INVALID_ARGUMENT);

    /* A shape rule may choose nothing: a model of matrices only. */
    ug_model *matrices = ts_model(dev, 2);
    REQUIRE(matrices);
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_model_param(matrices, "w", 2, (int64_t[]){3, 4}, UG_INIT_UNIFORM, 1.0f, &t));
    c = base;
    REQUIRE_OK(ug_optimizer_decay_matrices_only(&c));
    ug_optimizer *opt = ts_optimizer(matrices, &c);
    REQUIRE(opt);
    int group = -2;
    CHECK_OK(ug_optimizer_param_group(opt, 0, &group));
    CHECK(group == 0);
    if (CHECK_STATUS(ug_optimizer_param_group(opt, 1, &group), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("parameter 1 out of range (the optimizer updates 1)");
    CHECK_STATUS(ug_optimizer_param_group(NULL, 0, &group), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_optimizer_param_group(opt, 0, NULL), UG_ERR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(adamw_decay_matrices_only),
        TH_DEVICE_TEST(adam_names_and_predicate),
        TH_DEVICE_TEST(clipping_spans_every_group),
        TH_DEVICE_TEST(many_parameters_in_one_launch),
        TH_DEVICE_TEST(groups_add_no_launch),
        TH_DEVICE_TEST(tied_parameter),
        TH_DEVICE_TEST(refusals),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
