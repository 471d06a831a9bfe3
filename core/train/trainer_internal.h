/* The trainer's parts (include/unigrad/trainer.h), shared by its files:
 * trainer.c (creating a run, evaluating), trainer_tokens.c (a run on token
 * sets: its samplers and evaluations), trainer_fit.c (the epochs, or a
 * token run's steps), trainer_state.c (what a checkpoint keeps beyond the
 * parts, and resuming) and metrics.c (the sums a graph keeps for its
 * metrics). */
#ifndef UG_CORE_TRAIN_TRAINER_INTERNAL_H
#define UG_CORE_TRAIN_TRAINER_INTERNAL_H

#include "unigrad/checkpoint.h"
#include "unigrad/device.h"
#include "unigrad/pipeline.h"
#include "unigrad/trainer.h"

/* A graph built by the caller's function, with the trainer's sums. */
typedef struct trainer_graph {
    ug_graph *graph;
    ug_pipeline *pipeline;        /* a stage's (config.stages), or NULL */
    ug_value *x, *y, *loss, *logits;
    ug_value *class_ids;          /* input [1, classes]: 0 .. classes-1 (top-k, confusion) */
    ug_tensor *class_ids_tensor;
    ug_value *loss_sum;           /* the samples' losses */
    ug_value *correct_sum;        /* samples whose largest logit is at the label */
    ug_value *top_k_sum;          /* samples whose label is among the k largest logits */
    ug_value *confusion_sum;      /* [classes, classes] counts, true label by prediction */
    int32_t classes;
    int64_t row_labels;           /* labels a row of y: 1, or a token run's block_size */
    /* The caller's metrics: their values, names (copied) and sums. */
    int metric_count;
    ug_value *metric_values[UG_TRAINER_MAX_METRICS];
    char *metric_names[UG_TRAINER_MAX_METRICS];
    ug_value *metric_sums[UG_TRAINER_MAX_METRICS];
} trainer_graph;

/* With comm: each replica's share of the global batch (trainer_balance.c). */
enum { TRAINER_MAX_REPLICAS = 64 }; /* the loader's shards */
typedef struct trainer_balance {
    int replicas;
    double shares[TRAINER_MAX_REPLICAS]; /* summing to 1 */
    bool measuring;               /* the ranks' devices differ, and the rounds are not over */
    int updates, rounds;
    int64_t rows;                 /* this rank's, over the round so far */
    double seconds;
} trainer_balance;

typedef struct trainer_replicas trainer_replicas;

struct ug_trainer {
    ug_trainer_config config;     /* checkpoint and resume point into paths below */
    /* config.devices' or config.stages' other ranks (trainer_replicas.c),
     * on rank 0's trainer; NULL on the others and without either. */
    trainer_replicas *replicas;
    /* config.stages: this stage's rank of the stages' group, and on the
     * other stages' trainers, the group whose stage 0 they follow. */
    ug_comm *stage_comm;
    trainer_replicas *following;
    char *checkpoint_path, *resume_path;
    ug_trainer_build_fn build;
    void *user;
    ug_device *device;
    ug_model *model;
    ug_optimizer *optimizer;
    trainer_graph train, eval;
    ug_loader *train_loader, *val_loader;
    ug_loader_config loader_config;
    /* A token run (ug_trainer_create_tokens): the sets, kept, and their
     * samplers; NULL otherwise. features is then block_size. */
    ug_tokens *train_tokens, *val_tokens;
    bool token_windows; /* x and y are ids [rows, block_size]: a token run, or a step made for one */
    /* The graphs' compute precision: config.precision where the device has
     * native arithmetic for it, else f32 (trainer_compute_precision). */
    ug_dtype compute;
    ug_token_sampler *train_sampler, *val_sampler;
    int64_t report_samples;       /* token runs: this rank's windows since the last report */
    int64_t report_batch;         /* token runs: global_batch at the last report (0: none yet) */
    int64_t features, target_width, batch, epoch_updates, total_updates;
    bool batch_searched;
    ug_trainer_batch_plan batch_plan;
    ug_checkpoint *checkpoint;
    /* Early stopping, and the best weights on the host. */
    double best_val_loss;
    int64_t best_epoch, bad_epochs;
    int best_count;
    float **best_values;
    size_t *best_bytes;
    int pending;                  /* micro-batches accumulated, not yet applied */
    int64_t global_batch;
    float last_lr;            /* the last batch's learning rate */
    ug_tensor *stop_flag;     /* with comm: the ranks agree on stopping through it */
    bool mixed_backends;      /* with comm: replicas of several backends, resynced after each update */
    trainer_balance balance;
    bool stopped;
    bool fitting;                 /* inside ug_trainer_fit: a callback may not fit again */
    bool last_save_failed;
    char save_error[512];         /* since the last epoch report; "" when none */
    int64_t *confusion;           /* the last evaluation's matrix */
};

/* A step (ug_train_step) is a trainer's training half: the structure of
 * a trainer holding only the model, the optimizer and the training graph,
 * created by ug_train_step_create (trainer.c) and stepped by the function
 * fit steps its batches with (trainer_fit.c). */
struct ug_train_step {
    ug_trainer *trainer;
};

/* The data a run is opened on: data sets or token sets. */
typedef struct trainer_sources {
    const ug_dataset *train, *validation;
    const ug_tokens *train_tokens, *val_tokens;
} trainer_sources;
/* Creates a trainer on sources: the configuration's checks, the run opened
 * (trainer.c's data sets, trainer_open_tokens's token sets), the resume,
 * the replicas made alike. op names the public call in messages. */
/* trainer_replicas.c: config.devices' group, rank 0's trainer returned;
 * fit with rank 0's fit function; the group ended after rank 0's trainer
 * is freed. */
ug_status trainer_replicas_create(const char *op, ug_device *device, const trainer_sources *sources,
                                  ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                  ug_trainer **out);
ug_status trainer_replicas_fit(ug_trainer *t, ug_status (*fit)(ug_trainer *t));
void trainer_replicas_free(trainer_replicas *g);
/* Stages (config.stages): where stage 0 calls back, the others wait for
 * what its callbacks ask of them (an evaluation, the loss) until it goes
 * on; stage 0 says it goes on. Nothing on other trainers. */
ug_status trainer_stage_callbacks_done(ug_trainer *t);
/* On stage 0: the other stages evaluate data or tokens with it
 * (ug_trainer_evaluate, ug_trainer_evaluate_tokens), or the last one sends
 * it the last training batch's loss. */
ug_status trainer_stages_evaluate(ug_trainer *t, const ug_dataset *data, const ug_tokens *tokens);
ug_status trainer_stages_last_loss(ug_trainer *t, float *loss);

/* stage_comm: this trainer is a pipeline stage of that group (config.stages). */
ug_status trainer_create(const char *op, ug_device *device, const trainer_sources *sources,
                         ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                         ug_comm *stage_comm, ug_trainer **out);
/* A stage's micro-batches of each training batch (config.micro_batches,
 * or two per stage; at most the batch's rows). */
int trainer_micro_batches(const ug_trainer *t);
/* Whether this trainer is the last stage of its pipeline (or has none). */
static inline bool trainer_holds_loss(const ug_trainer *t)
{
    return !t->stage_comm || ug_comm_rank(t->stage_comm) == ug_comm_size(t->stage_comm) - 1;
}
/* trainer_tokens.c: opens a token run (the model, optimizer, graphs and
 * samplers), and evaluates a sampler's fixed evaluation batches. */
ug_status trainer_open_tokens(ug_trainer *t, const ug_tokens *train, const ug_tokens *validation);
ug_status trainer_evaluate_sampler(ug_trainer *t, ug_token_sampler *sampler, ug_trainer_metrics *out);
/* The optimizer of the configuration (cosine over the run's updates, a
 * step schedule in epochs, loss scaling for f16); epoch_updates 0 plans
 * only (constant schedule). */
ug_status trainer_make_optimizer(ug_trainer *t, int64_t epoch_updates);
/* Compiles a built graph (with the optimizer for training). */
ug_status trainer_finish_graph(ug_trainer *t, trainer_graph *tg, bool training);

/* Builds graph g of the run for batches of rows: inputs, the caller's
 * model, and the metrics' sums (training: loss and accuracy; evaluation:
 * also top-k and the confusion matrix, as configured). */
ug_status trainer_build_graph(ug_trainer *t, int64_t rows, bool training, trainer_graph *out);
void trainer_graph_free(trainer_graph *tg);
/* The metric sums of tg's runs since the last clear, over samples, into
 * out (confusion into t->confusion); then clears them. */
ug_status trainer_read_metrics(ug_trainer *t, trainer_graph *tg, int64_t samples, bool evaluation,
                               ug_trainer_metrics *out);
ug_status trainer_add_metrics(ug_trainer *t, trainer_graph *tg, const ug_trainer_outputs *outputs,
                              bool evaluation);
/* One batch forward through the evaluation graph (a stage's: its part). */
ug_status trainer_eval_batch(ug_trainer *t, const ug_tensor *x, const ug_tensor *y);
/* Runs loader's next epoch through the evaluation graph. */
ug_status trainer_evaluate_loader(ug_trainer *t, ug_loader *loader, ug_trainer_metrics *out);
/* Sets denormal flushing as the configuration asks (keep_denormals);
 * returns the setting before, for ug_set_flush_denormal to restore. */
static inline bool trainer_denormals_begin(const ug_trainer *t)
{
    bool before = ug_flush_denormal();
    ug_set_flush_denormal(!t->config.keep_denormals);
    return before;
}

/* trainer_balance.c: whether the shares are to be measured (a collective,
 * at create); and after each update, with this rank's rows of the update's
 * last micro-batch, timed by ug_comm_run_backward. */
ug_status trainer_balance_start(ug_trainer *t);
ug_status trainer_balance_after_update(ug_trainer *t, int64_t rows);

/* The configuration a checkpoint keeps, and the check on resuming. */
ug_status trainer_save_state(ug_trainer *t);
ug_status trainer_resume(ug_trainer *t);
/* With comm, a collective: every rank's settings against rank 0's (those
 * a resume must match, the data order, the run's length, the loss
 * scaler), refused on every rank naming the first that differs. */
ug_status trainer_check_replicas(const ug_trainer *t);
/* The best weights: kept on the host, restored, saved beside the checkpoint. */
ug_status trainer_keep_best(ug_trainer *t);
ug_status trainer_restore_best(ug_trainer *t);
void trainer_free_best(ug_trainer *t);

#endif
