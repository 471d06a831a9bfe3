/* ug-bench pipeline: a deep MLP's training step (Adam) split over
 * pipeline stages (pipeline.h), each stage a rank: a device of this
 * process (--stages cpu,opencl:0, a thread each) or a process mpirun
 * started. In alternating rounds of the same invocation it times the
 * pipeline's step and one device's step of the whole model on the same
 * batch (stage 0's device, the others waiting), and reports:
 *   the bubble: the share of the step the busiest stage is not busy
 *     (1 - its forward and backward passes' time / the step), against
 *     the theory's (p - 1) / (m + p - 1) for p stages, m micro-batches;
 *   each stage's memory (its plan and its inputs in flight) against the
 *     one-device plan of the whole model.
 * The layers are split so that the stages' work is alike: a stage before
 * the last runs each micro-batch's forward pass twice (alone, then inside
 * its backward pass), the last once, so the last takes 4 layers for
 * every 3 of the others'. The theory assumes stages of equal work. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "local_rank.h"
#include "mlp.h"

enum { ROUNDS = 5, MAX_STAGES = 16, CLASSES = 10 };

typedef struct pipeline_args {
    int stages, micro_batches, layers, steps;
    int64_t width, batch;
    ug_pipeline_schedule schedule;
    int split[MAX_STAGES];    /* hidden layers per stage */
} pipeline_args;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench pipeline --stages cpu,opencl:0 [options]\n"
            "       mpirun -np P ug-bench pipeline [--device NAME] [options]\n"
            "options: [--micro-batches 8] [--batch 256] [--width 1024] [--layers L]\n"
            "         [--schedule 1f1b|gpipe] [--steps N]\n"
            "A deep MLP (L hidden layers of WIDTH, ReLU; default L = 3P + 1) trained with\n"
            "Adam, split over P pipeline stages, each a device of this process (--stages)\n"
            "or a process of mpirun (each on --device, default cpu; {local_rank} allowed;\n"
            "give each one thread, UG_NUM_THREADS=1, to measure stages over cores). In %d\n"
            "alternating rounds of N steps (default: about 0.3 s each) it times the\n"
            "pipeline's step and one device's step of the whole model, and prints the\n"
            "bubble (the share of the step its busiest stage is idle) against the\n"
            "theory's (P-1)/(M+P-1), and each stage's memory against the whole model's\n"
            "plan on one device.\n",
            ROUNDS);
}

/* The MLP with boundaries after each stage's layers: on a graph of no
 * pipeline, the whole model. */
static ug_status build(ug_graph *g, const pipeline_args *a, ug_value *x, ug_value *y, ug_value **loss)
{
    ug_value *h = x;
    int layer = 0;
    for (int s = 0; s < a->stages; s++) {
        for (int k = 0; k < a->split[s]; k++, layer++) {
            char name[32];
            snprintf(name, sizeof name, "fc%d", layer + 1);
            TRY(ug_nn_linear(g, name, h, a->width, &h));
            TRY(ug_g_relu(g, h, &h));
        }
        if (s + 1 < a->stages)
            TRY(ug_pipeline_boundary(g, &h));
    }
    TRY(ug_nn_linear(g, "head", h, CLASSES, &h));
    return ug_g_cross_entropy(g, h, y, 0.0f, loss);
}

/* A model on dev, its graph for rows rows (the data inputs x, y), Adam,
 * and the pipeline stage over comm (NULL: the whole model). */
typedef struct trained {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_pipeline *pipeline;
    ug_value *x, *y;
    ug_tensor *xt, *yt;
} trained;

static ug_status make_trained(ug_device *dev, ug_comm *comm, const pipeline_args *a, trained *t)
{
    const int64_t rows = comm ? (a->batch + a->micro_batches - 1) / a->micro_batches : a->batch;
    ug_value *loss = NULL;
    TRY(ug_model_create(dev, 1, &t->model));
    TRY(ug_graph_create(t->model, &t->graph));
    if (comm)
        TRY(ug_pipeline_create(comm, t->graph, a->micro_batches, a->schedule, &t->pipeline));
    TRY(ug_graph_input(t->graph, "x", UG_F32, 2, (int64_t[]){rows, a->width}, &t->x));
    TRY(ug_graph_input(t->graph, "y", UG_I32, 1, (int64_t[]){rows}, &t->y));
    TRY(build(t->graph, a, t->x, t->y, &loss));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    TRY(ug_optimizer_create(t->model, &oc, &t->opt));
    if (t->pipeline) {
        const int stage = ug_comm_rank(comm);
        TRY(ug_pipeline_compile(t->pipeline, stage == a->stages - 1 ? loss : NULL, t->opt));
    } else {
        TRY(ug_graph_backward(t->graph, loss));
        TRY(ug_graph_set_optimizer(t->graph, t->opt));
        TRY(ug_graph_compile(t->graph));
    }
    float *xs = malloc((size_t)(a->batch * a->width) * sizeof *xs);
    int32_t *ys = malloc((size_t)a->batch * sizeof *ys);
    ug_status st = xs && ys ? UG_OK : UG_ERR_OUT_OF_MEMORY;
    if (st != UG_OK)
        fprintf(stderr, "ug-bench pipeline: out of host memory for the batch\n");
    for (int64_t i = 0; st == UG_OK && i < a->batch * a->width; i++)
        xs[i] = (float)((i * 7919) % 1000) / 1000.0f;
    for (int64_t i = 0; st == UG_OK && i < a->batch; i++)
        ys[i] = (int32_t)(i % CLASSES);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){a->batch, a->width}, xs, &t->xt);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){a->batch}, ys, &t->yt);
    free(xs);
    free(ys);
    TRY(st);
    if (t->pipeline) {
        TRY(ug_pipeline_bind(t->pipeline, t->x, t->xt));
        return ug_pipeline_bind(t->pipeline, t->y, t->yt);
    }
    TRY(ug_graph_bind(t->graph, t->x, t->xt));
    return ug_graph_bind(t->graph, t->y, t->yt);
}

static void free_trained(trained *t)
{
    ug_pipeline_free(t->pipeline);
    ug_graph_free(t->graph);
    ug_optimizer_free(t->opt);
    ug_model_free(t->model);
    ug_tensor_free(t->xt);
    ug_tensor_free(t->yt);
}

/* One stage's run: its figures, gathered on stage 0. */
typedef struct stage_run {
    ug_comm *comm;
    const pipeline_args *a;
    ug_status status;
    char message[512];
    /* stage 0's: per round, seconds per step of the pipeline and of one
     * device, and every stage's busy seconds per step */
    double step[ROUNDS], alone[ROUNDS], busy[ROUNDS][MAX_STAGES];
    double memory[MAX_STAGES];  /* each stage's bytes */
    double whole_memory;        /* the one-device plan's */
    char devices[MAX_STAGES][32];
} stage_run;

/* Every stage's values[count] on stage 0, in stage order. */
static ug_status gather(ug_comm *comm, const float *values, int count, float *all)
{
    ug_device *dev = ug_comm_device(comm);
    ug_tensor *in = NULL, *out = NULL;
    ug_status st = ug_tensor_from_host(dev, UG_F32, 1, (int64_t[]){count}, values, &in);
    if (st == UG_OK) st = ug_tensor_create(dev, UG_F32, 1, (int64_t[]){(int64_t)count * ug_comm_size(comm)}, &out);
    if (st == UG_OK) st = ug_comm_all_gather(comm, in, out);
    if (st == UG_OK) st = ug_tensor_download(out, all, (size_t)count * (size_t)ug_comm_size(comm) * sizeof *all);
    ug_tensor_free(in);
    ug_tensor_free(out);
    return st;
}

/* steps pipeline steps: seconds per step and this stage's busy seconds per step. */
static ug_status pipeline_round(stage_run *r, trained *t, int steps, double *seconds, double *busy)
{
    TRY(ug_comm_barrier(r->comm));
    const double start = bench_now();
    *busy = 0;
    for (int s = 0; s < steps; s++) {
        ug_pipeline_timing timing;
        TRY(ug_pipeline_run(t->pipeline));
        TRY(ug_pipeline_last_timing(t->pipeline, &timing));
        *busy += timing.busy_seconds / steps;
    }
    *seconds = (bench_now() - start) / steps;
    return UG_OK;
}

/* One device's steps of the whole model, on stage 0 (the others wait). */
static ug_status alone_round(stage_run *r, trained *whole, int steps, double *seconds)
{
    TRY(ug_comm_barrier(r->comm));
    const double start = bench_now();
    for (int s = 0; ug_comm_rank(r->comm) == 0 && s < steps; s++)
        TRY(ug_graph_run(whole->graph));
    TRY(ug_device_synchronize(ug_comm_device(r->comm)));
    *seconds = (bench_now() - start) / steps;
    return ug_comm_barrier(r->comm);
}

static ug_status run_stage(stage_run *r, trained *t, trained *whole)
{
    const pipeline_args *a = r->a;
    ug_device *dev = ug_comm_device(r->comm);
    const int rank = ug_comm_rank(r->comm), p = a->stages;
    TRY(make_trained(dev, r->comm, a, t));
    if (rank == 0)
        TRY(make_trained(dev, NULL, a, whole));
    ug_pipeline_memory_info memory;
    TRY(ug_pipeline_memory(t->pipeline, &memory));
    float mine[2] = {(float)memory.total_bytes, 0}, all[2 * MAX_STAGES];
    TRY(gather(r->comm, mine, 2, all));
    for (int s = 0; s < p; s++)
        r->memory[s] = all[2 * s];
    if (rank == 0) {
        ug_graph_memory_info plan;
        TRY(ug_graph_memory(whole->graph, &plan));
        r->whole_memory = (double)plan.total_bytes;
    }
    double seconds = 0, busy = 0;
    TRY(pipeline_round(r, t, 3, &seconds, &busy)); /* warm up, and size the rounds */
    TRY(alone_round(r, whole, 3, &seconds));
    int steps = a->steps;
    if (!steps) { /* stage 0's guess, for every stage */
        float guess[1] = {(float)(0.3 / (seconds > 1e-6 ? seconds : 1e-6))}, guesses[MAX_STAGES];
        TRY(gather(r->comm, guess, 1, guesses));
        steps = guesses[0] < 3 ? 3 : guesses[0] > 500 ? 500 : (int)guesses[0];
    }
    for (int round = 0; round < ROUNDS; round++) {
        TRY(pipeline_round(r, t, steps, &r->step[round], &busy));
        float figures[2] = {(float)r->step[round], (float)busy};
        TRY(gather(r->comm, figures, 2, all));
        for (int s = 0; s < p; s++) {
            r->busy[round][s] = all[2 * s + 1];
            r->step[round] = all[2 * s] > r->step[round] ? all[2 * s] : r->step[round];
        }
        TRY(alone_round(r, whole, steps, &r->alone[round]));
    }
    return UG_OK;
}

static void *stage_thread(void *arg)
{
    stage_run *r = arg;
    trained t = {0}, whole = {0};
    r->status = run_stage(r, &t, &whole);
    snprintf(r->message, sizeof r->message, "%s", r->status == UG_OK ? "" : ug_last_error());
    if (r->status != UG_OK) { /* the other stages would wait for this one */
        ug_comm_free(r->comm);
        r->comm = NULL;
    }
    free_trained(&t);
    free_trained(&whole);
    return NULL;
}

static void report(const stage_run *r, const char *engine)
{
    const pipeline_args *a = r->a;
    const int p = a->stages, m = a->micro_batches;
    double bubble[ROUNDS], ratio[ROUNDS], busy_share[MAX_STAGES];
    for (int round = 0; round < ROUNDS; round++) {
        double most = 0;
        for (int s = 0; s < p; s++)
            most = r->busy[round][s] > most ? r->busy[round][s] : most;
        bubble[round] = 1.0 - most / r->step[round];
        ratio[round] = r->step[round] / r->alone[round];
    }
    for (int s = 0; s < p; s++) {
        double shares[ROUNDS];
        for (int round = 0; round < ROUNDS; round++)
            shares[round] = r->busy[round][s] / r->step[round];
        busy_share[s] = bench_median(shares, ROUNDS);
    }
    double steps[ROUNDS], alone[ROUNDS];
    memcpy(steps, r->step, sizeof steps);
    memcpy(alone, r->alone, sizeof alone);
    const double theory = (double)(p - 1) / (double)(m + p - 1), measured = bench_median(bubble, ROUNDS);
    printf("pipeline: %d stages (%s), an MLP of %d layers of %lld, batch %lld in %d micro-batches, %s\n", p, engine,
           a->layers, (long long)a->width, (long long)a->batch, m, a->schedule == UG_PIPELINE_GPIPE ? "GPipe" : "1F1B");
    printf("%-5s %-10s %7s %8s %12s %12s\n", "stage", "device", "layers", "busy", "memory MiB", "x one device");
    for (int s = 0; s < p; s++)
        printf("%-5d %-10s %7d %7.0f%% %12.1f %12.2f\n", s, r->devices[s], a->split[s], 100.0 * busy_share[s],
               r->memory[s] / 1048576.0, r->memory[s] / r->whole_memory);
    printf("one device's plan of the whole model: %.1f MiB\n", r->whole_memory / 1048576.0);
    printf("step: pipeline %.3f ms, one device %.3f ms (x%.2f of one device)\n", bench_median(steps, ROUNDS) * 1e3,
           bench_median(alone, ROUNDS) * 1e3, bench_median(ratio, ROUNDS));
    printf("bubble: %.1f%% of the step (1 - the busiest stage's busy time / the step); theory (p-1)/(m+p-1) "
           "= %.1f%%: x%.2f\n", 100.0 * measured, 100.0 * theory, measured / theory);
}

/* The layers per stage: 3 for each of the last's 4 (see the top). */
static void split_layers(pipeline_args *a)
{
    if (!a->layers)
        a->layers = 3 * a->stages + 1;
    const int others = a->stages > 1 ? (3 * a->layers) / (3 * (a->stages - 1) + 4) : 0;
    for (int s = 0; s + 1 < a->stages; s++)
        a->split[s] = others > 0 ? others : 1;
    a->split[a->stages - 1] = a->layers - (a->stages - 1) * (others > 0 ? others : 1);
}

static int parse(int argc, char **argv, pipeline_args *a, const char **stages, const char **device)
{
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--stages") && next) {
            *stages = argv[++i];
        } else if (!strcmp(argv[i], "--device") && next) {
            *device = argv[++i];
        } else if (!strcmp(argv[i], "--micro-batches") && next && atoi(next) > 0) {
            a->micro_batches = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--batch") && next && atoll(next) > 0) {
            a->batch = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--width") && next && atoll(next) > 0) {
            a->width = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--layers") && next && atoi(next) > 0) {
            a->layers = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && next && atoi(next) > 0) {
            a->steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--schedule") && next && (!strcmp(next, "1f1b") || !strcmp(next, "gpipe"))) {
            a->schedule = !strcmp(argv[++i], "gpipe") ? UG_PIPELINE_GPIPE : UG_PIPELINE_1F1B;
        } else {
            fprintf(stderr, "ug-bench pipeline: bad argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

int bench_pipeline(int argc, char **argv)
{
    pipeline_args a = {.micro_batches = 8, .batch = 256, .width = 1024};
    const char *stages = NULL, *device_name = "cpu";
    int rc = parse(argc, argv, &a, &stages, &device_name);
    if (rc >= 0)
        return rc;
    ug_device *devices[MAX_STAGES] = {0};
    ug_comm *comms[MAX_STAGES] = {0};
    stage_run runs[MAX_STAGES];
    memset(runs, 0, sizeof runs);
    char list[512], names[MAX_STAGES][32];
    snprintf(list, sizeof list, "%s", stages ? stages : "");
    int count = 0;
    ug_status st = UG_OK;
    for (char *save = NULL, *name = strtok_r(list, ",", &save); stages && name && st == UG_OK;
         name = strtok_r(NULL, ",", &save), count++) {
        if (count == MAX_STAGES) {
            fprintf(stderr, "ug-bench pipeline: more than %d stages\n", MAX_STAGES);
            return 2;
        }
        st = ug_device_open(name, &devices[count]);
        snprintf(names[count], sizeof names[0], "%s", name);
    }
    if (stages && st == UG_OK && count < 2) {
        fprintf(stderr, "ug-bench pipeline: --stages needs two devices or more\n");
        return 2;
    }
    if (stages && st == UG_OK) {
        st = ug_comm_local_create(count, devices, comms);
    } else if (st == UG_OK) { /* one stage per process of mpirun */
        expand_local_rank(device_name, names[0], sizeof names[0]);
        st = ug_device_open(names[0], &devices[0]);
        if (st == UG_OK) st = ug_comm_mpi_create(devices[0], &comms[0]);
        count = st == UG_OK ? ug_comm_size(comms[0]) : 0;
        if (st == UG_OK && (count < 2 || count > MAX_STAGES)) {
            fprintf(stderr, "ug-bench pipeline: %d processes: run it under mpirun -np 2 to %d, or give "
                    "--stages\n", count, MAX_STAGES);
            ug_comm_free(comms[0]);
            ug_device_close(devices[0]);
            return 2;
        }
        for (int s = 1; s < count; s++)
            snprintf(names[s], sizeof names[s], "%s", names[0]);
    }
    const int local = stages ? count : 1;
    if (st == UG_OK) {
        a.stages = count;
        split_layers(&a);
        pthread_t threads[MAX_STAGES];
        for (int s = 0; s < local; s++) {
            runs[s] = (stage_run){.comm = comms[s], .a = &a};
            pthread_create(&threads[s], NULL, stage_thread, &runs[s]);
        }
        for (int s = 0; s < local; s++)
            pthread_join(threads[s], NULL);
        for (int s = 0; s < local; s++) {
            if (runs[s].status != UG_OK)
                fprintf(stderr, "ug-bench pipeline: stage %d: %s\n", stages ? s : ug_comm_rank(comms[0]),
                        runs[s].message);
            rc = runs[s].status != UG_OK ? 1 : rc;
            comms[s] = runs[s].comm; /* NULL where the stage failed and left */
        }
        if (rc < 0 && ug_comm_rank(comms[0]) == 0) {
            memcpy(runs[0].devices, names, sizeof names);
            report(&runs[0], stages ? "threads of this process" : "MPI processes");
        }
    } else {
        rc = bench_fail("pipeline");
    }
    for (int s = 0; s < MAX_STAGES; s++) {
        ug_comm_free(comms[s]);
        ug_device_close(devices[s]);
    }
    return rc < 0 ? 0 : rc;
}
