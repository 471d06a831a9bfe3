/* ug-bench train-mlp: the training step of ug-train's default model
 * (MLP 784-500-10, Adam) per device and batch size, beside the same step's
 * matrix products run alone through OpenBLAS on the host in the same run;
 * then a full epoch with the prefetching loader against the sum of its
 * steps, which shows whether data loading hides behind compute.
 *
 * The step is timed on the batches of a whole epoch (copied onto the device
 * beforehand), as training runs: a few batches trained on thousands of times
 * drive values into the denormal range, which x86 computes slowly, and the
 * figure would grow with --seconds. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mlp.h"

enum { MAX_DEVICES = 16, FEATURES = 784, HIDDEN = 500, CLASSES = 10, SYNTHETIC_SAMPLES = 60000 };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench train-mlp [--device NAME] [--batch N]... [--seconds S] [--no-epoch]\n"
            "                          [--flush-denormal] [--csv FILE]\n"
            "Times ug-train's default training step (MLP 784-500-10, Adam) at batch 64 and 128 on\n"
            "changing batches beside the step's matrix products alone through OpenBLAS, and one\n"
            "epoch with the prefetching loader (Fashion-MNIST when installed, else random data of\n"
            "its size). --flush-denormal flushes denormals to zero (ug_set_flush_denormal).\n");
}

typedef struct host_products {
    int64_t batch;
    float *x, *w1, *h, *w2, *dy, *dw2, *dh, *dw1, *logits;
} host_products;

/* The products of one step: forward x W1^T, h W2^T; backward dW2 = dY^T h,
 * dH = dY W2, dW1 = dH^T x (no dX: x is data). */
static bool run_products(void *ctx)
{
    host_products *p = ctx;
    int b = (int)p->batch;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, HIDDEN, FEATURES, 1, p->x, FEATURES, p->w1, FEATURES, 0, p->h, HIDDEN);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, CLASSES, HIDDEN, 1, p->h, HIDDEN, p->w2, HIDDEN, 0, p->logits, CLASSES);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CLASSES, HIDDEN, b, 1, p->dy, CLASSES, p->h, HIDDEN, 0, p->dw2, HIDDEN);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, HIDDEN, CLASSES, 1, p->dy, CLASSES, p->w2, HIDDEN, 0, p->dh, HIDDEN);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, HIDDEN, FEATURES, b, 1, p->dh, HIDDEN, p->x, FEATURES, 0, p->dw1, FEATURES);
    return true;
}

static void free_products(host_products *p)
{
    float *all[] = {p->x, p->w1, p->h, p->w2, p->dy, p->dw2, p->dh, p->dw1, p->logits};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

static bool alloc_products(host_products *p, int64_t batch)
{
    memset(p, 0, sizeof *p);
    p->batch = batch;
    size_t b = (size_t)batch;
    float **slots[] = {&p->x, &p->w1, &p->h, &p->w2, &p->dy, &p->dw2, &p->dh, &p->dw1, &p->logits};
    size_t sizes[] = {b * FEATURES, HIDDEN * FEATURES, b * HIDDEN, CLASSES * HIDDEN, b * CLASSES,
                      CLASSES * HIDDEN, b * HIDDEN, HIDDEN * FEATURES, b * CLASSES};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *slots[i] = malloc(sizes[i] * sizeof(float));
        if (!*slots[i]) {
            free_products(p);
            return false;
        }
        for (size_t k = 0; k < sizes[i]; k++)
            (*slots[i])[k] = (float)((k * 2654435761u) % 1000) / 1000.0f - 0.5f;
    }
    return true;
}

typedef struct device_step {
    ug_device *device;
    mlp_graph step;
    ug_tensor **x, **y;       /* an epoch's batches */
    int64_t batches, next;
    uint64_t batch_bytes;
} device_step;

/* One step on the next of the batches. */
static bool run_step(void *ctx)
{
    device_step *s = ctx;
    int64_t i = s->next++ % s->batches;
    return ug_graph_bind(s->step.graph, s->step.x, s->x[i]) == UG_OK &&
           ug_graph_bind(s->step.graph, s->step.y, s->y[i]) == UG_OK &&
           ug_graph_run(s->step.graph) == UG_OK;
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

static void free_batches(device_step *s)
{
    for (int64_t i = 0; s->x && i < s->batches; i++) {
        ug_tensor_free(s->x[i]);
        ug_tensor_free(s->y[i]);
    }
    free(s->x);
    free(s->y);
}
static bool sync_step(void *ctx) { return ug_device_synchronize(((device_step *)ctx)->device) == UG_OK; }

static ug_dataset *load_data(bool *real)
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
static ug_status run_epoch(ug_loader *loader, mlp_graph *step, double *seconds, int64_t *steps_run)
{
    *steps_run = 0;
    double start = bench_now();
    ug_status st = ug_loader_start_epoch(loader, 0);
    for (bool done = false; st == UG_OK;) {
        ug_batch b;
        st = ug_loader_next(loader, &b, &done);
        if (st != UG_OK || done)
            break;
        st = ug_graph_bind(step->graph, step->x, b.x);
        if (st == UG_OK) st = ug_graph_bind(step->graph, step->y, b.y);
        if (st == UG_OK) st = ug_graph_run(step->graph);
        ++*steps_run;
    }
    if (st == UG_OK)
        st = ug_device_synchronize(ug_model_device(ug_graph_model(step->graph)));
    *seconds = bench_now() - start;
    return st;
}

int bench_train_mlp(int argc, char **argv)
{
    const char *only = NULL, *csv_path = NULL;
    int64_t batches[8];
    int batch_count = 0;
    double target = 1.0;
    bool epoch = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-epoch")) {
            epoch = false;
        } else if (!strcmp(argv[i], "--flush-denormal")) {
            if (!ug_set_flush_denormal(true))
                fprintf(stderr, "ug-bench train-mlp: this processor cannot flush denormals\n");
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            only = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--csv")) {
            csv_path = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
            target = atof(argv[++i]);
        } else if (i + 1 < argc && !strcmp(argv[i], "--batch") && batch_count < 8) {
            batches[batch_count] = atoll(argv[++i]);
            if (batches[batch_count++] < 1) {
                fprintf(stderr, "ug-bench train-mlp: --batch takes a positive size\n");
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
    ug_dataset *data = load_data(&real);
    if (!data)
        return bench_fail("loading the data set");
    if (csv)
        fprintf(csv, "device,batch,step_ms,blas_products_ms,step_over_products,samples_per_s,epoch_s,sum_of_steps_s,"
                     "epoch_over_steps,peak_mib\n");
    printf("%-10s %5s %9s %12s %7s %11s %8s %9s %7s %8s\n", "device", "batch", "step ms", "BLAS prod ms", "ratio",
           "samples/s", "epoch s", "steps s", "ratio", "peak MiB");
    int rc = 0;
    mlp_config cfg = {.inputs = FEATURES, .classes = CLASSES, .hidden_count = 1, .hidden = {HIDDEN}};
    for (int d = 0; d < device_count && !rc; d++) {
        for (int bi = 0; bi < batch_count && !rc; bi++) {
            int64_t batch = batches[bi];
            device_step ds = {0};
            ug_model *model = NULL;
            ug_optimizer *opt = NULL;
            ug_loader *loader = NULL;
            host_products hp;
            bool have_products = alloc_products(&hp, batch);
            ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
            ug_loader_config lc = ug_loader_default_config();
            lc.batch_size = batch;
            lc.drop_last = true; /* one compiled graph; the partial batch would need another */
            ug_status st = ug_device_open(ids[d], &ds.device);
            if (st == UG_OK) st = ug_model_create(ds.device, 0, &model);
            if (st == UG_OK) st = mlp_build(model, &cfg, batch, &ds.step);
            if (st == UG_OK) st = ug_optimizer_create(model, &oc, &opt);
            if (st == UG_OK) st = mlp_finish(&ds.step, opt);
            if (st == UG_OK) st = ug_loader_create(data, ds.device, &lc, &loader);
            if (st == UG_OK) st = fill_batches(&ds, loader);
            if (st == UG_OK) st = ug_memory_reset_peak(ds.device);
            double step_s = 0, blas_s = 0, epoch_s = 0;
            long reps = 0;
            int64_t epoch_steps = 0;
            if (st == UG_OK && !bench_time(run_step, sync_step, &ds, 3, target, &step_s, &reps))
                st = UG_ERR_BACKEND;
            if (st == UG_OK && have_products)
                (void)bench_time(run_products, NULL, &hp, 3, target, &blas_s, &reps);
            if (st == UG_OK && epoch)
                st = run_epoch(loader, &ds.step, &epoch_s, &epoch_steps);
            ug_memory_stats mem = {0};
            if (st == UG_OK) st = ug_memory_get_stats(ds.device, &mem);
            if (st != UG_OK) {
                rc = bench_fail(ids[d]);
            } else {
                double steps_s = (double)epoch_steps * step_s;
                /* The step's memory, without the epoch of batches held for timing. */
                double peak_mib = (double)(mem.peak_bytes_in_use - ds.batch_bytes) / 1048576.0;
                printf("%-10s %5lld %9.3f %12.3f %7.2f %11.0f", ids[d], (long long)batch, step_s * 1e3, blas_s * 1e3,
                       blas_s > 0 ? step_s / blas_s : 0.0, (double)batch / step_s);
                if (epoch)
                    printf(" %8.2f %9.2f %7.2f", epoch_s, steps_s, steps_s > 0 ? epoch_s / steps_s : 0.0);
                else
                    printf(" %8s %9s %7s", "-", "-", "-");
                printf(" %8.1f\n", peak_mib);
                if (csv)
                    fprintf(csv, "%s,%lld,%.4f,%.4f,%.3f,%.0f,%.3f,%.3f,%.3f,%.2f\n", ids[d], (long long)batch,
                            step_s * 1e3, blas_s * 1e3, blas_s > 0 ? step_s / blas_s : 0.0, (double)batch / step_s,
                            epoch_s, steps_s, steps_s > 0 ? epoch_s / steps_s : 0.0,
                            peak_mib);
            }
            fflush(stdout);
            ug_loader_free(loader);
            free_batches(&ds);
            mlp_free(&ds.step);
            ug_optimizer_free(opt);
            ug_model_free(model);
            ug_device_close(ds.device);
            if (have_products)
                free_products(&hp);
        }
    }
    if (epoch)
        printf("epoch: %s, drop_last; ratio = epoch time / (steps x step time)\n",
               real ? "Fashion-MNIST training set" : "60000 random samples (Fashion-MNIST not installed)");
    ug_dataset_free(data);
    if (csv)
        fclose(csv);
    return rc;
}
