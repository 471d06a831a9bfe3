/* Regression through the library's trainer: a data set of float targets
 * built from the program's own arrays, a seeded validation split,
 * standardised features, an MLP trained on the mean squared error, and a
 * metric of the program's own (the mean absolute error) reported beside
 * the loss each epoch.
 *
 * The task: two targets of eight features,
 *   y0 = sin(2 x0) + x1 x2,   y1 = 0.5 x3^2 - x4,
 * with x uniform in [-1, 1] plus a little noise on y. The program exits 1
 * unless the validation MSE ends below 10% of the targets' variance (the
 * error of always predicting their mean), so it checks itself.
 *
 *   regression [--device NAME] [--epochs N]
 *
 * A line after the first step and every 10 s shows the progress within an
 * epoch, for a slow device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unigrad/unigrad.h>

enum { SAMPLES = 8192, FEATURES = 8, TARGETS = 2, HIDDEN = 64 };

static double uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void make_arrays(float *x, float *y)
{
    uint64_t state = 42;
    for (int i = 0; i < SAMPLES; i++) {
        float *xi = x + i * FEATURES;
        for (int f = 0; f < FEATURES; f++)
            xi[f] = (float)uniform(&state);
        y[i * TARGETS] = sinf(2.0f * xi[0]) + xi[1] * xi[2] + 0.01f * (float)uniform(&state);
        y[i * TARGETS + 1] = 0.5f * xi[3] * xi[3] - xi[4] + 0.01f * (float)uniform(&state);
    }
}

/* The mean over samples and targets of (y - mean(y))^2. */
static double target_variance(const float *y)
{
    double var = 0;
    for (int k = 0; k < TARGETS; k++) {
        double mean = 0, sq = 0;
        for (int i = 0; i < SAMPLES; i++)
            mean += y[i * TARGETS + k];
        mean /= SAMPLES;
        for (int i = 0; i < SAMPLES; i++)
            sq += (y[i * TARGETS + k] - mean) * (y[i * TARGETS + k] - mean);
        var += sq / SAMPLES;
    }
    return var / TARGETS;
}

/* Two tanh layers of HIDDEN, the MSE, and the absolute error: the batch's
 * sum of each sample's mean |prediction - target|, which the trainer adds
 * up and divides by the samples. */
static ug_status mlp(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    ug_value *h = NULL, *pred = NULL, *error = NULL;
    ug_status st = ug_nn_linear(g, "fc1", x, HIDDEN, &h);
    if (st == UG_OK) st = ug_g_tanh(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, HIDDEN, &h);
    if (st == UG_OK) st = ug_g_tanh(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc3", h, TARGETS, &pred);
    if (st == UG_OK) st = ug_g_mse(g, pred, y, &out->loss);
    if (st == UG_OK) st = ug_g_sub(g, pred, y, &error);
    if (st == UG_OK) st = ug_g_abs(g, error, &error);
    if (st == UG_OK) st = ug_g_mean(g, error, 1, false, &error);
    if (st == UG_OK) st = ug_g_sum(g, error, 0, true, &out->metrics[0]);
    out->metric_names[0] = "MAE";
    out->metric_count = 1;
    return st;
}

/* After each batch (user: the trainer, *trainer once created): a line
 * after the run's first step and every 10 s, with the loss read then (the
 * trainer reads it only now and then: a wait for the device). */
static ug_status show_step(const ug_trainer_step *s, void *user)
{
    static time_t last;
    const time_t now = time(NULL);
    if (s->global_batch > 1 && difftime(now, last) < 10.0)
        return UG_OK;
    last = now;
    float loss = s->loss;
    ug_status st = isnan(loss) ? ug_trainer_last_loss(*(ug_trainer **)user, &loss) : UG_OK;
    if (st == UG_OK)
        printf("epoch %2lld step %lld/%lld: train MSE %.5f, %.0f samples/s\n", (long long)s->epoch + 1,
               (long long)s->batch + 1, (long long)s->batches, (double)loss, s->samples_per_second);
    return st;
}

static ug_status show_epoch(const ug_trainer_epoch *e, void *user)
{
    (void)user;
    printf("epoch %2lld: train MSE %.5f, validation MSE %.5f, validation %s %.5f\n", (long long)e->epoch + 1,
           e->train.loss, e->validation.loss, e->validation.metric_names[0], e->validation.metrics[0]);
    return UG_OK;
}

int main(int argc, char **argv)
{
    const char *device_name = NULL;
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device_name = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            c.epochs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: regression [--device NAME] [--epochs N]\n");
            return 2;
        }
    }
    float *x = malloc(sizeof(float) * SAMPLES * FEATURES), *y = malloc(sizeof(float) * SAMPLES * TARGETS);
    if (!x || !y)
        return 1;
    make_arrays(x, y);
    const double variance = target_variance(y);

    /* The data set copies the arrays; 20% is held out for validation,
     * and both parts are standardised with the training part's figures. */
    ug_dataset *all = NULL, *train = NULL, *val = NULL;
    ug_dataset_arrays arrays = {.count = SAMPLES, .features = FEATURES, .x = x, .targets = y, .target_width = TARGETS};
    ug_status st = ug_dataset_create(&arrays, &all);
    free(x);
    free(y);
    double mean = 0, sd = 1;
    if (st == UG_OK) st = ug_dataset_split(all, 0.2, 1, &train, &val);
    if (st == UG_OK) st = ug_dataset_stats(train, &mean, &sd);
    if (st == UG_OK) st = ug_dataset_transform(train, (float)(1 / sd), (float)(-mean / sd));
    if (st == UG_OK) st = ug_dataset_transform(val, (float)(1 / sd), (float)(-mean / sd));

    ug_device *dev = NULL;
    ug_trainer *trainer = NULL;
    c.optimizer.lr = 3e-3f;
    c.on_step = show_step;
    c.on_epoch = show_epoch;
    c.user = &trainer;
    if (st == UG_OK) st = ug_device_open(device_name, &dev);
    if (st == UG_OK) st = ug_trainer_create(dev, train, val, mlp, NULL, &c, &trainer);
    if (st == UG_OK)
        printf("regression on %s: %lld training and %lld validation samples, %d targets each; predicting the "
               "mean scores %.4f\n", ug_device_name(dev), (long long)ug_dataset_count(train),
               (long long)ug_dataset_count(val), TARGETS, variance);
    ug_trainer_metrics m = {0};
    if (st == UG_OK) st = ug_trainer_fit(trainer);
    if (st == UG_OK) st = ug_trainer_evaluate(trainer, val, &m);
    const bool learned = st == UG_OK && m.loss < 0.1 * variance;
    if (st == UG_OK)
        printf("validation MSE %.5f is %.1f%% of the variance: %s\n", m.loss, 100.0 * m.loss / variance,
               learned ? "learned" : "NOT learned (expected below 10%)");
    else
        fprintf(stderr, "regression: %s\n", ug_last_error());
    ug_trainer_free(trainer);
    ug_device_close(dev);
    ug_dataset_free(all);
    ug_dataset_free(train);
    ug_dataset_free(val);
    return learned ? 0 : 1;
}
