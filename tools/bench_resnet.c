/* ug-bench resnet: the training step of examples/resnet.c's ResNet-20
 * (tools/resnet_model.h) on 32x32 RGB images at batch 64 (SGD with
 * momentum 0.9 and weight decay 5e-4 on the weights, the cosine schedule)
 * per device on 16 batches of random images, beside PyTorch's
 * (tools/torch_resnet.py) as bench_model.h times them. */
#include <stdlib.h>

#include "bench_model.h"
#include "resnet_model.h"

#ifndef UG_BENCH_TORCH_RESNET
#define UG_BENCH_TORCH_RESNET "tools/torch_resnet.py"
#endif

enum { BATCH = 64, CHANNELS = 3, SIDE = 32, PIXELS = CHANNELS * SIDE * SIDE };

/* examples/resnet.c's settings, for 1000 steps. */
static ug_status make_step(ug_device *device, bench_model_step *s)
{
    resnet_config model = {CHANNELS, SIDE}; /* read while the step is made only */
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = BATCH;
    c.optimizer = (ug_optimizer_config){.type = UG_SGD, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f,
                                        .schedule = UG_SCHEDULE_COSINE, .total_steps = 1000};
    *s = (bench_model_step){.device = device};
    ug_status st = ug_optimizer_decay_matrices_only(&c.optimizer);
    if (st == UG_OK)
        st = ug_train_step_create(device, PIXELS, 0, resnet20_build, &model, &c, &s->step);
    const int64_t xs[2] = {BATCH, PIXELS}, ys[1] = {BATCH};
    float *x = malloc(sizeof *x * PIXELS * BATCH);
    int32_t labels[BATCH];
    if (st == UG_OK && !x)
        st = UG_ERR_OUT_OF_MEMORY;
    uint32_t draw = 12345;
    for (int b = 0; b < BENCH_MODEL_BATCHES && st == UG_OK; b++) {
        for (int i = 0; i < PIXELS * BATCH; i++) { /* standardised pixels: about [-2, 2] */
            draw = draw * 1664525u + 1013904223u;
            x[i] = (float)(draw >> 8) / 16777216.0f * 4.0f - 2.0f;
        }
        for (int i = 0; i < BATCH; i++)
            labels[i] = (int32_t)((draw >> (i % 24)) % 10);
        st = ug_tensor_from_host(device, UG_F32, 2, xs, x, &s->x[b]);
        if (st == UG_OK)
            st = ug_tensor_from_host(device, UG_I32, 1, ys, labels, &s->y[b]);
    }
    free(x);
    return st;
}

int bench_resnet(int argc, char **argv)
{
    const bench_model resnet = {
        .command = "resnet",
        .usage = "Times the training step of examples/resnet.c's ResNet-20 on 32x32 RGB images\n"
                 "at batch 64 (SGD, momentum 0.9, weight decay 5e-4 on the weights, cosine) on\n"
                 "each device, or the one named, in N rounds (default 3) of about S seconds\n"
                 "(default 2) each device in turn: ms per iteration, images/s, the plan's and\n"
                 "the pool's peak memory, and each device against the cpu. After the cpu in\n"
                 "each round, PyTorch's same step (" UG_BENCH_TORCH_RESNET ")\n"
                 "with 1 and 2 threads, where PATH (default /usr/bin/python3) has torch;\n"
                 "--no-torch skips it.\n",
        .header = "ug-bench resnet: examples/resnet.c's ResNet-20, 32x32 RGB images, batch 64,\n"
                  "  SGD with momentum and weight decay\n",
        .rate = "images/s",
        .samples = BATCH,
        .torch_script = UG_BENCH_TORCH_RESNET,
        .make = make_step,
    };
    return bench_model_run(&resnet, argc, argv);
}
