/* libFuzzer harness for the optimizer's configuration and restored state
 * (structure-aware: the bytes decode into a ug_optimizer_config, a step
 * count and loss-scaler state). Whatever the values, every call returns a
 * status with a message, never crashes, leaks or overflows (ASan/UBSan);
 * and an accepted configuration's learning rate is finite and >= 0 at
 * any step count it accepts: the schedule can never produce garbage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_input.h"
#include "unigrad/unigrad.h"

static ug_device *device;
static ug_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    ug_tensor *p = NULL;
    if (ug_device_open("cpu", &device) != UG_OK || ug_model_create(device, 1, &model) != UG_OK ||
        ug_model_param(model, "w", 1, (int64_t[]){4}, UG_INIT_UNIFORM, 1.0f, &p) != UG_OK)
        abort();
    return 0;
}

static void check_message(ug_status st)
{
    if (st != UG_OK && !ug_last_error()[0])
        abort(); /* every refusal says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size, 0};
    ug_optimizer_config c = ug_optimizer_defaults((ug_optim_type)(fuzz_byte(&in) % 4));
    c.type = (ug_optim_type)(fuzz_byte(&in) % 4);
    float *floats[] = {&c.lr, &c.weight_decay, &c.momentum, &c.dampening, &c.beta1, &c.beta2, &c.eps,
                       &c.gamma, &c.min_lr, &c.max_grad_norm, &c.loss_scaling.init_scale,
                       &c.loss_scaling.growth_factor, &c.loss_scaling.backoff_factor};
    uint8_t which = fuzz_byte(&in); /* which floats take fuzzed values, the rest their defaults */
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++)
        if (which & (1u << (i % 8)))
            *floats[i] = fuzz_float(&in);
    c.nesterov = fuzz_byte(&in) & 1;
    c.schedule = (ug_schedule)(fuzz_byte(&in) % 4);
    c.step_size = fuzz_int(&in, 100);
    c.warmup_steps = fuzz_int(&in, 100);
    c.total_steps = fuzz_int(&in, 1000);
    c.loss_scaling.enabled = fuzz_byte(&in) & 1;
    c.loss_scaling.growth_interval = fuzz_int(&in, 5000);

    ug_optimizer *opt = NULL;
    ug_status st = ug_optimizer_create(model, &c, &opt);
    check_message(st);
    if (st != UG_OK)
        return 0;
    for (int k = 0; k < 4; k++) {
        int64_t steps = fuzz_int(&in, 100000);
        st = ug_optimizer_set_steps(opt, steps);
        check_message(st);
        float lr = ug_optimizer_current_lr(opt);
        if (!isfinite(lr) || lr < 0.0f) {
            fprintf(stderr, "learning rate %g at step %lld\n", (double)lr, (long long)ug_optimizer_steps(opt));
            abort();
        }
        ug_loss_scaler_state s = {.scale = fuzz_float(&in), .clean_steps = fuzz_int(&in, 3000),
                                  .skipped_steps = fuzz_int(&in, 100)};
        check_message(ug_optimizer_set_loss_scaler(opt, &s));
        ug_loss_scaler_state back;
        if (c.loss_scaling.enabled && ug_optimizer_loss_scaler(opt, &back) == UG_OK &&
            (!(back.scale >= 1.17549435e-38f) || !isfinite(back.scale)))
            abort(); /* the scale stays a normal f32 */
    }
    ug_optimizer_free(opt);
    return 0;
}
