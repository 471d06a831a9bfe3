/* ug-bench train-mlp and train-cnn: the training step of ug-train's model
 * (MLP 784-500-10 by default, or the CNN; Adam) per device and batch size, beside the same step's
 * matrix products run alone through OpenBLAS on the host in the same run;
 * then a full epoch with the prefetching loader against the sum of its
 * steps, which shows whether data loading hides behind compute; then the
 * same step with gradient accumulation (4 micro-batches) and with every
 * hidden layer checkpointed: step time and memory beside the plain step.
 *
 * The step is timed on the batches of a whole epoch (copied onto the device
 * beforehand), as training runs. Denormals are flushed to zero on the CPU
 * backend's threads (ug_set_flush_denormal) unless --keep-denormals: Adam's
 * moments of parameters whose gradient is always 0 (the weights of blank
 * border pixels) decay into the denormal range after some hundred steps,
 * which x86 computes slowly, so without flushing the figure grows with
 * --seconds as training goes on. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mlp.h"

enum { MAX_DEVICES = 16, FEATURES = 784, HIDDEN = 500, CLASSES = 10, SYNTHETIC_SAMPLES = 60000 };

static const char *command = "train-mlp";

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench train-mlp|train-cnn [--device NAME] [--batch N]...\n"
            "         [--hidden LIST] [--seconds S] [--no-epoch] [--no-modes]\n"
            "         [--keep-denormals] [--precision LIST] [--csv FILE] [--trace FILE]\n"
            "Times ug-train's training step with Adam (train-mlp: MLP 784-500-10 by\n"
            "default, --hidden as ug-train's, e.g. 16x1024; train-cnn: ug-train --model\n"
            "cnn) at batch 64 and 128 on changing batches, beside the step's matrix\n"
            "products alone through OpenBLAS (for the CNN its im2col products; the two\n"
            "timed in alternating rounds). Then one epoch with the prefetching loader\n"
            "(Fashion-MNIST when installed, else random data of its size), and the step\n"
            "with gradient accumulation over 4 micro-batches and with activation\n"
            "checkpointing (time and memory: the plan's and the pool's measured peak).\n"
            "Denormals are flushed to zero on the CPU backend's threads unless\n"
            "--keep-denormals. --precision f32,f16,bf16 times each compute precision in\n"
            "turn (default f32; f16 with loss scaling, as ug-train), then their plain\n"
            "steps at the first batch size in alternating rounds, against the first.\n"
            "The plain step is also timed with the profiler recording, in rounds\n"
            "alternating with it off; --trace FILE writes the Chrome trace of a recorded\n"
            "round (to FILE-<device>-b<batch>.json when several run; open it in\n"
            "ui.perfetto.dev).\n");
}

/* One matrix product of the step: C [m, n] = op(A) op(B). */
typedef struct product {
    int m, n, k;
    bool ta, tb;
    float *a, *b, *c;
} product;

enum { MAX_PRODUCTS = 3 * (MLP_MAX_HIDDEN + 1) };

typedef struct host_products {
    int count;
    product p[MAX_PRODUCTS];
} host_products;

static bool run_products(void *ctx)
{
    host_products *hp = ctx;
    for (int i = 0; i < hp->count; i++) {
        const product *p = &hp->p[i];
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
                    p->m, p->n, p->k, 1.0f, p->a, p->ta ? p->m : p->k, p->b, p->tb ? p->k : p->n, 0.0f,
                    p->c, p->n);
    }
    return true;
}

static void free_products(host_products *hp)
{
    for (int i = 0; i < hp->count; i++) {
        free(hp->p[i].a);
        free(hp->p[i].b);
        free(hp->p[i].c);
    }
    hp->count = 0;
}

static void add_product(host_products *hp, int64_t m, int64_t n, int64_t k, bool ta, bool tb)
{
    if (hp->count < MAX_PRODUCTS)
        hp->p[hp->count++] = (product){(int)m, (int)n, (int)k, ta, tb, NULL, NULL, NULL};
}

/* A layer's products at rows r: forward x W^T, the weight gradient dY^T x
 * and, unless its input is data, the input gradient dY W. */
static void add_layer(host_products *hp, int64_t rows, int64_t in, int64_t out, bool input_grad)
{
    add_product(hp, rows, out, in, false, true);
    add_product(hp, out, in, rows, true, false);
    if (input_grad)
        add_product(hp, rows, in, out, false, false);
}

/* A convolution's products as im2col makes them, each one GEMM over the
 * whole batch (positions = batch x output pixels): forward W col, the
 * weight gradient dY col^T and the input gradient W^T dY. */
static void add_conv(host_products *hp, int64_t positions, int64_t taps_in, int64_t out, bool input_grad)
{
    add_product(hp, out, positions, taps_in, false, false);
    add_product(hp, out, taps_in, positions, false, true);
    if (input_grad)
        add_product(hp, taps_in, positions, out, true, false);
}

/* The products of one training step of the model at batch rows. */
static bool alloc_products(host_products *hp, const mlp_config *c, int64_t batch)
{
    memset(hp, 0, sizeof *hp);
    if (c->cnn) { /* 28x28: conv 32 at 28x28, conv 64 at 14x14, then 7x7x64 features */
        add_conv(hp, batch * 28 * 28, 1 * 9, 32, false);
        add_conv(hp, batch * 14 * 14, 32 * 9, 64, true);
        add_layer(hp, batch, 64 * 7 * 7, 128, true);
        add_layer(hp, batch, 128, c->classes, true);
    } else {
        for (int i = 0; i <= c->hidden_count; i++)
            add_layer(hp, batch, i ? c->hidden[i - 1] : c->inputs,
                      i < c->hidden_count ? c->hidden[i] : c->classes, i > 0);
    }
    for (int i = 0; i < hp->count; i++) {
        product *p = &hp->p[i];
        size_t sizes[3] = {(size_t)p->m * p->k, (size_t)p->k * p->n, (size_t)p->m * p->n};
        float **slots[3] = {&p->a, &p->b, &p->c};
        for (int s = 0; s < 3; s++) {
            if (!(*slots[s] = malloc(sizes[s] * sizeof(float)))) {
                free_products(hp);
                return false;
            }
            for (size_t k = 0; k < sizes[s]; k++)
                (*slots[s])[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f;
        }
    }
    return true;
}

enum { MICRO_BATCHES = 4 };

typedef struct device_step {
    ug_device *device;
    ug_train_step *step;      /* the trainer's step (trainer.h) */
    ug_tensor **x, **y;       /* an epoch's batches */
    ug_tensor **micro_x, **micro_y; /* each split in MICRO_BATCHES */
    int64_t batches, next;
    uint64_t batch_bytes;
    bool accumulate;          /* step = MICRO_BATCHES micro-batches, the last one's update included */
} device_step;

/* One step on the next of the batches. */
static bool run_step(void *ctx)
{
    device_step *s = ctx;
    int64_t i = s->next++ % s->batches;
    if (!s->accumulate)
        return ug_train_step_run(s->step, s->x[i], s->y[i], false) == UG_OK;
    for (int k = 0; k < MICRO_BATCHES; k++)
        if (ug_train_step_run(s->step, s->micro_x[i * MICRO_BATCHES + k], s->micro_y[i * MICRO_BATCHES + k],
                              false) != UG_OK)
            return false;
    return true;
}

/* An epoch's batches, copied onto the device once. */
static ug_status fill_batches(device_step *s, ug_loader *loader)
{
    int64_t n = ug_loader_batches(loader);
    s->x = calloc((size_t)n + 1, sizeof *s->x);
    s->y = calloc((size_t)n + 1, sizeof *s->y);
    if (!s->x || !s->y)
        return UG_ERR_OUT_OF_MEMORY;
    ug_status st = ug_loader_start_epoch(loader, 0);
    bool done = false;
    while (st == UG_OK && s->batches < n) {
        ug_batch b;
        st = ug_loader_next(loader, &b, &done);
        if (st != UG_OK || done)
            break;
        st = ug_clone(b.x, &s->x[s->batches]);
        if (st == UG_OK) st = ug_clone(b.y, &s->y[s->batches]);
        if (st == UG_OK)
            s->batch_bytes += ug_tensor_nbytes(b.x) + ug_tensor_nbytes(b.y);
        s->batches++;
    }
    return st;
}

/* Views of each batch in MICRO_BATCHES parts. */
static ug_status split_batches(device_step *s, int64_t batch)
{
    int64_t rows = batch / MICRO_BATCHES, count = s->batches * MICRO_BATCHES;
    s->micro_x = calloc((size_t)count + 1, sizeof *s->micro_x);
    s->micro_y = calloc((size_t)count + 1, sizeof *s->micro_y);
    if (!s->micro_x || !s->micro_y)
        return UG_ERR_OUT_OF_MEMORY;
    ug_status st = UG_OK;
    for (int64_t i = 0; i < count && st == UG_OK; i++) {
        st = ug_tensor_slice(s->x[i / MICRO_BATCHES], (i % MICRO_BATCHES) * rows, rows, &s->micro_x[i]);
        if (st == UG_OK)
            st = ug_tensor_slice(s->y[i / MICRO_BATCHES], (i % MICRO_BATCHES) * rows, rows, &s->micro_y[i]);
    }
    return st;
}

static void free_batches(device_step *s)
{
    for (int64_t i = 0; s->x && i < s->batches; i++) {
        ug_tensor_free(s->x[i]);
        ug_tensor_free(s->y[i]);
    }
    for (int64_t i = 0; s->micro_x && i < s->batches * MICRO_BATCHES; i++) {
        ug_tensor_free(s->micro_x[i]);
        ug_tensor_free(s->micro_y[i]);
    }
    free(s->x);
    free(s->y);
    free(s->micro_x);
    free(s->micro_y);
}
static bool sync_step(void *ctx) { return ug_device_synchronize(((device_step *)ctx)->device) == UG_OK; }

ug_dataset *bench_fashion_mnist(bool *real)
{
    ug_dataset *ds = NULL;
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char images[256], labels[256];
    snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", dir);
    *real = ug_dataset_from_idx(images, labels, 1.0f / 255.0f, 0.0f, &ds) == UG_OK;
    if (*real)
        return ds;
    float *x = malloc((size_t)SYNTHETIC_SAMPLES * FEATURES * sizeof *x);
    int32_t *y = malloc((size_t)SYNTHETIC_SAMPLES * sizeof *y);
    if (x && y) {
        for (size_t i = 0; i < (size_t)SYNTHETIC_SAMPLES * FEATURES; i++)
            x[i] = (float)((i * 2654435761u) % 256) / 255.0f;
        for (int i = 0; i < SYNTHETIC_SAMPLES; i++)
            y[i] = i % CLASSES;
        if (ug_dataset_from_arrays(SYNTHETIC_SAMPLES, FEATURES, x, y, &ds) != UG_OK)
            ds = NULL;
    }
    free(x);
    free(y);
    return ds;
}

/* One epoch through the loader; *steps_run counts the steps. */
static ug_status run_epoch(ug_loader *loader, ug_train_step *step, double *seconds, int64_t *steps_run)
{
    *steps_run = 0;
    double start = bench_now();
    ug_status st = ug_loader_start_epoch(loader, 0);
    for (bool done = false; st == UG_OK;) {
        ug_batch b;
        st = ug_loader_next(loader, &b, &done);
        if (st != UG_OK || done)
            break;
        st = ug_train_step_run(step, b.x, b.y, false);
        ++*steps_run;
    }
    if (st == UG_OK)
        st = ug_device_synchronize(ug_model_device(ug_train_step_model(step)));
    *seconds = bench_now() - start;
    return st;
}

typedef enum step_mode { MODE_PLAIN, MODE_ACCUMULATE, MODE_CHECKPOINT, MODE_COUNT } step_mode;
static const char *const mode_names[MODE_COUNT] = {"plain", "accumulate 4", "checkpoint"};

typedef struct mode_result {
    double step_s;
    double blas_s, over_blas; /* the plain step's products through OpenBLAS; 0: not timed */
    uint64_t activation_bytes, plan_bytes; /* the plan: activations, and all it holds */
    uint64_t peak_bytes;                   /* the pool's peak beyond what was in use before */
    double host_s;                         /* the host's time to issue one step (plain only) */
    double launched_s;                     /* plain, replayed: the step launching each kernel; else 0 */
    char replay_why[160];                  /* plain, not replayed: why not */
    int kernels;                           /* the step plan's kernels */
    int64_t params;                        /* the model's parameters */
    bench_profile_result profiled;         /* plain only: the profiler off and on */
} mode_result;

/* The host's time to issue a step: the median over 5 runs of 20 steps of
 * the time until the step calls return, not waiting for the device (the
 * device queue is drained before and after each run). Near the step time,
 * the step is bound by the host launching kernels, not by the device. */
static bool time_host_issue(device_step *ds, double *host_s)
{
    enum { RUNS = 5, STEPS = 20 };
    double runs[RUNS];
    for (int r = 0; r < RUNS; r++) {
        if (!sync_step(ds))
            return false;
        double start = bench_now();
        for (int i = 0; i < STEPS; i++)
            if (!run_step(ds))
                return false;
        runs[r] = (bench_now() - start) / STEPS;
    }
    *host_s = bench_median(runs, RUNS);
    return sync_step(ds);
}

/* A replayed step (ug_graph_run on a device that captures) timed again
 * launching each kernel, the baseline its gain is read against. */
static bool time_launched(device_step *ds, double target, mode_result *r)
{
    r->launched_s = 0.0;
    ug_graph *graph = ug_train_step_graph(ds->step);
    if (!ug_graph_replaying(graph, r->replay_why, sizeof r->replay_why))
        return true;
    long reps = 0;
    bool ok = ug_graph_set_replay(graph, false) == UG_OK &&
              bench_time(run_step, sync_step, ds, 3, target, &r->launched_s, &reps);
    return ug_graph_set_replay(graph, true) == UG_OK && ok;
}

/* Makes the trainer's step for mode on ds's device (Adam, as ug-train's
 * default), times it on ds's batches (against hp's products through
 * OpenBLAS when hp is not NULL), and measures its memory; the plain step
 * also with the profiler on, and traced into trace when that is set. The
 * step stays for the caller (ug_train_step_free). */
static ug_status time_mode(device_step *ds, const mlp_config *base, int64_t batch, step_mode mode, double target,
                           host_products *hp, const char *trace, mode_result *r)
{
    mlp_config cfg = *base;
    cfg.checkpoint = mode == MODE_CHECKPOINT;
    ds->accumulate = mode == MODE_ACCUMULATE;
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = ds->accumulate ? batch / MICRO_BATCHES : batch;
    c.accumulate = ds->accumulate ? MICRO_BATCHES : 1;
    c.precision = cfg.precision;
    ug_memory_stats before, after;
    TRY(ug_memory_get_stats(ds->device, &before));
    TRY(ug_memory_reset_peak(ds->device));
    TRY(ug_train_step_create(ds->device, cfg.inputs, 0, mlp_forward, &cfg, &c, &ds->step));
    ug_model *model = ug_train_step_model(ds->step);
    long reps = 0;
    ds->next = 0;
    bool timed = hp ? bench_time_against_blas(run_step, sync_step, ds, run_products, hp, 2 * target, &r->step_s,
                                              &r->blas_s, &r->over_blas)
                    : bench_time(run_step, sync_step, ds, 3, target, &r->step_s, &reps);
    if (!timed || (mode == MODE_PLAIN && !time_host_issue(ds, &r->host_s)))
        return UG_ERR_BACKEND;
    if (mode == MODE_PLAIN && !time_launched(ds, target, r))
        return UG_ERR_BACKEND;
    if (mode == MODE_PLAIN && !bench_profiler_overhead(run_step, ds, ds->device, target, trace, &r->profiled))
        return UG_ERR_BACKEND;
    ug_graph_memory_info mem;
    TRY(ug_graph_memory(ug_train_step_graph(ds->step), &mem));
    r->kernels = mem.nodes;
    r->params = 0;
    for (int i = 0; i < ug_model_param_count(model); i++) {
        ug_tensor *p = NULL;
        TRY(ug_model_param_at(model, i, NULL, &p));
        r->params += ug_tensor_numel(p);
    }
    TRY(ug_memory_get_stats(ds->device, &after));
    r->activation_bytes = mem.activation_bytes;
    r->plan_bytes = mem.total_bytes + (ds->accumulate ? mem.accumulator_bytes : 0);
    r->peak_bytes = after.peak_bytes_in_use - before.bytes_in_use;
    return UG_OK;
}

/* --trace's file for one configuration: path itself when the run has one,
 * else with "-<device>-b<batch>" before its extension. */
static void trace_name(char *out, size_t len, const char *path, bool several, const char *id, int64_t batch)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        dot = path + strlen(path);
    if (!several) {
        snprintf(out, len, "%s", path);
        return;
    }
    snprintf(out, len, "%.*s-%s-b%lld%s", (int)(dot - path), path, id, (long long)batch, dot);
    for (char *c = out + (dot - path); *c; c++)
        if (*c == '/' || *c == ':')
            *c = '_'; /* "cpu/f16", "opencl:0" */
}

/* The plain step's lines under its row, each within 80 columns: its
 * products through OpenBLAS, its epoch, the host's issuing, replay, the
 * profiler's cost, the bound (bandwidth 0: not on the host's cores) and
 * the trace (NULL: none). */
static void print_plain_details(const mode_result *r, double epoch_s, int64_t epoch_steps, double bandwidth,
                                const char *trace)
{
    if (r->blas_s > 0)
        printf("    products: %.3f ms through OpenBLAS; the step x%.2f of them\n", r->blas_s * 1e3, r->over_blas);
    if (epoch_s > 0) {
        double steps_s = (double)epoch_steps * r->step_s;
        printf("    epoch: %.2f s, x%.2f of its %lld steps' %.2f s\n", epoch_s, epoch_s / steps_s,
               (long long)epoch_steps, steps_s);
    }
    if (r->launched_s > 0)
        printf("    host issues the step's %d kernels from its recording in %.3f ms\n"
               "      (%.0f%% of the step)\n", r->kernels, r->host_s * 1e3, 100.0 * r->host_s / r->step_s);
    else
        printf("    host issues the step's %d kernels in %.3f ms\n      (%.1f us each, %.0f%% of the step)\n",
               r->kernels, r->host_s * 1e3, r->host_s * 1e6 / r->kernels, 100.0 * r->host_s / r->step_s);
    if (r->launched_s > 0)
        printf("    replayed: x%.2f of launching each kernel (%.3f ms)\n", r->step_s / r->launched_s,
               r->launched_s * 1e3);
    else if (strstr(r->replay_why, "failed"))
        printf("    not replayed: %s\n", r->replay_why);
    const bench_profile_result *p = &r->profiled;
    printf("    profiler: the step takes %.3f ms off, %.3f ms recording (x%.3f)\n", p->off_s * 1e3, p->on_s * 1e3,
           p->ratio);
    if (r->blas_s > 0 && bandwidth > 0) {
        /* Adam reads each parameter, its gradient and both moments, and
         * writes back all but the gradient. */
        double adam_bytes = 28.0 * (double)r->params, bound = r->blas_s + adam_bytes / bandwidth;
        printf("    bound: products %.3f + Adam's %.1f MB at %.1f GB/s %.3f = %.3f ms;\n      step x%.2f\n",
               r->blas_s * 1e3, adam_bytes * 1e-6, bandwidth * 1e-9, adam_bytes / bandwidth * 1e3, bound * 1e3,
               r->step_s / bound);
    }
    if (trace)
        printf("    traced into %s:\n      launches %.3f ms of device time per step, %.0f%% of those steps' "
               "%.3f ms\n", trace, p->traced_launches_s * 1e3, 100.0 * p->traced_launches_s / p->traced_step_s,
               p->traced_step_s * 1e3);
}

enum { PRECISION_ROUNDS = 7, MAX_PRECISIONS = 3 };

/* The plain step at batch in each precision on one device, every step made
 * first and then timed in alternating rounds (a shared machine's speed
 * drifts between timings one after the other): each precision's median
 * round and the median of the rounds' ratios to the first precision's. */
static int compare_precisions(const char *id, ug_dataset *data, const mlp_config *base, int64_t batch,
                              const ug_dtype *precisions, int count, double target)
{
    device_step ds[MAX_PRECISIONS] = {{0}};
    ug_loader *loaders[MAX_PRECISIONS] = {NULL};
    mlp_config cfg[MAX_PRECISIONS];
    double seconds[MAX_PRECISIONS][PRECISION_ROUNDS], ratios[MAX_PRECISIONS][PRECISION_ROUNDS];
    ug_status st = UG_OK;
    for (int p = 0; p < count && st == UG_OK; p++) {
        cfg[p] = *base;
        cfg[p].precision = precisions[p];
        ug_loader_config lc = ug_loader_default_config();
        lc.batch_size = batch;
        lc.drop_last = true;
        ug_trainer_config c = ug_trainer_defaults();
        c.batch_size = batch;
        c.precision = precisions[p];
        st = ug_device_open(id, &ds[p].device);
        lc.x_dtype = st == UG_OK ? ug_device_precision(ds[p].device, precisions[p]) : UG_F32;
        if (st == UG_OK) st = ug_loader_create(data, ds[p].device, &lc, &loaders[p]);
        if (st == UG_OK) st = fill_batches(&ds[p], loaders[p]);
        if (st == UG_OK) st = ug_train_step_create(ds[p].device, cfg[p].inputs, 0, mlp_forward, &cfg[p], &c, &ds[p].step);
    }
    for (int r = 0; r < PRECISION_ROUNDS && st == UG_OK; r++)
        for (int p = 0; p < count && st == UG_OK; p++) {
            long reps = 0;
            bench_settle();
            if (!bench_time(run_step, sync_step, &ds[p], 1, target / PRECISION_ROUNDS, &seconds[p][r], &reps))
                st = UG_ERR_BACKEND;
            ratios[p][r] = seconds[p][r] / seconds[0][r];
        }
    if (st == UG_OK) {
        printf("%s, batch %lld: the plain step in each precision, %d alternating rounds\n", id, (long long)batch,
               PRECISION_ROUNDS);
        for (int p = 0; p < count; p++) {
            printf("  %-5s %9.3f ms", ug_dtype_name(precisions[p]), bench_median(seconds[p], PRECISION_ROUNDS) * 1e3);
            if (p)
                printf("  x%.2f of %s's (median of the rounds' ratios)", bench_median(ratios[p], PRECISION_ROUNDS),
                       ug_dtype_name(precisions[0]));
            printf("\n");
        }
    }
    for (int p = 0; p < count; p++) {
        ug_train_step_free(ds[p].step);
        ug_loader_free(loaders[p]);
        free_batches(&ds[p]);
        ug_device_close(ds[p].device);
    }
    return st == UG_OK ? 0 : bench_fail(id);
}

static int bench_train(int argc, char **argv, bool cnn)
{
    const char *only = NULL, *csv_path = NULL, *trace_path = NULL;
    int64_t batches[8];
    int batch_count = 0;
    ug_dtype precisions[MAX_PRECISIONS] = {UG_F32};
    int precision_count = 1;
    double target = 1.0;
    bool epoch = true, modes = true, flush = true;
    mlp_config cfg = {.inputs = FEATURES, .classes = CLASSES, .hidden_count = 1, .hidden = {HIDDEN},
                      .cnn = cnn, .dropout = cnn ? 0.25f : 0.0f};
    command = cnn ? "train-cnn" : "train-mlp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-epoch")) {
            epoch = false;
        } else if (!strcmp(argv[i], "--no-modes")) {
            modes = false;
        } else if (!strcmp(argv[i], "--keep-denormals")) {
            flush = false;
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            only = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--csv")) {
            csv_path = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--trace")) {
            trace_path = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
            target = atof(argv[++i]);
        } else if (i + 1 < argc && !cnn && !strcmp(argv[i], "--hidden")) {
            if (!mlp_parse_hidden(argv[++i], &cfg)) {
                fprintf(stderr, "ug-bench train-mlp: --hidden takes sizes such as 500, 256,128 or 16x1024\n");
                return 2;
            }
        } else if (i + 1 < argc && !strcmp(argv[i], "--precision")) {
            char list[64];
            snprintf(list, sizeof list, "%s", argv[++i]);
            precision_count = 0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
                if (precision_count == MAX_PRECISIONS || !mlp_parse_precision(tok, &precisions[precision_count++])) {
                    fprintf(stderr, "ug-bench %s: --precision takes up to 3 of f32, f16, bf16\n", command);
                    return 2;
                }
        } else if (i + 1 < argc && !strcmp(argv[i], "--batch") && batch_count < 8) {
            batches[batch_count] = atoll(argv[++i]);
            if (batches[batch_count++] < MICRO_BATCHES) {
                fprintf(stderr, "ug-bench %s: --batch takes a size of at least %d\n", command, MICRO_BATCHES);
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!batch_count) {
        batches[batch_count++] = 64;
        batches[batch_count++] = 128;
    }
    if (flush && !ug_set_flush_denormal(true))
        fprintf(stderr, "ug-bench %s: this processor cannot flush denormals\n", command);
    static char ids[MAX_DEVICES][32];
    int device_count = bench_device_ids(only, ids, MAX_DEVICES);
    if (device_count < 0)
        return 2;
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        perror(csv_path);
        return 2;
    }
    bool real = false;
    ug_dataset *data = bench_fashion_mnist(&real);
    if (!data)
        return bench_fail("loading the data set");
    if (csv)
        fprintf(csv, "device,batch,mode,step_ms,over_plain,blas_products_ms,step_over_products,samples_per_s,epoch_s,"
                     "sum_of_steps_s,epoch_over_steps,activation_mib,plan_mib,peak_mib,host_issue_ms,kernels,"
                     "unprofiled_step_ms,profiled_step_ms,traced_launches_ms,traced_step_ms\n");
    /* The bound's memory side, measured before any device's threads run. */
    const double bandwidth = bench_host_bandwidth();
    printf("%-9s %5s %-12s %7s %7s %9s %7s %8s %8s\n", "device", "batch", "step", "step ms", "x plain",
           "samples/s", "act MiB", "plan MiB", "peak MiB");
    int rc = 0;
    for (int d = 0; d < device_count * precision_count && !rc; d++) {
        /* Each device in each precision, named "cpu" or "cpu/f16". */
        cfg.precision = precisions[d % precision_count];
        char id[48];
        snprintf(id, sizeof id, "%s%s%s", ids[d / precision_count], cfg.precision == UG_F32 ? "" : "/",
                 cfg.precision == UG_F32 ? "" : ug_dtype_name(cfg.precision));
        for (int bi = 0; bi < batch_count && !rc; bi++) {
            int64_t batch = batches[bi];
            char trace[512];
            if (trace_path)
                trace_name(trace, sizeof trace, trace_path, device_count * precision_count * batch_count > 1, id,
                           batch);
            device_step ds = {0};
            ug_loader *loader = NULL;
            host_products hp;
            bool have_products = alloc_products(&hp, &cfg, batch);
            ug_loader_config lc = ug_loader_default_config();
            lc.batch_size = batch;
            lc.drop_last = true; /* full batches: the micro-batches split them evenly */
            ug_device_info info = {0};
            ug_status st = ug_device_open(ids[d / precision_count], &ds.device);
            if (st == UG_OK) st = ug_device_get_info(ds.device, &info);
            lc.x_dtype = ug_device_precision(ds.device, cfg.precision); /* the step's (ug_train_step_create) */
            if (st == UG_OK) st = ug_loader_create(data, ds.device, &lc, &loader);
            if (st == UG_OK) st = fill_batches(&ds, loader);
            if (st == UG_OK && modes) st = split_batches(&ds, batch);
            mode_result results[MODE_COUNT] = {{0}};
            double epoch_s = 0;
            int64_t epoch_steps = 0;
            for (int mode = 0; mode < (modes ? MODE_COUNT : 1) && st == UG_OK; mode++) {
                host_products *products = mode == MODE_PLAIN && have_products ? &hp : NULL;
                st = time_mode(&ds, &cfg, batch, (step_mode)mode, target, products, trace_path ? trace : NULL,
                               &results[mode]);
                if (st == UG_OK && mode == MODE_PLAIN && epoch)
                    st = run_epoch(loader, ds.step, &epoch_s, &epoch_steps);
                ug_train_step_free(ds.step);
                ds.step = NULL;
            }
            if (st != UG_OK)
                rc = bench_fail(id);
            for (int mode = 0; mode < (modes ? MODE_COUNT : 1) && !rc; mode++) {
                const mode_result *r = &results[mode];
                double steps_s = (double)epoch_steps * r->step_s, over_plain = r->step_s / results[0].step_s;
                double mib = 1.0 / 1048576.0;
                bool first = mode == MODE_PLAIN;
                printf("%-9s %5lld %-12s %7.3f %7.2f %9.0f %7.1f %8.1f %8.1f\n", id, (long long)batch,
                       mode_names[mode], r->step_s * 1e3, over_plain, (double)batch / r->step_s,
                       (double)r->activation_bytes * mib, (double)r->plan_bytes * mib, (double)r->peak_bytes * mib);
                if (first)
                    print_plain_details(r, epoch ? epoch_s : 0.0, epoch_steps, info.is_gpu ? 0.0 : bandwidth,
                                        trace_path ? trace : NULL);
                if (csv)
                    fprintf(csv, "%s,%lld,%s,%.4f,%.3f,%.4f,%.3f,%.0f,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.4f,%d,%.4f,%.4f,%.4f,%.4f\n", id,
                            (long long)batch, mode_names[mode], r->step_s * 1e3, over_plain,
                            r->blas_s * 1e3, r->over_blas,
                            (double)batch / r->step_s, first ? epoch_s : 0.0, first ? steps_s : 0.0,
                            first && steps_s > 0 ? epoch_s / steps_s : 0.0, (double)r->activation_bytes * mib,
                            (double)r->plan_bytes * mib, (double)r->peak_bytes * mib, r->host_s * 1e3, r->kernels,
                            r->profiled.off_s * 1e3, r->profiled.on_s * 1e3, r->profiled.traced_launches_s * 1e3,
                            r->profiled.traced_step_s * 1e3);
            }
            fflush(stdout);
            ug_loader_free(loader);
            free_batches(&ds);
            ug_device_close(ds.device);
            if (have_products)
                free_products(&hp);
        }
    }
    for (int d = 0; d < device_count && precision_count > 1 && !rc; d++)
        rc = compare_precisions(ids[d], data, &cfg, batches[0], precisions, precision_count, target);
    printf("step: plain, %d micro-batches of batch/%d accumulated per update, or every\n"
           "  %s checkpointed; denormals %s\n", MICRO_BATCHES, MICRO_BATCHES,
           cnn ? "conv block" : "hidden layer", flush ? "flushed to zero" : "kept");
    printf("memory: the plan's activations and total (model, optimizer, gradients,\n"
           "  activations), and the pool's measured peak during the steps\n");
    printf("products: the step's matrix products alone through OpenBLAS on the host%s,\n"
           "  timed in 5 rounds alternating with the plain step's; x: the median\n"
           "  round's step over its products\n",
           cnn ? "\n  (each convolution's im2col products as one GEMM over the batch)" : "");
    printf("bound (devices on the host's cores): the products' time through OpenBLAS,\n"
           "  plus Adam's bytes (28 a parameter) at the host's memory bandwidth\n"
           "  (threaded 64 MiB copies)\n");
    if (epoch)
        printf("epoch: %s, drop_last;\n  x: its time over its steps' at the plain step's time\n",
               real ? "the Fashion-MNIST training set" : "60000 random samples (Fashion-MNIST not installed)");
    ug_dataset_free(data);
    if (csv)
        fclose(csv);
    return rc;
}

int bench_train_mlp(int argc, char **argv) { return bench_train(argc, argv, false); }
int bench_train_cnn(int argc, char **argv) { return bench_train(argc, argv, true); }
