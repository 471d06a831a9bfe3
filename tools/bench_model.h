/* ug-bench gpt and ug-bench resnet: a model's training step as the
 * trainer takes it (ug_train_step), on batches kept on the device, timed
 * on each device in rounds that take turns, each device against the cpu;
 * after the cpu in each round, PyTorch's same step (a script of tools/, in
 * a process of its own with 1 and with 2 threads) where the python has
 * torch, and the cpu against its best. */
#ifndef UG_TOOLS_BENCH_MODEL_H
#define UG_TOOLS_BENCH_MODEL_H

#include "bench.h"

enum { BENCH_MODEL_BATCHES = 16 };

/* A device's step and the batches it cycles through. */
typedef struct bench_model_step {
    ug_device *device;
    ug_train_step *step;
    ug_tensor *x[BENCH_MODEL_BATCHES], *y[BENCH_MODEL_BATCHES];
    int next;
} bench_model_step;

typedef struct bench_model {
    const char *command;      /* "gpt": in messages */
    const char *usage;        /* the usage's lines after the options line */
    const char *header;       /* the lines the report starts with */
    const char *rate;         /* the rate's column: "tokens/s" */
    double samples;           /* what the rate counts, a step's */
    const char *torch_script; /* PyTorch's step: THREADS SECONDS in, "VERSION MS" out */
    /* The step and its batches on device, into s (device set). */
    ug_status (*make)(ug_device *device, bench_model_step *s);
    /* After the timings, on the first device; NULL: nothing. */
    ug_status (*after)(ug_device *device);
} bench_model;

/* Parses the options (--device, --seconds, --rounds, --python,
 * --no-torch, --help) and runs the bench; the exit status. */
int bench_model_run(const bench_model *model, int argc, char **argv);

#endif
