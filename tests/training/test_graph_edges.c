/* Graph edge cases: values that are all empty, a compile retried after it
 * ran out of memory part way, reading before the first run, and the
 * training mode applied at compile as graph.h documents. */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

/* An evaluation graph for a batch of 0 rows compiles and runs. */
TS_TEST(empty_batch)
{
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    int64_t xs[2] = {0, 3};
    ug_value *x = NULL, *h = NULL, *y = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_nn_linear(g, "fc", x, 2, &h));
    REQUIRE_OK(ug_g_relu(g, h, &y));
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_graph_compile(g));
    ug_tensor *xt = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, xs, &xt));
    th_track(xt);
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    CHECK_OK(ug_graph_run(g));
    CHECK_OK(ug_graph_read(g, y, NULL, 0));
}

/* Builds the same small training graph each time. */
static ug_graph *small_training_graph(ug_device *dev, ug_model *m, ug_value **x)
{
    ug_graph *g = ts_graph(m);
    if (!g)
        return NULL;
    int64_t xs[2] = {64, 256};
    ug_value *h = NULL, *loss = NULL;
    if (ug_graph_input(g, "x", UG_F32, 2, xs, x) != UG_OK || ug_nn_linear(g, "fc1", *x, 256, &h) ||
        ug_g_relu(g, h, &h) || ug_nn_linear(g, "fc2", h, 16, &h) ||
        ug_g_mean(g, h, 0, true, &loss) || ug_graph_backward(g, loss)) {
        th_fail(TH_LOC, "building the graph failed: %s", ug_last_error());
        return NULL;
    }
    (void)dev;
    return g;
}

/* A compile that runs out of memory part way gives back all it took; the
 * next compile succeeds with the same plan as a fresh graph, and freeing
 * the graph returns the pool to where it started. */
TS_TEST(compile_after_failed_compile)
{
    ug_model *m = ts_model(dev, 2);
    REQUIRE(m);
    ug_value *x = NULL, *fx = NULL;
    ug_graph *fresh = small_training_graph(dev, m, &fx);
    REQUIRE(fresh);
    REQUIRE_OK(ug_graph_compile(fresh));
    ug_graph_memory_info want;
    REQUIRE_OK(ug_graph_memory(fresh, &want));
    ts_free_graph(fresh);

    ug_memory_stats before = th_stats(dev);
    ug_graph *g = small_training_graph(dev, m, &x);
    REQUIRE(g);
    /* Room for the gradients but not for the arena: compile fails after
     * allocating some of its buffers. */
    ug_memory_stats now = th_stats(dev);
    REQUIRE_OK(ug_memory_release_cache(dev));
    REQUIRE_OK(ug_memory_set_limit(dev, now.bytes_in_use + want.gradient_bytes / 2));
    ug_status st = ug_graph_compile(g);
    REQUIRE_OK(ug_memory_set_limit(dev, 0));
    CHECK_STATUS(st, UG_ERR_OUT_OF_MEMORY);
    CHECK_EQ_I64(th_stats(dev).bytes_in_use, now.bytes_in_use);

    REQUIRE_OK(ug_graph_compile(g));
    ug_graph_memory_info got;
    REQUIRE_OK(ug_graph_memory(g, &got));
    CHECK_EQ_I64(got.activation_bytes, want.activation_bytes);
    CHECK_EQ_I64(got.gradient_bytes, want.gradient_bytes);
    CHECK_EQ_I64(got.nodes, want.nodes);
    CHECK_EQ_I64(got.fused, want.fused);
    ts_free_graph(g);
    CHECK_EQ_I64(th_stats(dev).bytes_in_use, before.bytes_in_use);
}

TS_TEST(read_before_run)
{
    ug_graph *g = ts_graph(ts_model(dev, 3));
    REQUIRE(g);
    int64_t n = 4;
    ug_value *x = NULL, *y = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 1, &n, &x));
    REQUIRE_OK(ug_g_relu(g, x, &y));
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_graph_compile(g));
    float out[4];
    if (CHECK_STATUS(ug_graph_read(g, y, out, sizeof out), UG_ERR_STATE))
        CHECK_ERROR_HAS("ug_graph_run");
}

/* Eval mode set after the dropout was added, before compile: dropout is
 * the identity, forward and backward. */
TS_TEST(training_mode_at_compile)
{
    ug_model *m = ts_model(dev, 4);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    int64_t n = 1000, one = 1;
    ug_value *x = NULL, *d = NULL;
    ug_tensor *w = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, &one, UG_INIT_CONSTANT, 1.0f, &w));
    ug_value *wv = NULL, *xw = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 1, &n, &x));
    REQUIRE_OK(ug_graph_param(g, w, &wv));
    REQUIRE_OK(ug_g_mul(g, x, wv, &xw));
    REQUIRE_OK(ug_g_dropout(g, xw, 0.5f, &d));
    REQUIRE_OK(ug_g_sum(g, d, 0, true, &loss));
    REQUIRE_OK(ug_graph_keep(g, d));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_set_training(g, false));
    REQUIRE_OK(ug_graph_compile(g));
    float host[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (float)(i % 7) - 3.0f;
    ug_tensor *xt = ts_tensor_f32(dev, 1, &n, host);
    REQUIRE(xt);
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    REQUIRE_OK(ug_graph_run(g));
    float *got = ts_read(g, d);
    REQUIRE(got);
    th_compare_bits("eval-mode dropout output", got, host, 1000, sizeof(float));
    ug_value *gw = NULL;
    REQUIRE_OK(ug_graph_grad(g, wv, &gw));
    float *grad = ts_read(g, gw);
    REQUIRE(grad);
    double sum = 0;
    for (int i = 0; i < 1000; i++)
        sum += host[i];
    CHECK_MSG(grad[0] == (float)sum, "d loss / d w is %g, expected %g (no dropout)", grad[0], sum);
}

/* A layer norm over an empty last axis differentiates (nothing to give). */
TS_TEST(layernorm_of_nothing)
{
    ug_graph *g = ts_graph(ts_model(dev, 5));
    REQUIRE(g);
    int64_t xs[2] = {4, 0};
    ug_value *x = NULL, *y = NULL, *w = NULL, *h = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_nn_layernorm(g, "ln", x, 1e-5f, &y));
    REQUIRE_OK(ug_g_sum(g, y, 0, true, &h));
    ug_tensor *wt = NULL;
    int64_t one = 1;
    REQUIRE_OK(ug_model_param(ug_graph_model(g), "w", 1, &one, UG_INIT_CONSTANT, 2.0f, &wt));
    REQUIRE_OK(ug_graph_param(g, wt, &w));
    REQUIRE_OK(ug_g_mul(g, h, w, &loss));
    REQUIRE_OK(ug_g_sum(g, loss, 0, true, &loss));
    CHECK_OK(ug_graph_backward(g, loss));
}

/* Gradients accumulated without an optimizer: ug_graph_run_update leaves
 * their mean readable and lets full runs go on. */
TS_TEST(accumulate_without_optimizer)
{
    ug_model *m = ts_model(dev, 6);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    int64_t n = 3, one = 1;
    ug_value *x = NULL, *w = NULL, *xw = NULL, *loss = NULL, *gw = NULL;
    ug_tensor *wt = NULL;
    REQUIRE_OK(ug_model_param(m, "w", 1, &one, UG_INIT_CONSTANT, 1.0f, &wt));
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 1, &n, &x));
    REQUIRE_OK(ug_graph_param(g, wt, &w));
    REQUIRE_OK(ug_g_mul(g, x, w, &xw));
    REQUIRE_OK(ug_g_sum(g, xw, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_grad(g, w, &gw));
    float a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    ug_tensor *ta = ts_tensor_f32(dev, 1, &n, a), *tb = ts_tensor_f32(dev, 1, &n, b);
    REQUIRE(ta && tb);
    REQUIRE_OK(ug_graph_bind(g, x, ta));
    REQUIRE_OK(ug_graph_run_backward(g));
    REQUIRE_OK(ug_graph_bind(g, x, tb));
    REQUIRE_OK(ug_graph_run_backward(g));
    REQUIRE_OK(ug_graph_run_update(g));
    float got = 0;
    REQUIRE_OK(ug_graph_read(g, gw, &got, sizeof got));
    CHECK_MSG(got == 10.5f, "mean gradient %g, expected (6 + 15) / 2", (double)got);
    CHECK_OK(ug_graph_run(g));
}

/* The plan before compile: no device memory is taken, the graph takes no
 * more ops, and compile allocates exactly what the plan said. */
TS_TEST(plan_before_compile)
{
    ug_model *m = ts_model(dev, 2);
    REQUIRE(m);
    ug_value *x = NULL;
    ug_graph *g = small_training_graph(dev, m, &x);
    REQUIRE(g);
    ug_memory_stats before = th_stats(dev);
    ug_graph_memory_info plan;
    REQUIRE_OK(ug_graph_memory(g, &plan));
    ug_memory_stats after = th_stats(dev);
    CHECK_EQ_I64(after.bytes_in_use, before.bytes_in_use);
    CHECK_EQ_I64(after.allocations + after.cache_hits, before.allocations + before.cache_hits);
    CHECK(plan.activation_bytes > 0 && plan.gradient_bytes > 0 && plan.nodes > 0);
    ug_value *y = NULL;
    CHECK_STATUS(ug_g_relu(g, x, &y), UG_ERR_STATE);
    REQUIRE_OK(ug_graph_compile(g));
    ug_graph_memory_info compiled;
    REQUIRE_OK(ug_graph_memory(g, &compiled));
    CHECK(memcmp(&compiled, &plan, sizeof plan) == 0);
    /* The arena and the gradients are what compile took from the pool. */
    uint64_t taken = th_stats(dev).bytes_in_use - before.bytes_in_use;
    CHECK_MSG(taken >= plan.activation_bytes + plan.gradient_bytes &&
                  taken <= (plan.activation_bytes + plan.gradient_bytes) * 5 / 4 + 4096,
              "compile took %llu bytes for a plan of %llu + %llu", (unsigned long long)taken,
              (unsigned long long)plan.activation_bytes, (unsigned long long)plan.gradient_bytes);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(empty_batch),
        TH_DEVICE_TEST(compile_after_failed_compile),
        TH_DEVICE_TEST(read_before_run),
        TH_DEVICE_TEST(training_mode_at_compile),
        TH_DEVICE_TEST(layernorm_of_nothing),
        TH_DEVICE_TEST(accumulate_without_optimizer),
        TH_DEVICE_TEST(plan_before_compile),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
