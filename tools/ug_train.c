/* ug-train: trains an MLP classifier on IDX data (Fashion-MNIST by default)
 * on any device, with a progress bar, per-epoch test accuracy and an
 * optional CSV log. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mlp.h"

typedef struct options {
    const char *device;
    const char *data_dir;
    const char *train_images, *train_labels, *test_images, *test_labels;
    const char *csv;
    int epochs;
    int64_t batch;
    float lr, weight_decay, momentum;
    float dropout; /* -1 until given: the model's default */
    ug_optim_type optimizer;
    int schedule; /* ug_schedule, or -1 until given: the model's default */
    uint64_t seed;
    mlp_config model;
    float max_grad_norm;
    int accumulate;
    bool quiet;
    bool standardize;
} options;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: ug-train [options]\n"
            "Trains an MLP on IDX data (default: Fashion-MNIST from /usr/share/datasets/fashion-mnist).\n"
            "  --device NAME        cpu, opencl:N, hip:N, cuda:N or auto (default; UG_DEVICE overrides)\n"
            "  --epochs N           default 10\n"
            "  --batch-size N       default 64; auto: the largest power of two whose plan (model,\n"
            "                       optimizer, activations, loaders) fits the device's memory\n"
            "                       limit (UG_MEMORY_LIMIT, else its size), 5%% kept free\n"
            "  --lr X               learning rate, default 1e-3\n"
            "  --optimizer NAME     adam (default), adamw or sgd\n"
            "  --schedule NAME      learning rate: constant (mlp default) or cosine (cnn\n"
            "                       default: decays to 0 over the run's updates)\n"
            "  --momentum X         SGD momentum, default 0.9\n"
            "  --weight-decay X     default 0 (adamw: 1e-2)\n"
            "  --model NAME         mlp (default) or cnn: conv 32 and conv 64 (3x3, batch norm,\n"
            "                       ReLU, max-pool 2), linear 128, dropout 0.25, linear\n"
            "  --hidden LIST        the MLP's hidden sizes, e.g. 500 (default) or 256,128\n"
            "  --activation NAME    relu (default), gelu, tanh or sigmoid\n"
            "  --dropout P          dropout after each hidden layer, default 0 (cnn: 0.25)\n"
            "  --label-smoothing S  default 0\n"
            "  --clip X             clip gradients to global norm X\n"
            "  --precision P        f32 (default), f16 or bf16: products and convolutions in\n"
            "                       the half type with f32 master weights (f16 with dynamic\n"
            "                       loss scaling)\n"
            "  --checkpoint-activations  recompute each hidden layer's (cnn: conv block's)\n"
            "                       activations in backward\n"
            "                       instead of keeping them (less memory, more compute)\n"
            "  --accumulate N       one optimizer step per N batches (their gradients summed on\n"
            "                       the device: a batch N times the size); default 1\n"
            "  --seed N             default 0\n"
            "  --classes N          classes the labels must fall in, default 10\n"
            "  --data DIR           folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
            "  --train-images F --train-labels F --test-images F --test-labels F\n"
            "  --csv FILE           log loss per step and loss/accuracy per epoch\n"
            "  --no-standardize     keep pixel values in [0, 1] instead of standardising them\n"
            "                       with the training set's mean and standard deviation\n"
            "  --quiet              no progress bar\n");
}

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

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static int fail(const char *what)
{
    fprintf(stderr, "ug-train: %s: %s\n", what, ug_last_error());
    return 1;
}

static bool parse_number(const char *text, double *value)
{
    char *end = NULL;
    errno = 0;
    *value = strtod(text, &end);
    return text[0] && !*end && !errno && isfinite(*value);
}

static int parse_args(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(arg, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(arg, "--checkpoint-activations")) {
            o->model.checkpoint = true;
            continue;
        }
        if (i + 1 < argc && !strcmp(arg, "--batch-size") && !strcmp(argv[i + 1], "auto")) {
            o->batch = 0;
            i++;
            continue;
        }
        if (!strcmp(arg, "--no-standardize")) {
            o->standardize = false;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ug-train: %s needs a value (see --help)\n", arg);
            return 2;
        }
        const char *val = argv[++i];
        double num = 0;
        bool numeric = parse_number(val, &num);
        if (!strcmp(arg, "--device")) o->device = val;
        else if (!strcmp(arg, "--data")) o->data_dir = val;
        else if (!strcmp(arg, "--train-images")) o->train_images = val;
        else if (!strcmp(arg, "--train-labels")) o->train_labels = val;
        else if (!strcmp(arg, "--test-images")) o->test_images = val;
        else if (!strcmp(arg, "--test-labels")) o->test_labels = val;
        else if (!strcmp(arg, "--csv")) o->csv = val;
        else if (!strcmp(arg, "--model")) {
            if (strcmp(val, "mlp") && strcmp(val, "cnn")) {
                fprintf(stderr, "ug-train: --model '%s': mlp or cnn\n", val);
                return 2;
            }
            o->model.cnn = !strcmp(val, "cnn");
        }
        else if (!strcmp(arg, "--optimizer")) {
            if (!strcmp(val, "adam")) o->optimizer = UG_ADAM;
            else if (!strcmp(val, "adamw")) o->optimizer = UG_ADAMW;
            else if (!strcmp(val, "sgd")) o->optimizer = UG_SGD;
            else { fprintf(stderr, "ug-train: unknown optimizer '%s' (adam, adamw, sgd)\n", val); return 2; }
        } else if (!strcmp(arg, "--schedule")) {
            if (!strcmp(val, "constant")) o->schedule = UG_SCHEDULE_CONSTANT;
            else if (!strcmp(val, "cosine")) o->schedule = UG_SCHEDULE_COSINE;
            else { fprintf(stderr, "ug-train: unknown schedule '%s' (constant, cosine)\n", val); return 2; }
        } else if (!strcmp(arg, "--activation")) {
            if (!strcmp(val, "relu")) o->model.activation = MLP_RELU;
            else if (!strcmp(val, "gelu")) o->model.activation = MLP_GELU;
            else if (!strcmp(val, "tanh")) o->model.activation = MLP_TANH;
            else if (!strcmp(val, "sigmoid")) o->model.activation = MLP_SIGMOID;
            else { fprintf(stderr, "ug-train: unknown activation '%s'\n", val); return 2; }
        } else if (!strcmp(arg, "--precision")) {
            if (!mlp_parse_precision(val, &o->model.precision)) {
                fprintf(stderr, "ug-train: unknown precision '%s' (f32, f16, bf16)\n", val);
                return 2;
            }
        } else if (!strcmp(arg, "--hidden")) {
            if (!mlp_parse_hidden(val, &o->model)) {
                fprintf(stderr, "ug-train: --hidden '%s': give up to %d positive sizes, e.g. 256,128\n", val, MLP_MAX_HIDDEN);
                return 2;
            }
        } else if (!numeric) {
            fprintf(stderr, "ug-train: %s '%s' is not a number (or not an option; see --help)\n", arg, val);
            return 2;
        } else if (!strcmp(arg, "--epochs") && num >= 1 && num == floor(num)) o->epochs = (int)num;
        else if (!strcmp(arg, "--batch-size") && num >= 1 && num == floor(num)) o->batch = (int64_t)num;
        else if (!strcmp(arg, "--lr") && num > 0) o->lr = (float)num;
        else if (!strcmp(arg, "--momentum") && num >= 0) o->momentum = (float)num;
        else if (!strcmp(arg, "--weight-decay") && num >= 0) o->weight_decay = (float)num;
        else if (!strcmp(arg, "--dropout") && num >= 0 && num < 1) o->dropout = (float)num;
        else if (!strcmp(arg, "--label-smoothing") && num >= 0 && num < 1) o->model.label_smoothing = (float)num;
        else if (!strcmp(arg, "--clip") && num >= 0) o->max_grad_norm = (float)num;
        else if (!strcmp(arg, "--accumulate") && num >= 1 && num <= 1e6 && num == floor(num)) o->accumulate = (int)num;
        else if (!strcmp(arg, "--seed") && num >= 0 && num == floor(num)) o->seed = (uint64_t)num;
        else if (!strcmp(arg, "--classes") && num >= 1 && num <= 1e6 && num == floor(num)) o->model.classes = (int64_t)num;
        else {
            fprintf(stderr, "ug-train: bad option or value: %s %s (see --help)\n", arg, val);
            return 2;
        }
    }
    return 0;
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

typedef struct progress {
    bool tty;
    double start;
    int64_t last_printed;
    double last_time;
} progress;

static void show_progress(progress *p, int epoch, int epochs, int64_t step, int64_t steps, int64_t samples,
                          float loss, bool final)
{
    double elapsed = now() - p->start;
    double rate = elapsed > 0 ? (double)samples / elapsed : 0.0;
    double left = step > 0 ? elapsed * (double)(steps - step) / (double)step : 0.0;
    if (p->tty) {
        int width = 30, filled = (int)(width * step / (steps ? steps : 1));
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
        bar[width] = '\0';
        printf("\repoch %d/%d [%s] %lld/%lld loss %.4f %8.0f samples/s %4.0fs left ", epoch, epochs, bar,
               (long long)step, (long long)steps, (double)loss, rate, left);
        if (final)
            printf("\n");
    } else {
        printf("epoch %d/%d step %lld/%lld loss %.4f %.0f samples/s %.0fs left\n", epoch, epochs, (long long)step,
               (long long)steps, (double)loss, rate, left);
    }
    fflush(stdout);
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

/* The optimizer of the options; a cosine schedule decays over the whole
 * run: epochs times the updates of an epoch (ceil(batches / accumulate)). */
static ug_status make_optimizer(ug_model *model, const options *o, int64_t train_count,
                                const ug_loader_config *lc, ug_optimizer **out)
{
    ug_optimizer_config oc = ug_optimizer_defaults(o->optimizer);
    oc.lr = o->lr;
    if (o->weight_decay >= 0.0f)
        oc.weight_decay = o->weight_decay;
    if (o->optimizer == UG_SGD)
        oc.momentum = o->momentum;
    oc.max_grad_norm = o->max_grad_norm;
    oc.schedule = (ug_schedule)o->schedule;
    oc.loss_scaling = mlp_loss_scaling(o->model.precision);
    if (o->batch > 0) {
        int64_t batches = lc->drop_last ? train_count / o->batch : (train_count + o->batch - 1) / o->batch;
        oc.total_steps = o->epochs * ((batches + o->accumulate - 1) / o->accumulate);
    }
    return ug_optimizer_create(model, &oc, out);
}

int main(int argc, char **argv)
{
    options o = {.device = NULL, .data_dir = "/usr/share/datasets/fashion-mnist", .epochs = 10, .batch = 64,
                 .model.classes = 10, .accumulate = 1, .lr = 1e-3f, .momentum = 0.9f, .weight_decay = -1.0f, .dropout = -1.0f, .optimizer = UG_ADAM, .schedule = -1, .seed = 0, .standardize = true};
    o.model.hidden_count = 1;
    o.model.hidden[0] = 500;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    o.model.dropout = o.dropout >= 0.0f ? o.dropout : o.model.cnn ? 0.25f : 0.0f;
    if (o.schedule < 0)
        o.schedule = o.model.cnn ? UG_SCHEDULE_COSINE : UG_SCHEDULE_CONSTANT;

    char p1[4096], p2[4096], p3[4096], p4[4096];
    const char *train_images = data_path(o.train_images, o.data_dir, "train-images-idx3-ubyte", p1, sizeof p1);
    const char *train_labels = data_path(o.train_labels, o.data_dir, "train-labels-idx1-ubyte", p2, sizeof p2);
    const char *test_images = data_path(o.test_images, o.data_dir, "t10k-images-idx3-ubyte", p3, sizeof p3);
    const char *test_labels = data_path(o.test_labels, o.data_dir, "t10k-labels-idx1-ubyte", p4, sizeof p4);

    ug_dataset *train = NULL, *test = NULL;
    if (ug_dataset_from_idx(train_images, train_labels, 1.0f / 255.0f, 0.0f, &train) != UG_OK)
        return fail("loading the training set (install dataset-fashion-mnist or pass --data)");
    if (ug_dataset_from_idx(test_images, test_labels, 1.0f / 255.0f, 0.0f, &test) != UG_OK) {
        ug_dataset_free(train);
        return fail("loading the test set");
    }
    if (ug_dataset_require_classes(train, (int32_t)o.model.classes) != UG_OK ||
        ug_dataset_require_classes(test, (int32_t)o.model.classes) != UG_OK) {
        ug_dataset_free(train);
        ug_dataset_free(test);
        return fail("checking the labels (--classes sets their number)");
    }
    /* Standardise with the training set's statistics, as torchvision's Normalize. */
    double mean = 0.0, stddev = 1.0;
    if (o.standardize && (ug_dataset_stats(train, &mean, &stddev) != UG_OK || stddev <= 0.0 ||
                          ug_dataset_transform(train, (float)(1.0 / stddev), (float)(-mean / stddev)) != UG_OK ||
                          ug_dataset_transform(test, (float)(1.0 / stddev), (float)(-mean / stddev)) != UG_OK)) {
        ug_dataset_free(train);
        ug_dataset_free(test);
        return fail("standardising the data");
    }
    o.model.inputs = ug_dataset_features(train);
    if (ug_dataset_features(test) != o.model.inputs) {
        fprintf(stderr, "ug-train: the test images have %lld features, the training images %lld\n",
                (long long)ug_dataset_features(test), (long long)o.model.inputs);
        return 1;
    }

    ug_device *dev = NULL;
    if (ug_device_open(o.device, &dev) != UG_OK)
        return fail("opening the device");
    ug_device_info info;
    ug_device_get_info(dev, &info);

    ug_loader_config lc = ug_loader_default_config();
    lc.seed = o.seed;
    lc.x_dtype = o.model.precision;
    ug_model *model = NULL;
    ug_optimizer *opt = NULL;
    ug_loader *train_loader = NULL, *test_loader = NULL;
    mlp_graph step = {0};
    FILE *csv = NULL;
    rc = 1;

    if (ug_model_create(dev, o.seed, &model) != UG_OK) { fail("creating the model"); goto done; }
    /* The parameters (made by the first graph built) come before the optimizer. */
    if (mlp_build(model, &o.model, o.batch ? o.batch : 1, &step) != UG_OK) { fail("building the training graph"); goto done; }
    if (make_optimizer(model, &o, ug_dataset_count(train), &lc, &opt) != UG_OK) { fail("creating the optimizer"); goto done; }
    if (o.batch == 0) {
        batch_planner planner = {model, &o.model, opt, train, test, lc, o.accumulate > 1};
        uint64_t need = 0, next = 0;
        ug_memory_stats ms;
        mlp_free(&step);
        if (ug_memory_fit_batch(dev, plan_batch, &planner, 0.05, ug_dataset_count(train), &o.batch, &need, &next) != UG_OK ||
            ug_memory_get_stats(dev, &ms) != UG_OK) { fail("choosing the batch size"); goto done; }
        printf("batch size auto: %lld: the plan needs %.2f MiB (+5%% kept free) beside %.2f MiB in use, limit %.2f MiB",
               (long long)o.batch, (double)need / 1048576.0, (double)ms.bytes_in_use / 1048576.0,
               (double)(ms.limit ? ms.limit : info.global_memory) / 1048576.0);
        if (next)
            printf("; %lld would need %.2f MiB", (long long)(2 * o.batch), (double)next / 1048576.0);
        printf("\n");
        if (mlp_build(model, &o.model, o.batch, &step) != UG_OK) { fail("building the training graph"); goto done; }
        ug_optimizer_free(opt); /* again, for the schedule's length in steps of this batch */
        opt = NULL;
        if (make_optimizer(model, &o, ug_dataset_count(train), &lc, &opt) != UG_OK) { fail("creating the optimizer"); goto done; }
    }
    lc.batch_size = o.batch;
    ug_loader_config eval_lc = lc;
    eval_lc.shuffle = false;
    if (mlp_finish(&step, opt) != UG_OK) { fail("compiling the training graph"); goto done; }
    if (ug_loader_create(train, dev, &lc, &train_loader) != UG_OK ||
        ug_loader_create(test, dev, &eval_lc, &test_loader) != UG_OK) { fail("creating the data loaders"); goto done; }
    if (o.csv && !(csv = fopen(o.csv, "w"))) {
        fprintf(stderr, "ug-train: cannot write %s: %s\n", o.csv, strerror(errno));
        goto done;
    }
    if (csv)
        fprintf(csv, "kind,epoch,step,loss,accuracy,seconds\n");

    ug_graph_memory_info mem;
    ug_graph_memory(step.graph, &mem);
    char shape[MLP_MAX_HIDDEN * 21] = "";
    if (o.model.cnn)
        snprintf(shape, sizeof shape, "CNN %lld-conv32-conv64-128-%lld", (long long)o.model.inputs,
                 (long long)o.model.classes);
    else
        for (int i = 0, used = snprintf(shape, sizeof shape, "MLP %lld", (long long)o.model.inputs);
             i <= o.model.hidden_count; i++)
            used += snprintf(shape + used, sizeof shape - (size_t)used, "-%lld",
                             (long long)(i < o.model.hidden_count ? o.model.hidden[i] : o.model.classes));
    printf("unigrad ug-train: %s (%s, %s)\n", info.id, info.name, info.vendor);
    printf("model %s (%s), dropout %g, %s lr %g%s, batch %lld, %d epochs, seed %llu; %lld training and %lld test samples\n",
           shape, ug_dtype_name(o.model.precision), (double)o.model.dropout,
           o.optimizer == UG_SGD ? "SGD" : o.optimizer == UG_ADAM ? "Adam" : "AdamW", (double)o.lr,
           o.schedule == UG_SCHEDULE_COSINE ? " cosine" : "", (long long)o.batch,
           o.epochs, (unsigned long long)o.seed, (long long)ug_dataset_count(train), (long long)ug_dataset_count(test));
    printf("step plan: %d kernels (%d fused away, %d recomputing checkpointed activations), %.2f MiB of activations, "
           "%.2f MiB of gradients, %.2f MiB in all\n", mem.nodes, mem.fused, mem.recomputed,
           (double)mem.activation_bytes / 1048576.0, (double)mem.gradient_bytes / 1048576.0,
           (double)mem.total_bytes / 1048576.0);
    fflush(stdout);

    progress bar = {.tty = !o.quiet && isatty(STDOUT_FILENO)};
    int64_t steps = ug_loader_batches(train_loader);
    int pending = 0; /* batches accumulated on the step graph */
    double first_step_seconds = -1;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        bar.start = now();
        bar.last_printed = 0;
        bar.last_time = bar.start;
        if (ug_loader_start_epoch(train_loader, epoch - 1) != UG_OK) { fail("starting an epoch"); goto done; }
        int64_t step_index = 0, samples = 0;
        float loss = NAN;
        for (bool finished = false;;) {
            ug_batch b;
            if (ug_loader_next(train_loader, &b, &finished) != UG_OK) { fail("loading a batch"); goto done; }
            if (finished)
                break;
            if (ug_graph_bind(step.graph, step.x, b.x) != UG_OK || ug_graph_bind(step.graph, step.y, b.y) != UG_OK ||
                train_on(step.graph, o.accumulate, &pending) != UG_OK) { fail("training step"); goto done; }
            step_index++;
            samples += b.count;
            /* Reading the loss waits for the device, so it happens only when shown or logged. */
            double t = now();
            bool show = !o.quiet && (bar.tty ? t - bar.last_time > 0.25 : step_index - bar.last_printed >= steps / 4);
            /* The first step is waited for once, to report the start-up time. */
            bool first = epoch == 1 && step_index == 1;
            if (csv || show || first || step_index == steps) {
                if (ug_graph_read(step.graph, step.loss, &loss, sizeof loss) != UG_OK) { fail("reading the loss"); goto done; }
            }
            if (first)
                first_step_seconds = seconds_since_process_start();
            if (csv)
                fprintf(csv, "step,%d,%lld,%.6f,,\n", epoch, (long long)step_index, (double)loss);
            if (show && step_index != steps) {
                show_progress(&bar, epoch, o.epochs, step_index, steps, samples, loss, false);
                bar.last_printed = step_index;
                bar.last_time = t;
            }
        }
        if (pending && ug_graph_run_update(step.graph) != UG_OK) { fail("training step"); goto done; }
        pending = 0;
        double train_loss = 0, train_accuracy = 0;
        if (read_sums(&step, samples, &train_loss, &train_accuracy) != UG_OK) { fail("reading the epoch's loss"); goto done; }
        double train_seconds = now() - bar.start;
        if (!o.quiet)
            show_progress(&bar, epoch, o.epochs, step_index, steps, samples, loss, true);
        double accuracy = 0, test_loss = 0;
        if (evaluate(test_loader, &step, &accuracy, &test_loss) != UG_OK) { fail("evaluating"); goto done; }
        printf("epoch %d: train loss %.4f (accuracy %.2f%%), test loss %.4f, test accuracy %.2f%%, %.1f s (%.0f samples/s)\n",
               epoch, train_loss, 100.0 * train_accuracy, test_loss, 100.0 * accuracy, train_seconds,
               (double)samples / train_seconds);
        ug_loss_scaler_state scaler;
        if (ug_optimizer_loss_scaler(opt, &scaler) == UG_OK)
            printf("loss scale %g, %lld steps skipped so far\n", (double)scaler.scale,
                   (long long)scaler.skipped_steps);
        if (epoch == 1 && first_step_seconds >= 0)
            printf("first step finished %.2f s after the process started\n", first_step_seconds);
        fflush(stdout);
        if (csv)
            fprintf(csv, "epoch,%d,%lld,%.6f,%.6f,%.3f\n", epoch, (long long)step_index, test_loss, accuracy, train_seconds);
    }
    rc = 0;
done:
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "ug-train: writing %s failed: %s\n", o.csv, strerror(errno));
        rc = 1;
    }
    ug_loader_free(train_loader);
    ug_loader_free(test_loader);
    mlp_free(&step);
    ug_optimizer_free(opt);
    ug_model_free(model);
    ug_device_close(dev);
    ug_dataset_free(train);
    ug_dataset_free(test);
    return rc;
}
