/* ug-bench gemm: GFLOP/s of ug_matmul on each device for square products and
 * the products of training an MLP 784-500-10 at batch 64, beside OpenBLAS's
 * cblas_sgemm on the host for the same shapes in the same run. Each device
 * result is also checked against the host's, so a fast wrong kernel shows. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "wrap.h"

#define MAX_DEVICES 64
#define MAX_SHAPES 16
/* Relative to the largest |C|: f32 sums over k <= 2048 stay well inside. */
#define TOLERANCE 1e-3

typedef struct gemm_shape {
    const char *name;
    int64_t m, n, k;
    bool trans_a, trans_b;
    bool large; /* left out by --quick */
} gemm_shape;

/* C = op(A) op(B) with op(A) m x k and op(B) k x n. The MLP rows are the
 * products one training step of 784-500-10 at batch 64 runs: X [64,784],
 * W1 [500,784], W2 [10,500] stored as PyTorch does ([out, in]). */
static const gemm_shape all_shapes[] = {
    {"square 256", 256, 256, 256, false, false, false},
    {"square 512", 512, 512, 512, false, false, false},
    {"square 1024", 1024, 1024, 1024, false, false, true},
    {"square 2048", 2048, 2048, 2048, false, false, true},
    {"fc1 fwd X.W1^T", 64, 500, 784, false, true, false},
    {"fc1 dW dY^T.X", 500, 784, 64, true, false, false},
    {"fc1 dX dY.W1", 64, 784, 500, false, false, false},
    {"fc2 fwd H.W2^T", 64, 10, 500, false, true, false},
    {"fc2 dW dY^T.H", 10, 500, 64, true, false, false},
    {"fc2 dX dY.W2", 64, 500, 10, false, false, false},
};
#define SHAPE_COUNT (sizeof all_shapes / sizeof all_shapes[0])

typedef struct host_case {
    const gemm_shape *shape;
    float *a, *b, *c;
    double cblas_seconds; /* per call, measured beside the current device row */
    long cblas_reps;
} host_case;

typedef struct device_case {
    ug_device *device;
    ug_tensor *a, *b;
    const gemm_shape *shape;
} device_case;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench gemm [--device NAME] [--csv FILE] [--quick] [--time SECONDS]\n"
            "GFLOP/s of ug_matmul (f32) on each device (or only NAME: cpu, opencl:0,\n"
            "hip:0, cuda:0, auto) beside OpenBLAS cblas_sgemm on the host, for square\n"
            "sizes 256-2048 and the products of an MLP 784-500-10 at batch 64.\n"
            "  --csv FILE      also write the rows to FILE\n"
            "  --quick         leave out sizes 1024 and 2048 and time for 0.05 s\n"
            "  --time SECONDS  time each product for about this long (default 0.3)\n");
}

static double gflops(const gemm_shape *s, double seconds)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / seconds * 1e-9;
}

static bool run_cblas(void *ctx)
{
    host_case *h = ctx;
    const gemm_shape *s = h->shape;
    cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans,
                s->trans_b ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f,
                h->a, (int)(s->trans_a ? s->m : s->k), h->b, (int)(s->trans_b ? s->k : s->n),
                0.0f, h->c, (int)s->n);
    return true;
}

static bool run_matmul(void *ctx)
{
    device_case *d = ctx;
    ug_tensor *c = NULL;
    /* The output goes back to the pool at once; the device queue is in order,
     * so the next call reusing the block waits for this one. */
    if (ug_matmul(d->a, d->b, d->shape->trans_a, d->shape->trans_b, &c) != UG_OK)
        return false;
    ug_tensor_free(c);
    return true;
}

static bool sync_device(void *ctx)
{
    device_case *d = ctx;
    return ug_device_synchronize(d->device) == UG_OK;
}

/* Largest |device - host| over the largest |host|. */
static bool check_result(device_case *d, const host_case *h, double *error)
{
    const gemm_shape *s = h->shape;
    size_t count = (size_t)(s->m * s->n);
    float *out = malloc(count * sizeof *out);
    ug_tensor *c = NULL;
    if (!out) {
        fprintf(stderr, "ug-bench: out of host memory\n");
        return false;
    }
    bool ok = ug_matmul(d->a, d->b, s->trans_a, s->trans_b, &c) == UG_OK &&
              ug_tensor_download(c, out, count * sizeof *out) == UG_OK;
    if (ok) {
        double diff = 0.0, scale = 0.0;
        for (size_t i = 0; i < count; i++) {
            double e = fabs((double)out[i] - (double)h->c[i]);
            /* NaN must count as a mismatch, which a plain > would not. */
            diff = (e > diff || e != e) ? e : diff;
            scale = fabs((double)h->c[i]) > scale ? fabs((double)h->c[i]) : scale;
        }
        *error = diff / (scale > 0.0 ? scale : 1.0);
    } else {
        bench_fail("ug_matmul check");
    }
    ug_tensor_free(c);
    free(out);
    return ok;
}

static void fill(float *x, size_t n, uint32_t seed)
{
    uint32_t state = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

int bench_gemm(int argc, char **argv)
{
    const char *only = NULL, *csv_path = NULL;
    bool quick = false;
    double target = 0.3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
            csv_path = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc) {
            char *end;
            target = strtod(argv[++i], &end);
            if (*end || !(target > 0.0 && target < 3600.0)) {
                fprintf(stderr, "ug-bench gemm: --time needs seconds, e.g. 0.3\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ug-bench gemm: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (quick && target == 0.3)
        target = 0.05;

    static char ids[MAX_DEVICES][32];
    int device_count = bench_device_ids(only, ids, MAX_DEVICES);
    if (device_count < 0)
        return 2;

    FILE *csv = NULL;
    if (csv_path) {
        csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "ug-bench gemm: cannot write %s: %s\n", csv_path, strerror(errno));
            return 2;
        }
        fprintf(csv, "device,product,m,n,k,trans_a,trans_b,reps,seconds_per_call,gflops,"
                     "cblas_gflops,ratio,max_rel_error\n");
    }

    /* Host operands, shared by every device. */
    host_case hosts[MAX_SHAPES];
    int shape_count = 0;
    int status = 0;
    print_wrapped(stdout, "host BLAS: ", openblas_get_config());
    printf("%d thread(s); timing each product for ~%.2f s\n", bench_cpu_threads(), target);
    for (size_t i = 0; i < SHAPE_COUNT; i++) {
        const gemm_shape *s = &all_shapes[i];
        if (quick && s->large)
            continue;
        host_case *h = &hosts[shape_count++];
        memset(h, 0, sizeof *h);
        h->shape = s;
        h->a = malloc((size_t)(s->m * s->k) * sizeof(float));
        h->b = malloc((size_t)(s->k * s->n) * sizeof(float));
        h->c = malloc((size_t)(s->m * s->n) * sizeof(float));
        if (!h->a || !h->b || !h->c) {
            fprintf(stderr, "ug-bench gemm: out of host memory\n");
            status = 2;
            goto done;
        }
        fill(h->a, (size_t)(s->m * s->k), 2 * (uint32_t)i + 1);
        fill(h->b, (size_t)(s->k * s->n), 2 * (uint32_t)i + 2);
    }

    /* Within 80 columns; the repetitions are in the CSV. */
    printf("\n%-8s %-16s %5s %5s %5s %2s %8s %8s %7s %7s\n", "DEVICE", "PRODUCT", "M", "N", "K", "OP",
           "GFLOP/s", "OpenBLAS", "RATIO", "REL.ERR");
    for (int d = 0; d < device_count; d++) {
        ug_device *device = NULL;
        if (ug_device_open(ids[d], &device) != UG_OK) {
            status = bench_fail(ids[d]);
            goto done;
        }
        for (int i = 0; i < shape_count; i++) {
            host_case *h = &hosts[i];
            const gemm_shape *s = h->shape;
            const int64_t a_shape[2] = {s->trans_a ? s->k : s->m, s->trans_a ? s->m : s->k};
            const int64_t b_shape[2] = {s->trans_b ? s->n : s->k, s->trans_b ? s->k : s->n};
            device_case dc = {device, NULL, NULL, s};
            double seconds = 0.0, error = 0.0;
            long reps = 0;
            /* OpenBLAS is timed right before each device row, not once up
             * front, so both see the same machine load and clock. */
            (void)bench_time_host_blas(run_cblas, h, 2, target, &h->cblas_seconds, &h->cblas_reps);
            bool ok = ug_tensor_from_host(device, UG_F32, 2, a_shape, h->a, &dc.a) == UG_OK &&
                      ug_tensor_from_host(device, UG_F32, 2, b_shape, h->b, &dc.b) == UG_OK;
            if (!ok)
                status = bench_fail("upload");
            /* Two warm-up calls: the first may build kernels (seconds on
             * POCL), the second fills the pool's cache. */
            if (ok && !bench_time(run_matmul, sync_device, &dc, 2, target, &seconds, &reps)) {
                status = bench_fail("ug_matmul");
                ok = false;
            }
            if (ok && !check_result(&dc, h, &error)) {
                status = 2;
                ok = false;
            }
            ug_tensor_free(dc.a);
            ug_tensor_free(dc.b);
            if (!ok) {
                ug_device_close(device);
                goto done;
            }
            double rate = gflops(s, seconds), host_rate = gflops(s, h->cblas_seconds);
            bool match = error <= TOLERANCE;
            char op[3] = {s->trans_a ? 'T' : 'N', s->trans_b ? 'T' : 'N', 0};
            printf("%-8s %-16s %5" PRId64 " %5" PRId64 " %5" PRId64 " %2s %8.2f %8.2f %7.3f %7.1e%s\n", ids[d],
                   s->name, s->m, s->n, s->k, op, rate, host_rate, rate / host_rate, error,
                   match ? "" : " MISMATCH");
            fflush(stdout);
            if (csv)
                fprintf(csv, "%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%d,%d,%ld,%.9g,%.4f,%.4f,"
                             "%.5f,%.3g\n",
                        ids[d], s->name, s->m, s->n, s->k, s->trans_a, s->trans_b, reps, seconds,
                        rate, host_rate, rate / host_rate, error);
            if (!match && status == 0)
                status = 1;
        }
        ug_device_close(device);
    }
    if (status == 1)
        fprintf(stderr, "ug-bench gemm: a device's result differs from OpenBLAS's by more "
                        "than %.0e (relative)\n", TOLERANCE);

done:
    for (int i = 0; i < shape_count; i++) {
        free(hosts[i].a);
        free(hosts[i].b);
        free(hosts[i].c);
    }
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "ug-bench gemm: writing %s failed: %s\n", csv_path, strerror(errno));
        status = 2;
    }
    return status;
}
