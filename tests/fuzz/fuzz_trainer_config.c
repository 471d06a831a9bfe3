/* libFuzzer harness for the trainer's configuration (structure-aware: the
 * bytes decode into a ug_trainer_config, its optimizer's fields included).
 * Whatever the values, ug_trainer_create returns a status with a message
 * or a trainer whose figures are sane (a batch of one sample up to the
 * set's, updates in an epoch, a finite learning rate), never crashes,
 * leaks or overflows (ASan/UBSan). An accepted configuration small enough
 * to run quickly also trains its epochs and evaluates, on a tiny data set.
 * The same configuration goes to ug_train_step_create, whose step then
 * takes one batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "unigrad/unigrad.h"

enum { SAMPLES = 12, FEATURES = 3, CLASSES = 3 };

static ug_device *device;
static ug_dataset *data;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    float x[SAMPLES * FEATURES];
    int32_t labels[SAMPLES];
    for (int i = 0; i < SAMPLES * FEATURES; i++)
        x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < SAMPLES; i++)
        labels[i] = i % CLASSES;
    if (ug_device_open("cpu", &device) != UG_OK || ug_memory_set_limit(device, FUZZ_POOL_LIMIT) != UG_OK ||
        ug_dataset_from_arrays(SAMPLES, FEATURES, x, labels, &data) != UG_OK)
        abort();
    return 0;
}

/* A linear classifier: logits = x W + b, cross-entropy. */
static ug_status linear(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    ug_status st = ug_nn_linear(g, "fc", x, CLASSES, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

static void check_message(ug_status st)
{
    if (st != UG_OK && !ug_last_error()[0])
        abort(); /* every refusal says why */
}

/* The trainer's step alone: refused with a message and nothing made, or
 * a step that takes a batch of up to its planned rows (zeros: the values
 * matter less here than the configuration). */
static void train_one_step(const ug_trainer_config *c)
{
    ug_train_step *step = NULL;
    ug_status st = ug_train_step_create(device, FEATURES, 0, linear, NULL, c, &step);
    check_message(st);
    if (st != UG_OK) {
        if (step)
            abort();
        return;
    }
    const int64_t rows = c->batch_size < SAMPLES ? c->batch_size : SAMPLES;
    float x[SAMPLES * FEATURES] = {0};
    int32_t labels[SAMPLES] = {0};
    ug_tensor *tx = NULL, *ty = NULL;
    /* f32 batches: the half precisions' would need converting first */
    if (c->precision == UG_F32 &&
        ug_tensor_from_host(device, UG_F32, 2, (int64_t[]){rows, FEATURES}, x, &tx) == UG_OK &&
        ug_tensor_from_host(device, UG_I32, 1, (int64_t[]){rows}, labels, &ty) == UG_OK)
        check_message(ug_train_step_run(step, tx, ty, true));
    ug_tensor_free(tx);
    ug_tensor_free(ty);
    ug_train_step_free(step);
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t size)
{
    fuzz_input in = {bytes, size, 0};
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = fuzz_int(&in, 4);
    c.batch_size = fuzz_int(&in, 16);
    c.accumulate = (int)fuzz_int(&in, 4);
    c.precision = (ug_dtype)(fuzz_byte(&in) % 6);
    c.optimizer = ug_optimizer_defaults((ug_optim_type)(fuzz_byte(&in) % 3));
    c.optimizer.lr = fuzz_float(&in);
    c.optimizer.schedule = (ug_schedule)(fuzz_byte(&in) % 4);
    c.optimizer.step_size = fuzz_int(&in, 8);
    c.optimizer.warmup_steps = fuzz_int(&in, 8);
    c.optimizer.total_steps = fuzz_int(&in, 16);
    c.optimizer.max_grad_norm = fuzz_float(&in);
    c.seed = (uint64_t)fuzz_int(&in, 1000);
    c.workers = (int)fuzz_int(&in, 3);
    c.drop_last = fuzz_byte(&in) & 1;
    c.val_split = (double)fuzz_float(&in);
    c.patience = (int)fuzz_int(&in, 3);
    c.top_k = (int)fuzz_int(&in, 4);
    c.confusion = fuzz_byte(&in) & 1;
    c.log_every = fuzz_int(&in, 4);

    train_one_step(&c);
    ug_trainer *t = NULL;
    ug_status st = ug_trainer_create(device, data, NULL, linear, NULL, &c, &t);
    check_message(st);
    if (st != UG_OK) {
        if (t)
            abort(); /* a refusal creates nothing */
        return 0;
    }
    const int64_t batch = ug_trainer_batch_size(t), updates = ug_trainer_epoch_updates(t);
    const float lr = ug_optimizer_current_lr(ug_trainer_optimizer(t));
    if (batch < 1 || batch > SAMPLES || updates < 1 || !isfinite(lr) || lr < 0.0f) {
        fprintf(stderr, "accepted: batch %lld, %lld updates an epoch, learning rate %g\n", (long long)batch,
                (long long)updates, (double)lr);
        abort();
    }
    if (c.epochs <= 3) {
        ug_trainer_metrics m;
        check_message(ug_trainer_fit(t));
        check_message(ug_trainer_evaluate(t, data, &m));
    }
    ug_trainer_free(t);
    return 0;
}
