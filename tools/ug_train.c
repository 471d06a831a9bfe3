/* ug-train: trains an MLP (or small CNN) classifier on IDX data
 * (Fashion-MNIST by default) on any device through the library's trainer
 * (trainer.h), with a progress display, per-epoch test accuracy,
 * validation and early stopping, checkpoints that resume exactly, and an
 * optional CSV log. The options and the trainer's configuration from them
 * are in train_options.c, the data in train_data.c, the printed lines and
 * the log's rows in train_report.c, the log's file and --plot in
 * train_log.c, the progress display in train_progress.c, the saved options
 * and Ctrl-C in train_checkpoint.c, --profile in train_profile.c. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_checkpoint.h"
#include "train_data.h"
#include "train_log.h"
#include "train_profile.h"
#include "train_progress.h"
#include "train_replicas.h"
#include "train_report.h"
#include "wrap.h"

/* Everything a run holds, freed by run_free. */
typedef struct run {
    train_options o;
    char *args;               /* the options, for the checkpoints */
    train_data data;
    ug_device *dev;
    ug_comm *comm;            /* data parallel: this thread's rank */
    train_replicas replicas;
    ug_trainer *trainer;
    train_log log;            /* --csv's, or a temporary one for --plot */
    ug_tensorboard *tensorboard;
    train_progress bar;
    train_profile profile;
    /* Where training stands, for the progress display and the messages. */
    int64_t epoch;            /* the epoch under way, from 1 */
    int64_t step, samples, global_step; /* its last batch (from 1), its samples, the run's batches */
    float loss, lr;           /* the last loss read, the last batch's learning rate */
    double first_step_seconds;
} run;

/* The run whose progress line an error message ends first. */
static run *shown;

static int fail(const char *what)
{
    if (shown)
        progress_break(&shown->bar);
    fprintf(stderr, "ug-train: %s: %s\n", what, ug_last_error());
    return 1;
}

/* After each batch: the progress line and the CSV row, reading the loss
 * (a wait for the device) only when one of them shows it. */
static ug_status on_step(const ug_trainer_step *s, void *user)
{
    run *r = user;
    if (s->epoch + 1 != r->epoch || r->step == 0) {
        r->epoch = s->epoch + 1;
        progress_start_epoch(&r->bar, (int)r->epoch, r->o.epochs, s->batches);
    }
    r->step = s->batch + 1;
    r->samples = s->samples;
    r->global_step = s->global_batch;
    r->lr = s->lr;
    r->loss = s->loss;
    const bool show = progress_due(&r->bar, r->step);
    /* The run's first step is waited for once, to report the start-up time. */
    const bool first = s->global_batch == 1 && r->first_step_seconds < 0;
    if (isnan(r->loss) && (r->log.file || r->tensorboard || show || first))
        TRY(ug_trainer_last_loss(r->trainer, &r->loss));
    if (first)
        r->first_step_seconds = seconds_since_process_start();
    if (r->log.file)
        csv_step(r->log.file, s, r->loss);
    if (r->tensorboard) {
        ug_trainer_step read = *s;
        read.loss = r->loss;
        TRY(ug_tensorboard_on_step(&read, r->tensorboard));
    }
    if (show)
        progress_show(&r->bar, r->step, s->samples, r->loss);
    TRY(train_profile_step(&r->profile, s->global_batch, s->batches * r->o.epochs));
    if (train_profile_ready(&r->profile)) {
        progress_break(&r->bar);
        TRY(train_profile_report(&r->profile));
    }
    return UG_OK;
}

/* After each epoch (and its checkpoint): the test set's figures. */
static ug_status on_epoch(const ug_trainer_epoch *e, void *user)
{
    run *r = user;
    progress_end_epoch(&r->bar, r->step, r->samples, r->loss);
    if (e->save_error)
        fprintf(stderr, "ug-train: warning: the checkpoint was not saved (training goes on): %s\n", e->save_error);
    ug_trainer_metrics test;
    TRY(ug_trainer_evaluate(r->trainer, r->data.test, &test));
    report_epoch(r->trainer, e, &test);
    replicas_report_shares(&r->replicas, e);
    if (r->first_step_seconds >= 0 && e->epoch == 0)
        printf("first step finished %.2f s after the process started\n", r->first_step_seconds);
    if (r->log.file)
        csv_epoch(r->log.file, e, &test, r->step, r->global_step, r->lr);
    if (r->o.plot)
        train_log_plot(&r->log, r->o.plot, ug_device_name(r->dev));
    if (r->tensorboard) {
        TRY(ug_tensorboard_scalar(r->tensorboard, "epoch/test_loss", e->global_batch, test.loss));
        TRY(ug_tensorboard_scalar(r->tensorboard, "epoch/test_accuracy", e->global_batch, 100.0 * test.accuracy));
        TRY(ug_tensorboard_on_epoch(e, r->tensorboard));
    }
    fflush(stdout);
    r->epoch = e->epoch + 2; /* a stop now is at the next epoch's start */
    r->step = 0;
    return UG_OK;
}

/* The trainer's configuration: the options', and the run's callbacks. */
static ug_trainer_config trainer_config(run *r)
{
    ug_trainer_config c = train_options_trainer_config(&r->o);
    c.log_every = 0; /* on_step reads the loss when it shows it */
    c.stop = &train_interrupt_signal;
    c.on_step = on_step;
    c.on_epoch = on_epoch;
    c.user = r;
    c.comm = r->comm;
    return c;
}

/* --stages: the model's layers spread over them (the library makes the
 * stages; under mpirun, each process a pipeline of them, the replicas of
 * a data-parallel run); r->dev is the first stage's device. */
static int open_stages(run *r)
{
    int count = 1;
    for (const char *p = r->o.stages; *p; p++)
        count += *p == ',';
    const int most = mlp_max_stages(&r->o.model);
    if (r->o.devices || count < 2 || count > most) {
        fprintf(stderr, "ug-train: --stages %s: %s\n", r->o.stages,
                r->o.devices ? "replicas of a pipeline are processes: run under mpirun, each process the stages "
                               "(--devices lists replicas of one device each)"
                : count < 2 ? "a pipeline needs two stages or more"
                            : "more stages than the model has parts to split (its layers; the CNN's 4)");
        return 1;
    }
    r->o.model.stages = count;
    return 0;
}

/* The trainer for the options, resumed with --resume. */
static int open_run(run *r)
{
    if (replicas_open(&r->o, &r->replicas, &r->dev, &r->comm))
        return 1;
    if (r->comm && !r->o.batch) {
        fprintf(stderr, "ug-train: give --batch-size: the largest batch that fits is not searched across "
                        "replicas\n");
        return 1;
    }
    if (r->o.shard_optimizer && !r->comm) {
        fprintf(stderr, "ug-train: --shard-optimizer shards over replicas: give --devices LIST, or run under "
                        "mpirun\n");
        return 1;
    }
    r->o.model.inputs = ug_dataset_features(r->data.train);
    if (r->o.stages && open_stages(r) != 0)
        return 1;
    const ug_trainer_config c = trainer_config(r);
    replicas_start(&r->replicas, &c, &r->data, &r->o.model); /* the others create theirs alongside */
    /* With stages the library opens their devices (the first is r->dev's). */
    if (ug_trainer_create(r->o.stages ? NULL : r->dev, r->data.train, r->data.val, mlp_forward, &r->o.model, &c,
                          &r->trainer) == UG_OK)
        return ug_checkpoint_set_string(ug_trainer_checkpoint(r->trainer), TRAIN_ARGS_KEY, r->args) == UG_OK
                   ? 0
                   : fail("preparing checkpoints");
    /* The library names its settings; here they are options. */
    const bool unscaled = strstr(ug_last_error(), "saved without loss scaling") != NULL;
    const bool changed = strstr(ug_last_error(), "resume_override") != NULL;
    fail(r->o.resume ? "resuming" : "preparing the run");
    if (unscaled)
        fprintf(stderr, "ug-train: --resume %s: the run was saved without --precision f16 (no loss scaling); "
                        "resume it in its own precision, or start a new run in f16\n", r->o.resume);
    if (changed)
        fprintf(stderr, "ug-train: --resume %s: an option given now changes the saved run; add "
                        "--resume-override to continue with it\n", r->o.resume);
    return 1;
}

/* After fit: an interruption (exit status 128 + the signal, as the
 * shell's), or early stopping's restored weights. */
static int finish(run *r, ug_status fitted)
{
    const train_options *o = &r->o;
    progress_break(&r->bar);
    if (ug_trainer_stopped(r->trainer)) {
        printf("interrupted at epoch %lld, step %lld; ", (long long)r->epoch, (long long)r->step);
        if (!o->save)
            printf("nothing saved (no --save)\n");
        else if (fitted != UG_OK)
            printf("the checkpoint could not be saved: %s\n", ug_last_error());
        else
            printf("saved to %s\nresume with: ug-train --resume %s%s%s%s%s%s%s\n", o->save, o->save,
                   o->csv ? " --csv " : "", o->csv ? o->csv : "", o->plot ? " --plot " : "", o->plot ? o->plot : "",
                   o->tensorboard ? " --tensorboard " : "", o->tensorboard ? o->tensorboard : "");
        return 128 + train_interrupt_signal;
    }
    if (fitted != UG_OK)
        return fail("training");
    if (train_profile_report(&r->profile) != UG_OK)
        return fail("writing the profile");
    double best_loss = 0.0;
    const int64_t best = ug_trainer_best_epoch(r->trainer, &best_loss);
    if (!o->patience || best < 0)
        return 0;
    if (ug_trainer_epochs_done(r->trainer) < o->epochs)
        printf("no lower validation loss for %d epochs: stopping\n", o->patience);
    ug_trainer_metrics test;
    if (ug_trainer_evaluate(r->trainer, r->data.test, &test) != UG_OK)
        return fail("evaluating the restored weights");
    printf("restored the weights of epoch %lld (validation loss %.4f)\n  test loss %.4f, test accuracy %.2f%%\n",
           (long long)best + 1, best_loss, test.loss, 100.0 * test.accuracy);
    if (o->save)
        printf("they are saved in %s.best\n", o->save);
    return 0;
}

static void print_warning(const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "ug-train: warning: %s\n", message);
}

int main(int argc, char **argv)
{
    ug_set_warning_handler(print_warning, NULL);
    run r = {.first_step_seconds = -1};
    char **args = NULL; /* a resumed run's: r.o points into them */
    int rc = train_read_options(argc, argv, &r.o, &r.args, &args);
    if (rc) {
        free(args);
        return rc == TRAIN_OPTIONS_HELP ? 0 : rc == TRAIN_OPTIONS_USAGE ? 2 : 1;
    }
    const struct {
        const char *option, *path;
    } outputs[] = {{"save", r.o.save}, {"profile", r.o.profile}, {"plot", r.o.plot}};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (!rc && outputs[i].path && !train_check_output_file(outputs[i].option, outputs[i].path))
            rc = 1;
    if (!rc)
        rc = train_data_load(&r.o, &r.data);
    if (!rc)
        rc = open_run(&r);
    if (!rc)
        rc = train_log_open(&r.o, &r.log);
    if (!rc && r.o.tensorboard && ug_tensorboard_open(r.o.tensorboard, &r.tensorboard) != UG_OK)
        rc = fail("opening the TensorBoard log");
    r.profile = (train_profile){.path = r.o.profile, .skip = r.o.profile_skip, .steps = r.o.profile_steps,
                                .device = r.dev};
    if (!rc) {
        report_header(&r.o, r.trainer, r.dev, &r.data);
        if (r.comm) {
            char replicas[256], line[400];
            replicas_describe(&r.replicas, replicas, sizeof replicas);
            snprintf(line, sizeof line, "%s; each takes its part of every batch of %lld", replicas,
                     (long long)r.o.batch);
            print_wrapped(stdout, "data parallel: ", line);
        }
        if (r.o.stages) {
            char stages[640];
            snprintf(stages, sizeof stages, "%d stages on %s, the layers spread over them; each batch in %d "
                     "micro-batches (1F1B)", r.o.model.stages, r.o.stages,
                     r.o.micro_batches ? r.o.micro_batches : 2 * r.o.model.stages);
            print_wrapped(stdout, "pipeline: ", stages);
        }
        progress_init(&r.bar, r.o.quiet);
        if (r.comm) /* samples/s counts every replica's samples, as the epoch's line */
            progress_set_global(&r.bar, ug_trainer_batch_size(r.trainer), ug_dataset_count(r.data.train));
        shown = &r;
        train_catch_interrupts();
        rc = finish(&r, ug_trainer_fit(r.trainer));
        shown = NULL;
    }
    if (ug_tensorboard_close(r.tensorboard) != UG_OK)
        rc = rc ? rc : fail("writing the TensorBoard log");
    if (train_log_close(&r.log))
        rc = rc ? rc : 1;
    train_profile_free(&r.profile);
    ug_trainer_free(r.trainer);
    ug_comm_free(r.comm); /* after a failure, the other replicas return at once */
    if (replicas_finish(&r.replicas))
        rc = rc ? rc : 1;
    ug_device_close(r.dev);
    train_data_free(&r.data);
    free(r.args);
    free(args);
    return rc;
}
