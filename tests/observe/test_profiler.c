/* The profiler: what it records of eager ops, transfers, waits and a
 * training graph's nodes (names, families, FLOPs and bytes worked out by
 * hand from the shapes), ranges around device work, the summary's sums,
 * the trace file, and its refusals. The trace's format is checked by an
 * independent reader (tests/observe/check_trace.py). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, nanosleep */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
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

/* ---- the trace, read back ---- */

/* One event of a trace written by the profiler, which puts each on a line
 * of its own: the fields these tests compare. */
typedef struct trace_event {
    char ph, cat[16], name[64];
    int pid, tid;
    double ts, dur, queued, in_use; /* -1: absent */
} trace_event;

static void string_field(const char *line, const char *key, char *out, size_t len)
{
    const char *at = strstr(line, key);
    out[0] = '\0';
    if (at) {
        at += strlen(key);
        size_t n = strcspn(at, "\"");
        snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), at);
    }
}

static double number_field(const char *line, const char *key)
{
    const char *at = strstr(line, key);
    return at ? strtod(at + strlen(key), NULL) : -1.0;
}

/* The trace's events (at most max), or -1 when it cannot be read. */
static int read_trace(const char *path, trace_event *events, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"ph\":\""))
            continue;
        trace_event *e = &events[n++];
        char ph[4];
        string_field(line, "\"ph\":\"", ph, sizeof ph);
        e->ph = ph[0];
        string_field(line, "\"cat\":\"", e->cat, sizeof e->cat);
        string_field(line, "\"name\":\"", e->name, sizeof e->name);
        e->pid = (int)number_field(line, "\"pid\":");
        e->tid = (int)number_field(line, "\"tid\":");
        e->ts = number_field(line, "\"ts\":");
        e->dur = number_field(line, "\"dur\":");
        e->queued = number_field(line, "\"queued\":");
        e->in_use = number_field(line, "\"in use\":");
    }
    fclose(f);
    return n;
}

/* Writes p's trace into a temporary file and reads it back. */
static int trace_of(const ug_profiler *p, trace_event *events, int max)
{
    char dir[] = "/tmp/ug-profiler-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    char path[64];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    int n = ug_profiler_write_trace(p, path) == UG_OK ? read_trace(path, events, max) : -1;
    remove(path);
    rmdir(dir);
    return n;
}

enum { EVENTS = 4096, SIDE = 1024 };
static trace_event events[EVENTS];

static const double SLACK_US = 0.002; /* the trace's nanosecond rounding */

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* How many a x a products take about a tenth of a second on dev (1 to 8),
 * from one timed here (which also builds their kernels): enough queued
 * work on POCL, and little where products are slow (the emulated GPU). */
static int products_for_a_tenth(ug_tensor *a)
{
    ug_tensor *c = NULL;
    const double start = seconds_now();
    if (ug_matmul(a, a, false, false, &c) != UG_OK || ug_device_synchronize(ug_tensor_device(a)) != UG_OK) {
        ug_tensor_free(c);
        return 1;
    }
    ug_tensor_free(c);
    const double each = seconds_now() - start;
    return each >= 0.1 ? 1 : each < 0.0125 ? 8 : (int)(0.1 / each) + 1;
}

/* SIDE x SIDE products queued, then an upload behind them on the same
 * stream (a side stream, which on the CPU too is a queue: a thread of its
 * own): the upload's device time is its own span, after the products, and
 * the time it waited for them shows apart, as a wait from its queuing (while
 * the products ran) to its start (after them). */
static void test_transfer_queued_behind_kernels(ug_device *dev)
{
    ug_tensor *a = NULL, *c[8] = {NULL}, *up = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){SIDE, SIDE}, &a));
    th_track(a);
    REQUIRE_OK(ug_fill(a, 0.5f));
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, (int64_t[]){4096}, &up));
    th_track(up);
    float *host = th_alloc(4096 * sizeof(float));
    for (int i = 0; i < 4096; i++)
        host[i] = (float)i;
    const int products = products_for_a_tenth(a);
    ug_stream *side = NULL;
    REQUIRE_OK(ug_stream_create(dev, &side));
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    CHECK_OK(ug_stream_set_current(dev, side));
    for (int i = 0; i < products; i++)
        CHECK_OK(ug_matmul(a, a, false, false, &c[i]));
    CHECK_OK(ug_tensor_upload_async(up, host, 4096 * sizeof(float)));
    CHECK_OK(ug_stream_set_current(dev, NULL));
    CHECK_OK(ug_stream_synchronize(side));
    REQUIRE_OK(ug_profiler_stop(p));
    for (int i = 0; i < products; i++)
        ug_tensor_free(c[i]);
    ug_stream_free(side);

    int n = trace_of(p, events, EVENTS);
    REQUIRE(n > 0);
    const trace_event *transfer = NULL, *wait = NULL, *first = NULL, *last = NULL;
    for (int i = 0; i < n; i++) {
        const trace_event *e = &events[i];
        if (e->ph == 'X' && !strcmp(e->cat, "transfer") && !strcmp(e->name, "upload"))
            transfer = e;
        else if (e->ph == 'X' && !strcmp(e->cat, "queued") && !strcmp(e->name, "upload"))
            wait = e;
        else if (e->ph == 'X' && !strcmp(e->cat, "kernel") && !strcmp(e->name, "matmul")) {
            first = first ? first : e;
            last = e;
        }
    }
    REQUIRE(transfer && first && last);
    CHECK_MSG(transfer->ts >= last->ts + last->dur - SLACK_US, "the upload started at %.3f us, before the "
              "products it was queued behind ended (%.3f)", transfer->ts, last->ts + last->dur);
    /* The table's figure is the span's, which starts after the products:
     * no part of the wait is counted as the upload's time. */
    ug_profile_op upload;
    if (EXPECT(find_op(p, "upload", &upload)))
        CHECK_MSG(fabs((double)upload.device_ns * 1e-3 - transfer->dur) <= 0.002,
                  "the upload took %lld ns on the device in the table, %.3f us in the trace: its wait was "
                  "counted as its time", (long long)upload.device_ns, transfer->dur);
    CHECK(transfer->queued >= 0);
    if (transfer->queued >= last->ts + last->dur) {
        /* The side stream ran the products as they were issued (the
         * emulated GPU does): the upload did not wait for them (a wait of
         * the clocks' placement, after them, may show). */
        CHECK_MSG(!wait || wait->ts >= last->ts + last->dur - SLACK_US, "a wait from %.3f us, before the products "
                  "ended (%.3f), for an upload queued after them", wait->ts, last->ts + last->dur);
    } else if (EXPECT(wait)) { /* from its queuing to its start, on a track of its own */
        CHECK_MSG(wait->ts <= transfer->queued + SLACK_US && wait->ts < first->ts + first->dur,
                  "the wait starts at %.3f us, the upload was queued at %.3f", wait->ts, transfer->queued);
        CHECK_MSG(wait->ts + wait->dur <= transfer->ts + SLACK_US && wait->ts + wait->dur >= transfer->ts - SLACK_US,
                  "the wait ends at %.3f us, the upload starts at %.3f", wait->ts + wait->dur, transfer->ts);
        CHECK(wait->pid == transfer->pid && wait->tid != transfer->tid);
    }
    ug_profiler_free(p);
}

/* Another thread's blocking upload on the default stream, which products
 * of this thread are queued before (it waits for them) and after (while it
 * waits): its span on the device holds none of them. On OpenCL the queue
 * is shared, and the products queued while the upload waited ran before
 * the timing event queued after it. */
typedef struct uploader {
    ug_tensor *tensor;
    const float *host;
    atomic_int started;
    ug_status status;
} uploader;

static void *upload_from_thread(void *arg)
{
    uploader *u = arg;
    atomic_store(&u->started, 1);
    u->status = ug_tensor_upload(u->tensor, u->host, 4096 * sizeof(float));
    return NULL;
}

static void test_transfer_beside_other_threads_kernels(ug_device *dev)
{
    ug_tensor *a = NULL, *up = NULL, *c[10] = {NULL};
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){SIDE, SIDE}, &a));
    th_track(a);
    REQUIRE_OK(ug_fill(a, 0.5f));
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, (int64_t[]){4096}, &up));
    th_track(up);
    float *host = th_alloc(4096 * sizeof(float));
    for (int i = 0; i < 4096; i++)
        host[i] = (float)i;
    /* A tenth of a second of products before the upload, so that it still
     * waits when this thread queues the next ones (after 20 ms). */
    const int before = products_for_a_tenth(a);
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    for (int i = 0; i < before; i++)
        CHECK_OK(ug_matmul(a, a, false, false, &c[i]));
    uploader u = {.tensor = up, .host = host};
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, upload_from_thread, &u) == 0);
    while (!atomic_load(&u.started))
        sched_yield();
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL); /* the upload queued, waiting */
    CHECK_OK(ug_matmul(a, a, false, false, &c[before])); /* while it waits */
    CHECK_OK(ug_matmul(a, a, false, false, &c[before + 1]));
    pthread_join(thread, NULL);
    CHECK_OK(u.status);
    CHECK_OK(ug_device_synchronize(dev));
    REQUIRE_OK(ug_profiler_stop(p));
    for (int i = 0; i < before + 2; i++)
        ug_tensor_free(c[i]);
    int n = trace_of(p, events, EVENTS);
    REQUIRE(n > 0);
    const trace_event *transfer = NULL;
    for (int i = 0; i < n; i++)
        if (events[i].ph == 'X' && !strcmp(events[i].cat, "transfer") && !strcmp(events[i].name, "upload"))
            transfer = &events[i];
    REQUIRE(transfer);
    for (int i = 0; i < n; i++) {
        const trace_event *k = &events[i];
        if (k->ph == 'X' && !strcmp(k->cat, "kernel") && k->pid == transfer->pid)
            CHECK_MSG(k->ts + SLACK_US < transfer->ts || k->ts + k->dur > transfer->ts + transfer->dur + SLACK_US,
                      "the upload's span %.3f..%.3f us holds the %s at %.3f..%.3f: the time it waited was "
                      "counted as its own", transfer->ts, transfer->ts + transfer->dur, k->name, k->ts,
                      k->ts + k->dur);
    }
    ug_profiler_free(p);
}

/* A name longer than the table's column keeps its start (the layer) and
 * its end (the op), cut in the middle between whole characters, and the
 * columns after it stay in place. */
static void test_long_names_in_table(ug_device *dev)
{
    static const char *const names[] = {
        "encoder.layer11/attention/backward/softmax backward", /* 51 characters */
        "encoder.layer12/attention/backward/softmax backward",
        "d\xc3\xa9" "cod\xc3\xa9ur.couche3/attention/r\xc3\xa9troaction/produit \xc3\xa9tendu", /* 2-byte characters */
    };
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(dev, &p));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK_OK(ug_profiler_range_push(dev, names[i]));
        CHECK_OK(ug_profiler_range_pop(dev));
    }
    REQUIRE_OK(ug_profiler_stop(p));
    FILE *f = tmpfile();
    REQUIRE(f);
    CHECK_OK(ug_profiler_print_table(p, UG_PROFILE_BY_CALLS, 0, f));
    rewind(f);
    char line[512], header[512] = "";
    bool seen[3] = {false};
    while (fgets(line, sizeof line, f)) {
        if (!header[0]) {
            snprintf(header, sizeof header, "%s", line);
            continue;
        }
        /* The calls column ends where the header's does, in characters. */
        const char *calls = strstr(header, "Calls");
        int want = 0, got = 0;
        for (const char *h = header; calls && h < calls + 5; h++)
            want += ((unsigned char)*h & 0xC0) != 0x80;
        const char *one = strstr(line, " 1 ");
        for (const char *l = line; one && l <= one + 1; l++)
            got += ((unsigned char)*l & 0xC0) != 0x80;
        for (int i = 0; i < 3; i++) {
            const char *slash = strchr(names[i], '/'), *op = strrchr(names[i], '/') + 1;
            if (strncmp(line, names[i], (size_t)(slash - names[i])) != 0 || !strstr(line, op))
                continue;
            seen[i] = true;
            CHECK_MSG(strstr(line, "\xe2\x80\xa6") != NULL, "no ellipsis where %s was cut: %s", names[i], line);
            CHECK_MSG(one && got == want, "the calls column ends at character %d, the header's at %d: %s", got,
                      want, line);
        }
        /* Whole characters: no lead byte without its continuations. */
        for (const unsigned char *u = (const unsigned char *)line; *u; u++) {
            int more = *u >= 0xF0 ? 3 : *u >= 0xE0 ? 2 : *u >= 0xC0 ? 1 : 0;
            for (int k = 1; k <= more; k++)
                CHECK_MSG((u[k] & 0xC0) == 0x80, "a character cut in two: %s", line);
            u += more;
        }
    }
    fclose(f);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(seen[i], "no row keeps the layer and the op of %s", names[i]);
    ug_profiler_free(p);
}

/* Every device recorded has the pool's counters in the trace, at the
 * start and at the stop, however it was first met: here by a range (as a
 * trainer's step is), with no allocation while recording. */
static void test_memory_counters(ug_device *dev)
{
    ug_tensor *x = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, (int64_t[]){1 << 18}, &x)); /* 1 MiB */
    th_track(x);
    ug_profiler *p = NULL;
    REQUIRE_OK(ug_profiler_start(NULL, &p));
    CHECK_OK(ug_profiler_range_push(dev, "step"));
    CHECK_OK(ug_fill(x, 2.0f));
    CHECK_OK(ug_profiler_range_pop(dev));
    REQUIRE_OK(ug_profiler_stop(p));
    int n = trace_of(p, events, EVENTS);
    REQUIRE(n > 0);
    int device_pid = -1, counters = 0;
    double first = -1, last = -1;
    for (int i = 0; i < n; i++)
        if (events[i].ph == 'X' && !strcmp(events[i].cat, "kernel"))
            device_pid = events[i].pid;
    for (int i = 0; i < n; i++) {
        const trace_event *e = &events[i];
        if (e->ph != 'C' || e->pid != device_pid || strcmp(e->name, "pool MiB") != 0)
            continue;
        counters++;
        CHECK_MSG(e->in_use >= 1.0, "the pool holds %.3f MiB, the tensor alone 1 MiB", e->in_use);
        first = first < 0 ? e->ts : first;
        last = e->ts;
    }
    CHECK_MSG(counters >= 2 && last > first, "%d pool counters on the device's track", counters);
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
        TH_DEVICE_TEST(transfer_queued_behind_kernels),
        TH_DEVICE_TEST(transfer_beside_other_threads_kernels),
        TH_DEVICE_TEST(long_names_in_table),
        TH_DEVICE_TEST(memory_counters),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
