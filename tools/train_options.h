/* ug-train's command line: the options, their defaults, the parser and
 * --help, all made from one table (train_options.c). */
#ifndef UG_TOOLS_TRAIN_OPTIONS_H
#define UG_TOOLS_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mlp.h"

typedef struct train_options {
    const char *device;       /* NULL: auto (UG_DEVICE overrides); may hold {local_rank} under mpirun */
    const char *devices;      /* --devices: a comma-separated list of replicas; NULL: --device alone */
    bool shard_optimizer;     /* --shard-optimizer: the optimizer's state sharded over the replicas */
    const char *stages;       /* --stages: a comma-separated list, a pipeline stage on each; NULL: none */
    int micro_batches;        /* --micro-batches: each batch's parts through the stages; 0: two per stage */
    const char *data_dir;
    const char *train_images, *train_labels, *test_images, *test_labels; /* NULL: in data_dir */
    const char *csv;
    const char *tensorboard;  /* --tensorboard's folder; NULL: none */
    const char *plot;         /* --plot's PNG; NULL: none */
    const char *profile;      /* --profile's trace file; NULL: none */
    int64_t profile_skip, profile_steps;
    /* Checkpoints (train_checkpoint.c). */
    const char *save;         /* NULL: none */
    int64_t save_every;       /* updates between saves; 0: at each epoch's end */
    int save_every_epochs;    /* with save_every 0: epochs between saves */
    int keep;                 /* files kept: save, save.1, ... */
    const char *resume;       /* NULL: a fresh run */
    bool resume_override;     /* resume although options change the run's schedule or numbers */
    float val_split;          /* fraction of the training set held out; 0: none */
    int patience;             /* epochs without a better validation loss before stopping; 0: never */
    int epochs;
    int64_t batch;            /* 0: auto, the largest that fits */
    int accumulate;           /* batches per optimizer update */
    int workers;              /* the loaders' background threads */
    bool device_convert;      /* batches uploaded as bytes, converted on the device */
    int crop_padding;         /* augmentation: random crops of the zero-padded image; 0: none */
    float flip;               /* augmentation: the probability of a left-right flip */
    uint64_t seed;
    bool quiet, standardize;
    bool keep_denormals;      /* IEEE denormals on the CPU instead of flushing them */
    /* Optimizer and schedule. Choices are ints until train_options_parse
     * returns: optimizer a ug_optim_type, schedule a ug_schedule. */
    int optimizer;
    float lr, momentum;
    float weight_decay;       /* < 0: the optimizer's default */
    float max_grad_norm;      /* 0: no clipping */
    int schedule;             /* < 0 while parsing: the model's default */
    int64_t step_size;        /* step schedule: updates per decay; 0: one epoch's */
    float gamma;              /* step schedule: the factor */
    int64_t warmup;           /* cosine schedule: warm-up updates */
    /* The model. The parser fills model's cnn, activation and dropout from
     * these once all options are read. */
    int model_kind;           /* 0 mlp, 1 cnn */
    int activation;           /* mlp_activation */
    float dropout;            /* < 0 while parsing: the model's default */
    mlp_config model;         /* inputs are set from the data */
} train_options;

/* The header of --csv's log (written by train_report.c, described by --help). */
#define TRAIN_CSV_COLUMNS                                                                                  \
    "kind,epoch,step,train_loss,val_loss,test_loss,test_accuracy,lr,samples_per_s,global_step,train_accuracy," \
    "val_accuracy"

enum {
    TRAIN_OPTIONS_OK = 0,
    TRAIN_OPTIONS_HELP = 1,   /* --help was printed: exit 0 */
    TRAIN_OPTIONS_USAGE = 2   /* a usage error was reported on stderr: exit 2 */
};

/* Fills o with every option's default. */
void train_options_defaults(train_options *o);
/* Reads argv into o (defaulted first), accepting --name VALUE and
 * --name=VALUE; then fills in the defaults that depend on other options
 * (the model's dropout and schedule). Errors go to stderr. */
int train_options_parse(int argc, char **argv, train_options *o);
/* Whether arg (one element of argv) is an option naming a file or folder
 * the run writes (--save, --csv, --plot, --tensorboard, --profile): 0 if
 * not; 1 for --name=VALUE, 2 for --name with its value in the next
 * argument. Sets *name to the option's name without "--". */
int train_option_output(const char *arg, const char **name);
/* --help, made from the table. */
void train_options_usage(FILE *to);
/* The trainer's configuration (trainer.h) the options give, once
 * model.inputs is known (the data's): all but the callbacks, the stop flag
 * and the communicator, which are the run's. */
ug_trainer_config train_options_trainer_config(const train_options *o);

#endif
