/* ug-bench data-parallel: weak scaling of data-parallel training under
 * mpirun. Every rank trains ug-train's model (the MLP, or --model cnn) on
 * --batch rows of its own; rank 0 times, in alternating rounds of the same
 * invocation, four steps:
 *   alone     rank 0 by itself (the others wait), one device's plain step;
 *   apart     every rank its own plain step at once, with no communication:
 *             what sharing the machine (cores, caches, memory) costs;
 *   overlap   every rank, the gradient buckets' all-reduces started as
 *             backward finishes them (ug_comm_run_backward);
 *   after     every rank, the buckets reduced after backward
 *             (ug_comm_set_overlap(false));
 * and prints the step times, their ratios to alone (weak scaling: 1 is
 * perfect), and each bucket's all-reduce with the share of it that ran
 * while backward did. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mlp.h"

enum { ROUNDS = 5, MODES = 4, MAX_BUCKETS = 64 };
enum { ALONE, APART, OVERLAP, AFTER };
static const char *const mode_names[MODES] = {"alone", "apart", "overlap", "after"};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpirun -np N ug-bench data-parallel [--model mlp|cnn] [--batch ROWS]\n"
            "                          [--steps N] [--bucket-kib FIRST,REST] [--device NAME]\n"
            "Weak scaling: each rank trains ug-train's model (Adam) on ROWS rows of its own\n"
            "(default 64); rank 0 times its step alone, every rank's at once with no\n"
            "communication (apart: what sharing the machine costs), and every rank's with\n"
            "the gradient buckets reduced while backward runs (overlap) and after it (after),\n"
            "in %d alternating rounds of N steps (default: about 0.2 s each). Prints the\n"
            "median step times, their ratios to alone, and each bucket's all-reduce with the\n"
            "share of it hidden behind backward. Buckets default to 1 MiB first, then\n"
            "25 MiB. Give each rank one thread (UG_NUM_THREADS=1) to measure scaling\n"
            "over cores. --device may contain {local_rank} (default cpu).\n",
            ROUNDS);
}

typedef struct replica {
    ug_model *model;
    ug_optimizer *optimizer;
    mlp_graph mlp;
} replica;

static ug_status build(ug_device *dev, const mlp_config *config, int64_t batch, ug_tensor *x, ug_tensor *y,
                       replica *r)
{
    TRY(ug_model_create(dev, 7, &r->model));
    TRY(mlp_build(r->model, config, batch, &r->mlp));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    TRY(ug_optimizer_create(r->model, &oc, &r->optimizer));
    TRY(mlp_finish(&r->mlp, r->optimizer));
    TRY(ug_graph_bind(r->mlp.graph, r->mlp.x, x));
    return ug_graph_bind(r->mlp.graph, r->mlp.y, y);
}

static void free_replica(replica *r)
{
    mlp_free(&r->mlp);
    ug_optimizer_free(r->optimizer);
    ug_model_free(r->model);
}

/* Per bucket, over a round's overlapped steps: all-reduce seconds and the
 * seconds of them hidden behind backward. */
typedef struct bucket_sums {
    int count;
    ug_comm_bucket last[MAX_BUCKETS];
    double seconds[MAX_BUCKETS], hidden[MAX_BUCKETS];
} bucket_sums;

static ug_status step(int mode, ug_comm *comm, replica *alone, replica *dp, bucket_sums *sums)
{
    ug_graph *g = dp->mlp.graph;
    if (mode == ALONE || mode == APART)
        return ug_graph_run(alone->mlp.graph);
    TRY(ug_comm_set_overlap(comm, mode == OVERLAP));
    TRY(ug_comm_run_backward(comm, g));
    TRY(ug_graph_run_update(g));
    sums->count = ug_comm_bucket_count(comm) < MAX_BUCKETS ? ug_comm_bucket_count(comm) : MAX_BUCKETS;
    for (int b = 0; mode == OVERLAP && b < sums->count; b++) {
        TRY(ug_comm_bucket_at(comm, b, &sums->last[b]));
        sums->seconds[b] += sums->last[b].seconds;
        sums->hidden[b] += sums->last[b].seconds * sums->last[b].hidden;
    }
    return UG_OK;
}

/* Seconds per step of steps steps in mode; rank 0 by itself when alone. */
static ug_status round_of(int mode, int steps, ug_comm *comm, replica *alone, replica *dp, bucket_sums *sums,
                          double *seconds)
{
    ug_device *dev = ug_comm_device(comm);
    TRY(ug_comm_barrier(comm));
    const double start = bench_now();
    if (mode != ALONE || ug_comm_rank(comm) == 0)
        for (int s = 0; s < steps; s++)
            TRY(step(mode, comm, alone, dp, sums));
    TRY(ug_device_synchronize(dev));
    *seconds = (bench_now() - start) / steps;
    return ug_comm_barrier(comm);
}

static void print_results(ug_comm *comm, const char *model, int64_t batch, int steps, double median[MODES],
                          double ratio[MODES], const bucket_sums *sums)
{
    printf("data-parallel: %s, %d ranks (%s) x %lld rows, %s, %d rounds of %d steps\n", model, ug_comm_size(comm),
           ug_comm_engine(comm), (long long)batch, ug_device_name(ug_comm_device(comm)), ROUNDS, steps);
    printf("all-reduces through %s\n", ug_comm_transport(comm));
    printf("%-8s %10s %14s\n", "step", "ms", "x alone");
    for (int m = 0; m < MODES; m++)
        printf("%-8s %10.3f %14.3f\n", mode_names[m], median[m] * 1e3, ratio[m]);
    printf("buckets (in the order backward finishes them; overlap rounds):\n");
    printf("%6s %7s %10s %14s %8s\n", "bucket", "params", "KiB", "all-reduce ms", "hidden");
    for (int b = 0; b < sums->count; b++)
        printf("%6d %7d %10.1f %14.3f %7.0f%%\n", b, sums->last[b].parameters, (double)sums->last[b].bytes / 1024.0,
               sums->seconds[b] / (ROUNDS * steps) * 1e3,
               sums->seconds[b] > 0 ? 100.0 * sums->hidden[b] / sums->seconds[b] : 0.0);
}

static int run(ug_comm *comm, const mlp_config *config, const char *model, int64_t batch, int steps,
               size_t first_bytes, size_t bytes)
{
    ug_device *dev = ug_comm_device(comm);
    ug_tensor *x = NULL, *y = NULL;
    replica alone = {0}, dp = {0};
    bucket_sums sums = {0};
    float *xs = malloc((size_t)(batch * config->inputs) * sizeof *xs);
    int32_t *ys = malloc((size_t)batch * sizeof *ys);
    if (!xs || !ys) {
        free(xs);
        free(ys);
        fprintf(stderr, "ug-bench data-parallel: out of memory\n");
        return 1;
    }
    srand(11 + (unsigned)ug_comm_rank(comm));
    for (int64_t i = 0; i < batch * config->inputs; i++)
        xs[i] = (float)rand() / (float)RAND_MAX;
    for (int64_t i = 0; i < batch; i++)
        ys[i] = (int32_t)(i % config->classes);
    ug_status st = ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){batch, config->inputs}, xs, &x);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){batch}, ys, &y);
    if (st == UG_OK) st = build(dev, config, batch, x, y, &alone);
    if (st == UG_OK) st = build(dev, config, batch, x, y, &dp);
    if (st == UG_OK) st = ug_comm_set_bucket_bytes(dp.mlp.graph, first_bytes, bytes);
    if (st == UG_OK) st = ug_comm_broadcast_model(comm, dp.model);
    free(xs);
    free(ys);
    double times[MODES][ROUNDS], ratios[MODES][ROUNDS], median[MODES], ratio[MODES];
    for (int m = 0; st == UG_OK && m < MODES; m++) /* warm up, and size the rounds */
        st = round_of(m, 10, comm, &alone, &dp, &sums, &times[m][0]);
    if (st == UG_OK && !steps) {
        float guess = (float)(0.2 / (times[OVERLAP][0] > 1e-6 ? times[OVERLAP][0] : 1e-6));
        ug_tensor *t = NULL; /* rank 0's guess, for every rank */
        st = ug_tensor_from_host(dev, UG_F32, 1, (int64_t[]){1}, &guess, &t);
        if (st == UG_OK) st = ug_comm_broadcast(comm, t, 0);
        if (st == UG_OK) st = ug_tensor_download(t, &guess, sizeof guess);
        ug_tensor_free(t);
        steps = guess < 5 ? 5 : guess > 2000 ? 2000 : (int)guess;
    }
    memset(&sums, 0, sizeof sums);
    for (int r = 0; st == UG_OK && r < ROUNDS; r++)
        for (int m = 0; st == UG_OK && m < MODES; m++)
            st = round_of(m, steps, comm, &alone, &dp, &sums, &times[m][r]);
    if (st == UG_OK && ug_comm_rank(comm) == 0) {
        for (int m = 0; m < MODES; m++) {
            for (int r = 0; r < ROUNDS; r++)
                ratios[m][r] = times[m][r] / times[ALONE][r];
            ratio[m] = bench_median(ratios[m], ROUNDS);
            median[m] = bench_median(times[m], ROUNDS);
        }
        print_results(comm, model, batch, steps, median, ratio, &sums);
    }
    free_replica(&alone);
    free_replica(&dp);
    ug_tensor_free(x);
    ug_tensor_free(y);
    return st == UG_OK ? 0 : bench_fail("data-parallel");
}

int bench_data_parallel(int argc, char **argv)
{
    mlp_config config = {.inputs = 784, .classes = 10, .hidden_count = 1, .hidden = {500}, .precision = UG_F32};
    const char *model = "mlp", *device_name = "cpu";
    int64_t batch = 64;
    int steps = 0;
    long first_kib = 0, rest_kib = 0;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model") && next && (!strcmp(next, "mlp") || !strcmp(next, "cnn"))) {
            model = argv[++i];
            config.cnn = !strcmp(model, "cnn");
        } else if (!strcmp(argv[i], "--batch") && next && atoll(next) > 0) {
            batch = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && next && atoi(next) > 0) {
            steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--bucket-kib") && next && sscanf(next, "%ld,%ld", &first_kib, &rest_kib) == 2 &&
                   first_kib > 0 && rest_kib > 0) {
            i++;
        } else if (!strcmp(argv[i], "--device") && next) {
            device_name = argv[++i];
        } else {
            fprintf(stderr, "ug-bench data-parallel: bad argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    char name[64];
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const char *at = strstr(device_name, "{local_rank}");
    if (at)
        snprintf(name, sizeof name, "%.*s%s%s", (int)(at - device_name), device_name, local ? local : "0",
                 at + strlen("{local_rank}"));
    else
        snprintf(name, sizeof name, "%s", device_name);
    ug_device *dev = NULL;
    ug_comm *comm = NULL;
    if (ug_device_open(name, &dev) != UG_OK)
        return bench_fail(name);
    if (ug_comm_mpi_create(dev, &comm) != UG_OK) {
        ug_device_close(dev);
        return bench_fail("data-parallel");
    }
    int rc = run(comm, &config, model, batch, steps, (size_t)first_kib * 1024, (size_t)rest_kib * 1024);
    ug_comm_free(comm);
    ug_device_close(dev);
    return rc;
}
