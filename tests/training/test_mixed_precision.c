/* Mixed-precision graphs (ug_graph_set_precision) on every device: the
 * dtypes autocast picks per op, the activation memory of the plan, half
 * copies of the parameters kept equal to the f32 master weights rounded,
 * and gradients and training against the same graph in f32.
 *
 * The f32 graph is the reference: its gradients and training are checked
 * against double-precision references by test_autograd, test_optim and
 * test_conformance. A half graph differs from it by the rounding of its
 * activations and operands to 11 (f16) or 8 (bf16) significant bits, which
 * sets the tolerances below. */
#include <math.h>
#include <string.h>

#include "core/graph/internal.h"
#include "harness.h"
#include "train_support.h"

static const ug_dtype half_dtypes[] = {UG_F16, UG_BF16};

/* Relative tolerance per half dtype: a few roundings of 2^-11 or 2^-8
 * (unit roundoff 2^-12, 2^-9) through two layers. */
static double half_tolerance(ug_dtype dt) { return dt == UG_F16 ? 1e-2 : 6e-2; }

/* The two models ug-train trains, as graphs of batch rows with x declared
 * in the compute dtype (as ug-train's loader delivers it). */
static ug_status mlp(ug_graph *g, ug_dtype precision, int64_t batch, ug_value **loss)
{
    ug_value *x = NULL, *y = NULL, *h = NULL, *logits = NULL;
    int64_t xs[2] = {batch, 784};
    UG_TRY(ug_graph_set_precision(g, precision));
    UG_TRY(ug_graph_input(g, "x", precision, 2, xs, &x));
    UG_TRY(ug_graph_input(g, "y", UG_I32, 1, &batch, &y));
    UG_TRY(ug_nn_linear(g, "fc1", x, 500, &h));
    UG_TRY(ug_g_relu(g, h, &h));
    UG_TRY(ug_nn_linear(g, "fc2", h, 10, &logits));
    return ug_g_cross_entropy(g, logits, y, 0.0f, loss);
}

static ug_status conv_block(ug_graph *g, const char *conv, const char *norm, int64_t channels,
                            ug_value *x, ug_value **out)
{
    const ug_conv2d_params same = {.padding = {1, 1}};
    const ug_pool2d_params halve = {.kernel = {2, 2}, .stride = {2, 2}};
    ug_value *h = NULL;
    UG_TRY(ug_nn_conv2d(g, conv, x, channels, 3, 3, &same, &h));
    UG_TRY(ug_nn_batch_norm(g, norm, h, &h));
    UG_TRY(ug_g_relu(g, h, &h));
    return ug_g_max_pool2d(g, h, &halve, out);
}

static ug_status cnn(ug_graph *g, ug_dtype precision, int64_t batch, ug_value **loss)
{
    ug_value *x = NULL, *y = NULL, *h = NULL, *logits = NULL;
    int64_t xs[4] = {batch, 1, 28, 28};
    UG_TRY(ug_graph_set_precision(g, precision));
    UG_TRY(ug_graph_input(g, "x", precision, 4, xs, &x));
    UG_TRY(ug_graph_input(g, "y", UG_I32, 1, &batch, &y));
    UG_TRY(conv_block(g, "conv1", "bn1", 32, x, &h));
    UG_TRY(conv_block(g, "conv2", "bn2", 64, h, &h));
    UG_TRY(ug_nn_flatten(g, h, &h));
    UG_TRY(ug_nn_linear(g, "fc1", h, 128, &h));
    UG_TRY(ug_g_relu(g, h, &h));
    UG_TRY(ug_nn_linear(g, "fc2", h, 10, &logits));
    return ug_g_cross_entropy(g, logits, y, 0.0f, loss);
}

typedef ug_status (*model_fn)(ug_graph *, ug_dtype, int64_t, ug_value **);

/* The planned activation bytes of a model's training step (Adam). */
static uint64_t activation_bytes(ug_device *dev, model_fn build, ug_dtype precision)
{
    ug_model *model = ts_model(dev, 1);
    ug_graph *g = model ? ts_graph(model) : NULL;
    if (!g)
        return 0;
    ug_value *loss = NULL;
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.loss_scaling.enabled = precision == UG_F16;
    ug_status st = build(g, precision, 64, &loss);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    ug_optimizer *opt = st == UG_OK ? ts_optimizer(model, &c) : NULL;
    if (st == UG_OK && opt) st = ug_graph_set_optimizer(g, opt);
    ug_graph_memory_info info = {0};
    if (st == UG_OK) st = ug_graph_memory(g, &info);
    if (st != UG_OK) {
        th_fail(TH_LOC, "planning %s returned %s: %s", ug_dtype_name(precision),
                ug_status_name(st), ug_last_error());
        return 0;
    }
    return info.activation_bytes;
}

/* Done-when of mixed precision: the plan's activations in a half dtype are
 * at most 0.55 times the f32 plan's, for the MLP and the CNN. */
TS_TEST(activation_memory_halves)
{
    static const struct { const char *name; model_fn build; } models[] = {{"mlp", mlp}, {"cnn", cnn}};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        uint64_t f32 = activation_bytes(dev, models[m].build, UG_F32);
        REQUIRE(f32 > 0);
        for (size_t h = 0; h < sizeof half_dtypes / sizeof half_dtypes[0]; h++) {
            uint64_t half = activation_bytes(dev, models[m].build, half_dtypes[h]);
            th_context("%s in %s", models[m].name, ug_dtype_name(half_dtypes[h]));
            CHECK_MSG(half > 0 && (double)half <= 0.55 * (double)f32,
                      "activations %llu bytes against %llu in f32 (ratio %.3f, at most 0.55)",
                      (unsigned long long)half, (unsigned long long)f32, (double)half / (double)f32);
        }
    }
    th_context("%s", "");
}

/* The dtype of each op's result in an f16 graph (PyTorch autocast's
 * lists), and the refusal of a non-float precision. */
TS_TEST(autocast_dtypes)
{
    ug_model *model = ts_model(dev, 1);
    ug_graph *g = model ? ts_graph(model) : NULL;
    REQUIRE(g);
    CHECK_STATUS(ug_graph_set_precision(g, UG_I32), UG_ERR_DTYPE);
    CHECK_ERROR_HAS("not a compute precision");
    REQUIRE_OK(ug_graph_set_precision(g, UG_F16));
    int64_t xs[2] = {4, 8}, n = 4;
    ug_value *x, *y, *h, *r, *soft, *ln, *sum, *mixed, *e, *loss;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, xs, &x));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, &n, &y));
    REQUIRE_OK(ug_nn_linear(g, "fc", x, 8, &h));
    CHECK(ug_value_dtype(h) == UG_F16);        /* product and bias in f16 */
    REQUIRE_OK(ug_g_relu(g, h, &r));
    CHECK(ug_value_dtype(r) == UG_F16);        /* elementwise follows */
    /* A checkpoint may take in the input's cast, recomputed anyway. */
    REQUIRE_OK(ug_graph_checkpoint(g, x, r));
    REQUIRE_OK(ug_g_softmax(g, r, &soft));
    CHECK(ug_value_dtype(soft) == UG_F32);
    REQUIRE_OK(ug_nn_layernorm(g, "ln", r, 1e-5f, &ln));
    CHECK(ug_value_dtype(ln) == UG_F32);
    REQUIRE_OK(ug_g_sum(g, r, 0, true, &sum));
    CHECK(ug_value_dtype(sum) == UG_F32);
    REQUIRE_OK(ug_g_exp(g, r, &e));
    CHECK(ug_value_dtype(e) == UG_F32);
    REQUIRE_OK(ug_g_add(g, r, x, &mixed));     /* f16 beside an f32 input: promoted */
    CHECK(ug_value_dtype(mixed) == UG_F32);
    REQUIRE_OK(ug_g_cross_entropy(g, h, y, 0.0f, &loss));
    CHECK(ug_value_dtype(loss) == UG_F32);
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_tensor *w = NULL;
    ug_value *wv = NULL, *gw = NULL;
    REQUIRE_OK(ug_model_find_param(model, "fc.weight", &w));
    REQUIRE_OK(ug_graph_param(g, w, &wv));
    REQUIRE_OK(ug_graph_grad(g, wv, &gw));
    CHECK(ug_value_dtype(wv) == UG_F32);       /* master weights and their gradients */
    CHECK(ug_value_dtype(gw) == UG_F32);
}

/* A small classifier's graph on x [rows, 16] in precision. */
static ug_status small_mlp(ug_graph *g, ug_dtype precision, ug_value **x, ug_value **y,
                           ug_value **loss)
{
    int64_t xs[2] = {32, 16}, n = 32;
    ug_value *h = NULL, *logits = NULL;
    UG_TRY(ug_graph_set_precision(g, precision));
    UG_TRY(ug_graph_input(g, "x", UG_F32, 2, xs, x));
    UG_TRY(ug_graph_input(g, "y", UG_I32, 1, &n, y));
    UG_TRY(ug_nn_linear(g, "fc1", *x, 24, &h));
    UG_TRY(ug_g_tanh(g, h, &h));
    UG_TRY(ug_nn_linear(g, "fc2", h, 4, &logits));
    return ug_g_cross_entropy(g, logits, *y, 0.0f, loss);
}

typedef struct run {
    ug_model *model;
    ug_graph *graph;
    ug_value *x, *y, *loss;
} run;

static bool make_run(ug_device *dev, ug_dtype precision, const ug_optimizer_config *config, run *r)
{
    r->model = ts_model(dev, 3);
    r->graph = r->model ? ts_graph(r->model) : NULL;
    if (!r->graph)
        return false;
    ug_status st = small_mlp(r->graph, precision, &r->x, &r->y, &r->loss);
    if (st == UG_OK) st = ug_graph_backward(r->graph, r->loss);
    if (st == UG_OK && config) {
        ug_optimizer *opt = ts_optimizer(r->model, config);
        st = opt ? ug_graph_set_optimizer(r->graph, opt) : UG_ERR_STATE;
    }
    if (st == UG_OK) st = ug_graph_compile(r->graph);
    if (st != UG_OK)
        th_fail(TH_LOC, "building the %s graph returned %s: %s", ug_dtype_name(precision),
                ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

static bool bind_batch(ug_device *dev, run *r, const float *xs, const int32_t *labels)
{
    int64_t shape[2] = {32, 16};
    ug_tensor *x = ts_tensor_f32(dev, 2, shape, xs), *y = ts_tensor_i32(dev, 32, labels);
    return x && y && ug_graph_bind(r->graph, r->x, x) == UG_OK &&
           ug_graph_bind(r->graph, r->y, y) == UG_OK;
}

/* A learnable batch: each row's label is its largest of features 0..3. */
static void random_batch(float *x, int32_t *labels)
{
    for (int i = 0; i < 32 * 16; i++)
        x[i] = (float)th_uniform(-2.0, 2.0);
    for (int r = 0; r < 32; r++) {
        labels[r] = 0;
        for (int k = 1; k < 4; k++)
            if (x[r * 16 + k] > x[r * 16 + labels[r]])
                labels[r] = k;
    }
}

/* max |a - b| / max |b| */
static double relative_difference(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return scale > 0.0 ? diff / scale : diff;
}

/* One backward pass: every parameter's gradient (f32) against the f32
 * graph's on the same batch. */
TS_TEST(gradients_match_f32)
{
    th_seed(11);
    float x[32 * 16];
    int32_t labels[32];
    random_batch(x, labels);
    run ref;
    REQUIRE(make_run(dev, UG_F32, NULL, &ref) && bind_batch(dev, &ref, x, labels));
    REQUIRE_OK(ug_graph_run_backward(ref.graph));
    for (size_t h = 0; h < sizeof half_dtypes / sizeof half_dtypes[0]; h++) {
        run half;
        REQUIRE(make_run(dev, half_dtypes[h], NULL, &half) && bind_batch(dev, &half, x, labels));
        REQUIRE_OK(ug_graph_run_backward(half.graph));
        for (int p = 0; p < ug_model_param_count(ref.model); p++) {
            const char *name = NULL;
            ug_tensor *pr = NULL, *ph = NULL;
            ug_value *vr = NULL, *vh = NULL, *gr = NULL, *gh = NULL;
            REQUIRE_OK(ug_model_param_at(ref.model, p, &name, &pr));
            REQUIRE_OK(ug_model_find_param(half.model, name, &ph));
            REQUIRE_OK(ug_graph_param(ref.graph, pr, &vr));
            REQUIRE_OK(ug_graph_param(half.graph, ph, &vh));
            REQUIRE_OK(ug_graph_grad(ref.graph, vr, &gr));
            REQUIRE_OK(ug_graph_grad(half.graph, vh, &gh));
            float *want = ts_read(ref.graph, gr), *got = ts_read(half.graph, gh);
            REQUIRE(want && got);
            double d = relative_difference(got, want, ts_value_numel(gr));
            th_context("%s gradient of %s", ug_dtype_name(half_dtypes[h]), name);
            CHECK_MSG(d <= 2.0 * half_tolerance(half_dtypes[h]),
                      "differs from f32 by %.3g of its largest element", d);
        }
    }
    th_context("%s", "");
}

/* The model's half copy of every parameter equals the parameter rounded,
 * bit for bit. */
static void check_copies(ug_model *model, ug_dtype dt)
{
    for (int p = 0; p < ug_model_param_count(model); p++) {
        const char *name = NULL;
        ug_tensor *param = NULL, *rounded = NULL;
        REQUIRE_OK(ug_model_param_at(model, p, &name, &param));
        const ug_tensor *copy = ug_model_half_copy_at(model, p);
        th_context("%s copy of %s", ug_dtype_name(dt), name);
        REQUIRE(copy && copy->dtype == dt);
        REQUIRE_OK(ug_cast(param, dt, &rounded));
        th_track(rounded);
        const uint16_t *want = th_download_raw(rounded), *got = th_download_raw(copy);
        REQUIRE(want && got);
        CHECK(memcmp(want, got, (size_t)ug_tensor_numel(param) * sizeof(uint16_t)) == 0);
    }
    th_context("%s", "");
}

/* 30 Adam steps in each precision from the same start on the same batches:
 * the losses follow the f32 run's, and after every kind of update (steps,
 * ug_model_write_param) the half copies are the master weights rounded. */
TS_TEST(training_matches_f32)
{
    enum { STEPS = 30 };
    th_seed(5);
    static float x[STEPS][32 * 16];
    static int32_t labels[STEPS][32];
    for (int s = 0; s < STEPS; s++)
        random_batch(x[s], labels[s]);
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.lr = 1e-2f;
    float ref_loss[STEPS];
    run ref;
    REQUIRE(make_run(dev, UG_F32, &c, &ref));
    for (int s = 0; s < STEPS; s++) {
        REQUIRE(bind_batch(dev, &ref, x[s], labels[s]));
        REQUIRE_OK(ug_graph_run(ref.graph));
        REQUIRE_OK(ug_graph_read(ref.graph, ref.loss, &ref_loss[s], sizeof(float)));
    }
    CHECK(ref_loss[STEPS - 1] < ref_loss[0]);
    for (size_t h = 0; h < sizeof half_dtypes / sizeof half_dtypes[0]; h++) {
        const ug_dtype dt = half_dtypes[h];
        ug_optimizer_config hc = c;
        hc.loss_scaling.enabled = dt == UG_F16;
        run half;
        REQUIRE(make_run(dev, dt, &hc, &half));
        check_copies(half.model, dt);
        for (int s = 0; s < STEPS; s++) {
            float loss = 0.0f;
            REQUIRE(bind_batch(dev, &half, x[s], labels[s]));
            REQUIRE_OK(ug_graph_run(half.graph));
            REQUIRE_OK(ug_graph_read(half.graph, half.loss, &loss, sizeof loss));
            th_context("%s step %d", ug_dtype_name(dt), s);
            CHECK_MSG(fabs(loss - ref_loss[s]) <= 3.0 * half_tolerance(dt) * fabs(ref_loss[s]),
                      "loss %.6f against %.6f in f32", (double)loss, (double)ref_loss[s]);
        }
        check_copies(half.model, dt);
        float w[24 * 16];
        for (int i = 0; i < 24 * 16; i++)
            w[i] = 0.01f * (float)(i % 17) - 0.05f;
        REQUIRE_OK(ug_model_write_param(half.model, "fc1.weight", w, sizeof w));
        check_copies(half.model, dt);
    }
    th_context("%s", "");
}

/* A model keeps its half copies in one dtype: a graph asking for another
 * is refused with the reason, and the graph is left as it was. */
TS_TEST(one_half_dtype_per_model)
{
    ug_model *model = ts_model(dev, 1);
    ug_graph *a = model ? ts_graph(model) : NULL, *b = model ? ts_graph(model) : NULL;
    REQUIRE(a && b);
    ug_value *x, *y, *loss, *h;
    REQUIRE_OK(small_mlp(a, UG_F16, &x, &y, &loss));
    int64_t xs[2] = {32, 16};
    REQUIRE_OK(ug_graph_set_precision(b, UG_BF16));
    REQUIRE_OK(ug_graph_input(b, "x", UG_F32, 2, xs, &x));
    CHECK_STATUS(ug_nn_linear(b, "fc1", x, 24, &h), UG_ERR_DTYPE);
    CHECK_ERROR_HAS("one half dtype", "f16");
    REQUIRE_OK(ug_graph_set_precision(b, UG_F16));
    CHECK_OK(ug_nn_linear(b, "fc1", x, 24, &h));
}

/* The loader's batches in a half dtype: each feature rounded to nearest
 * even on the host. */
TS_TEST(loader_half_batches)
{
    enum { COUNT = 10, FEATURES = 7 };
    float xs[COUNT * FEATURES];
    int32_t labels[COUNT];
    th_seed(2);
    for (int i = 0; i < COUNT * FEATURES; i++)
        xs[i] = (float)th_uniform(-300.0, 300.0);
    for (int i = 0; i < COUNT; i++)
        labels[i] = i % 3;
    ug_dataset *ds = NULL;
    REQUIRE_OK(ug_dataset_from_arrays(COUNT, FEATURES, xs, labels, &ds));
    for (size_t h = 0; h < sizeof half_dtypes / sizeof half_dtypes[0]; h++) {
        ug_loader_config lc = ug_loader_default_config();
        lc.batch_size = COUNT;
        lc.x_dtype = half_dtypes[h];
        ug_loader *loader = NULL;
        ug_batch batch;
        bool done = false;
        th_context("%s", ug_dtype_name(half_dtypes[h]));
        if (!th_check_status(TH_LOC, "ug_loader_create", ug_loader_create(ds, dev, &lc, &loader), UG_OK))
            break;
        if (th_check_status(TH_LOC, "ug_loader_start_epoch", ug_loader_start_epoch(loader, 0), UG_OK) &&
            th_check_status(TH_LOC, "ug_loader_next", ug_loader_next(loader, &batch, &done), UG_OK)) {
            CHECK(!done && ug_tensor_dtype(batch.x) == half_dtypes[h]);
            const uint16_t *got = th_download_raw(batch.x);
            for (int r = 0; got && r < COUNT; r++) {
                const float *row = xs + batch.sample_ids[r] * FEATURES;
                for (int f = 0; f < FEATURES; f++) {
                    uint16_t want = half_dtypes[h] == UG_F16 ? ug_f32_to_f16(row[f])
                                                             : ug_f32_to_bf16(row[f]);
                    CHECK_MSG(got[r * FEATURES + f] == want, "row %d feature %d: %#x, want %#x", r,
                              f, got[r * FEATURES + f], want);
                }
            }
        }
        ug_loader_free(loader);
    }
    {
        ug_loader_config lc = ug_loader_default_config();
        lc.x_dtype = UG_I32;
        ug_loader *loader = NULL;
        th_context("%s", "i32");
        CHECK_STATUS(ug_loader_create(ds, dev, &lc, &loader), UG_ERR_DTYPE);
        CHECK_ERROR_HAS("x_dtype");
    }
    th_context("%s", "");
    ug_dataset_free(ds);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(activation_memory_halves),
        TH_DEVICE_TEST(autocast_dtypes),
        TH_DEVICE_TEST(gradients_match_f32),
        TH_DEVICE_TEST(training_matches_f32),
        TH_DEVICE_TEST(one_half_dtype_per_model),
        TH_DEVICE_TEST(loader_half_batches),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
