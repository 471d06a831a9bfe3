/* ug-devices: lists every device of every backend, runs a small self-test on
 * each, and says why a backend has no device. Exit status: 0 when every
 * self-test passes, 1 when one fails, 2 on a library or usage error. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "json_string.h"
#include "wrap.h"
#include "unigrad/unigrad.h"

#define SELFTEST_N 1000
#define MAX_NAME 33 /* the row stays within 80 columns */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ug-devices [--json] [--no-self-test] [--help]\n"
            "Lists the devices unigrad can use, tests each one, and gives the\n"
            "reason for every backend that has no device.\n"
            "  --json          machine-readable output\n"
            "  --no-self-test  list only\n"
            "Environment: UG_BACKEND_PATH (where the HIP/CUDA modules are),\n"
            "OCL_ICD_VENDORS (OpenCL drivers), UG_MEMORY_LIMIT.\n");
}

static void format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = (double)bytes;
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, len, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
}

/* Uploads x, computes 2x + 1 and then (2x + 1) + x on the device, and
 * compares with the host. Returns false and fills why on a mismatch or a
 * library error. */
static bool self_test(const char *id, char *why, size_t why_len)
{
    static float host[SELFTEST_N], result[SELFTEST_N];
    ug_device *device = NULL;
    ug_tensor *x = NULL, *y = NULL, *z = NULL;
    bool ok = false;
    const int64_t shape[1] = {SELFTEST_N};

    for (int i = 0; i < SELFTEST_N; i++)
        host[i] = (float)(i % 97) * 0.25f - 12.0f;
    if (ug_device_open(id, &device) != UG_OK ||
        ug_tensor_from_host(device, UG_F32, 1, shape, host, &x) != UG_OK ||
        ug_scale_shift(x, 2.0f, 1.0f, &y) != UG_OK || ug_add(y, x, &z) != UG_OK ||
        ug_tensor_download(z, result, sizeof result) != UG_OK) {
        snprintf(why, why_len, "%s", ug_last_error());
        goto done;
    }
    ok = true;
    for (int i = 0; i < SELFTEST_N; i++) {
        /* Every value is exact in f32 (quarter steps, small magnitudes). */
        float expected = 3.0f * host[i] + 1.0f;
        if (result[i] != expected) {
            snprintf(why, why_len, "element %d is %g, expected %g", i, (double)result[i],
                     (double)expected);
            ok = false;
            break;
        }
    }
done:
    ug_tensor_free(z);
    ug_tensor_free(y);
    ug_tensor_free(x);
    if (device)
        ug_device_close(device);
    return ok;
}

int main(int argc, char **argv)
{
    bool json = false, run_tests = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--no-self-test") == 0) {
            run_tests = false;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ug-devices: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    int count = ug_device_count();
    int failures = 0;
    /* The name column as wide as its longest entry, capped to keep a row
     * within 80 columns; the vendor and the driver, often long, go on
     * lines of their own under the row. */
    int name_w = 4;
    for (int i = 0; i < count && !json; i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) != UG_OK) {
            fprintf(stderr, "ug-devices: device %d: %s\n", i, ug_last_error());
            return 2;
        }
        int n = (int)strlen(info.name);
        name_w = n > name_w ? (n < MAX_NAME ? n : MAX_NAME) : name_w;
    }
    if (!json) {
        printf("%-9s %-7s %-*s %10s %5s %4s %s\n", "ID", "BACKEND", name_w, "NAME", "MEMORY", "CUs", "FP16", "BF16");
    } else {
        printf("{\n  \"devices\": [");
    }
    for (int i = 0; i < count; i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) != UG_OK) {
            fprintf(stderr, "ug-devices: device %d: %s\n", i, ug_last_error());
            return 2;
        }
        char memory[32];
        format_bytes(info.global_memory, memory, sizeof memory);
        if (!json) {
            printf("%-9s %-7s %-*.*s %10s %5" PRIu32 " %4s %s\n", info.id, info.backend, name_w, name_w, info.name,
                   memory, info.compute_units, info.fp16 ? "yes" : "no", info.bf16 ? "yes" : "no");
            if ((int)strlen(info.name) > name_w) /* cut in the row: whole under it */
                print_wrapped(stdout, "          name: ", info.name);
            char vendor[sizeof info.vendor + 64];
            int at = snprintf(vendor, sizeof vendor, "%s", info.vendor);
            if (info.max_work_group > 1)
                snprintf(vendor + at, sizeof vendor - (size_t)at, "; work-groups of up to %" PRIu64,
                         info.max_work_group);
            print_wrapped(stdout, "          vendor: ", vendor);
            print_wrapped(stdout, "          driver: ", info.driver);
            continue;
        }
        printf("%s\n    {\"id\": ", i ? "," : "");
        json_string(stdout, info.id);
        printf(", \"backend\": ");
        json_string(stdout, info.backend);
        printf(", \"vendor\": ");
        json_string(stdout, info.vendor);
        printf(", \"name\": ");
        json_string(stdout, info.name);
        printf(", \"driver\": ");
        json_string(stdout, info.driver);
        printf(", \"global_memory\": %" PRIu64 ", \"max_allocation\": %" PRIu64
               ", \"compute_units\": %" PRIu32 ", \"max_work_group\": %" PRIu64
               ", \"fp16\": %s, \"bf16\": %s, \"is_gpu\": %s}",
               info.global_memory, info.max_allocation, info.compute_units,
               info.max_work_group, info.fp16 ? "true" : "false", info.bf16 ? "true" : "false",
               info.is_gpu ? "true" : "false");
    }
    if (json)
        printf("\n  ],\n  \"self_test\": [");

    if (run_tests) {
        if (!json && count > 0)
            printf("\nSelf-test (3x + 1 over %d elements, uploaded and read back):\n",
                   SELFTEST_N);
        for (int i = 0; i < count; i++) {
            ug_device_info info;
            char why[512] = "";
            if (ug_device_info_at(i, &info) != UG_OK) {
                fprintf(stderr, "ug-devices: device %d: %s\n", i, ug_last_error());
                return 2;
            }
            bool ok = self_test(info.id, why, sizeof why);
            failures += !ok;
            if (!json) {
                printf("  %-10s %s%s%s\n", info.id, ok ? "PASS" : "FAIL", ok ? "" : ": ", why);
            } else {
                printf("%s\n    {\"id\": ", i ? "," : "");
                json_string(stdout, info.id);
                printf(", \"pass\": %s, \"error\": ", ok ? "true" : "false");
                json_string(stdout, why);
                printf("}");
            }
        }
    }
    if (json)
        printf("\n  ],\n  \"backends\": [");

    int backends = ug_backend_count();
    bool header = false;
    for (int b = 0; b < backends; b++) {
        const char *name = NULL, *reason = NULL;
        int devices = 0;
        if (ug_backend_query(b, &name, &devices, &reason) != UG_OK) {
            fprintf(stderr, "ug-devices: backend %d: %s\n", b, ug_last_error());
            return 2;
        }
        if (json) {
            printf("%s\n    {\"name\": ", b ? "," : "");
            json_string(stdout, name ? name : "");
            printf(", \"devices\": %d, \"reason\": ", devices);
            json_string(stdout, devices == 0 && reason ? reason : "");
            printf("}");
            continue;
        }
        if (devices > 0)
            continue;
        if (!header) {
            printf("\nBackends without a device:\n");
            header = true;
        }
        char prefix[32];
        snprintf(prefix, sizeof prefix, "  %-7s ", name ? name : "?");
        print_wrapped(stdout, prefix, reason && *reason ? reason : "no devices");
    }
    if (json)
        printf("\n  ]\n}\n");
    else if (failures)
        printf("\n%d device(s) failed the self-test.\n", failures);
    return failures ? 1 : 0;
}
