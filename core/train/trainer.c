/* Opening a training run (include/unigrad/trainer.h): checking the
 * configuration, the model and optimizer, the training and evaluation
 * graphs, the batch-size search, the loaders (a token run's own parts are
 * trainer_tokens.c's); a step on its own (the model, optimizer and
 * training graph alone); and evaluating a data set. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/io/string_map.h"
#include "core/comm/internal.h"
#include "core/runtime/internal.h"
#include "core/comm/pipeline_internal.h"
#include "core/io/checkpoint_internal.h"
#include "core/train/trainer_internal.h"
#include "unigrad/memory.h"

ug_trainer_config ug_trainer_defaults(void)
{
    ug_trainer_config c;
    memset(&c, 0, sizeof c);
    c.epochs = 10;
    c.batch_size = 64;
    c.accumulate = 1;
    c.precision = UG_F32;
    c.optimizer = ug_optimizer_defaults(UG_ADAM);
    c.workers = 1;
    c.checkpoint_every_epochs = 1;
    c.keep = 1;
    c.log_every = 50;
    c.eval_iters = 20;
    return c;
}

/* The precision a step computes in (ug_device_precision), and where that
 * is not the one asked for, says so once per process and type. */
static ug_dtype trainer_compute_precision(ug_device *device, ug_dtype asked)
{
    static _Atomic bool warned[2];
    const ug_dtype compute = ug_device_precision(device, asked);
    if (compute != asked && !atomic_exchange(&warned[asked == UG_BF16], true))
        ug_warn("trainer: %s has no native %s arithmetic, where it would be slower than f32: the step "
                "computes in f32 (ug_graph_set_precision in a graph of your own computes in %s anyway)",
                ug_device_name(device), ug_dtype_name(asked), ug_dtype_name(asked));
    return compute;
}

/* What pipeline stages cannot take yet, or NULL. */
static const char *stage_refusal(const ug_trainer_config *c)
{
    return c->devices ? "stages with devices: give comm for the replicas (each of its ranks a pipeline over "
                        "the stages' devices)"
           : c->accumulate > 1 ? "accumulate with stages: the stages' micro_batches are the batch's accumulation"
           : c->batch_size == 0 ? "batch_size is 0 with stages: give the batch size (the search is not shared)"
                                : NULL;
}

/* op: the function refusing it, named in the message. */
static ug_status check_config(const char *op, ug_device *device, const ug_trainer_config *c)
{
    const char *bad = NULL;
    if (c->epochs < 0) bad = "epochs is negative";
    else if (c->batch_size < 0) bad = "batch_size is negative (0 picks the largest that fits)";
    else if (c->accumulate < 1) bad = "accumulate is below 1";
    else if (c->precision != UG_F32 && c->precision != UG_F16 && c->precision != UG_BF16)
        bad = "precision is not f32, f16 or bf16";
    else if (!(c->val_split >= 0.0 && c->val_split < 1.0)) bad = "val_split is not in [0, 1)";
    else if (c->patience < 0) bad = "patience is negative";
    else if (c->top_k < 0) bad = "top_k is negative";
    else if (c->checkpoint_every_epochs < 0 || c->checkpoint_every_updates < 0)
        bad = "a checkpoint interval is negative";
    else if (c->shard_optimizer && !c->comm && !c->devices)
        bad = "shard_optimizer without comm or devices: there are no ranks to shard the optimizer's state over";
    else if (c->comm && c->batch_size == 0)
        bad = "batch_size is 0 with comm: give the global batch size (the search is not shared by the ranks)";
    else if (c->keep < 1) bad = "keep is below 1";
    else if (c->log_every < 0) bad = "log_every is negative";
    else if (c->workers < 0) bad = "workers is negative";
    else if (c->max_steps < 0 || c->block_size < 0 || c->eval_every < 0 || c->eval_iters < 0)
        bad = "max_steps, block_size, eval_every or eval_iters is negative";
    else if (c->micro_batches < 0)
        bad = "micro_batches is negative";
    else if (c->stages)
        bad = stage_refusal(c);
    if (bad)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op, bad);
    if (c->comm && device && ug_comm_device(c->comm) != device)
        return ug_set_error(UG_ERR_DEVICE, "%s: the device is %s, its rank's comm's %s", op,
                            ug_device_name(device), ug_device_name(ug_comm_device(c->comm)));
    return UG_OK;
}

void trainer_graph_free(trainer_graph *tg)
{
    ug_pipeline_free(tg->pipeline);
    ug_graph_free(tg->graph);
    ug_tensor_free(tg->class_ids_tensor);
    for (int i = 0; i < tg->metric_count; i++)
        free(tg->metric_names[i]);
    memset(tg, 0, sizeof *tg);
}

int trainer_micro_batches(const ug_trainer *t)
{
    const int64_t asked = t->config.micro_batches ? t->config.micro_batches : 2 * ug_comm_size(t->stage_comm);
    return (int)(asked < t->batch ? asked : t->batch);
}

ug_status trainer_build_graph(ug_trainer *t, int64_t rows, bool training, trainer_graph *out)
{
    memset(out, 0, sizeof *out);
    UG_TRY(ug_graph_create(t->model, &out->graph));
    ug_graph *g = out->graph;
    if (t->stage_comm) { /* a stage: its part of the model, on micro-batches of the batch when training */
        const int micro = training ? trainer_micro_batches(t) : 1;
        rows = (rows + micro - 1) / micro;
        ug_status st = ug_pipeline_create(t->stage_comm, g, micro, UG_PIPELINE_1F1B, &out->pipeline);
        if (st == UG_OK && training && t->config.comm) /* pipelines side by side: this stage's replicas */
            st = ug_pipeline_set_replicas(out->pipeline, t->config.comm);
        if (st != UG_OK) {
            trainer_graph_free(out);
            return st;
        }
    }
    const int64_t x_shape[2] = {rows, t->features}, y_shape[2] = {rows, t->target_width};
    const bool tokens = t->token_windows;
    out->row_labels = tokens ? t->features : 1;
    ug_trainer_outputs outputs = {0};
    ug_status st = ug_graph_set_precision(g, t->compute);
    /* Each rank's own dropout masks, reproducible from the seed. */
    const uint64_t rank = t->config.comm ? (uint64_t)ug_comm_rank(t->config.comm) : 0;
    if (st == UG_OK) st = ug_graph_set_seed(g, t->config.seed + rank * 0x9E3779B97F4A7C15ull);
    /* The features come in the compute dtype (the loader rounds them); a
     * token run's x and y are ids [rows, block_size]. */
    if (st == UG_OK) st = ug_graph_input(g, "x", tokens ? UG_I32 : t->compute, 2, x_shape, &out->x);
    if (st == UG_OK && tokens)
        st = ug_graph_input(g, "y", UG_I32, 2, x_shape, &out->y);
    else if (st == UG_OK)
        st = t->target_width ? ug_graph_input(g, "y", UG_F32, 2, y_shape, &out->y)
                             : ug_graph_input(g, "y", UG_I32, 1, y_shape, &out->y);
    if (st == UG_OK) {
        st = t->build(g, out->x, out->y, t->user, &outputs);
        if (st == UG_OK && !outputs.loss)
            st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "trainer: the build function returned no loss");
    }
    out->loss = outputs.loss;
    out->logits = outputs.logits;
    /* A stage keeps its part of the model from here on (its later
     * stages' parameters go); the last holds the loss and the metrics. */
    ug_value *output = NULL;
    if (st == UG_OK && out->pipeline) st = ug_pipeline_finish_build(out->pipeline, &output);
    if (st == UG_OK) st = trainer_add_metrics(t, out, &outputs, !training);
    if (st == UG_OK && training && !out->pipeline) st = ug_graph_backward(g, out->loss);
    if (st == UG_OK && !training) st = ug_graph_set_training(g, false);
    if (st != UG_OK)
        trainer_graph_free(out);
    return st;
}

/* Compiles a built graph (with the optimizer for training) and binds its
 * class numbers. */
ug_status trainer_finish_graph(ug_trainer *t, trainer_graph *tg, bool training)
{
    if (tg->pipeline) /* a collective of the stages: backward from the next stage's gradient or the loss */
        UG_TRY(ug_pipeline_compile(tg->pipeline, trainer_holds_loss(t) ? tg->loss : NULL,
                                   training ? t->optimizer : NULL));
    else if (training)
        UG_TRY(ug_graph_set_optimizer(tg->graph, t->optimizer));
    if (!tg->pipeline)
        UG_TRY(ug_graph_compile(tg->graph));
    return tg->class_ids ? ug_graph_bind(tg->graph, tg->class_ids, tg->class_ids_tensor) : UG_OK;
}

/* Optimizer updates in an epoch: ceil(batches / accumulate). */
static int64_t updates_per_epoch(const ug_trainer *t, int64_t count, int64_t batch)
{
    int64_t batches = t->config.drop_last ? count / batch : (count + batch - 1) / batch;
    return (batches + t->config.accumulate - 1) / t->config.accumulate;
}

/* The optimizer of the configuration for the batch size chosen: cosine
 * over the run's updates (a token run's max_steps), a step schedule in
 * epochs, loss scaling for f16. epoch_updates 0: the batch size is still
 * to be chosen, and this one only counts in its plans (where the schedule
 * makes no difference). */
ug_status trainer_make_optimizer(ug_trainer *t, int64_t epoch_updates)
{
    ug_optimizer_config oc = t->config.optimizer;
    const bool tokens = t->train_tokens != NULL;
    if (!epoch_updates)
        oc.schedule = UG_SCHEDULE_CONSTANT;
    if (oc.schedule == UG_SCHEDULE_COSINE && oc.total_steps == 0 && tokens)
        oc.total_steps = t->config.max_steps;
    else if (oc.schedule == UG_SCHEDULE_COSINE && oc.total_steps == 0 &&
             __builtin_mul_overflow(t->config.epochs, epoch_updates, &oc.total_steps))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "trainer: %lld epochs of %lld updates are more updates "
                                                     "than a step count holds; train fewer epochs",
                            (long long)t->config.epochs, (long long)epoch_updates);
    if (oc.schedule == UG_SCHEDULE_STEP && oc.step_size == 0 && tokens)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: the step schedule's step_size is 0 "
                                                     "(an epoch's updates), and a token run has no epochs: give it");
    if (oc.schedule == UG_SCHEDULE_STEP && oc.step_size == 0)
        oc.step_size = epoch_updates;
    if (t->config.precision == UG_F16 && !oc.loss_scaling.enabled) {
        oc.loss_scaling = ug_optimizer_defaults(oc.type).loss_scaling;
        oc.loss_scaling.enabled = true;
    }
    if (oc.schedule == UG_SCHEDULE_COSINE && oc.warmup_steps >= oc.total_steps && oc.total_steps > 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "trainer: the warm-up (%lld update%s) does not end before the run's %lld update%s",
                            (long long)oc.warmup_steps, oc.warmup_steps == 1 ? "" : "s",
                            (long long)oc.total_steps, oc.total_steps == 1 ? "" : "s");
    ug_optimizer_free(t->optimizer);
    t->optimizer = NULL;
    t->total_updates = oc.total_steps;
    return ug_optimizer_create(t->model, &oc, &t->optimizer);
}

typedef struct batch_search {
    ug_trainer *t;
    const ug_dataset *train, *val;
} batch_search;

/* What a batch of rows would add to the device: both graphs' plans
 * beyond the model and optimizer already there, and the loaders' slots:
 * training, validation, and one more for ug_trainer_evaluate (whose
 * slots are a batch of the same samples'). */
static ug_status plan_batch(void *context, int64_t rows, uint64_t *bytes)
{
    batch_search *s = context;
    ug_trainer *t = s->t;
    uint64_t total = 0;
    for (int training = 1; training >= 0; training--) {
        trainer_graph tg;
        ug_graph_memory_info mem;
        UG_TRY(trainer_build_graph(t, rows, training, &tg));
        ug_status st = training ? ug_graph_set_optimizer(tg.graph, t->optimizer) : UG_OK;
        if (st == UG_OK)
            st = ug_graph_memory(tg.graph, &mem);
        trainer_graph_free(&tg);
        UG_TRY(st);
        total += mem.total_bytes - mem.parameter_bytes - mem.optimizer_bytes +
                 (training && t->config.accumulate > 1 ? mem.accumulator_bytes : 0);
    }
    ug_loader_config lc = t->loader_config;
    lc.batch_size = rows;
    uint64_t slots = 0;
    UG_TRY(ug_loader_device_bytes(s->train, &lc, &slots));
    total += slots;
    lc.shuffle = false;
    UG_TRY(ug_loader_device_bytes(s->train, &lc, &slots));
    total += slots;
    if (s->val) {
        UG_TRY(ug_loader_device_bytes(s->val, &lc, &slots));
        total += slots;
    }
    *bytes = total;
    return UG_OK;
}

/* The model's parameters (built once), the batch size, the optimizer, both
 * graphs compiled. */
static ug_status build_run(ug_trainer *t, const ug_dataset *train, const ug_dataset *val)
{
    const int64_t count = ug_dataset_count(train);
    if (!t->config.drop_last && t->batch > count)
        t->batch = count; /* one batch holds the whole set: no rows planned that no batch fills */
    trainer_graph first;
    UG_TRY(trainer_build_graph(t, t->batch ? t->batch : 1, true, &first));
    trainer_graph_free(&first);
    UG_TRY(trainer_make_optimizer(t, t->batch ? updates_per_epoch(t, count, t->batch) : 0));
    if (!t->batch) {
        batch_search s = {t, train, val};
        ug_trainer_batch_plan *p = &t->batch_plan;
        ug_memory_stats stats;
        UG_TRY(ug_memory_fit_batch(t->device, plan_batch, &s, 0.05, count, &t->batch, &p->bytes, &p->next_bytes));
        UG_TRY(ug_memory_get_stats(t->device, &stats));
        p->in_use = stats.bytes_in_use;
        p->limit = stats.limit;
        t->batch_searched = true;
    }
    t->epoch_updates = updates_per_epoch(t, count, t->batch);
    if (t->epoch_updates == 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create: the training set's %lld samples make "
                                                     "no whole batch of %lld (drop_last)",
                            (long long)count, (long long)t->batch);
    UG_TRY(trainer_make_optimizer(t, t->epoch_updates));
    UG_TRY(trainer_build_graph(t, t->batch, true, &t->train));
    UG_TRY(trainer_finish_graph(t, &t->train, true));
    UG_TRY(trainer_build_graph(t, t->batch, false, &t->eval));
    return trainer_finish_graph(t, &t->eval, false);
}

static ug_status open_run(ug_trainer *t, const ug_dataset *train, const ug_dataset *validation)
{
    const ug_trainer_config *c = &t->config;
    if (c->max_steps)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create: max_steps is %lld: it counts a token run's "
                                                     "updates (ug_trainer_create_tokens); a data set trains for epochs",
                            (long long)c->max_steps);
    ug_dataset *fit = NULL, *held = NULL;
    if (!validation && c->val_split > 0.0) {
        UG_TRY(ug_dataset_split(train, c->val_split, c->seed, &fit, &held));
        train = fit;
        validation = held;
    }
    t->features = ug_dataset_features(train);
    t->target_width = ug_dataset_target_width(train);
    ug_status st = UG_OK;
    if (validation && (ug_dataset_features(validation) != t->features ||
                       ug_dataset_target_width(validation) != t->target_width))
        st = ug_set_error(UG_ERR_SHAPE, "ug_trainer_create: the validation set's samples (%lld features, "
                                        "target width %lld) differ from the training set's (%lld, %lld)",
                          (long long)ug_dataset_features(validation),
                          (long long)ug_dataset_target_width(validation), (long long)t->features,
                          (long long)t->target_width);
    t->loader_config = ug_loader_default_config();
    t->loader_config.seed = c->seed;
    t->loader_config.x_dtype = t->compute;
    t->loader_config.threads = c->workers;
    t->loader_config.drop_last = c->drop_last;
    t->loader_config.device_convert = c->device_convert;
    t->batch = c->batch_size;
    if (st == UG_OK) st = ug_model_create(t->device, c->seed, &t->model);
    if (st == UG_OK) st = build_run(t, train, validation);
    ug_loader_config lc = t->loader_config;
    lc.batch_size = t->batch;
    if (c->comm) { /* each rank its part of every global batch */
        lc.shard_count = ug_comm_size(c->comm);
        lc.shard_index = ug_comm_rank(c->comm);
    }
    lc.augment = c->augment;
    if (st == UG_OK) st = ug_loader_create(train, t->device, &lc, &t->train_loader);
    lc.augment = (ug_image_augment){0}; /* evaluations see the images as they are */
    lc.shard_count = 0; /* evaluations run whole on every rank */
    lc.shuffle = false;
    lc.drop_last = false;
    if (st == UG_OK && validation) st = ug_loader_create(validation, t->device, &lc, &t->val_loader);
    ug_dataset_free(fit); /* the loaders keep what they read */
    ug_dataset_free(held);
    UG_TRY(st);
    UG_TRY(ug_checkpoint_create(&t->checkpoint));
    if (t->stage_comm) /* the file holds every stage's */
        ug_checkpoint_model_is_part(t->checkpoint);
    UG_TRY(ug_checkpoint_add_model(t->checkpoint, t->model));
    UG_TRY(ug_checkpoint_add_optimizer(t->checkpoint, t->optimizer));
    UG_TRY(ug_checkpoint_add_graph(t->checkpoint, "train", t->train.graph));
    UG_TRY(ug_checkpoint_add_loader(t->checkpoint, "train", t->train_loader));
    return c->keep > 1 ? ug_checkpoint_set_keep(t->checkpoint, c->keep) : UG_OK;
}

ug_status trainer_create(const char *op, ug_device *device, const trainer_sources *sources,
                         ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                         ug_comm *stage_comm, ug_trainer **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    const bool tokens = sources->train_tokens || sources->val_tokens;
    const bool no_train = tokens ? !sources->train_tokens : !sources->train;
    if (config && (config->devices || config->stages) && !stage_comm && !no_train && build) {
        if (config->comm && config->devices)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: give devices or comm, not both", op);
        UG_TRY(check_config(op, NULL, config));
        return trainer_replicas_create(op, device, sources, build, user, config, out);
    }
    if (!device || no_train || !build || !config)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                            !device ? "device" : no_train ? "the training set" : !build ? "build" : "config");
    UG_TRY(check_config(op, device, config));
    ug_trainer *t = ug_calloc(1, sizeof *t);
    if (!t)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: the trainer", op);
    t->config = *config;
    t->checkpoint_path = config->checkpoint ? ug_string_copy(config->checkpoint) : NULL;
    t->resume_path = config->resume ? ug_string_copy(config->resume) : NULL;
    t->config.checkpoint = t->checkpoint_path;
    t->config.resume = t->resume_path;
    t->build = build;
    t->user = user;
    t->device = device;
    t->stage_comm = stage_comm;
    t->compute = trainer_compute_precision(device, config->precision);
    t->best_val_loss = INFINITY;
    t->best_epoch = -1;
    ug_status st = UG_OK;
    if ((config->checkpoint && !t->checkpoint_path) || (config->resume && !t->resume_path))
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: the paths", op);
    else if (tokens)
        st = trainer_open_tokens(t, sources->train_tokens, sources->val_tokens);
    else
        st = open_run(t, sources->train, sources->validation);
    if (st == UG_OK && t->resume_path)
        st = trainer_resume(t);
    if (st == UG_OK && t->config.comm) /* the replicas start alike: rank 0's */
        st = ug_comm_broadcast_model(t->config.comm, t->model);
    if (st == UG_OK && t->config.comm)
        st = trainer_check_replicas(t);
    if (st == UG_OK && t->config.shard_optimizer) /* after resuming: each rank keeps its part of the state */
        st = ug_comm_shard_optimizer(t->config.comm, t->optimizer);
    if (st == UG_OK && t->config.comm)
        t->mixed_backends = ug_comm_ranks_differ(t->config.comm, device->info.backend);
    if (st == UG_OK)
        st = trainer_balance_start(t);
    if (st != UG_OK) {
        ug_trainer_free(t);
        return st;
    }
    *out = t;
    return UG_OK;
}

ug_status ug_trainer_create(ug_device *device, const ug_dataset *train, const ug_dataset *validation,
                            ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                            ug_trainer **out)
{
    const trainer_sources sources = {.train = train, .validation = validation};
    return trainer_create("ug_trainer_create", device, &sources, build, user, config, NULL, out);
}

/* What a step cannot take of a trainer's configuration: a batch size to
 * search for, or a schedule whose length is counted in epochs. */
static ug_status check_step_config(int64_t features, int64_t target_width, const ug_trainer_config *c)
{
    const ug_optimizer_config *o = &c->optimizer;
    const char *bad = NULL;
    if (features < 1 || target_width < 0)
        bad = features < 1 ? "features is below 1" : "target_width is negative";
    else if (c->block_size > 0 && (features != c->block_size || target_width != 0))
        bad = "a token step (block_size above 0) takes windows: features must be block_size, target_width 0";
    else if (c->batch_size == 0)
        bad = "batch_size is 0: a step searches for no batch size; give its batches' rows";
    else if (o->schedule == UG_SCHEDULE_COSINE && o->total_steps == 0)
        bad = "the cosine schedule's total_steps is 0 (the run's updates), and a step has no run: give it";
    else if (o->schedule == UG_SCHEDULE_STEP && o->step_size == 0)
        bad = "the step schedule's step_size is 0 (an epoch's updates), and a step has no epochs: give it";
    return bad ? ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_create: %s", bad) : UG_OK;
}

ug_status ug_train_step_create(ug_device *device, int64_t features, int64_t target_width, ug_trainer_build_fn build,
                               void *user, const ug_trainer_config *config, ug_train_step **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_create: out is NULL");
    *out = NULL;
    if (!device || !build || !config)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_train_step_create: %s is NULL",
                            !device ? "device" : !build ? "build" : "config");
    UG_TRY(check_config("ug_train_step_create", device, config));
    UG_TRY(check_step_config(features, target_width, config));
    ug_train_step *s = ug_calloc(1, sizeof *s);
    ug_trainer *t = s ? ug_calloc(1, sizeof *t) : NULL;
    if (!t) {
        free(s);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_train_step_create: the step");
    }
    s->trainer = t;
    t->config = *config;
    /* Nothing of the caller's is kept beyond what a step uses. */
    t->config.checkpoint = t->config.resume = NULL;
    t->config.on_step = NULL;
    t->config.on_epoch = NULL;
    t->config.user = NULL;
    t->config.stop = NULL;
    t->build = build;
    t->user = user;
    t->device = device;
    t->token_windows = config->block_size > 0;
    t->compute = trainer_compute_precision(device, config->precision);
    t->features = features;
    t->target_width = target_width;
    t->batch = config->batch_size;
    t->best_val_loss = INFINITY;
    t->best_epoch = -1;
    ug_comm *comm = config->comm;
    ug_status st = ug_model_create(device, config->seed, &t->model);
    /* The build creates the parameters the optimizer then takes, as in
     * build_run; 1 update an epoch counts in no schedule, whose lengths
     * are given (check_step_config). */
    if (st == UG_OK) st = trainer_build_graph(t, t->batch, true, &t->train);
    if (st == UG_OK) st = trainer_make_optimizer(t, 1);
    if (st == UG_OK) st = trainer_finish_graph(t, &t->train, true);
    if (st == UG_OK && comm) /* the replicas start alike: rank 0's */
        st = ug_comm_broadcast_model(comm, t->model);
    if (st == UG_OK && comm)
        t->mixed_backends = ug_comm_ranks_differ(comm, device->info.backend);
    if (st != UG_OK) {
        ug_train_step_free(s);
        return st;
    }
    *out = s;
    return UG_OK;
}

ug_model *ug_train_step_model(const ug_train_step *s) { return s ? s->trainer->model : NULL; }
ug_graph *ug_train_step_graph(const ug_train_step *s) { return s ? s->trainer->train.graph : NULL; }

void ug_train_step_free(ug_train_step *s)
{
    if (!s)
        return;
    ug_trainer_free(s->trainer);
    free(s);
}

ug_status trainer_eval_batch(ug_trainer *t, const ug_tensor *x, const ug_tensor *y)
{
    if (t->eval.pipeline) { /* every stage its part, the batch whole */
        UG_TRY(ug_pipeline_bind(t->eval.pipeline, t->eval.x, x));
        UG_TRY(ug_pipeline_bind(t->eval.pipeline, t->eval.y, y));
        return ug_pipeline_run(t->eval.pipeline);
    }
    UG_TRY(ug_graph_bind(t->eval.graph, t->eval.x, x));
    UG_TRY(ug_graph_bind(t->eval.graph, t->eval.y, y));
    return ug_graph_run_forward(t->eval.graph);
}

ug_status trainer_evaluate_loader(ug_trainer *t, ug_loader *loader, ug_trainer_metrics *out)
{
    int64_t samples = 0;
    UG_TRY(ug_graph_clear_sums(t->eval.graph));
    UG_TRY(ug_loader_start_epoch(loader, 0));
    for (bool done = false;;) {
        ug_batch b;
        UG_TRY(ug_loader_next(loader, &b, &done));
        if (done)
            break;
        UG_TRY(trainer_eval_batch(t, b.x, b.y));
        samples += b.count;
    }
    return trainer_read_metrics(t, &t->eval, samples, true, out);
}

ug_status ug_trainer_evaluate(ug_trainer *t, const ug_dataset *data, ug_trainer_metrics *out)
{
    if (!t || !data || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_evaluate: %s is NULL",
                            !t ? "trainer" : !data ? "data" : "out");
    if (t->train_tokens)
        return ug_set_error(UG_ERR_STATE, "ug_trainer_evaluate: this run trains on tokens; evaluate a token set "
                                          "with ug_trainer_evaluate_tokens");
    if (ug_dataset_features(data) != t->features || ug_dataset_target_width(data) != t->target_width)
        return ug_set_error(UG_ERR_SHAPE, "ug_trainer_evaluate: the data set's samples (%lld features, target "
                                          "width %lld) are not the model's (%lld, %lld)",
                            (long long)ug_dataset_features(data), (long long)ug_dataset_target_width(data),
                            (long long)t->features, (long long)t->target_width);
    if (t->replicas && t->stage_comm) /* the other stages evaluate with this one */
        UG_TRY(trainer_stages_evaluate(t, data, NULL));
    ug_loader_config lc = t->loader_config;
    lc.batch_size = t->batch;
    lc.shuffle = false;
    lc.drop_last = false;
    ug_loader *loader = NULL;
    UG_TRY(ug_loader_create(data, t->device, &lc, &loader));
    bool flushed = trainer_denormals_begin(t);
    ug_status st = trainer_evaluate_loader(t, loader, out);
    ug_set_flush_denormal(flushed);
    ug_loader_free(loader);
    return st;
}

ug_status ug_trainer_last_loss(ug_trainer *t, float *loss)
{
    if (!t || !loss)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_last_loss: %s is NULL", !t ? "trainer" : "loss");
    if (t->train.pipeline) /* the last stage holds it */
        return trainer_holds_loss(t) ? ug_pipeline_loss(t->train.pipeline, loss) : trainer_stages_last_loss(t, loss);
    return ug_graph_read(t->train.graph, t->train.loss, loss, sizeof *loss);
}

int64_t ug_trainer_best_epoch(const ug_trainer *t, double *val_loss)
{
    if (val_loss)
        *val_loss = t ? t->best_val_loss : INFINITY;
    return t ? t->best_epoch : -1;
}

bool ug_trainer_batch_search(const ug_trainer *t, ug_trainer_batch_plan *out)
{
    if (!t || !out || !t->batch_searched)
        return false;
    *out = t->batch_plan;
    return true;
}

bool ug_trainer_stopped(const ug_trainer *t) { return t && t->stopped; }
ug_checkpoint *ug_trainer_checkpoint(const ug_trainer *t) { return t ? t->checkpoint : NULL; }
ug_model *ug_trainer_model(const ug_trainer *t) { return t ? t->model : NULL; }
ug_optimizer *ug_trainer_optimizer(const ug_trainer *t) { return t ? t->optimizer : NULL; }
ug_graph *ug_trainer_graph(const ug_trainer *t) { return t ? t->train.graph : NULL; }
int64_t ug_trainer_batch_size(const ug_trainer *t) { return t ? t->batch : 0; }
int64_t ug_trainer_epoch_updates(const ug_trainer *t) { return t ? t->epoch_updates : 0; }

int64_t ug_trainer_epochs_done(const ug_trainer *t)
{
    if (!t || !t->train_loader)
        return 0;
    int64_t epoch = 0, next = 0;
    ug_loader_position(t->train_loader, &epoch, &next);
    return epoch < 0 ? 0 : epoch;
}

void ug_trainer_free(ug_trainer *t)
{
    if (!t)
        return;
    trainer_replicas *replicas = t->replicas; /* ended after rank 0's trainer, which uses its device */
    ug_checkpoint_free(t->checkpoint);
    ug_loader_free(t->train_loader);
    ug_loader_free(t->val_loader);
    ug_token_sampler_free(t->train_sampler);
    ug_token_sampler_free(t->val_sampler);
    ug_tokens_free(t->train_tokens);
    ug_tokens_free(t->val_tokens);
    trainer_graph_free(&t->train);
    trainer_graph_free(&t->eval);
    ug_optimizer_free(t->optimizer);
    ug_model_free(t->model);
    trainer_free_best(t);
    free(t->confusion);
    ug_tensor_free(t->stop_flag);
    free(t->checkpoint_path);
    free(t->resume_path);
    free(t);
    trainer_replicas_free(replicas);
}
