/* ug-example-regression: regression through the loader, in full: a data
 * set of float targets built from the program's own arrays, a seeded
 * validation split, standardised features, an MLP trained on the mean
 * squared error, and the validation error each epoch.
 *
 * The task: two targets of eight features,
 *   y0 = sin(2 x0) + x1 x2,   y1 = 0.5 x3^2 - x4,
 * with x uniform in [-1, 1] plus a little noise on y. The program exits 1
 * unless the validation MSE ends below 10% of the targets' variance (the
 * error of always predicting their mean), so it checks itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unigrad/unigrad.h"

enum { SAMPLES = 8192, FEATURES = 8, TARGETS = 2, BATCH = 64, HIDDEN = 64 };

#define CHECK(call)                                                                  \
    do {                                                                             \
        if ((call) != UG_OK) {                                                       \
            fprintf(stderr, "ug-example-regression: %s: %s\n", #call, ug_last_error()); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

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

/* The mean squared error over a data set, in eval mode. */
static double evaluate(ug_graph *g, ug_loader *loader, ug_value *x, ug_value *t, ug_value *sum, int64_t samples)
{
    CHECK(ug_graph_set_training(g, false));
    CHECK(ug_graph_clear_sums(g));
    CHECK(ug_loader_start_epoch(loader, 0));
    for (;;) {
        ug_batch b;
        bool done = false;
        CHECK(ug_loader_next(loader, &b, &done));
        if (done)
            break;
        CHECK(ug_graph_bind(g, x, b.x));
        CHECK(ug_graph_bind(g, t, b.y));
        CHECK(ug_graph_run_forward(g));
    }
    float total = 0;
    CHECK(ug_graph_read(g, sum, &total, sizeof total));
    CHECK(ug_graph_clear_sums(g));
    CHECK(ug_graph_set_training(g, true));
    return (double)total / (double)samples;
}

int main(int argc, char **argv)
{
    const char *device_name = NULL;
    int epochs = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device_name = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            epochs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: ug-example-regression [--device NAME] [--epochs N]\n");
            return 2;
        }
    }
    float *x = malloc(sizeof(float) * SAMPLES * FEATURES), *y = malloc(sizeof(float) * SAMPLES * TARGETS);
    if (!x || !y)
        return 1;
    make_arrays(x, y);
    double variance = target_variance(y);

    /* The data set copies the arrays; 20% is held out for validation. */
    ug_dataset *all = NULL, *train = NULL, *val = NULL;
    ug_dataset_arrays arrays = {.count = SAMPLES, .features = FEATURES, .x = x, .targets = y, .target_width = TARGETS};
    CHECK(ug_dataset_create(&arrays, &all));
    free(x);
    free(y);
    CHECK(ug_dataset_split(all, 0.2, 1, &train, &val));
    double mean = 0, sd = 1;
    CHECK(ug_dataset_stats(train, &mean, &sd));
    CHECK(ug_dataset_transform(train, (float)(1 / sd), (float)(-mean / sd)));
    CHECK(ug_dataset_transform(val, (float)(1 / sd), (float)(-mean / sd)));

    ug_device *dev = NULL;
    CHECK(ug_device_open(device_name, &dev));
    ug_device_info info;
    CHECK(ug_device_get_info(dev, &info));
    ug_model *model = NULL;
    ug_graph *g = NULL;
    ug_optimizer *opt = NULL;
    CHECK(ug_model_create(dev, 0, &model));
    CHECK(ug_graph_create(model, &g));
    ug_value *in = NULL, *target = NULL, *h = NULL, *pred = NULL, *loss = NULL, *loss_sum = NULL;
    CHECK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){BATCH, FEATURES}, &in));
    CHECK(ug_graph_input(g, "targets", UG_F32, 2, (int64_t[]){BATCH, TARGETS}, &target));
    CHECK(ug_nn_linear(g, "fc1", in, HIDDEN, &h));
    CHECK(ug_g_tanh(g, h, &h));
    CHECK(ug_nn_linear(g, "fc2", h, HIDDEN, &h));
    CHECK(ug_g_tanh(g, h, &h));
    CHECK(ug_nn_linear(g, "fc3", h, TARGETS, &pred));
    CHECK(ug_g_mse(g, pred, target, &loss));
    CHECK(ug_graph_accumulate_rows(g, loss, &loss_sum));
    CHECK(ug_graph_backward(g, loss));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 3e-3f;
    CHECK(ug_optimizer_create(model, &oc, &opt));
    CHECK(ug_graph_set_optimizer(g, opt));
    CHECK(ug_graph_compile(g));

    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = BATCH;
    ug_loader *train_loader = NULL, *val_loader = NULL;
    CHECK(ug_loader_create(train, dev, &lc, &train_loader));
    lc.shuffle = false;
    CHECK(ug_loader_create(val, dev, &lc, &val_loader));
    printf("ug-example-regression on %s: %lld training and %lld validation samples, %d targets each; "
           "predicting the mean scores %.4f\n",
           info.id, (long long)ug_dataset_count(train), (long long)ug_dataset_count(val), TARGETS, variance);

    double val_mse = 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        CHECK(ug_loader_start_epoch(train_loader, epoch));
        for (;;) {
            ug_batch b;
            bool done = false;
            CHECK(ug_loader_next(train_loader, &b, &done));
            if (done)
                break;
            CHECK(ug_graph_bind(g, in, b.x));
            CHECK(ug_graph_bind(g, target, b.y));
            CHECK(ug_graph_run(g));
        }
        float train_sum = 0;
        CHECK(ug_graph_read(g, loss_sum, &train_sum, sizeof train_sum));
        val_mse = evaluate(g, val_loader, in, target, loss_sum, ug_dataset_count(val));
        printf("epoch %2d: train MSE %.5f, validation MSE %.5f\n", epoch + 1,
               (double)train_sum / (double)ug_dataset_count(train), val_mse);
    }
    bool learned = val_mse < 0.1 * variance;
    printf("validation MSE %.5f is %.1f%% of the variance: %s\n", val_mse, 100.0 * val_mse / variance,
           learned ? "learned" : "NOT learned (expected below 10%)");
    ug_loader_free(train_loader);
    ug_loader_free(val_loader);
    ug_graph_free(g);
    ug_optimizer_free(opt);
    ug_model_free(model);
    ug_device_close(dev);
    ug_dataset_free(all);
    ug_dataset_free(train);
    ug_dataset_free(val);
    return learned ? 0 : 1;
}
