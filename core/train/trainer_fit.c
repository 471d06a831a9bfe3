/* The epochs of a training run (ug_trainer_fit), or a token run's steps:
 * batches through the training graph with accumulation, the callbacks,
 * validation, early stopping and checkpoints at positions a resume
 * continues exactly. A step on its own (ug_train_step_run) trains its
 * batches as fit does its. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "core/comm/internal.h"
#include "core/comm/pipeline_internal.h"
#include "core/io/checkpoint_internal.h"
#include "core/train/trainer_internal.h"
#include "unigrad/memory.h"
#include "unigrad/profiler.h"

static bool stop_asked(const ug_trainer *t) { return t->config.stop && *t->config.stop; }

/* Whether to stop here: with comm, when any rank was asked, so that every
 * rank stops after the same batch. */
static ug_status stop_agreed(ug_trainer *t, bool *stop)
{
    *stop = stop_asked(t);
    if (!t->config.comm && !t->stage_comm)
        return UG_OK;
    float flag = *stop ? 1.0f : 0.0f;
    if (!t->stop_flag)
        UG_TRY(ug_tensor_create(t->device, UG_F32, 1, (int64_t[]){1}, &t->stop_flag));
    UG_TRY(ug_tensor_upload(t->stop_flag, &flag, sizeof flag));
    /* the replicas, then the stages of each: every stage of every pipeline */
    if (t->config.comm)
        UG_TRY(ug_comm_all_reduce(t->config.comm, t->stop_flag, UG_COMM_MAX));
    if (t->stage_comm)
        UG_TRY(ug_comm_all_reduce(t->stage_comm, t->stop_flag, UG_COMM_MAX));
    UG_TRY(ug_tensor_download(t->stop_flag, &flag, sizeof flag));
    *stop = flag > 0.0f;
    return UG_OK;
}

/* The update of the gradients accumulated (with comm, reduced over the
 * ranks already). */
static ug_status update(ug_trainer *t)
{
    t->pending = 0;
    UG_TRY(ug_graph_run_update(t->train.graph));
    /* Each rank updated its part of the parameters: the parts to all. */
    if (t->config.shard_optimizer)
        return ug_comm_gather_parameters(t->config.comm, t->optimizer);
    /* Backends may round the same update differently: the replicas take
     * rank 0's parameters again, so they stay bitwise alike. */
    return t->mixed_backends ? ug_comm_take_rank0_params(t->config.comm, t->model, "trainer: resync") : UG_OK;
}

/* One batch of rows (x and y): backward, and the update when accumulate
 * batches are in or the epoch ends (last). With comm, the update's
 * micro-batch reduces the ranks' gradients as backward produces them; a
 * rank whose part of it is empty joins the reduction with zeros. Fit's
 * batches and ug_train_step_run's. */
static ug_status train_batch(ug_trainer *t, const ug_tensor *x, const ug_tensor *y, int64_t rows, bool last)
{
    ug_graph *g = t->train.graph;
    ug_comm *comm = t->config.comm;
    const bool updating = t->pending + 1 >= t->config.accumulate || last;
    if (t->train.pipeline) { /* every stage its part: the micro-batches through the stages, then the update */
        UG_TRY(ug_pipeline_bind(t->train.pipeline, t->train.x, x));
        UG_TRY(ug_pipeline_bind(t->train.pipeline, t->train.y, y));
        return ug_pipeline_run(t->train.pipeline);
    }
    if (rows) {
        UG_TRY(ug_graph_bind(g, t->train.x, x));
        UG_TRY(ug_graph_bind(g, t->train.y, y));
        if (t->config.accumulate <= 1 && !comm)
            return ug_graph_run(g);
        UG_TRY(updating && comm ? ug_comm_run_backward(comm, g) : ug_graph_run_backward(g));
    } else if (updating && comm) {
        UG_TRY(ug_comm_reduce_gradients(comm, g));
    }
    t->pending++;
    if (!updating)
        return UG_OK;
    UG_TRY(update(t));
    return trainer_balance_after_update(t, rows);
}

ug_status ug_train_step_run(ug_train_step *step, const ug_tensor *x, const ug_tensor *y, bool last)
{
    if (!step)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_run: step is NULL");
    ug_trainer *t = step->trainer;
    if (!x != !y)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_run: %s is NULL and %s is not: give both, or "
                                                     "neither for a rank's empty part of a batch",
                            x ? "y" : "x", x ? "x" : "y");
    if (x && ug_tensor_ndim(x) < 1)
        return ug_set_error(UG_ERR_SHAPE, "ug_train_step_run: x is a scalar; it needs a row per sample");
    const int64_t rows = x ? ug_tensor_dim(x, 0) : 0;
    if (!rows && !t->config.comm)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_run: the batch has no rows (x is %s); only a "
                                                     "rank of a comm may have an empty part of one",
                            x ? "empty" : "NULL");
    return train_batch(t, x, y, rows, last);
}

/* A checkpoint of the run now (between updates). A failed save is
 * reported by the next epoch's callback (save_error) and training goes
 * on: the previous checkpoint is whole; fit fails at its end if the last
 * save did. */
static bool save(ug_trainer *t)
{
    /* A sharded optimizer's parts gathered whole on rank 0, then (the
     * first pipeline's) every stage's part of the model, for the save. */
    ug_optimizer *whole = NULL;
    ug_pipeline_state staged = {0};
    const char *sum_names[UG_PIPELINE_MAX_SUMS]; /* the checkpoint reads them as it saves */
    ug_status gathered =
        t->config.shard_optimizer ? ug_comm_consolidate_optimizer(t->config.comm, t->optimizer, &whole) : UG_OK;
    const bool first_replica = !t->config.comm || ug_comm_rank(t->config.comm) == 0;
    if (t->stage_comm && first_replica) {
        const ug_status st = ug_pipeline_gather_state(t->stage_comm, t->model, whole ? whole : t->optimizer,
                                                      t->train.graph, "train", &staged);
        gathered = gathered != UG_OK ? gathered : st;
        ug_optimizer_free(whole); /* (staged holds the whole model's) */
        whole = NULL;
    }
    if (!first_replica || (t->stage_comm && ug_comm_rank(t->stage_comm) != 0)) {
        ug_optimizer_free(whole);
        return gathered == UG_OK; /* rank 0 writes */
    }
    if (staged.model) { /* the whole model, and the last stage's sums */
        whole = staged.optimizer;
        ug_checkpoint_swap_model(t->checkpoint, staged.model);
        for (int i = 0; i < staged.sum_count; i++)
            sum_names[i] = staged.sum_names[i];
        ug_checkpoint_set_extras(t->checkpoint, staged.sum_count, sum_names, staged.sums);
    }
    ug_optimizer *own = whole ? ug_checkpoint_swap_optimizer(t->checkpoint, whole) : NULL;
    t->last_save_failed = gathered != UG_OK || trainer_save_state(t) != UG_OK ||
                          ug_checkpoint_save(t->checkpoint, t->config.checkpoint) != UG_OK;
    if (whole)
        ug_checkpoint_swap_optimizer(t->checkpoint, own);
    if (staged.model) {
        ug_checkpoint_swap_model(t->checkpoint, t->model);
        ug_checkpoint_set_extras(t->checkpoint, 0, NULL, NULL);
        ug_pipeline_state_free(&staged);
    } else {
        ug_optimizer_free(whole);
    }
    if (t->last_save_failed)
        snprintf(t->save_error, sizeof t->save_error, "%s", ug_last_error());
    return !t->last_save_failed;
}

static bool update_save_due(const ug_trainer *t)
{
    const int64_t every = t->config.checkpoint_every_updates;
    return t->config.checkpoint && every > 0 && ug_optimizer_steps(t->optimizer) % every == 0;
}

/* A callback's failure as it returned it: with the message it left, or
 * one naming the callback when it returned a bare status (never an older,
 * unrelated message). */
static ug_status call_back(ug_status st, const char *name)
{
    if (st != UG_OK && !ug_last_error()[0])
        return ug_set_error(st, "ug_trainer_fit: %s returned %s without a message", name, ug_status_name(st));
    return st;
}

/* The epoch's batches from where the loader stands. */
static ug_status train_epoch(ug_trainer *t, int64_t epoch, ug_trainer_epoch *report)
{
    const ug_trainer_config *c = &t->config;
    int64_t first_batch = 0, position_epoch = 0;
    ug_loader_position(t->train_loader, &position_epoch, &first_batch);
    const int64_t batches = ug_loader_batches(t->train_loader);
    /* Batches before a resume count in the epoch's sums (the checkpoint
     * keeps them); their samples are whole batches. */
    int64_t samples = first_batch * t->batch, index = first_batch;
    const double start = ug_seconds_now();
    for (bool done = false;;) {
        /* A running profiler (profiler.h) sees each step as a range: the
         * batch's loading and its training. */
        UG_TRY(ug_profiler_range_push(t->device, "step"));
        ug_batch b;
        UG_TRY(ug_loader_next(t->train_loader, &b, &done));
        if (done) {
            UG_TRY(ug_profiler_range_pop(t->device));
            break;
        }
        const float lr = ug_optimizer_current_lr(t->optimizer);
        t->last_lr = lr;
        /* Stages skip a batch of fewer rows than micro-batches (each needs one). */
        const bool skipped = t->train.pipeline && b.count < trainer_micro_batches(t);
        if (!skipped)
            UG_TRY(train_batch(t, b.x, b.y, b.count, index + 1 == batches));
        UG_TRY(ug_profiler_range_pop(t->device));
        if (skipped) {
            index++;
            continue;
        }
        samples += b.count;
        t->global_batch++;
        if (c->on_step) {
            ug_trainer_step s = {.epoch = epoch, .batch = index, .batches = batches,
                                 .global_batch = t->global_batch, .updates = ug_optimizer_steps(t->optimizer),
                                 .samples = samples, .loss = NAN, .lr = lr};
            if ((c->log_every && t->global_batch % c->log_every == 0) || index + 1 == batches)
                UG_TRY(ug_trainer_last_loss(t, &s.loss));
            s.samples_per_second = (double)(samples - first_batch * t->batch) / (ug_seconds_now() - start);
            ug_clear_error();
            UG_TRY(call_back(c->on_step(&s, c->user), "on_step"));
        }
        UG_TRY(trainer_stage_callbacks_done(t));
        index++;
        if (t->pending)
            continue;
        if (update_save_due(t))
            save(t);
        bool stop = false;
        UG_TRY(stop_agreed(t, &stop));
        if (stop && index < batches) {
            t->stopped = true;
            if (c->checkpoint)
                save(t);
            return UG_OK;
        }
    }
    report->seconds = ug_seconds_now() - start;
    UG_TRY(trainer_read_metrics(t, &t->train, samples, false, &report->train));
    /* The run's samples: with comm, every rank's (the sums read above). */
    const int64_t trained = t->config.comm ? report->train.samples : samples;
    report->samples_per_second = (double)(trained - first_batch * t->batch) / report->seconds;
    return UG_OK;
}

/* The report's figures of the run so far: steps, learning rate, memory,
 * loss scaling. */
static ug_status epoch_figures(ug_trainer *t, ug_trainer_epoch *report)
{
    report->global_batch = t->global_batch;
    report->replicas = t->balance.replicas;
    report->shares = t->balance.shares;
    report->lr = t->last_lr;
    ug_memory_stats memory;
    UG_TRY(ug_memory_get_stats(t->device, &memory));
    report->memory_in_use = memory.bytes_in_use;
    report->memory_peak = memory.peak_bytes_in_use;
    ug_loss_scaler_state scaler;
    if (ug_optimizer_get_config(t->optimizer).loss_scaling.enabled && ug_optimizer_loss_scaler(t->optimizer, &scaler) == UG_OK) {
        report->loss_scale = scaler.scale;
        report->skipped_steps = scaler.skipped_steps;
    }
    return UG_OK;
}

/* After validation: whether to stop (patience), keeping the best weights. */
static ug_status early_stopping(ug_trainer *t, ug_trainer_epoch *report, bool *stop)
{
    *stop = false;
    if (!t->val_loader)
        return UG_OK;
    if (report->validation.loss < t->best_val_loss) {
        t->best_val_loss = report->validation.loss;
        t->best_epoch = report->epoch;
        t->bad_epochs = 0;
        report->best = true;
        return t->config.patience ? trainer_keep_best(t) : UG_OK;
    }
    *stop = t->config.patience && ++t->bad_epochs >= t->config.patience;
    return UG_OK;
}

/* ---- a token run: steps instead of epochs ---- */

/* The evaluation (from 0) that update number step (from 1) reports to:
 * the first at a multiple of eval_every at or after it, or the last. */
static int64_t report_index(const ug_trainer *t, int64_t step)
{
    return t->config.eval_every ? (step - 1) / t->config.eval_every : 0;
}

/* The report after update step: the training figures since the last,
 * the validation tokens' fixed batches, early stopping, a checkpoint (when
 * one is due: *saved), and on_epoch. seconds and windows: the span's
 * training time and the global batches' windows trained in it by this
 * process. */
static ug_status report_steps(ug_trainer *t, int64_t step, double seconds, int64_t windows, bool *stop,
                              bool *saved)
{
    const ug_trainer_config *c = &t->config;
    ug_trainer_epoch report = {.epoch = report_index(t, step), .seconds = seconds};
    UG_TRY(trainer_read_metrics(t, &t->train, t->report_samples, false, &report.train));
    t->report_samples = 0;
    t->report_batch = t->global_batch;
    report.samples_per_second = (double)windows / seconds;
    if (t->val_sampler)
        UG_TRY(trainer_evaluate_sampler(t, t->val_sampler, &report.validation));
    UG_TRY(early_stopping(t, &report, stop));
    report.updates = ug_optimizer_steps(t->optimizer);
    UG_TRY(epoch_figures(t, &report));
    const bool last = step == c->max_steps || *stop;
    *saved = c->checkpoint && (last || !c->checkpoint_every_updates || update_save_due(t));
    if (*saved)
        report.saved = save(t);
    report.save_error = t->save_error[0] ? t->save_error : NULL;
    if (c->on_epoch) {
        ug_clear_error();
        UG_TRY(call_back(c->on_epoch(&report, c->user), "on_epoch"));
    }
    UG_TRY(trainer_stage_callbacks_done(t));
    t->save_error[0] = '\0';
    return UG_OK;
}

/* One update's micro-batches: batch number global_batch of the training
 * draws each, so the position is the step alone. */
static ug_status step_batches(ug_trainer *t, int64_t step, int64_t first_batch, double start)
{
    const ug_trainer_config *c = &t->config;
    for (int j = 0; j < c->accumulate; j++) {
        UG_TRY(ug_profiler_range_push(t->device, "step"));
        ug_token_batch b;
        UG_TRY(ug_token_sampler_batch(t->train_sampler, UG_TOKEN_TRAIN, t->global_batch, &b));
        const float lr = ug_optimizer_current_lr(t->optimizer);
        t->last_lr = lr;
        UG_TRY(train_batch(t, b.x, b.y, b.rows, j + 1 == c->accumulate));
        UG_TRY(ug_profiler_range_pop(t->device));
        t->report_samples += b.rows;
        t->global_batch++;
        if (c->on_step) {
            const int64_t batches = c->max_steps * c->accumulate;
            ug_trainer_step s = {.epoch = report_index(t, step + 1), .batch = t->global_batch - 1,
                                 .batches = batches, .global_batch = t->global_batch,
                                 .updates = ug_optimizer_steps(t->optimizer), .samples = t->report_samples,
                                 .loss = NAN, .lr = lr};
            if ((c->log_every && t->global_batch % c->log_every == 0) || t->global_batch == batches)
                UG_TRY(ug_trainer_last_loss(t, &s.loss));
            s.samples_per_second =
                (double)((t->global_batch - first_batch) * t->batch) / (ug_seconds_now() - start);
            ug_clear_error();
            UG_TRY(call_back(c->on_step(&s, c->user), "on_step"));
        }
        UG_TRY(trainer_stage_callbacks_done(t));
    }
    return UG_OK;
}

/* From the step the run stands at (its micro-batches trained, which a
 * checkpoint keeps) to max_steps, reporting every eval_every updates. */
static ug_status fit_steps(ug_trainer *t)
{
    const ug_trainer_config *c = &t->config;
    const int64_t first_batch = t->global_batch;
    int64_t step = t->global_batch / c->accumulate, span_first = step;
    const double start = ug_seconds_now();
    double span_start = start;
    bool stop = c->patience && t->bad_epochs >= c->patience;
    while (step < c->max_steps && !stop) {
        UG_TRY(step_batches(t, step, first_batch, start));
        step++;
        const bool report_due = step == c->max_steps || (c->eval_every && step % c->eval_every == 0);
        bool saved = false;
        if (report_due) {
            const int64_t windows = (step - span_first) * c->accumulate * t->batch;
            UG_TRY(report_steps(t, step, ug_seconds_now() - span_start, windows, &stop, &saved));
            span_start = ug_seconds_now(); /* the evaluation is not training time */
            span_first = step;
        } else if (update_save_due(t)) {
            save(t);
            saved = true;
        }
        bool stopping = false;
        UG_TRY(stop_agreed(t, &stopping));
        if (stopping && step < c->max_steps && !stop) {
            t->stopped = true;
            if (c->checkpoint && !saved)
                save(t);
            break;
        }
    }
    if (t->last_save_failed)
        return ug_set_error(UG_ERR_IO, "ug_trainer_fit: the last checkpoint could not be saved to %s, so the "
                                       "run's end is not saved", c->checkpoint);
    /* Early stopping ends with the best evaluation's weights. */
    return c->patience && !t->stopped && t->best_count ? trainer_restore_best(t) : UG_OK;
}

static ug_status fit(ug_trainer *t)
{
    const ug_trainer_config *c = &t->config;
    t->stopped = false;
    if (t->train_sampler)
        return fit_steps(t);
    int64_t epoch = 0, next = 0;
    ug_loader_position(t->train_loader, &epoch, &next);
    if (epoch < 0) {
        epoch = 0;
        UG_TRY(ug_loader_start_epoch(t->train_loader, 0));
    }
    bool stop = t->config.patience && t->bad_epochs >= t->config.patience;
    for (; epoch < c->epochs && !stop; epoch++) {
        ug_trainer_epoch report = {.epoch = epoch};
        UG_TRY(train_epoch(t, epoch, &report));
        if (t->stopped)
            break;
        if (t->val_loader)
            UG_TRY(trainer_evaluate_loader(t, t->val_loader, &report.validation));
        UG_TRY(early_stopping(t, &report, &stop));
        report.updates = ug_optimizer_steps(t->optimizer);
        UG_TRY(epoch_figures(t, &report));
        /* The next epoch starts before the checkpoint, so a resumed run
         * goes on with it (after the last epoch too: a run resumed with
         * more epochs). */
        UG_TRY(ug_loader_start_epoch(t->train_loader, epoch + 1));
        const bool last = epoch + 1 == c->epochs || stop;
        const bool due = !c->checkpoint_every_updates && c->checkpoint_every_epochs &&
                         (epoch + 1) % c->checkpoint_every_epochs == 0;
        bool stopping = false;
        UG_TRY(stop_agreed(t, &stopping));
        if (c->checkpoint && (last || due || stopping))
            report.saved = save(t);
        report.save_error = t->save_error[0] ? t->save_error : NULL;
        if (c->on_epoch) {
            ug_clear_error();
            UG_TRY(call_back(c->on_epoch(&report, c->user), "on_epoch"));
        }
        UG_TRY(trainer_stage_callbacks_done(t));
        t->save_error[0] = '\0';
        if (stopping && !last) {
            t->stopped = true;
            break;
        }
    }
    if (t->last_save_failed)
        return ug_set_error(UG_ERR_IO, "ug_trainer_fit: the last checkpoint could not be saved to %s, so the "
                                       "run's end is not saved", c->checkpoint);
    /* Early stopping ends with the best epoch's weights. */
    return c->patience && !t->stopped && t->best_count ? trainer_restore_best(t) : UG_OK;
}

ug_status ug_trainer_fit(ug_trainer *t)
{
    if (!t)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_fit: trainer is NULL");
    if (t->fitting)
        return ug_set_error(UG_ERR_STATE, "ug_trainer_fit: this trainer is already fitting (called from one of its "
                                          "callbacks?); return from the callback, and fit again after");
    t->fitting = true;
    bool flushed = trainer_denormals_begin(t);
    ug_status st = t->replicas ? trainer_replicas_fit(t, fit) : fit(t);
    ug_set_flush_denormal(flushed);
    t->fitting = false;
    return st;
}
