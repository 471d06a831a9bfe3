/* A training loop: the caller builds the model's graph, the trainer runs
 * the epochs (of a data set) or the steps (of a token set).
 *
 *   static ug_status build(ug_graph *g, ug_value *x, ug_value *y, void *user,
 *                          ug_trainer_outputs *out)
 *   {
 *       ug_value *h;
 *       ug_nn_linear(g, "fc1", x, 500, &h);  ug_g_relu(g, h, &h);
 *       ug_nn_linear(g, "fc2", h, 10, &out->logits);
 *       return ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss);
 *   }
 *   ug_trainer_config c = ug_trainer_defaults();
 *   c.epochs = 10;  c.val_split = 0.1;  c.checkpoint = "run.safetensors";
 *   ug_trainer_create(device, train_set, NULL, build, NULL, &c, &t);
 *   ug_trainer_fit(t);
 *   ug_trainer_evaluate(t, test_set, &metrics);
 *
 * A language model trains on token sets (tokens.h) for a number of
 * updates, each on B random windows of T tokens, as nanoGPT does:
 *
 *   static ug_status build(ug_graph *g, ug_value *x, ug_value *y, void *user,
 *                          ug_trainer_outputs *out)
 *   {                            // x, y: i32 [rows, T], y the next tokens
 *       ug_value *h;
 *       ug_nn_embedding(g, "wte", x, vocab, 64, 0.02f, &h);
 *       ... ug_nn_linear(g, "head", h, vocab, &out->logits);  // [rows, T, vocab]
 *       return ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss);
 *   }
 *   c.batch_size = 12;  c.block_size = 64;  c.max_steps = 2000;
 *   c.eval_every = 250;  c.eval_iters = 20;
 *   ug_trainer_create_tokens(device, train_tokens, val_tokens, build, NULL, &c, &t);
 *   ug_trainer_fit(t);   // on_epoch at every evaluation: val loss, perplexity
 *
 * Who owns what. The trainer owns the model (created on the device with
 * the config's seed), the optimizer, two graphs built by the caller's
 * function (training, with backward and the update; evaluation, forward
 * only, sharing the parameters), the loaders (or token samplers) and the
 * checkpoint. It keeps the data sets or token sets it was given (they may
 * be freed after create). The caller
 * owns the device, the build function's user data and the stop flag.
 *
 * What it does for the caller:
 *   - the schedule counts optimizer updates, ceil(batches / accumulate) per
 *     epoch; a cosine schedule with total_steps 0 decays over the whole
 *     run, and an epoch's leftover micro-batches are applied at its end;
 *   - training and evaluation sums live in different graphs, so neither
 *     disturbs the other;
 *   - checkpoints are saved between updates and, at an epoch's end, after
 *     the next epoch has started, so a resumed run continues exactly (the
 *     same parameters, bit for bit, as an uninterrupted run);
 *   - a checkpoint keeps the whole configuration, and resuming with one
 *     that would change the schedule or the numerics is refused, naming the
 *     field, unless resume_override is set;
 *   - early stopping on the validation loss restores the best weights at
 *     the end (and keeps them in CHECKPOINT.best);
 *   - batch_size 0 picks the largest power of two whose memory plan fits.
 *
 * Threads. Everything, the callbacks included, runs on the thread that
 * calls ug_trainer_fit; the loaders' workers only assemble batches. The
 * stop flag may be set from a signal handler or another thread: fit stops
 * at the next update, saves a checkpoint (when a path is set) and returns
 * UG_OK with ug_trainer_stopped true. */
#ifndef UNIGRAD_TRAINER_H
#define UNIGRAD_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "unigrad/checkpoint.h"
#include "unigrad/comm.h"
#include "unigrad/data.h"
#include "unigrad/graph.h"
#include "unigrad/optim.h"
#include "unigrad/tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_trainer ug_trainer;

enum { UG_TRAINER_MAX_METRICS = 8 };

/* What the build function makes. loss is the batch's mean loss (a
 * scalar): in a token run, the mean cross-entropy over its rows * T
 * tokens. logits [rows, classes], optional: with it the trainer reports
 * accuracy, top-k accuracy and a confusion matrix; in a token run logits
 * [rows, T, vocab] give the accuracy of the next-token predictions. metrics: the caller's
 * own, each a value of one element holding the batch's sum of a
 * per-sample quantity (ug_g_sum over the rows); the trainer adds the sums
 * up on the device and reports each over the samples, as it does the
 * loss. Names are copied. */
typedef struct ug_trainer_outputs {
    ug_value *loss;
    ug_value *logits;
    int metric_count;
    const char *metric_names[UG_TRAINER_MAX_METRICS];
    ug_value *metrics[UG_TRAINER_MAX_METRICS];
} ug_trainer_outputs;

/* Builds the forward pass and the loss from x ([rows, features] in the
 * config's precision) and y (i32 labels [rows], or f32 targets [rows,
 * width]); in a token run, x and y are i32 token ids [rows, block_size],
 * y[r][i] the token after x[r][i]. The first call creates the parameters (ug_nn_*); later calls
 * (the evaluation graph, the batch-size search) find them by name. */
typedef ug_status (*ug_trainer_build_fn)(ug_graph *graph, ug_value *x, ug_value *y, void *user,
                                         ug_trainer_outputs *out);

/* After each training batch. loss is read from the device (a wait) only
 * every log_every batches and at an epoch's last batch; NaN otherwise
 * (ug_trainer_last_loss reads it at the caller's own pace). A token run's
 * "epoch" is the span between evaluations: epoch is the evaluation to
 * come (from 0), batch and batches count the run's micro-batches
 * (max_steps * accumulate), samples the windows since the last
 * evaluation. */
typedef struct ug_trainer_step {
    int64_t epoch;            /* from 0 */
    int64_t batch, batches;   /* this epoch's batch (from 0) and its count */
    int64_t global_batch;     /* batches trained since the run's start, from 1 */
    int64_t updates;          /* optimizer updates done */
    int64_t samples;          /* samples of this epoch so far */
    float loss;
    float lr;                 /* the learning rate this batch's update uses */
    double samples_per_second;
} ug_trainer_step;

/* Evaluation of a data set, or the training figures of an epoch. */
typedef struct ug_trainer_metrics {
    int64_t samples;
    double loss;              /* mean over the samples */
    double accuracy;          /* top-1, in [0, 1]; NaN without logits */
    double top_k_accuracy;    /* with top_k > 0 and logits; else NaN */
    double metrics[UG_TRAINER_MAX_METRICS]; /* the outputs' own, in their order: sum / samples */
    int metric_count;
    const char *const *metric_names;
    int32_t classes;          /* of the confusion matrix, 0 without one */
    /* confusion[true * classes + predicted]: counts; valid until the next
     * evaluation or ug_trainer_free. NULL unless config.confusion. */
    const int64_t *confusion;
    /* exp(loss) and loss / ln 2, the loss being a mean cross-entropy in
     * nats: a language model's perplexity and its bits per token (bits
     * per character with a character vocabulary). NaN with float
     * targets. In a token run, samples are windows of T tokens and
     * accuracy is per token. */
    double perplexity;
    double bits_per_token;
} ug_trainer_metrics;

/* The report of an epoch, or in a token run of an evaluation (every
 * eval_every updates and at the end): epoch is then the evaluation's
 * number from 0, train the training batches since the last one, and
 * validation eval_iters fixed batches of the validation tokens. */
typedef struct ug_trainer_epoch {
    int64_t epoch;            /* from 0 */
    int64_t updates;          /* optimizer updates done */
    int64_t global_batch;     /* batches trained since the run's start */
    float lr;                 /* the learning rate of the epoch's last update */
    ug_trainer_metrics train; /* loss and accuracy of the epoch's batches (no top-k, no matrix) */
    ug_trainer_metrics validation; /* samples 0 without a validation set */
    double seconds;           /* training time of the epoch (not evaluation) */
    double samples_per_second;
    uint64_t memory_in_use, memory_peak; /* the device pool's bytes at the epoch's end, and its peak */
    float loss_scale;         /* the loss scaler's scale (f16); 0 without one */
    int64_t skipped_steps;    /* updates the loss scaler skipped since the run's start */
    /* The replicas (comm's ranks; 1 without comm) and each one's share of
     * the global batch, in rank order, summing to 1: equal, or measured
     * from the replicas' speeds when their devices differ. */
    int replicas;
    const double *shares;
    bool best;                /* the lowest validation loss so far */
    bool saved;               /* a checkpoint was saved after it */
    /* The message of the last checkpoint save that failed since the
     * previous report (training went on; the earlier file is whole);
     * NULL when none did. */
    const char *save_error;
} ug_trainer_epoch;

typedef struct ug_trainer_config {
    int64_t epochs;           /* default 10; a token run has none */
    /* Token runs (ug_trainer_create_tokens), whose length is in updates:
     * max_steps updates (at least 1; 0 with a data set), each of accumulate
     * batches of batch_size windows of block_size tokens; an evaluation of
     * eval_iters batches (default 20) of the validation tokens every
     * eval_every updates (0: at the end only), reported through on_epoch. */
    int64_t max_steps, block_size, eval_every, eval_iters;
    int64_t batch_size;       /* default 64; 0: the largest power of two that fits;
                               * larger than the training set (and no drop_last):
                               * the set's size, one batch an epoch */
    int accumulate;           /* micro-batches per update; default 1 */
    /* f32 (default), f16 (with loss scaling) or bf16: the graphs' compute
     * precision (ug_graph_set_precision) and the features' type, as
     * ug_device_precision has it on the device: f32, said once, where the
     * device has no native arithmetic for the half type. */
    ug_dtype precision;
    /* Type, learning rate, schedule, clipping. total_steps 0 with the cosine
     * schedule: the run's updates; step_size 0 with the step schedule: an
     * epoch's. loss_scaling is set from the precision. */
    ug_optimizer_config optimizer;
    uint64_t seed;            /* initialisation, shuffling, dropout, the split */
    int workers;              /* loader threads; default 1 */
    bool drop_last;           /* drop each epoch's partial batch; default false */
    /* Byte data sets' batches uploaded as bytes and converted on the
     * device (ug_loader_config.device_convert), and the training batches'
     * augmentation there (ug_loader_config.augment; not the evaluations'). */
    bool device_convert;
    ug_image_augment augment;
    /* Validation: the data set given to ug_trainer_create, or this
     * fraction of the training set held out: the part
     * ug_dataset_split(train, val_split, seed, ...) holds out. A program
     * that needs the parts first (to standardise both with the training
     * part's statistics) makes that split itself and gives both. */
    double val_split;
    int patience;             /* stop after this many epochs without a lower validation loss; 0: never */
    int top_k;                /* also top-k accuracy in evaluations; 0: not */
    bool confusion;           /* a confusion matrix in evaluations */
    /* Checkpoints: after every checkpoint_every_epochs epochs (default 1),
     * or every checkpoint_every_updates updates when that is set; the last
     * keep files (PATH, PATH.1, ...). NULL: none. A token run saves at
     * every evaluation instead of every epoch, and at its end. */
    const char *checkpoint;
    int64_t checkpoint_every_epochs, checkpoint_every_updates;
    int keep;
    /* Continue the run saved at resume; its configuration must match this
     * one in every field that changes the schedule or the numbers, unless
     * resume_override (the new values then apply). epochs may grow. */
    const char *resume;
    bool resume_override;
    int64_t log_every;        /* batches between loss reads for on_step; default 50 */
    /* A callback that returns a failed status ends fit with it (return
     * the status of the library call that failed, whose message stays in
     * ug_last_error). Callbacks may call ug_trainer_evaluate and
     * ug_trainer_last_loss. */
    ug_status (*on_step)(const ug_trainer_step *step, void *user);
    ug_status (*on_epoch)(const ug_trainer_epoch *epoch, void *user);
    void *user;
    volatile sig_atomic_t *stop;
    /* Data-parallel training (comm.h): this trainer is one rank, on the
     * communicator's device. Each step it trains on its part of the global
     * batch of batch_size (a sharded loader: the global sequence of batches
     * does not depend on the number of ranks), and the gradients and their
     * rows are summed over the ranks before every update, so each update is
     * one device's on the global batch. The model starts as rank 0's; the
     * training figures are summed over the ranks (evaluations run whole on
     * every rank); dropout masks differ per rank; only rank 0 writes
     * checkpoints. batch_size must be given (the search is not shared).
     * When the ranks' devices differ, each rank's share of the global
     * batch follows its measured speed (its forward and backward, timed
     * over the first updates), so that fast and slow replicas finish each
     * step together; the epoch report gives the shares. NULL: one device. */
    ug_comm *comm;
    /* The same on several devices of this process from one field, as
     * ug-train's --devices: "cpu,opencl:0" (up to 16; device repeats
     * allowed). The library opens them, makes their group and a trainer
     * on each, the first device's on the caller's thread (the trainer
     * returned: pass it NULL or that device), the others' on threads of
     * their own that fit whenever it fits; callbacks, checkpoints and
     * evaluations are the first's. Not with comm. NULL: one device. */
    const char *devices;
    /* Pipeline stages on devices of this process from one field, as
     * ug-train's --stages: "cpu,opencl:0" (2 to 16), stage i on the i-th
     * device, for a model larger than one device. The build function,
     * which builds the whole model as ever, marks where each stage ends
     * (ug_pipeline_boundary, pipeline.h: nothing without stages). The
     * library opens the devices, makes their group and a trainer per
     * stage, stage 0's on the caller's thread (the trainer returned), the
     * others' on threads of their own that follow it: callbacks are stage
     * 0's, and ug_trainer_evaluate(_tokens) and ug_trainer_last_loss work from them
     * (and after fit) as on one device. Each batch is cut into
     * micro_batches (0: two per stage, at most the batch's rows) that flow
     * through the stages in the 1F1B schedule; each update equals one
     * device's accumulating the same micro-batches, and the initial
     * parameters and dropout masks are one device's. A batch with fewer
     * rows than micro-batches (an epoch's last) is skipped. Checkpoints
     * hold the whole model, every stage's part gathered on stage 0 in host
     * memory, so a run resumes on other stages or on one device. With
     * comm, each of its ranks (e.g. a process of mpirun) is such a
     * pipeline, a replica training its part of every batch: each stage's
     * gradients are summed over the pipelines (ug_pipeline_set_replicas),
     * and shard_optimizer shards each stage's state over them. Gradient
     * clipping and f16's loss scaling take the norm of every stage's
     * gradients; with patience every stage keeps its best weights, and
     * CHECKPOINT.best the whole model; every stage's evaluations show the
     * last stage's figures and confusion matrix. Not with devices,
     * accumulate (the micro-batches are the batch's accumulation) or
     * batch_size 0. */
    const char *stages;
    int micro_batches;
    /* With comm or devices: the optimizer's state sharded over the ranks
     * (ZeRO stage 1, ug_comm_shard_optimizer; with stages, each stage's
     * over its replicas): each rank holds and updates
     * its part of every parameter, and the parts are gathered after each
     * update, the same bits as without. Checkpoints hold the whole state,
     * gathered on rank 0 to be saved, so a run resumes on any number of
     * ranks, sharded or not. */
    bool shard_optimizer;
    /* Denormal floats are flushed to zero while fit and evaluate run
     * (ug_set_flush_denormal; the process's setting is restored after):
     * the CPU computes with them up to 100 times slower, and Adam's
     * moments for rarely seen inputs decay into their range. true keeps
     * them, for IEEE arithmetic throughout. Not part of what a resumed
     * run must match. */
    bool keep_denormals;
} ug_trainer_config;

UG_API ug_trainer_config ug_trainer_defaults(void);

/* Opens the run: the model and optimizer, both graphs, the loaders and,
 * with config->resume, everything the checkpoint holds. train's targets
 * decide y (labels or float targets); validation may be NULL. Refused
 * configurations and checkpoints create nothing and say which field is
 * wrong. */
UG_API ug_status ug_trainer_create(ug_device *device, const ug_dataset *train, const ug_dataset *validation,
                                   ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                   ug_trainer **out);
/* A run on token sets (tokens.h): batches of batch_size random windows
 * of block_size tokens, the training batches drawn from (seed, step), the
 * evaluations' from the validation set's fixed sequence, so a resumed run
 * draws exactly what the uninterrupted one did (the checkpoint keeps the
 * step). batch_size, block_size and max_steps must be given; the
 * validation set (or NULL) needs no more ids than the training set's
 * vocabulary, and each set at least block_size + 1 tokens. What a token
 * run has no use for is refused: val_split (split the tokens by position,
 * ug_tokens_split), top_k and confusion, device_convert and augment, a
 * step schedule counted in epochs (step_size 0), and patience without
 * validation tokens. A cosine schedule with total_steps 0 decays over
 * max_steps. With comm, each rank draws its rows of every global batch. */
UG_API ug_status ug_trainer_create_tokens(ug_device *device, const ug_tokens *train, const ug_tokens *validation,
                                          ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                          ug_trainer **out);
/* Trains from where the run stands to config.epochs (or, in a token run,
 * to max_steps updates; or to the stop flag, or early stopping). */
UG_API ug_status ug_trainer_fit(ug_trainer *trainer);
/* Evaluates data (in batches of the training size, eval mode). */
UG_API ug_status ug_trainer_evaluate(ug_trainer *trainer, const ug_dataset *data, ug_trainer_metrics *out);
/* A token run's evaluation of any token set: eval_iters batches of its
 * fixed evaluation sequence, in eval mode (nanoGPT's estimate_loss; a
 * callback may evaluate the training tokens so). */
UG_API ug_status ug_trainer_evaluate_tokens(ug_trainer *trainer, const ug_tokens *data, ug_trainer_metrics *out);
/* The loss of the last training batch, read from the device (a wait). */
UG_API ug_status ug_trainer_last_loss(ug_trainer *trainer, float *loss);
/* The epoch (from 0) of the lowest validation loss so far, and that loss;
 * -1 before a validation. */
UG_API int64_t ug_trainer_best_epoch(const ug_trainer *trainer, double *val_loss);
/* With batch_size 0, what the search found: the chosen batch's plan, the
 * next power of two's (0 when the data set was reached first), the bytes
 * in use beside them and the limit (UG_MEMORY_LIMIT, else the device's
 * memory). false when the batch size was given. */
typedef struct ug_trainer_batch_plan {
    uint64_t bytes, next_bytes, in_use, limit;
} ug_trainer_batch_plan;
UG_API bool ug_trainer_batch_search(const ug_trainer *trainer, ug_trainer_batch_plan *out);
/* Whether the last fit ended on the stop flag. */
UG_API bool ug_trainer_stopped(const ug_trainer *trainer);
/* The run's parts, owned by the trainer. The checkpoint takes the
 * caller's own strings (ug_checkpoint_set_string; "trainer." names are
 * the trainer's), saved with every checkpoint; after a resume,
 * ug_checkpoint_string reads the saved ones. */
UG_API ug_model *ug_trainer_model(const ug_trainer *trainer);
UG_API ug_checkpoint *ug_trainer_checkpoint(const ug_trainer *trainer);
UG_API ug_optimizer *ug_trainer_optimizer(const ug_trainer *trainer);
UG_API ug_graph *ug_trainer_graph(const ug_trainer *trainer);
/* The batch size in use (chosen when config.batch_size was 0), the
 * epochs done and the updates of one epoch (0 and 0 in a token run). */
UG_API int64_t ug_trainer_batch_size(const ug_trainer *trainer);
UG_API int64_t ug_trainer_epochs_done(const ug_trainer *trainer);
UG_API int64_t ug_trainer_epoch_updates(const ug_trainer *trainer);
UG_API void ug_trainer_free(ug_trainer *trainer);

/* A training step without the trainer's data: the model, the optimizer and
 * the training graph ug_trainer_create makes (inputs x and y, the build
 * function's model and loss, the sums of the loss and accuracy, backward
 * and the update), and the step ug_trainer_fit takes on each batch. For a
 * program that runs its own loop over batches it holds, as ug-bench does
 * to time the trainer's step on batches kept on the device. It has no
 * loaders, evaluation graph, checkpoints or callbacks, and leaves
 * denormals as the process has them (ug_set_flush_denormal).
 *
 * config is read as ug_trainer_create reads it; batch_size (the rows the
 * graph is planned for, which must be given), accumulate, precision,
 * optimizer (loss scaling turned on for f16, as the trainer does), seed
 * and comm apply. A step has no epochs, so a schedule that counts in them
 * (cosine with total_steps 0, step with step_size 0) is refused. x is
 * [rows, features] in the precision the step computes in
 * (ug_device_precision of the device and config.precision); y i32 labels [rows] (target_width 0)
 * or f32 targets [rows, target_width]. With block_size above 0 it is a
 * token run's step: x and y are i32 ids [rows, block_size] (features is
 * block_size, target_width 0), as ug_trainer_create_tokens builds it.
 * build runs during create only. With comm, every rank creates its step
 * together (the model starts as rank 0's) and takes each step together. */
typedef struct ug_train_step ug_train_step;
UG_API ug_status ug_train_step_create(ug_device *device, int64_t features, int64_t target_width,
                                      ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                      ug_train_step **out);
/* One batch, as fit trains each: x and y (at most batch_size rows) forward
 * and backward, and the update once accumulate batches are in, or now with
 * last (an epoch's last batch). With comm, the update's batch sums the
 * ranks' gradients; x and y are both NULL where this rank's part of the
 * batch is empty. */
UG_API ug_status ug_train_step_run(ug_train_step *step, const ug_tensor *x, const ug_tensor *y, bool last);
/* Its parts, owned by the step. */
UG_API ug_model *ug_train_step_model(const ug_train_step *step);
UG_API ug_graph *ug_train_step_graph(const ug_train_step *step);
UG_API void ug_train_step_free(ug_train_step *step);

#ifdef __cplusplus
}
#endif
#endif
