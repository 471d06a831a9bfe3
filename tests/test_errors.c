/* Error cases: each call must fail with the exact status, leave *out NULL,
 * say the key facts in ug_last_error(), and leak nothing (the harness
 * checks the pool after every test). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* Case-insensitive substring test (for "NULL" / "null"). */
static bool has_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; p && *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* A NULL-argument failure: INVALID_ARGUMENT, and the message names the
 * call (fragment) and says something is NULL. */
#define CHECK_NULL_ERROR(expr, fragment)                                               \
    do {                                                                               \
        ug_clear_error();                                                              \
        if (CHECK_STATUS(expr, UG_ERR_INVALID_ARGUMENT)) {                             \
            const char *m_ = ug_last_error();                                          \
            CHECK_MSG(has_ci(m_, "null") && th_contains(m_, fragment),                 \
                      "%s: message should name %s and say NULL: \"%s\"", #expr, fragment, m_); \
        }                                                                              \
    } while (0)

typedef ug_status (*binary_fn)(const ug_tensor *, const ug_tensor *, ug_tensor **);
typedef ug_status (*unary_fn)(const ug_tensor *, ug_tensor **);
static const struct {
    binary_fn fn;
    const char *name;
} binary_ops[] = {{ug_add, "add"}, {ug_sub, "sub"},         {ug_mul, "mul"},
                  {ug_div, "div"}, {ug_maximum, "maximum"}, {ug_minimum, "minimum"}};
static const struct {
    unary_fn fn;
    const char *name;
} unary_ops[] = {{ug_neg, "neg"},         {ug_abs, "abs"},   {ug_exp, "exp"},
                 {ug_log, "log"},         {ug_sqrt, "sqrt"}, {ug_relu, "relu"},
                 {ug_sigmoid, "sigmoid"}, {ug_tanh, "tanh"}, {ug_gelu, "gelu"},
                 {ug_silu, "silu"},
                 {ug_softmax, "softmax"}, {ug_log_softmax, "log_softmax"},
                 {ug_transpose, "transpose"}, {ug_clone, "clone"}};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static ug_tensor *f32_tensor(ug_device *dev, int ndim, const int64_t *shape)
{
    ug_tensor *t = NULL;
    if (!CHECK_STATUS(ug_tensor_create(dev, UG_F32, ndim, shape, &t), UG_OK))
        return NULL;
    th_track(t);
    CHECK_OK(ug_fill(t, 1.0f));
    return t;
}

static void test_null_handles(ug_device *dev)
{
    int64_t shape[] = {2, 3};
    ug_tensor *a = f32_tensor(dev, 2, shape);
    REQUIRE(a);
    ug_tensor *out = NULL;
    for (size_t i = 0; i < COUNT(binary_ops); i++) {
        th_context("%s", binary_ops[i].name);
        CHECK_NULL_ERROR(binary_ops[i].fn(NULL, a, &out), binary_ops[i].name);
        CHECK_NULL_ERROR(binary_ops[i].fn(a, NULL, &out), binary_ops[i].name);
        CHECK_NULL_ERROR(binary_ops[i].fn(a, a, NULL), binary_ops[i].name);
        CHECK(out == NULL);
    }
    for (size_t i = 0; i < COUNT(unary_ops); i++) {
        th_context("%s", unary_ops[i].name);
        CHECK_NULL_ERROR(unary_ops[i].fn(NULL, &out), unary_ops[i].name);
        CHECK_NULL_ERROR(unary_ops[i].fn(a, NULL), unary_ops[i].name);
        CHECK(out == NULL);
    }
    th_context("other ops");
    CHECK_NULL_ERROR(ug_scale_shift(NULL, 1.0f, 0.0f, &out), "scale_shift");
    CHECK_NULL_ERROR(ug_scale_shift(a, 1.0f, 0.0f, NULL), "scale_shift");
    CHECK_NULL_ERROR(ug_fill(NULL, 1.0f), "fill");
    CHECK_NULL_ERROR(ug_random_uniform(NULL, 1, 0, 0.0f, 1.0f), "random");
    CHECK_NULL_ERROR(ug_random_normal(NULL, 1, 0, 0.0f, 1.0f), "random");
    CHECK_NULL_ERROR(ug_reduce(NULL, UG_REDUCE_SUM, 0, false, false, &out), "sum");
    CHECK_NULL_ERROR(ug_reduce(a, UG_REDUCE_SUM, 0, false, false, NULL), "sum");
    CHECK_NULL_ERROR(ug_sum(NULL, 0, &out), "sum");
    CHECK_NULL_ERROR(ug_sum_all(NULL, &out), "sum");
    CHECK_NULL_ERROR(ug_mean(NULL, 0, &out), "mean");
    CHECK_NULL_ERROR(ug_mean_all(NULL, &out), "mean");
    CHECK_NULL_ERROR(ug_max(NULL, 0, &out), "max");
    CHECK_NULL_ERROR(ug_argmax(NULL, 0, &out), "argmax");
    CHECK_NULL_ERROR(ug_matmul(NULL, a, false, true, &out), "matmul");
    CHECK_NULL_ERROR(ug_matmul(a, NULL, false, true, &out), "matmul");
    CHECK_NULL_ERROR(ug_matmul(a, a, false, true, NULL), "matmul");
    CHECK_NULL_ERROR(ug_cast(NULL, UG_F16, &out), "cast");
    CHECK_NULL_ERROR(ug_cast(a, UG_F16, NULL), "cast");
    CHECK(out == NULL);

    th_context("tensor API");
    float host[6] = {0};
    CHECK_NULL_ERROR(ug_tensor_create(NULL, UG_F32, 2, shape, &out), "device");
    CHECK_NULL_ERROR(ug_tensor_create(dev, UG_F32, 2, shape, NULL), "out");
    CHECK_NULL_ERROR(ug_tensor_create(dev, UG_F32, 2, NULL, &out), "shape");
    CHECK_NULL_ERROR(ug_tensor_from_host(dev, UG_F32, 2, shape, NULL, &out), "data");
    CHECK_NULL_ERROR(ug_tensor_from_host(NULL, UG_F32, 2, shape, host, &out), "device");
    CHECK_NULL_ERROR(ug_tensor_upload(NULL, host, sizeof host), "upload");
    CHECK_NULL_ERROR(ug_tensor_upload(a, NULL, sizeof host), "upload");
    CHECK_NULL_ERROR(ug_tensor_upload_async(NULL, host, sizeof host), "upload");
    CHECK_NULL_ERROR(ug_tensor_download(NULL, host, sizeof host), "download");
    CHECK_NULL_ERROR(ug_tensor_download(a, NULL, sizeof host), "download");
    CHECK_NULL_ERROR(ug_tensor_download_async(NULL, host, sizeof host), "download");
    CHECK_NULL_ERROR(ug_tensor_to_device(NULL, dev, &out), "to_device");
    CHECK_NULL_ERROR(ug_tensor_to_device(a, NULL, &out), "to_device");
    CHECK_NULL_ERROR(ug_tensor_to_device(a, dev, NULL), "to_device");
    CHECK_NULL_ERROR(ug_tensor_copy(NULL, a), "copy");
    CHECK_NULL_ERROR(ug_tensor_copy(a, NULL), "copy");
    CHECK_NULL_ERROR(ug_tensor_slice(NULL, 0, 1, &out), "slice");
    CHECK_NULL_ERROR(ug_tensor_slice(a, 0, 1, NULL), "slice");
    CHECK_NULL_ERROR(ug_tensor_reshape(NULL, 2, shape, &out), "reshape");
    CHECK_NULL_ERROR(ug_tensor_reshape(a, 2, shape, NULL), "reshape");
    CHECK_NULL_ERROR(ug_tensor_reshape(a, 2, NULL, &out), "reshape");
    CHECK(out == NULL);
    ug_tensor_free(NULL); /* documented as ignored */

    th_context("device and memory API");
    ug_device_info info;
    ug_memory_stats st;
    uint64_t bytes;
    void *ptr = NULL;
    ug_device *d = NULL;
    CHECK_NULL_ERROR(ug_device_open("cpu", NULL), "device_open");
    CHECK_NULL_ERROR(ug_device_info_at(0, NULL), "info");
    CHECK_NULL_ERROR(ug_device_get_info(NULL, &info), "get_info");
    CHECK_NULL_ERROR(ug_device_get_info(dev, NULL), "get_info");
    CHECK_NULL_ERROR(ug_device_synchronize(NULL), "synchronize");
    CHECK_NULL_ERROR(ug_memory_get_stats(NULL, &st), "stats");
    CHECK_NULL_ERROR(ug_memory_get_stats(dev, NULL), "stats");
    CHECK_NULL_ERROR(ug_memory_reset_peak(NULL), "reset_peak");
    CHECK_NULL_ERROR(ug_memory_release_cache(NULL), "release_cache");
    CHECK_NULL_ERROR(ug_memory_set_limit(NULL, 0), "set_limit");
    CHECK_NULL_ERROR(ug_memory_parse_size(NULL, &bytes), "parse_size");
    CHECK_NULL_ERROR(ug_memory_parse_size("1M", NULL), "parse_size");
    CHECK_NULL_ERROR(ug_host_alloc(dev, 16, NULL), "host_alloc");
    CHECK(d == NULL && ptr == NULL);
}

/* Shapes that do not broadcast: the message names both shapes. */
static void test_shape_mismatch(ug_device *dev)
{
    int64_t s1[] = {2, 3}, s2[] = {4, 5}, s3[] = {3, 4}, s4[] = {2, 4};
    ug_tensor *a = f32_tensor(dev, 2, s1), *b = f32_tensor(dev, 2, s2);
    ug_tensor *c = f32_tensor(dev, 2, s3), *d = f32_tensor(dev, 2, s4);
    REQUIRE(a && b && c && d);
    for (size_t i = 0; i < COUNT(binary_ops); i++) {
        th_context("%s", binary_ops[i].name);
        ug_tensor *out = NULL;
        if (CHECK_STATUS(binary_ops[i].fn(a, b, &out), UG_ERR_SHAPE))
            CHECK_ERROR_HAS("[2,3]", "[4,5]", binary_ops[i].name);
        CHECK(out == NULL);
        if (CHECK_STATUS(binary_ops[i].fn(c, d, &out), UG_ERR_SHAPE))
            CHECK_ERROR_HAS("[3,4]", "[2,4]");
        CHECK(out == NULL);
    }
    /* Copy needs the same element count and dtype. */
    th_context("copy");
    CHECK_STATUS(ug_tensor_copy(a, b), UG_ERR_SHAPE);
    CHECK_ERROR_HAS("[2,3]", "[4,5]");
}

static void test_matmul_mismatch(ug_device *dev)
{
    int64_t sa[] = {64, 784}, sb[] = {500, 784};
    ug_tensor *a = f32_tensor(dev, 2, sa), *b = f32_tensor(dev, 2, sb);
    REQUIRE(a && b);
    ug_tensor *out = NULL;
    /* The classic: forgot transpose_b. */
    if (CHECK_STATUS(ug_matmul(a, b, false, false, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("matmul", "[64,784]", "[500,784]", "transpose_b");
    CHECK(out == NULL);
    /* With transpose_a the inner dims are 64 and 500. */
    if (CHECK_STATUS(ug_matmul(a, b, true, false, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[64,784]", "[500,784]");
    /* Batch dims that differ. */
    int64_t b1[] = {2, 3, 4}, b2[] = {3, 4, 5};
    ug_tensor *c = f32_tensor(dev, 3, b1), *d = f32_tensor(dev, 3, b2);
    REQUIRE(c && d);
    if (CHECK_STATUS(ug_matmul(c, d, false, false, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[2,3,4]", "[3,4,5]");
    /* A 1-D operand has no matrix. */
    int64_t v[] = {784};
    ug_tensor *e = f32_tensor(dev, 1, v);
    REQUIRE(e);
    if (CHECK_STATUS(ug_matmul(e, b, false, true, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[784]");
    CHECK(out == NULL);
}

static void test_different_devices(ug_device *dev)
{
    ug_device *other = NULL;
    for (int i = 0; i < th_device_count(); i++)
        if (th_device(i) != dev)
            other = th_device(i);
    if (!other) {
        th_skip("only one device: cannot put operands on two devices");
        return;
    }
    int64_t shape[] = {4, 4};
    ug_tensor *a = f32_tensor(dev, 2, shape), *b = f32_tensor(other, 2, shape);
    REQUIRE(a && b);
    ug_tensor *out = NULL;
    const char *ida = ug_device_name(dev), *idb = ug_device_name(other);
    if (CHECK_STATUS(ug_add(a, b, &out), UG_ERR_DEVICE))
        CHECK_ERROR_HAS(ida, idb);
    if (CHECK_STATUS(ug_mul(b, a, &out), UG_ERR_DEVICE))
        CHECK_ERROR_HAS(ida, idb);
    if (CHECK_STATUS(ug_matmul(a, b, false, false, &out), UG_ERR_DEVICE))
        CHECK_ERROR_HAS(ida, idb);
    CHECK(out == NULL);
}

static void test_wrong_dtype(ug_device *dev)
{
    int64_t shape[] = {2, 3};
    ug_tensor *i32 = NULL, *u8 = NULL, *f16 = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_I32, 2, shape, &i32));
    th_track(i32);
    REQUIRE_OK(ug_tensor_create(dev, UG_U8, 2, shape, &u8));
    th_track(u8);
    REQUIRE_OK(ug_tensor_create(dev, UG_F16, 2, shape, &f16));
    th_track(f16);
    ug_tensor *f32 = f32_tensor(dev, 2, shape);
    REQUIRE(f32);
    ug_tensor *out = NULL;
    for (size_t i = 0; i < COUNT(unary_ops); i++) {
        /* transpose and clone move any dtype. */
        if (!strcmp(unary_ops[i].name, "transpose") || !strcmp(unary_ops[i].name, "clone"))
            continue;
        th_context("%s", unary_ops[i].name);
        if (CHECK_STATUS(unary_ops[i].fn(i32, &out), UG_ERR_DTYPE))
            CHECK_ERROR_HAS("i32", unary_ops[i].name);
    }
    th_context("binary");
    if (CHECK_STATUS(ug_add(u8, u8, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("u8", "add");
    if (CHECK_STATUS(ug_add(f32, f16, &out), UG_ERR_DTYPE)) /* mixed dtypes */
        CHECK_ERROR_HAS("f32", "f16");
    if (CHECK_STATUS(ug_matmul(i32, i32, false, true, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32", "matmul");
    if (CHECK_STATUS(ug_matmul(f32, f16, false, true, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("f32", "f16");
    if (CHECK_STATUS(ug_reduce(i32, UG_REDUCE_SUM, 0, false, false, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32");
    if (CHECK_STATUS(ug_scale_shift(u8, 2.0f, 1.0f, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("u8");
    th_context("in place");
    if (CHECK_STATUS(ug_fill(i32, 1.0f), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32");
    if (CHECK_STATUS(ug_random_uniform(i32, 1, 0, 0.0f, 1.0f), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("i32");
    if (CHECK_STATUS(ug_random_normal(u8, 1, 0, 0.0f, 1.0f), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("u8");
    th_context("cast");
    /* Casts go to f32 or f16 only. */
    if (CHECK_STATUS(ug_cast(f32, UG_I32, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("f32", "i32");
    if (CHECK_STATUS(ug_cast(f16, UG_U8, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("f16", "u8");
    if (CHECK_STATUS(ug_cast(f32, (ug_dtype)42, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("cast");
    if (CHECK_STATUS(ug_cast(f32, (ug_dtype)-1, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("cast");
    th_context("create");
    if (CHECK_STATUS(ug_tensor_create(dev, (ug_dtype)42, 2, shape, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("42");
    CHECK(out == NULL);
}

/* Shape arguments out of range: ndim, negative sizes, slices, reshapes.
 * These are shape errors (UG_ERR_SHAPE). */
static void test_bad_shapes(ug_device *dev)
{
    ug_tensor *out = NULL;
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    th_context("ndim 9");
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 9, nine, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("9", "8");
    th_context("ndim -1");
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, -1, nine, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("-1");
    th_context("negative dimension");
    int64_t neg[] = {3, -2};
    if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 2, neg, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("-2");
    float host[6] = {0};
    if (CHECK_STATUS(ug_tensor_from_host(dev, UG_F32, 2, neg, host, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("-2");
    CHECK(out == NULL);

    int64_t shape[] = {10, 3};
    ug_tensor *t = f32_tensor(dev, 2, shape);
    REQUIRE(t);
    th_context("slice out of range");
    static const int64_t bad_slices[][2] = {{7, 5}, {-1, 2}, {0, 11}, {11, 0}, {3, -1}};
    for (size_t i = 0; i < COUNT(bad_slices); i++) {
        char start[32];
        snprintf(start, sizeof start, "%lld", (long long)bad_slices[i][0]);
        if (CHECK_STATUS(ug_tensor_slice(t, bad_slices[i][0], bad_slices[i][1], &out),
                         UG_ERR_SHAPE))
            CHECK_ERROR_HAS("[10,3]", start);
        CHECK(out == NULL);
    }
    ug_tensor *scalar = f32_tensor(dev, 0, NULL);
    REQUIRE(scalar);
    CHECK_STATUS(ug_tensor_slice(scalar, 0, 1, &out), UG_ERR_SHAPE);

    th_context("reshape");
    int64_t s55[] = {5, 5}, two_inferred[] = {-1, -1}, negs[] = {-3, -10}, s7[] = {7, -1};
    int64_t s46[] = {4, 6};
    ug_tensor *u = f32_tensor(dev, 2, s46);
    REQUIRE(u);
    if (CHECK_STATUS(ug_tensor_reshape(u, 2, s55, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[4,6]", "[5,5]");
    CHECK_STATUS(ug_tensor_reshape(u, 2, two_inferred, &out), UG_ERR_SHAPE);
    if (CHECK_STATUS(ug_tensor_reshape(u, 2, negs, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("-3");
    if (CHECK_STATUS(ug_tensor_reshape(u, 2, s7, &out), UG_ERR_SHAPE)) /* 24 / 7 */
        CHECK_ERROR_HAS("24");
    if (CHECK_STATUS(ug_tensor_reshape(u, 9, nine, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("9");
    CHECK(out == NULL);

    th_context("transpose of a vector");
    int64_t v[] = {5};
    ug_tensor *vec = f32_tensor(dev, 1, v);
    REQUIRE(vec);
    if (CHECK_STATUS(ug_transpose(vec, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[5]");
    CHECK(out == NULL);
}

static void test_transfer_sizes(ug_device *dev)
{
    int64_t n = 10;
    ug_tensor *t = f32_tensor(dev, 1, &n);
    REQUIRE(t);
    float host[16] = {0};
    if (CHECK_STATUS(ug_tensor_upload(t, host, 39), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("39", "40");
    if (CHECK_STATUS(ug_tensor_upload(t, host, 44), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("44", "40");
    if (CHECK_STATUS(ug_tensor_download(t, host, 36), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("36", "40");
    if (CHECK_STATUS(ug_tensor_upload_async(t, host, 0), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("40");
    if (CHECK_STATUS(ug_tensor_download_async(t, host, 64), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("64", "40");
    /* The failed upload did not write anything. */
    float back[10];
    CHECK_OK(ug_tensor_download(t, back, sizeof back));
    for (int i = 0; i < 10; i++)
        CHECK_MSG(back[i] == 1.0f, "element %d is %g after failed transfers", i, back[i]);
}

static void test_unknown_device(ug_device *dev)
{
    (void)dev;
    const char *names[] = {"opencl:99", "nonsense", "cpu:7", "hip:12345", "opencl:x", ""};
    for (size_t i = 0; i < COUNT(names); i++) {
        th_context("\"%s\"", names[i]);
        ug_device *d = NULL;
        if (CHECK_STATUS(ug_device_open(names[i], &d), UG_ERR_DEVICE) && names[i][0])
            CHECK_ERROR_HAS(names[i]);
        CHECK(d == NULL);
    }
}

static void test_reduce_axis_out_of_range(ug_device *dev)
{
    int64_t shape[] = {3, 4};
    ug_tensor *t = f32_tensor(dev, 2, shape);
    REQUIRE(t);
    const int axes[] = {2, -3, 100, -100};
    for (size_t i = 0; i < COUNT(axes); i++) {
        char axis[16];
        snprintf(axis, sizeof axis, "%d", axes[i]);
        th_context("axis %d", axes[i]);
        ug_tensor *out = NULL;
        for (int op = 0; op <= UG_REDUCE_SUMSQ; op++)
            if (CHECK_STATUS(ug_reduce(t, (ug_reduce_op)op, axes[i], false, false, &out),
                             UG_ERR_INVALID_ARGUMENT))
                CHECK_ERROR_HAS(axis, "[3,4]");
        if (CHECK_STATUS(ug_sum(t, axes[i], &out), UG_ERR_INVALID_ARGUMENT))
            CHECK_ERROR_HAS(axis);
        if (CHECK_STATUS(ug_argmax(t, axes[i], &out), UG_ERR_INVALID_ARGUMENT))
            CHECK_ERROR_HAS(axis);
        CHECK(out == NULL);
    }
    /* A scalar has no axis 0. */
    ug_tensor *s = f32_tensor(dev, 0, NULL), *out = NULL;
    REQUIRE(s);
    CHECK_STATUS(ug_sum(s, 0, &out), UG_ERR_INVALID_ARGUMENT);
    CHECK(out == NULL);
}

/* ug_last_error keeps the message of the last failure; ug_clear_error empties it. */
static void test_error_state(ug_device *dev)
{
    ug_device *d = NULL;
    CHECK_STATUS(ug_device_open("nonsense", &d), UG_ERR_DEVICE);
    CHECK(ug_last_error()[0] != '\0');
    /* A successful call does not need to clear it, but ug_clear_error does. */
    ug_clear_error();
    CHECK_MSG(ug_last_error()[0] == '\0', "after ug_clear_error: \"%s\"", ug_last_error());
    int64_t n = 3;
    ug_tensor *t = f32_tensor(dev, 1, &n);
    REQUIRE(t);
    ug_tensor *out = NULL;
    CHECK_STATUS(ug_exp(NULL, &out), UG_ERR_INVALID_ARGUMENT);
    CHECK(th_contains(ug_last_error(), "exp"));
    /* Status names cover every code. */
    for (int s = UG_OK; s <= UG_ERR_STATE; s++)
        CHECK_MSG(strncmp(ug_status_name((ug_status)s), "UG_", 3) == 0, "status %d name \"%s\"",
                  s, ug_status_name((ug_status)s));
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    ug_device *d = NULL;
    ug_device_open("thread-local-test-name", &d);
    return NULL;
}

/* ug_last_error is per thread: another thread's failure leaves this
 * thread's message alone. */
static void test_error_is_thread_local(ug_device *dev)
{
    (void)dev;
    ug_device *d = NULL;
    CHECK_STATUS(ug_device_open("main-thread-name", &d), UG_ERR_DEVICE);
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, fail_in_thread, NULL) == 0);
    pthread_join(thread, NULL);
    CHECK_ERROR_HAS("main-thread-name");
    CHECK_MSG(!th_contains(ug_last_error(), "thread-local-test-name"),
              "another thread's error shows here: \"%s\"", ug_last_error());
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(null_handles),
        TH_DEVICE_TEST(shape_mismatch),
        TH_DEVICE_TEST(matmul_mismatch),
        TH_DEVICE_TEST(different_devices),
        TH_DEVICE_TEST(wrong_dtype),
        TH_DEVICE_TEST(bad_shapes),
        TH_DEVICE_TEST(transfer_sizes),
        TH_HOST_TEST(unknown_device),
        TH_DEVICE_TEST(reduce_axis_out_of_range),
        TH_DEVICE_TEST(error_state),
        TH_HOST_TEST(error_is_thread_local),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
