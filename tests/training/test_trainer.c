/* The trainer (trainer.h): metrics against a hand computation, training
 * and evaluation sums kept apart, resuming bit for bit after a save at an
 * epoch's end and between updates, a resume whose schedule differs
 * (refused, then accepted with the override), early stopping, the batch
 * size search, the callbacks, a step on its own training as fit does, and
 * refused configurations. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_support.h"
#include "trainer_problem.h"

/* Checks that expr returned UG_OK; true when it did. */
#define OK(expr) CHECK_STATUS(expr, UG_OK)
#define CHECK_NEAR(got, want, tol)                                                                   \
    CHECK_MSG(fabs((double)(got) - (double)(want)) <= (tol) * (1.0 + fabs((double)(want))),          \
              "%s is %.9g, expected %.9g", #got, (double)(got), (double)(want))

/* ---- a model whose logits are its inputs (plus a zero bias) ---- */

/* With the caller's own metric "logit sum": each sample's logits summed. */
static ug_status build_identity(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    ug_tensor *bias = NULL;
    ug_value *b = NULL, *rows = NULL;
    const int64_t classes = ug_value_dim(x, 1);
    ug_status st = ug_model_param(ug_graph_model(g), "bias", 1, &classes, UG_INIT_CONSTANT, 0.0f, &bias);
    if (st == UG_OK) st = ug_graph_param(g, bias, &b);
    if (st == UG_OK) st = ug_g_add(g, x, b, &out->logits);
    if (st == UG_OK) st = ug_g_sum(g, out->logits, 1, false, &rows);
    if (st == UG_OK) st = ug_g_sum(g, rows, 0, true, &out->metrics[0]);
    out->metric_names[0] = "logit sum";
    out->metric_count = 1;
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* Six samples of three classes (logits = x), hand-scored: predictions 0, 1,
 * 2, 2, 1, 1 against labels 0, 2, 1, 2, 0, 1, so 3 right; the label is
 * among the two largest logits for all but the third. */
static const float hand_x[6][3] = {{3, 1, 2}, {1, 3, 2}, {2, 1, 3}, {0, 0, 5}, {4, 5, 1}, {1, 2, 0}};
static const int32_t hand_labels[6] = {0, 2, 1, 2, 0, 1};

TS_TEST(metrics_by_hand)
{
    ug_dataset *data = NULL;
    REQUIRE_OK(ug_dataset_from_arrays(6, 3, &hand_x[0][0], hand_labels, &data));
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = 4; /* a full batch and a partial one */
    c.top_k = 2;
    c.confusion = true;
    ug_trainer *t = NULL;
    ug_status st = ug_trainer_create(dev, data, NULL, build_identity, NULL, &c, &t);
    OK(st);
    ug_trainer_metrics m;
    if (st == UG_OK && OK(ug_trainer_evaluate(t, data, &m))) {
        double loss = 0.0;
        for (int i = 0; i < 6; i++) {
            double sum = 0.0;
            for (int k = 0; k < 3; k++)
                sum += exp((double)hand_x[i][k]);
            loss += log(sum) - hand_x[i][hand_labels[i]];
        }
        CHECK_EQ_I64(m.samples, 6);
        CHECK_NEAR(m.loss, loss / 6.0, 1e-6);
        CHECK_EQ_I64(m.metric_count, 1);
        CHECK(m.metric_count == 1 && !strcmp(m.metric_names[0], "logit sum"));
        CHECK(m.metrics[0] == 36.0 / 6.0); /* the rows of hand_x sum to 6, 6, 6, 5, 10, 3 */
        CHECK(m.accuracy == 0.5);
        CHECK(m.top_k_accuracy == 5.0 / 6.0);
        CHECK_EQ_I64(m.classes, 3);
        static const int64_t want[9] = {1, 1, 0, 0, 1, 1, 0, 1, 1}; /* rows: true label */
        for (int i = 0; m.confusion && i < 9; i++)
            CHECK_MSG(m.confusion[i] == want[i], "confusion[%d][%d] is %lld, by hand %lld", i / 3, i % 3,
                      (long long)m.confusion[i], (long long)want[i]);
        CHECK(m.confusion != NULL);
    }
    ug_trainer_free(t);
    ug_dataset_free(data);
}

/* The stop flag, set by a callback at a chosen point. */
static volatile sig_atomic_t stop_flag;
static int64_t stop_after_epoch = -1, stop_after_batch = -1;

static ug_status stop_on_epoch(const ug_trainer_epoch *e, void *user)
{
    (void)user;
    if (e->epoch == stop_after_epoch)
        stop_flag = 1;
    return UG_OK;
}

static ug_status stop_on_step(const ug_trainer_step *s, void *user)
{
    (void)user;
    if (s->global_batch == stop_after_batch)
        stop_flag = 1;
    return UG_OK;
}

/* Trains with c, returning the parameters (tracked) and their count. */
static void check_resumes_exactly(ug_device *dev, bool at_epoch_end, bool augmented)
{
    th_context("%s%s", at_epoch_end ? "stopped at an epoch's end" : "stopped between updates",
               augmented ? ", augmented on the device" : "");
    char dir[] = "/tmp/ug-test-trainer-XXXXXX", path[128];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    ug_dataset *data = augmented ? byte_problem(3) : problem(3);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    if (augmented) {
        c.device_convert = true;
        c.augment = (ug_image_augment){.channels = 1, .height = 2, .width = 3, .crop_padding = 1, .flip = 0.5f};
    }
    int64_t n_whole = 0, n_resumed = 0;
    float *whole = train_params(dev, data, &c, &n_whole, NULL);

    c.checkpoint = path;
    c.stop = &stop_flag;
    stop_flag = 0;
    stop_after_epoch = at_epoch_end ? 0 : -1;
    stop_after_batch = at_epoch_end ? -1 : 8; /* the 4th update of 6 an epoch */
    c.on_epoch = stop_on_epoch;
    c.on_step = stop_on_step;
    bool stopped = false;
    train_params(dev, data, &c, &n_resumed, &stopped);
    CHECK_MSG(stopped, "the run did not stop on the flag");
    stop_flag = 0;
    c.resume = path;
    float *resumed = train_params(dev, data, &c, &n_resumed, NULL);
    if (whole && resumed) {
        CHECK_EQ_I64(n_resumed, n_whole);
        CHECK_MSG(memcmp(whole, resumed, (size_t)n_whole * sizeof *whole) == 0,
                  "the resumed run's parameters differ from the uninterrupted run's");
    }
    char best[160];
    snprintf(best, sizeof best, "%s.best", path);
    unlink(best);
    unlink(path);
    rmdir(dir);
    ug_dataset_free(data);
}

TS_TEST(resume_at_epoch_end) { check_resumes_exactly(dev, true, false); }
TS_TEST(resume_between_updates) { check_resumes_exactly(dev, false, false); }
/* The crops and flips drawn again as they were. */
TS_TEST(resume_augmented) { check_resumes_exactly(dev, false, true); }

/* Bytes converted on the device train exactly as the host's conversion. */
TS_TEST(device_conversion_trains_as_host)
{
    ug_dataset *data = byte_problem(4);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    int64_t n_host = 0, n_device = 0;
    float *host = train_params(dev, data, &c, &n_host, NULL);
    c.device_convert = true;
    float *device = train_params(dev, data, &c, &n_device, NULL);
    if (host && device)
        CHECK_MSG(n_host == n_device && !memcmp(host, device, (size_t)n_host * sizeof *host),
                  "converted on the device, the parameters differ from the host's conversion");
    ug_dataset_free(data);
}

TS_TEST(resume_with_another_schedule)
{
    char dir[] = "/tmp/ug-test-trainer-XXXXXX", path[128];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    ug_dataset *data = problem(5);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    c.epochs = 1;
    c.checkpoint = path;
    ug_trainer *t = NULL;
    /* The caller's own string rides in the trainer's checkpoint. */
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        OK(ug_checkpoint_set_string(ug_trainer_checkpoint(t), "caller.note", "kept"));
        OK(ug_trainer_fit(t));
    }
    ug_trainer_free(t);
    t = NULL;
    c.resume = path;
    /* More epochs stretch the cosine schedule's total updates. */
    c.epochs = 2;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("optimizer.total_steps 3", "has 6", "resume_override");
    CHECK(t == NULL);
    c.epochs = 1;
    c.optimizer.lr = 0.02f;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("optimizer.lr 0.00999999978", "0.0199999996");
    c.resume_override = true;
    c.epochs = 2;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        const char *note = ug_checkpoint_string(ug_trainer_checkpoint(t), "caller.note");
        CHECK_MSG(note && !strcmp(note, "kept"), "the caller's string is %s after the resume", note ? note : "gone");
        CHECK_EQ_I64(ug_trainer_epochs_done(t), 1);
        CHECK_EQ_I64(ug_optimizer_steps(ug_trainer_optimizer(t)), 3); /* 192 samples, 6 batches of 32, 2 a step */
        OK(ug_trainer_fit(t));
        CHECK_EQ_I64(ug_optimizer_steps(ug_trainer_optimizer(t)), 6);
    }
    ug_trainer_free(t);
    unlink(path);
    rmdir(dir);
    ug_dataset_free(data);
}

/* ---- training and evaluation sums apart ---- */

typedef struct sums_seen {
    double loss_rows;         /* sum over batches of loss x rows */
    int64_t rows;
    ug_trainer_epoch epoch;
    int epochs;
    double best_val_loss;     /* the lowest validation loss reported */
    int64_t best_epoch;
} sums_seen;

static ug_status note_step(const ug_trainer_step *s, void *user)
{
    sums_seen *seen = user;
    const int64_t rows = s->samples - seen->rows;
    seen->loss_rows += (double)s->loss * (double)rows;
    seen->rows = s->samples;
    return UG_OK;
}

static ug_status note_epoch(const ug_trainer_epoch *e, void *user)
{
    sums_seen *seen = user;
    seen->epoch = *e;
    if (e->best) {
        seen->best_val_loss = e->validation.loss;
        seen->best_epoch = e->epoch;
    }
    seen->epochs++;
    return UG_OK;
}

TS_TEST(training_and_evaluation_sums_apart)
{
    ug_dataset *data = problem(11), *train = NULL, *val = NULL;
    REQUIRE(data);
    REQUIRE_OK(ug_dataset_split(data, 0.25, 1, &train, &val));
    ug_trainer_config c = mlp_config();
    c.epochs = 1;
    c.accumulate = 1;
    c.val_split = 0;
    sums_seen seen = {0};
    c.user = &seen;
    c.on_step = note_step;
    c.on_epoch = note_epoch;
    ug_trainer *t = NULL;
    ug_trainer_metrics again;
    if (OK(ug_trainer_create(dev, train, val, build_mlp, NULL, &c, &t)) && OK(ug_trainer_fit(t)) &&
        OK(ug_trainer_evaluate(t, val, &again))) {
        CHECK(seen.epochs == 1);
        /* The epoch's training loss is the mean of its batches' losses
         * (read each step), untouched by the validation after it. */
        CHECK_EQ_I64(seen.epoch.train.samples, ug_dataset_count(train));
        CHECK_NEAR(seen.epoch.train.loss, seen.loss_rows / (double)seen.rows, 1e-6);
        /* Validation sees only the validation set; evaluated again, alone,
         * it gives the same figures. */
        CHECK_EQ_I64(seen.epoch.validation.samples, ug_dataset_count(val));
        CHECK_NEAR(seen.epoch.validation.loss, again.loss, 1e-6);
        CHECK(seen.epoch.validation.accuracy == again.accuracy);
    }
    ug_trainer_free(t);
    ug_dataset_free(train);
    ug_dataset_free(val);
    ug_dataset_free(data);
}

/* ---- early stopping ---- */

TS_TEST(early_stopping_restores_the_best)
{
    ug_dataset *data = problem(13);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    c.epochs = 40;
    c.optimizer.schedule = UG_SCHEDULE_CONSTANT;
    c.optimizer.warmup_steps = 0;
    c.optimizer.lr = 0.3f; /* too high: the validation loss soon stops falling */
    c.patience = 2;
    sums_seen seen = {0};
    c.user = &seen;
    c.on_epoch = note_epoch;
    ug_trainer *t = NULL;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t)) && OK(ug_trainer_fit(t))) {
        CHECK_MSG(seen.epochs < 40, "no early stop in %d epochs", seen.epochs);
        CHECK_MSG(seen.epoch.validation.loss > seen.best_val_loss, "the last epoch was the best");
        double best = 0.0;
        CHECK_EQ_I64(ug_trainer_best_epoch(t, &best), seen.best_epoch);
        CHECK(best == seen.best_val_loss);
        /* The restored weights score the best epoch's validation loss. */
        ug_dataset *train = NULL, *val = NULL;
        ug_trainer_metrics m;
        if (OK(ug_dataset_split(data, c.val_split, c.seed, &train, &val)) && OK(ug_trainer_evaluate(t, val, &m)))
            CHECK_NEAR(m.loss, seen.best_val_loss, 1e-6);
        ug_dataset_free(train);
        ug_dataset_free(val);
    }
    ug_trainer_free(t);
    ug_dataset_free(data);
}

/* ---- the batch size search ---- */

TS_TEST(batch_size_search)
{
    ug_dataset *data = problem(17);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    c.batch_size = 0;
    ug_trainer *t = NULL;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        const int64_t b = ug_trainer_batch_size(t);
        CHECK_MSG(b > 0 && (b & (b - 1)) == 0, "batch %lld is not a power of two", (long long)b);
        /* Everything fits: the largest power of two within the training part. */
        CHECK_EQ_I64(b, 128);
        CHECK_EQ_I64(ug_trainer_epoch_updates(t), 1); /* 192 samples: 2 batches, accumulated */
        /* What the search saw: the limit in force, a plan within it, and
         * no next power of two (the data set was reached first). */
        ug_trainer_batch_plan plan;
        ug_memory_stats stats;
        const bool searched = ug_trainer_batch_search(t, &plan);
        CHECK_MSG(searched, "no search reported for batch_size 0");
        if (searched && OK(ug_memory_get_stats(dev, &stats))) {
            CHECK_EQ_I64(plan.limit, stats.limit);
            CHECK(plan.bytes > 0 && plan.in_use + plan.bytes <= plan.limit);
            CHECK_EQ_I64(plan.next_bytes, 0);
        }
        OK(ug_trainer_fit(t));
    }
    ug_trainer_free(t);
    c.batch_size = 32;
    ug_trainer_batch_plan plan;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t)))
        CHECK_MSG(!ug_trainer_batch_search(t, &plan), "a search reported for a batch size given");
    ug_trainer_free(t);
    ug_dataset_free(data);
}

/* A batch larger than the training set is the set in one batch: its
 * rows, not the asked-for 2^24 (gigabytes of plan), and the same
 * parameters as a batch of exactly the set. */
TS_TEST(batch_larger_than_the_set)
{
    ug_dataset *data = problem(17);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    c.accumulate = 1;
    c.batch_size = (int64_t)1 << 24;
    ug_trainer *t = NULL;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        CHECK_EQ_I64(ug_trainer_batch_size(t), SAMPLES - SAMPLES / 5); /* the split's training part */
        CHECK_EQ_I64(ug_trainer_epoch_updates(t), 1);
    }
    ug_trainer_free(t);
    int64_t n_large = 0, n_exact = 0;
    float *large = train_params(dev, data, &c, &n_large, NULL);
    c.batch_size = SAMPLES - SAMPLES / 5;
    float *exact = train_params(dev, data, &c, &n_exact, NULL);
    if (large && exact)
        CHECK_MSG(n_large == n_exact && !memcmp(large, exact, (size_t)n_large * sizeof *large),
                  "a batch larger than the set trained other parameters than a batch of the set");
    c.drop_last = true; /* no whole batch: refused */
    c.batch_size = SAMPLES;
    CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT);
    CHECK(t == NULL);
    ug_dataset_free(data);
}

/* ---- callbacks ---- */

typedef struct step_seen {
    ug_trainer *trainer;
    float loss_in_step, last_loss;
    int epochs, calls;
    const char *save_error;
    char error_text[512];
} step_seen;

/* Reads the loss itself at the 3rd batch, then fails fit. */
static ug_status failing_step(const ug_trainer_step *s, void *user)
{
    step_seen *seen = user;
    if (s->global_batch < 3)
        return UG_OK;
    seen->loss_in_step = s->loss;
    ug_status st = ug_trainer_last_loss(seen->trainer, &seen->last_loss);
    return st != UG_OK ? st : UG_ERR_NUMERIC;
}

/* Fits its own trainer again from inside fit: refused, and that refusal
 * ends the outer fit. */
static ug_status fitting_again(const ug_trainer_step *s, void *user)
{
    (void)s;
    step_seen *seen = user;
    seen->calls++;
    return ug_trainer_fit(seen->trainer);
}

static ug_status epoch_save_error(const ug_trainer_epoch *e, void *user)
{
    step_seen *seen = user;
    seen->epochs++;
    seen->save_error = e->save_error;
    snprintf(seen->error_text, sizeof seen->error_text, "%s", e->save_error ? e->save_error : "");
    return UG_OK;
}

/* ---- denormals ---- */

/* What a step sees: the setting, and whether a denormal survives the
 * calling thread's arithmetic (2^-140 * 0.5 is 2^-141, or 0 flushed). */
typedef struct denormal_seen {
    int steps, flushed_setting, flushed_arithmetic;
} denormal_seen;

static ug_status note_denormals(const ug_trainer_step *s, void *user)
{
    (void)s;
    denormal_seen *seen = user;
    volatile float tiny = 0x1p-140f, half = 0.5f;
    seen->steps++;
    seen->flushed_setting += ug_flush_denormal();
    seen->flushed_arithmetic += tiny * half == 0.0f;
    return UG_OK;
}

TS_TEST(denormals_flushed_while_training)
{
    ug_dataset *data = problem(17);
    REQUIRE(data);
    if (!ug_set_flush_denormal(false)) {
        ug_dataset_free(data);
        th_skip("this processor cannot flush denormals");
        return;
    }
    for (int keep = 0; keep < 2; keep++) {
        th_context(keep ? "keep_denormals" : "by default");
        ug_trainer_config c = mlp_config();
        c.epochs = 1;
        c.keep_denormals = keep;
        denormal_seen seen = {0};
        c.user = &seen;
        c.on_step = note_denormals;
        ug_trainer *t = NULL;
        if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t)) && OK(ug_trainer_fit(t))) {
            CHECK(seen.steps > 0);
            CHECK_EQ_I64(seen.flushed_setting, keep ? 0 : seen.steps);
            CHECK_EQ_I64(seen.flushed_arithmetic, keep ? 0 : seen.steps);
        }
        /* The process's setting is back as it was. */
        CHECK(!ug_flush_denormal());
        volatile float tiny = 0x1p-140f, half = 0.5f;
        CHECK(tiny * half != 0.0f);
        ug_trainer_free(t);
    }
    ug_dataset_free(data);
}

TS_TEST(callbacks)
{
    ug_dataset *data = problem(23);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    step_seen seen = {0};
    c.user = &seen;
    c.on_step = failing_step;
    ug_trainer *t = NULL;
    /* A callback's failure ends fit with its status; the loss it read is
     * the one the trainer reports (log_every 1). */
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        seen.trainer = t;
        /* It returns a bare status: the message names the callback, not
         * an earlier, unrelated failure. */
        CHECK_STATUS(ug_trainer_fit(NULL), UG_ERR_INVALID_ARGUMENT);
        if (CHECK_STATUS(ug_trainer_fit(t), UG_ERR_NUMERIC))
            CHECK_ERROR_HAS("on_step returned UG_ERR_NUMERIC without a message");
        CHECK(isfinite(seen.last_loss) && seen.last_loss == seen.loss_in_step);
        CHECK_EQ_I64(ug_optimizer_steps(ug_trainer_optimizer(t)), 1); /* accumulate 2: batches 1-2, then stopped */
    }
    ug_trainer_free(t);
    t = NULL;
    c.on_step = fitting_again;
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        seen.trainer = t;
        if (CHECK_STATUS(ug_trainer_fit(t), UG_ERR_STATE))
            CHECK_ERROR_HAS("this trainer is already fitting");
        /* Out of fit, it may fit again: the callback runs once more. */
        CHECK_STATUS(ug_trainer_fit(t), UG_ERR_STATE);
        CHECK_EQ_I64(seen.calls, 2);
    }
    ug_trainer_free(t);
    t = NULL;
    /* A save that fails is reported to the next epoch's callback, training
     * goes on, and fit fails at the end: the run's end is not saved. */
    c.on_step = NULL;
    c.on_epoch = epoch_save_error;
    c.epochs = 2;
    c.checkpoint = "/nonexistent-folder/run.safetensors";
    if (OK(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t))) {
        if (CHECK_STATUS(ug_trainer_fit(t), UG_ERR_IO))
            CHECK_ERROR_HAS("the last checkpoint could not be saved", "/nonexistent-folder/run.safetensors");
        CHECK_EQ_I64(seen.epochs, 2);
        CHECK_MSG(seen.save_error && strstr(seen.error_text, "nonexistent-folder"),
                  "the epoch report's save_error is \"%s\"", seen.error_text);
    }
    ug_trainer_free(t);
    ug_dataset_free(data);
}

/* ---- a step on its own ---- */

/* A step fed the batches of a loader like the trainer's (the same seed,
 * so the same order) trains the parameters fit trains, bit for bit: it is
 * fit's own step, accumulation and an epoch's short last update included. */
TS_TEST(step_trains_as_fit)
{
    ug_dataset *data = problem(29);
    REQUIRE(data);
    ug_trainer_config c = mlp_config();
    c.val_split = 0.0;
    c.epochs = 2;
    c.accumulate = 3;             /* 8 batches an epoch (the last of 16 rows): the epoch's end updates 2 */
    c.optimizer.total_steps = 6;  /* 2 epochs of 3 updates */
    c.keep_denormals = true;      /* fit flushes them otherwise, and the step leaves them */
    int64_t n_fit = 0, n_step = 0;
    float *fitted = train_params(dev, data, &c, &n_fit, NULL);
    ug_train_step *s = NULL;
    ug_loader *loader = NULL;
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = c.batch_size;
    lc.seed = c.seed;
    if (OK(ug_train_step_create(dev, FEATURES, 0, build_mlp, NULL, &c, &s)) &&
        OK(ug_loader_create(data, dev, &lc, &loader))) {
        const int64_t batches = ug_loader_batches(loader);
        CHECK_EQ_I64(batches, 8);
        ug_status st = UG_OK;
        for (int64_t epoch = 0; epoch < c.epochs && st == UG_OK; epoch++) {
            st = ug_loader_start_epoch(loader, epoch);
            for (bool done = false; st == UG_OK;) {
                ug_batch b;
                st = ug_loader_next(loader, &b, &done);
                if (st != UG_OK || done)
                    break;
                st = ug_train_step_run(s, b.x, b.y, b.index + 1 == batches);
            }
        }
        OK(st);
        float *stepped = ts_model_params(ug_train_step_model(s), &n_step);
        if (fitted && stepped)
            CHECK_MSG(n_step == n_fit && !memcmp(fitted, stepped, (size_t)n_fit * sizeof *fitted),
                      "the step's parameters differ from fit's");
    }
    ug_loader_free(loader);
    ug_train_step_free(s);
    ug_dataset_free(data);
}

/* A rank's steps on a batch of 8 (x and y), or on empty parts of it,
 * through build_identity (no dropout, whose masks differ by rank): the
 * bias after three updates. */
typedef struct step_rank {
    ug_device *device;
    ug_comm *comm;            /* NULL: one device */
    const ug_tensor *x, *y;   /* NULL: this rank's part is empty */
    float bias[FEATURES];
    ug_status status;
    char message[512];
} step_rank;

static void *step_rank_main(void *arg)
{
    step_rank *r = arg;
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = 8;
    c.comm = r->comm;
    c.optimizer.lr = 0.1f;
    ug_train_step *s = NULL;
    ug_status st = ug_train_step_create(r->device, FEATURES, 0, build_identity, NULL, &c, &s);
    for (int i = 0; st == UG_OK && i < 3; i++)
        st = ug_train_step_run(s, r->x, r->y, false);
    if (st == UG_OK)
        st = ug_model_read_param(ug_train_step_model(s), "bias", r->bias, sizeof r->bias);
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", st == UG_OK ? "" : ug_last_error());
    ug_train_step_free(s);
    return NULL;
}

/* With comm, a rank whose part of the batch is empty takes the step with
 * the others (NULL x and y): both replicas end alike, as one device on
 * the whole batch. */
TS_TEST(step_with_an_empty_part)
{
    float x_values[8 * FEATURES];
    int32_t labels[8];
    for (int i = 0; i < 8 * FEATURES; i++)
        x_values[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8; i++)
        labels[i] = i % CLASSES;
    ug_tensor *x = NULL, *y = NULL;
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){8, FEATURES}, x_values, &x));
    REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){8}, labels, &y));
    step_rank one = {.device = dev, .x = x, .y = y}, ranks[2] = {{.device = dev, .x = x, .y = y}, {.device = dev}};
    step_rank_main(&one);
    CHECK_MSG(one.status == UG_OK, "one device: %s", one.message);
    ug_device *devices[2] = {dev, dev};
    ug_comm *comms[2] = {NULL, NULL};
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    pthread_t threads[2];
    bool started[2];
    for (int r = 0; r < 2; r++) {
        ranks[r].comm = comms[r];
        started[r] = pthread_create(&threads[r], NULL, step_rank_main, &ranks[r]) == 0;
        CHECK(started[r]);
    }
    for (int r = 0; r < 2; r++)
        if (started[r])
            pthread_join(threads[r], NULL);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(started[r] && ranks[r].status == UG_OK, "rank %d: %s", r, ranks[r].message);
        ug_comm_free(comms[r]);
    }
    if (one.status == UG_OK && ranks[0].status == UG_OK && ranks[1].status == UG_OK) {
        CHECK_MSG(!memcmp(ranks[0].bias, ranks[1].bias, sizeof ranks[0].bias), "the replicas differ");
        CHECK_MSG(ts_max_rel(ranks[0].bias, one.bias, FEATURES) <= 1e-6,
                  "the replicas' bias is %g off one device's", ts_max_rel(ranks[0].bias, one.bias, FEATURES));
        CHECK_MSG(ts_max_rel(one.bias, (const float[FEATURES]){0}, FEATURES) > 0, "no step moved the bias");
    }
    ug_tensor_free(x);
    ug_tensor_free(y);
}

TS_TEST(step_refused)
{
    ug_train_step *s = (ug_train_step *)&s; /* must become NULL */
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = 0;
    if (CHECK_STATUS(ug_train_step_create(dev, FEATURES, 0, build_mlp, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("ug_train_step_create", "batch_size is 0");
    CHECK(s == NULL);
    c.batch_size = 8;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    if (CHECK_STATUS(ug_train_step_create(dev, FEATURES, 0, build_mlp, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("total_steps is 0");
    c.optimizer.schedule = UG_SCHEDULE_STEP;
    c.optimizer.step_size = 0;
    if (CHECK_STATUS(ug_train_step_create(dev, FEATURES, 0, build_mlp, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("step_size is 0");
    c.optimizer.schedule = UG_SCHEDULE_CONSTANT;
    if (CHECK_STATUS(ug_train_step_create(dev, 0, 0, build_mlp, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("features is below 1");
    CHECK_STATUS(ug_train_step_create(dev, FEATURES, 0, NULL, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    if (!OK(ug_train_step_create(dev, FEATURES, 0, build_mlp, NULL, &c, &s)))
        return;
    /* Without a comm, a batch has rows, and both x and y. */
    ug_tensor *x = NULL, *y = NULL, *empty = NULL;
    const float values[8 * FEATURES] = {0};
    const int32_t labels[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){8, FEATURES}, values, &x));
    REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){8}, labels, &y));
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){0, FEATURES}, &empty));
    int64_t n_before = 0, n_refused = 0, n_stepped = 0;
    const float *before = ts_model_params(ug_train_step_model(s), &n_before);
    if (CHECK_STATUS(ug_train_step_run(s, NULL, NULL, false), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("no rows", "comm");
    if (CHECK_STATUS(ug_train_step_run(s, empty, y, false), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("no rows (x is empty)");
    if (CHECK_STATUS(ug_train_step_run(s, x, NULL, false), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("y is NULL and x is not");
    CHECK_STATUS(ug_train_step_run(NULL, x, y, false), UG_ERR_INVALID_ARGUMENT);
    /* None of that stepped; a batch does (the biases move, x being 0). */
    const float *refused = ts_model_params(ug_train_step_model(s), &n_refused);
    OK(ug_train_step_run(s, x, y, false));
    const float *stepped = ts_model_params(ug_train_step_model(s), &n_stepped);
    if (before && refused && stepped) {
        CHECK_MSG(n_refused == n_before && !memcmp(before, refused, (size_t)n_before * sizeof *before),
                  "a refused step changed the parameters");
        CHECK_MSG(n_stepped == n_before && memcmp(before, stepped, (size_t)n_before * sizeof *before),
                  "a step changed no parameter");
    }
    ug_tensor_free(x);
    ug_tensor_free(y);
    ug_tensor_free(empty);
    ug_train_step_free(s);
}

/* ---- refused ---- */

TS_TEST(refused_configurations)
{
    ug_dataset *data = problem(19);
    REQUIRE(data);
    ug_trainer *t = (ug_trainer *)&t; /* must become NULL */
    ug_trainer_config c = ug_trainer_defaults();
    CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, NULL), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_trainer_create(dev, NULL, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("training set");
    CHECK(t == NULL);
    c.accumulate = 0;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("accumulate");
    c = ug_trainer_defaults();
    c.val_split = 1.0;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("val_split");
    c = ug_trainer_defaults();
    c.precision = UG_I32;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("precision");
    c = ug_trainer_defaults();
    c.batch_size = 1000;
    c.drop_last = true;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("no whole batch");
    c = ug_trainer_defaults();
    c.epochs = INT64_MAX; /* the cosine schedule's total updates would overflow (found by fuzz_trainer_config) */
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    if (CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("more updates than a step count holds");
    c = ug_trainer_defaults();
    c.resume = "/nonexistent/run.safetensors";
    CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_mlp, NULL, &c, &t), UG_ERR_IO);
    CHECK(t == NULL);
    ug_dataset_free(data);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(metrics_by_hand),
        TH_DEVICE_TEST(resume_at_epoch_end),
        TH_DEVICE_TEST(resume_between_updates),
        TH_DEVICE_TEST(resume_augmented),
        TH_DEVICE_TEST(device_conversion_trains_as_host),
        TH_DEVICE_TEST(resume_with_another_schedule),
        TH_DEVICE_TEST(training_and_evaluation_sums_apart),
        TH_DEVICE_TEST(early_stopping_restores_the_best),
        TH_DEVICE_TEST(batch_size_search),
        TH_DEVICE_TEST(batch_larger_than_the_set),
        TH_DEVICE_TEST(denormals_flushed_while_training),
        TH_DEVICE_TEST(callbacks),
        TH_DEVICE_TEST(step_trains_as_fit),
        TH_DEVICE_TEST(step_with_an_empty_part),
        TH_DEVICE_TEST(step_refused),
        TH_DEVICE_TEST(refused_configurations),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
