/* Helpers shared by the graph tests (see train_support.h). */
#include "train_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ts_list {
    void **items;
    int count, capacity;
} ts_list;

static ts_list graphs, optimizers, models;

static void push(ts_list *list, void *item)
{
    if (list->count == list->capacity) {
        int capacity = list->capacity ? list->capacity * 2 : 16;
        void **grown = realloc(list->items, (size_t)capacity * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "train_support: out of host memory\n");
            exit(2);
        }
        list->items = grown;
        list->capacity = capacity;
    }
    list->items[list->count++] = item;
}

ug_model *ts_model_at(const char *file, int line, ug_device *dev, uint64_t seed)
{
    ug_model *m = NULL;
    ug_status s = ug_model_create(dev, seed, &m);
    if (s != UG_OK) {
        th_fail(file, line, "ug_model_create returned %s: %s", ug_status_name(s), ug_last_error());
        return NULL;
    }
    push(&models, m);
    return m;
}

ug_graph *ts_graph_at(const char *file, int line, ug_model *model)
{
    ug_graph *g = NULL;
    ug_status s = ug_graph_create(model, &g);
    if (s != UG_OK) {
        th_fail(file, line, "ug_graph_create returned %s: %s", ug_status_name(s), ug_last_error());
        return NULL;
    }
    push(&graphs, g);
    return g;
}

ug_optimizer *ts_optimizer_at(const char *file, int line, ug_model *model,
                              const ug_optimizer_config *config)
{
    ug_optimizer *o = NULL;
    ug_status s = ug_optimizer_create(model, config, &o);
    if (s != UG_OK) {
        th_fail(file, line, "ug_optimizer_create returned %s: %s", ug_status_name(s), ug_last_error());
        return NULL;
    }
    push(&optimizers, o);
    return o;
}

void ts_free_graph(ug_graph *graph)
{
    for (int i = 0; i < graphs.count; i++) {
        if (graphs.items[i] == graph) {
            graphs.items[i] = graphs.items[--graphs.count];
            break;
        }
    }
    ug_graph_free(graph);
}

void ts_cleanup(void)
{
    for (int i = graphs.count; i-- > 0;)
        ug_graph_free(graphs.items[i]);
    for (int i = optimizers.count; i-- > 0;)
        ug_optimizer_free(optimizers.items[i]);
    for (int i = models.count; i-- > 0;)
        ug_model_free(models.items[i]);
    graphs.count = optimizers.count = models.count = 0;
    free(graphs.items);
    free(optimizers.items);
    free(models.items);
    memset(&graphs, 0, sizeof graphs);
    memset(&optimizers, 0, sizeof optimizers);
    memset(&models, 0, sizeof models);
}

ug_tensor *ts_tensor_f32_at(const char *file, int line, ug_device *dev, int ndim,
                            const int64_t *shape, const float *data)
{
    ug_tensor *t = NULL;
    ug_status s = ug_tensor_from_host(dev, UG_F32, ndim, shape, data, &t);
    if (s != UG_OK) {
        th_fail(file, line, "ug_tensor_from_host(f32) returned %s: %s", ug_status_name(s),
                ug_last_error());
        return NULL;
    }
    return th_track(t);
}

ug_tensor *ts_tensor_i32_at(const char *file, int line, ug_device *dev, int64_t n,
                            const int32_t *data)
{
    ug_tensor *t = NULL;
    ug_status s = ug_tensor_from_host(dev, UG_I32, 1, &n, data, &t);
    if (s != UG_OK) {
        th_fail(file, line, "ug_tensor_from_host(i32) returned %s: %s", ug_status_name(s),
                ug_last_error());
        return NULL;
    }
    return th_track(t);
}

int64_t ts_value_numel(const ug_value *value)
{
    int64_t n = 1;
    for (int i = 0; i < ug_value_ndim(value); i++)
        n *= ug_value_dim(value, i);
    return n;
}

float *ts_read_at(const char *file, int line, ug_graph *graph, ug_value *value)
{
    int64_t n = ts_value_numel(value);
    float *host = th_alloc((size_t)(n > 0 ? n : 1) * sizeof *host);
    ug_status s = ug_graph_read(graph, value, host, (size_t)n * sizeof *host);
    if (s != UG_OK) {
        th_fail(file, line, "ug_graph_read returned %s: %s", ug_status_name(s), ug_last_error());
        return NULL;
    }
    return host;
}

float *ts_model_params_at(const char *file, int line, const ug_model *model, int64_t *count)
{
    int64_t total = 0;
    int params = ug_model_param_count(model);
    for (int i = 0; i < params; i++) {
        ug_tensor *t = NULL;
        if (ug_model_param_at(model, i, NULL, &t) == UG_OK)
            total += ug_tensor_numel(t);
    }
    float *all = th_alloc((size_t)(total > 0 ? total : 1) * sizeof *all);
    int64_t at = 0;
    for (int i = 0; i < params; i++) {
        ug_tensor *t = NULL;
        ug_status s = ug_model_param_at(model, i, NULL, &t);
        if (s == UG_OK)
            s = ug_tensor_download(t, all + at, ug_tensor_nbytes(t));
        if (s != UG_OK) {
            th_fail(file, line, "reading parameter %d returned %s: %s", i, ug_status_name(s),
                    ug_last_error());
            return NULL;
        }
        at += ug_tensor_numel(t);
    }
    *count = total;
    return all;
}

bool ts_close(double a, double b, double rel, double abs_tol)
{
    double scale = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return fabs(a - b) <= rel * scale + abs_tol;
}

double ts_max_rel(const float *a, const float *b, int64_t count)
{
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < count; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

ug_status ts_compile(ug_graph *graph, ug_model *model, bool adam, float lr)
{
    if (adam) {
        ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
        oc.lr = lr;
        ug_optimizer *opt = ts_optimizer(model, &oc);
        if (!opt)
            return UG_ERR_OUT_OF_MEMORY;
        ug_status st = ug_graph_set_optimizer(graph, opt);
        if (st != UG_OK)
            return st;
    }
    return ug_graph_compile(graph);
}

ug_status ts_small_body(ug_graph *g, bool cnn, int64_t batch, int64_t features, int64_t side, ug_value **x,
                        ug_value **out)
{
    ug_value *h = NULL;
    if (!cnn) {
        const int64_t xs[2] = {batch, features};
        ug_status st = ug_graph_input(g, "x", UG_F32, 2, xs, x);
        if (st == UG_OK) st = ug_nn_linear(g, "fc1", *x, 16, &h);
        return st == UG_OK ? ug_g_relu(g, h, out) : st;
    }
    const int64_t xs[4] = {batch, 2, side, side};
    const ug_conv2d_params p = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    ug_status st = ug_graph_input(g, "x", UG_F32, 4, xs, x);
    if (st == UG_OK) st = ug_nn_conv2d(g, "c1", *x, 4, 3, 3, &p, &h);
    if (st == UG_OK) st = ug_nn_batch_norm(g, "bn1", h, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_g_global_avg_pool2d(g, h, &h);
    return st == UG_OK ? ug_nn_flatten(g, h, out) : st;
}

const char *ts_second_stage(ug_device *dev)
{
    const char *other = strcmp(ug_device_name(dev), "cpu") ? ug_device_name(dev) : "opencl:0";
    ug_device *second = NULL;
    if (ug_device_open(other, &second) != UG_OK) {
        th_skip("no second device for stage 1 (%s): %s", other, ug_last_error());
        return NULL;
    }
    ug_device_close(second);
    return other;
}
