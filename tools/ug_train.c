/* ug-train: trains an MLP (or small CNN) classifier on IDX data
 * (Fashion-MNIST by default) on any device, with a progress display,
 * per-epoch test accuracy, validation and early stopping, checkpoints that
 * resume exactly, and an optional CSV log. The options are in
 * train_options.c, the progress display in train_progress.c, the
 * checkpoints' helpers in train_checkpoint.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlp.h"
#include "train_checkpoint.h"
#include "train_options.h"
#include "train_progress.h"

/* One batch. With accumulation, batches add their gradients on the device
 * and every accumulate-th one makes the update (the epoch's last makes one
 * with what is pending, see the epoch loop). */
static ug_status train_on(ug_graph *g, int accumulate, int *pending)
{
    if (accumulate <= 1)
        return ug_graph_run(g);
    TRY(ug_graph_run_backward(g));
    if (++*pending < accumulate)
        return UG_OK;
    *pending = 0;
    return ug_graph_run_update(g);
}

/* The epoch's mean loss and accuracy from the graph's sums (one wait),
 * which then restart. */
static ug_status read_sums(mlp_graph *m, int64_t samples, double *mean_loss, double *accuracy)
{
    float loss_sum = 0, correct = 0;
    TRY(ug_graph_read(m->graph, m->loss_sum, &loss_sum, sizeof loss_sum));
    TRY(ug_graph_read(m->graph, m->correct_sum, &correct, sizeof correct));
    *mean_loss = samples ? (double)loss_sum / (double)samples : 0.0;
    *accuracy = samples ? (double)correct / (double)samples : 0.0;
    return ug_graph_clear_sums(m->graph);
}

typedef struct batch_planner {
    ug_model *model;
    const mlp_config *config;
    ug_optimizer *optimizer;
    const ug_dataset *train, *test;
    ug_loader_config loader;
    bool accumulate;
} batch_planner;

/* What training with batches of rows would add to the device's memory:
 * the graph's plan (no allocation) beyond the model and optimizer already
 * there, and both loaders' slots. */
static ug_status plan_batch(void *context, int64_t rows, uint64_t *bytes)
{
    batch_planner *p = context;
    mlp_graph m;
    ug_graph_memory_info mem;
    TRY(mlp_build(p->model, p->config, rows, &m));
    ug_status st = ug_graph_set_optimizer(m.graph, p->optimizer);
    if (st == UG_OK)
        st = ug_graph_memory(m.graph, &mem);
    mlp_free(&m);
    TRY(st);
    ug_loader_config lc = p->loader;
    lc.batch_size = rows;
    uint64_t train_slots = 0, test_slots = 0;
    TRY(ug_loader_device_bytes(p->train, &lc, &train_slots));
    TRY(ug_loader_device_bytes(p->test, &lc, &test_slots));
    *bytes = mem.total_bytes - mem.parameter_bytes - mem.optimizer_bytes + (p->accumulate ? mem.accumulator_bytes : 0) +
             train_slots + test_slots;
    return UG_OK;
}

/* Seconds since this process started (loading the library and discovering
 * the devices included), from /proc: its start in clock ticks after boot
 * (field 22 of /proc/self/stat) against the uptime. -1 where /proc is not. */
static double seconds_since_process_start(void)
{
    char stat[1024];
    double uptime = 0;
    unsigned long long start_ticks = 0;
    FILE *f = fopen("/proc/self/stat", "r");
    size_t got = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f)
        fclose(f);
    stat[got] = '\0';
    const char *fields = strrchr(stat, ')'); /* the command name may hold spaces */
    if (!fields || sscanf(fields + 1, " %*c" " %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                          &start_ticks) != 1)
        return -1;
    f = fopen("/proc/uptime", "r");
    bool read = f && fscanf(f, "%lf", &uptime) == 1;
    if (f)
        fclose(f);
    long ticks_per_second = sysconf(_SC_CLK_TCK);
    return read && ticks_per_second > 0 ? uptime - (double)start_ticks / (double)ticks_per_second : -1;
}

/* The progress display, whose open line an error message ends first. */
static train_progress *progress_shown;

static int fail(const char *what)
{
    progress_break(progress_shown);
    fprintf(stderr, "ug-train: %s: %s\n", what, ug_last_error());
    return 1;
}

/* The path of a data file: the one given, else DIR/NAME or DIR/NAME.gz. */
static const char *data_path(const char *given, const char *dir, const char *name, char *buf, size_t len)
{
    if (given)
        return given;
    snprintf(buf, len, "%s/%s", dir, name);
    if (access(buf, R_OK) == 0)
        return buf;
    snprintf(buf, len, "%s/%s.gz", dir, name);
    return buf;
}

/* The training graph forward in eval mode over a data set. */
static ug_status evaluate(ug_loader *loader, mlp_graph *m, double *accuracy, double *mean_loss)
{
    int64_t seen = 0;
    TRY(ug_graph_set_training(m->graph, false));
    ug_status st = ug_loader_start_epoch(loader, 0);
    for (bool done = false; st == UG_OK;) {
        ug_batch b;
        st = ug_loader_next(loader, &b, &done);
        if (st != UG_OK || done)
            break;
        st = ug_graph_bind(m->graph, m->x, b.x);
        if (st == UG_OK) st = ug_graph_bind(m->graph, m->y, b.y);
        if (st == UG_OK) st = ug_graph_run_forward(m->graph);
        seen += b.count;
    }
    if (st == UG_OK)
        st = read_sums(m, seen, mean_loss, accuracy);
    ug_status back = ug_graph_set_training(m->graph, true);
    return st != UG_OK ? st : back;
}

/* Optimizer updates in an epoch of batch rows: ceil(batches / accumulate). */
static int64_t epoch_updates(const train_options *o, int64_t train_count, const ug_loader_config *lc)
{
    int64_t batches = lc->drop_last ? train_count / o->batch : (train_count + o->batch - 1) / o->batch;
    return (batches + o->accumulate - 1) / o->accumulate;
}

/* The optimizer of the options, for epochs of updates updates. The cosine
 * schedule decays over the whole run (epochs x updates); the step
 * schedule's step defaults to an epoch. updates 0: the batch size is still
 * to be chosen, and this optimizer only counts in its plan (where the
 * schedule makes no difference): constant. */
static ug_status make_optimizer(ug_model *model, const train_options *o, int64_t updates, ug_optimizer **out)
{
    ug_optimizer_config oc = ug_optimizer_defaults((ug_optim_type)o->optimizer);
    oc.lr = o->lr;
    if (o->weight_decay >= 0.0f)
        oc.weight_decay = o->weight_decay;
    if (o->optimizer == UG_SGD)
        oc.momentum = o->momentum;
    oc.max_grad_norm = o->max_grad_norm;
    oc.loss_scaling = mlp_loss_scaling(o->model.precision);
    oc.schedule = updates ? (ug_schedule)o->schedule : UG_SCHEDULE_CONSTANT;
    oc.step_size = o->step_size ? o->step_size : updates;
    oc.gamma = o->gamma;
    oc.warmup_steps = o->warmup;
    oc.total_steps = o->epochs * updates;
    return ug_optimizer_create(model, &oc, out);
}

/* The warm-up must end before the run does: false (said) where not.
 * updates 0: not known yet (an auto batch size), checked again later. */
static bool check_warmup(const train_options *o, int64_t updates)
{
    if (o->schedule != UG_SCHEDULE_COSINE || !updates || o->warmup < o->epochs * updates)
        return true;
    fprintf(stderr, "ug-train: --warmup %lld: must be less than the run's %lld updates\n", (long long)o->warmup,
            (long long)(o->epochs * updates));
    return false;
}

/* "MLP 784-500-10", "CNN 784-conv32-conv64-128-10". */
static void describe_model(const mlp_config *m, char *buf, size_t len)
{
    if (m->cnn) {
        snprintf(buf, len, "CNN %lld-conv32-conv64-128-%lld", (long long)m->inputs, (long long)m->classes);
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "MLP %lld", (long long)m->inputs);
    for (int i = 0; i <= m->hidden_count && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "-%lld",
                                 (long long)(i < m->hidden_count ? m->hidden[i] : m->classes));
}

/* " cosine", " cosine (100 warm-up)", " step (x0.1 every 938 updates)". */
static void describe_schedule(const train_options *o, int64_t updates, char *buf, size_t len)
{
    if (o->schedule == UG_SCHEDULE_COSINE && o->warmup)
        snprintf(buf, len, " cosine (%lld warm-up)", (long long)o->warmup);
    else if (o->schedule == UG_SCHEDULE_COSINE)
        snprintf(buf, len, " cosine");
    else if (o->schedule == UG_SCHEDULE_STEP)
        snprintf(buf, len, " step (x%g every %lld updates)", (double)o->gamma,
                 (long long)(o->step_size ? o->step_size : updates));
    else
        buf[0] = '\0';
}

/* The CSV log's rows (columns: TRAIN_CSV_COLUMNS). Each column means one
 * thing in every row, empty where it does not apply: a step row's
 * train_loss is its batch's, an epoch row's the epoch's mean; lr is the
 * one the step's update used (with --accumulate, the update its gradients
 * go into), for an epoch the one of its last update; samples_per_s is the
 * epoch's training rate, so far for a step; test_accuracy is in percent. */
static void csv_step(FILE *csv, int epoch, int64_t step, float loss, float lr, double rate)
{
    fprintf(csv, "step,%d,%lld,%.6f,,,,%.6g,%.1f\n", epoch, (long long)step, (double)loss, (double)lr, rate);
}

static void csv_epoch(FILE *csv, int epoch, int64_t steps, double train_loss, double val_loss, double test_loss,
                      double test_accuracy, float lr, double rate)
{
    char val[32] = "";
    if (!isnan(val_loss))
        snprintf(val, sizeof val, "%.6f", val_loss);
    fprintf(csv, "epoch,%d,%lld,%.6f,%s,%.6f,%.4f,%.6g,%.1f\n", epoch, (long long)steps, train_loss, val,
            test_loss, 100.0 * test_accuracy, (double)lr, rate);
}

/* Everything a run holds, freed by run_free. */
typedef struct run {
    train_options o;
    char *args;               /* the options, for the checkpoints */
    ug_dataset *all, *train, *val, *test;
    ug_device *dev;
    ug_model *model;
    ug_optimizer *opt;
    mlp_graph step;
    ug_loader *train_loader, *val_loader, *test_loader;
    ug_checkpoint *ck;
    FILE *csv;
    train_weights best;       /* with --patience: the weights of the best epoch */
    double best_val_loss;
    int best_epoch, bad_epochs;
    bool last_save_failed;     /* the latest checkpoint save failed */
} run;

static void run_free(run *r)
{
    ug_checkpoint_free(r->ck);
    ug_loader_free(r->train_loader);
    ug_loader_free(r->val_loader);
    ug_loader_free(r->test_loader);
    mlp_free(&r->step);
    ug_optimizer_free(r->opt);
    ug_model_free(r->model);
    ug_device_close(r->dev);
    ug_dataset_free(r->all);
    ug_dataset_free(r->train);
    ug_dataset_free(r->val);
    ug_dataset_free(r->test);
    train_weights_free(&r->best);
    free(r->args);
}

/* The data sets: IDX bytes kept as bytes, a seeded validation split,
 * standardised with the training part's statistics (as torchvision's
 * Normalize). */
static int load_data(run *r)
{
    const train_options *o = &r->o;
    char p1[4096], p2[4096], p3[4096], p4[4096];
    const char *train_images = data_path(o->train_images, o->data_dir, "train-images-idx3-ubyte", p1, sizeof p1);
    const char *train_labels = data_path(o->train_labels, o->data_dir, "train-labels-idx1-ubyte", p2, sizeof p2);
    const char *test_images = data_path(o->test_images, o->data_dir, "t10k-images-idx3-ubyte", p3, sizeof p3);
    const char *test_labels = data_path(o->test_labels, o->data_dir, "t10k-labels-idx1-ubyte", p4, sizeof p4);
    if (ug_dataset_from_idx(train_images, train_labels, 1.0f / 255.0f, 0.0f, &r->all) != UG_OK)
        return fail("loading the training set (install dataset-fashion-mnist or pass --data)");
    if (ug_dataset_from_idx(test_images, test_labels, 1.0f / 255.0f, 0.0f, &r->test) != UG_OK)
        return fail("loading the test set");
    if (ug_dataset_require_classes(r->all, (int32_t)o->model.classes) != UG_OK ||
        ug_dataset_require_classes(r->test, (int32_t)o->model.classes) != UG_OK)
        return fail("checking the labels (--classes sets their number)");
    if (o->val_split > 0) {
        if (ug_dataset_split(r->all, o->val_split, o->seed, &r->train, &r->val) != UG_OK)
            return fail("splitting off the validation set (--val-split)");
    } else {
        r->train = r->all;
        r->all = NULL;
    }
    double mean = 0.0, stddev = 1.0;
    float scale = 1.0f, shift = 0.0f;
    if (o->standardize) {
        if (ug_dataset_stats(r->train, &mean, &stddev) != UG_OK || stddev <= 0.0)
            return fail("standardising the data");
        scale = (float)(1.0 / stddev);
        shift = (float)(-mean / stddev);
    }
    ug_dataset *sets[3] = {r->train, r->val, r->test};
    for (int i = 0; i < 3; i++)
        if (sets[i] && ug_dataset_transform(sets[i], scale, shift) != UG_OK)
            return fail("standardising the data");
    r->o.model.inputs = ug_dataset_features(r->train);
    if (ug_dataset_features(r->test) != r->o.model.inputs) {
        fprintf(stderr, "ug-train: the test images have %lld features, the training images %lld\n",
                (long long)ug_dataset_features(r->test), (long long)r->o.model.inputs);
        return 1;
    }
    return 0;
}

/* The model, optimizer, compiled graph and loaders; the batch size chosen
 * first when it is auto. */
static int build(run *r, int64_t *updates)
{
    train_options *o = &r->o;
    ug_loader_config lc = ug_loader_default_config();
    lc.seed = o->seed;
    lc.x_dtype = o->model.precision;
    lc.threads = o->workers;
    int64_t train_count = ug_dataset_count(r->train);
    *updates = o->batch ? epoch_updates(o, train_count, &lc) : 0; /* 0 until an auto batch is chosen */
    if (!check_warmup(o, *updates))
        return 2;
    if (ug_device_open(o->device, &r->dev) != UG_OK)
        return fail("opening the device");
    ug_device_info info;
    ug_device_get_info(r->dev, &info);
    if (ug_model_create(r->dev, o->seed, &r->model) != UG_OK)
        return fail("creating the model");
    /* The parameters (made by the first graph built) come before the optimizer. */
    if (mlp_build(r->model, &o->model, o->batch ? o->batch : 1, &r->step) != UG_OK)
        return fail("building the training graph");
    if (make_optimizer(r->model, o, *updates, &r->opt) != UG_OK)
        return fail("creating the optimizer");
    if (o->batch == 0) {
        batch_planner planner = {r->model, &o->model, r->opt, r->train, r->test, lc, o->accumulate > 1};
        uint64_t need = 0, next = 0;
        ug_memory_stats ms;
        mlp_free(&r->step);
        if (ug_memory_fit_batch(r->dev, plan_batch, &planner, 0.05, train_count, &o->batch, &need, &next) != UG_OK ||
            ug_memory_get_stats(r->dev, &ms) != UG_OK)
            return fail("choosing the batch size");
        printf("batch size auto: %lld: the plan needs %.2f MiB (+5%% kept free) beside %.2f MiB in use, limit %.2f MiB",
               (long long)o->batch, (double)need / 1048576.0, (double)ms.bytes_in_use / 1048576.0,
               (double)(ms.limit ? ms.limit : info.global_memory) / 1048576.0);
        if (next)
            printf("; %lld would need %.2f MiB", (long long)(2 * o->batch), (double)next / 1048576.0);
        printf("\n");
        *updates = epoch_updates(o, train_count, &lc);
        if (!check_warmup(o, *updates))
            return 2;
        if (mlp_build(r->model, &o->model, o->batch, &r->step) != UG_OK)
            return fail("building the training graph");
        ug_optimizer_free(r->opt); /* again, with the schedule in updates of this batch */
        r->opt = NULL;
        if (make_optimizer(r->model, o, *updates, &r->opt) != UG_OK)
            return fail("creating the optimizer");
    }
    lc.batch_size = o->batch;
    ug_loader_config eval_lc = lc;
    eval_lc.shuffle = false;
    if (mlp_finish(&r->step, r->opt) != UG_OK)
        return fail("compiling the training graph");
    if (ug_loader_create(r->train, r->dev, &lc, &r->train_loader) != UG_OK ||
        (r->val && ug_loader_create(r->val, r->dev, &eval_lc, &r->val_loader) != UG_OK) ||
        ug_loader_create(r->test, r->dev, &eval_lc, &r->test_loader) != UG_OK)
        return fail("creating the data loaders");
    /* What a checkpoint holds: the evaluation loaders restart each time. */
    if (ug_checkpoint_create(&r->ck) != UG_OK || ug_checkpoint_add_model(r->ck, r->model) != UG_OK ||
        ug_checkpoint_add_optimizer(r->ck, r->opt) != UG_OK ||
        ug_checkpoint_add_graph(r->ck, "train", r->step.graph) != UG_OK ||
        ug_checkpoint_add_loader(r->ck, "train", r->train_loader) != UG_OK ||
        (o->keep > 1 && ug_checkpoint_set_keep(r->ck, o->keep) != UG_OK))
        return fail("preparing checkpoints");
    return 0;
}

/* The early-stopping state in a checkpoint's strings, and back. */
static ug_status save_progress_strings(run *r)
{
    char text[64];
    snprintf(text, sizeof text, "%.17g %d %d", r->best_val_loss, r->best_epoch, r->bad_epochs);
    TRY(ug_checkpoint_set_string(r->ck, "ug-train.early_stopping", text));
    return ug_checkpoint_set_string(r->ck, TRAIN_ARGS_KEY, r->args);
}

/* The path of the best weights beside a checkpoint. */
static void best_path(const char *checkpoint, char *buf, size_t len) { snprintf(buf, len, "%s.best", checkpoint); }

/* A checkpoint of the run now (between updates). Failing to save is
 * reported, and training goes on: the previous checkpoint is intact; the
 * run fails at its end if the last save did (its work would be lost). */
static void save_checkpoint(run *r, train_progress *bar)
{
    r->last_save_failed = save_progress_strings(r) != UG_OK || ug_checkpoint_save(r->ck, r->o.save) != UG_OK;
    if (r->last_save_failed) {
        progress_break(bar);
        fprintf(stderr, "ug-train: warning: the checkpoint was not saved (training goes on): %s\n", ug_last_error());
    }
}

/* --resume: the checkpoint into every part; the best weights beside it. */
static int resume(run *r)
{
    if (r->o.patience) {
        char path[4096];
        best_path(r->o.resume, path, sizeof path);
        ug_checkpoint *best = NULL;
        if (access(path, R_OK) == 0 &&
            (ug_checkpoint_create(&best) != UG_OK || ug_checkpoint_add_model(best, r->model) != UG_OK ||
             ug_checkpoint_load(best, path) != UG_OK || train_weights_take(&r->best, r->model) != UG_OK)) {
            ug_checkpoint_free(best);
            return fail("loading the best weights");
        }
        ug_checkpoint_free(best);
    }
    if (ug_checkpoint_load(r->ck, r->o.resume) != UG_OK) {
        /* The library names its setting; here it is an option. */
        if (strstr(ug_last_error(), "saved without loss scaling"))
            fprintf(stderr, "ug-train: --resume %s: the run was saved without --precision f16 (no loss "
                            "scaling); resume it in its own precision, or start a new run in f16\n",
                    r->o.resume);
        return fail("resuming");
    }
    const char *early = ug_checkpoint_string(r->ck, "ug-train.early_stopping");
    if (early && sscanf(early, "%lf %d %d", &r->best_val_loss, &r->best_epoch, &r->bad_epochs) != 3) {
        fprintf(stderr, "ug-train: --resume: %s: ug-train.early_stopping is \"%s\"\n", r->o.resume, early);
        return 1;
    }
    return 0;
}

/* After an epoch's validation: whether to stop (--patience); keeps the
 * best weights, and with --save writes them to FILE.best. */
static bool early_stop(run *r, int epoch, double val_loss, train_progress *bar)
{
    if (!r->o.patience)
        return false;
    if (val_loss < r->best_val_loss) {
        r->best_val_loss = val_loss;
        r->best_epoch = epoch;
        r->bad_epochs = 0;
        if (train_weights_take(&r->best, r->model) != UG_OK) {
            fail("keeping the best weights");
            return true;
        }
        if (r->o.save) {
            char path[4096];
            best_path(r->o.save, path, sizeof path);
            ug_checkpoint *best = NULL;
            if (ug_checkpoint_create(&best) != UG_OK || ug_checkpoint_add_model(best, r->model) != UG_OK ||
                ug_checkpoint_save(best, path) != UG_OK) {
                progress_break(bar);
                fprintf(stderr, "ug-train: warning: the best weights were not saved: %s\n", ug_last_error());
            }
            ug_checkpoint_free(best);
        }
        return false;
    }
    return ++r->bad_epochs >= r->o.patience;
}

static void print_header(const run *r, int64_t updates, int first_epoch)
{
    const train_options *o = &r->o;
    ug_device_info info;
    ug_device_get_info(r->dev, &info);
    ug_graph_memory_info mem;
    ug_graph_memory(r->step.graph, &mem);
    char shape[MLP_MAX_HIDDEN * 21], schedule[64], val[64] = "";
    describe_model(&o->model, shape, sizeof shape);
    describe_schedule(o, updates, schedule, sizeof schedule);
    if (r->val)
        snprintf(val, sizeof val, ", %lld validation", (long long)ug_dataset_count(r->val));
    printf("unigrad ug-train: %s (%s, %s)\n", info.id, info.name, info.vendor);
    printf("model %s (%s), dropout %g, %s lr %g%s, batch %lld, %d epochs, seed %llu; %lld training%s and %lld test "
           "samples\n",
           shape, ug_dtype_name(o->model.precision), (double)o->model.dropout,
           o->optimizer == UG_SGD ? "SGD" : o->optimizer == UG_ADAM ? "Adam" : "AdamW", (double)o->lr, schedule,
           (long long)o->batch, o->epochs, (unsigned long long)o->seed, (long long)ug_dataset_count(r->train), val,
           (long long)ug_dataset_count(r->test));
    printf("step plan: %d kernels (%d fused away, %d recomputing checkpointed activations), %.2f MiB of activations, "
           "%.2f MiB of gradients, %.2f MiB in all\n", mem.nodes, mem.fused, mem.recomputed,
           (double)mem.activation_bytes / 1048576.0, (double)mem.gradient_bytes / 1048576.0,
           (double)mem.total_bytes / 1048576.0);
    if (o->resume)
        printf("resumed from %s: epoch %d, %lld updates done\n", o->resume, first_epoch + 1,
               (long long)ug_optimizer_steps(r->opt));
    fflush(stdout);
}

/* Ctrl-C, SIGTERM, SIGHUP: a checkpoint (with --save) and how to go on;
 * the exit status is 128 + the signal's number, as the shell's. */
static int interrupted(run *r, train_progress *bar, int epoch, int64_t step)
{
    progress_break(bar);
    if (r->o.save) {
        save_checkpoint(r, bar);
        if (r->last_save_failed)
            printf("interrupted at epoch %d, step %lld; the checkpoint could not be saved\n", epoch + 1,
                   (long long)step);
        else
            printf("interrupted at epoch %d, step %lld; saved to %s\nresume with: ug-train --resume %s\n",
                   epoch + 1, (long long)step, r->o.save, r->o.save);
    } else {
        printf("interrupted at epoch %d, step %lld; nothing saved (no --save)\n", epoch + 1, (long long)step);
    }
    return 128 + train_interrupted();
}

/* The epochs from where the loader stands (epoch 0, or where a checkpoint
 * left it). Returns the exit status. */
static int train(run *r, int64_t updates)
{
    const train_options *o = &r->o;
    int64_t epoch = 0, step_index = 0;
    ug_loader_position(r->train_loader, &epoch, &step_index);
    if (epoch < 0) {
        epoch = 0;
        if (ug_loader_start_epoch(r->train_loader, 0) != UG_OK)
            return fail("starting an epoch");
    }
    print_header(r, updates, (int)epoch);
    train_progress bar;
    progress_init(&bar, o->quiet);
    progress_shown = &bar;
    train_catch_interrupts();
    int64_t steps = ug_loader_batches(r->train_loader);
    int pending = 0; /* batches accumulated on the step graph */
    double first_step_seconds = -1;
    bool stop = false;
    for (; epoch < o->epochs && !stop; epoch++) {
        int shown = (int)epoch + 1;
        progress_start_epoch(&bar, shown, o->epochs, steps);
        double epoch_start = progress_clock();
        /* Samples of the epoch before a resume count in its sums. */
        int64_t samples = step_index * o->batch, epoch_first_step = step_index;
        float loss = NAN, lr = ug_optimizer_current_lr(r->opt);
        for (bool finished = false;;) {
            ug_batch b;
            if (ug_loader_next(r->train_loader, &b, &finished) != UG_OK)
                return fail("loading a batch");
            if (finished)
                break;
            lr = ug_optimizer_current_lr(r->opt); /* the lr of the update this batch's gradients go into */
            if (ug_graph_bind(r->step.graph, r->step.x, b.x) != UG_OK ||
                ug_graph_bind(r->step.graph, r->step.y, b.y) != UG_OK ||
                train_on(r->step.graph, o->accumulate, &pending) != UG_OK)
                return fail("training step");
            step_index++;
            samples += b.count;
            /* Reading the loss waits for the device, so it happens only when shown or logged. */
            bool show = progress_due(&bar, step_index);
            /* The first step is waited for once, to report the start-up time. */
            bool first = first_step_seconds < 0 && step_index == epoch_first_step + 1 && !o->resume;
            if (r->csv || show || first || step_index == steps) {
                if (ug_graph_read(r->step.graph, r->step.loss, &loss, sizeof loss) != UG_OK)
                    return fail("reading the loss");
            }
            if (first)
                first_step_seconds = seconds_since_process_start();
            double rate = (double)(samples - epoch_first_step * o->batch) / (progress_clock() - epoch_start);
            if (r->csv)
                csv_step(r->csv, shown, step_index, loss, lr, rate);
            if (show)
                progress_show(&bar, step_index, samples, loss);
            if (pending)
                continue;
            /* Between updates: a checkpoint is due, or Ctrl-C. */
            if (o->save && o->save_every && ug_optimizer_steps(r->opt) % o->save_every == 0)
                save_checkpoint(r, &bar);
            if (train_interrupted())
                return interrupted(r, &bar, shown - 1, step_index);
        }
        if (pending && ug_graph_run_update(r->step.graph) != UG_OK)
            return fail("training step");
        pending = 0;
        double train_loss = 0, train_accuracy = 0;
        if (read_sums(&r->step, samples, &train_loss, &train_accuracy) != UG_OK)
            return fail("reading the epoch's loss");
        double train_seconds = progress_clock() - epoch_start;
        int64_t epoch_samples = samples - epoch_first_step * o->batch;
        progress_end_epoch(&bar, step_index, samples, loss);
        double accuracy = 0, test_loss = 0, val_accuracy = 0, val_loss = NAN;
        if (r->val_loader && evaluate(r->val_loader, &r->step, &val_accuracy, &val_loss) != UG_OK)
            return fail("validating");
        if (evaluate(r->test_loader, &r->step, &accuracy, &test_loss) != UG_OK)
            return fail("evaluating");
        char val[96] = "";
        if (r->val_loader)
            snprintf(val, sizeof val, "validation loss %.4f (accuracy %.2f%%), ", val_loss, 100.0 * val_accuracy);
        printf("epoch %d: train loss %.4f (accuracy %.2f%%), %stest loss %.4f, test accuracy %.2f%%, %.1f s (%.0f "
               "samples/s)\n",
               shown, train_loss, 100.0 * train_accuracy, val, test_loss, 100.0 * accuracy, train_seconds,
               (double)epoch_samples / train_seconds);
        ug_loss_scaler_state scaler;
        if (ug_optimizer_loss_scaler(r->opt, &scaler) == UG_OK)
            printf("loss scale %g, %lld steps skipped so far\n", (double)scaler.scale,
                   (long long)scaler.skipped_steps);
        if (first_step_seconds >= 0 && epoch_first_step == 0 && epoch == 0)
            printf("first step finished %.2f s after the process started\n", first_step_seconds);
        if (r->csv)
            csv_epoch(r->csv, shown, step_index, train_loss, val_loss, test_loss, accuracy, lr,
                      (double)epoch_samples / train_seconds);
        stop = r->val_loader && early_stop(r, shown, val_loss, &bar);
        if (stop)
            printf("no lower validation loss for %d epochs: stopping\n", r->bad_epochs);
        fflush(stdout);
        /* The next epoch starts before the checkpoint, so a resumed run
         * goes on with it, this one's evaluation done (after the last
         * epoch too: a run resumed with more --epochs). */
        step_index = 0;
        if (!stop && ug_loader_start_epoch(r->train_loader, epoch + 1) != UG_OK)
            return fail("starting an epoch");
        bool last = epoch + 1 == o->epochs || stop;
        if (o->save && (last || (!o->save_every && (epoch + 1) % o->save_every_epochs == 0)))
            save_checkpoint(r, &bar);
        if (train_interrupted() && !last)
            return interrupted(r, &bar, shown, 0);
    }
    if (r->best.count) {
        double accuracy = 0, test_loss = 0;
        if (train_weights_restore(&r->best, r->model) != UG_OK ||
            evaluate(r->test_loader, &r->step, &accuracy, &test_loss) != UG_OK)
            return fail("restoring the best weights");
        printf("restored the weights of epoch %d (validation loss %.4f): test loss %.4f, test accuracy %.2f%%\n",
               r->best_epoch, r->best_val_loss, test_loss, 100.0 * accuracy);
        if (o->save)
            printf("they are saved in %s.best\n", o->save);
    }
    return 0;
}

int main(int argc, char **argv)
{
    run r = {.best_val_loss = INFINITY};
    int rc = train_options_parse(argc, argv, &r.o);
    if (rc == TRAIN_OPTIONS_HELP)
        return 0;
    if (rc)
        return 2;
    /* --resume: the saved options first, those given here over them. */
    char **args = NULL;
    if (r.o.resume) {
        const char *path = r.o.resume;
        args = train_resume_args(path, argc, argv, &argc);
        if (!args)
            return 1;
        argv = args;
        rc = train_options_parse(argc, argv, &r.o);
        if (rc) {
            free(args);
            return rc == TRAIN_OPTIONS_HELP ? 0 : 2;
        }
        r.o.resume = path;
    }
    r.args = train_join_args(argc, argv);
    int64_t updates = 0;
    if (!r.args)
        rc = fail("keeping the options (an argument holds a newline?)");
    if (!rc && r.o.save && !train_check_save_path(r.o.save))
        rc = 1;
    if (!rc)
        rc = load_data(&r);
    if (!rc)
        rc = build(&r, &updates);
    if (!rc && r.o.resume)
        rc = resume(&r);
    if (!rc && r.o.csv) {
        /* A resumed run adds to its log. */
        bool append = r.o.resume && access(r.o.csv, F_OK) == 0;
        r.csv = fopen(r.o.csv, append ? "a" : "w");
        if (!r.csv) {
            fprintf(stderr, "ug-train: cannot write %s: %s\n", r.o.csv, strerror(errno));
            rc = 1;
        } else if (!append) {
            fprintf(r.csv, TRAIN_CSV_COLUMNS "\n");
        }
    }
    if (!rc)
        rc = train(&r, updates);
    if (!rc && r.last_save_failed) {
        fprintf(stderr, "ug-train: the last checkpoint could not be saved to %s: the run's end is not saved\n",
                r.o.save);
        rc = 1;
    }
    progress_shown = NULL;
    if (r.csv && fclose(r.csv) != 0) {
        fprintf(stderr, "ug-train: writing %s failed: %s\n", r.o.csv, strerror(errno));
        rc = rc ? rc : 1;
    }
    run_free(&r);
    free(args);
    return rc;
}
