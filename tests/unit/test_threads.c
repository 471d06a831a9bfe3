/* One device used from several threads at once: opening and closing it,
 * pool allocations, eager ops and transfers, each thread checking its own
 * results. Built under ThreadSanitizer in CI (UG_SANITIZE_THREAD). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { THREADS = 4, ROUNDS = 40, N = 3000 };

typedef struct worker {
    const char *device;
    int index;
    int failures;
    char message[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    ug_device *dev = NULL;
    if (ug_device_open(w->device, &dev) != UG_OK) {
        snprintf(w->message, sizeof w->message, "open: %s", ug_last_error());
        w->failures++;
        return NULL;
    }
    static float host[THREADS][N], out[THREADS][N];
    float *x = host[w->index], *y = out[w->index];
    int64_t n = N;
    for (int round = 0; round < ROUNDS && !w->failures; round++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)(w->index * 1000 + round + i % 17);
        ug_tensor *a = NULL, *b = NULL, *s = NULL;
        ug_status st = ug_tensor_from_host(dev, UG_F32, 1, &n, x, &a);
        if (st == UG_OK) st = ug_add(a, a, &b);
        if (st == UG_OK) st = ug_scale_shift(b, 0.5f, 1.0f, &s);
        if (st == UG_OK) st = ug_tensor_download(s, y, sizeof out[0]);
        for (int i = 0; st == UG_OK && i < N; i++)
            if (y[i] != x[i] + 1.0f) {
                snprintf(w->message, sizeof w->message, "round %d element %d is %g, expected %g",
                         round, i, (double)y[i], (double)(x[i] + 1.0f));
                w->failures++;
                break;
            }
        if (st != UG_OK) {
            snprintf(w->message, sizeof w->message, "round %d: %s", round, ug_last_error());
            w->failures++;
        }
        ug_tensor_free(s);
        ug_tensor_free(b);
        ug_tensor_free(a);
    }
    ug_device_close(dev);
    return NULL;
}

static void test_one_device_many_threads(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.device = info.id, .index = i};
        REQUIRE(pthread_create(&t[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        CHECK_MSG(w[i].failures == 0, "thread %d: %s", i, w[i].message);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(one_device_many_threads),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
