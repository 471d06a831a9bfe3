/* The trainer across devices: mixed precision only where the device
 * computes the half type natively (ug_device_precision), several devices
 * trained from one configuration field (config.devices), the optimizer's
 * state sharded over them (config.shard_optimizer), pipeline stages
 * from one field (config.stages), and pipelines side by side (stages
 * with comm). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer_problem.h"

#define OK(expr) CHECK_STATUS(expr, UG_OK)

/* Mixed precision where it pays: a half type the device has no native
 * arithmetic for (ug_device_precision says f32) trains bit for bit as f32
 * does (no rounding of the data; f16's loss scaling, by powers of two, is
 * exact in f32); one it has computes in it, and the parameters differ
 * from f32's. */
static void test_half_precision_where_it_pays(ug_device *dev)
{
    ug_dataset *data = problem(11);
    ug_device_info info;
    REQUIRE(data && OK(ug_device_get_info(dev, &info)));
    ug_trainer_config c = mlp_config();
    int64_t n32 = 0, nh = 0;
    float *f32 = train_params(dev, data, &c, &n32, NULL);
    static const ug_dtype halves[2] = {UG_BF16, UG_F16};
    for (int h = 0; h < 2 && f32; h++) {
        th_context("%s on %s", ug_dtype_name(halves[h]), ug_device_name(dev));
        const bool native = halves[h] == UG_F16 ? info.fp16 : info.bf16;
        CHECK(ug_device_precision(dev, halves[h]) == (native ? halves[h] : UG_F32));
        c.precision = halves[h];
        float *half = train_params(dev, data, &c, &nh, NULL);
        REQUIRE(half && nh == n32);
        const bool same = memcmp(half, f32, (size_t)n32 * sizeof *f32) == 0;
        CHECK_MSG(same == !native, "the %s run %s the f32 run's parameters", ug_dtype_name(halves[h]),
                  same ? "repeats" : "differs from");
    }
    ug_dataset_free(data);
}

static ug_status note_replicas(const ug_trainer_epoch *e, void *user)
{
    *(int *)user = e->replicas;
    return UG_OK;
}

/* One field, two devices: config.devices "cpu,<this device>" trains the
 * model on both (the library's threads; none here) to the parameters one
 * device's run reaches, within float rounding (the ranks' parts of each
 * batch sum in another order); a bad list is refused. */
static void test_devices_from_one_field(ug_device *dev)
{
    ug_dataset *data = problem(5);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    int64_t n1 = 0, n2 = 0;
    static int no_dropout;
    ug_trainer *t = NULL;
    float *one = NULL, *two = NULL;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, &no_dropout, &c, &t)) && OK(ug_trainer_fit(t)))
        one = ts_model_params(ug_trainer_model(t), &n1);
    ug_trainer_free(t);
    t = NULL;
    char devices[80];
    snprintf(devices, sizeof devices, "%s,cpu", ug_device_name(dev));
    c.devices = devices;
    int replicas = 0;
    c.on_epoch = note_replicas;
    c.user = &replicas;
    if (OK(ug_trainer_create(NULL, data, NULL, build_mlp, &no_dropout, &c, &t)) && OK(ug_trainer_fit(t)))
        two = ts_model_params(ug_trainer_model(t), &n2);
    CHECK_EQ_I64(replicas, 2);
    ug_trainer_metrics m;
    CHECK_OK(t ? ug_trainer_evaluate(t, data, &m) : UG_ERR_STATE);
    ug_trainer_free(t);
    REQUIRE(one && two && n1 == n2);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n1; i++) {
        scale = fmax(scale, fabs(one[i]));
        worst = fmax(worst, fabs((double)one[i] - two[i]));
    }
    CHECK_MSG(worst <= 1e-4 * scale, "the two devices' parameters differ from one's by %g (largest %g)", worst, scale);
    c.devices = "cpu,nowhere:7";
    CHECK_STATUS(ug_trainer_create(NULL, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_DEVICE);
    c.devices = ",";
    if (CHECK_STATUS(ug_trainer_create(NULL, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("names no device");
    ug_dataset_free(data);
}

/* build_mlp cut after fc1 (its dropout included): on one device the cut
 * is nothing. */
static ug_status build_staged(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    ug_value *h = NULL;
    ug_status st = ug_nn_linear(g, "fc1", x, 16, &h);
    if (st == UG_OK) st = ug_g_tanh(g, h, &h);
    if (st == UG_OK && !user) st = ug_g_dropout(g, h, 0.1f, &h);
    if (st == UG_OK) st = ug_pipeline_boundary(g, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

enum { MAX_EPOCHS = 8 };

static ug_status note_figures(const ug_trainer_epoch *e, void *user)
{
    ((double *)user)[e->epoch] = e->train.loss;
    return UG_OK;
}

/* base's run through stages cpu and other (batches of 48 in 4
 * micro-batches) against one device accumulating 4 batches of 12: fc1's
 * parameters (stage 0's model), each epoch's training loss (stage 1's,
 * reported through stage 0's callback) and an evaluation from stage 0
 * after fit, within tolerance of the largest; data and cpu are the
 * caller's. *best_epoch, when not NULL: one device's (ug_trainer_best_epoch). */
static void check_stages_match(const char *other, ug_device *cpu, const ug_dataset *data,
                               const ug_trainer_config *base, double tolerance, const char *what, int64_t *best_epoch)
{
    ug_trainer_config c = *base;
    c.batch_size = 12;
    c.accumulate = 4;
    double losses[2][MAX_EPOCHS] = {{0}};
    REQUIRE(c.epochs <= MAX_EPOCHS);
    c.on_epoch = note_figures;
    c.user = losses[0];
    ug_trainer *t = NULL;
    ug_trainer_metrics evaluated[2] = {{0}};
    float *params[2] = {NULL};
    int64_t n[2] = {0}, best[2] = {-1, -1};
    int64_t confusion[2][CLASSES * CLASSES] = {{0}}; /* (valid while its trainer is) */
    if (OK(ug_trainer_create(cpu, data, NULL, build_staged, NULL, &c, &t)) && OK(ug_trainer_fit(t)) &&
        OK(ug_trainer_evaluate(t, data, &evaluated[0])))
        params[0] = ts_model_params(ug_trainer_model(t), &n[0]);
    if (evaluated[0].confusion && evaluated[0].classes == CLASSES)
        memcpy(confusion[0], evaluated[0].confusion, sizeof confusion[0]);
    best[0] = t ? ug_trainer_best_epoch(t, NULL) : -1;
    ug_trainer_free(t);
    t = NULL;
    char stages[80];
    snprintf(stages, sizeof stages, "cpu,%s", other);
    c.stages = stages;
    c.batch_size = 48;
    c.accumulate = 1;
    c.micro_batches = 4;
    c.user = losses[1];
    if (OK(ug_trainer_create(NULL, data, NULL, build_staged, NULL, &c, &t)) && OK(ug_trainer_fit(t)) &&
        OK(ug_trainer_evaluate(t, data, &evaluated[1])))
        params[1] = ts_model_params(ug_trainer_model(t), &n[1]);
    if (evaluated[1].confusion && evaluated[1].classes == CLASSES)
        memcpy(confusion[1], evaluated[1].confusion, sizeof confusion[1]);
    best[1] = t ? ug_trainer_best_epoch(t, NULL) : -1;
    ug_trainer_free(t);
    if (best_epoch)
        *best_epoch = best[0];
    /* stage 0's evaluation shows the last stage's confusion matrix */
    CHECK_MSG(!base->confusion || (evaluated[1].confusion && !memcmp(confusion[0], confusion[1], sizeof confusion[0])),
              "%s: the stages' confusion matrix is %s one device's", what,
              evaluated[1].confusion ? "not" : "missing, not");
    CHECK_MSG(best[0] == best[1], "%s: the best epoch is %lld through the stages, %lld on one device", what,
              (long long)best[1], (long long)best[0]);
    /* stage 0's model holds fc1 alone: one device's first 16 x 6 + 16 values */
    REQUIRE(params[0] && params[1] && n[1] == 16 * FEATURES + 16 && n[0] > n[1]);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n[1]; i++) {
        scale = fmax(scale, fabs(params[0][i]));
        worst = fmax(worst, fabs((double)params[0][i] - params[1][i]));
    }
    CHECK_MSG(worst <= tolerance * scale, "%s: stage 0's fc1 differs from one device's by %g (largest %g)", what,
              worst, scale);
    for (int e = 0; e < c.epochs; e++)
        CHECK_MSG(fabs(losses[1][e] - losses[0][e]) <= tolerance * losses[0][e], "%s: epoch %d's training loss: "
                  "%.7g through the stages, %.7g on one device", what, e + 1, losses[1][e], losses[0][e]);
    CHECK_MSG(evaluated[1].samples == SAMPLES && fabs(evaluated[1].loss - evaluated[0].loss) <= tolerance *
                  evaluated[0].loss && fabs(evaluated[1].accuracy - evaluated[0].accuracy) <= 10 * tolerance,
              "%s: the stages' evaluation: %lld samples, loss %.7g, accuracy %.4f; one device's loss %.7g, %.4f",
              what, (long long)evaluated[1].samples, evaluated[1].loss, evaluated[1].accuracy, evaluated[0].loss,
              evaluated[0].accuracy);
}

/* config.stages "cpu,<other>" (this device, or opencl:0 on cpu) trains
 * build_staged, fc1 on stage 0 and fc2 on stage 1, as one device does
 * (check_stages_match), with dropout and a confusion matrix; with gradient
 * clipping and f16 (one norm and one loss scale over both stages); with
 * patience. What stages cannot take is refused. */
static void test_stages_from_one_field(ug_device *dev)
{
    const char *other = ts_second_stage(dev);
    if (!other)
        return;
    ug_device *cpu = NULL;
    ug_dataset *data = problem(13);
    REQUIRE(data && OK(ug_device_open("cpu", &cpu)));
    ug_trainer_config c = mlp_config();
    c.confusion = true;
    check_stages_match(other, cpu, data, &c, 1e-4, "dropout, a confusion matrix", NULL);
    c.confusion = false;
    ug_trainer_config clipped = c;
    clipped.optimizer.max_grad_norm = 0.2f;
    clipped.precision = UG_F16;
    /* (a device with f16 arithmetic rounds to 11 bits; beside the cpu,
     * which computes f16 in f32, what crosses is cast to its type) */
    check_stages_match(other, cpu, data, &clipped, 2e-2, "clipped, f16", NULL);
    /* early stopping: the same epochs and best weights, kept whole in
     * CHECKPOINT.best (every stage's part) */
    char dir[] = "/tmp/ug-test-patience-XXXXXX", path[128], best_file[160];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    snprintf(best_file, sizeof best_file, "%s.best", path);
    ug_trainer_config patient = c;
    patient.patience = 1;
    patient.epochs = MAX_EPOCHS;
    patient.optimizer.lr = 0.3f; /* a validation loss that does not fall every epoch */
    patient.checkpoint = path;
    int64_t best = -1;
    check_stages_match(other, cpu, data, &patient, 1e-4, "patience", &best);
    CHECK_MSG(best >= 0 && best < patient.epochs - 1, "patience: the best epoch is %lld of %lld: nothing was "
              "stopped early or restored", (long long)best, (long long)patient.epochs);
    /* the whole model's parameters (fc1 and fc2), loaded from it: a
     * checkpoint missing one is refused */
    ug_model *kept = NULL;
    ug_graph *g = NULL;
    ug_checkpoint *file = NULL;
    ug_value *x = NULL, *y = NULL;
    ug_trainer_outputs outs = {0};
    static int no_dropout;
    if (OK(ug_model_create(cpu, 1, &kept)) && OK(ug_graph_create(kept, &g)) &&
        OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){4, FEATURES}, &x)) &&
        OK(ug_graph_input(g, "y", UG_I32, 1, (int64_t[]){4}, &y)) && OK(build_staged(g, x, y, &no_dropout, &outs)) &&
        OK(ug_checkpoint_create(&file)) && OK(ug_checkpoint_add_model(file, kept)))
        CHECK_MSG(ug_checkpoint_load(file, best_file) == UG_OK, "the stages' best checkpoint: %s", ug_last_error());
    ug_checkpoint_free(file);
    ug_graph_free(g);
    ug_model_free(kept);
    unlink(best_file);
    unlink(path);
    rmdir(dir);
    ug_trainer *t = NULL;
    char stages[80];
    snprintf(stages, sizeof stages, "cpu,%s", other);
    c.stages = stages;
    c.batch_size = 48;
    c.micro_batches = 4;
    c.accumulate = 2;
    if (CHECK_STATUS(ug_trainer_create(NULL, data, NULL, build_staged, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("accumulate with stages");
    c.accumulate = 1;
    c.stages = "cpu";
    if (CHECK_STATUS(ug_trainer_create(NULL, data, NULL, build_staged, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("names one device");
    ug_device_close(cpu);
    ug_dataset_free(data);
}

/* Stops the run (the trainer saves) after its first epoch. */
static ug_status stop_after_first(const ug_trainer_epoch *e, void *user)
{
    (void)e;
    *(volatile sig_atomic_t *)user = 1;
    return UG_OK;
}

/* fc1 (stage 0's, or one device's first parameters) after fitting c,
 * and an evaluation of data, into params (n values) and metrics. */
static bool fit_staged(ug_device *dev, ug_dataset *data, const ug_trainer_config *c, void *user, float **params,
                       int64_t *n, ug_trainer_metrics *metrics)
{
    ug_trainer *t = NULL;
    bool ok = OK(ug_trainer_create(dev, data, NULL, build_staged, user, c, &t)) && OK(ug_trainer_fit(t)) &&
              OK(ug_trainer_evaluate(t, data, metrics));
    if (ok && params)
        *params = ts_model_params(ug_trainer_model(t), n);
    ug_trainer_free(t);
    return ok;
}

/* A staged run's checkpoint holds the whole model: stopped after its
 * first epoch (a save) and resumed on the same stages, it ends bit for
 * bit as the run without a stop; resumed on one device (batches of 48,
 * no micro-batches; no dropout, whose masks are per micro-batch), within
 * float rounding of it. */
static void test_stages_resume(ug_device *dev)
{
    const char *other = ts_second_stage(dev);
    ug_device *cpu = NULL;
    if (!other)
        return;
    char dir[] = "/tmp/ug-test-stages-XXXXXX", path[128], stages[80];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    snprintf(stages, sizeof stages, "cpu,%s", other);
    ug_dataset *data = problem(17);
    REQUIRE(data && OK(ug_device_open("cpu", &cpu)));
    static int no_dropout;
    ug_trainer_config c = mlp_config();
    c.stages = stages;
    c.batch_size = 48;
    c.accumulate = 1;
    c.micro_batches = 4;
    c.checkpoint = path;
    float *whole = NULL, *resumed = NULL, *one = NULL;
    int64_t n[3] = {0};
    ug_trainer_metrics m[3];
    REQUIRE(fit_staged(NULL, data, &c, &no_dropout, &whole, &n[0], &m[0]));
    volatile sig_atomic_t stop = 0;
    c.stop = &stop;
    c.on_epoch = stop_after_first;
    c.user = (void *)&stop;
    REQUIRE(fit_staged(NULL, data, &c, &no_dropout, NULL, NULL, &m[1]));
    c.stop = NULL;
    c.on_epoch = NULL;
    c.resume = path;
    if (fit_staged(NULL, data, &c, &no_dropout, &resumed, &n[1], &m[1]))
        CHECK_MSG(n[1] == n[0] && !memcmp(resumed, whole, (size_t)n[0] * sizeof *whole) &&
                      m[1].loss == m[0].loss,
                  "resumed on the same stages: fc1 or the evaluation (%.9g, %.9g) differs from the run without "
                  "a stop", m[1].loss, m[0].loss);
    c.stages = NULL; /* the same run's checkpoint on one device */
    c.micro_batches = 0;
    c.checkpoint = NULL;
    c.resume_override = true;
    if (fit_staged(cpu, data, &c, &no_dropout, &one, &n[2], &m[2])) {
        double scale = 0.0, worst = 0.0;
        for (int64_t i = 0; i < n[0] && n[2] > n[0]; i++) {
            scale = fmax(scale, fabs(whole[i]));
            worst = fmax(worst, fabs((double)whole[i] - one[i]));
        }
        CHECK_MSG(n[2] > n[0] && worst <= 1e-4 * scale && fabs(m[2].loss - m[0].loss) <= 1e-4 * m[0].loss,
                  "resumed on one device: fc1 %g from the staged run's (largest %g), loss %.7g against %.7g",
                  worst, scale, m[2].loss, m[0].loss);
    }
    remove(path);
    rmdir(dir);
    ug_device_close(cpu);
    ug_dataset_free(data);
}

/* config.shard_optimizer on two ranks of this device: the parameters the
 * unsharded run's bit for bit; the checkpoint holds the whole state (the
 * two runs' checkpoints continue to the same bits, resumed either way),
 * and resumes on one device too (its dropout masks are not two ranks'). */
static void test_sharded_optimizer(ug_device *dev)
{
    ug_dataset *data = problem(9);
    REQUIRE(data);
    char dir[] = "/tmp/ug-test-shard-XXXXXX", plain[128], sharded[128], devices[80];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    snprintf(sharded, sizeof sharded, "%s/sharded.safetensors", dir);
    snprintf(devices, sizeof devices, "%s,%s", ug_device_name(dev), ug_device_name(dev));
    ug_trainer_config c = mlp_config();
    c.epochs = 2;
    c.devices = devices;
    int64_t n[6] = {0};
    c.checkpoint = plain;
    float *whole = train_params(dev, data, &c, &n[0], NULL);
    c.checkpoint = sharded;
    c.shard_optimizer = true;
    float *parts = train_params(dev, data, &c, &n[1], NULL);
    REQUIRE(whole && parts && n[0] == n[1]);
    CHECK_MSG(!memcmp(whole, parts, (size_t)n[0] * sizeof *whole),
              "the sharded run's parameters differ from the unsharded run's");
    /* a third epoch from each checkpoint: from the sharded one sharded and
     * not, from the plain one not; on one device from the sharded one */
    c.epochs = 3;
    c.resume_override = true; /* the cosine schedule's length changes with them */
    c.checkpoint = NULL;
    c.resume = plain;
    c.shard_optimizer = false;
    float *from_plain = train_params(dev, data, &c, &n[2], NULL);
    c.resume = sharded;
    float *from_sharded = train_params(dev, data, &c, &n[3], NULL);
    c.shard_optimizer = true;
    float *sharded_again = train_params(dev, data, &c, &n[4], NULL);
    c.shard_optimizer = false;
    c.devices = NULL;
    float *one = train_params(dev, data, &c, &n[5], NULL);
    REQUIRE(from_plain && from_sharded && sharded_again && one);
    CHECK_MSG(n[3] == n[2] && !memcmp(from_plain, from_sharded, (size_t)n[2] * sizeof *whole),
              "resuming the sharded run's checkpoint differs from resuming the unsharded run's");
    CHECK_MSG(n[4] == n[2] && !memcmp(from_plain, sharded_again, (size_t)n[2] * sizeof *whole),
              "resuming the sharded run's checkpoint sharded differs from resuming it unsharded");
    CHECK_EQ_I64(n[5], n[2]);
    c.devices = NULL; /* nothing to shard over */
    ug_trainer *t = NULL;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &(ug_trainer_config){.shard_optimizer = true,
                     .epochs = 1, .batch_size = 8, .accumulate = 1, .keep = 1}, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("no ranks");
    unlink(plain);
    unlink(sharded);
    rmdir(dir);
    ug_dataset_free(data);
}

/* One pipeline of the grid: its replica's trainer, on a thread of its own. */
typedef struct grid_pipeline {
    ug_trainer_config config;
    const ug_dataset *data;
    double losses[3];
    ug_trainer_metrics evaluated;
    float *params;
    int64_t count;
    ug_status status;
    char error[512];
} grid_pipeline;

static void *run_grid_pipeline(void *arg)
{
    grid_pipeline *p = arg;
    static int no_dropout;
    ug_trainer *t = NULL;
    p->config.user = p->losses;
    p->status = ug_trainer_create(NULL, p->data, NULL, build_staged, &no_dropout, &p->config, &t);
    if (p->status == UG_OK)
        p->status = ug_trainer_fit(t);
    if (p->status == UG_OK)
        p->status = ug_trainer_evaluate(t, p->data, &p->evaluated);
    snprintf(p->error, sizeof p->error, "%s", p->status == UG_OK ? "" : ug_last_error());
    if (p->status == UG_OK)
        p->params = ts_model_params(ug_trainer_model(t), &p->count);
    ug_trainer_free(t);
    ug_comm_free(p->config.comm);
    return NULL;
}

/* Two pipelines side by side (config.stages "cpu,<other>" with comm, an
 * in-process group of two: four stages on four threads), each half of
 * every batch of 48 in 2 micro-batches, against one device accumulating
 * 4 batches of 12 (no dropout: each replica draws its own masks): fc1
 * (stage 0's), each epoch's training loss (both replicas' rows) and the
 * evaluation within rounding. With the optimizer sharded over each
 * stage's replicas, the same bits; its checkpoint holds the whole model,
 * which one device resumes. */
static void test_stages_grid(ug_device *dev)
{
    const char *other = ts_second_stage(dev);
    if (!other)
        return;
    static int no_dropout;
    ug_device *cpu = NULL;
    ug_dataset *data = problem(17);
    REQUIRE(data && OK(ug_device_open("cpu", &cpu)));
    char dir[] = "/tmp/ug-test-grid-XXXXXX", path[128], stages[80];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/grid.safetensors", dir);
    snprintf(stages, sizeof stages, "cpu,%s", other);
    ug_trainer_config c = mlp_config();
    c.batch_size = 12;
    c.accumulate = 4;
    double losses[3] = {0};
    c.on_epoch = note_figures;
    c.user = losses;
    ug_trainer *t = NULL;
    ug_trainer_metrics evaluated = {0};
    float *one = NULL;
    int64_t n_one = 0;
    if (OK(ug_trainer_create(cpu, data, NULL, build_staged, &no_dropout, &c, &t)) && OK(ug_trainer_fit(t)) &&
        OK(ug_trainer_evaluate(t, data, &evaluated)))
        one = ts_model_params(ug_trainer_model(t), &n_one);
    ug_trainer_free(t);
    t = NULL;
    grid_pipeline runs[2][2];
    for (int sharded = 0; sharded < 2; sharded++) {
        ug_comm *comms[2];
        REQUIRE_OK(ug_comm_local_create(2, (ug_device *[]){cpu, cpu}, comms));
        pthread_t threads[2];
        for (int k = 0; k < 2; k++) {
            grid_pipeline *p = &runs[sharded][k];
            *p = (grid_pipeline){.config = mlp_config(), .data = data};
            p->config.batch_size = 48;
            p->config.micro_batches = 2;
            p->config.accumulate = 1;
            p->config.stages = stages;
            p->config.comm = comms[k];
            p->config.on_epoch = note_figures;
            p->config.shard_optimizer = sharded;
            p->config.checkpoint = sharded ? path : NULL;
            pthread_create(&threads[k], NULL, run_grid_pipeline, p);
        }
        for (int k = 0; k < 2; k++)
            pthread_join(threads[k], NULL);
        for (int k = 0; k < 2; k++)
            CHECK_MSG(runs[sharded][k].status == UG_OK, "%s pipeline %d: %s", sharded ? "sharded," : "", k,
                      runs[sharded][k].error);
    }
    REQUIRE(one && runs[0][0].params && runs[0][1].params && runs[1][0].params);
    const int64_t n = runs[0][0].count; /* stage 0's model: fc1 alone */
    REQUIRE(n == 16 * FEATURES + 16 && n_one > n && runs[1][0].count == n);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(one[i]));
        worst = fmax(worst, fabs((double)one[i] - runs[0][0].params[i]));
    }
    CHECK_MSG(worst <= 1e-4 * scale, "the grid's fc1 differs from one device's by %g (largest %g)", worst, scale);
    CHECK_MSG(!memcmp(runs[0][0].params, runs[0][1].params, (size_t)n * sizeof(float)) &&
                  !memcmp(runs[0][0].params, runs[1][0].params, (size_t)n * sizeof(float)),
              "the two pipelines' fc1, or the sharded run's, differ from the first pipeline's");
    for (int e = 0; e < 3; e++)
        CHECK_MSG(fabs(runs[0][0].losses[e] - losses[e]) <= 1e-4 * losses[e], "epoch %d's training loss: %.7g "
                  "through the grid, %.7g on one device", e + 1, runs[0][0].losses[e], losses[e]);
    CHECK_MSG(runs[0][1].evaluated.samples == SAMPLES &&
                  fabs(runs[0][1].evaluated.loss - evaluated.loss) <= 1e-4 * evaluated.loss,
              "pipeline 1's evaluation: %lld samples, loss %.7g; one device's %.7g",
              (long long)runs[0][1].evaluated.samples, runs[0][1].evaluated.loss, evaluated.loss);
    /* the sharded grid's checkpoint, on one device: the whole model */
    c.resume = path;
    c.batch_size = 48; /* the loader's position is in the grid's batches */
    c.accumulate = 1;
    float *resumed = NULL;
    int64_t n_resumed = 0;
    if (OK(ug_trainer_create(cpu, data, NULL, build_staged, &no_dropout, &c, &t)))
        resumed = ts_model_params(ug_trainer_model(t), &n_resumed);
    ug_trainer_free(t);
    CHECK_MSG(resumed && n_resumed == n_one && !memcmp(resumed, runs[1][0].params, (size_t)n * sizeof(float)),
              "one device resuming the grid's checkpoint holds %lld values (one device's model %lld), fc1 %s",
              (long long)n_resumed, (long long)n_one,
              resumed && !memcmp(resumed, runs[1][0].params, (size_t)n * sizeof(float)) ? "alike" : "different");
    unlink(path);
    rmdir(dir);
    ug_device_close(cpu);
    ug_dataset_free(data);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(half_precision_where_it_pays),
        TH_DEVICE_TEST(devices_from_one_field),
        TH_DEVICE_TEST(sharded_optimizer),
        TH_DEVICE_TEST(stages_from_one_field),
        TH_DEVICE_TEST(stages_resume),
        TH_DEVICE_TEST(stages_grid),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
