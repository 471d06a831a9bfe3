/* One definition per op: eager and graph versions share one inference and
 * one launch, so they accept the same dtypes and give the same numbers;
 * element counts that overflow are refused; and a graph or layer call that
 * fails leaves the graph and the model as they were. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "train_support.h"

/* 4 * (2^62 + 1) wraps to 4 in 64-bit arithmetic. */
static const int64_t WRAPS_TO_4 = ((int64_t)1 << 62) + 1;

TS_TEST(reshape_overflow)
{
    int64_t four = 4;
    ug_tensor *t = th_tensor(dev, UG_F32, 1, &four, ((double[]){1, 2, 3, 4}));
    REQUIRE(t);
    ug_tensor *view = NULL;
    int64_t wrapping[2] = {4, WRAPS_TO_4};
    if (CHECK_STATUS(ug_tensor_reshape(t, 2, wrapping, &view), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("ug_tensor_reshape", "more elements");
    CHECK(view == NULL);
    int64_t inferred[3] = {4, WRAPS_TO_4, -1};
    CHECK_STATUS(ug_tensor_reshape(t, 3, inferred, &view), UG_ERR_SHAPE);
    ug_tensor *huge = NULL;
    int64_t too_big[2] = {(int64_t)1 << 62, 8};
    CHECK_STATUS(ug_tensor_create(dev, UG_F32, 2, too_big, &huge), UG_ERR_SHAPE);
    /* The message of a slice past the end does no start + count arithmetic
     * (it overflowed here: UndefinedBehaviorSanitizer aborted). */
    if (CHECK_STATUS(ug_tensor_slice(t, 2, INT64_MAX, &view), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("9223372036854775807 rows from row 2");
}

TS_TEST(graph_input_overflow)
{
    ug_graph *g = ts_graph(ts_model(dev, 0));
    REQUIRE(g);
    ug_value *x = NULL;
    int64_t wrapping[2] = {4, WRAPS_TO_4};
    if (CHECK_STATUS(ug_graph_input(g, "x", UG_F32, 2, wrapping, &x), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("more elements");
    int64_t bytes_overflow[2] = {(int64_t)1 << 61, 8}; /* 2^64 elements of 4 bytes */
    CHECK_STATUS(ug_graph_input(g, "x", UG_F32, 2, bytes_overflow, &x), UG_ERR_SHAPE);
    CHECK(x == NULL);
    /* A reshape inside a graph is checked the same way. */
    int64_t four = 4;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 1, &four, &x));
    ug_value *r = NULL;
    CHECK_STATUS(ug_g_reshape(g, x, 2, wrapping, &r), UG_ERR_SHAPE);
}

TS_TEST(layernorm_checks_dtypes)
{
    ug_graph *g = ts_graph(ts_model(dev, 0));
    REQUIRE(g);
    int64_t xs[2] = {2, 3}, cols = 3;
    ug_value *x = NULL, *gamma = NULL, *beta = NULL, *y = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_graph_input(g, "gamma", UG_U8, 1, &cols, &gamma));
    REQUIRE_OK(ug_graph_input(g, "beta", UG_F32, 1, &cols, &beta));
    if (CHECK_STATUS(ug_g_layernorm(g, x, gamma, beta, 1e-5f, &y), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("gamma", "u8");
    CHECK(y == NULL);
}

/* A linear layer on an input whose dtype differs from its f32 weights
 * fails after creating them: they must not stay in the model, and the
 * same name must then work with a proper input. */
TS_TEST(failed_layer_leaves_nothing)
{
    ug_model *m = ts_model(dev, 0);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    int64_t xs[2] = {2, 3};
    ug_value *x16 = NULL, *x = NULL, *h = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x16", UG_F16, 2, xs, &x16));
    CHECK_STATUS(ug_nn_linear(g, "fc", x16, 4, &h), UG_ERR_DTYPE);
    CHECK_EQ_I64(ug_model_param_count(m), 0);
    ug_tensor *w = NULL;
    CHECK_STATUS(ug_model_find_param(m, "fc.weight", &w), UG_ERR_INVALID_ARGUMENT);

    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_nn_linear(g, "fc", x, 4, &h));
    CHECK_EQ_I64(ug_model_param_count(m), 2);
    REQUIRE_OK(ug_g_mean(g, h, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_compile(g));
    ug_tensor *xt = ts_tensor_f32(dev, 2, xs, ((float[]){1, 2, 3, 4, 5, 6}));
    REQUIRE(xt);
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    CHECK_OK(ug_graph_run(g));
}

/* nn.Linear(bias=False): the weight alone, y = x W^T exactly as the
 * double product of the same values, and its gradient through a loss. */
TS_TEST(linear_without_bias)
{
    ug_model *m = ts_model(dev, 3);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    const int64_t xs[2] = {3, 5};
    const ug_nn_layer_params params = {.without_bias = true};
    ug_value *x = NULL, *y = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_nn_linear_with(g, "lin", x, 4, &params, &y));
    CHECK_EQ_I64(ug_model_param_count(m), 1);
    ug_tensor *w = NULL, *b = NULL;
    REQUIRE_OK(ug_model_find_param(m, "lin.weight", &w));
    CHECK_STATUS(ug_model_find_param(m, "lin.bias", &b), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_g_mean(g, y, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_compile(g));
    const float xv[15] = {1, -2, 0.5f, 3, -1, 0, 2, -0.25f, 1, 4, -3, 1, 1, 0.75f, -2};
    ug_tensor *xt = ts_tensor_f32(dev, 2, xs, xv);
    REQUIRE(xt);
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    REQUIRE_OK(ug_graph_run(g));
    const float *got = ts_read(g, y);
    double *wv = th_download(w);
    REQUIRE(got && wv);
    for (int r = 0; r < 3; r++)
        for (int o = 0; o < 4; o++) {
            double want = 0.0;
            for (int i = 0; i < 5; i++)
                want += (double)xv[r * 5 + i] * wv[o * 5 + i];
            CHECK_MSG(fabs(got[r * 4 + o] - want) <= 1e-5 * (1.0 + fabs(want)), "y[%d, %d] is %g, expected %g", r,
                      o, (double)got[r * 4 + o], want);
        }
}

/* ug_nn_conv_bn is the convolution without bias, the batch norm and the
 * activation it names: parameters "<name>.conv.weight" and "<name>.bn.*",
 * and the output bit for bit that of the three layers built by hand. */
TS_TEST(conv_bn_is_its_parts)
{
    const int64_t xs[4] = {2, 3, 6, 5};
    const ug_conv2d_params strided = {.stride = {2, 2}, .padding = {1, 1}};
    const float *got[2] = {NULL, NULL};
    ug_tensor *xt = NULL;
    for (int built = 0; built < 2; built++) {
        ug_model *m = ts_model(dev, 5);
        ug_graph *g = ts_graph(m);
        REQUIRE(g);
        ug_value *x = NULL, *y = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 4, xs, &x));
        if (built == 0) {
            REQUIRE_OK(ug_nn_conv_bn(g, "unit", x, 4, 3, &strided, UG_NN_RELU6, &y));
            ug_tensor *t = NULL;
            CHECK_EQ_I64(ug_model_param_count(m), 5); /* weight, bn weight and bias, running mean and variance */
            CHECK_OK(ug_model_find_param(m, "unit.conv.weight", &t));
            CHECK_OK(ug_model_find_param(m, "unit.bn.running_var", &t));
            CHECK_STATUS(ug_model_find_param(m, "unit.conv.bias", &t), UG_ERR_INVALID_ARGUMENT);
        } else {
            const ug_nn_layer_params no_bias = {.without_bias = true};
            REQUIRE_OK(ug_nn_conv2d_with(g, "unit.conv", x, 4, 3, 3, &strided, &no_bias, &y));
            REQUIRE_OK(ug_nn_batch_norm(g, "unit.bn", y, &y));
            REQUIRE_OK(ug_g_relu6(g, y, &y));
        }
        REQUIRE_OK(ug_graph_keep(g, y));
        REQUIRE_OK(ug_graph_compile(g));
        if (!xt) {
            double *v = th_random_values(2 * 3 * 6 * 5, -3, 3);
            xt = th_tensor(dev, UG_F32, 4, xs, v);
            REQUIRE(xt);
        }
        REQUIRE_OK(ug_graph_bind(g, x, xt));
        REQUIRE_OK(ug_graph_run_forward(g));
        got[built] = ts_read(g, y);
        REQUIRE(got[built]);
    }
    CHECK(memcmp(got[0], got[1], 2 * 4 * 3 * 3 * sizeof(float)) == 0);
    double six = 0.0;
    for (int i = 0; i < 2 * 4 * 3 * 3; i++)
        six = fmax(six, got[0][i]);
    CHECK_MSG(six <= 6.0, "ReLU6 let %g through", six);
}

/* A self-attention layer's two dropouts (nanoGPT's attn_dropout and
 * resid_dropout), against the same layer without them on the same
 * parameters: the output's keeps each value or drops it to 0 and the rest
 * are doubled (p 0.5), exactly; the probabilities' changes the output in
 * training and nothing in evaluation; p outside [0, 1) is refused. */
TS_TEST(self_attention_dropouts)
{
    enum { N = 2 * 6 * 8 };
    const int64_t xs[3] = {2, 6, 8};
    ug_model *m = ts_model(dev, 9);
    REQUIRE(m);
    double *xv = th_random_values(N, -1, 1);
    ug_tensor *xt = th_tensor(dev, UG_F32, 3, xs, xv);
    REQUIRE(xt);
    const ug_nn_attention_params plain = {.causal = true}, output = {.causal = true, .output_dropout = 0.5f},
                                 probs = {.causal = true, .dropout = 0.5f};
    const ug_nn_attention_params *kinds[4] = {&plain, &output, &probs, &probs};
    const float *y[4];
    for (int k = 0; k < 4; k++) {
        ug_graph *g = ts_graph(m);
        REQUIRE(g);
        ug_value *x = NULL, *out = NULL;
        REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
        REQUIRE_OK(ug_nn_self_attention_with(g, "attn", x, 2, kinds[k], &out));
        REQUIRE_OK(ug_graph_keep(g, out));
        REQUIRE_OK(ug_graph_set_training(g, k != 3)); /* the last in evaluation */
        REQUIRE_OK(ug_graph_compile(g));
        REQUIRE_OK(ug_graph_bind(g, x, xt));
        REQUIRE_OK(ug_graph_run_forward(g));
        y[k] = ts_read(g, out);
        REQUIRE(y[k]);
    }
    int dropped = 0, kept = 0, moved = 0;
    for (int i = 0; i < N; i++) {
        dropped += y[1][i] == 0.0f;
        kept += y[1][i] == 2.0f * y[0][i];
        moved += y[2][i] != y[0][i];
    }
    CHECK_MSG(dropped + kept == N && dropped > N / 5 && kept > N / 5, "%d of %d dropped, %d kept", dropped, N, kept);
    CHECK_MSG(moved > N / 2, "dropout on the probabilities changed %d of %d outputs", moved, N);
    CHECK(memcmp(y[3], y[0], sizeof(float) * N) == 0);
    ug_graph *g = ts_graph(m);
    ug_value *x = NULL, *out = NULL;
    REQUIRE(g);
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
    const ug_nn_attention_params whole = {.dropout = 1.0f};
    if (CHECK_STATUS(ug_nn_self_attention_with(g, "attn", x, 2, &whole, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("dropout 1", "[0, 1)");
}

/* The graph versions take f16 wherever the eager ones do, and give the
 * same bits: one inference, one launch. */
TS_TEST(graph_matches_eager_in_f16)
{
    ug_graph *g = ts_graph(ts_model(dev, 0));
    REQUIRE(g);
    int64_t as[2] = {3, 4}, bs[2] = {4, 2};
    double *av = th_random_values(12, -2, 2), *bv = th_random_values(8, -2, 2);
    th_round_to(UG_F16, av, 12);
    th_round_to(UG_F16, bv, 8);
    ug_tensor *a = th_tensor(dev, UG_F16, 2, as, av), *b = th_tensor(dev, UG_F16, 2, bs, bv);
    REQUIRE(a && b);
    ug_value *va = NULL, *vb = NULL, *r = NULL, *p = NULL, *s = NULL;
    REQUIRE_OK(ug_graph_input(g, "a", UG_F16, 2, as, &va));
    REQUIRE_OK(ug_graph_input(g, "b", UG_F16, 2, bs, &vb));
    REQUIRE_OK(ug_g_relu(g, va, &r));
    REQUIRE_OK(ug_g_matmul(g, r, vb, false, false, &p));
    REQUIRE_OK(ug_g_softmax(g, p, &s));
    REQUIRE_OK(ug_graph_keep(g, s));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_bind(g, va, a));
    REQUIRE_OK(ug_graph_bind(g, vb, b));
    REQUIRE_OK(ug_graph_run(g));
    uint16_t from_graph[6];
    REQUIRE_OK(ug_graph_read(g, s, from_graph, sizeof from_graph));

    ug_tensor *er = NULL, *ep = NULL, *es = NULL;
    REQUIRE_OK(ug_relu(a, &er));
    th_track(er);
    REQUIRE_OK(ug_matmul(er, b, false, false, &ep));
    th_track(ep);
    REQUIRE_OK(ug_softmax(ep, &es));
    th_track(es);
    uint16_t *eager = th_download_raw(es);
    REQUIRE(eager);
    th_compare_bits("graph vs eager softmax(relu(a) b) in f16", from_graph, eager, 6, 2);

    /* And against the double reference. */
    double ref[6];
    for (int i = 0; i < 3; i++) {
        double row[2] = {0, 0}, m = -1e300, sum = 0;
        for (int j = 0; j < 2; j++) {
            for (int k = 0; k < 4; k++)
                row[j] += (av[i * 4 + k] > 0 ? av[i * 4 + k] : 0) * bv[k * 2 + j];
            m = row[j] > m ? row[j] : m;
        }
        for (int j = 0; j < 2; j++)
            sum += exp(row[j] - m);
        for (int j = 0; j < 2; j++)
            ref[i * 2 + j] = exp(row[j] - m) / sum;
    }
    double got[6];
    for (int i = 0; i < 6; i++)
        got[i] = ref_f16_value(from_graph[i]);
    th_compare("f16 graph vs double reference", got, ref, 6, 1e-5);
}

/* sum(conv2d(x, w)) in a graph with x of dtype dt (values exact in bf16):
 * the convolution's result (dt) and the weight's gradient. */
static bool conv_in_graph(ug_device *dev, ug_dtype dt, const double *xv, void *y, size_t y_bytes,
                          float *dw, size_t dw_bytes)
{
    ug_model *m = ts_model(dev, 3);
    ug_graph *g = ts_graph(m);
    int64_t xs[4] = {2, 3, 6, 7}, ws[4] = {4, 3, 3, 3};
    ug_tensor *x = th_tensor(dev, dt, 4, xs, xv), *w = NULL;
    if (!g || !x || !CHECK_STATUS(ug_model_param(m, "w", 4, ws, UG_INIT_UNIFORM, 0.5f, &w), UG_OK))
        return false;
    ug_value *vx = NULL, *vw = NULL, *vy = NULL, *vf = NULL, *loss = NULL, *grad = NULL;
    const ug_conv2d_params pad1 = {.padding = {1, 1}};
    ug_status st = ug_graph_input(g, "x", dt, 4, xs, &vx);
    if (st == UG_OK) st = ug_graph_param(g, w, &vw);
    if (st == UG_OK) st = ug_g_conv2d(g, vx, vw, NULL, &pad1, &vy);
    if (st == UG_OK) st = ug_g_cast(g, vy, UG_F32, &vf);
    if (st == UG_OK) st = ug_g_sum(g, vf, 0, true, &loss);
    if (st == UG_OK) st = ug_graph_keep(g, vy);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    if (st == UG_OK) st = ug_graph_compile(g);
    if (st == UG_OK) st = ug_graph_bind(g, vx, x);
    if (st == UG_OK) st = ug_graph_run(g);
    if (st == UG_OK) st = ug_graph_read(g, vy, y, y_bytes);
    if (st == UG_OK) st = ug_graph_grad(g, vw, &grad);
    if (st == UG_OK) st = ug_graph_read(g, grad, dw, dw_bytes);
    if (!CHECK_STATUS(st, UG_OK))
        return false;
    CHECK_MSG(ug_value_dtype(vy) == dt, "the convolution's result is %s, not %s",
              ug_dtype_name(ug_value_dtype(vy)), ug_dtype_name(dt));
    return true;
}

/* A graph's convolution takes a bf16 input like every other op: its result
 * is the f32 result rounded to bf16, and the gradient passes back through
 * the casts around it, so the weight's gradient is the f32 input's bit for
 * bit (the same values; the incoming gradient is all ones). */
TS_TEST(conv_graph_in_bf16)
{
    const int64_t n = 2 * 3 * 6 * 7, ny = 2 * 4 * 6 * 7;
    double *xv = th_random_values(n, -2, 2);
    th_round_to(UG_BF16, xv, n);
    float *y32 = th_alloc((size_t)ny * 4), dw32[108], dw16[108];
    uint16_t *y16 = th_alloc((size_t)ny * 2);
    REQUIRE(conv_in_graph(dev, UG_F32, xv, y32, (size_t)ny * 4, dw32, sizeof dw32));
    REQUIRE(conv_in_graph(dev, UG_BF16, xv, y16, (size_t)ny * 2, dw16, sizeof dw16));
    th_compare_bits("weight gradient, bf16 input vs f32 input", dw16, dw32, 108, 4);
    uint16_t *rounded = th_alloc((size_t)ny * 2);
    for (int64_t i = 0; i < ny; i++)
        rounded[i] = ug_f32_to_bf16(y32[i]);
    th_compare_bits("bf16 result vs the f32 result rounded", y16, rounded, ny, 2);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(reshape_overflow),
        TH_DEVICE_TEST(conv_graph_in_bf16),
        TH_DEVICE_TEST(graph_input_overflow),
        TH_DEVICE_TEST(layernorm_checks_dtypes),
        TH_DEVICE_TEST(failed_layer_leaves_nothing),
        TH_DEVICE_TEST(linear_without_bias),
        TH_DEVICE_TEST(conv_bn_is_its_parts),
        TH_DEVICE_TEST(self_attention_dropouts),
        TH_DEVICE_TEST(graph_matches_eager_in_f16),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
