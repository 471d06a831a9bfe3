/* Pipeline stages (pipeline.h) against one device: an MLP cut in two,
 * fc1 (and dropout) on stage 0, fc2, fc3 and the loss on stage 1, each
 * stage on a device of its own (cpu and opencl:0) driven by a thread of
 * its own, trains 20 Adam updates of micro-batches in the GPipe and 1F1B
 * schedules. One device, the whole model, accumulating the same
 * micro-batches (ug_graph_run_backward on each, ug_graph_run_update) is
 * the reference: every parameter after the 20 updates, and every update's
 * loss, agree within float rounding (the stages' backends round their
 * products differently), with uneven micro-batches, dropout (the same
 * masks), bf16, clipping (one norm over both stages) and a loss scaler
 * whose first steps overflow (skipped on both, as on one device); two
 * pipelines side by side (a grid), the optimizer whole or sharded, and
 * pipelines whose layouts differ refused on every stage of both. Each
 * stage's memory is its plan and its inputs in flight. Refused on both
 * stages with the same words: two stages on one device, a boundary whose
 * sides differ, a last stage whose loss does not depend on its input (the
 * boundary cuts the model where nothing crosses it), different
 * micro-batch counts, and a parameter of stage 0 looked up on stage 1 (a
 * tied head). With --mpi, under mpirun -np 2 or 3, each process is a
 * stage on the cpu; under -np 4, a grid of two pipelines of two. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "unigrad/unigrad.h"

enum { STEPS = 20, IN = 12, HIDDEN = 16, CLASSES = 4, MAX_ROWS = 24, PARAMS = 6 };
static const char *const param_names[PARAMS] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                                "fc3.bias"};

typedef struct setup {
    int micro_batches;
    int64_t rows;             /* of each update's batch */
    ug_pipeline_schedule schedule;
    float dropout;
    ug_dtype precision;
    int64_t stage1_width;     /* what stage 1 declares it receives (0: HIDDEN) */
    bool loss_ignores_input;  /* stage 1's loss from its parameters alone */
    int stage1_micro_batches; /* 0: micro_batches */
    ug_dtype boundary;        /* set from precision: stage 0's (cpu) compute type */
    bool whole;               /* every stage builds the whole model (ug_pipeline_boundary) */
    bool skip;                /* the whole model reads a value past its cut */
    bool three;               /* the whole model cut in three (fc1, fc2, fc3 and the loss) */
    bool tied;                /* the later stage looks up fc1's weight */
    int replicas;             /* pipelines side by side, each a part of the rows (0: one) */
    float clip;               /* the optimizer's max_grad_norm (0: none) */
    bool scaled;              /* a loss scaler that starts too high: the first steps overflow and are skipped */
    int replica1_micro_batches; /* the second pipeline's micro-batches (0: as the first's) */
    bool shard;               /* the optimizer sharded over the replicas */
} setup;

static float features[STEPS][MAX_ROWS * IN];
static int32_t labels[STEPS][MAX_ROWS];
static float initial[PARAMS][HIDDEN * HIDDEN];
/* The reference's: parameters after STEPS updates, each update's loss, its plan. */
static float want[PARAMS][HIDDEN * HIDDEN], want_losses[STEPS];
static int64_t want_skipped; /* updates the loss scaler skipped */
static ug_graph_memory_info whole;

static void make_data(void)
{
    th_seed(7);
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < MAX_ROWS; i++) {
            labels[s][i] = (int32_t)(th_uniform(0, CLASSES - 0.001));
            for (int k = 0; k < IN; k++)
                features[s][i * IN + k] = (float)th_uniform(-1, 1) + (k % CLASSES == labels[s][i] ? 1.0f : 0.0f);
        }
}

static int64_t param_numel(int i) { return (int64_t[]){HIDDEN * IN, HIDDEN, HIDDEN * HIDDEN, HIDDEN, CLASSES * HIDDEN, CLASSES}[i]; }
/* The stage parameter i lives on: fc1, fc2 and fc3 each a stage of three. */
static int stage_of(int i, int stages) { return stages == 3 ? i / 2 : i < 2 ? 0 : 1; }

/* The model's first half (x to fc1's output) or second (to the loss). */
static ug_status first_half(ug_graph *g, ug_value *x, const setup *s, ug_value **h)
{
    TRY(ug_nn_linear(g, "fc1", x, HIDDEN, h));
    TRY(ug_g_relu(g, *h, h));
    return s->dropout > 0 ? ug_g_dropout(g, *h, s->dropout, h) : UG_OK;
}

static ug_status second_half(ug_graph *g, ug_value *h, ug_value *y, const setup *s, ug_value **loss)
{
    TRY(ug_nn_linear(g, "fc2", h, HIDDEN, &h));
    TRY(ug_g_gelu(g, h, &h));
    if (s->dropout > 0)
        TRY(ug_g_dropout(g, h, s->dropout, &h));
    TRY(ug_nn_linear(g, "fc3", h, CLASSES, &h));
    return ug_g_cross_entropy(g, h, y, 0.0f, loss);
}

/* The whole model, cut after fc1 (on one device, the cut is nothing);
 * with skip, fc3 also reads fc1's output, past the cut. */
static ug_status whole_model(ug_graph *g, ug_value *x, ug_value *y, const setup *s, ug_value **loss)
{
    ug_value *h = NULL, *before = NULL;
    TRY(first_half(g, x, s, &h));
    before = h;
    TRY(ug_pipeline_boundary(g, &h));
    if (s->tied) { /* fc1's weight looked up again after the cut, as a tied head would */
        ug_tensor *w = NULL;
        TRY(ug_model_find_param(ug_graph_model(g), "fc1.weight", &w));
    }
    if (s->three) {
        TRY(ug_nn_linear(g, "fc2", h, HIDDEN, &h));
        TRY(ug_g_gelu(g, h, &h));
        if (s->dropout > 0)
            TRY(ug_g_dropout(g, h, s->dropout, &h));
        TRY(ug_pipeline_boundary(g, &h));
        TRY(ug_nn_linear(g, "fc3", h, CLASSES, &h));
        return ug_g_cross_entropy(g, h, y, 0.0f, loss);
    }
    if (!s->skip)
        return second_half(g, h, y, s, loss);
    TRY(ug_nn_linear(g, "fc2", h, HIDDEN, &h));
    TRY(ug_g_add(g, h, before, &h));
    TRY(ug_nn_linear(g, "fc3", h, CLASSES, &h));
    return ug_g_cross_entropy(g, h, y, 0.0f, loss);
}

static ug_status new_graph(ug_device *dev, const setup *s, ug_model **m, ug_graph **g)
{
    TRY(ug_model_create(dev, 3, m));
    TRY(ug_graph_create(*m, g));
    TRY(ug_graph_set_seed(*g, 11));
    return ug_graph_set_precision(*g, s->precision);
}

static ug_status adam(ug_model *m, const setup *s, ug_optimizer **opt)
{
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    oc.lr = 1e-2f;
    oc.max_grad_norm = s->clip;
    if (s->scaled) /* squares of gradients scaled by 1e20 overflow f32 until the scale is down ~10 steps */
        oc.loss_scaling = (ug_loss_scaling){.enabled = true, .init_scale = 1e20f, .growth_factor = 2.0f,
                                            .backoff_factor = 0.5f, .growth_interval = 4};
    return ug_optimizer_create(m, &oc, opt);
}

/* Micro-batch j's rows of the batch: [R j / m, R (j + 1) / m). */
static int64_t part(const setup *s, int j) { return s->rows * j / s->micro_batches; }

/* The reference: one device, the whole model, the same micro-batches
 * accumulated; its parameters after STEPS updates and each update's loss. */
static void reference(ug_device *dev, const setup *s)
{
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_optimizer *opt = NULL;
    ug_value *x, *y, *h, *loss, *sum;
    const int64_t most = s->rows / s->micro_batches + 1;
    REQUIRE_OK(new_graph(dev, s, &m, &g));
    REQUIRE_OK(ug_graph_input(g, "x", ug_device_precision(dev, s->precision), 2, (int64_t[]){most, IN}, &x));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 1, (int64_t[]){most}, &y));
    REQUIRE_OK(whole_model(g, x, y, s, &loss));
    (void)h;
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_accumulate_rows(g, loss, &sum));
    REQUIRE_OK(adam(m, s, &opt));
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_memory(g, &whole));
    for (int i = 0; i < PARAMS; i++)
        REQUIRE_OK(ug_model_read_param(m, param_names[i], initial[i], (size_t)param_numel(i) * sizeof(float)));
    for (int step = 0; step < STEPS; step++) {
        REQUIRE_OK(ug_graph_clear_sums(g));
        for (int j = 0; j < s->micro_batches; j++) {
            const int64_t start = part(s, j), rows = part(s, j + 1) - start;
            ug_tensor *xt = NULL, *yt = NULL;
            REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){rows, IN}, features[step] + start * IN, &xt));
            REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){rows}, labels[step] + start, &yt));
            th_track(xt);
            th_track(yt);
            if (ug_tensor_dtype(xt) != ug_device_precision(dev, s->precision)) {
                ug_tensor *cast = NULL;
                REQUIRE_OK(ug_cast(xt, ug_device_precision(dev, s->precision), &cast));
                xt = th_track(cast);
            }
            REQUIRE_OK(ug_graph_bind(g, x, xt));
            REQUIRE_OK(ug_graph_bind(g, y, yt));
            REQUIRE_OK(ug_graph_run_backward(g));
        }
        REQUIRE_OK(ug_graph_run_update(g));
        float total = 0.0f;
        REQUIRE_OK(ug_graph_read(g, sum, &total, sizeof total));
        want_losses[step] = total / (float)s->rows;
    }
    for (int i = 0; i < PARAMS; i++)
        REQUIRE_OK(ug_model_read_param(m, param_names[i], want[i], (size_t)param_numel(i) * sizeof(float)));
    ug_loss_scaler_state scaler = {0};
    want_skipped = s->scaled && ug_optimizer_loss_scaler(opt, &scaler) == UG_OK ? scaler.skipped_steps : 0;
    ug_graph_free(g);
    ug_optimizer_free(opt);
    ug_model_free(m);
}

typedef struct stage_rank {
    ug_comm *comm, *replicas;
    setup s;
    ug_status status;
    char message[512];
    float after[PARAMS][HIDDEN * HIDDEN];
    float losses[STEPS];
    ug_pipeline_memory_info memory;
    uint64_t input_bytes;     /* one micro-batch's input to this stage */
    uint64_t gradient_bytes;  /* the gradient of its output it receives */
    int64_t skipped;          /* updates its loss scaler skipped */
    ug_pipeline_timing timing; /* of its last update */
} stage_rank;

/* This rank's stage, built, given the reference's initial parameters, and
 * trained STEPS updates. */
static ug_status run_stage(stage_rank *r, ug_model **m, ug_graph **g, ug_optimizer **opt, ug_pipeline **p)
{
    const setup *s = &r->s;
    ug_device *dev = ug_comm_device(r->comm);
    const int stage = ug_comm_rank(r->comm), stages = ug_comm_size(r->comm);
    /* with replicas, each pipeline its part of the rows and micro-batches */
    const int parts = s->replicas ? s->replicas : 1, replica = r->replicas ? ug_comm_rank(r->replicas) : 0;
    const int micro = stage && s->stage1_micro_batches ? s->stage1_micro_batches
                      : replica && s->replica1_micro_batches ? s->replica1_micro_batches
                                                             : s->micro_batches / parts;
    const int64_t most = s->rows / s->micro_batches + 1, rows = s->rows / parts, first = rows * replica;
    /* stage 0's on cpu: what crosses the boundary */
    const ug_dtype half = s->boundary;
    ug_value *x = NULL, *y = NULL, *h = NULL;
    TRY(new_graph(dev, s, m, g));
    TRY(ug_pipeline_create(r->comm, *g, micro, s->schedule, p));
    if (r->replicas)
        TRY(ug_pipeline_set_replicas(*p, r->replicas));
    if (s->whole) { /* every stage builds the whole model, cut at its boundary */
        TRY(ug_graph_input(*g, "x", half, 2, (int64_t[]){most, IN}, &x));
        TRY(ug_graph_input(*g, "y", UG_I32, 1, (int64_t[]){most}, &y));
        TRY(whole_model(*g, x, y, s, &h));
        r->input_bytes = stage ? (uint64_t)(most * HIDDEN) * ug_dtype_size(half) : 0;
        r->gradient_bytes = stage < stages - 1 ? (uint64_t)(most * HIDDEN) * ug_dtype_size(half) : 0;
    } else if (stage == 0) {
        TRY(ug_graph_input(*g, "x", half, 2, (int64_t[]){most, IN}, &x));
        TRY(first_half(*g, x, s, &h));
        r->gradient_bytes = (uint64_t)(most * HIDDEN) * ug_dtype_size(ug_value_dtype(h));
    } else {
        ug_value *loss = NULL;
        const int64_t width = s->stage1_width ? s->stage1_width : HIDDEN;
        TRY(ug_pipeline_input(*p, half, 2, (int64_t[]){most, width}, &x));
        TRY(ug_graph_input(*g, "y", UG_I32, 1, (int64_t[]){most}, &y));
        if (s->loss_ignores_input) {
            ug_value *w = NULL;
            ug_tensor *t = NULL;
            TRY(ug_model_param(*m, "w", 1, (int64_t[]){1}, UG_INIT_CONSTANT, 1.0f, &t));
            TRY(ug_graph_param(*g, t, &w));
            TRY(ug_g_mul(*g, w, w, &h));
            TRY(ug_g_sum(*g, h, 0, true, &h));
        } else {
            TRY(second_half(*g, x, y, s, &loss));
            h = loss;
        }
        r->input_bytes = (uint64_t)(most * width) * ug_dtype_size(half);
    }
    TRY(adam(*m, s, opt));
    TRY(ug_pipeline_compile(*p, h, *opt));
    if (s->shard)
        TRY(ug_comm_shard_optimizer(r->replicas, *opt));
    TRY(ug_pipeline_memory(*p, &r->memory));
    for (int i = 0; i < PARAMS && !s->whole; i++) /* a whole model's stage starts as one device's */
        if (stage_of(i, stages) == stage)
            TRY(ug_model_write_param(*m, param_names[i], initial[i], (size_t)param_numel(i) * sizeof(float)));
    for (int step = 0; step < STEPS; step++) {
        ug_tensor *batch = NULL;
        if (stage == 0) {
            ug_tensor *f32 = NULL;
            TRY(ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){rows, IN}, features[step] + first * IN, &f32));
            ug_status st = half == UG_F32 ? (batch = f32, UG_OK) : ug_cast(f32, half, &batch);
            if (batch != f32)
                ug_tensor_free(f32);
            TRY(st);
            st = ug_pipeline_bind(*p, x, batch);
            ug_tensor_free(batch);
            TRY(st);
        } else if (stage == stages - 1) {
            TRY(ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){rows}, labels[step] + first, &batch));
            ug_status st = ug_pipeline_bind(*p, y, batch);
            ug_tensor_free(batch);
            TRY(st);
        }
        TRY(ug_pipeline_run(*p));
        if (stage == stages - 1)
            TRY(ug_pipeline_loss(*p, &r->losses[step]));
    }
    for (int i = 0; i < PARAMS; i++)
        if (stage_of(i, stages) == stage)
            TRY(ug_model_read_param(*m, param_names[i], r->after[i], (size_t)param_numel(i) * sizeof(float)));
    TRY(ug_pipeline_last_timing(*p, &r->timing));
    ug_loss_scaler_state scaler = {0};
    if (s->scaled)
        TRY(ug_optimizer_loss_scaler(*opt, &scaler));
    r->skipped = scaler.skipped_steps;
    return UG_OK;
}

static void *stage_main(void *arg)
{
    stage_rank *r = arg;
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_optimizer *opt = NULL;
    ug_pipeline *p = NULL;
    r->status = run_stage(r, &m, &g, &opt, &p);
    snprintf(r->message, sizeof r->message, "%s", r->status == UG_OK ? "" : ug_last_error());
    ug_pipeline_free(p);
    ug_graph_free(g);
    ug_optimizer_free(opt);
    ug_model_free(m);
    ug_comm_free(r->comm);
    ug_comm_free(r->replicas);
    return NULL;
}

/* Stage 0 on first, stage 1 on second, each on a thread of its own. */
static void run_pipeline(ug_device *first, ug_device *second, const setup *s, stage_rank ranks[2])
{
    ug_device *devices[2] = {first, second};
    ug_comm *comms[2];
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    pthread_t threads[2];
    for (int k = 0; k < 2; k++) {
        memset(&ranks[k], 0, sizeof ranks[k]);
        ranks[k].comm = comms[k];
        ranks[k].s = *s;
        ug_comm_set_timeout(comms[k], 60.0);
        pthread_create(&threads[k], NULL, stage_main, &ranks[k]);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(threads[k], NULL);
}

/* Stage i's device: UG_TEST_STAGES's i-th ("cuda:0,cuda:1"), else cpu
 * and opencl:0. */
static ug_device *stage_device(int i)
{
    char names[64] = "cpu,opencl:0";
    const char *given = getenv("UG_TEST_STAGES");
    if (given)
        snprintf(names, sizeof names, "%s", given);
    char *comma = strchr(names, ',');
    if (comma)
        *comma = '\0';
    const char *name = i == 0 || !comma ? names : comma + 1;
    ug_device *dev = NULL;
    if (ug_device_open(name, &dev) != UG_OK) {
        th_skip("no %s for stage %d: %s", name, i, ug_last_error());
        return NULL;
    }
    return dev;
}

static ug_device *second_device(void) { return stage_device(1); }

/* Whether the two stages' devices copy to each other device to device
 * (two GPUs of one backend). */
static bool peers(ug_device *a, ug_device *b)
{
    const char *x = ug_device_name(a), *y = ug_device_name(b);
    return a != b && strcspn(x, ":") == strcspn(y, ":") && !strncmp(x, y, strcspn(x, ":")) &&
           (!strncmp(x, "cuda", 4) || !strncmp(x, "hip", 3));
}

/* A stage's results against the reference's (want, one device's
 * parameters and losses, and its plan whole): its parameters within
 * tolerance of the largest value of each, the last stage's losses, and
 * its memory (its plan, less than the whole model's, and the inputs in
 * flight that the schedule holds). */
static void check_stage(const stage_rank *r, int stage, int stages, const setup *s, double tolerance,
                        const char *what)
{
    CHECK_MSG(r->status == UG_OK, "%s: stage %d: %s", what, stage, r->message);
    if (r->status != UG_OK)
        return;
    for (int i = 0; i < PARAMS; i++) {
        if (stage_of(i, stages) != stage)
            continue;
        double worst = 0.0, scale = 1e-3;
        for (int64_t e = 0; e < param_numel(i); e++) {
            worst = fmax(worst, fabs((double)r->after[i][e] - want[i][e]));
            scale = fmax(scale, fabs((double)want[i][e]));
        }
        CHECK_MSG(worst <= tolerance * scale, "%s: %s after %d updates is up to %.3g from one device's (of values up "
                  "to %.3g; tolerance %.1g of that)", what, param_names[i], STEPS, worst, scale, tolerance);
    }
    CHECK_MSG(!s->scaled || (r->skipped == want_skipped && want_skipped > 0 && want_skipped < STEPS),
              "%s: stage %d's loss scaler skipped %lld updates, one device's %lld", what, stage,
              (long long)r->skipped, (long long)want_skipped);
    for (int step = 0; stage == stages - 1 && step < STEPS; step++)
        CHECK_MSG(fabs(r->losses[step] - want_losses[step]) <= tolerance * fabs(want_losses[step]),
                  "%s: update %d's loss is %.7g, one device's %.7g", what, step + 1, r->losses[step],
                  want_losses[step]);
    /* 1F1B: at most the stages from this one on; GPipe: every micro-batch;
     * the last stage: the one it runs */
    const int most = stage == stages - 1 ? 1 : s->schedule == UG_PIPELINE_GPIPE ? s->micro_batches : stages - stage;
    const int in_flight = stage == 0 ? 0 : most < s->micro_batches ? most : s->micro_batches;
    CHECK_MSG((stage == 0 || r->memory.in_flight == in_flight) &&
                  r->memory.boundary_bytes == (uint64_t)in_flight * r->input_bytes + r->gradient_bytes &&
                  r->memory.total_bytes == r->memory.graph.total_bytes + r->memory.boundary_bytes,
              "%s: stage %d holds %d inputs in flight, %llu bytes at its boundaries (an input is %llu bytes, the "
              "gradient received %llu)", what, stage, r->memory.in_flight, (unsigned long long)r->memory.boundary_bytes,
              (unsigned long long)r->input_bytes, (unsigned long long)r->gradient_bytes);
    CHECK_MSG(r->memory.graph.parameter_bytes < whole.parameter_bytes &&
                  r->memory.graph.optimizer_bytes < whole.optimizer_bytes,
              "%s: stage %d's plan holds %llu bytes of parameters and %llu of optimizer state, the whole model's "
              "%llu and %llu", what, stage, (unsigned long long)r->memory.graph.parameter_bytes,
              (unsigned long long)r->memory.graph.optimizer_bytes, (unsigned long long)whole.parameter_bytes,
              (unsigned long long)whole.optimizer_bytes);
}

/* The reference on cpu, and the setup with what crosses the boundary. */
static setup prepare(ug_device *cpu, const setup *s)
{
    make_data();
    reference(cpu, s);
    setup with = *s;
    with.boundary = ug_device_precision(cpu, s->precision);
    return with;
}

/* Both stages, on their devices (cpu and opencl:0 unless
 * UG_TEST_STAGES), against the reference on cpu; what crossed went device
 * to device between peers, else through host memory. */
static void check_against_reference(const setup *s, double tolerance, const char *what)
{
    ug_device *cpu = NULL, *first = stage_device(0), *other = first ? second_device() : NULL;
    if (!other) {
        ug_device_close(first);
        return;
    }
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    const setup with = prepare(cpu, s);
    stage_rank ranks[2];
    run_pipeline(first, other, &with, ranks);
    for (int k = 0; k < 2; k++) {
        check_stage(&ranks[k], k, 2, &with, tolerance, what);
        const ug_pipeline_timing *t = &ranks[k].timing;
        const bool direct = peers(first, other);
        CHECK_MSG(ranks[k].status != UG_OK || (direct ? t->direct_bytes > 0 && !t->staged_bytes
                                                      : t->staged_bytes > 0 && !t->direct_bytes),
                  "%s: stage %d on %s received %llu bytes device to device and %llu through the host", what, k,
                  ug_device_name(k ? other : first), (unsigned long long)t->direct_bytes,
                  (unsigned long long)t->staged_bytes);
    }
    ug_device_close(cpu);
    ug_device_close(first);
    ug_device_close(other);
}

static void test_gpipe(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .schedule = UG_PIPELINE_GPIPE}, 1e-4, "GPipe");
}

static void test_1f1b_uneven(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 3, .rows = 20, .schedule = UG_PIPELINE_1F1B}, 1e-4,
                            "1F1B, micro-batches of 6, 7 and 7");
}

static void test_dropout(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .dropout = 0.3f}, 1e-4, "1F1B with dropout");
}

/* Every stage from the whole model's build function: the cut at its
 * boundary, and the initial parameters those of one device without
 * being copied. */
static void test_whole_model(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .whole = true, .dropout = 0.2f}, 1e-4,
                            "whole model, boundary marked");
}

/* Clipping by the norm of every stage's gradients: one factor on both. */
static void test_clipping(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .clip = 0.05f, .schedule = UG_PIPELINE_GPIPE},
                            1e-4, "GPipe, gradients clipped to a norm of 0.05");
}

/* A loss scaler's overflow on either stage skips the step on both, and
 * the scales go down and up together. */
static void test_loss_scaling(ug_device *dev)
{
    (void)dev;
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .scaled = true, .dropout = 0.2f}, 1e-4,
                            "1F1B, loss scaled, the first steps overflowing");
}

static void test_bf16(ug_device *dev)
{
    (void)dev;
    /* bf16 products on two backends: rounding of 8 significant bits */
    check_against_reference(&(setup){.micro_batches = 4, .rows = 24, .precision = UG_BF16,
                                     .schedule = UG_PIPELINE_GPIPE}, 2e-2, "GPipe in bf16");
}

/* Two pipelines side by side, stage 0 of each on cpu and stage 1 on
 * opencl:0, four threads: each pipeline half of the batch, each stage's
 * gradients summed over the two; against one device accumulating both
 * halves' micro-batches, the replicas' mean loss against its loss. With
 * shard, Adam's state sharded over each stage's replicas: a part of it on
 * each (the plan's figures). */
/* The four stages of two pipelines on their threads: stage 0 of each on
 * cpu, stage 1 on other. */
static void grid_threads(ug_device *cpu, ug_device *other, const setup *with, stage_rank ranks[2][2])
{
    ug_comm *stages[2][2], *replicas[2][2]; /* [replica][stage], [stage][replica] */
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(ug_comm_local_create(2, (ug_device *[]){cpu, other}, stages[k]));
        REQUIRE_OK(ug_comm_local_create(2, (ug_device *[]){k ? other : cpu, k ? other : cpu}, replicas[k]));
    }
    pthread_t threads[2][2];
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage < 2; stage++) {
            stage_rank *r = &ranks[k][stage];
            *r = (stage_rank){.comm = stages[k][stage], .replicas = replicas[stage][k], .s = *with};
            ug_comm_set_timeout(r->comm, 60.0);
            ug_comm_set_timeout(r->replicas, 60.0);
            pthread_create(&threads[k][stage], NULL, stage_main, r);
        }
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage < 2; stage++)
            pthread_join(threads[k][stage], NULL);
}

static void run_grid(const setup *s, double tolerance, const char *what, stage_rank ranks[2][2])
{
    ug_device *cpu = NULL, *other = second_device();
    if (!other)
        return;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    const setup with = prepare(cpu, s);
    grid_threads(cpu, other, &with, ranks);
    setup each = with; /* what a stage of one pipeline runs */
    each.micro_batches /= 2;
    for (int step = 0; step < STEPS; step++) /* the batch's mean: the halves' */
        ranks[0][1].losses[step] = ranks[1][1].losses[step] = (ranks[0][1].losses[step] + ranks[1][1].losses[step]) / 2;
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage < 2; stage++) {
            char where[160];
            snprintf(where, sizeof where, "%s, pipeline %d", what, k);
            check_stage(&ranks[k][stage], stage, 2, &each, tolerance, where);
        }
    ug_device_close(cpu);
    ug_device_close(other);
}

static void test_grid(ug_device *dev)
{
    (void)dev;
    static stage_rank whole_state[2][2], sharded[2][2];
    const setup s = {.micro_batches = 4, .rows = 24, .replicas = 2};
    run_grid(&s, 1e-4, "2 stages x 2 replicas", whole_state);
    run_grid(&(setup){.micro_batches = 4, .rows = 24, .replicas = 2, .shard = true}, 1e-4,
             "2 stages x 2 replicas, Adam sharded", sharded);
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage < 2 && sharded[k][stage].status == UG_OK; stage++) {
            const uint64_t whole_bytes = whole_state[k][stage].memory.graph.optimizer_bytes,
                           held = sharded[k][stage].memory.graph.optimizer_bytes;
            /* its part of each parameter's moments (the pool's blocks of
             * these small ones round up; test_shard_optimizer has halves) */
            CHECK_MSG(held < whole_bytes, "pipeline %d, stage %d: the sharded optimizer's plan holds %llu bytes, the "
                      "whole state %llu", k, stage, (unsigned long long)held, (unsigned long long)whole_bytes);
        }
    /* pipelines whose layouts differ: refused on every stage of both */
    ug_device *cpu = NULL, *other = second_device();
    if (!other)
        return;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    static stage_rank refused[2][2];
    grid_threads(cpu, other, &(setup){.micro_batches = 4, .rows = 24, .replicas = 2, .replica1_micro_batches = 1},
                 refused);
    for (int k = 0; k < 2; k++)
        for (int stage = 0; stage < 2; stage++)
            CHECK_MSG(refused[k][stage].status != UG_OK &&
                          strstr(refused[k][stage].message, "replicas: rank 1's micro-batches is 1, rank 0's 2"),
                      "pipelines of 2 and 1 micro-batches: pipeline %d, stage %d gave %d: %s", k, stage,
                      (int)refused[k][stage].status, refused[k][stage].message);
    ug_device_close(cpu);
    ug_device_close(other);
}

/* Both stages refused with one message holding want. */
static void check_refused(ug_device *first, ug_device *second, const setup *s, const char *want, const char *what)
{
    stage_rank ranks[2];
    run_pipeline(first, second, s, ranks);
    for (int k = 0; k < 2; k++)
        CHECK_MSG(ranks[k].status != UG_OK && strstr(ranks[k].message, want), "%s: stage %d gave %d: %s", what, k,
                  (int)ranks[k].status, ranks[k].message);
    /* each side of a boundary tells the same: the others quote it */
    CHECK_MSG(!strcmp(ranks[0].message, ranks[1].message) || strstr(ranks[0].message, "the group is broken"),
              "%s: the stages say different things:\n  %s\n  %s", what, ranks[0].message, ranks[1].message);
}

static void test_refusals(ug_device *dev)
{
    (void)dev;
    ug_device *cpu = NULL, *other = second_device();
    if (!other)
        return;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    make_data();
    const setup plain = {.micro_batches = 4, .rows = 24};
    check_refused(cpu, cpu, &plain, "stages 0 and 1 are both on cpu of one process", "one device twice");
    setup s = plain;
    s.stage1_width = HIDDEN - 1;
    check_refused(cpu, other, &s, "stage 0 sends f32 [7,16], stage 1's input (ug_pipeline_input) is f32 [7,15]",
                  "a boundary whose sides differ");
    s = plain;
    s.stage1_micro_batches = 2;
    check_refused(cpu, other, &s, "rank 1's micro-batches is 2, rank 0's 4", "micro-batches");
    s = plain;
    s.whole = true;
    s.skip = true;
    check_refused(cpu, other, &s, "graph add: a value of pipeline stage 0 ('graph relu') is used in stage 1 without crossing",
                  "a value past the cut");
    s = plain;
    s.whole = true;
    s.tied = true;
    stage_rank tied[2];
    run_pipeline(cpu, other, &s, tied);
    CHECK_MSG(tied[1].status != UG_OK && strstr(tied[1].message, "'fc1.weight' is another pipeline stage's"),
              "a parameter looked up past the cut: stage 1 gave %d: %s", (int)tied[1].status, tied[1].message);
    CHECK_MSG(tied[0].status != UG_OK, "a parameter looked up past the cut: stage 0 went on");
    /* a stage's replicas: refused before anything is made of them */
    ug_comm *pair[2], *elsewhere[2];
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_pipeline *p = NULL;
    REQUIRE_OK(ug_comm_local_create(2, (ug_device *[]){cpu, other}, pair));
    REQUIRE_OK(ug_comm_local_create(2, (ug_device *[]){other, other}, elsewhere));
    REQUIRE_OK(new_graph(cpu, &plain, &m, &g));
    REQUIRE_OK(ug_pipeline_create(pair[0], g, 2, UG_PIPELINE_1F1B, &p));
    if (CHECK_STATUS(ug_pipeline_set_replicas(p, NULL), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("replicas is NULL");
    if (CHECK_STATUS(ug_pipeline_set_replicas(p, pair[0]), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("the stages' own");
    if (CHECK_STATUS(ug_pipeline_set_replicas(p, elsewhere[0]), UG_ERR_DEVICE))
        CHECK_ERROR_HAS("the same device for both");
    CHECK_STATUS(ug_pipeline_set_replicas(NULL, elsewhere[0]), UG_ERR_INVALID_ARGUMENT);
    ug_pipeline_free(p);
    ug_graph_free(g);
    ug_model_free(m);
    for (int k = 0; k < 2; k++) {
        ug_comm_free(pair[k]);
        ug_comm_free(elsewhere[k]);
    }
    s = plain;
    s.loss_ignores_input = true;
    stage_rank ranks[2];
    run_pipeline(cpu, other, &s, ranks);
    CHECK_MSG(ranks[1].status != UG_OK && strstr(ranks[1].message, "reaches its loss through no differentiable op"),
              "a loss without the stage's input: stage 1 gave %d: %s", (int)ranks[1].status, ranks[1].message);
    CHECK_MSG(ranks[0].status != UG_OK && strstr(ranks[0].message, "stage 1 refused to compile"),
              "a loss without the stage's input: stage 0 gave %d: %s", (int)ranks[0].status, ranks[0].message);
    ug_device_close(cpu);
    ug_device_close(other);
}

/* Under mpirun -np 4: two pipelines of two stages, each process one of
 * the four (stage = rank % 2, replica = rank / 2), the world split both
 * ways; the optimizer plain, then sharded over each stage's replicas.
 * ran counts the cases. */
static void mpi_grid(ug_device *cpu, int *ran)
{
    ug_comm *world = NULL;
    REQUIRE_OK(ug_comm_mpi_create(cpu, &world));
    const int me = ug_comm_rank(world), cases = ug_comm_size(world) == 4 ? 2 : 0;
    *ran += cases;
    for (int k = 0; k < cases; k++) {
        const setup with = prepare(cpu, &(setup){.micro_batches = 4, .rows = 24, .replicas = 2, .shard = k == 1});
        stage_rank r = {.s = with};
        REQUIRE_OK(ug_comm_split(world, me / 2, me, NULL, &r.comm));
        REQUIRE_OK(ug_comm_split(world, me % 2, me, NULL, &r.replicas));
        stage_main(&r);
        /* the batch's mean loss: the two last stages' halves' */
        int64_t steps = STEPS;
        ug_tensor *losses = NULL;
        REQUIRE_OK(ug_tensor_from_host(cpu, UG_F32, 1, &steps, r.losses, &losses));
        REQUIRE_OK(ug_comm_all_reduce(world, losses, UG_COMM_AVERAGE));
        REQUIRE_OK(ug_tensor_download(losses, r.losses, sizeof r.losses));
        ug_tensor_free(losses);
        for (int step = 0; step < STEPS; step++)
            r.losses[step] *= 2.0f; /* (the first stages gave zeros) */
        setup each = with;
        each.micro_batches /= 2;
        check_stage(&r, me % 2, 2, &each, 1e-5, k ? "MPI grid, 2 x 2, sharded" : "MPI grid, 2 stages x 2 replicas");
    }
    ug_comm_free(world);
}

/* Under mpirun -np 2: each process one stage on its cpu (two processes
 * may share a device), against the reference each computes. */
static void mpi_cases(void)
{
    ug_device *cpu = NULL;
    REQUIRE_OK(ug_device_open("cpu", &cpu));
    /* two processes: the cases of two stages; three: the whole model in three */
    static const struct {
        setup s;
        int stages;
        const char *what;
    } cases[] = {
        {{.micro_batches = 4, .rows = 24, .schedule = UG_PIPELINE_GPIPE}, 2, "MPI, GPipe"},
        {{.micro_batches = 3, .rows = 20, .schedule = UG_PIPELINE_1F1B}, 2, "MPI, 1F1B, uneven micro-batches"},
        {{.micro_batches = 4, .rows = 24, .dropout = 0.3f, .precision = UG_BF16}, 2, "MPI, 1F1B, dropout and bf16"},
        {{.micro_batches = 4, .rows = 24, .whole = true, .three = true, .dropout = 0.2f}, 3, "MPI, three stages, 1F1B"},
        {{.micro_batches = 5, .rows = 22, .whole = true, .three = true, .schedule = UG_PIPELINE_GPIPE}, 3,
         "MPI, three stages, GPipe"},
    };
    int stage = -1, ran = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const setup with = prepare(cpu, &cases[k].s);
        stage_rank r = {.s = with};
        REQUIRE_OK(ug_comm_mpi_create(cpu, &r.comm));
        stage = ug_comm_rank(r.comm);
        const int stages = ug_comm_size(r.comm);
        if (stages != cases[k].stages) {
            ug_comm_free(r.comm);
            continue;
        }
        stage_main(&r);
        /* one backend on every side: the same kernels as the reference's */
        check_stage(&r, stage, stages, &with, cases[k].s.precision == UG_BF16 ? 1e-2 : 1e-5, cases[k].what);
        ran++;
    }
    mpi_grid(cpu, &ran);
    CHECK_MSG(ran >= 2, "no case of this many stages ran");
    ug_device_close(cpu);
    printf("process %d: %d cases, %d failures\n", stage, ran, th_failures());
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--mpi")) {
        mpi_cases();
        return th_failures() ? 1 : 0;
    }
    static const th_test tests[] = {
        TH_HOST_TEST(gpipe), TH_HOST_TEST(1f1b_uneven), TH_HOST_TEST(dropout), TH_HOST_TEST(whole_model),
        TH_HOST_TEST(bf16), TH_HOST_TEST(clipping), TH_HOST_TEST(loss_scaling), TH_HOST_TEST(grid),
        TH_HOST_TEST(refusals),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
