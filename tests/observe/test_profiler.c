/* The profiler: what it records of eager ops, transfers, waits and a
 * training graph's nodes (names, families, FLOPs and bytes worked out by
 * hand from the shapes), ranges around device work, the summary's sums,
 * the trace file, and its refusals. The trace's format is checked by an
 * independent reader (tests/observe/check_trace.py). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_support.h"

/* CHECK as an expression: whether cond held. */
#define EXPECT(cond) ((cond) ? true : (th_fail(TH_LOC, "%s", #cond), false))

/* The summary row of name on any device, or false. */
static bool find_op(const ug_profiler *p, const char *name, ug_profile_op *out)
{
    for (int i = 0; i < ug_profiler_op_count(p); i++) {
        ug_profile_op op;
        if (ug_profiler_op_at(p, UG_PROFILE_BY_DEVICE_TIME, i, &op) == UG_OK && strcmp(op.name, name) == 0) {
            *out = op;
            return true;
        }
    }
    return false;
}

static void test_eager_ops(ug_device *dev)
{
    enum { M = 8, K = 16, N = 4 };
    float host[M * K];
    for (int i = 0; i < M * K; i++)
        host[i] = (float)(i % 7) * 0.25f;
    ug_tensor *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){M, K}, &a));
    th_track(a);
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){K, N}, &b));
    th_track(b);
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    CHECK_OK(ug_tensor_upload(a, host, sizeof host));
    CHECK_OK(ug_tensor_upload(b, host, K * N * sizeof(float)));
    CHECK_OK(ug_profiler_range_push(dev, "product"));
    CHECK_OK(ug_matmul(a, b, false, false, &c));
    th_track(c);
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_OK(ug_device_synchronize(dev));
    REQUIRE_OK(ug_profiler_stop(p));

    ug_profile_op op;
    if (EXPECT(find_op(p, "matmul", &op))) {
        CHECK(strcmp(op.family, "gemm") == 0);
        CHECK(strcmp(op.device, ug_device_name(dev)) == 0);
        CHECK_EQ_I64(op.calls, 1);
        CHECK_MSG(op.flops == 2.0 * M * N * K, "matmul flops %.0f, expected %d", op.flops, 2 * M * N * K);
        CHECK_MSG(op.bytes == 4.0 * (M * K + K * N + M * N), "matmul bytes %.0f", op.bytes);
        CHECK(op.device_ns > 0 && op.host_ns > 0);
    }
    if (EXPECT(find_op(p, "upload", &op))) {
        CHECK(strcmp(op.family, "transfer") == 0);
        CHECK_EQ_I64(op.calls, 2);
        CHECK_MSG(op.bytes == (double)(sizeof host + K * N * sizeof(float)), "upload bytes %.0f", op.bytes);
    }
    ug_profile_op range, product;
    if (EXPECT(find_op(p, "product", &range)) && find_op(p, "matmul", &product)) {
        CHECK(strcmp(range.family, "range") == 0);
        CHECK_MSG(range.device_ns >= product.device_ns, "the range took %lld ns on the device, its matmul %lld",
                  (long long)range.device_ns, (long long)product.device_ns);
    }
    CHECK(find_op(p, "ug_device_synchronize", &op) == false); /* waits are in the trace, not the rows */
    /* Ranges come after the ops in every order. */
    int n = ug_profiler_op_count(p);
    REQUIRE(n >= 3);
    CHECK_OK(ug_profiler_op_at(p, UG_PROFILE_BY_CALLS, n - 1, &op));
    CHECK(strcmp(op.family, "range") == 0);
    CHECK_OK(ug_profiler_op_at(p, UG_PROFILE_BY_CALLS, 0, &op));
    CHECK(strcmp(op.name, "upload") == 0);
    CHECK_STATUS(ug_profiler_op_at(p, UG_PROFILE_BY_CALLS, n, &op), UG_ERR_INVALID_ARGUMENT);
    ug_profiler_free(p);
}

/* A two-layer MLP step: nodes are named by their layer and phase. */
TS_TEST(graph_names)
{
    ug_model *model = ts_model(dev, 3);
    ug_graph *g = ts_graph(model);
    REQUIRE(g);
    ug_value *x = NULL, *labels = NULL, *h = NULL, *r = NULL, *logits = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){4, 6}, &x));
    REQUIRE_OK(ug_graph_input(g, "labels", UG_I32, 1, (int64_t[]){4}, &labels));
    REQUIRE_OK(ug_nn_linear(g, "fc1", x, 5, &h));
    REQUIRE_OK(ug_g_relu(g, h, &r));
    REQUIRE_OK(ug_nn_linear(g, "fc2", r, 3, &logits));
    REQUIRE_OK(ug_g_cross_entropy(g, logits, labels, 0.0f, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ts_compile(g, model, true, 0.01f));
    float xs[24];
    for (int i = 0; i < 24; i++)
        xs[i] = (float)(i % 5) - 2.0f;
    ug_tensor *xt = ts_tensor_f32(dev, 2, (int64_t[]){4, 6}, xs);
    ug_tensor *lt = ts_tensor_i32(dev, 4, (int32_t[]){0, 1, 2, 1});
    REQUIRE(xt && lt);
    REQUIRE_OK(ug_graph_bind(g, x, xt));
    REQUIRE_OK(ug_graph_bind(g, labels, lt));
    REQUIRE_OK(ug_graph_run(g)); /* warm-up: kernels built, nothing recorded */

    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(NULL, &p));
    for (int step = 0; step < 3; step++) {
        CHECK_OK(ug_profiler_range_push(dev, "step"));
        CHECK_OK(ug_graph_run(g));
        CHECK_OK(ug_profiler_range_pop(dev));
    }
    REQUIRE_OK(ug_profiler_stop(p));
    ug_profile_op op;
    /* fc1's forward product: [4, 6] x [6, 5]ᵀ... as x wᵀ, m 4, n 5, k 6,
     * adding the bias and applying the ReLU as it stores C. */
    if (EXPECT(find_op(p, "fc1/matmul+add+relu", &op))) {
        CHECK_EQ_I64(op.calls, 3);
        CHECK_MSG(op.flops == 3 * 2.0 * 4 * 5 * 6, "fc1/matmul flops %.0f", op.flops);
    }
    CHECK(find_op(p, "fc2/backward/matmul", &op));
    if (EXPECT(find_op(p, "update/adam (4)", &op))) /* every parameter in one launch a step */
        CHECK_EQ_I64(op.calls, 3);
    CHECK(find_op(p, "fc2/backward/matmul+relu_grad", &op)); /* fc1's ReLU gradient on fc2's product */
    if (EXPECT(find_op(p, "step", &op))) {
        CHECK_EQ_I64(op.calls, 3);
        /* Every launch of the steps lies inside them on the device. */
        int64_t inside = 0;
        for (int i = 0; i < ug_profiler_op_count(p); i++) {
            ug_profile_op k;
            if (ug_profiler_op_at(p, UG_PROFILE_BY_DEVICE_TIME, i, &k) == UG_OK &&
                strcmp(k.family, "range") != 0)
                inside += k.device_ns;
        }
        CHECK_MSG(inside > 0 && inside <= op.device_ns, "kernels took %lld ns, the steps %lld",
                  (long long)inside, (long long)op.device_ns);
    }
    char dir[] = "/tmp/ug-profiler-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    if (CHECK_STATUS(ug_profiler_write_trace(p, path), UG_OK)) {
        FILE *f = fopen(path, "r");
        char head[32] = "";
        if (EXPECT(f)) {
            CHECK(fgets(head, sizeof head, f) && head[0] == '{');
            fclose(f);
        }
        remove(path);
    }
    CHECK_STATUS(ug_profiler_write_trace(p, dir), UG_ERR_IO); /* a folder: refused, nothing changes */
    rmdir(dir);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        CHECK_OK(ug_profiler_print_table(p, UG_PROFILE_BY_HOST_TIME, 5, null));
        fclose(null);
    }
    ug_profiler_free(p);
}

/* A profiler started from another thread between a push and its pop (as
 * while ug_trainer_fit runs a step): the pop succeeds, nothing of the
 * range is recorded, and the next range is. */
static void *start_profiler(void *out) { return ug_profiler_start(NULL, out) == UG_OK ? out : NULL; }

static void test_start_mid_range(ug_device *dev)
{
    ug_profiler *p = NULL;
    CHECK_OK(ug_profiler_range_push(dev, "outer"));
    CHECK_OK(ug_profiler_range_push(dev, "inner"));
    pthread_t thread;
    void *started = NULL;
    REQUIRE(pthread_create(&thread, NULL, start_profiler, &p) == 0);
    REQUIRE(pthread_join(thread, &started) == 0);
    REQUIRE(started && p);
    CHECK_OK(ug_profiler_range_push(dev, "recorded"));
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_STATUS(ug_profiler_range_pop(dev), UG_ERR_STATE);
    CHECK_OK(ug_profiler_stop(p));
    ug_profile_op op;
    CHECK(find_op(p, "recorded", &op));
    CHECK(!find_op(p, "outer", &op) && !find_op(p, "inner", &op));
    ug_profiler_free(p);
    /* Pushed while one ran, popped after it stopped: no error either. */
    REQUIRE_OK(ug_profiler_start(dev, &p));
    CHECK_OK(ug_profiler_range_push(dev, "across the stop"));
    CHECK_OK(ug_profiler_stop(p));
    CHECK_OK(ug_profiler_range_pop(dev));
    ug_profiler_free(p);
}

/* A name longer than a record keeps whole characters: cut before a
 * UTF-8 sequence, never inside it (a trace must stay valid UTF-8). */
static void test_long_name_whole_characters(ug_device *dev)
{
    char name[301] = "xy"; /* then 2-byte characters: any cut at an odd length splits one */
    for (int i = 2; i < 298; i += 2)
        memcpy(name + i, "\xc3\xa9", 2); /* é */
    name[298] = '\0';
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    CHECK_OK(ug_profiler_range_push(dev, name));
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_OK(ug_profiler_stop(p));
    ug_profile_op op = {0};
    bool found = false;
    for (int i = 0; i < ug_profiler_op_count(p); i++)
        if (ug_profiler_op_at(p, UG_PROFILE_BY_CALLS, i, &op) == UG_OK && op.name[0] == 'x')
            found = true;
    CHECK(found);
    if (found) {
        const size_t len = strlen(op.name);
        CHECK_MSG(len > 100 && len % 2 == 0 && !strncmp(op.name, name, len), "the name kept is %zu bytes", len);
    }
    ug_profiler_free(p);
}

static void test_refusals(ug_device *dev)
{
    ug_profiler *p = NULL, *q = NULL;
    /* Without a profiler, ranges do nothing. */
    CHECK_OK(ug_profiler_range_push(dev, "nothing"));
    CHECK_OK(ug_profiler_range_pop(dev));
    CHECK_STATUS(ug_profiler_start(dev, NULL), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_profiler_start(dev, &p));
    if (CHECK_STATUS(ug_profiler_start(NULL, &q), UG_ERR_STATE))
        CHECK_ERROR_HAS("another profiler is running");
    CHECK(q == NULL);
    CHECK_STATUS(ug_profiler_range_pop(dev), UG_ERR_STATE);
    CHECK_STATUS(ug_profiler_range_push(dev, NULL), UG_ERR_INVALID_ARGUMENT);
    CHECK_OK(ug_profiler_range_push(dev, "open"));
    CHECK_STATUS(ug_profiler_range_pop(NULL), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_profiler_write_trace(p, "/tmp/never.json"), UG_ERR_STATE))
        CHECK_ERROR_HAS("stop the profiler first");
    ug_profile_op op;
    CHECK_STATUS(ug_profiler_op_at(p, UG_PROFILE_BY_CALLS, 0, &op), UG_ERR_STATE);
    CHECK_OK(ug_profiler_stop(p));
    CHECK_OK(ug_profiler_stop(p)); /* again: nothing to do */
    CHECK(find_op(p, "open", &op)); /* a range left open ends at stop */
    CHECK_STATUS(ug_profiler_op_at(p, (ug_profile_order)7, 0, &op), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_profiler_print_table(p, UG_PROFILE_BY_CALLS, 0, NULL), UG_ERR_INVALID_ARGUMENT);
    /* Another profiler may start now; the old one's range is not its own:
     * its pop records nothing, and one pop more is unbalanced. */
    REQUIRE_OK(ug_profiler_start(dev, &q));
    CHECK_OK(ug_profiler_range_pop(dev));
    if (CHECK_STATUS(ug_profiler_range_pop(dev), UG_ERR_STATE))
        CHECK_ERROR_HAS("no range is open on this thread");
    CHECK_OK(ug_profiler_stop(q));
    CHECK_EQ_I64(ug_profiler_op_count(q), 0);
    ug_profiler_free(q);
    ug_profiler_free(p);
    ug_profiler_free(NULL);
}

/* Launches from several threads at once are each recorded, on a track of
 * their own thread (tested under ThreadSanitizer in CI). */
enum { WORKERS = 3, LAUNCHES = 40 };

typedef struct worker {
    ug_tensor *x;
    int failures;
} worker;

static void *launch_from_thread(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < LAUNCHES; i++) {
        ug_tensor *y = NULL;
        if (ug_relu(w->x, &y) != UG_OK)
            w->failures++;
        ug_tensor_free(y);
    }
    return NULL;
}

static void test_threads(ug_device *dev)
{
    worker w[WORKERS] = {{0}};
    for (int i = 0; i < WORKERS; i++) {
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, (int64_t[]){1000}, &w[i].x));
        th_track(w[i].x);
        REQUIRE_OK(ug_fill(w[i].x, 1.0f));
    }
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    pthread_t threads[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        REQUIRE(pthread_create(&threads[i], NULL, launch_from_thread, &w[i]) == 0);
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ_I64(w[i].failures, 0);
    }
    CHECK_OK(ug_device_synchronize(dev));
    REQUIRE_OK(ug_profiler_stop(p));
    ug_profile_op op;
    if (EXPECT(find_op(p, "relu", &op))) {
        CHECK_EQ_I64(op.calls, WORKERS * LAUNCHES);
        CHECK_MSG(op.bytes == WORKERS * LAUNCHES * 8000.0, "relu bytes %.0f", op.bytes);
    }
    ug_profiler_free(p);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(eager_ops),
        TH_DEVICE_TEST(graph_names),
        TH_DEVICE_TEST(start_mid_range),
        TH_DEVICE_TEST(long_name_whole_characters),
        TH_DEVICE_TEST(refusals),
        TH_DEVICE_TEST(threads),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
