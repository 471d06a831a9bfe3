/* The HIP and CUDA backends are modules loaded at run time. These tests
 * check what a program sees of them on this machine: a module that was built
 * loads, and without a GPU or driver it reports zero devices with a reason
 * while every other backend keeps working. With UG_TEST_BAD_MODULES set, the
 * modules found first are broken ones (not a shared object; a wrong
 * interface version), and each must be refused with its reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#ifndef UG_TEST_HIP_BUILT
#define UG_TEST_HIP_BUILT 0
#endif
#ifndef UG_TEST_CUDA_BUILT
#define UG_TEST_CUDA_BUILT 0
#endif

static int find_backend(const char *name, int *count, const char **reason)
{
    for (int b = 0; b < ug_backend_count(); b++) {
        const char *n = NULL;
        if (ug_backend_query(b, &n, count, reason) == UG_OK && strcmp(n, name) == 0)
            return b;
    }
    return -1;
}

static void check_module(const char *name, bool built)
{
    int count = 0;
    const char *reason = NULL;
    REQUIRE(find_backend(name, &count, &reason) >= 0);
    printf("    %s: %d device(s)%s%s\n", name, count, count ? "" : ", reason: ", count ? "" : reason);
    if (getenv("UG_TEST_BAD_MODULES")) {
        CHECK(count == 0);
        CHECK_MSG(strstr(reason, getenv("UG_TEST_BAD_MODULES")) != NULL,
                  "%s's reason should name the broken module in %s: %s", name, getenv("UG_TEST_BAD_MODULES"), reason);
        CHECK_MSG(strstr(reason, strcmp(name, "hip") == 0 ? "did not load" : "interface version") != NULL,
                  "%s's reason: %s", name, reason);
        return;
    }
    if (!built) {
        CHECK_MSG(strstr(reason, "not found") != NULL, "%s was not built, so its module is absent: %s", name, reason);
        return;
    }
    /* Built: it must have loaded; only a missing GPU or driver may leave it without devices. */
    CHECK_MSG(strstr(reason, "not found") == NULL && strstr(reason, "did not load") == NULL,
              "the %s module was built but did not load: %s", name, reason);
    char id[32];
    snprintf(id, sizeof id, "%s:0", name);
    ug_device *dev = NULL;
    ug_status st = ug_device_open(id, &dev);
    if (count == 0) {
        CHECK(strlen(reason) > 0);
        CHECK(st == UG_ERR_DEVICE);
        CHECK_MSG(strstr(ug_last_error(), reason) != NULL, "opening %s should repeat the reason: %s", id,
                  ug_last_error());
    } else {
        CHECK(st == UG_OK);
        ug_device_info info;
        CHECK(ug_device_get_info(dev, &info) == UG_OK && strcmp(info.backend, name) == 0);
        ug_device_close(dev);
    }
}

static void test_hip_module(ug_device *device)
{
    (void)device;
    check_module("hip", UG_TEST_HIP_BUILT);
}

static void test_cuda_module(ug_device *device)
{
    (void)device;
    check_module("cuda", UG_TEST_CUDA_BUILT);
}

/* The other backends work whatever the modules did. */
static void test_others_unaffected(ug_device *device)
{
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, got[3] = {0};
    int64_t n = 3;
    ug_tensor *ta = NULL, *tb = NULL, *sum = NULL;
    REQUIRE(ug_tensor_from_host(device, UG_F32, 1, &n, a, &ta) == UG_OK);
    if (ug_tensor_from_host(device, UG_F32, 1, &n, b, &tb) == UG_OK && ug_add(ta, tb, &sum) == UG_OK &&
        ug_tensor_download(sum, got, sizeof got) == UG_OK)
        CHECK(got[0] == 11 && got[1] == 22 && got[2] == 33);
    else
        th_fail(TH_LOC, "add on %s: %s", ug_device_name(device), ug_last_error());
    ug_tensor_free(ta);
    ug_tensor_free(tb);
    ug_tensor_free(sum);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(hip_module),
        TH_HOST_TEST(cuda_module),
        TH_DEVICE_TEST(others_unaffected),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
