/* Any batch up to the planned size: a graph compiled for 64 rows runs
 * batches of 1, 17 and 64 and gives what a graph compiled for exactly that
 * many rows gives (loss, gradients, kept values); means divide by the rows
 * bound; eval mode follows the graph from run to run; running sums weight
 * by rows; micro-batches of different rows accumulate like one batch; and
 * nothing is allocated when the rows change. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { PLANNED = 64, FEATURES = 12, HIDDEN = 16, CLASSES = 5 };

typedef struct net {
    ug_model *m;
    ug_graph *g;
    ug_value *x, *y, *loss, *logits, *w1, *w2, *correct;
} net;

/* images [rows, 3, 4] reshaped to [rows, 12], a tanh layer, dropout p, a
 * linear layer, cross-entropy plus 0.1 * mean(h^2), and the count of
 * correct predictions. */
static bool build(ug_device *dev, ug_model *m, int64_t rows, float dropout, bool optimizer, net *n)
{
    memset(n, 0, sizeof *n);
    n->m = m;
    n->g = ts_graph(m);
    if (!n->g)
        return false;
    int64_t xs[3] = {rows, 3, 4};
    ug_value *flat = NULL, *h = NULL, *sq = NULL, *penalty = NULL, *pred = NULL, *predf = NULL, *yf = NULL,
             *hits = NULL;
    ug_status st = ug_graph_input(n->g, "x", UG_F32, 3, xs, &n->x);
    if (st == UG_OK) st = ug_graph_input(n->g, "y", UG_I32, 1, &rows, &n->y);
    if (st == UG_OK) st = ug_g_reshape(n->g, n->x, 2, (int64_t[]){rows, FEATURES}, &flat);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc1", flat, HIDDEN, &h);
    if (st == UG_OK) st = ug_g_tanh(n->g, h, &h);
    if (st == UG_OK) st = ug_g_dropout(n->g, h, dropout, &h);
    if (st == UG_OK) st = ug_nn_linear(n->g, "fc2", h, CLASSES, &n->logits);
    if (st == UG_OK) st = ug_g_cross_entropy(n->g, n->logits, n->y, 0.0f, &n->loss);
    if (st == UG_OK) st = ug_g_mul(n->g, h, h, &sq);
    if (st == UG_OK) st = ug_g_mean(n->g, sq, 0, true, &penalty);
    if (st == UG_OK) st = ug_g_scale_shift(n->g, penalty, 0.1f, 0.0f, &penalty);
    if (st == UG_OK) st = ug_g_add(n->g, n->loss, penalty, &n->loss);
    if (st == UG_OK) st = ug_g_argmax(n->g, n->logits, -1, &pred);
    if (st == UG_OK) st = ug_g_cast(n->g, pred, UG_F32, &predf);
    if (st == UG_OK) st = ug_g_cast(n->g, n->y, UG_F32, &yf);
    if (st == UG_OK) st = ug_g_equal(n->g, predf, yf, &hits);
    if (st == UG_OK) st = ug_g_sum(n->g, hits, 0, true, &n->correct);
    if (st == UG_OK) st = ug_graph_keep(n->g, n->correct);
    if (st == UG_OK) st = ug_graph_keep(n->g, n->logits);
    if (st == UG_OK) st = ug_graph_backward(n->g, n->loss);
    ug_tensor *w1 = NULL, *w2 = NULL;
    if (st == UG_OK) st = ug_model_find_param(m, "fc1.weight", &w1);
    if (st == UG_OK) st = ug_model_find_param(m, "fc2.weight", &w2);
    if (st == UG_OK) st = ug_graph_param(n->g, w1, &n->w1);
    if (st == UG_OK) st = ug_graph_param(n->g, w2, &n->w2);
    if (st == UG_OK) st = ts_compile(n->g, m, optimizer, 1e-2f);
    if (st != UG_OK)
        th_fail(TH_LOC, "building for %lld rows: %s", (long long)rows, ug_last_error());
    (void)dev;
    return st == UG_OK;
}

typedef struct batch {
    ug_tensor *x, *y;
    float xs[PLANNED * FEATURES];
    int32_t ys[PLANNED];
} batch;

static bool make_batch(ug_device *dev, int64_t rows, int seed, batch *b)
{
    for (int64_t i = 0; i < rows * FEATURES; i++)
        b->xs[i] = sinf((float)(i * 5 + seed * 11)) * 1.5f;
    for (int64_t i = 0; i < rows; i++)
        b->ys[i] = (int32_t)((i * 7 + seed) % CLASSES);
    b->x = ts_tensor_f32(dev, 3, (int64_t[]){rows, 3, 4}, b->xs);
    b->y = ts_tensor_i32(dev, rows, b->ys);
    return b->x && b->y;
}

static bool bind(net *n, const batch *b)
{
    return ug_graph_bind(n->g, n->x, b->x) == UG_OK && ug_graph_bind(n->g, n->y, b->y) == UG_OK;
}

static void expect_same(ug_graph *ga, ug_value *va, ug_graph *gb, ug_value *vb, const char *what, int64_t rows)
{
    float *a = ts_read(ga, va), *b = ts_read(gb, vb);
    if (!a || !b)
        return;
    int64_t count = ts_value_numel(vb);
    double rel = ts_max_rel(a, b, count);
    CHECK_MSG(rel <= 1e-6, "%s with %lld rows differs by %.3g relative from a graph planned for them",
              what, (long long)rows, rel);
}

/* One planned graph against exact-size graphs of the same model. */
TS_TEST(partial_batches_match_exact_graphs)
{
    ug_model *m = ts_model(dev, 5);
    net planned;
    REQUIRE(m && build(dev, m, PLANNED, 0.0f, false, &planned));
    static const int64_t sizes[] = {17, 1, 64, 17};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int64_t rows = sizes[s];
        th_context("%lld rows", (long long)rows);
        net exact;
        batch b;
        REQUIRE(build(dev, m, rows, 0.0f, false, &exact) && make_batch(dev, rows, (int)s, &b));
        REQUIRE(bind(&planned, &b) && bind(&exact, &b));
        REQUIRE_OK(ug_graph_run_backward(planned.g));
        REQUIRE_OK(ug_graph_run_update(planned.g)); /* no optimizer: the gradients stay */
        REQUIRE_OK(ug_graph_run_backward(exact.g));
        REQUIRE_OK(ug_graph_run_update(exact.g));
        expect_same(planned.g, planned.loss, exact.g, exact.loss, "the loss", rows);
        expect_same(planned.g, planned.logits, exact.g, exact.logits, "the logits", rows);
        expect_same(planned.g, planned.correct, exact.g, exact.correct, "the correct count", rows);
        ug_value *ga = NULL, *gb = NULL;
        REQUIRE_OK(ug_graph_grad(planned.g, planned.w1, &ga));
        REQUIRE_OK(ug_graph_grad(exact.g, exact.w1, &gb));
        expect_same(planned.g, ga, exact.g, gb, "fc1's weight gradient", rows);
        REQUIRE_OK(ug_graph_grad(planned.g, planned.w2, &ga));
        REQUIRE_OK(ug_graph_grad(exact.g, exact.w2, &gb));
        expect_same(planned.g, ga, exact.g, gb, "fc2's weight gradient", rows);
        /* A kept value reads back with the rows bound, not the planned ones. */
        float logits[PLANNED * CLASSES];
        CHECK_OK(ug_graph_read(planned.g, planned.logits, logits, (size_t)(rows * CLASSES) * sizeof(float)));
        if (rows < PLANNED)
            CHECK_STATUS(ug_graph_read(planned.g, planned.logits, logits, sizeof logits), UG_ERR_INVALID_ARGUMENT);
        ts_free_graph(exact.g);
    }
}

/* Means divide by the rows bound: mean over all of x [rows, 3] against the
 * host's, and the correct count against the host's count. */
TS_TEST(means_divide_by_rows_bound)
{
    ug_model *m = ts_model(dev, 1);
    ug_graph *g = ts_graph(m);
    REQUIRE(g);
    ug_value *x = NULL, *mean = NULL, *col = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){PLANNED, 3}, &x));
    REQUIRE_OK(ug_g_mean(g, x, 0, true, &mean));
    REQUIRE_OK(ug_g_mean(g, x, 0, false, &col));
    REQUIRE_OK(ug_graph_keep(g, mean));
    REQUIRE_OK(ug_graph_keep(g, col));
    REQUIRE_OK(ug_graph_compile(g));
    float data[PLANNED * 3];
    for (int i = 0; i < PLANNED * 3; i++)
        data[i] = (float)(i % 7) - 2.5f + (float)i * 0.01f;
    for (int64_t rows = 1; rows <= PLANNED; rows += 21) {
        ug_tensor *t = ts_tensor_f32(dev, 2, (int64_t[]){rows, 3}, data);
        REQUIRE(t);
        REQUIRE_OK(ug_graph_bind(g, x, t));
        REQUIRE_OK(ug_graph_run_forward(g));
        double want = 0, want_col[3] = {0};
        for (int64_t i = 0; i < rows * 3; i++) {
            want += data[i];
            want_col[i % 3] += data[i];
        }
        float got = 0, got_col[3];
        REQUIRE_OK(ug_graph_read(g, mean, &got, sizeof got));
        CHECK(ts_close(got, want / (double)(rows * 3), 1e-6, 1e-6));
        REQUIRE_OK(ug_graph_read(g, col, got_col, sizeof got_col));
        for (int k = 0; k < 3; k++)
            CHECK(ts_close(got_col[k], want_col[k] / (double)rows, 1e-6, 1e-6));
    }
}

/* Micro-batches of 40 and 24 rows accumulate like one batch of 64: the
 * update weights each by its rows. */
TS_TEST(uneven_micro_batches_match_one_batch)
{
    ug_model *ma = ts_model(dev, 9), *mb = ts_model(dev, 9);
    net whole, parts;
    REQUIRE(ma && mb && build(dev, ma, PLANNED, 0.0f, true, &whole) && build(dev, mb, PLANNED, 0.0f, true, &parts));
    for (int step = 0; step < 5; step++) {
        batch b;
        REQUIRE(make_batch(dev, PLANNED, step, &b));
        REQUIRE(bind(&whole, &b));
        REQUIRE_OK(ug_graph_run(whole.g));
        int64_t offset = 0;
        for (int64_t rows = 40; offset < PLANNED; offset += rows, rows = PLANNED - offset) {
            ug_tensor *xs = NULL, *ys = NULL;
            REQUIRE_OK(ug_tensor_slice(b.x, offset, rows, &xs));
            th_track(xs);
            REQUIRE_OK(ug_tensor_slice(b.y, offset, rows, &ys));
            th_track(ys);
            REQUIRE_OK(ug_graph_bind(parts.g, parts.x, xs));
            REQUIRE_OK(ug_graph_bind(parts.g, parts.y, ys));
            REQUIRE_OK(ug_graph_run_backward(parts.g));
        }
        REQUIRE_OK(ug_graph_run_update(parts.g));
    }
    int64_t na = 0, nb = 0;
    float *pa = ts_model_params(ma, &na), *pb = ts_model_params(mb, &nb);
    REQUIRE(pa && pb && na == nb);
    double rel = ts_max_rel(pb, pa, na);
    CHECK_MSG(rel <= 1e-6, "parameters differ by %.3g relative after 5 steps", rel);
}

/* The mode is read at each run: eval mode (dropout off) gives the logits
 * of a graph without dropout; training mode drops units again. */
TS_TEST(eval_mode_between_runs)
{
    ug_model *m = ts_model(dev, 3);
    net with, without;
    REQUIRE(m && build(dev, m, PLANNED, 0.5f, false, &with) && build(dev, m, PLANNED, 0.0f, false, &without));
    batch b;
    REQUIRE(make_batch(dev, 17, 1, &b));
    REQUIRE(bind(&with, &b) && bind(&without, &b));
    REQUIRE_OK(ug_graph_run_forward(without.g));
    REQUIRE_OK(ug_graph_set_training(with.g, false));
    REQUIRE_OK(ug_graph_run_forward(with.g));
    expect_same(with.g, with.logits, without.g, without.logits, "eval-mode logits", 17);
    REQUIRE_OK(ug_graph_set_training(with.g, true));
    REQUIRE_OK(ug_graph_run_forward(with.g));
    float *a = ts_read(with.g, with.logits), *c = ts_read(without.g, without.logits);
    REQUIRE(a && c);
    CHECK_MSG(ts_max_rel(a, c, 17 * CLASSES) > 1e-3, "training mode did not drop anything");
}

/* ug_graph_accumulate_rows adds loss x rows for batches of any rows. */
TS_TEST(running_sums_weight_by_rows)
{
    ug_model *m = ts_model(dev, 4);
    net n = {.m = m, .g = m ? ts_graph(m) : NULL};
    REQUIRE(n.g);
    int64_t xs[3] = {PLANNED, 3, 4}, ys = PLANNED;
    ug_value *flat = NULL, *h = NULL, *loss_sum = NULL, *count = NULL;
    REQUIRE_OK(ug_graph_input(n.g, "x", UG_F32, 3, xs, &n.x));
    REQUIRE_OK(ug_graph_input(n.g, "y", UG_I32, 1, &ys, &n.y));
    REQUIRE_OK(ug_g_reshape(n.g, n.x, 2, (int64_t[]){PLANNED, FEATURES}, &flat));
    REQUIRE_OK(ug_nn_linear(n.g, "fc1", flat, HIDDEN, &h));
    REQUIRE_OK(ug_nn_linear(n.g, "fc2", h, CLASSES, &n.logits));
    REQUIRE_OK(ug_g_cross_entropy(n.g, n.logits, n.y, 0.0f, &n.loss));
    REQUIRE_OK(ug_graph_keep(n.g, n.loss));
    REQUIRE_OK(ug_graph_accumulate_rows(n.g, n.loss, &loss_sum));
    REQUIRE_OK(ug_graph_accumulate(n.g, n.loss, 1.0f, &count)); /* plain: once per run */
    REQUIRE_OK(ug_graph_compile(n.g));
    double want = 0, want_plain = 0;
    static const int64_t sizes[] = {64, 17, 1, 30};
    for (int s = 0; s < 4; s++) {
        batch b;
        REQUIRE(make_batch(dev, sizes[s], s, &b));
        REQUIRE(bind(&n, &b));
        REQUIRE_OK(ug_graph_run_forward(n.g));
        float loss = 0;
        REQUIRE_OK(ug_graph_read(n.g, n.loss, &loss, sizeof loss));
        want += (double)sizes[s] * loss;
        want_plain += loss;
    }
    float got = 0, got_plain = 0;
    REQUIRE_OK(ug_graph_read(n.g, loss_sum, &got, sizeof got));
    REQUIRE_OK(ug_graph_read(n.g, count, &got_plain, sizeof got_plain));
    CHECK_MSG(ts_close(got, want, 1e-5, 0), "sum %.7g, expected %.7g", (double)got, want);
    CHECK_MSG(ts_close(got_plain, want_plain, 1e-5, 0), "sum %.7g, expected %.7g", (double)got_plain, want_plain);
}

TS_TEST(rows_refused_and_no_allocation)
{
    ug_model *m = ts_model(dev, 2);
    net n;
    REQUIRE(m && build(dev, m, PLANNED, 0.25f, true, &n));
    float zeros[(PLANNED + 1) * FEATURES] = {0};
    ug_tensor *too_many = ts_tensor_f32(dev, 3, (int64_t[]){PLANNED + 1, 3, 4}, zeros);
    ug_tensor *empty = ts_tensor_f32(dev, 3, (int64_t[]){0, 3, 4}, zeros);
    ug_tensor *wide = ts_tensor_f32(dev, 3, (int64_t[]){8, 4, 3}, zeros);
    REQUIRE(too_many && empty && wide);
    if (CHECK_STATUS(ug_graph_bind(n.g, n.x, too_many), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("'x'", "[65,3,4]", "fewer rows");
    CHECK_STATUS(ug_graph_bind(n.g, n.x, empty), UG_ERR_SHAPE);
    CHECK_STATUS(ug_graph_bind(n.g, n.x, wide), UG_ERR_SHAPE);
    /* Inputs bound with different rows: the run names the op that cannot agree. */
    batch b17, b20;
    REQUIRE(make_batch(dev, 17, 0, &b17) && make_batch(dev, 20, 0, &b20));
    REQUIRE_OK(ug_graph_bind(n.g, n.x, b17.x));
    REQUIRE_OK(ug_graph_bind(n.g, n.y, b20.y));
    if (CHECK_STATUS(ug_graph_run(n.g), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("ug_graph_run", "17 rows");
    /* Alternating full and partial batches allocates nothing after the first of each. */
    batch full;
    REQUIRE(make_batch(dev, PLANNED, 1, &full));
    REQUIRE(bind(&n, &full));
    REQUIRE_OK(ug_graph_run(n.g));
    REQUIRE(bind(&n, &b17));
    REQUIRE_OK(ug_graph_run(n.g));
    REQUIRE_OK(ug_graph_run_backward(n.g)); /* the first takes the accumulators */
    REQUIRE_OK(ug_graph_run_update(n.g));
    ug_memory_stats before = th_stats(dev);
    for (int i = 0; i < 4; i++) {
        REQUIRE(bind(&n, i % 2 ? &full : &b17));
        CHECK_OK(ug_graph_run(n.g));
        CHECK_OK(ug_graph_run_backward(n.g));
        CHECK_OK(ug_graph_run_update(n.g));
        CHECK_OK(ug_graph_set_training(n.g, false));
        CHECK_OK(ug_graph_run_forward(n.g));
        CHECK_OK(ug_graph_set_training(n.g, true));
    }
    ug_memory_stats after = th_stats(dev);
    CHECK_EQ_I64(after.allocations, before.allocations);
    CHECK_EQ_I64(after.cache_hits, before.cache_hits);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(partial_batches_match_exact_graphs),
        TH_DEVICE_TEST(means_divide_by_rows_bound),
        TH_DEVICE_TEST(uneven_micro_batches_match_one_batch),
        TH_DEVICE_TEST(eval_mode_between_runs),
        TH_DEVICE_TEST(running_sums_weight_by_rows),
        TH_DEVICE_TEST(rows_refused_and_no_allocation),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
