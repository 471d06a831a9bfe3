/* The trainer tests' problem (trainer_problem.h). */
#include "trainer_problem.h"

#include <math.h>
#include <stdint.h>

/* user non-NULL: without the dropout (whose masks differ per rank). */
ug_status build_mlp(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    ug_value *h = NULL;
    ug_status st = ug_nn_linear(g, "fc1", x, 16, &h);
    if (st == UG_OK) st = ug_g_tanh(g, h, &h);
    if (st == UG_OK && !user) st = ug_g_dropout(g, h, 0.1f, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, CLASSES, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* Labels from a fixed linear rule with some noise, so training learns. */
void problem_values(uint64_t seed, float *x, int32_t *labels)
{
    uint64_t s = seed;
    for (int i = 0; i < SAMPLES; i++) {
        double score[CLASSES] = {0};
        for (int f = 0; f < FEATURES; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * FEATURES + f] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            for (int k = 0; k < CLASSES; k++)
                score[k] += x[i * FEATURES + f] * ((f + k) % 3 - 1.0);
        }
        labels[i] = score[0] > score[1] ? (score[0] > score[2] ? 0 : 2) : (score[1] > score[2] ? 1 : 2);
    }
}

ug_dataset *problem(uint64_t seed)
{
    float *x = th_alloc(SAMPLES * FEATURES * sizeof *x);
    int32_t *labels = th_alloc(SAMPLES * sizeof *labels);
    problem_values(seed, x, labels);
    ug_dataset *d = NULL;
    if (ug_dataset_from_arrays(SAMPLES, FEATURES, x, labels, &d) != UG_OK)
        th_fail(TH_LOC, "ug_dataset_from_arrays: %s", ug_last_error());
    return d;
}

/* The problem's features as bytes (images of 2 x 3), for the loader's
 * conversion and augmentation on the device. */
ug_dataset *byte_problem(uint64_t seed)
{
    ug_dataset *d = NULL;
    float *values = th_alloc(SAMPLES * FEATURES * sizeof *values);
    uint8_t *x = th_alloc(SAMPLES * FEATURES);
    int32_t *labels = th_alloc(SAMPLES * sizeof *labels);
    problem_values(seed, values, labels);
    for (int i = 0; i < SAMPLES * FEATURES; i++)
        x[i] = (uint8_t)lround((values[i] + 1.0f) * 127.5f);
    ug_dataset_arrays a = {.count = SAMPLES, .features = FEATURES, .x_dtype = UG_U8, .x = x, .labels = labels};
    if (ug_dataset_create(&a, &d) != UG_OK || ug_dataset_transform(d, 2.0f / 255.0f, -1.0f) != UG_OK)
        th_fail(TH_LOC, "a byte data set: %s", ug_last_error());
    return d;
}

ug_trainer_config mlp_config(void)
{
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = 3;
    c.batch_size = 32;
    c.accumulate = 2;
    c.val_split = 0.2;
    c.seed = 7;
    c.optimizer.lr = 0.01f;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = 2;
    c.log_every = 1;
    return c;
}

float *train_params(ug_device *dev, ug_dataset *data, const ug_trainer_config *c, int64_t *count,
                           bool *stopped)
{
    ug_trainer *t = NULL;
    float *params = NULL;
    if (!CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, c, &t), UG_OK))
        return NULL;
    if (CHECK_STATUS(ug_trainer_fit(t), UG_OK))
        params = ts_model_params(ug_trainer_model(t), count);
    if (stopped)
        *stopped = ug_trainer_stopped(t);
    ug_trainer_free(t);
    return params;
}

