/* Moving a model: train 5 steps on the CPU, copy the model and its Adam
 * state to the device under test, train 5 more there; the parameters match
 * 10 steps on the CPU (bitwise when the copy stays on the CPU, within f32
 * rounding on another device). */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { ROWS = 32, FEATURES = 12, CLASSES = 4 };

typedef struct net {
    ug_graph *g;
    ug_value *x, *y;
} net;

static bool build(ug_model *m, ug_optimizer *opt, net *n)
{
    n->g = ts_graph(m);
    if (!n->g)
        return false;
    int64_t xs[2] = {ROWS, FEATURES}, ys = ROWS;
    ug_value *h = NULL, *logits = NULL, *loss = NULL;
    ug_status st = ug_graph_input(n->g, "x", UG_F32, 2, xs, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "y", UG_I32, 1, &ys, &n->y);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc1", n->x, 16, &h);
    if (st == UG_OK) st = ug_g_relu(n->g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc2", h, CLASSES, &logits);
    if (st == UG_OK) st = ug_g_cross_entropy(n->g, logits, n->y, 0.0f, &loss);
    if (st == UG_OK) st = ug_graph_backward(n->g, loss);
    if (st == UG_OK && opt) st = ug_graph_set_optimizer(n->g, opt);
    if (st == UG_OK && opt) st = ug_graph_compile(n->g);
    if (st != UG_OK)
        th_fail(TH_LOC, "building: %s", ug_last_error());
    return st == UG_OK;
}

static bool train(ug_device *dev, net *n, int first, int steps)
{
    float x[ROWS * FEATURES];
    int32_t y[ROWS];
    int64_t xs[2] = {ROWS, FEATURES};
    for (int s = first; s < first + steps; s++) {
        for (int i = 0; i < ROWS * FEATURES; i++)
            x[i] = cosf((float)(i * 5 + s * 11));
        for (int i = 0; i < ROWS; i++)
            y[i] = (i + s) % CLASSES;
        ug_tensor *xt = ts_tensor_f32(dev, 2, xs, x), *yt = ts_tensor_i32(dev, ROWS, y);
        if (!xt || !yt || ug_graph_bind(n->g, n->x, xt) || ug_graph_bind(n->g, n->y, yt) ||
            ug_graph_run(n->g)) {
            th_fail(TH_LOC, "step %d: %s", s, ug_last_error());
            return false;
        }
        th_release(xt);
        th_release(yt);
    }
    return true;
}

/* A model on the CPU trained for steps with Adam (tracked). */
static ug_model *trained_on_cpu(ug_device *cpu, const ug_optimizer_config *oc, int steps,
                                ug_optimizer **opt)
{
    ug_model *m = ts_model(cpu, 21);
    net n = {0};
    if (!m || !build(m, NULL, &n) || !(*opt = ts_optimizer(m, oc)))
        return NULL;
    if (ug_graph_set_optimizer(n.g, *opt) != UG_OK || ug_graph_compile(n.g) != UG_OK) {
        th_fail(TH_LOC, "compiling: %s", ug_last_error());
        return NULL;
    }
    return train(cpu, &n, 0, steps) ? m : NULL;
}

TS_TEST(model_moves_between_devices)
{
    ug_device *cpu = th_device(0);
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 1e-2f;
    ug_optimizer *ref_opt = NULL, *src_opt = NULL;
    ug_model *ref = trained_on_cpu(cpu, &oc, 10, &ref_opt);
    /* 5 steps on the CPU, then 5 on dev. */
    ug_model *src = trained_on_cpu(cpu, &oc, 5, &src_opt);
    REQUIRE(ref && src);
    ug_model *moved = NULL;
    REQUIRE_OK(ug_model_copy(src, dev, &moved));
    ug_optimizer *moved_opt = NULL;
    ug_status st = ug_optimizer_copy(src_opt, moved, &moved_opt);
    net b = {0};
    bool ok = st == UG_OK && build(moved, moved_opt, &b);
    CHECK_OK(st);
    if (ok && ug_optimizer_steps(moved_opt) != 5)
        th_fail(TH_LOC, "the copied optimizer is at step %lld", (long long)ug_optimizer_steps(moved_opt));
    ok = ok && train(dev, &b, 5, 5);
    int64_t nr = 0, nm = 0;
    float *pr = ok ? ts_model_params(ref, &nr) : NULL, *pm = ok ? ts_model_params(moved, &nm) : NULL;
    ug_optimizer_free(moved_opt);
    ug_model_free(moved); /* the graph on it keeps it until the test's cleanup */
    REQUIRE(pr && pm && nr == nm);
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < nr; i++) {
        diff = fmax(diff, fabs((double)pr[i] - pm[i]));
        scale = fmax(scale, fabs((double)pr[i]));
    }
    if (dev == cpu)
        th_compare_bits("parameters after moving within the CPU", pm, pr, nr, sizeof(float));
    else
        CHECK_MSG(diff <= 1e-5 * scale, "parameters differ by %.3g (largest %.3g)", diff, scale);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(model_moves_between_devices),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
