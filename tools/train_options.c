/* ug-train's options: one table gives each option's name, value, help and
 * target; the parser, the error messages and --help are all made from it.
 * A new option is one more row (and a field in train_options). */
#define _POSIX_C_SOURCE 200809L
#include "train_options.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum option_kind {
    OPT_HELP,      /* prints --help */
    OPT_SET,       /* a flag: sets the bool target to .set */
    OPT_STRING,    /* const char * */
    OPT_INT,       /* int, whole numbers in [min, max] */
    OPT_INT64,     /* int64_t, likewise */
    OPT_UINT64,    /* uint64_t, likewise */
    OPT_FLOAT,     /* float in [min, max] (open ends: .open) */
    OPT_CHOICE,    /* int: the value of the name given among .choices */
    OPT_CUSTOM     /* .parse reads the value; .accepts says what it may be */
} option_kind;

enum { OPEN_MIN = 1, OPEN_MAX = 2 }; /* .open: an end of the range not included */

typedef struct option_choice {
    const char *name;
    int value;
} option_choice;

typedef struct option_spec {
    const char *name;       /* without the leading "--" */
    const char *value;      /* the value's name in --help ("N", "FILE"); NULL: takes no value */
    option_kind kind;
    size_t target;          /* offsetof the field in train_options */
    double min, max;        /* numeric kinds; max 0: the type's largest */
    unsigned open;
    bool set;               /* OPT_SET */
    const option_choice *choices; /* OPT_CHOICE, ended by a NULL name */
    bool (*parse)(const char *value, train_options *o); /* OPT_CUSTOM */
    const char *accepts;    /* what the value may be, for errors: OPT_CUSTOM's and OPT_STRING's
                             * (other kinds say it from their range or choices) */
    bool output;            /* names a file or folder the run writes: never taken from a
                             * checkpoint on --resume (train_option_output) */
    /* One line, wrapped by --help. "; default X" is added where the
     * default value is one the option accepts (else the text says it). */
    const char *help;
} option_spec;

static const option_choice optimizers[] = {{"adam", UG_ADAM}, {"adamw", UG_ADAMW}, {"sgd", UG_SGD}, {NULL, 0}};
static const option_choice schedules[] = {
    {"constant", UG_SCHEDULE_CONSTANT}, {"step", UG_SCHEDULE_STEP}, {"cosine", UG_SCHEDULE_COSINE}, {NULL, 0}};
static const option_choice models[] = {{"mlp", 0}, {"cnn", 1}, {NULL, 0}};
static const option_choice activations[] = {
    {"relu", MLP_RELU}, {"gelu", MLP_GELU}, {"tanh", MLP_TANH}, {"sigmoid", MLP_SIGMOID}, {NULL, 0}};

static bool parse_batch(const char *value, train_options *o);
static bool parse_hidden(const char *value, train_options *o);
static bool parse_precision(const char *value, train_options *o);
static bool parse_save_every(const char *value, train_options *o);

#define FIELD(f) offsetof(train_options, f)

static const option_spec table[] = {
    {.name = "device", .value = "NAME", .kind = OPT_STRING, .target = FIELD(device),
     .accepts = "a device name: cpu, opencl:N, hip:N, cuda:N or auto",
     .help = "cpu, opencl:N, hip:N, cuda:N or auto (default; UG_DEVICE overrides)"},
    {.name = "devices", .value = "LIST", .kind = OPT_STRING, .target = FIELD(devices),
     .accepts = "device names separated by commas, e.g. cpu,opencl:0",
     .help = "train data parallel on every listed device at once (each takes its part of every batch, "
             "the gradients are summed before each update); under mpirun each process is one replica on "
             "--device, which may name {local_rank}"},
    {.name = "shard-optimizer", .kind = OPT_SET, .target = FIELD(shard_optimizer), .set = true,
     .help = "with --devices or under mpirun: each replica keeps the optimizer's state of its part of the "
             "parameters only (ZeRO stage 1), the parts gathered after every update (the same numbers)"},
    {.name = "stages", .value = "LIST", .kind = OPT_STRING, .target = FIELD(stages),
     .accepts = "device names separated by commas, e.g. cpu,opencl:0",
     .help = "split the model into pipeline stages, one on each listed device, for a model larger than one "
             "device: its layers spread over them, each batch's micro-batches flowing through them (1F1B)"},
    {.name = "micro-batches", .value = "N", .kind = OPT_INT, .target = FIELD(micro_batches), .min = 1,
     .max = 1024, .help = "with --stages: the parts each batch is cut into (default: two per stage)"},
    {.name = "epochs", .value = "N", .kind = OPT_INT, .target = FIELD(epochs), .min = 1,
     .help = "passes over the training set"},
    {.name = "batch-size", .value = "N", .kind = OPT_CUSTOM, .parse = parse_batch,
     .accepts = "a whole number >= 1 or auto",
     .help = "samples per batch, default 64; auto: the largest power of two whose plan (model, optimizer, "
             "activations, loaders) fits the device's memory limit (UG_MEMORY_LIMIT, else its size), 5% kept free"},
    {.name = "accumulate", .value = "N", .kind = OPT_INT, .target = FIELD(accumulate), .min = 1, .max = 1e6,
     .help = "one optimizer update per N batches (their gradients summed on the device: a batch N times the size)"},
    {.name = "lr", .value = "X", .kind = OPT_FLOAT, .target = FIELD(lr), .min = 0, .open = OPEN_MIN,
     .help = "learning rate (the schedule's peak)"},
    {.name = "optimizer", .value = "NAME", .kind = OPT_CHOICE, .target = FIELD(optimizer), .choices = optimizers,
     .help = "adam, adamw or sgd"},
    {.name = "schedule", .value = "NAME", .kind = OPT_CHOICE, .target = FIELD(schedule), .choices = schedules,
     .help = "the learning rate: constant (mlp default), step (times --gamma every --step-size updates) or "
             "cosine (cnn default: from --lr down to 0 over the run's updates, after --warmup)"},
    {.name = "step-size", .value = "N", .kind = OPT_INT64, .target = FIELD(step_size), .min = 1,
     .help = "step schedule: updates between decays; default one epoch's updates"},
    {.name = "gamma", .value = "X", .kind = OPT_FLOAT, .target = FIELD(gamma), .min = 0, .open = OPEN_MIN,
     .help = "step schedule: the factor of each decay"},
    {.name = "warmup", .value = "N", .kind = OPT_INT64, .target = FIELD(warmup), .min = 0,
     .help = "cosine schedule: updates over which the learning rate first rises linearly to --lr"},
    {.name = "momentum", .value = "X", .kind = OPT_FLOAT, .target = FIELD(momentum), .min = 0,
     .help = "SGD momentum"},
    {.name = "weight-decay", .value = "X", .kind = OPT_FLOAT, .target = FIELD(weight_decay), .min = 0,
     .help = "default 0 (adamw: 1e-2)"},
    {.name = "clip", .value = "X", .kind = OPT_FLOAT, .target = FIELD(max_grad_norm), .min = 0,
     .help = "clip gradients to global norm X (0: no clipping)"},
    {.name = "model", .value = "NAME", .kind = OPT_CHOICE, .target = FIELD(model_kind), .choices = models,
     .help = "mlp or cnn: conv 32 and conv 64 (3x3, batch norm, ReLU, max-pool 2), linear 128, dropout 0.25, "
             "linear"},
    {.name = "hidden", .value = "LIST", .kind = OPT_CUSTOM, .parse = parse_hidden,
     .accepts = "up to 32 positive sizes, e.g. 256,128 or 16x1024",
     .help = "the MLP's hidden sizes, e.g. 500 (default), 256,128 or 16x1024"},
    {.name = "activation", .value = "NAME", .kind = OPT_CHOICE, .target = FIELD(activation),
     .choices = activations, .help = "relu, gelu, tanh or sigmoid"},
    {.name = "dropout", .value = "P", .kind = OPT_FLOAT, .target = FIELD(dropout), .min = 0, .max = 1,
     .open = OPEN_MAX, .help = "dropout after each hidden layer, default 0 (cnn: 0.25)"},
    {.name = "label-smoothing", .value = "S", .kind = OPT_FLOAT, .target = FIELD(model.label_smoothing), .min = 0,
     .max = 1, .open = OPEN_MAX, .help = "label smoothing of the cross-entropy"},
    {.name = "precision", .value = "P", .kind = OPT_CUSTOM, .parse = parse_precision, .accepts = "f32, f16 or bf16",
     .help = "f32 (default), f16 or bf16: products and convolutions in the half type with f32 master weights "
             "(f16 with dynamic loss scaling)"},
    {.name = "checkpoint-activations", .kind = OPT_SET, .target = FIELD(model.checkpoint), .set = true,
     .help = "recompute each hidden layer's (cnn: conv block's) activations in backward instead of keeping "
             "them (less memory, more compute)"},
    {.name = "seed", .value = "N", .kind = OPT_UINT64, .target = FIELD(seed), .min = 0,
     .help = "seed of the initialisation, shuffling and dropout"},
    {.name = "classes", .value = "N", .kind = OPT_INT64, .target = FIELD(model.classes), .min = 1, .max = 1e6,
     .help = "classes the labels must fall in"},
    {.name = "workers", .value = "N", .kind = OPT_INT, .target = FIELD(workers), .min = 1, .max = 64,
     .help = "the data loaders' background threads (assembling and uploading batches)"},
    {.name = "device-convert", .kind = OPT_SET, .target = FIELD(device_convert), .set = true,
     .help = "upload the images as bytes (a quarter of f32's) and convert them on the device"},
    {.name = "crop-padding", .value = "N", .kind = OPT_INT, .target = FIELD(crop_padding), .min = 0, .max = 64,
     .help = "augment on the device (implies --device-convert): each training image cut at a random place from "
             "a copy padded with N zero pixels (torchvision's RandomCrop)"},
    {.name = "flip", .value = "P", .kind = OPT_FLOAT, .target = FIELD(flip), .min = 0, .max = 1,
     .help = "augment on the device (implies --device-convert): flip each training image left to right with "
             "probability P (RandomHorizontalFlip)"},
    {.name = "keep-denormals", .kind = OPT_SET, .target = FIELD(keep_denormals), .set = true,
     .help = "keep denormal floats on the CPU instead of flushing them to zero (IEEE arithmetic throughout; "
             "up to 100x slower where values decay into their range, as Adam's moments of rarely seen "
             "pixels do)"},
    {.name = "data", .value = "DIR", .kind = OPT_STRING, .target = FIELD(data_dir), .accepts = "a folder",
     .help = "folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"},
    {.name = "train-images", .value = "FILE", .kind = OPT_STRING, .target = FIELD(train_images), .accepts = "a file name",
     .help = "instead of the one in --data"},
    {.name = "train-labels", .value = "FILE", .kind = OPT_STRING, .target = FIELD(train_labels), .accepts = "a file name",
     .help = "instead of the one in --data"},
    {.name = "test-images", .value = "FILE", .kind = OPT_STRING, .target = FIELD(test_images), .accepts = "a file name",
     .help = "instead of the one in --data"},
    {.name = "test-labels", .value = "FILE", .kind = OPT_STRING, .target = FIELD(test_labels), .accepts = "a file name",
     .help = "instead of the one in --data"},
    {.name = "val-split", .value = "F", .kind = OPT_FLOAT, .target = FIELD(val_split), .min = 0, .max = 1,
     .open = OPEN_MIN | OPEN_MAX,
     .help = "hold out this fraction of the training set (a seeded split) and report the loss on it each epoch"},
    {.name = "patience", .value = "N", .kind = OPT_INT, .target = FIELD(patience), .min = 1,
     .help = "with --val-split: stop after N epochs without a lower validation loss, and restore the weights "
             "of the best epoch"},
    {.name = "save", .output = true, .value = "FILE", .kind = OPT_STRING, .target = FIELD(save), .accepts = "a file name",
     .help = "save a checkpoint (safetensors: model, optimizer, data order, random state, options) to FILE, "
             "replacing it atomically; also on Ctrl-C. With --patience, the best weights go to FILE.best"},
    {.name = "save-every", .value = "N", .kind = OPT_CUSTOM, .parse = parse_save_every,
     .accepts = "N (updates) or Nepochs, N >= 1",
     .help = "with --save: every N updates, or every N epochs (e.g. 2epochs); default 1epoch"},
    {.name = "keep", .value = "N", .kind = OPT_INT, .target = FIELD(keep), .min = 1, .max = 1000,
     .help = "with --save: keep the last N checkpoints (FILE, FILE.1, ...)"},
    {.name = "resume", .value = "FILE", .kind = OPT_STRING, .target = FIELD(resume), .accepts = "a checkpoint file",
     .help = "continue the run saved in FILE exactly where it stopped, with its options (those given here "
             "override them, e.g. --epochs)"},
    {.name = "resume-override", .kind = OPT_SET, .target = FIELD(resume_override), .set = true,
     .help = "with --resume: accept options that change the saved run's schedule or numbers (more --epochs "
             "under the cosine schedule, another --lr); without it such a resume is refused"},
    {.name = "csv", .output = true, .value = "FILE", .kind = OPT_STRING, .target = FIELD(csv), .accepts = "a file name",
     .help = "log a row per step and per epoch (see below)"},
    {.name = "plot", .output = true, .value = "FILE", .kind = OPT_STRING, .target = FIELD(plot), .accepts = "a PNG file name",
     .help = "draw the loss and accuracy curves into FILE (PNG) with gnuplot after every epoch (ug-plot draws "
             "them from a --csv log)"},
    {.name = "tensorboard", .output = true, .value = "DIR", .kind = OPT_STRING, .target = FIELD(tensorboard),
     .accepts = "a folder", .help = "log the figures of the CSV, the pool's memory and loss scaling as "
                                   "TensorBoard scalars in a new event file in DIR (tensorboard --logdir DIR)"},
    {.name = "profile", .output = true, .value = "FILE", .kind = OPT_STRING, .target = FIELD(profile), .accepts = "a file name",
     .help = "record --profile-steps steps after --profile-skip with the profiler: their Chrome trace goes to "
             "FILE (open it in ui.perfetto.dev) and the top ops by device time are printed"},
    {.name = "profile-skip", .value = "N", .kind = OPT_INT64, .target = FIELD(profile_skip), .min = 0,
     .help = "with --profile: steps run first (warm-up), fewer when the run is shorter"},
    {.name = "profile-steps", .value = "N", .kind = OPT_INT64, .target = FIELD(profile_steps), .min = 1,
     .help = "with --profile: steps recorded"},
    {.name = "no-standardize", .kind = OPT_SET, .target = FIELD(standardize), .set = false,
     .help = "keep pixel values in [0, 1] instead of standardising them with the training set's mean and "
             "standard deviation"},
    {.name = "quiet", .kind = OPT_SET, .target = FIELD(quiet), .set = true, .help = "no progress display"},
    {.name = "help", .kind = OPT_HELP, .help = "this help (also -h)"},
};

enum { OPTION_COUNT = sizeof table / sizeof table[0] };

void train_options_defaults(train_options *o)
{
    *o = (train_options){
        .data_dir = "/usr/share/datasets/fashion-mnist",
        .epochs = 10,
        .batch = 64,
        .accumulate = 1,
        .workers = 1,
        .save_every_epochs = 1,
        .keep = 1,
        .profile_skip = 5,
        .profile_steps = 5,
        .standardize = true,
        .optimizer = UG_ADAM,
        .lr = 1e-3f,
        .momentum = 0.9f,
        .weight_decay = -1.0f,
        .schedule = -1,
        .gamma = 0.1f,
        .activation = MLP_RELU,
        .dropout = -1.0f,
        .model = {.classes = 10, .hidden_count = 1, .hidden = {500}, .precision = UG_F32},
    };
}

/* ---- values ---- */

static bool parse_batch(const char *value, train_options *o)
{
    if (!strcmp(value, "auto")) {
        o->batch = 0;
        return true;
    }
    char *end = NULL;
    errno = 0;
    double n = strtod(value, &end);
    if (!value[0] || *end || errno || !(n >= 1 && n <= 1e15) || n != floor(n))
        return false;
    o->batch = (int64_t)n;
    return true;
}

static bool parse_hidden(const char *value, train_options *o) { return mlp_parse_hidden(value, &o->model); }

static bool parse_precision(const char *value, train_options *o)
{
    return mlp_parse_precision(value, &o->model.precision);
}

static bool parse_save_every(const char *value, train_options *o)
{
    char *end = NULL;
    errno = 0;
    long long n = strtoll(value, &end, 10);
    if (end == value || errno || n < 1 || n > INT_MAX)
        return false;
    if (!strcmp(end, "epoch") || !strcmp(end, "epochs")) {
        o->save_every = 0;
        o->save_every_epochs = (int)n;
        return true;
    }
    if (*end && strcmp(end, "updates") && strcmp(end, "update"))
        return false;
    o->save_every = n;
    return true;
}

static bool integral(option_kind kind) { return kind == OPT_INT || kind == OPT_INT64 || kind == OPT_UINT64; }

/* The largest value a numeric option takes: its max, else its type's
 * (for 64-bit integers, where doubles still count in ones). */
static double max_of(const option_spec *s)
{
    if (s->max != 0)
        return s->max;
    switch (s->kind) {
    case OPT_INT: return INT_MAX;
    case OPT_INT64:
    case OPT_UINT64: return 9007199254740992.0; /* 2^53 */
    default: return FLT_MAX;
    }
}

/* What a numeric option accepts, in words: "a whole number >= 1",
 * "a number in [0, 1)". */
static void describe_range(const option_spec *s, char *buf, size_t len)
{
    const char *what = integral(s->kind) ? "a whole number" : "a number";
    if (s->max == 0)
        snprintf(buf, len, "%s %s %g", what, s->open & OPEN_MIN ? ">" : ">=", s->min);
    else
        snprintf(buf, len, "%s in %c%.15g, %.15g%c", what, s->open & OPEN_MIN ? '(' : '[', s->min, s->max,
                 s->open & OPEN_MAX ? ')' : ']');
}

/* "a, b or c" from a choice list. */
static void describe_choices(const option_choice *c, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; c[i].name && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : c[i + 1].name ? ", " : " or ",
                                 c[i].name);
}

static void describe_accepted(const option_spec *s, char *buf, size_t len)
{
    if (s->accepts)
        snprintf(buf, len, "%s", s->accepts);
    else if (s->kind == OPT_CHOICE)
        describe_choices(s->choices, buf, len);
    else
        describe_range(s, buf, len);
}

static bool in_range(const option_spec *s, double v)
{
    bool above = s->open & OPEN_MIN ? v > s->min : v >= s->min;
    bool below = s->open & OPEN_MAX ? v < max_of(s) : v <= max_of(s);
    return above && below && (!integral(s->kind) || v == floor(v));
}

/* Reads value into the option's target; false when it is not one the
 * option accepts. */
static bool set_value(const option_spec *s, const char *value, train_options *o)
{
    void *target = (char *)o + s->target;
    switch (s->kind) {
    case OPT_STRING:
        *(const char **)target = value;
        return value[0] != '\0';
    case OPT_CHOICE:
        for (const option_choice *c = s->choices; c->name; c++)
            if (!strcmp(c->name, value)) {
                *(int *)target = c->value;
                return true;
            }
        return false;
    case OPT_CUSTOM:
        return s->parse(value, o);
    default:
        break;
    }
    /* Numbers: strtod's forms ("1e3" epochs is 1000); seeds of plain
     * digits exactly, to 2^64 - 1. */
    char *end = NULL;
    errno = 0;
    if (s->kind == OPT_UINT64 && value[0] >= '0' && value[0] <= '9') {
        unsigned long long n = strtoull(value, &end, 10);
        if (!*end && !errno) {
            *(uint64_t *)target = (uint64_t)n;
            return true;
        }
    }
    errno = 0;
    double v = strtod(value, &end);
    if (!value[0] || *end || errno || !isfinite(v) || !in_range(s, v))
        return false;
    switch (s->kind) {
    case OPT_INT: *(int *)target = (int)v; break;
    case OPT_INT64: *(int64_t *)target = (int64_t)v; break;
    case OPT_UINT64: *(uint64_t *)target = (uint64_t)v; break;
    default: *(float *)target = (float)v; break;
    }
    return true;
}

/* "default X" for --help, where the default is a value the option
 * accepts; false where the help text says it (or there is none). */
static bool describe_default(const option_spec *s, const train_options *d, char *buf, size_t len)
{
    const void *target = (const char *)d + s->target;
    double v = 0;
    switch (s->kind) {
    case OPT_STRING:
        if (!*(const char *const *)target)
            return false;
        snprintf(buf, len, "%s", *(const char *const *)target);
        return true;
    case OPT_CHOICE:
        for (const option_choice *c = s->choices; c->name; c++)
            if (c->value == *(const int *)target) {
                snprintf(buf, len, "%s", c->name);
                return true;
            }
        return false;
    case OPT_INT: v = *(const int *)target; break;
    case OPT_INT64: v = (double)*(const int64_t *)target; break;
    case OPT_UINT64: v = (double)*(const uint64_t *)target; break;
    case OPT_FLOAT: v = *(const float *)target; break;
    default: return false;
    }
    if (!in_range(s, v))
        return false;
    snprintf(buf, len, "%g", v);
    return true;
}

/* ---- --help ---- */

enum { HELP_WIDTH = 79, HELP_INDENT = 23 };

/* Writes text from column `column` (where the cursor is), wrapped at
 * HELP_WIDTH with continuation lines indented by indent; ends the line. */
static void wrap(FILE *to, const char *text, int column, int indent)
{
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t word = strcspn(p, " ");
        if (column > indent && column + 1 + (int)word > HELP_WIDTH) {
            fprintf(to, "\n%*s", indent, "");
            column = indent;
        } else if (column > indent) {
            fputc(' ', to);
            column++;
        }
        fprintf(to, "%.*s", (int)word, p);
        column += (int)word;
        p += word;
    }
    fputc('\n', to);
}

void train_options_usage(FILE *to)
{
    train_options defaults;
    train_options_defaults(&defaults);
    fprintf(to, "usage: ug-train [options]\n"
                "Trains a classifier on IDX data (default: Fashion-MNIST from\n"
                "/usr/share/datasets/fashion-mnist). Options take their value as --name VALUE\n"
                "or --name=VALUE.\n");
    for (int i = 0; i < OPTION_COUNT; i++) {
        const option_spec *s = &table[i];
        char head[64], def[128], help[1024];
        int column = snprintf(head, sizeof head, "  --%s%s%s", s->name, s->value ? " " : "", s->value ? s->value : "");
        fputs(head, to);
        if (column + 2 > HELP_INDENT) { /* too long: the help on the next line */
            fputc('\n', to);
            column = 0;
        }
        fprintf(to, "%*s", HELP_INDENT - column, "");
        if (describe_default(s, &defaults, def, sizeof def))
            snprintf(help, sizeof help, "%s; default %s", s->help, def);
        else
            snprintf(help, sizeof help, "%s", s->help);
        wrap(to, help, HELP_INDENT, HELP_INDENT);
    }
    /* The columns, with a space after each comma so that they wrap. */
    char columns[2 * sizeof TRAIN_CSV_COLUMNS], *c = columns;
    for (const char *p = TRAIN_CSV_COLUMNS; *p; p++) {
        *c++ = *p;
        if (*p == ',')
            *c++ = ' ';
    }
    *c = '\0';
    fputs("The --csv log has the columns\n  ", to);
    wrap(to, columns, 2, 2);
    fputs("  ", to);
    wrap(to,
         "Step rows: the batch's training loss, the learning rate its update used (with --accumulate, the "
         "update its gradients go into) and the epoch's samples/s so far. Epoch rows (step: the epoch's "
         "batches): the epoch's mean training loss, the test loss, the test accuracy in percent, the learning "
         "rate of the epoch's last update, the epoch's samples/s (training only), and the epoch's training "
         "and validation accuracy in percent. global_step counts batches from the run's start. A field that "
         "does not apply is empty.",
         2, 2);
}

/* ---- errors ---- */

/* Edit distance with transpositions (optimal string alignment), for
 * suggestions; names are short. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAX = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAX || m >= MAX)
        return MAX;
    int d[MAX][MAX];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* The options an unknown name was probably meant to be: those at the
 * smallest edit distance, if at most 2 (and less than the name's length),
 * else those it begins (three letters or more). Up to 3; their count. */
static int suggest(const char *name, const option_spec *out[3])
{
    int count = 0, best = 2;
    for (int i = 0; i < OPTION_COUNT; i++) {
        int d = edit_distance(name, table[i].name);
        if (d >= (int)strlen(name) || d > best)
            continue;
        if (d < best)
            count = 0;
        best = d;
        if (count < 3)
            out[count++] = &table[i];
    }
    if (count || strlen(name) < 3)
        return count;
    for (int i = 0; i < OPTION_COUNT && count < 3; i++)
        if (!strncmp(table[i].name, name, strlen(name)))
            out[count++] = &table[i];
    return count;
}

static void unknown_option(const char *arg, size_t len)
{
    fprintf(stderr, "ug-train: unknown option '%.*s'", (int)len, arg);
    char name[64];
    size_t dashes = strspn(arg, "-");
    snprintf(name, sizeof name, "%.*s", (int)(len - dashes), arg + dashes);
    const option_spec *near[3];
    int count = suggest(name, near);
    for (int i = 0; i < count; i++)
        fprintf(stderr, "%s--%s", i == 0 ? "; did you mean " : i + 1 < count ? ", " : " or ", near[i]->name);
    fprintf(stderr, "%s\nvalid options:", count ? "?" : "");
    int column = (int)strlen("valid options:");
    for (int i = 0; i < OPTION_COUNT; i++) {
        int width = 3 + (int)strlen(table[i].name);
        if (column + width > HELP_WIDTH) {
            fprintf(stderr, "\n ");
            column = 1;
        }
        fprintf(stderr, " --%s", table[i].name);
        column += width;
    }
    fprintf(stderr, "\n(ug-train --help describes them)\n");
}

/* ---- the parser ---- */

static const option_spec *find(const char *name, size_t len)
{
    for (int i = 0; i < OPTION_COUNT; i++)
        if (strlen(table[i].name) == len && !strncmp(table[i].name, name, len))
            return &table[i];
    return NULL;
}

int train_option_output(const char *arg, const char **name)
{
    if (strncmp(arg, "--", 2) != 0)
        return 0;
    const char *eq = strchr(arg, '=');
    const option_spec *s = find(arg + 2, (eq ? (size_t)(eq - arg) : strlen(arg)) - 2);
    if (!s || !s->output)
        return 0;
    *name = s->name;
    return eq ? 1 : 2;
}

static const char *choice_name(const option_choice *c, int value)
{
    for (; c->name; c++)
        if (c->value == value)
            return c->name;
    return "?";
}

/* Options that only apply with others. */
static int check_combinations(const train_options *o, const bool given[OPTION_COUNT])
{
    static const struct {
        const char *option;
        int schedule;
    } needs[] = {{"warmup", UG_SCHEDULE_COSINE}, {"step-size", UG_SCHEDULE_STEP}, {"gamma", UG_SCHEDULE_STEP}};
    for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++) {
        const option_spec *s = find(needs[i].option, strlen(needs[i].option));
        if (given[s - table] && o->schedule != needs[i].schedule) {
            fprintf(stderr, "ug-train: --%s applies to --schedule %s (the schedule is %s)\n", s->name,
                    choice_name(schedules, needs[i].schedule), choice_name(schedules, o->schedule));
            return TRAIN_OPTIONS_USAGE;
        }
    }
    const struct {
        const char *option, *needed;
        bool present;
    } pairs[] = {{"patience", "val-split", o->val_split > 0},
                 {"save-every", "save", o->save != NULL},
                 {"keep", "save", o->save != NULL},
                 {"resume-override", "resume", o->resume != NULL}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const option_spec *s = find(pairs[i].option, strlen(pairs[i].option));
        if (given[s - table] && !pairs[i].present) {
            fprintf(stderr, "ug-train: --%s needs --%s\n", s->name, pairs[i].needed);
            return TRAIN_OPTIONS_USAGE;
        }
    }
    return TRAIN_OPTIONS_OK;
}

int train_options_parse(int argc, char **argv, train_options *o)
{
    bool given[OPTION_COUNT] = {false};
    train_options_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h")) {
            train_options_usage(stdout);
            return TRAIN_OPTIONS_HELP;
        }
        if (arg[0] != '-') {
            fprintf(stderr, "ug-train: unexpected argument '%s' (options begin with --; see --help)\n", arg);
            return TRAIN_OPTIONS_USAGE;
        }
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const option_spec *s = strncmp(arg, "--", 2) ? NULL : find(arg + 2, len - 2);
        if (!s) {
            unknown_option(arg, len);
            return TRAIN_OPTIONS_USAGE;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!s->value) {
            if (value) {
                fprintf(stderr, "ug-train: --%s takes no value (got '%s')\n", s->name, arg);
                return TRAIN_OPTIONS_USAGE;
            }
            if (s->kind == OPT_HELP) {
                train_options_usage(stdout);
                return TRAIN_OPTIONS_HELP;
            }
            *(bool *)((char *)o + s->target) = s->set;
            given[s - table] = true;
            continue;
        }
        char accepted[256];
        describe_accepted(s, accepted, sizeof accepted);
        /* The next argument is the value, unless it is another option
         * (a value beginning with -- can be given as --name=--value). */
        if (!value) {
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr, "ug-train: --%s needs a value: %s\n", s->name, accepted);
                return TRAIN_OPTIONS_USAGE;
            }
            value = argv[++i];
        }
        if (!set_value(s, value, o)) {
            fprintf(stderr, "ug-train: --%s '%s': %s\n", s->name, value, accepted);
            return TRAIN_OPTIONS_USAGE;
        }
        given[s - table] = true;
    }
    /* The defaults that depend on the model. */
    o->model.cnn = o->model_kind == 1;
    o->model.activation = (mlp_activation)o->activation;
    o->model.dropout = o->dropout >= 0.0f ? o->dropout : o->model.cnn ? 0.25f : 0.0f;
    if (o->schedule < 0)
        o->schedule = o->model.cnn ? UG_SCHEDULE_COSINE : UG_SCHEDULE_CONSTANT;
    return check_combinations(o, given);
}

ug_trainer_config train_options_trainer_config(const train_options *o)
{
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = o->epochs;
    c.batch_size = o->batch;
    c.accumulate = o->accumulate;
    c.precision = o->model.precision;
    c.optimizer = ug_optimizer_defaults((ug_optim_type)o->optimizer);
    c.optimizer.lr = o->lr;
    if (o->weight_decay >= 0.0f)
        c.optimizer.weight_decay = o->weight_decay;
    if (o->optimizer == UG_SGD)
        c.optimizer.momentum = o->momentum;
    c.optimizer.max_grad_norm = o->max_grad_norm;
    c.optimizer.schedule = (ug_schedule)o->schedule;
    c.optimizer.step_size = o->step_size;
    c.optimizer.gamma = o->gamma;
    c.optimizer.warmup_steps = o->warmup;
    c.seed = o->seed;
    c.workers = o->workers;
    /* Augmentation runs on the device, so it converts there too. */
    const bool augment = o->crop_padding > 0 || o->flip > 0.0f;
    c.device_convert = o->device_convert || augment;
    if (augment) { /* the images are square and one channel, as the CNN's */
        const int64_t side = (int64_t)llround(sqrt((double)o->model.inputs));
        c.augment = (ug_image_augment){.channels = 1, .height = side, .width = side,
                                       .crop_padding = o->crop_padding, .flip = o->flip};
    }
    c.keep_denormals = o->keep_denormals;
    c.shard_optimizer = o->shard_optimizer;
    c.stages = o->stages;
    c.micro_batches = o->micro_batches;
    c.patience = o->patience;
    c.checkpoint = o->save;
    c.checkpoint_every_updates = o->save_every;
    c.checkpoint_every_epochs = o->save_every_epochs;
    c.keep = o->keep;
    c.resume = o->resume;
    c.resume_override = o->resume_override;
    return c;
}
