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
#include "local_rank.h"
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

/* The trainer's step (trainer.h, Adam) on batches of batch rows: alone,
 * or with comm a replica of the others (rank 0's model, the gradients
 * summed over the ranks before each update). */
static ug_status make_step(ug_device *dev, ug_comm *comm, mlp_config *config, int64_t batch, ug_train_step **out)
{
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = batch;
    c.seed = 7;
    c.comm = comm;
    return ug_train_step_create(dev, config->inputs, 0, mlp_forward, config, &c, out);
}

/* Per bucket, over a round's overlapped steps: all-reduce seconds and the
 * seconds of them hidden behind backward. */
typedef struct bucket_sums {
    int count;
    ug_comm_bucket last[MAX_BUCKETS];
    double seconds[MAX_BUCKETS], hidden[MAX_BUCKETS];
} bucket_sums;

/* Both steps train on this rank's batch. */
typedef struct replica {
    ug_train_step *alone, *dp;
    ug_tensor *x, *y;
} replica;

static ug_status step(int mode, ug_comm *comm, const replica *r, bucket_sums *sums)
{
    if (mode == ALONE || mode == APART)
        return ug_train_step_run(r->alone, r->x, r->y, false);
    TRY(ug_comm_set_overlap(comm, mode == OVERLAP));
    TRY(ug_train_step_run(r->dp, r->x, r->y, false));
    sums->count = ug_comm_bucket_count(comm) < MAX_BUCKETS ? ug_comm_bucket_count(comm) : MAX_BUCKETS;
    for (int b = 0; mode == OVERLAP && b < sums->count; b++) {
        TRY(ug_comm_bucket_at(comm, b, &sums->last[b]));
        sums->seconds[b] += sums->last[b].seconds;
        sums->hidden[b] += sums->last[b].seconds * sums->last[b].hidden;
    }
    return UG_OK;
}

/* Seconds per step of steps steps in mode; rank 0 by itself when alone. */
static ug_status round_of(int mode, int steps, ug_comm *comm, const replica *r, bucket_sums *sums,
                          double *seconds)
{
    ug_device *dev = ug_comm_device(comm);
    TRY(ug_comm_barrier(comm));
    const double start = bench_now();
    if (mode != ALONE || ug_comm_rank(comm) == 0)
        for (int s = 0; s < steps; s++)
            TRY(step(mode, comm, r, sums));
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

static int run(ug_comm *comm, mlp_config *config, const char *model, int64_t batch, int steps,
               size_t first_bytes, size_t bytes)
{
    ug_device *dev = ug_comm_device(comm);
    replica r = {0};
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
    ug_status st = ug_tensor_from_host(dev, UG_F32, 2, (int64_t[]){batch, config->inputs}, xs, &r.x);
    if (st == UG_OK) st = ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){batch}, ys, &r.y);
    if (st == UG_OK) st = make_step(dev, NULL, config, batch, &r.alone);
    if (st == UG_OK) st = make_step(dev, comm, config, batch, &r.dp);
    if (st == UG_OK) st = ug_comm_set_bucket_bytes(ug_train_step_graph(r.dp), first_bytes, bytes);
    free(xs);
    free(ys);
    double times[MODES][ROUNDS], ratios[MODES][ROUNDS], median[MODES], ratio[MODES];
    for (int m = 0; st == UG_OK && m < MODES; m++) /* warm up, and size the rounds */
        st = round_of(m, 10, comm, &r, &sums, &times[m][0]);
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
    for (int round = 0; st == UG_OK && round < ROUNDS; round++)
        for (int m = 0; st == UG_OK && m < MODES; m++)
            st = round_of(m, steps, comm, &r, &sums, &times[m][round]);
    if (st == UG_OK && ug_comm_rank(comm) == 0) {
        for (int m = 0; m < MODES; m++) {
            for (int round = 0; round < ROUNDS; round++)
                ratios[m][round] = times[m][round] / times[ALONE][round];
            ratio[m] = bench_median(ratios[m], ROUNDS);
            median[m] = bench_median(times[m], ROUNDS);
        }
        print_results(comm, model, batch, steps, median, ratio, &sums);
    }
    ug_train_step_free(r.alone);
    ug_train_step_free(r.dp);
    ug_tensor_free(r.x);
    ug_tensor_free(r.y);
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
    char name[128];
    expand_local_rank(device_name, name, sizeof name);
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
