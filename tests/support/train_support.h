/* Helpers shared by the graph tests (test_autograd.c, test_optim.c,
 * test_training.c): models, graphs and optimizers that are freed when the
 * test ends, so a REQUIRE that returns early leaks nothing (the harness
 * tracks tensors only), and small host/device conveniences. */
#ifndef UG_TESTS_TRAIN_SUPPORT_H
#define UG_TESTS_TRAIN_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* A device test whose models, graphs and optimizers are freed after it:
 *   TS_TEST(name) { ... uses dev ... }  registered as TH_DEVICE_TEST(name). */
#define TS_TEST(name)                                                        \
    static void name##_body(ug_device *dev);                                 \
    static void test_##name(ug_device *dev)                                  \
    {                                                                        \
        name##_body(dev);                                                    \
        ts_cleanup();                                                        \
    }                                                                        \
    static void name##_body(ug_device *dev)
/* The same for a test that runs once (dev is NULL). */
#define TS_HOST_TEST(name) TS_TEST(name)

/* Tracked objects: NULL with a failure recorded on error. */
#define ts_model(dev, seed) ts_model_at(TH_LOC, dev, seed)
#define ts_graph(model) ts_graph_at(TH_LOC, model)
#define ts_optimizer(model, config) ts_optimizer_at(TH_LOC, model, config)
ug_model *ts_model_at(const char *file, int line, ug_device *dev, uint64_t seed);
ug_graph *ts_graph_at(const char *file, int line, ug_model *model);
ug_optimizer *ts_optimizer_at(const char *file, int line, ug_model *model,
                              const ug_optimizer_config *config);
/* Frees a tracked graph now. */
void ts_free_graph(ug_graph *graph);
/* Frees every tracked graph, then optimizer, then model. */
void ts_cleanup(void);

/* An f32 tensor uploaded from floats (tracked; NULL with a failure). */
/* Variadic so that compound literals (with commas) may be arguments. */
#define ts_tensor_f32(...) ts_tensor_f32_at(TH_LOC, __VA_ARGS__)
ug_tensor *ts_tensor_f32_at(const char *file, int line, ug_device *dev, int ndim,
                            const int64_t *shape, const float *data);
#define ts_tensor_i32(...) ts_tensor_i32_at(TH_LOC, __VA_ARGS__)
ug_tensor *ts_tensor_i32_at(const char *file, int line, ug_device *dev, int64_t n,
                            const int32_t *data);

/* A value of the last run as floats (numel elements, tracked). */
#define ts_read(graph, value) ts_read_at(TH_LOC, graph, value)
float *ts_read_at(const char *file, int line, ug_graph *graph, ug_value *value);
int64_t ts_value_numel(const ug_value *value);
/* A tensor's f32 contents (tracked). */
#define ts_download_f32(t) ((float *)th_download_raw(t))

/* Every parameter of a model, concatenated in creation order (tracked);
 * *count receives the total number of floats. */
/* The device for a pipeline's second stage beside cpu: the device under
 * test, or opencl:0 when that is the cpu; NULL, with the test skipped,
 * when it cannot be opened. */
const char *ts_second_stage(ug_device *dev);
#define ts_model_params(model, count) ts_model_params_at(TH_LOC, model, count)
float *ts_model_params_at(const char *file, int line, const ug_model *model, int64_t *count);

/* The largest |a - b| over the arrays, relative to the largest |b|. */
double ts_max_rel(const float *a, const float *b, int64_t count);
/* Attaches a tracked Adam optimizer with lr to graph (when adam) and
 * compiles it. */
ug_status ts_compile(ug_graph *graph, ug_model *model, bool adam, float lr);

/* A small model's body for graph tests: input "x" [batch, features]
 * through linear "fc1" 16 and ReLU, or (cnn) "x" [batch, 2, side, side]
 * through conv "c1" 4 (3x3, padding 1), batch norm "bn1", ReLU and global
 * average pooling, flattened. */
ug_status ts_small_body(ug_graph *graph, bool cnn, int64_t batch, int64_t features, int64_t side, ug_value **x,
                        ug_value **out);

/* |a - b| <= rel * max(|a|, |b|) + abs_tol */
bool ts_close(double a, double b, double rel, double abs_tol);

#endif
