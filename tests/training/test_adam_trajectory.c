#define _DEFAULT_SOURCE /* mkdtemp */
/* Adam's trajectory against a double-precision reference: ug-train's MLP
 * (784-500-10, ReLU, mean cross-entropy, Adam at PyTorch's defaults with
 * lr 1e-3) trained 50 steps on standardised image batches, as ug-train
 * trains Fashion-MNIST by default: byte images with a blank border (as
 * Fashion-MNIST's), so that after standardising (torchvision's Normalize
 * with the data's mean and deviation) a third of every row is one
 * negative constant, where x / 255 leaves zeros. Each step's loss must
 * stay within 1e-5 (relative) of the reference, which trains in double
 * from the same initial parameters on the same inputs; PyTorch's f32
 * stays within 2e-7 of it after one step. Once on a graph with five
 * batches in turn, once through ug_trainer_fit as ug-train runs it (the
 * data set's own transform standardises, the loader shuffles; the
 * reference takes the samples in the order a loader of the same seed
 * gives them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "reference.h"
#include "train_support.h"

enum { SIDE = 28, IN = SIDE * SIDE, HIDDEN = 500, CLASSES = 10, BATCH = 64, BATCHES = 5, STEPS = 50 };
enum { MAX_PARAMS = 12 }; /* the CNN's */

/* ---- the double reference: parameters, gradients and Adam's moments ---- */

typedef struct reference {
    int count;
    const char *const *names;
    const int64_t *sizes;
    double *p[MAX_PARAMS], *g[MAX_PARAMS], *m[MAX_PARAMS], *v[MAX_PARAMS];
} reference;

/* The model's initial parameters, moments at 0. */
static bool reference_from(const ug_model *model, int count, const char *const *names, const int64_t *sizes,
                           reference *r)
{
    *r = (reference){.count = count, .names = names, .sizes = sizes};
    for (int p = 0; p < count; p++) {
        float *f = th_alloc((size_t)sizes[p] * sizeof *f);
        r->p[p] = th_alloc((size_t)sizes[p] * sizeof(double));
        r->g[p] = th_alloc((size_t)sizes[p] * sizeof(double));
        r->m[p] = th_alloc((size_t)sizes[p] * sizeof(double));
        r->v[p] = th_alloc((size_t)sizes[p] * sizeof(double));
        if (ug_model_read_param(model, names[p], f, (size_t)sizes[p] * sizeof *f) != UG_OK) {
            th_fail(TH_LOC, "reading %s: %s", names[p], ug_last_error());
            return false;
        }
        for (int64_t i = 0; i < sizes[p]; i++) {
            r->p[p][i] = f[i];
            r->m[p][i] = r->v[p][i] = 0.0;
        }
    }
    return true;
}

/* Adam's update t (from 1) from the gradients in r->g, as PyTorch's, at
 * its defaults with lr 1e-3. */
static void adam_update(reference *r, int t)
{
    const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    const double corr1 = 1.0 - pow(beta1, t), corr2 = 1.0 - pow(beta2, t);
    for (int p = 0; p < r->count; p++)
        for (int64_t i = 0; i < r->sizes[p]; i++) {
            const double g = r->g[p][i];
            r->m[p][i] = beta1 * r->m[p][i] + (1.0 - beta1) * g;
            r->v[p][i] = beta2 * r->v[p][i] + (1.0 - beta2) * g * g;
            r->p[p][i] -= lr * (r->m[p][i] / corr1) / (sqrt(r->v[p][i] / corr2) + eps);
        }
}

static void relu_forward(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0 ? x[i] : 0.0;
}

/* dy where the ReLU's output y was positive, else 0. */
static void relu_backward(const double *y, double *dy, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dy[i] = y[i] > 0.0 ? dy[i] : 0.0;
}

/* out[r][o] = b[o] + sum_i w[o][i] in[r][i]; and back (din may be NULL). */
static void dense(const double *in, const double *w, const double *b, int64_t rows, int64_t ins, int64_t outs,
                  double *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < outs; o++) {
            double a = b[o];
            for (int64_t i = 0; i < ins; i++)
                a += w[o * ins + i] * in[r * ins + i];
            out[r * outs + o] = a;
        }
}

static void dense_backward(const double *in, const double *w, const double *dout, int64_t rows, int64_t ins,
                           int64_t outs, double *din, double *dw, double *db)
{
    memset(dw, 0, (size_t)(outs * ins) * sizeof *dw);
    memset(db, 0, (size_t)outs * sizeof *db);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < outs; o++) {
            db[o] += dout[r * outs + o];
            for (int64_t i = 0; i < ins; i++)
                dw[o * ins + i] += dout[r * outs + o] * in[r * ins + i];
        }
    for (int64_t r = 0; din && r < rows; r++)
        for (int64_t i = 0; i < ins; i++) {
            double a = 0.0;
            for (int64_t o = 0; o < outs; o++)
                a += dout[r * outs + o] * w[o * ins + i];
            din[r * ins + i] = a;
        }
}

/* The rows' mean cross-entropy of logits z against y, and its gradient. */
static double cross_entropy(const double *z, const int32_t *y, int64_t rows, double *dz)
{
    double loss = 0.0;
    for (int64_t b = 0; b < rows; b++) {
        const double *row = z + b * CLASSES;
        double top = -INFINITY, sum = 0.0;
        for (int c = 0; c < CLASSES; c++)
            top = fmax(top, row[c]);
        for (int c = 0; c < CLASSES; c++)
            sum += exp(row[c] - top);
        loss += top + log(sum) - row[y[b]];
        for (int c = 0; c < CLASSES; c++)
            dz[b * CLASSES + c] = (exp(row[c] - top) / sum - (c == y[b])) / (double)rows;
    }
    return loss / (double)rows;
}

/* One training step of the reference on a batch: its loss before the
 * update (what the graph reports). */
typedef double (*reference_step_fn)(reference *r, const float *x, const int32_t *y, int t);

/* Trains graph g (inputs xv [rows, ...] of shape xs, yv) step by step on
 * the batches of x and y in turn, beside the reference; the largest
 * relative difference of the losses, and its step, into *worst and *at. */
static void graph_beside_reference(ug_device *dev, ug_graph *g, ug_value *xv, ug_value *yv, ug_value *loss,
                                   int ndim, const int64_t *xs, const float *x, const int32_t *y, int batches,
                                   int steps, reference_step_fn step, reference *r, double *worst, int *at)
{
    const int64_t rows = xs[0], per_batch = ts_value_numel(xv);
    ug_tensor **xt = th_alloc((size_t)batches * sizeof *xt), **yt = th_alloc((size_t)batches * sizeof *yt);
    for (int k = 0; k < batches; k++) {
        xt[k] = ts_tensor_f32(dev, ndim, xs, x + k * per_batch);
        yt[k] = ts_tensor_i32(dev, rows, y + k * rows);
        REQUIRE(xt[k] && yt[k]);
    }
    *worst = 0.0;
    *at = 0;
    for (int s = 0; s < steps; s++) {
        const int k = s % batches;
        REQUIRE_OK(ug_graph_bind(g, xv, xt[k]));
        REQUIRE_OK(ug_graph_bind(g, yv, yt[k]));
        REQUIRE_OK(ug_graph_run(g));
        float got = NAN;
        REQUIRE_OK(ug_graph_read(g, loss, &got, sizeof got));
        const double want = step(r, x + k * per_batch, y + k * rows, s + 1);
        const double error = fabs(got - want) / want;
        if (!(error <= *worst))
            *worst = error, *at = s + 1;
    }
}

/* ---- ug-train's MLP ---- */

static const char *const mlp_names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
static const int64_t mlp_sizes[4] = {(int64_t)HIDDEN * IN, HIDDEN, (int64_t)CLASSES * HIDDEN, CLASSES};

/* Image bytes with a blank border (as Fashion-MNIST's), standardised with
 * their mean and deviation over every batch, rounded to f32. */
static void make_batches(float *x, int32_t *y)
{
    const int64_t n = (int64_t)BATCHES * BATCH * IN;
    double sum = 0.0, squares = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t pixel = i % IN, row = pixel / SIDE, col = pixel % SIDE;
        const bool blank = row < 4 || row >= SIDE - 4 || col < 5 || col >= SIDE - 5;
        const double byte = blank ? 0.0 : floor(th_uniform(0.0, 256.0));
        x[i] = (float)(byte / 255.0);
        sum += x[i];
        squares += (double)x[i] * x[i];
    }
    const double mean = sum / (double)n, deviation = sqrt(squares / (double)n - mean * mean);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(((double)x[i] - mean) / deviation);
    for (int i = 0; i < BATCHES * BATCH; i++)
        y[i] = (int32_t)floor(th_uniform(0.0, CLASSES));
}

static double mlp_reference_step(reference *r, const float *xf, const int32_t *y, int t)
{
    static double x[BATCH * IN], h[BATCH * HIDDEN], z[BATCH * CLASSES], dz[BATCH * CLASSES], dh[BATCH * HIDDEN];
    for (int i = 0; i < BATCH * IN; i++)
        x[i] = xf[i];
    dense(x, r->p[0], r->p[1], BATCH, IN, HIDDEN, h);
    relu_forward(h, BATCH * HIDDEN);
    dense(h, r->p[2], r->p[3], BATCH, HIDDEN, CLASSES, z);
    const double loss = cross_entropy(z, y, BATCH, dz);
    dense_backward(h, r->p[2], dz, BATCH, HIDDEN, CLASSES, dh, r->g[2], r->g[3]);
    relu_backward(h, dh, BATCH * HIDDEN);
    dense_backward(x, r->p[0], dh, BATCH, IN, HIDDEN, NULL, r->g[0], r->g[1]);
    adam_update(r, t);
    return loss;
}

TS_TEST(mlp_standardised_matches_double)
{
    th_seed(2024);
    float *x = th_alloc((size_t)BATCHES * BATCH * IN * sizeof *x);
    int32_t *y = th_alloc((size_t)BATCHES * BATCH * sizeof *y);
    make_batches(x, y);
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    ug_value *xv = NULL, *yv = NULL, *h = NULL, *logits = NULL, *loss = NULL;
    const int64_t xs[2] = {BATCH, IN}, ys = BATCH;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &xv));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, &ys, &yv));
    REQUIRE_OK(ug_nn_linear(g, "fc1", xv, HIDDEN, &h));
    REQUIRE_OK(ug_g_relu(g, h, &h));
    REQUIRE_OK(ug_nn_linear(g, "fc2", h, CLASSES, &logits));
    REQUIRE_OK(ug_g_cross_entropy(g, logits, yv, 0.0f, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    const ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    ug_optimizer *opt = ts_optimizer(m, &oc);
    REQUIRE(opt);
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_compile(g));
    reference r;
    REQUIRE(reference_from(m, 4, mlp_names, mlp_sizes, &r));
    double worst = 0.0;
    int at = 0;
    graph_beside_reference(dev, g, xv, yv, loss, 2, xs, x, y, BATCHES, STEPS, mlp_reference_step, &r, &worst, &at);
    printf("    %s: largest relative loss error %.3g (step %d of %d)\n", ug_device_name(dev), worst, at, STEPS);
    CHECK_MSG(worst <= 1e-5, "step %d's loss is %.3g (relative) from the double reference's", at, worst);
}

/* ---- the same through the trainer, as ug-train runs it ---- */

static ug_status mlp(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    ug_value *h = NULL;
    ug_status st = ug_nn_linear(g, "fc1", x, HIDDEN, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

typedef struct trajectory {
    reference r;
    const float *x;                  /* the data set's samples, standardised in double */
    const int32_t *y;
    int64_t order[STEPS][BATCH];     /* the samples of each step, as the trainer's loader takes them */
    float batch_x[BATCH * IN];
    int32_t batch_y[BATCH];
    double worst;
    int64_t worst_step, steps;
} trajectory;

static ug_status on_step(const ug_trainer_step *step, void *user)
{
    trajectory *t = user;
    const int64_t s = step->global_batch - 1;
    if (s < 0 || s >= STEPS) {
        th_fail(TH_LOC, "step %lld past the test's %d", (long long)step->global_batch, STEPS);
        return UG_ERR_STATE;
    }
    for (int b = 0; b < BATCH; b++) {
        memcpy(t->batch_x + (int64_t)b * IN, t->x + t->order[s][b] * IN, IN * sizeof *t->x);
        t->batch_y[b] = t->y[t->order[s][b]];
    }
    const double want = mlp_reference_step(&t->r, t->batch_x, t->batch_y, (int)step->global_batch);
    const double error = fabs(step->loss - want) / want;
    if (!(error <= t->worst))
        t->worst = error, t->worst_step = step->global_batch;
    t->steps++;
    return UG_OK;
}

/* Writes an IDX file of bytes: magic 0x0803 (or 0x0801), then the sizes. */
static bool write_idx(const char *path, int dims, const int32_t *sizes, const unsigned char *data, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    unsigned char head[16] = {0, 0, 8, (unsigned char)dims};
    for (int d = 0; d < dims; d++)
        for (int b = 0; b < 4; b++)
            head[4 + 4 * d + b] = (unsigned char)((uint32_t)sizes[d] >> (24 - 8 * b));
    const size_t head_bytes = 4 + 4 * (size_t)dims;
    const bool ok = fwrite(head, 1, head_bytes, f) == head_bytes && fwrite(data, 1, bytes, f) == bytes;
    return fclose(f) == 0 && ok;
}

/* The order in which the trainer's loader (its seed, shuffled) hands out
 * the samples, epoch after epoch. */
static bool loader_order(ug_device *dev, const ug_dataset *data, uint64_t seed, trajectory *t)
{
    ug_loader_config lc = {.batch_size = BATCH, .shuffle = true, .seed = seed};
    ug_loader *l = NULL;
    ug_status st = ug_loader_create(data, dev, &lc, &l);
    for (int64_t s = 0; st == UG_OK && s < STEPS;) {
        st = ug_loader_start_epoch(l, s / BATCHES);
        for (bool done = false; st == UG_OK && !done && s < STEPS;) {
            ug_batch b;
            st = ug_loader_next(l, &b, &done);
            if (st == UG_OK && !done)
                memcpy(t->order[s++], b.sample_ids, sizeof t->order[0]);
        }
    }
    ug_loader_free(l);
    CHECK_OK(st);
    return st == UG_OK;
}

/* Through ug_trainer_fit, as ug-train trains: byte images standardised by
 * the data set's transform with its own mean and deviation, shuffled, 5
 * epochs of 5 batches; each step's loss against the reference's on the
 * same samples standardised in double. */
TS_TEST(trainer_standardised_matches_double)
{
    th_seed(77);
    enum { SAMPLES = BATCHES * BATCH };
    static unsigned char bytes[SAMPLES * IN], labels[SAMPLES];
    for (int i = 0; i < SAMPLES * IN; i++) {
        const int pixel = i % IN, row = pixel / SIDE, col = pixel % SIDE;
        const bool blank = row < 4 || row >= SIDE - 4 || col < 5 || col >= SIDE - 5;
        bytes[i] = blank ? 0 : (unsigned char)floor(th_uniform(0.0, 256.0));
    }
    for (int i = 0; i < SAMPLES; i++)
        labels[i] = (unsigned char)floor(th_uniform(0.0, CLASSES));
    char dir[] = "/tmp/ug-adam-XXXXXX", images[64], classes[64];
    REQUIRE(mkdtemp(dir));
    snprintf(images, sizeof images, "%s/images", dir);
    snprintf(classes, sizeof classes, "%s/labels", dir);
    const int32_t image_sizes[3] = {SAMPLES, SIDE, SIDE}, label_sizes[1] = {SAMPLES};
    const bool written = write_idx(images, 3, image_sizes, bytes, sizeof bytes) &&
                         write_idx(classes, 1, label_sizes, labels, sizeof labels);
    ug_dataset *data = NULL;
    ug_status st = written ? ug_dataset_from_idx(images, classes, 1.0f / 255.0f, 0.0f, &data) : UG_ERR_IO;
    remove(images);
    remove(classes);
    rmdir(dir);
    REQUIRE_OK(st);
    double mean = 0.0, deviation = 1.0;
    CHECK_OK(ug_dataset_stats(data, &mean, &deviation));
    CHECK_OK(ug_dataset_transform(data, (float)(1.0 / deviation), (float)(-mean / deviation)));
    static trajectory t;
    float *x = th_alloc(sizeof(float) * SAMPLES * IN);
    int32_t *y = th_alloc(sizeof(int32_t) * SAMPLES);
    for (int i = 0; i < SAMPLES * IN; i++)
        x[i] = (float)((bytes[i] / 255.0 - mean) / deviation);
    for (int i = 0; i < SAMPLES; i++)
        y[i] = labels[i];
    t = (trajectory){.x = x, .y = y};
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = STEPS / BATCHES;
    c.batch_size = BATCH;
    c.log_every = 1;
    c.on_step = on_step;
    c.user = &t;
    ug_trainer *trainer = NULL;
    if (loader_order(dev, data, c.seed, &t) &&
        CHECK_STATUS(ug_trainer_create(dev, data, NULL, mlp, NULL, &c, &trainer), UG_OK) &&
        reference_from(ug_trainer_model(trainer), 4, mlp_names, mlp_sizes, &t.r))
        CHECK_OK(ug_trainer_fit(trainer));
    ug_trainer_free(trainer);
    ug_dataset_free(data);
    printf("    %s: largest relative loss error %.3g (step %lld of %lld)\n", ug_device_name(dev), t.worst,
           (long long)t.worst_step, (long long)t.steps);
    CHECK_EQ_I64(t.steps, STEPS);
    CHECK_MSG(t.worst <= 1e-5, "step %lld's loss is %.3g (relative) from the double reference's",
              (long long)t.worst_step, t.worst);
}

/* ---- a CNN's Adam moments ---- */

/* ug-train's CNN on its 28x28 images, narrower: two blocks of conv 3x3
 * (padding 1), batch norm, ReLU and max-pool 2, then linear, ReLU,
 * linear; 30 Adam steps on three standardised batches in turn. Adam's
 * first moments (exp_avg) of every parameter, which sum the gradients of
 * every step, must end within 1e-3 (relative, in the 2-norm) of the
 * double reference's. */
enum { CNN_SIDE = 28, CNN_BATCH = 32, C1 = 8, C2 = 16, FC = 32, CNN_STEPS = 30, CNN_BATCHES = 3 };
enum { S1 = CNN_SIDE / 2, S2 = CNN_SIDE / 4, FLAT = C2 * S2 * S2, CNN_PARAMS = 12 };

static const char *const cnn_names[CNN_PARAMS] = {"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias",
                                                  "conv2.weight", "conv2.bias", "bn2.weight", "bn2.bias",
                                                  "fc1.weight",   "fc1.bias",   "fc2.weight", "fc2.bias"};
static const int64_t cnn_sizes[CNN_PARAMS] = {C1 * 9, C1, C1, C1, C2 * C1 * 9, C2, C2, C2, FC * FLAT, FC, CLASSES * FC,
                                              CLASSES};

static ug_status cnn(ug_graph *g, ug_value *x, ug_value *y, ug_value **loss)
{
    const ug_conv2d_params same = {.padding = {1, 1}};
    const ug_pool2d_params halve = {.kernel = {2, 2}};
    ug_value *h = NULL;
    ug_status st = ug_nn_conv2d(g, "conv1", x, C1, 3, 3, &same, &h);
    if (st == UG_OK) st = ug_nn_batch_norm(g, "bn1", h, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_g_max_pool2d(g, h, &halve, &h);
    if (st == UG_OK) st = ug_nn_conv2d(g, "conv2", h, C2, 3, 3, &same, &h);
    if (st == UG_OK) st = ug_nn_batch_norm(g, "bn2", h, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_g_max_pool2d(g, h, &halve, &h);
    if (st == UG_OK) st = ug_nn_flatten(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc1", h, FC, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &h);
    return st == UG_OK ? ug_g_cross_entropy(g, h, y, 0.0f, loss) : st;
}

/* One training step in double: the loss before the update, then Adam. */
static double cnn_reference_step(reference *r, const float *xf, const int32_t *y, int t)
{
    enum { N = CNN_BATCH, A1 = N * C1 * CNN_SIDE * CNN_SIDE, P1 = N * C1 * S1 * S1, A2 = N * C2 * S1 * S1,
           P2 = N * FLAT };
    static double x[N * CNN_SIDE * CNN_SIDE], c1[A1], b1[A1], p1[P1], c2[A2], b2[A2], p2[P2], f1[N * FC],
        z[N * CLASSES], dz[N * CLASSES], df1[N * FC], dp2[P2], db2[A2], dc2[A2], dp1[P1], db1[A1], dc1[A1];
    double *const *g = r->g;
    for (int i = 0; i < N * CNN_SIDE * CNN_SIDE; i++)
        x[i] = xf[i];
    const ref_conv_geom k1 = {N, 1, CNN_SIDE, CNN_SIDE, C1, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1};
    const ref_conv_geom k2 = {N, C1, S1, S1, C2, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1};
    const ref_pool_geom q1 = {N * C1, CNN_SIDE, CNN_SIDE, {2, 2}, {2, 2}, {0, 0}};
    const ref_pool_geom q2 = {N * C2, S1, S1, {2, 2}, {2, 2}, {0, 0}};
    ref_conv2d(&k1, x, r->p[0], r->p[1], c1);
    ref_batch_norm(c1, N, C1, CNN_SIDE * CNN_SIDE, r->p[2], r->p[3], NULL, NULL, true, 0.1, 1e-5, b1);
    relu_forward(b1, A1);
    ref_max_pool2d(&q1, b1, p1, NULL);
    ref_conv2d(&k2, p1, r->p[4], r->p[5], c2);
    ref_batch_norm(c2, N, C2, S1 * S1, r->p[6], r->p[7], NULL, NULL, true, 0.1, 1e-5, b2);
    relu_forward(b2, A2);
    ref_max_pool2d(&q2, b2, p2, NULL);
    dense(p2, r->p[8], r->p[9], N, FLAT, FC, f1);
    relu_forward(f1, N * FC);
    dense(f1, r->p[10], r->p[11], N, FC, CLASSES, z);
    const double loss = cross_entropy(z, y, N, dz);
    dense_backward(f1, r->p[10], dz, N, FC, CLASSES, df1, g[10], g[11]);
    relu_backward(f1, df1, N * FC);
    dense_backward(p2, r->p[8], df1, N, FLAT, FC, dp2, g[8], g[9]);
    ref_max_pool2d_backward(&q2, b2, dp2, db2);
    relu_backward(b2, db2, A2);
    ref_batch_norm_backward(c2, N, C2, S1 * S1, r->p[6], NULL, NULL, true, 1e-5, db2, dc2, g[6], g[7]);
    ref_conv2d_backward(&k2, p1, r->p[4], dc2, dp1, g[4], g[5]);
    ref_max_pool2d_backward(&q1, b1, dp1, db1);
    relu_backward(b1, db1, A1);
    ref_batch_norm_backward(c1, N, C1, CNN_SIDE * CNN_SIDE, r->p[2], NULL, NULL, true, 1e-5, db1, dc1, g[2], g[3]);
    ref_conv2d_backward(&k1, x, r->p[0], dc1, NULL, g[0], g[1]);
    adam_update(r, t);
    return loss;
}

TS_TEST(cnn_adam_moments_match_double)
{
    th_seed(31);
    enum { PIXELS = CNN_SIDE * CNN_SIDE, ROWS = CNN_BATCHES * CNN_BATCH };
    float *x = th_alloc((size_t)ROWS * PIXELS * sizeof *x);
    int32_t *y = th_alloc((size_t)ROWS * sizeof *y);
    for (int64_t i = 0; i < (int64_t)ROWS * PIXELS; i++) {
        const int64_t row = i % PIXELS / CNN_SIDE, col = i % CNN_SIDE;
        const bool blank = row < 2 || row >= CNN_SIDE - 2 || col < 2 || col >= CNN_SIDE - 2;
        x[i] = (float)(((blank ? 0.0 : floor(th_uniform(0.0, 256.0))) / 255.0 - 0.29) / 0.35);
    }
    for (int i = 0; i < ROWS; i++)
        y[i] = (int32_t)floor(th_uniform(0.0, CLASSES));
    ug_model *m = ts_model(dev, 3);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    ug_value *xv = NULL, *yv = NULL, *loss = NULL;
    const int64_t xs[4] = {CNN_BATCH, 1, CNN_SIDE, CNN_SIDE}, ys = CNN_BATCH;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 4, xs, &xv));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, &ys, &yv));
    REQUIRE_OK(cnn(g, xv, yv, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    const ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    ug_optimizer *opt = ts_optimizer(m, &oc);
    REQUIRE(opt);
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_compile(g));
    reference r;
    REQUIRE(reference_from(m, CNN_PARAMS, cnn_names, cnn_sizes, &r));
    double worst_loss = 0.0;
    int at = 0;
    graph_beside_reference(dev, g, xv, yv, loss, 4, xs, x, y, CNN_BATCHES, CNN_STEPS, cnn_reference_step, &r,
                           &worst_loss, &at);
    double worst = 0.0;
    int worst_param = 0;
    for (int p = 0; p < CNN_PARAMS; p++) {
        /* A convolution's bias before batch norm has a gradient of 0 (the
         * norm takes the channel's mean away): its moments are rounding. */
        if (p == 1 || p == 5)
            continue;
        ug_tensor *state = NULL;
        float *moment = th_alloc((size_t)cnn_sizes[p] * sizeof *moment);
        REQUIRE_OK(ug_optimizer_find_state(opt, cnn_names[p], "exp_avg", &state));
        REQUIRE_OK(ug_tensor_download(state, moment, (size_t)cnn_sizes[p] * sizeof *moment));
        double apart = 0.0, norm = 0.0;
        for (int64_t i = 0; i < cnn_sizes[p]; i++) {
            apart += (moment[i] - r.m[p][i]) * (moment[i] - r.m[p][i]);
            norm += r.m[p][i] * r.m[p][i];
        }
        const double error = sqrt(apart / norm);
        if (!(error <= worst))
            worst = error, worst_param = p;
    }
    printf("    %s: Adam's first moments at most %.3g from the reference's (%s); losses %.3g (step %d)\n",
           ug_device_name(dev), worst, cnn_names[worst_param], worst_loss, at);
    CHECK_MSG(worst <= 1e-3, "%s's first moment is %.3g (relative) from the double reference's after %d steps",
              cnn_names[worst_param], worst, CNN_STEPS);
    CHECK_MSG(worst_loss <= 1e-4, "a step's loss is %.3g (relative) from the double reference's", worst_loss);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(mlp_standardised_matches_double),
        TH_DEVICE_TEST(trainer_standardised_matches_double),
        TH_DEVICE_TEST(cnn_adam_moments_match_double),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
