/* Communicators (comm.h), in-process: three ranks (the CPU and the device
 * under test, mixed where it is another), each on a thread of its own.
 * Collectives against sums worked out in double; every rank's result
 * bitwise the same; mismatched and refused arguments, a rank that never
 * joins (the timeout) and one that leaves, each reported on every rank;
 * point-to-point messages, in order, and one of the wrong shape; a
 * reduce-scatter; a group split in two. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

enum { RANKS = 3, N = 1001 };

typedef struct rank_run {
    ug_comm *comm;
    int rank;
    const char *what;         /* which scenario */
    ug_status status[4];
    char message[4][384];
    float result[3 * N];
    double seconds;
} rank_run;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank r's value i: distinct per rank, not exact in sums. */
static float value(int r, int i) { return (float)((r + 1) * 0.37 + i * 0.011 - (i % 7) * 0.3); }

static ug_tensor *tensor_of(ug_device *dev, int rank, int64_t n)
{
    float *host = malloc((size_t)n * sizeof *host);
    for (int64_t i = 0; i < n; i++)
        host[i] = value(rank, (int)i);
    ug_tensor *t = NULL;
    if (ug_tensor_from_host(dev, UG_F32, 1, &n, host, &t) != UG_OK)
        t = NULL;
    free(host);
    return t;
}

static void note(rank_run *r, int k, ug_status st)
{
    r->status[k] = st;
    snprintf(r->message[k], sizeof r->message[k], "%s", st == UG_OK ? "" : ug_last_error());
}

static void *run_rank(void *arg)
{
    rank_run *r = arg;
    ug_device *dev = ug_comm_device(r->comm);
    double start = now();
    if (!strcmp(r->what, "collectives")) {
        static const ug_comm_op ops[3] = {UG_COMM_SUM, UG_COMM_AVERAGE, UG_COMM_MAX};
        for (int k = 0; k < 3; k++) {
            ug_tensor *t = tensor_of(dev, r->rank, N);
            note(r, k, t ? ug_comm_all_reduce(r->comm, t, ops[k]) : UG_ERR_BACKEND);
            if (t && ug_tensor_download(t, r->result + k * N, N * sizeof(float)) != UG_OK)
                r->status[k] = UG_ERR_BACKEND;
            ug_tensor_free(t);
        }
    } else if (!strcmp(r->what, "broadcast")) {
        ug_tensor *t = tensor_of(dev, r->rank, N), *gathered = NULL;
        int64_t all = RANKS * 5;
        note(r, 0, ug_comm_broadcast(r->comm, t, 1));
        ug_tensor_download(t, r->result, N * sizeof(float));
        ug_tensor *small = tensor_of(dev, r->rank, 5);
        if (ug_tensor_create(dev, UG_F32, 1, &all, &gathered) == UG_OK) {
            note(r, 1, ug_comm_all_gather(r->comm, small, gathered));
            ug_tensor_download(gathered, r->result + N, (size_t)all * sizeof(float));
        }
        note(r, 2, ug_comm_barrier(r->comm));
        ug_tensor_free(t);
        ug_tensor_free(small);
        ug_tensor_free(gathered);
    } else if (!strcmp(r->what, "reduce_scatter")) {
        /* each rank's N x 3 values: block b (N of them) for rank b */
        ug_tensor *in = tensor_of(dev, r->rank, RANKS * N), *out = NULL, *wrong = NULL;
        int64_t n = N, fewer = N - 1;
        if (ug_tensor_create(dev, UG_F32, 1, &n, &out) == UG_OK) {
            note(r, 0, ug_comm_reduce_scatter(r->comm, in, out));
            ug_tensor_download(out, r->result, N * sizeof(float));
        }
        if (ug_tensor_create(dev, UG_F32, 1, &fewer, &wrong) == UG_OK) /* in is not ranks x out */
            note(r, 1, ug_comm_reduce_scatter(r->comm, in, wrong));
        ug_tensor_free(in);
        ug_tensor_free(out);
        ug_tensor_free(wrong);
    } else if (!strcmp(r->what, "mismatch")) {
        ug_tensor *t = tensor_of(dev, r->rank, N - (r->rank == 2)); /* rank 2 has one element fewer */
        note(r, 0, ug_comm_all_reduce(r->comm, t, UG_COMM_SUM));
        ug_tensor_free(t);
    } else if (!strcmp(r->what, "refused")) {
        ug_tensor *t = NULL;
        int64_t n = 4;
        ug_tensor_create(dev, r->rank == 1 ? UG_I32 : UG_F32, 1, &n, &t);
        ug_comm_set_timeout(r->comm, 60.0); /* the others return long before */
        note(r, 0, ug_comm_all_reduce(r->comm, t, UG_COMM_SUM));
        note(r, 1, ug_comm_barrier(r->comm)); /* broken: at once */
        ug_tensor_free(t);
    } else if (!strcmp(r->what, "messages")) {
        /* Rank 0 and 2 send to each other before either receives; rank 1
         * sends rank 0 two tensors, which arrive in order. */
        const int peer = r->rank == 0 ? 2 : 0;
        ug_tensor *mine = tensor_of(dev, r->rank, N), *got = tensor_of(dev, 0, N), *second = tensor_of(dev, 0, 7);
        if (r->rank == 1) {
            ug_tensor *small = tensor_of(dev, 5, 7);
            note(r, 0, ug_comm_send(r->comm, mine, 0));
            note(r, 1, ug_comm_send(r->comm, small, 0));
            ug_tensor_free(small);
        } else {
            note(r, 0, ug_comm_send(r->comm, mine, peer));
            note(r, 1, ug_comm_recv(r->comm, got, peer));
            ug_tensor_download(got, r->result, N * sizeof(float));
        }
        if (r->rank == 0) {
            note(r, 2, ug_comm_recv(r->comm, got, 1));
            note(r, 3, ug_comm_recv(r->comm, second, 1));
            ug_tensor_download(got, r->result + N, N * sizeof(float));
            ug_tensor_download(second, r->result + 2 * N, 7 * sizeof(float));
        }
        ug_tensor_free(mine);
        ug_tensor_free(got);
        ug_tensor_free(second);
    } else if (!strcmp(r->what, "message_mismatch")) {
        ug_tensor *t = tensor_of(dev, r->rank, r->rank == 1 ? 5 : 4);
        ug_comm_set_timeout(r->comm, 60.0);
        if (r->rank == 1)
            note(r, 0, ug_comm_send(r->comm, t, 0));
        else if (r->rank == 0)
            note(r, 0, ug_comm_recv(r->comm, t, 1));
        note(r, 1, ug_comm_barrier(r->comm)); /* broken by rank 0's refusal: at once */
        ug_tensor_free(t);
    } else if (!strcmp(r->what, "split")) {
        /* colors by parity, keys reversed: ranks 2 and 0 in that order,
         * and rank 1 alone; then the parent again, the parts gone */
        ug_comm *part = NULL;
        note(r, 0, ug_comm_split(r->comm, r->rank % 2, -r->rank, NULL, &part));
        ug_tensor *t = tensor_of(dev, r->rank, N), *again = tensor_of(dev, r->rank, N);
        if (part) {
            r->result[0] = (float)ug_comm_rank(part);
            r->result[1] = (float)ug_comm_size(part);
            note(r, 1, ug_comm_all_reduce(part, t, UG_COMM_SUM));
            ug_tensor_download(t, r->result + N, N * sizeof(float));
            ug_comm_free(part);
        }
        note(r, 2, ug_comm_all_reduce(r->comm, again, UG_COMM_SUM));
        ug_tensor_download(again, r->result + 2 * N, N * sizeof(float));
        ug_tensor_free(t);
        ug_tensor_free(again);
    } else if (!strcmp(r->what, "split_refused")) {
        ug_comm *part = NULL;
        ug_comm_set_timeout(r->comm, 60.0); /* the others hear of rank 1's refusal at once */
        note(r, 0, ug_comm_split(r->comm, r->rank == 1 ? -1 : 0, 0, NULL, &part));
        ug_comm_free(part);
    } else if (!strcmp(r->what, "timeout")) {
        ug_comm_set_timeout(r->comm, 0.3);
        if (r->rank != 2) /* rank 2 never joins */
            note(r, 0, ug_comm_barrier(r->comm));
    }
    r->seconds = now() - start;
    return NULL;
}

/* Runs scenario what on a fresh group of RANKS ranks. */
static bool run_group(ug_device *dev, const char *what, rank_run *runs)
{
    ug_device *cpu = NULL;
    if (ug_device_open("cpu", &cpu) != UG_OK)
        return false;
    ug_device *devices[RANKS] = {cpu, dev, cpu};
    ug_comm *comms[RANKS];
    if (!CHECK_STATUS(ug_comm_local_create(RANKS, devices, comms), UG_OK)) {
        ug_device_close(cpu);
        return false;
    }
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++) {
        memset(&runs[r], 0, sizeof runs[r]);
        runs[r] = (rank_run){.comm = comms[r], .rank = r, .what = what};
        pthread_create(&threads[r], NULL, run_rank, &runs[r]);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
    for (int r = 0; r < RANKS; r++)
        ug_comm_free(comms[r]);
    ug_device_close(cpu);
    return true;
}

static rank_run runs[RANKS];

static void test_collectives(ug_device *dev)
{
    REQUIRE(run_group(dev, "collectives", runs));
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < 3; k++)
            CHECK_MSG(runs[r].status[k] == UG_OK, "rank %d, reduction %d: %s", r, k, runs[r].message[k]);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double sum = 0, max = -INFINITY;
        for (int r = 0; r < RANKS; r++) {
            sum += value(r, i);
            max = fmax(max, value(r, i));
        }
        const double want[3] = {sum, sum / RANKS, max};
        for (int k = 0; k < 3; k++) {
            double got = runs[0].result[k * N + i];
            worst = fmax(worst, fabs(got - want[k]) / fmax(1.0, fabs(want[k])));
        }
    }
    CHECK_MSG(worst < 1e-6, "the reductions are %g (relative) from the sums in double", worst);
    for (int r = 1; r < RANKS; r++)
        CHECK_MSG(!memcmp(runs[r].result, runs[0].result, 3 * N * sizeof(float)),
                  "rank %d's results are not bitwise rank 0's", r);
}

static void test_broadcast_gather_barrier(ug_device *dev)
{
    REQUIRE(run_group(dev, "broadcast", runs));
    for (int r = 0; r < RANKS; r++) {
        for (int k = 0; k < 3; k++)
            CHECK_MSG(runs[r].status[k] == UG_OK, "rank %d, call %d: %s", r, k, runs[r].message[k]);
        bool root = true, gathered = true;
        for (int i = 0; i < N; i++)
            root &= runs[r].result[i] == value(1, i);
        for (int q = 0; q < RANKS; q++)
            for (int i = 0; i < 5; i++)
                gathered &= runs[r].result[N + q * 5 + i] == value(q, i);
        CHECK_MSG(root, "rank %d did not receive rank 1's tensor", r);
        CHECK_MSG(gathered, "rank %d did not gather every rank's tensor in rank order", r);
    }
}

static void test_refusals(ug_device *dev)
{
    REQUIRE(run_group(dev, "mismatch", runs));
    for (int r = 0; r < RANKS; r++)
        CHECK_MSG(runs[r].status[0] == UG_ERR_INVALID_ARGUMENT && strstr(runs[r].message[0], "rank 2 asked for 1000"),
                  "rank %d: %s", r, runs[r].message[0]);
    REQUIRE(run_group(dev, "refused", runs));
    CHECK_EQ_I64(runs[1].status[0], UG_ERR_DTYPE);
    for (int r = 0; r < RANKS; r += 2) {
        CHECK_MSG(runs[r].status[0] != UG_OK && strstr(runs[r].message[0], "rank 1: ug_comm_all_reduce: tensor is i32"),
                  "rank %d: %s", r, runs[r].message[0]);
        CHECK_MSG(runs[r].seconds < 30.0, "rank %d waited %.1f s for a refused rank", r, runs[r].seconds);
    }
    for (int r = 0; r < RANKS; r++)
        CHECK_MSG(runs[r].status[1] != UG_OK && strstr(runs[r].message[1], "the group is broken"), "rank %d: %s", r,
                  runs[r].message[1]);
    /* A rank that never joins: the others return after the timeout, naming it. */
    REQUIRE(run_group(dev, "timeout", runs));
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(runs[r].status[0] != UG_OK && strstr(runs[r].message[0], "for rank 2"), "rank %d: %s", r,
                  runs[r].message[0]);
        CHECK_MSG(runs[r].seconds >= 0.25 && runs[r].seconds < 30.0, "rank %d returned after %.2f s", r,
                  runs[r].seconds);
    }
}

/* Point-to-point: the values sent, in the order sent, with two ranks
 * sending to each other at once; a tensor of another shape refused,
 * naming both, and the group broken for the others. */
static void test_messages(ug_device *dev)
{
    REQUIRE(run_group(dev, "messages", runs));
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < (r == 0 ? 4 : 2); k++)
            CHECK_MSG(runs[r].status[k] == UG_OK, "rank %d, call %d: %s", r, k, runs[r].message[k]);
    bool from2 = true, from0 = true, from1 = true, second = true;
    for (int i = 0; i < N; i++) {
        from2 &= runs[0].result[i] == value(2, i);
        from0 &= runs[2].result[i] == value(0, i);
        from1 &= runs[0].result[N + i] == value(1, i);
    }
    for (int i = 0; i < 7; i++)
        second &= runs[0].result[2 * N + i] == value(5, i);
    CHECK_MSG(from2 && from0, "ranks 0 and 2 did not receive each other's tensors");
    CHECK_MSG(from1 && second, "rank 0 did not receive rank 1's two tensors in the order sent");

    REQUIRE(run_group(dev, "message_mismatch", runs));
    CHECK_MSG(runs[0].status[0] == UG_ERR_SHAPE && strstr(runs[0].message[0], "rank 1 sent f32 [5]; rank 0 receives "
                                                                             "into f32 [4]"),
              "rank 0: %s", runs[0].message[0]);
    for (int r = 0; r < RANKS; r++)
        CHECK_MSG(runs[r].status[1] != UG_OK && strstr(runs[r].message[1], "the group is broken"), "rank %d: %s", r,
                  runs[r].message[1]);
}

/* Each rank's block of every rank's tensor, summed in rank order: the
 * same bits as the all-reduce gives; out of the wrong size refused. */
static void test_reduce_scatter(ug_device *dev)
{
    REQUIRE(run_group(dev, "reduce_scatter", runs));
    for (int r = 0; r < RANKS; r++) {
        CHECK_MSG(runs[r].status[0] == UG_OK, "rank %d: %s", r, runs[r].message[0]);
        bool same = true;
        for (int i = 0; i < N; i++) {
            const int at = r * N + i;
            same &= runs[r].result[i] == value(0, at) + value(1, at) + value(2, at);
        }
        CHECK_MSG(same, "rank %d's block is not the ranks' sum in rank order", r);
        CHECK_MSG(runs[r].status[1] == UG_ERR_SHAPE && strstr(runs[r].message[1], "it needs 3000 (3 ranks x out's "
                                                                                "1000)"),
                  "rank %d, out of 1000 for in of 3003: %s", r, runs[r].message[1]);
    }
}

/* Three ranks split by parity, keys reversed: each part's ranks, sizes
 * and sums; the parent whole after; a rank's color refused, and the
 * others told. */
static void test_split(ug_device *dev)
{
    REQUIRE(run_group(dev, "split", runs));
    static const int want_rank[RANKS] = {1, 0, 0}, want_size[RANKS] = {2, 1, 2};
    for (int r = 0; r < RANKS; r++) {
        for (int k = 0; k < 3; k++)
            CHECK_MSG(runs[r].status[k] == UG_OK, "rank %d, call %d: %s", r, k, runs[r].message[k]);
        CHECK_MSG(runs[r].result[0] == (float)want_rank[r] && runs[r].result[1] == (float)want_size[r],
                  "rank %d is rank %g of %g in its part; want %d of %d", r, runs[r].result[0], runs[r].result[1],
                  want_rank[r], want_size[r]);
        bool part_sum = true, whole_sum = true;
        for (int i = 0; i < N; i++) {
            const float want = r == 1 ? value(1, i) : value(0, i) + value(2, i);
            part_sum &= runs[r].result[N + i] == want;
            whole_sum &= runs[r].result[2 * N + i] == value(0, i) + value(1, i) + value(2, i);
        }
        CHECK_MSG(part_sum, "rank %d: its part's all-reduce is not its ranks' sum", r);
        CHECK_MSG(whole_sum, "rank %d: the parent's all-reduce after the split is not the three ranks' sum", r);
    }
    REQUIRE(run_group(dev, "split_refused", runs));
    CHECK_MSG(runs[1].status[0] == UG_ERR_INVALID_ARGUMENT && strstr(runs[1].message[0], "color -1"), "rank 1: %s",
              runs[1].message[0]);
    for (int r = 0; r < RANKS; r += 2)
        CHECK_MSG(runs[r].status[0] != UG_OK && strstr(runs[r].message[0], "color -1") && runs[r].seconds < 30.0,
                  "rank %d: %s", r, runs[r].message[0]);
}

static void test_arguments(ug_device *dev)
{
    ug_comm *comms[2];
    ug_device *devices[2] = {dev, dev};
    CHECK_STATUS(ug_comm_local_create(0, devices, comms), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_comm_local_create(2, NULL, comms), UG_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(ug_comm_local_create(2, devices, comms));
    CHECK_EQ_I64(ug_comm_rank(comms[1]), 1);
    CHECK_EQ_I64(ug_comm_size(comms[0]), 2);
    CHECK(ug_comm_device(comms[0]) == dev && !strcmp(ug_comm_engine(comms[0]), "in-process"));
    CHECK_STATUS(ug_comm_set_timeout(comms[0], 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_comm_set_timeout(comms[0], NAN), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_comm_set_overlap(NULL, false), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_comm_all_reduce(NULL, NULL, UG_COMM_SUM), UG_ERR_INVALID_ARGUMENT);
    /* Rank 1 leaves: rank 0's next collective fails at once, naming it. */
    ug_comm_free(comms[1]);
    ug_tensor *t = th_track(tensor_of(dev, 0, 8));
    if (CHECK_STATUS(ug_comm_all_reduce(comms[0], t, UG_COMM_SUM), UG_ERR_BACKEND))
        CHECK_ERROR_HAS("rank 1: it has left the group");
    ug_comm_free(comms[0]);
    ug_comm_free(NULL);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(collectives),
        TH_DEVICE_TEST(broadcast_gather_barrier),
        TH_DEVICE_TEST(refusals),
        TH_DEVICE_TEST(messages),
        TH_DEVICE_TEST(reduce_scatter),
        TH_DEVICE_TEST(split),
        TH_DEVICE_TEST(arguments),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
