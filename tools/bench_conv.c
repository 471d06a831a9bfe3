/* ug-bench conv: the two convolutions of ug-train --model cnn, forward and
 * training step, with unigrad on each device beside oneDNN on the host
 * (when the build found it, bench_onednn.c) and beside the layer's im2col
 * products alone through OpenBLAS: how far unigrad's im2col + GEMM is from
 * a library with direct convolution kernels, and how much of it the GEMMs
 * take. unigrad's forward result is checked against oneDNN's. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_onednn.h"
#include "wrap.h"

enum { MAX_DEVICES = 16, MAX_BATCHES = 8 };
/* Relative to the largest |y|: f32 sums of at most 288 products. */
#define TOLERANCE 1e-4

/* ug-train --model cnn's convolutions (3x3, padding 1) on 28x28 images;
 * the batch comes from --batch. */
static const conv_layer cnn_layers[] = {
    {"conv1", 0, 1, 28, 28, 32, 3, 1, 1},
    {"conv2", 0, 32, 14, 14, 64, 3, 1, 1},
};
#define LAYER_COUNT (sizeof cnn_layers / sizeof cnn_layers[0])

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench conv [--device NAME] [--batch N]... [--seconds S] [--csv FILE]\n"
            "Times the convolutions of ug-train --model cnn (conv1: 1 to 32 channels at\n"
            "28x28, conv2: 32 to 64 at 14x14; 3x3, padding 1, bias; NCHW f32) at batch 64\n"
            "and 128 (or each --batch): unigrad's forward (ug_conv2d) and training step (a\n"
            "graph of the convolution and a sum, backward to the input, weight and bias, no\n"
            "optimizer) on each device (or only NAME), beside oneDNN on the host, the faster\n"
            "of algorithm direct and auto (forward_training, then backward data and backward\n"
            "weights with the bias; every primitive takes its arguments in the layouts it\n"
            "chose, reordered from NCHW once before the timing, as a framework that keeps its\n"
            "tensors in oneDNN's layouts runs them), and beside the layer's im2col products\n"
            "alone through OpenBLAS (one GEMM over the batch each). oneDNN, OpenBLAS and the\n"
            "CPU device get the same threads. oneDNN is optional at build time (Debian:\n"
            "libdnnl-dev); without it its columns show -.\n"
            "  --seconds S  time each figure for about S seconds (default 1)\n"
            "  --csv FILE   also write the rows to FILE\n");
}

static void fill(float *x, size_t n, uint32_t seed)
{
    uint32_t state = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

/* A layer at one batch size and its random operands on the host. */
typedef struct layer_data {
    conv_layer layer;
    int64_t out_h, out_w;
    size_t x_count, weight_count, y_count;
    float *x, *weight, *bias, *dy;
    float *y;       /* oneDNN's forward result: the reference of the check */
    bool have_y;
} layer_data;

static void free_layer_data(layer_data *d)
{
    free(d->x);
    free(d->weight);
    free(d->bias);
    free(d->dy);
    free(d->y);
    memset(d, 0, sizeof *d);
}

static bool alloc_layer_data(layer_data *d, const conv_layer *layer, int64_t batch)
{
    memset(d, 0, sizeof *d);
    d->layer = *layer;
    d->layer.batch = batch;
    const conv_layer *l = &d->layer;
    d->out_h = ug_conv_output_size(l->height, l->kernel, l->stride, l->padding, 1);
    d->out_w = ug_conv_output_size(l->width, l->kernel, l->stride, l->padding, 1);
    d->x_count = (size_t)(batch * l->channels * l->height * l->width);
    d->weight_count = (size_t)(l->out_channels * l->channels * l->kernel * l->kernel);
    d->y_count = (size_t)(batch * l->out_channels * d->out_h * d->out_w);
    d->x = malloc(d->x_count * sizeof(float));
    d->weight = malloc(d->weight_count * sizeof(float));
    d->bias = malloc((size_t)l->out_channels * sizeof(float));
    d->dy = malloc(d->y_count * sizeof(float));
    d->y = malloc(d->y_count * sizeof(float));
    if (!d->x || !d->weight || !d->bias || !d->dy || !d->y) {
        free_layer_data(d);
        return false;
    }
    fill(d->x, d->x_count, 1);
    fill(d->weight, d->weight_count, 2);
    fill(d->bias, (size_t)l->out_channels, 3);
    fill(d->dy, d->y_count, 4);
    return true;
}

/* The layer's im2col products, each one GEMM over the whole batch
 * (positions = batch x output pixels, taps = channels x kernel taps):
 * forward Y = W col; the step adds the weight gradient dY col^T and the
 * input gradient W^T dY (Y standing in for dY). */
typedef struct im2col_products {
    int out, taps, positions;
    float *weight, *col, *y, *d_weight, *d_col;
} im2col_products;

static void free_products(im2col_products *p)
{
    free(p->weight);
    free(p->col);
    free(p->y);
    free(p->d_weight);
    free(p->d_col);
    memset(p, 0, sizeof *p);
}

static bool alloc_products(im2col_products *p, const layer_data *d)
{
    const conv_layer *l = &d->layer;
    memset(p, 0, sizeof *p);
    p->out = (int)l->out_channels;
    p->taps = (int)(l->channels * l->kernel * l->kernel);
    p->positions = (int)(l->batch * d->out_h * d->out_w);
    size_t weights = (size_t)p->out * (size_t)p->taps, cols = (size_t)p->taps * (size_t)p->positions;
    size_t outs = (size_t)p->out * (size_t)p->positions;
    p->weight = malloc(weights * sizeof(float));
    p->col = malloc(cols * sizeof(float));
    p->y = malloc(outs * sizeof(float));
    p->d_weight = malloc(weights * sizeof(float));
    p->d_col = malloc(cols * sizeof(float));
    if (!p->weight || !p->col || !p->y || !p->d_weight || !p->d_col) {
        free_products(p);
        return false;
    }
    fill(p->weight, weights, 5);
    fill(p->col, cols, 6);
    return true;
}

static bool run_blas_forward(void *ctx)
{
    im2col_products *p = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->out, p->positions, p->taps, 1.0f, p->weight,
                p->taps, p->col, p->positions, 0.0f, p->y, p->positions);
    return true;
}

static bool run_blas_step(void *ctx)
{
    im2col_products *p = ctx;
    run_blas_forward(p);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->out, p->taps, p->positions, 1.0f, p->y,
                p->positions, p->col, p->positions, 0.0f, p->d_weight, p->taps);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p->taps, p->positions, p->out, 1.0f, p->weight,
                p->taps, p->y, p->positions, 0.0f, p->d_col, p->positions);
    return true;
}

/* unigrad's side on one device: eager operands and the step's graph. */
typedef struct ug_conv {
    ug_device *device;
    ug_tensor *x, *weight, *bias;
    ug_conv2d_params params;
    ug_model *model;
    ug_graph *graph;
} ug_conv;

/* The step as a graph: y = conv2d(x, weight, bias), loss = sum(y), with the
 * gradients of all three (x is a model parameter so that it gets one). No
 * optimizer, so a run is the forward and backward passes alone; numeric
 * checks off, as they add a reduction over every gradient. */
static ug_status build_step(ug_conv *u, const layer_data *d)
{
    const conv_layer *l = &d->layer;
    const char *names[3] = {"x", "conv.weight", "conv.bias"};
    const int64_t shapes[3][4] = {{l->batch, l->channels, l->height, l->width},
                                  {l->out_channels, l->channels, l->kernel, l->kernel},
                                  {l->out_channels}};
    const int ndims[3] = {4, 4, 1};
    const float *data[3] = {d->x, d->weight, d->bias};
    const size_t counts[3] = {d->x_count, d->weight_count, (size_t)l->out_channels};
    ug_value *operands[3] = {NULL, NULL, NULL}, *y = NULL, *loss = NULL;
    ug_status st = ug_model_create(u->device, 1, &u->model);
    if (st == UG_OK) st = ug_graph_create(u->model, &u->graph);
    if (st == UG_OK) st = ug_graph_set_checks(u->graph, UG_CHECK_NONE);
    for (int i = 0; i < 3 && st == UG_OK; i++) {
        ug_tensor *param = NULL; /* the model's */
        st = ug_model_param(u->model, names[i], ndims[i], shapes[i], UG_INIT_CONSTANT, 0.0f, &param);
        if (st == UG_OK) st = ug_tensor_upload(param, data[i], counts[i] * sizeof(float));
        if (st == UG_OK) st = ug_graph_param(u->graph, param, &operands[i]);
    }
    if (st == UG_OK) st = ug_g_conv2d(u->graph, operands[0], operands[1], operands[2], &u->params, &y);
    if (st == UG_OK) st = ug_g_sum(u->graph, y, 0, true, &loss);
    if (st == UG_OK) st = ug_graph_backward(u->graph, loss);
    if (st == UG_OK) st = ug_graph_compile(u->graph);
    return st;
}

static void ug_conv_close(ug_conv *u)
{
    ug_graph_free(u->graph);
    ug_model_free(u->model);
    ug_tensor_free(u->x);
    ug_tensor_free(u->weight);
    ug_tensor_free(u->bias);
    ug_device_close(u->device);
    memset(u, 0, sizeof *u);
}

static ug_status ug_conv_open(ug_conv *u, const char *id, const layer_data *d)
{
    const conv_layer *l = &d->layer;
    const int64_t x_shape[4] = {l->batch, l->channels, l->height, l->width};
    const int64_t w_shape[4] = {l->out_channels, l->channels, l->kernel, l->kernel};
    memset(u, 0, sizeof *u);
    u->params = (ug_conv2d_params){.stride = {l->stride, l->stride}, .padding = {l->padding, l->padding}};
    ug_status st = ug_device_open(id, &u->device);
    if (st == UG_OK) st = ug_tensor_from_host(u->device, UG_F32, 4, x_shape, d->x, &u->x);
    if (st == UG_OK) st = ug_tensor_from_host(u->device, UG_F32, 4, w_shape, d->weight, &u->weight);
    if (st == UG_OK) st = ug_tensor_from_host(u->device, UG_F32, 1, &l->out_channels, d->bias, &u->bias);
    if (st == UG_OK) st = build_step(u, d);
    return st;
}

static bool run_ug_forward(void *ctx)
{
    ug_conv *u = ctx;
    ug_tensor *y = NULL;
    /* The output goes back to the pool at once; the queue is in order, so
     * the next call reusing the block waits for this one. */
    if (ug_conv2d(u->x, u->weight, u->bias, &u->params, &y) != UG_OK)
        return false;
    ug_tensor_free(y);
    return true;
}

static bool run_ug_step(void *ctx) { return ug_graph_run(((ug_conv *)ctx)->graph) == UG_OK; }

static bool sync_ug(void *ctx) { return ug_device_synchronize(((ug_conv *)ctx)->device) == UG_OK; }

/* Largest |unigrad - reference| over the largest |reference| of the
 * forward result. */
static ug_status check_forward(ug_conv *u, const layer_data *d, double *error)
{
    float *out = malloc(d->y_count * sizeof *out);
    if (!out)
        return UG_ERR_OUT_OF_MEMORY;
    ug_tensor *y = NULL;
    ug_status st = ug_conv2d(u->x, u->weight, u->bias, &u->params, &y);
    if (st == UG_OK)
        st = ug_tensor_download(y, out, d->y_count * sizeof *out);
    if (st == UG_OK) {
        double diff = 0.0, scale = 0.0;
        for (size_t i = 0; i < d->y_count; i++) {
            double e = fabs((double)out[i] - (double)d->y[i]);
            diff = (e > diff || e != e) ? e : diff; /* NaN counts as a mismatch */
            scale = fabs((double)d->y[i]) > scale ? fabs((double)d->y[i]) : scale;
        }
        *error = diff / (scale > 0.0 ? scale : 1.0);
    }
    ug_tensor_free(y);
    free(out);
    return st;
}

/* The host's figures for one layer and batch, shared by every device row. */
typedef struct host_figures {
    bool onednn;
    onednn_conv_result dnn;
    double blas_forward_s, blas_step_s;
} host_figures;

static bool time_host(layer_data *d, double target, host_figures *h)
{
    memset(h, 0, sizeof *h);
#ifdef UG_BENCH_ONEDNN
    if (!onednn_conv_time(&d->layer, d->x, d->weight, d->bias, d->dy, target, d->y, &h->dnn))
        return false;
    h->onednn = d->have_y = true;
#endif
    im2col_products p;
    if (!alloc_products(&p, d)) {
        fprintf(stderr, "ug-bench conv: out of host memory\n");
        return false;
    }
    long reps = 0;
    bool ok = bench_time_host_blas(run_blas_forward, &p, 3, target, &h->blas_forward_s, &reps) &&
              bench_time_host_blas(run_blas_step, &p, 3, target, &h->blas_step_s, &reps);
    free_products(&p);
    return ok;
}

static void print_ms(double seconds, bool have)
{
    if (have)
        printf(" %8.3f", seconds * 1e3);
    else
        printf(" %8s", "-");
}

static void print_ratio(double a, double b, bool have)
{
    if (have && b > 0.0)
        printf(" %7.2f", a / b);
    else
        printf(" %7s", "-");
}

int bench_conv(int argc, char **argv)
{
    const char *only = NULL, *csv_path = NULL;
    int64_t batches[MAX_BATCHES];
    int batch_count = 0;
    double target = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            only = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--csv")) {
            csv_path = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
            char *end;
            target = strtod(argv[++i], &end);
            if (*end || !(target > 0.0 && target < 3600.0)) {
                fprintf(stderr, "ug-bench conv: --seconds needs seconds, e.g. 0.5\n");
                return 2;
            }
        } else if (i + 1 < argc && !strcmp(argv[i], "--batch") && batch_count < MAX_BATCHES) {
            char *end;
            long long batch = strtoll(argv[++i], &end, 10);
            if (*end || batch < 1 || batch > 65536) {
                fprintf(stderr, "ug-bench conv: --batch takes a size from 1 to 65536\n");
                return 2;
            }
            batches[batch_count++] = batch;
        } else {
            fprintf(stderr, "ug-bench conv: unknown or incomplete option '%s'\n", argv[i]);
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
        fprintf(stderr, "ug-bench conv: cannot write %s: %s\n", csv_path, strerror(errno));
        return 2;
    }
    if (csv)
        fprintf(csv, "layer,batch,device,ug_fwd_ms,ug_step_ms,onednn_fwd_ms,onednn_step_ms,onednn_algorithm,"
                     "blas_fwd_ms,blas_step_ms,ug_over_onednn_fwd,ug_over_onednn_step,max_rel_error\n");

    char onednn[64] = "oneDNN not built in";
#ifdef UG_BENCH_ONEDNN
    onednn_describe(onednn, sizeof onednn);
#endif
    print_wrapped(stdout, "host BLAS: ", openblas_get_config());
    printf("%s; %d thread(s); timing each figure for ~%.2f s\n\n", onednn, bench_cpu_threads(), target);
    /* Within 80 columns: the host's figures of a layer (oneDNN's choice,
     * the BLAS products) follow the table, once each. */
    printf("%-5s %5s %-8s %18s %18s %15s\n", "", "", "", "----- unigrad ----", "----- oneDNN -----",
           "- ug/oneDNN -");
    printf("%-5s %5s %-8s %8s %8s %8s %8s %7s %7s %7s\n", "layer", "batch", "device", "fwd ms", "step ms",
           "fwd ms", "step ms", "fwd", "step", "rel.err");

    enum { MAX_NOTES = LAYER_COUNT * MAX_BATCHES };
    char labels[MAX_NOTES][48], notes[MAX_NOTES][560];
    int note_count = 0, status = 0;
    for (size_t li = 0; li < LAYER_COUNT && status != 2; li++) {
        for (int bi = 0; bi < batch_count && status != 2; bi++) {
            layer_data d;
            host_figures h;
            if (!alloc_layer_data(&d, &cnn_layers[li], batches[bi])) {
                fprintf(stderr, "ug-bench conv: out of host memory\n");
                status = 2;
                break;
            }
            if (!time_host(&d, target, &h)) {
                free_layer_data(&d);
                status = 2;
                break;
            }
            snprintf(labels[note_count], sizeof labels[0], "%s batch %lld: ", d.layer.name,
                     (long long)d.layer.batch);
            snprintf(notes[note_count++], sizeof notes[0], "BLAS fwd %.3f ms, step %.3f ms.%s%s%s%s",
                     h.blas_forward_s * 1e3, h.blas_step_s * 1e3, h.onednn ? " oneDNN chose " : "",
                     h.onednn ? h.dnn.algorithm : "", h.onednn ? ". " : "", h.onednn ? h.dnn.details : "");
            for (int di = 0; di < device_count && status != 2; di++) {
                ug_conv u;
                double ug_forward_s = 0.0, ug_step_s = 0.0, error = 0.0;
                long reps = 0;
                ug_status st = ug_conv_open(&u, ids[di], &d);
                if (st == UG_OK && (!bench_time(run_ug_forward, sync_ug, &u, 3, target, &ug_forward_s, &reps) ||
                                    !bench_time(run_ug_step, sync_ug, &u, 3, target, &ug_step_s, &reps)))
                    st = UG_ERR_BACKEND;
                if (st == UG_OK && d.have_y)
                    st = check_forward(&u, &d, &error);
                ug_conv_close(&u);
                if (st != UG_OK) {
                    status = bench_fail(ids[di]);
                    break;
                }
                bool match = !d.have_y || error <= TOLERANCE;
                printf("%-5s %5lld %-8s", d.layer.name, (long long)d.layer.batch, ids[di]);
                print_ms(ug_forward_s, true);
                print_ms(ug_step_s, true);
                print_ms(h.dnn.forward_s, h.onednn);
                print_ms(h.dnn.step_s, h.onednn);
                print_ratio(ug_forward_s, h.dnn.forward_s, h.onednn);
                print_ratio(ug_step_s, h.dnn.step_s, h.onednn);
                if (d.have_y)
                    printf(" %7.1e", error);
                else
                    printf(" %7s", "-");
                printf("%s\n", match ? "" : "  MISMATCH");
                fflush(stdout);
                if (csv)
                    fprintf(csv, "%s,%lld,%s,%.4f,%.4f,%.4f,%.4f,%s,%.4f,%.4f,%.3f,%.3f,%.3g\n", d.layer.name,
                            (long long)d.layer.batch, ids[di], ug_forward_s * 1e3, ug_step_s * 1e3,
                            h.dnn.forward_s * 1e3, h.dnn.step_s * 1e3, h.onednn ? h.dnn.algorithm : "",
                            h.blas_forward_s * 1e3, h.blas_step_s * 1e3,
                            h.onednn ? ug_forward_s / h.dnn.forward_s : 0.0,
                            h.onednn ? ug_step_s / h.dnn.step_s : 0.0, d.have_y ? error : 0.0);
                if (!match && status == 0)
                    status = 1;
            }
            free_layer_data(&d);
        }
    }
    printf("\n");
    for (int i = 0; i < note_count; i++)
        print_wrapped(stdout, labels[i], notes[i]);
    printf("\n");
    print_wrapped(stdout, "unigrad: ", "fwd is ug_conv2d eager; step is a graph of the convolution and sum(y), "
                  "forward and backward to x, weight and bias (ug_graph_run, no optimizer).");
#ifdef UG_BENCH_ONEDNN
    print_wrapped(stdout, "oneDNN: ", "forward_training, then backward data and backward weights with the bias, "
                  "each primitive in the layouts it chose (reordered from NCHW once, outside the timing); the "
                  "faster of algorithm direct and auto, whose primitives (forward, backward data, backward "
                  "weights) the notes above name.");
#else
    print_wrapped(stdout, "oneDNN: ", "not found at build time (install libdnnl-dev and configure again); its "
                  "columns show -.");
#endif
    print_wrapped(stdout, "BLAS: ", "the im2col products alone through OpenBLAS on the host, one GEMM over the "
                  "batch each: fwd W col, step adds dY col^T and W^T dY (no im2col, col2im or bias).");
    print_wrapped(stdout, "rel.err: ", "largest |unigrad - oneDNN| of the forward result over the largest "
                  "|oneDNN|.");
    if (status == 1)
        fprintf(stderr, "ug-bench conv: a device's forward result differs from oneDNN's by more than %.0e "
                        "(relative)\n", TOLERANCE);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "ug-bench conv: writing %s failed: %s\n", csv_path, strerror(errno));
        status = 2;
    }
    return status;
}
