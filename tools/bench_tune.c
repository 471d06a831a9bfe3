/* ug-bench tune: measures each device's tunable choices now (CLBlast's
 * GEMM parameters on OpenCL) and caches them, so that no later process
 * pays for it at its first product: ug_device_autotune. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define MAX_DEVICES 16

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-bench tune [--device NAME]\n"
            "Measures each device's tunable choices now (or only NAME's) and saves them\n"
            "in the tuning cache ($XDG_CACHE_HOME/unigrad, else ~/.cache/unigrad), keyed by\n"
            "device, driver and library version. Without it, a device is tuned at its first\n"
            "matrix product (UG_AUTOTUNE=0: never). On OpenCL: CLBlast's SGEMM kernel\n"
            "parameters, a few candidate sets timed on a training step's three products.\n"
            "On CUDA and HIP devices it lists the GEMM path (vendor library or own kernel)\n"
            "chosen for each shape in this process and cuDNN's or MIOpen's algorithm for\n"
            "each convolution shape cached so far (each is timed at the shape's first use).\n");
}

int bench_tune(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ug-bench tune: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    static char ids[MAX_DEVICES][32];
    int device_count = bench_device_ids(only, ids, MAX_DEVICES);
    if (device_count < 0)
        return 2;
    int failures = 0;
    for (int d = 0; d < device_count; d++) {
        ug_device *device = NULL;
        static char report[1 << 20];
        if (ug_device_open(ids[d], &device) != UG_OK) {
            failures++;
            bench_fail(ids[d]);
            continue;
        }
        if (ug_device_autotune(device, report, sizeof report) != UG_OK) {
            failures++;
            bench_fail(ids[d]);
        }
        printf("%s", report);
        fflush(stdout);
        ug_device_close(device);
    }
    return failures ? 1 : 0;
}
