/* What a trainer's checkpoint keeps beyond its parts (the model, the
 * optimizer's state, the training graph and loader): the configuration,
 * field by field as "trainer.<field>" strings, and the trainer's own
 * position (early stopping, batches trained). Resuming refuses a
 * configuration that would change the schedule or the numbers, naming the
 * field, unless the caller overrides it. The best weights of early
 * stopping are kept on the host and beside the checkpoint (PATH.best). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/comm/pipeline_internal.h"
#include "core/data/internal.h"
#include "core/train/trainer_internal.h"

enum { FIELD_TEXT = 48 };

typedef struct field {
    const char *name;
    char text[FIELD_TEXT];
} field;

/* The fields a resume must agree on, as they are in effect (the batch
 * size chosen, the schedule's total updates), printed exactly. */
static int config_fields(const ug_trainer *t, field *f)
{
    const ug_optimizer_config o = ug_optimizer_get_config(t->optimizer);
    int n = 0;
#define INT_FIELD(label, value) snprintf(f[n].text, FIELD_TEXT, "%lld", (long long)(value)), f[n++].name = label
#define REAL_FIELD(label, value) snprintf(f[n].text, FIELD_TEXT, "%.9g", (double)(value)), f[n++].name = label
    INT_FIELD("batch_size", t->batch);
    INT_FIELD("accumulate", t->config.accumulate);
    snprintf(f[n].text, FIELD_TEXT, "%s", ug_dtype_name(t->config.precision)), f[n++].name = "precision";
    INT_FIELD("seed", t->config.seed);
    REAL_FIELD("val_split", t->config.val_split);
    INT_FIELD("drop_last", t->config.drop_last);
    INT_FIELD("optimizer.type", o.type);
    REAL_FIELD("optimizer.lr", o.lr);
    REAL_FIELD("optimizer.weight_decay", o.weight_decay);
    REAL_FIELD("optimizer.momentum", o.momentum);
    REAL_FIELD("optimizer.dampening", o.dampening);
    INT_FIELD("optimizer.nesterov", o.nesterov);
    REAL_FIELD("optimizer.beta1", o.beta1);
    REAL_FIELD("optimizer.beta2", o.beta2);
    REAL_FIELD("optimizer.eps", o.eps);
    INT_FIELD("optimizer.schedule", o.schedule);
    INT_FIELD("optimizer.step_size", o.step_size);
    REAL_FIELD("optimizer.gamma", o.gamma);
    INT_FIELD("optimizer.warmup_steps", o.warmup_steps);
    INT_FIELD("optimizer.total_steps", o.total_steps);
    REAL_FIELD("optimizer.min_lr", o.min_lr);
    REAL_FIELD("optimizer.max_grad_norm", o.max_grad_norm);
    const ug_image_augment *a = &t->config.augment;
    snprintf(f[n].text, FIELD_TEXT, "%lld %lld %lld %d %.9g", (long long)a->channels, (long long)a->height,
             (long long)a->width, a->crop_padding, (double)a->flip);
    f[n++].name = "augment";
    if (t->train_tokens) { /* the windows drawn: their length, and the set they are drawn from */
        INT_FIELD("block_size", t->config.block_size);
        snprintf(f[n].text, FIELD_TEXT, "%lld %lld", (long long)ug_tokens_count(t->train_tokens),
                 (long long)ug_tokens_vocab_size(t->train_tokens)); /* count, vocabulary */
        f[n++].name = "tokens";
    }
#undef INT_FIELD
#undef REAL_FIELD
    return n;
}

enum { MAX_FIELDS = 48 };
_Static_assert((int)FIELD_TEXT <= (int)UG_COMM_FIELD_TEXT, "a field's text must reach the other ranks whole");

ug_status trainer_check_replicas(const ug_trainer *t)
{
    /* What a resume must match, and what the replicas must share beyond
     * it: the data order (the seed, the updates an epoch, i.e. the data
     * set's size), how long the run goes and when it stops, and every
     * setting of the loss scaler. Any difference would train some samples
     * twice and others never, or let the replicas drift apart. */
    field f[MAX_FIELDS];
    int n = config_fields(t, f);
    const ug_trainer_config *c = &t->config;
    const ug_loss_scaling ls = ug_optimizer_get_config(t->optimizer).loss_scaling;
#define INT_FIELD(label, value) snprintf(f[n].text, FIELD_TEXT, "%lld", (long long)(value)), f[n++].name = label
#define REAL_FIELD(label, value) snprintf(f[n].text, FIELD_TEXT, "%.9g", (double)(value)), f[n++].name = label
    INT_FIELD("epochs", c->epochs);
    INT_FIELD("updates an epoch", t->epoch_updates);
    INT_FIELD("total updates", t->total_updates);
    INT_FIELD("patience", c->patience);
    INT_FIELD("loss_scaling.enabled", ls.enabled);
    REAL_FIELD("loss_scaling.init_scale", ls.init_scale);
    REAL_FIELD("loss_scaling.growth_factor", ls.growth_factor);
    REAL_FIELD("loss_scaling.backoff_factor", ls.backoff_factor);
    INT_FIELD("loss_scaling.growth_interval", ls.growth_interval);
    if (t->train_tokens) { /* the steps, and when the ranks evaluate and stop together */
        INT_FIELD("max_steps", c->max_steps);
        INT_FIELD("eval_every", c->eval_every);
        INT_FIELD("eval_iters", c->eval_iters);
    }
#undef INT_FIELD
#undef REAL_FIELD
    const char *names[MAX_FIELDS], *texts[MAX_FIELDS];
    for (int i = 0; i < n; i++) {
        names[i] = f[i].name;
        texts[i] = f[i].text;
    }
    return ug_comm_check_same(c->comm, n, names, texts, "ug_trainer_create");
}

static ug_status set_string(ug_trainer *t, const char *name, const char *value)
{
    char key[64];
    snprintf(key, sizeof key, "trainer.%s", name);
    return ug_checkpoint_set_string(t->checkpoint, key, value);
}

ug_status trainer_save_state(ug_trainer *t)
{
    field f[MAX_FIELDS];
    const int n = config_fields(t, f);
    for (int i = 0; i < n; i++)
        UG_TRY(set_string(t, f[i].name, f[i].text));
    char text[96];
    snprintf(text, sizeof text, "%.17g %lld %lld", t->best_val_loss, (long long)t->best_epoch,
             (long long)t->bad_epochs);
    UG_TRY(set_string(t, "early_stopping", text));
    if (t->train_tokens) { /* where the training sums since the last report start */
        snprintf(text, sizeof text, "%lld", (long long)t->report_batch);
        UG_TRY(set_string(t, "report_batch", text));
    }
    snprintf(text, sizeof text, "%lld", (long long)t->global_batch);
    return set_string(t, "global_batch", text);
}

static const char *saved_string(const ug_trainer *t, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "trainer.%s", name);
    return ug_checkpoint_string(t->checkpoint, key);
}

/* The run's configuration against the checkpoint's, field by field. */
static ug_status check_saved_config(const ug_trainer *t)
{
    field f[MAX_FIELDS];
    const int n = config_fields(t, f);
    for (int i = 0; i < n; i++) {
        const char *saved = saved_string(t, f[i].name);
        if (!saved && !strcmp(f[i].name, "augment")) /* saved before augmentation existed: none */
            saved = "0 0 0 0 0";
        if (!saved)
            return ug_set_error(UG_ERR_FORMAT, "trainer: %s holds no trainer.%s: it was not saved by a trainer",
                                t->config.resume, f[i].name);
        if (strcmp(saved, f[i].text) && !t->config.resume_override)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "trainer: %s was saved with %s %s, and this run has %s: resuming would change "
                                "the run (set resume_override to continue with the new value)",
                                t->config.resume, f[i].name, saved, f[i].text);
    }
    return UG_OK;
}

static void best_path(const char *checkpoint, char *buf, size_t len) { snprintf(buf, len, "%s.best", checkpoint); }

static ug_status take_weights(ug_trainer *t);

/* The best weights beside the checkpoint, into the model and kept. */
static ug_status load_best(ug_trainer *t)
{
    char path[4096];
    best_path(t->config.resume, path, sizeof path);
    if (access(path, R_OK) != 0)
        return UG_OK;
    ug_checkpoint *best = NULL;
    ug_status st = ug_checkpoint_create(&best);
    if (st == UG_OK) st = ug_checkpoint_add_model(best, t->model);
    if (st == UG_OK) st = ug_checkpoint_load(best, path);
    if (st == UG_OK) st = take_weights(t);
    ug_checkpoint_free(best);
    return st;
}

ug_status trainer_resume(ug_trainer *t)
{
    /* The best weights first: the checkpoint then sets the current ones. */
    if (t->config.patience)
        UG_TRY(load_best(t));
    UG_TRY(ug_checkpoint_load(t->checkpoint, t->config.resume));
    UG_TRY(check_saved_config(t));
    double best = INFINITY;
    long long best_epoch = -1, bad = 0, batches = 0;
    const char *early = saved_string(t, "early_stopping"), *global = saved_string(t, "global_batch");
    if (!early || sscanf(early, "%lf %lld %lld", &best, &best_epoch, &bad) != 3 || !global ||
        sscanf(global, "%lld", &batches) != 1)
        return ug_set_error(UG_ERR_FORMAT, "trainer: %s: trainer.early_stopping or trainer.global_batch is "
                                           "missing or not numbers", t->config.resume);
    if (t->train_tokens) {
        /* A token run's position is its micro-batches trained, whole
         * updates of them (checkpoints come between updates), and the
         * training sums it restored hold those since the last report:
         * this rank's rows of each (the shares start equal again). */
        const char *report = saved_string(t, "report_batch");
        long long since = -1;
        if (!report || sscanf(report, "%lld", &since) != 1 || since < 0 || batches < since ||
            batches % t->config.accumulate)
            return ug_set_error(UG_ERR_FORMAT, "trainer: %s: trainer.report_batch or trainer.global_batch is "
                                               "missing or not a token run's position",
                                t->config.resume);
        int64_t first = 0, rows = 0;
        const ug_comm *comm = t->config.comm;
        ug_shard_rows(comm ? ug_comm_size(comm) : 1, comm ? ug_comm_rank(comm) : 0, NULL, t->batch, &first, &rows);
        t->report_batch = since;
        t->report_samples = (batches - since) * rows;
    }
    t->best_val_loss = best;
    t->best_epoch = best_epoch;
    t->bad_epochs = bad;
    t->global_batch = batches;
    return UG_OK;
}

void trainer_free_best(ug_trainer *t)
{
    for (int i = 0; i < t->best_count; i++)
        free(t->best_values[i]);
    free(t->best_values);
    free(t->best_bytes);
    t->best_values = NULL;
    t->best_bytes = NULL;
    t->best_count = 0;
}

/* The model's tensors now, on the host. */
static ug_status take_weights(ug_trainer *t)
{
    trainer_free_best(t);
    const int count = ug_model_param_count(t->model);
    t->best_values = ug_calloc((size_t)count ? (size_t)count : 1, sizeof *t->best_values);
    t->best_bytes = ug_calloc((size_t)count ? (size_t)count : 1, sizeof *t->best_bytes);
    if (!t->best_values || !t->best_bytes) {
        trainer_free_best(t);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: keeping the best weights");
    }
    t->best_count = count;
    for (int i = 0; i < count; i++) {
        const char *name = NULL;
        ug_tensor *tensor = NULL;
        ug_status st = ug_model_param_at(t->model, i, &name, &tensor);
        if (st == UG_OK) {
            t->best_bytes[i] = ug_tensor_nbytes(tensor);
            t->best_values[i] = ug_malloc(t->best_bytes[i] ? t->best_bytes[i] : 1);
            st = t->best_values[i] ? ug_model_read_param(t->model, name, t->best_values[i], t->best_bytes[i])
                                   : ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: keeping the best weights");
        }
        if (st != UG_OK) {
            trainer_free_best(t);
            return st;
        }
    }
    return UG_OK;
}

/* The best weights so far: on the host and, with a checkpoint path, in
 * PATH.best (a failed save there is not fatal: the run's own checkpoint
 * is what resumes). */
ug_status trainer_keep_best(ug_trainer *t)
{
    UG_TRY(take_weights(t));
    if (!t->config.checkpoint || (t->config.comm && ug_comm_rank(t->config.comm) != 0))
        return UG_OK; /* the first replica writes */
    /* Stages: the whole model, every stage's part gathered on stage 0 (a
     * collective of the stages, which all keep their best at once). */
    ug_pipeline_state staged = {0};
    if (t->stage_comm && ug_pipeline_gather_state(t->stage_comm, t->model, t->optimizer, t->train.graph, "train",
                                                  &staged) != UG_OK)
        return UG_OK;
    if (!t->stage_comm || staged.model) {
        char path[4096];
        best_path(t->config.checkpoint, path, sizeof path);
        ug_checkpoint *best = NULL;
        if (ug_checkpoint_create(&best) == UG_OK &&
            ug_checkpoint_add_model(best, staged.model ? staged.model : t->model) == UG_OK)
            ug_checkpoint_save(best, path);
        ug_checkpoint_free(best);
    }
    ug_pipeline_state_free(&staged);
    return UG_OK;
}

ug_status trainer_restore_best(ug_trainer *t)
{
    for (int i = 0; i < t->best_count; i++) {
        const char *name = NULL;
        ug_tensor *tensor = NULL;
        UG_TRY(ug_model_param_at(t->model, i, &name, &tensor));
        UG_TRY(ug_model_write_param(t->model, name, t->best_values[i], t->best_bytes[i]));
    }
    return UG_OK;
}
