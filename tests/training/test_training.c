/* Training end to end, on every device: a tiny MLP fits a tiny data set;
 * runs are bitwise reproducible on a device and agree across devices;
 * the steady-state step asks the memory pool for nothing; the graph's
 * memory figures are plausible; dropout masks, scales and reproduces as
 * documented; and misuse of graphs and models returns the documented
 * status with a helpful message. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

/* ---- an MLP: in -> hidden (ReLU, optional dropout) -> classes, cross-entropy ---- */

typedef struct mlp {
    ug_graph *graph;
    ug_optimizer *opt;
    ug_value *x, *y, *logits, *loss;
} mlp;

typedef struct mlp_shape {
    int64_t batch, in, hidden, classes;
    float dropout;
} mlp_shape;

/* Builds, attaches the optimizer (none when oc is NULL) and compiles. */
static bool mlp_make(ug_model *m, const mlp_shape *s, const ug_optimizer_config *oc, uint64_t graph_seed,
                     mlp *out)
{
    memset(out, 0, sizeof *out);
    ug_graph *g = ts_graph(m);
    if (!g)
        return false;
    out->graph = g;
    ug_value *h = NULL;
    ug_status st = ug_graph_set_seed(g, graph_seed);
    if (st == UG_OK) st = ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){s->batch, s->in}, &out->x);
    if (st == UG_OK) st = ug_graph_input(g, "y", UG_I32, 1, &s->batch, &out->y);
    if (st == UG_OK) st = ug_nn_linear(g, "fc1", out->x, s->hidden, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK && s->dropout > 0.0f) st = ug_g_dropout(g, h, s->dropout, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, s->classes, &out->logits);
    if (st == UG_OK) st = ug_g_cross_entropy(g, out->logits, out->y, 0.0f, &out->loss);
    if (st == UG_OK) st = ug_graph_backward(g, out->loss);
    if (st == UG_OK && oc) {
        out->opt = ts_optimizer(m, oc);
        if (!out->opt)
            return false;
        st = ug_graph_set_optimizer(g, out->opt);
    }
    if (st == UG_OK) st = ug_graph_compile(g);
    if (st != UG_OK) {
        th_fail(TH_LOC, "building the MLP returned %s: %s", ug_status_name(st), ug_last_error());
        return false;
    }
    return true;
}

static bool mlp_bind(mlp *n, ug_tensor *x, ug_tensor *y)
{
    ug_status st = ug_graph_bind(n->graph, n->x, x);
    if (st == UG_OK)
        st = ug_graph_bind(n->graph, n->y, y);
    if (st != UG_OK)
        th_fail(TH_LOC, "binding returned %s: %s", ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

static bool run_steps(mlp *n, int steps)
{
    for (int i = 0; i < steps; i++) {
        ug_status st = ug_graph_run(n->graph);
        if (st != UG_OK) {
            th_fail(TH_LOC, "step %d: ug_graph_run returned %s: %s", i, ug_status_name(st), ug_last_error());
            return false;
        }
    }
    return true;
}

static float read_loss(mlp *n)
{
    float loss = NAN;
    ug_status st = ug_graph_read(n->graph, n->loss, &loss, sizeof loss);
    if (st != UG_OK)
        th_fail(TH_LOC, "reading the loss returned %s: %s", ug_status_name(st), ug_last_error());
    return loss;
}

/* The MLP's mean cross-entropy in double from the model's parameters. */
static double host_mlp_loss(const ug_model *m, const mlp_shape *s, const float *x, const int32_t *y,
                            int *correct)
{
    int64_t nw1 = s->hidden * s->in, nw2 = s->classes * s->hidden;
    float *w1 = th_alloc((size_t)nw1 * sizeof(float)), *b1 = th_alloc((size_t)s->hidden * sizeof(float));
    float *w2 = th_alloc((size_t)nw2 * sizeof(float)), *b2 = th_alloc((size_t)s->classes * sizeof(float));
    if (ug_model_read_param(m, "fc1.weight", w1, (size_t)nw1 * sizeof(float)) != UG_OK ||
        ug_model_read_param(m, "fc1.bias", b1, (size_t)s->hidden * sizeof(float)) != UG_OK ||
        ug_model_read_param(m, "fc2.weight", w2, (size_t)nw2 * sizeof(float)) != UG_OK ||
        ug_model_read_param(m, "fc2.bias", b2, (size_t)s->classes * sizeof(float)) != UG_OK) {
        th_fail(TH_LOC, "reading the parameters: %s", ug_last_error());
        return NAN;
    }
    double *h = th_alloc((size_t)s->hidden * sizeof(double)), *z = th_alloc((size_t)s->classes * sizeof(double));
    double total = 0.0;
    *correct = 0;
    for (int64_t r = 0; r < s->batch; r++) {
        for (int64_t j = 0; j < s->hidden; j++) {
            double a = b1[j];
            for (int64_t k = 0; k < s->in; k++)
                a += (double)x[r * s->in + k] * w1[j * s->in + k];
            h[j] = a > 0.0 ? a : 0.0;
        }
        double mx = -INFINITY;
        int64_t best = 0;
        for (int64_t c = 0; c < s->classes; c++) {
            double a = b2[c];
            for (int64_t j = 0; j < s->hidden; j++)
                a += h[j] * w2[c * s->hidden + j];
            z[c] = a;
            if (a > mx) {
                mx = a;
                best = c;
            }
        }
        double sum = 0.0;
        for (int64_t c = 0; c < s->classes; c++)
            sum += exp(z[c] - mx);
        total += mx + log(sum) - z[y[r]];
        *correct += best == y[r];
    }
    return total / (double)s->batch;
}

/* Random data: x in [-1, 1), labels in [0, classes). */
static void make_data(const mlp_shape *s, float **x, int32_t **y)
{
    *x = th_alloc((size_t)(s->batch * s->in) * sizeof(float));
    *y = th_alloc((size_t)s->batch * sizeof(int32_t));
    for (int64_t i = 0; i < s->batch * s->in; i++)
        (*x)[i] = (float)th_uniform(-1.0, 1.0);
    for (int64_t i = 0; i < s->batch; i++)
        (*y)[i] = (int32_t)(i % s->classes);
}

static ug_optimizer_config adam(float lr)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.lr = lr;
    return c;
}

/* ---- fitting ---- */

TS_TEST(tiny_mlp_fits)
{
    const mlp_shape s = {.batch = 12, .in = 4, .hidden = 16, .classes = 3};
    float *x;
    int32_t *y;
    make_data(&s, &x, &y);
    ug_model *m = ts_model(dev, 42);
    REQUIRE(m);
    ug_optimizer_config oc = adam(0.02f);
    mlp n;
    REQUIRE(mlp_make(m, &s, &oc, 1, &n));
    ug_tensor *xt = ts_tensor_f32(dev, 2, (int64_t[]){s.batch, s.in}, x), *yt = ts_tensor_i32(dev, s.batch, y);
    REQUIRE(xt && yt);
    REQUIRE(mlp_bind(&n, xt, yt));
    REQUIRE(run_steps(&n, 1));
    float first = read_loss(&n);
    int correct = 0;
    /* The first step's loss is that of the initial parameters. */
    CHECK_MSG(isfinite(first) && first > 0.5f, "initial loss %g", (double)first);
    int steps = 1;
    float loss = first;
    for (; steps < 400 && !(loss < 0.005f); steps += 50) {
        REQUIRE(run_steps(&n, 50));
        loss = read_loss(&n);
    }
    CHECK_MSG(loss < 0.01f, "loss %.6g after %d Adam steps (first %.6g)", (double)loss, steps, (double)first);
    /* The trained parameters, evaluated in double on the host, fit too. */
    double host = host_mlp_loss(m, &s, x, y, &correct);
    CHECK_MSG(host < 0.01, "host loss of the trained parameters %.6g", host);
    CHECK_EQ_I64(correct, s.batch);

    /* An eval graph on the same model reuses the trained layers: its loss is
     * the host's, its predictions the labels. */
    ug_graph *e = ts_graph(m);
    REQUIRE(e);
    ug_value *ex = NULL, *ey = NULL, *eh = NULL, *elogits = NULL, *eloss = NULL, *epred = NULL;
    REQUIRE_OK(ug_graph_set_training(e, false));
    REQUIRE_OK(ug_graph_input(e, "x", UG_F32, 2, (int64_t[]){s.batch, s.in}, &ex));
    REQUIRE_OK(ug_graph_input(e, "y", UG_I32, 1, &s.batch, &ey));
    REQUIRE_OK(ug_nn_linear(e, "fc1", ex, s.hidden, &eh));
    REQUIRE_OK(ug_g_relu(e, eh, &eh));
    REQUIRE_OK(ug_nn_linear(e, "fc2", eh, s.classes, &elogits));
    REQUIRE_OK(ug_g_cross_entropy(e, elogits, ey, 0.0f, &eloss));
    REQUIRE_OK(ug_g_argmax(e, elogits, -1, &epred));
    REQUIRE_OK(ug_graph_keep(e, eloss));
    REQUIRE_OK(ug_graph_keep(e, epred));
    REQUIRE_OK(ug_graph_compile(e));
    CHECK_EQ_I64(ug_model_param_count(m), 4);
    REQUIRE_OK(ug_graph_bind(e, ex, xt));
    REQUIRE_OK(ug_graph_bind(e, ey, yt));
    REQUIRE_OK(ug_graph_run(e));
    float eval_loss = NAN;
    int32_t pred[12];
    REQUIRE_OK(ug_graph_read(e, eloss, &eval_loss, sizeof eval_loss));
    REQUIRE_OK(ug_graph_read(e, epred, pred, sizeof pred));
    /* Near-zero cross-entropies are differences of logits of a few units:
     * f32 leaves ~1e-6 absolute per row. */
    CHECK_MSG(ts_close(eval_loss, host, 1e-4, 1e-5), "eval graph loss %.9g, host %.9g", (double)eval_loss, host);
    for (int i = 0; i < 12; i++)
        CHECK_MSG(pred[i] == y[i], "sample %d predicted %d, label %d", i, pred[i], y[i]);
    printf("    %s: loss %.3g -> %.3g in %d steps\n", ug_device_name(dev), (double)first, (double)loss, steps);
}

/* The device's loss is the loss of the parameters the step started from,
 * for whichever batch is bound (inputs rebound between steps). */
TS_TEST(loss_matches_host)
{
    const mlp_shape s = {.batch = 10, .in = 7, .hidden = 9, .classes = 4};
    float *x[2];
    int32_t *y[2];
    make_data(&s, &x[0], &y[0]);
    make_data(&s, &x[1], &y[1]);
    for (int64_t i = 0; i < s.batch; i++)
        y[1][i] = (int32_t)((i * 7 + 3) % s.classes);
    ug_model *m = ts_model(dev, 3);
    REQUIRE(m);
    ug_optimizer_config oc = adam(0.01f);
    mlp n;
    REQUIRE(mlp_make(m, &s, &oc, 1, &n));
    /* The batches are slices of one tensor (as a data loader hands them
     * out): the second starts at an offset. */
    float *xall = th_alloc((size_t)(2 * s.batch * s.in) * sizeof(float));
    int32_t *yall = th_alloc((size_t)(2 * s.batch) * sizeof(int32_t));
    for (int b = 0; b < 2; b++) {
        memcpy(xall + b * s.batch * s.in, x[b], (size_t)(s.batch * s.in) * sizeof(float));
        memcpy(yall + b * s.batch, y[b], (size_t)s.batch * sizeof(int32_t));
    }
    ug_tensor *xbig = ts_tensor_f32(dev, 2, (int64_t[]){2 * s.batch, s.in}, xall);
    ug_tensor *ybig = ts_tensor_i32(dev, 2 * s.batch, yall);
    REQUIRE(xbig && ybig);
    ug_tensor *xt[2], *yt[2];
    for (int b = 0; b < 2; b++) {
        REQUIRE_OK(ug_tensor_slice(xbig, b * s.batch, s.batch, &xt[b]));
        th_track(xt[b]);
        REQUIRE_OK(ug_tensor_slice(ybig, b * s.batch, s.batch, &yt[b]));
        th_track(yt[b]);
    }
    for (int step = 0; step < 4; step++) {
        int b = step % 2, correct = 0;
        REQUIRE(mlp_bind(&n, xt[b], yt[b]));
        double want = host_mlp_loss(m, &s, x[b], y[b], &correct);
        REQUIRE(run_steps(&n, 1));
        float got = read_loss(&n);
        CHECK_MSG(ts_close(got, want, 1e-5, 1e-6), "step %d (batch %d): loss %.9g, host %.9g", step, b,
                  (double)got, want);
    }
}

/* ---- reproducibility ---- */

static float *train_params(ug_device *dev, uint64_t seed, uint64_t graph_seed, float dropout, int steps,
                           int64_t *count)
{
    const mlp_shape s = {.batch = 16, .in = 12, .hidden = 24, .classes = 5, .dropout = dropout};
    th_seed(7);
    float *x;
    int32_t *y;
    make_data(&s, &x, &y);
    ug_model *m = ts_model(dev, seed);
    if (!m)
        return NULL;
    ug_optimizer_config oc = adam(0.01f);
    oc.max_grad_norm = 1.0f;
    mlp n;
    if (!mlp_make(m, &s, &oc, graph_seed, &n))
        return NULL;
    ug_tensor *xt = ts_tensor_f32(dev, 2, (int64_t[]){s.batch, s.in}, x), *yt = ts_tensor_i32(dev, s.batch, y);
    if (!xt || !yt || !mlp_bind(&n, xt, yt) || !run_steps(&n, steps))
        return NULL;
    return ts_model_params(m, count);
}

static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

TS_TEST(same_seed_bitwise)
{
    for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
        float p = with_dropout ? 0.3f : 0.0f;
        th_context("dropout %g", (double)p);
        int64_t na = 0, nb = 0, nc = 0;
        float *a = train_params(dev, 11, 5, p, 20, &na);
        float *b = train_params(dev, 11, 5, p, 20, &nb);
        REQUIRE(a && b && na == nb && na > 0);
        th_compare_bits("parameters after 20 steps, same seed", b, a, na, sizeof(float));
        /* The check can fail: another model seed (and, with dropout, another
         * mask seed) ends elsewhere. */
        float *c = train_params(dev, 12, 5, p, 20, &nc);
        REQUIRE(c && nc == na);
        CHECK_MSG(!same_bits(a, c, na), "another model seed gave the same parameters");
        if (with_dropout) {
            float *d = train_params(dev, 11, 6, p, 20, &nc);
            REQUIRE(d && nc == na);
            CHECK_MSG(!same_bits(a, d, na), "another dropout seed gave the same parameters");
        }
    }
}

/* The same seed on every device: bitwise the same initial parameters
 * (counter-based Philox), and losses within 1e-4 relative over 20 steps. */
TS_HOST_TEST(same_seed_across_devices)
{
    (void)dev;
    if (th_device_count() < 2) {
        th_skip("one device under test (%s); needs two, e.g. cpu and opencl:0",
                th_device_count() ? ug_device_name(th_device(0)) : "none");
        return;
    }
    const mlp_shape s = {.batch = 32, .in = 64, .hidden = 32, .classes = 10};
    float *x;
    int32_t *y;
    make_data(&s, &x, &y);
    enum { STEPS = 20 };
    float losses[8][STEPS] = {{0}};
    float *init[8] = {0};
    int64_t count[8] = {0};
    int devices = th_device_count() < 8 ? th_device_count() : 8;
    for (int d = 0; d < devices; d++) {
        ug_device *dv = th_device(d);
        th_context("%s", ug_device_name(dv));
        ug_model *m = ts_model(dv, 2024);
        REQUIRE(m);
        ug_optimizer_config oc = adam(0.01f);
        mlp n;
        REQUIRE(mlp_make(m, &s, &oc, 3, &n));
        init[d] = ts_model_params(m, &count[d]);
        REQUIRE(init[d]);
        ug_tensor *xt = ts_tensor_f32(dv, 2, (int64_t[]){s.batch, s.in}, x), *yt = ts_tensor_i32(dv, s.batch, y);
        REQUIRE(xt && yt);
        REQUIRE(mlp_bind(&n, xt, yt));
        for (int step = 0; step < STEPS; step++) {
            REQUIRE(run_steps(&n, 1));
            losses[d][step] = read_loss(&n);
        }
        ts_cleanup();
    }
    th_context("%s", "");
    for (int d = 1; d < devices; d++) {
        const char *a = ug_device_name(th_device(0)), *b = ug_device_name(th_device(d));
        char what[96];
        snprintf(what, sizeof what, "initial parameters on %s against %s", b, a);
        REQUIRE(count[d] == count[0]);
        th_compare_bits(what, init[d], init[0], count[0], sizeof(float));
        for (int step = 0; step < STEPS; step++)
            CHECK_MSG(ts_close(losses[d][step], losses[0][step], 1e-4, 0.0),
                      "step %d: loss %.9g on %s, %.9g on %s", step + 1, (double)losses[d][step], b,
                      (double)losses[0][step], a);
        printf("    loss after %d steps: %.9g on %s, %.9g on %s\n", STEPS, (double)losses[0][STEPS - 1], a,
               (double)losses[d][STEPS - 1], b);
    }
    CHECK_MSG(losses[0][STEPS - 1] < losses[0][0], "the loss did not fall: %g -> %g", (double)losses[0][0],
              (double)losses[0][STEPS - 1]);
}

/* ---- memory ---- */

/* After the first step a training step makes no pool request at all: no
 * device allocation and no cache hit, with inputs rebound every step to
 * preallocated tensors and the loss read now and then. */
TS_TEST(steady_state_no_allocation)
{
    const mlp_shape s = {.batch = 8, .in = 10, .hidden = 16, .classes = 4, .dropout = 0.2f};
    float *x0, *x1;
    int32_t *y0, *y1;
    make_data(&s, &x0, &y0);
    make_data(&s, &x1, &y1);
    ug_model *m = ts_model(dev, 9);
    REQUIRE(m);
    ug_optimizer_config oc = adam(0.01f);
    oc.max_grad_norm = 1.0f;
    oc.weight_decay = 0.01f;
    oc.schedule = UG_SCHEDULE_COSINE;
    oc.warmup_steps = 5;
    oc.total_steps = 200;
    mlp n;
    REQUIRE(mlp_make(m, &s, &oc, 1, &n));
    int64_t xs[2] = {s.batch, s.in};
    ug_tensor *xt[2] = {ts_tensor_f32(dev, 2, xs, x0), ts_tensor_f32(dev, 2, xs, x1)};
    ug_tensor *yt[2] = {ts_tensor_i32(dev, s.batch, y0), ts_tensor_i32(dev, s.batch, y1)};
    REQUIRE(xt[0] && xt[1] && yt[0] && yt[1]);
    REQUIRE(mlp_bind(&n, xt[0], yt[0]));
    REQUIRE(run_steps(&n, 1));
    REQUIRE_OK(ug_device_synchronize(dev));
    ug_memory_stats before = th_stats(dev);
    for (int step = 1; step <= 100; step++) {
        REQUIRE(mlp_bind(&n, xt[step % 2], yt[step % 2]));
        REQUIRE(run_steps(&n, 1));
        if (step % 25 == 0)
            CHECK(isfinite(read_loss(&n)));
    }
    REQUIRE_OK(ug_device_synchronize(dev));
    ug_memory_stats after = th_stats(dev);
    CHECK_MSG(after.allocations == before.allocations, "%llu device allocations during 100 steps",
              (unsigned long long)(after.allocations - before.allocations));
    CHECK_MSG(after.cache_hits == before.cache_hits, "%llu pool requests served from the cache during 100 steps",
              (unsigned long long)(after.cache_hits - before.cache_hits));
    CHECK_MSG(after.bytes_in_use == before.bytes_in_use, "bytes in use went from %llu to %llu",
              (unsigned long long)before.bytes_in_use, (unsigned long long)after.bytes_in_use);
    CHECK_EQ_I64(ug_optimizer_steps(n.opt), 101);
}

TS_TEST(graph_memory_figures)
{
    ug_model *m = ts_model(dev, 4);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    ug_graph_memory_info info;
    memset(&info, 0, sizeof info);
    ug_value *x = NULL, *y = NULL, *h = NULL, *logits = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){32, 20}, &x));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, (int64_t[]){32}, &y));
    REQUIRE_OK(ug_nn_linear(g, "fc1", x, 48, &h));
    REQUIRE_OK(ug_g_relu(g, h, &h));
    REQUIRE_OK(ug_nn_linear(g, "fc2", h, 40, &h));
    REQUIRE_OK(ug_g_relu(g, h, &h));
    REQUIRE_OK(ug_nn_linear(g, "fc3", h, 6, &logits));
    REQUIRE_OK(ug_g_cross_entropy(g, logits, y, 0.0f, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_optimizer_config oc = adam(1e-3f);
    ug_optimizer *o = ts_optimizer(m, &oc);
    REQUIRE(o);
    REQUIRE_OK(ug_graph_set_optimizer(g, o));
    REQUIRE_OK(ug_device_synchronize(dev));
    ug_memory_stats before = th_stats(dev);
    REQUIRE_OK(ug_graph_compile(g));
    ug_memory_stats after = th_stats(dev);
    REQUIRE_OK(ug_graph_memory(g, &info));
    uint64_t param_bytes = 4u * (48 * 20 + 48 + 40 * 48 + 40 + 6 * 40 + 6);
    /* Activations: at least the first hidden layer's output and the logits. */
    uint64_t smallest = 4u * (32 * 48 + 32 * 6);
    printf("    %s: activations %llu B (unplanned %llu B), gradients %llu B, %d nodes, %d fused\n",
           ug_device_name(dev), (unsigned long long)info.activation_bytes,
           (unsigned long long)info.unplanned_bytes, (unsigned long long)info.gradient_bytes, info.nodes,
           info.fused);
    CHECK_MSG(info.activation_bytes >= smallest, "activation_bytes %llu < %llu",
              (unsigned long long)info.activation_bytes, (unsigned long long)smallest);
    CHECK_MSG(info.activation_bytes <= info.unplanned_bytes, "activation_bytes %llu > unplanned_bytes %llu",
              (unsigned long long)info.activation_bytes, (unsigned long long)info.unplanned_bytes);
    /* Three layers' activations and their gradients are not all alive at once. */
    CHECK_MSG(info.activation_bytes < info.unplanned_bytes, "no reuse: activation_bytes %llu == unplanned_bytes",
              (unsigned long long)info.activation_bytes);
    CHECK_MSG(info.gradient_bytes == param_bytes, "gradient_bytes %llu, the parameters hold %llu",
              (unsigned long long)info.gradient_bytes, (unsigned long long)param_bytes);
    CHECK_MSG(info.fused >= 2, "fused %d: both bias adds should take their ReLU", info.fused);
    CHECK_MSG(info.nodes > 10 && info.nodes < 200, "nodes %d", info.nodes);
    /* What compile took from the pool is what the figures say (blocks may round up). */
    uint64_t taken = after.bytes_in_use - before.bytes_in_use;
    CHECK_MSG(taken >= info.activation_bytes + info.gradient_bytes &&
                  taken <= 2 * (info.activation_bytes + info.gradient_bytes) + (1u << 16),
              "compile took %llu bytes from the pool for %llu of activations and gradients",
              (unsigned long long)taken, (unsigned long long)(info.activation_bytes + info.gradient_bytes));

    /* One Linear + ReLU: the bias add takes the ReLU. */
    ug_graph *g2 = ts_graph(m);
    REQUIRE(g2);
    ug_value *x2 = NULL, *h2 = NULL, *s2 = NULL;
    REQUIRE_OK(ug_graph_input(g2, "x", UG_F32, 2, (int64_t[]){32, 20}, &x2));
    REQUIRE_OK(ug_nn_linear(g2, "fc1", x2, 48, &h2));
    REQUIRE_OK(ug_g_relu(g2, h2, &h2));
    REQUIRE_OK(ug_g_mean(g2, h2, 0, true, &s2));
    REQUIRE_OK(ug_graph_backward(g2, s2));
    REQUIRE_OK(ug_graph_compile(g2));
    REQUIRE_OK(ug_graph_memory(g2, &info));
    CHECK_MSG(info.fused >= 1, "Linear+ReLU: fused %d", info.fused);
    CHECK(info.activation_bytes > 0 && info.activation_bytes <= info.unplanned_bytes);
    CHECK_MSG(info.gradient_bytes == 4u * (48 * 20 + 48), "gradient_bytes %llu",
              (unsigned long long)info.gradient_bytes);
}

/* Batch norm takes the ReLU after it (one node fewer), and the graph gives
 * what the unfused graph, whose normalised values are kept readable and so
 * not fused, gives: outputs and gradients (x's, the weight's, the bias's)
 * within float rounding. */
enum { BNR_N = 6, BNR_C = 3, BNR_HW = 20, BNR_NUMEL = BNR_N * BNR_C * BNR_HW };

static void bn_relu_run(ug_device *dev, bool keep, float **read, int *fused)
{
    ug_model *m = ts_model(dev, 21);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    const int64_t shape[4] = {BNR_N, BNR_C, 4, 5};
    ug_tensor *xp = NULL;
    REQUIRE_OK(ug_model_param(m, "x", 4, shape, UG_INIT_UNIFORM, 2.0f, &xp));
    float cf[BNR_NUMEL];
    for (int i = 0; i < BNR_NUMEL; i++)
        cf[i] = (float)((i * 7) % 11) - 5.0f;
    ug_tensor *ct = ts_tensor_f32(dev, 4, shape, cf);
    REQUIRE(ct);
    ug_value *x = NULL, *c = NULL, *b = NULL, *r = NULL, *p = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_param(g, xp, &x));
    REQUIRE_OK(ug_graph_input(g, "c", UG_F32, 4, shape, &c));
    REQUIRE_OK(ug_graph_bind(g, c, ct));
    REQUIRE_OK(ug_nn_batch_norm(g, "bn", x, &b));
    REQUIRE_OK(ug_g_relu(g, b, &r));
    REQUIRE_OK(ug_g_mul(g, r, c, &p));
    REQUIRE_OK(ug_g_mean(g, p, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    if (keep)
        REQUIRE_OK(ug_graph_keep(g, b));
    REQUIRE_OK(ug_graph_keep(g, r));
    ug_tensor *wp = NULL, *bp = NULL;
    REQUIRE_OK(ug_model_find_param(m, "bn.weight", &wp));
    REQUIRE_OK(ug_model_find_param(m, "bn.bias", &bp));
    ug_value *w = NULL, *bias = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
    REQUIRE_OK(ug_graph_param(g, wp, &w));
    REQUIRE_OK(ug_graph_param(g, bp, &bias));
    REQUIRE_OK(ug_graph_grad(g, x, &gx));
    REQUIRE_OK(ug_graph_grad(g, w, &gw));
    REQUIRE_OK(ug_graph_grad(g, bias, &gb));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_run(g));
    ug_graph_memory_info info;
    REQUIRE_OK(ug_graph_memory(g, &info));
    *fused = info.fused;
    read[0] = ts_read(g, r);
    read[1] = ts_read(g, gx);
    read[2] = ts_read(g, gw);
    read[3] = ts_read(g, gb);
}

TS_TEST(batch_norm_takes_its_relu)
{
    float *fused[4] = {0}, *plain[4] = {0};
    int fused_count = 0, plain_count = 0;
    bn_relu_run(dev, false, fused, &fused_count);
    bn_relu_run(dev, true, plain, &plain_count);
    CHECK_MSG(fused_count == plain_count + 1, "fused %d nodes, %d with the values kept", fused_count,
              plain_count);
    static const char *const names[4] = {"relu(bn(x))", "x's gradient", "weight's gradient",
                                         "bias's gradient"};
    static const int counts[4] = {BNR_NUMEL, BNR_NUMEL, BNR_C, BNR_C};
    int zeros = 0;
    for (int k = 0; k < 4; k++) {
        REQUIRE(fused[k] && plain[k]);
        for (int i = 0; i < counts[k]; i++) {
            zeros += k == 0 && fused[k][i] == 0.0f;
            CHECK_MSG(ts_close(fused[k][i], plain[k][i], 1e-6, 1e-6), "%s[%d]: fused %.9g, unfused %.9g",
                      names[k], i, (double)fused[k][i], (double)plain[k][i]);
        }
    }
    /* The ReLU did something: about half the normalised values are below 0. */
    CHECK_MSG(zeros > BNR_NUMEL / 4 && zeros < 3 * BNR_NUMEL / 4, "%d of %d outputs are 0", zeros,
              BNR_NUMEL);
}

/* ---- dropout ---- */

enum { DROP_ROWS = 64, DROP_COLS = 64, DROP_N = DROP_ROWS * DROP_COLS };

typedef struct drop_graph {
    ug_graph *graph;
    ug_value *x, *y;
    ug_tensor *xt;
} drop_graph;

static const float *drop_input(void)
{
    static float x[DROP_N];
    for (int i = 0; i < DROP_N; i++)
        x[i] = 0.5f + (float)(i % 97) / 97.0f; /* never 0 */
    return x;
}

static bool drop_make(ug_device *dev, ug_model *m, float p, bool training, uint64_t seed, drop_graph *d)
{
    memset(d, 0, sizeof *d);
    d->graph = ts_graph(m);
    int64_t shape[2] = {DROP_ROWS, DROP_COLS};
    d->xt = ts_tensor_f32(dev, 2, shape, drop_input());
    if (!d->graph || !d->xt)
        return false;
    ug_status st = ug_graph_set_training(d->graph, training);
    if (st == UG_OK) st = ug_graph_set_seed(d->graph, seed);
    if (st == UG_OK) st = ug_graph_input(d->graph, "x", UG_F32, 2, shape, &d->x);
    if (st == UG_OK) st = ug_g_dropout(d->graph, d->x, p, &d->y);
    if (st == UG_OK) st = ug_graph_keep(d->graph, d->y);
    if (st == UG_OK) st = ug_graph_compile(d->graph);
    if (st == UG_OK) st = ug_graph_bind(d->graph, d->x, d->xt);
    if (st != UG_OK)
        th_fail(TH_LOC, "building the dropout graph returned %s: %s", ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

/* Runs once and returns y (tracked). */
static float *drop_run(drop_graph *d)
{
    ug_status st = ug_graph_run(d->graph);
    if (st != UG_OK) {
        th_fail(TH_LOC, "ug_graph_run returned %s: %s", ug_status_name(st), ug_last_error());
        return NULL;
    }
    return ts_read(d->graph, d->y);
}

/* Kept values are x / (1 - p); returns the number dropped. */
static int check_dropout_values(const float *y, float p)
{
    const float *x = drop_input();
    int dropped = 0, bad = 0;
    for (int i = 0; i < DROP_N; i++) {
        if (y[i] == 0.0f) {
            dropped++;
        } else if (!ts_close(y[i], x[i] / (1.0 - p), 1e-6, 0.0) && bad++ < 3) {
            th_fail(TH_LOC, "y[%d] = %.9g: neither 0 nor x/(1-p) = %.9g", i, (double)y[i], x[i] / (1.0 - p));
        }
    }
    return dropped;
}

TS_TEST(dropout)
{
    ug_model *m = ts_model(dev, 1);
    REQUIRE(m);
    const float ps[3] = {0.1f, 0.3f, 0.7f};
    for (int k = 0; k < 3; k++) {
        float p = ps[k];
        th_context("p = %g", (double)p);
        drop_graph d;
        REQUIRE(drop_make(dev, m, p, true, 1234, &d));
        float *y1 = drop_run(&d), *y2 = drop_run(&d);
        REQUIRE(y1 && y2);
        /* The dropped count is Binomial(n, p): within 5 standard deviations. */
        double mean = DROP_N * (double)p, sd = sqrt(DROP_N * (double)p * (1.0 - p));
        int dropped1 = check_dropout_values(y1, p), dropped2 = check_dropout_values(y2, p);
        CHECK_MSG(fabs(dropped1 - mean) <= 5.0 * sd, "run 1 dropped %d of %d, expected %.0f +- %.0f", dropped1,
                  DROP_N, mean, 5.0 * sd);
        CHECK_MSG(fabs(dropped2 - mean) <= 5.0 * sd, "run 2 dropped %d of %d, expected %.0f +- %.0f", dropped2,
                  DROP_N, mean, 5.0 * sd);
        /* Each run draws a fresh mask: the two masks are about as different
         * as two independent ones, 2 p (1 - p) n positions. */
        int differ = 0;
        for (int i = 0; i < DROP_N; i++)
            differ += (y1[i] == 0.0f) != (y2[i] == 0.0f);
        double want = 2.0 * DROP_N * (double)p * (1.0 - p);
        CHECK_MSG(fabs(differ - want) <= 5.0 * sqrt(want), "masks of runs 1 and 2 differ at %d positions, expected ~%.0f",
                  differ, want);
        /* Another graph with the same seed draws the same masks run by run;
         * another seed draws others. */
        drop_graph same, other;
        REQUIRE(drop_make(dev, m, p, true, 1234, &same));
        REQUIRE(drop_make(dev, m, p, true, 4321, &other));
        float *s1 = drop_run(&same), *o1 = drop_run(&other);
        REQUIRE(s1 && o1);
        th_compare_bits("same seed, run 1", s1, y1, DROP_N, sizeof(float));
        CHECK_MSG(!same_bits(o1, y1, DROP_N), "another seed drew the same mask");
    }
    /* Eval mode: the identity, bitwise. p = 0 in training mode too. */
    th_context("eval mode");
    drop_graph e;
    REQUIRE(drop_make(dev, m, 0.5f, false, 1234, &e));
    float *ye = drop_run(&e);
    REQUIRE(ye);
    th_compare_bits("eval-mode dropout", ye, drop_input(), DROP_N, sizeof(float));
    th_context("p = 0");
    drop_graph z;
    REQUIRE(drop_make(dev, m, 0.0f, true, 1234, &z));
    float *yz = drop_run(&z);
    REQUIRE(yz);
    th_compare_bits("dropout with p = 0", yz, drop_input(), DROP_N, sizeof(float));
}

/* Masks are independent of the parameters' initial values, also when the
 * graph's seed equals the model's (both default to 0): the first mask must
 * not follow the first parameter's sign (agreement ~ Binomial(n, 1/2)). */
TS_TEST(dropout_independent_of_init)
{
    const uint64_t seeds[2] = {0, 7};
    for (int k = 0; k < 2; k++) {
        th_context("model and graph seed %llu", (unsigned long long)seeds[k]);
        ug_model *m = ts_model(dev, seeds[k]);
        REQUIRE(m);
        ug_tensor *w = NULL;
        REQUIRE_OK(ug_model_param(m, "w", 2, (int64_t[]){DROP_ROWS, DROP_COLS}, UG_INIT_UNIFORM, 1.0f, &w));
        float *wf = ts_download_f32(w);
        REQUIRE(wf);
        drop_graph d;
        REQUIRE(drop_make(dev, m, 0.5f, true, seeds[k], &d));
        float *y = drop_run(&d);
        REQUIRE(y);
        int agree = 0;
        for (int i = 0; i < DROP_N; i++)
            agree += (y[i] == 0.0f) == (wf[i] < 0.0f);
        double sd = 0.5 * sqrt((double)DROP_N);
        CHECK_MSG(fabs(agree - DROP_N / 2.0) <= 5.0 * sd,
                  "the mask of run 1 matches the sign of the first parameter's initial values at %d of %d "
                  "elements (expected %d +- %.0f): masks and initialisation share Philox counters",
                  agree, DROP_N, DROP_N / 2, 5.0 * sd);
        ts_cleanup();
    }
}

/* The same seed draws the same masks on every device (counter-based). */
TS_HOST_TEST(dropout_across_devices)
{
    (void)dev;
    if (th_device_count() < 2) {
        th_skip("one device under test (%s); needs two, e.g. cpu and opencl:0",
                th_device_count() ? ug_device_name(th_device(0)) : "none");
        return;
    }
    float *ref[2] = {0};
    for (int d = 0; d < th_device_count(); d++) {
        ug_device *dv = th_device(d);
        th_context("%s", ug_device_name(dv));
        ug_model *m = ts_model(dv, 1);
        REQUIRE(m);
        drop_graph g;
        REQUIRE(drop_make(dv, m, 0.4f, true, 99, &g));
        for (int run = 0; run < 2; run++) {
            float *y = drop_run(&g);
            REQUIRE(y);
            if (d == 0) {
                ref[run] = y;
                continue;
            }
            int differ = 0;
            for (int i = 0; i < DROP_N; i++) {
                bool a = y[i] == 0.0f, b = ref[run][i] == 0.0f;
                if (a != b && differ++ < 3)
                    th_fail(TH_LOC, "run %d, element %d: %s on %s, %s on %s", run + 1, i, a ? "dropped" : "kept",
                            ug_device_name(dv), b ? "dropped" : "kept", ug_device_name(th_device(0)));
                else if (!a && !ts_close(y[i], ref[run][i], 1e-6, 0.0) && differ++ < 3)
                    th_fail(TH_LOC, "run %d, element %d: %.9g on %s, %.9g on %s", run + 1, i, (double)y[i],
                            ug_device_name(dv), (double)ref[run][i], ug_device_name(th_device(0)));
            }
            CHECK_MSG(differ == 0, "run %d: %d elements differ", run + 1, differ);
        }
        ts_cleanup();
    }
}

/* Inputs may be bound before compile, also when read through a reshape. */
TS_TEST(bind_before_compile)
{
    ug_model *m = ts_model(dev, 8);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    float xf[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
    ug_tensor *xt = ts_tensor_f32(dev, 2, (int64_t[]){2, 3}, xf);
    REQUIRE(xt);
    ug_tensor *wt = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, (int64_t[]){6}, UG_INIT_UNIFORM, 1.0f, &wt));
    float *wf = ts_download_f32(wt);
    REQUIRE(wf);
    ug_value *x = NULL, *flat = NULL, *w = NULL, *prod = NULL, *loss = NULL, *gw = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){2, 3}, &x));
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    REQUIRE_OK(ug_g_reshape(g, x, 1, (int64_t[]){6}, &flat));
    REQUIRE_OK(ug_graph_param(g, wt, &w));
    REQUIRE_OK(ug_g_mul(g, flat, w, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_grad(g, w, &gw));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_run(g));
    float lv = NAN, *gf = ts_read(g, gw);
    REQUIRE(gf);
    REQUIRE_OK(ug_graph_read(g, loss, &lv, sizeof lv));
    double want = 0.0;
    for (int i = 0; i < 6; i++) {
        want += (double)xf[i] * wf[i];
        CHECK_MSG(gf[i] == xf[i], "dloss/dw[%d] = %g, expected x = %g", i, (double)gf[i], (double)xf[i]);
    }
    CHECK_MSG(ts_close(lv, want, 1e-6, 1e-6), "loss %.9g, expected %.9g", (double)lv, want);
}

/* ---- misuse ---- */

TS_TEST(errors)
{
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    ug_value *x = NULL, *w = NULL, *h = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){4, 3}, &x));
    ug_tensor *wt = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 2, (int64_t[]){3, 5}, UG_INIT_UNIFORM, 0.5f, &wt));

    /* A parameter re-declared with another shape. */
    ug_tensor *again = NULL;
    if (CHECK_STATUS(ug_model_param(m, "w", 2, (int64_t[]){5, 3}, UG_INIT_UNIFORM, 0.5f, &again), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("'w'", "[3,5]", "[5,3]");
    REQUIRE_OK(ug_model_param(m, "w", 2, (int64_t[]){3, 5}, UG_INIT_UNIFORM, 0.5f, &again));
    CHECK(again == wt);
    CHECK_EQ_I64(ug_model_param_count(m), 1);

    REQUIRE_OK(ug_graph_param(g, wt, &w));
    REQUIRE_OK(ug_g_matmul(g, x, w, false, false, &h)); /* [4,5] */
    ug_value *t = NULL, *tmp = NULL;
    REQUIRE_OK(ug_g_tanh(g, h, &t));

    /* Shape and dtype errors while building. */
    if (CHECK_STATUS(ug_g_matmul(g, x, x, false, false, &tmp), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[4,3]");
    ug_value *labels = NULL;
    REQUIRE_OK(ug_graph_input(g, "labels", UG_I32, 1, (int64_t[]){4}, &labels));
    CHECK_STATUS(ug_g_exp(g, labels, &tmp), UG_ERR_DTYPE);
    if (CHECK_STATUS(ug_g_add(g, h, x, &tmp), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[4,5]", "[4,3]");

    /* backward on a loss that isn't a scalar, and on one that depends on no parameter. */
    if (CHECK_STATUS(ug_graph_backward(g, t), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("one f32 element");
    ug_value *xsum = NULL;
    REQUIRE_OK(ug_g_sum(g, x, 0, true, &xsum));
    if (CHECK_STATUS(ug_graph_backward(g, xsum), UG_ERR_STATE))
        CHECK_ERROR_HAS("does not depend on any parameter");
    ug_value *grad = NULL;
    if (CHECK_STATUS(ug_graph_grad(g, w, &grad), UG_ERR_STATE))
        CHECK_ERROR_HAS("'w'");
    REQUIRE_OK(ug_g_mean(g, t, 0, true, &loss));

    /* A graph that is not compiled does not run, read or report memory. */
    if (CHECK_STATUS(ug_graph_run(g), UG_ERR_STATE))
        CHECK_ERROR_HAS("compile");
    REQUIRE_OK(ug_graph_backward(g, loss));
    if (CHECK_STATUS(ug_graph_backward(g, loss), UG_ERR_STATE))
        CHECK_ERROR_HAS("already");
    CHECK_STATUS(ug_graph_grad(g, x, &grad), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_graph_grad(g, w, &grad));
    float buf[20];
    CHECK_STATUS(ug_graph_read(g, loss, buf, sizeof(float)), UG_ERR_STATE);

    /* Values of another graph. */
    ug_graph *g2 = ts_graph(m);
    REQUIRE(g2);
    if (CHECK_STATUS(ug_g_relu(g2, h, &tmp), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("another graph");

    REQUIRE_OK(ug_graph_compile(g));

    /* Building after compile. */
    if (CHECK_STATUS(ug_g_relu(g, h, &tmp), UG_ERR_STATE))
        CHECK_ERROR_HAS("compiled");
    CHECK_STATUS(ug_graph_input(g, "z", UG_F32, 1, (int64_t[]){2}, &tmp), UG_ERR_STATE);
    CHECK_STATUS(ug_graph_keep(g, h), UG_ERR_STATE);
    REQUIRE_OK(ug_graph_set_training(g, false)); /* eval mode may follow compile */
    REQUIRE_OK(ug_graph_set_training(g, true));
    CHECK_STATUS(ug_graph_compile(g), UG_ERR_STATE);
    CHECK_STATUS(ug_nn_linear(g, "late", x, 2, &tmp), UG_ERR_STATE);
    CHECK_EQ_I64(ug_model_param_count(m), 1); /* the failed layer made no parameter */

    /* Running with an input that is not bound. */
    if (CHECK_STATUS(ug_graph_run(g), UG_ERR_STATE))
        CHECK_ERROR_HAS("'x'", "ug_graph_bind");

    /* Binding: wrong shape, wrong dtype, not an input, another device. */
    ug_tensor *wrong = ts_tensor_f32(dev, 2, (int64_t[]){4, 5}, (float[20]){0});
    REQUIRE(wrong);
    if (CHECK_STATUS(ug_graph_bind(g, x, wrong), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("'x'", "[4,3]", "[4,5]");
    ug_tensor *ints = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_I32, 2, (int64_t[]){4, 3}, &ints));
    th_track(ints);
    if (CHECK_STATUS(ug_graph_bind(g, x, ints), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("'x'", "f32", "i32");
    ug_tensor *right = ts_tensor_f32(dev, 2, (int64_t[]){4, 3},
                                     (float[12]){0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f, 1.0f, 0.1f, 0.2f});
    REQUIRE(right);
    CHECK_STATUS(ug_graph_bind(g, h, right), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_graph_bind(g, w, right), UG_ERR_INVALID_ARGUMENT);
    int others = 0;
    for (int d = 0; d < th_device_count(); d++) {
        ug_device *other = th_device(d);
        if (other == dev)
            continue;
        others++;
        ug_tensor *far = ts_tensor_f32(other, 2, (int64_t[]){4, 3}, (float[12]){0});
        REQUIRE(far);
        if (CHECK_STATUS(ug_graph_bind(g, x, far), UG_ERR_DEVICE))
            CHECK_ERROR_HAS("'x'", ug_device_name(dev), ug_device_name(other));
    }
    if (!others)
        printf("    %s: no second device, binding a tensor of another device not tried\n", ug_device_name(dev));

    /* The failed calls left the graph usable. */
    REQUIRE_OK(ug_graph_bind(g, x, right));
    REQUIRE_OK(ug_graph_run(g));
    float lv = NAN;
    REQUIRE_OK(ug_graph_read(g, loss, &lv, sizeof lv));
    CHECK(isfinite(lv));
    REQUIRE_OK(ug_graph_read(g, grad, buf, 15 * sizeof(float)));
    CHECK_STATUS(ug_graph_read(g, loss, buf, 2 * sizeof(float)), UG_ERR_INVALID_ARGUMENT);

    /* Values that are not kept are not readable; kept ones are. */
    if (CHECK_STATUS(ug_graph_read(g, t, buf, 20 * sizeof(float)), UG_ERR_STATE))
        CHECK_ERROR_HAS("ug_graph_keep");
    CHECK_STATUS(ug_graph_read(g, h, buf, 20 * sizeof(float)), UG_ERR_STATE);
    REQUIRE_OK(ug_graph_read(g, x, buf, 12 * sizeof(float))); /* inputs are */

    /* NULLs. */
    CHECK_STATUS(ug_graph_run(NULL), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_graph_bind(g, NULL, right), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_graph_read(g, NULL, buf, 4), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_graph_create(NULL, &g2), UG_ERR_INVALID_ARGUMENT);
    ug_model *none = NULL;
    CHECK_STATUS(ug_model_create(NULL, 1, &none), UG_ERR_INVALID_ARGUMENT);
    CHECK(none == NULL);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(tiny_mlp_fits),
        TH_DEVICE_TEST(loss_matches_host),
        TH_DEVICE_TEST(same_seed_bitwise),
        TH_HOST_TEST(same_seed_across_devices),
        TH_DEVICE_TEST(steady_state_no_allocation),
        TH_DEVICE_TEST(graph_memory_figures),
        TH_DEVICE_TEST(batch_norm_takes_its_relu),
        TH_DEVICE_TEST(dropout),
        TH_DEVICE_TEST(dropout_independent_of_init),
        TH_HOST_TEST(dropout_across_devices),
        TH_DEVICE_TEST(bind_before_compile),
        TH_DEVICE_TEST(errors),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
