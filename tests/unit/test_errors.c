/* Error cases: each call must fail with the exact status, leave *out NULL,
 * say the key facts in ug_last_error(), and leak nothing (the harness
 * checks the pool after every test). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_table.h"

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

/* The elementwise ops are the rows of op_table.c; these are the other
 * calls of the same shape. */
typedef ug_status (*unary_fn)(const ug_tensor *, ug_tensor **);
static const struct {
    unary_fn fn;
    const char *name;
    bool any_dtype; /* moves data of any dtype */
} other_unary_ops[] = {{ug_softmax, "softmax", false}, {ug_log_softmax, "log_softmax", false},
                       {ug_transpose, "transpose", true}, {ug_clone, "clone", true}};
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
    for (int i = 0; i < op_binary_count; i++) {
        const op_binary *op = &op_binaries[i];
        th_context("%s", op->name);
        CHECK_NULL_ERROR(op->eager(NULL, a, &out), op->name);
        CHECK_NULL_ERROR(op->eager(a, NULL, &out), op->name);
        CHECK_NULL_ERROR(op->eager(a, a, NULL), op->name);
        CHECK(out == NULL);
    }
    for (int i = 0; i < op_unary_count; i++) {
        const op_unary *op = &op_unaries[i];
        th_context("%s", op->name);
        CHECK_NULL_ERROR(op->eager(NULL, &out), op->name);
        CHECK_NULL_ERROR(op->eager(a, NULL), op->name);
    }
    for (size_t i = 0; i < COUNT(other_unary_ops); i++) {
        th_context("%s", other_unary_ops[i].name);
        CHECK_NULL_ERROR(other_unary_ops[i].fn(NULL, &out), other_unary_ops[i].name);
        CHECK_NULL_ERROR(other_unary_ops[i].fn(a, NULL), other_unary_ops[i].name);
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
    for (int i = 0; i < op_binary_count; i++) {
        const op_binary *op = &op_binaries[i];
        th_context("%s", op->name);
        ug_tensor *out = NULL;
        if (CHECK_STATUS(op->eager(a, b, &out), UG_ERR_SHAPE))
            CHECK_ERROR_HAS("[2,3]", "[4,5]", op->name);
        CHECK(out == NULL);
        if (CHECK_STATUS(op->eager(c, d, &out), UG_ERR_SHAPE))
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
    /* Each row refuses the dtypes it does not take, naming the dtype and
     * itself; a binary op refuses mixed dtypes too. */
    const struct {
        ug_tensor *t;
        ug_dtype dtype;
    } refused[] = {{i32, UG_I32}, {u8, UG_U8}};
    for (int r = 0; r < 2; r++) {
        const char *dtype = ug_dtype_name(refused[r].dtype);
        for (int i = 0; i < op_unary_count; i++) {
            const op_unary *op = &op_unaries[i];
            th_context("%s of %s", op->name, dtype);
            if (!(op->dtypes & OP_DTYPE(refused[r].dtype)) &&
                CHECK_STATUS(op->eager(refused[r].t, &out), UG_ERR_DTYPE))
                CHECK_ERROR_HAS(dtype, op->name);
        }
        for (int i = 0; i < op_binary_count; i++) {
            const op_binary *op = &op_binaries[i];
            th_context("%s of %s", op->name, dtype);
            if (!(op->dtypes & OP_DTYPE(refused[r].dtype)) &&
                CHECK_STATUS(op->eager(refused[r].t, refused[r].t, &out), UG_ERR_DTYPE))
                CHECK_ERROR_HAS(dtype, op->name);
        }
    }
    for (int i = 0; i < op_binary_count; i++) {
        th_context("%s of f32 and f16", op_binaries[i].name);
        if (CHECK_STATUS(op_binaries[i].eager(f32, f16, &out), UG_ERR_DTYPE))
            CHECK_ERROR_HAS("f32", "f16");
    }
    for (size_t i = 0; i < COUNT(other_unary_ops); i++) {
        if (other_unary_ops[i].any_dtype)
            continue;
        th_context("%s", other_unary_ops[i].name);
        if (CHECK_STATUS(other_unary_ops[i].fn(i32, &out), UG_ERR_DTYPE))
            CHECK_ERROR_HAS("i32", other_unary_ops[i].name);
    }
    th_context("others");
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

/* ---- conv.h: each bad argument fails with a status (want, or alt where
 * either reading is fair), leaves *out NULL and says what is wrong in a
 * message naming the op; nothing crashes. ---- */

static void conv_error_at(const char *file, int line, const char *text, ug_status got, bool out_null,
                          const char *op, ug_status want, ug_status alt)
{
    const char *m = ug_last_error();
    if (got != want && got != alt)
        th_fail(file, line, "%s returned %s (\"%s\"), expected %s%s%s", text, ug_status_name(got), m,
                ug_status_name(want), alt != want ? " or " : "", alt != want ? ug_status_name(alt) : "");
    if (got != UG_OK && !out_null)
        th_fail(file, line, "%s failed but set *out", text);
    if (got != UG_OK && !th_contains(m, op))
        th_fail(file, line, "%s: the message should name %s: \"%s\"", text, op, m);
}
#define CHECK_G_CONV_ERROR(expr, out, op, want, alt)                                             \
    do {                                                                                         \
        ug_clear_error();                                                                        \
        (out) = NULL;                                                                            \
        ug_status cs_ = (expr);                                                                  \
        conv_error_at(TH_LOC, #expr, cs_, (out) == NULL, op, want, alt);                         \
    } while (0)
/* The eager form frees a result that should not exist. */
#define CHECK_CONV_ERROR(expr, out, op, want, alt)                                               \
    do {                                                                                         \
        CHECK_G_CONV_ERROR(expr, out, op, want, alt);                                            \
        th_track(out);                                                                           \
    } while (0)

static ug_tensor *filled(ug_device *dev, ug_dtype dtype, int ndim, const int64_t *shape)
{
    ug_tensor *t = NULL;
    if (!CHECK_STATUS(ug_tensor_create(dev, dtype, ndim, shape, &t), UG_OK))
        return NULL;
    th_track(t);
    if (dtype == UG_F32 || dtype == UG_F16)
        CHECK_OK(ug_fill(t, 0.5f));
    return t;
}

static void test_conv_errors(ug_device *dev)
{
    const ug_status SH = UG_ERR_SHAPE, IA = UG_ERR_INVALID_ARGUMENT;
    ug_tensor *x = filled(dev, UG_F32, 4, (int64_t[]){2, 6, 5, 5});
    ug_tensor *x3 = filled(dev, UG_F32, 3, (int64_t[]){6, 5, 5});
    ug_tensor *x5 = filled(dev, UG_F32, 4, (int64_t[]){2, 5, 5, 5});
    ug_tensor *tiny = filled(dev, UG_F32, 4, (int64_t[]){1, 6, 2, 2});
    ug_tensor *xh = filled(dev, UG_F16, 4, (int64_t[]){2, 6, 5, 5});
    ug_tensor *xi = filled(dev, UG_I32, 4, (int64_t[]){2, 6, 5, 5});
    ug_tensor *w = filled(dev, UG_F32, 4, (int64_t[]){4, 6, 3, 3});
    ug_tensor *w_g2 = filled(dev, UG_F32, 4, (int64_t[]){4, 3, 3, 3});
    ug_tensor *w_bad = filled(dev, UG_F32, 4, (int64_t[]){4, 5, 3, 3});
    ug_tensor *w_oc = filled(dev, UG_F32, 4, (int64_t[]){5, 3, 3, 3}); /* 5 outputs in 2 groups */
    ug_tensor *w3 = filled(dev, UG_F32, 3, (int64_t[]){4, 6, 3});
    ug_tensor *w5 = filled(dev, UG_F32, 4, (int64_t[]){4, 6, 5, 5});
    ug_tensor *wh = filled(dev, UG_F16, 4, (int64_t[]){4, 6, 3, 3});
    ug_tensor *b = filled(dev, UG_F32, 1, (int64_t[]){4});
    ug_tensor *b5 = filled(dev, UG_F32, 1, (int64_t[]){5});
    ug_tensor *c6 = filled(dev, UG_F32, 1, (int64_t[]){6});
    ug_tensor *c6b = filled(dev, UG_F32, 1, (int64_t[]){6});
    ug_tensor *c6m = filled(dev, UG_F32, 1, (int64_t[]){6});
    ug_tensor *c6v = filled(dev, UG_F32, 1, (int64_t[]){6});
    ug_tensor *c5 = filled(dev, UG_F32, 1, (int64_t[]){5});
    ug_tensor *c6h = filled(dev, UG_F16, 1, (int64_t[]){6});
    ug_tensor *row = filled(dev, UG_F32, 1, (int64_t[]){6});
    REQUIRE(x && x3 && x5 && tiny && xh && xi && w && w_g2 && w_bad && w_oc && w3 && w5 && wh && b && b5);
    REQUIRE(c6 && c6b && c6m && c6v && c5 && c6h && row);
    ug_tensor *out = NULL;
    const ug_conv2d_params g2 = {{1, 1}, {1, 1}, {1, 1}, 2}, g4 = {{1, 1}, {1, 1}, {1, 1}, 4};
    const ug_conv2d_params neg_stride = {{-1, 1}, {0, 0}, {1, 1}, 1};
    const ug_conv2d_params neg_pad = {{1, 1}, {-1, 0}, {1, 1}, 1};
    const ug_conv2d_params neg_groups = {{1, 1}, {0, 0}, {1, 1}, -2};
    const ug_conv2d_params dil3 = {{1, 1}, {0, 0}, {3, 3}, 1};

    th_context("conv2d");
    CHECK_CONV_ERROR(ug_conv2d(x3, w, b, NULL, &out), out, "conv2d", SH, SH);     /* x not 4-D */
    CHECK_CONV_ERROR(ug_conv2d(x, w3, b, NULL, &out), out, "conv2d", SH, SH);     /* weight not 4-D */
    CHECK_CONV_ERROR(ug_conv2d(x, w_bad, b, NULL, &out), out, "conv2d", SH, SH);  /* 5 != 6 channels */
    CHECK_CONV_ERROR(ug_conv2d(x, w, b, &g2, &out), out, "conv2d", SH, SH);       /* 6 != 6 / 2 per group */
    CHECK_CONV_ERROR(ug_conv2d(x5, w_g2, b, &g2, &out), out, "conv2d", IA, SH);   /* 5 channels, 2 groups */
    CHECK_CONV_ERROR(ug_conv2d(x, w_oc, b5, &g2, &out), out, "conv2d", IA, SH);   /* 5 outputs, 2 groups */
    CHECK_CONV_ERROR(ug_conv2d(x, w, b, &g4, &out), out, "conv2d", IA, SH);       /* 6 channels, 4 groups */
    CHECK_CONV_ERROR(ug_conv2d(x, w, b5, NULL, &out), out, "conv2d", SH, SH);     /* bias [5] for 4 */
    CHECK_CONV_ERROR(ug_conv2d(x, w, w, NULL, &out), out, "conv2d", SH, SH);      /* bias not 1-D */
    CHECK_CONV_ERROR(ug_conv2d(tiny, w, b, NULL, &out), out, "conv2d", SH, IA);   /* 2x2 < 3x3 */
    CHECK_CONV_ERROR(ug_conv2d(x, w5, b, &dil3, &out), out, "conv2d", SH, IA);    /* span 13 > 5 */
    CHECK_CONV_ERROR(ug_conv2d(x, w, b, &neg_stride, &out), out, "conv2d", IA, IA);
    CHECK_CONV_ERROR(ug_conv2d(x, w, b, &neg_pad, &out), out, "conv2d", IA, IA);
    CHECK_CONV_ERROR(ug_conv2d(x, w, b, &neg_groups, &out), out, "conv2d", IA, IA);
    /* f16 and bf16 are taken (test_conformance), integers are not. */
    CHECK_CONV_ERROR(ug_conv2d(xi, w, NULL, NULL, &out), out, "conv2d", UG_ERR_DTYPE, UG_ERR_DTYPE);
    CHECK_CONV_ERROR(ug_conv2d(xh, xi, NULL, NULL, &out), out, "conv2d", UG_ERR_DTYPE, UG_ERR_DTYPE);
    CHECK_CONV_ERROR(ug_conv2d(NULL, w, b, NULL, &out), out, "conv2d", IA, IA);
    CHECK_CONV_ERROR(ug_conv2d(x, NULL, b, NULL, &out), out, "conv2d", IA, IA);
    CHECK_STATUS(ug_conv2d(x, w, b, NULL, NULL), IA);

    th_context("pooling");
    const ug_pool2d_params k3p2 = {{3, 3}, {1, 1}, {2, 2}}, k2p2 = {{2, 2}, {2, 2}, {2, 0}};
    const ug_pool2d_params k0 = {{0, 3}, {1, 1}, {0, 0}}, big = {{3, 3}, {1, 1}, {0, 0}};
    const ug_pool2d_params neg_s = {{2, 2}, {-1, 1}, {0, 0}}, ok = {{2, 2}, {2, 2}, {0, 0}};
    CHECK_CONV_ERROR(ug_max_pool2d(x, &k3p2, &out), out, "max_pool2d", IA, SH); /* padding 2 > 3/2 */
    CHECK_CONV_ERROR(ug_avg_pool2d(x, &k2p2, &out), out, "avg_pool2d", IA, SH); /* padding 2 > 2/2 */
    CHECK_CONV_ERROR(ug_max_pool2d(x, &k0, &out), out, "max_pool2d", IA, SH);   /* kernel 0 */
    CHECK_CONV_ERROR(ug_avg_pool2d(tiny, &big, &out), out, "avg_pool2d", SH, IA); /* 2x2 < 3x3 */
    CHECK_CONV_ERROR(ug_max_pool2d(x, &neg_s, &out), out, "max_pool2d", IA, IA);
    CHECK_CONV_ERROR(ug_max_pool2d(x3, &ok, &out), out, "max_pool2d", SH, SH);
    CHECK_CONV_ERROR(ug_avg_pool2d(x3, &ok, &out), out, "avg_pool2d", SH, SH);
    CHECK_CONV_ERROR(ug_avg_pool2d(xi, &ok, &out), out, "avg_pool2d", UG_ERR_DTYPE, UG_ERR_DTYPE);
    CHECK_CONV_ERROR(ug_max_pool2d(x, NULL, &out), out, "max_pool2d", IA, IA);
    CHECK_CONV_ERROR(ug_global_avg_pool2d(x3, &out), out, "global_avg_pool2d", SH, SH);
    CHECK_CONV_ERROR(ug_global_avg_pool2d(xi, &out), out, "global_avg_pool2d", UG_ERR_DTYPE, UG_ERR_DTYPE);
    CHECK_CONV_ERROR(ug_global_avg_pool2d(NULL, &out), out, "global_avg_pool2d", IA, IA);

    th_context("batch_norm");
    CHECK_CONV_ERROR(ug_batch_norm(row, c6, c6b, c6m, c6v, true, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_CONV_ERROR(ug_batch_norm(x, c5, c6b, c6m, c6v, true, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_CONV_ERROR(ug_batch_norm(x, c6, c5, c6m, c6v, true, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_CONV_ERROR(ug_batch_norm(x, c6, c6b, c5, c6v, false, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_CONV_ERROR(ug_batch_norm(x, c6, c6b, c6m, c5, false, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_CONV_ERROR(ug_batch_norm(xh, c6h, c6h, c6h, c6h, true, 0.1f, 1e-5f, &out), out, "batch_norm",
                     UG_ERR_DTYPE, UG_ERR_DTYPE);
    /* Running statistics are updated in place: f32 only. */
    CHECK_CONV_ERROR(ug_batch_norm(x, c6, c6b, c6h, c6v, true, 0.1f, 1e-5f, &out), out, "batch_norm",
                     UG_ERR_DTYPE, UG_ERR_DTYPE);
    CHECK_CONV_ERROR(ug_batch_norm(NULL, c6, c6b, c6m, c6v, true, 0.1f, 1e-5f, &out), out, "batch_norm", IA, IA);
    /* A missing running statistic is named, in training too. */
    CHECK_NULL_ERROR(ug_batch_norm(x, c6, c6b, NULL, c6v, true, 0.1f, 1e-5f, &out), "running_mean");
    CHECK_NULL_ERROR(ug_batch_norm(x, c6, c6b, c6m, NULL, false, 0.1f, 1e-5f, &out), "running_var");
    /* The failed calls left the running statistics alone. */
    double *m = th_download(c6m), *v = th_download(c6v);
    REQUIRE(m && v);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(m[i] == 0.5 && v[i] == 0.5, "a failed batch_norm changed the running statistics");
}

/* The graph versions refuse the same shapes when the op is added. */
static void conv_graph_errors(ug_device *dev, ug_model *model, ug_graph *g)
{
    const ug_status SH = UG_ERR_SHAPE, IA = UG_ERR_INVALID_ARGUMENT;
    ug_value *x = NULL, *x3 = NULL, *x1 = NULL, *w_bad = NULL, *w = NULL, *out = NULL;
    ug_tensor *tw = NULL, *tb = NULL, *tm = NULL, *tv = NULL, *t5 = NULL;
    ug_value *vb = NULL, *vm = NULL, *vv = NULL, *v5 = NULL;
    (void)dev;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 4, (int64_t[]){2, 6, 5, 5}, &x));
    REQUIRE_OK(ug_graph_input(g, "x3", UG_F32, 3, (int64_t[]){6, 5, 5}, &x3));
    REQUIRE_OK(ug_graph_input(g, "x1", UG_F32, 1, (int64_t[]){6}, &x1));
    REQUIRE_OK(ug_graph_input(g, "w_bad", UG_F32, 4, (int64_t[]){4, 5, 3, 3}, &w_bad));
    REQUIRE_OK(ug_graph_input(g, "w", UG_F32, 4, (int64_t[]){4, 6, 3, 3}, &w));
    REQUIRE_OK(ug_model_param(model, "bn.weight", 1, (int64_t[]){6}, UG_INIT_CONSTANT, 1.0f, &tw));
    REQUIRE_OK(ug_model_param(model, "bn.bias", 1, (int64_t[]){6}, UG_INIT_CONSTANT, 0.0f, &tb));
    REQUIRE_OK(ug_model_param(model, "bn.running_mean", 1, (int64_t[]){6}, UG_INIT_CONSTANT, 0.0f, &tm));
    REQUIRE_OK(ug_model_param(model, "bn.running_var", 1, (int64_t[]){6}, UG_INIT_CONSTANT, 1.0f, &tv));
    REQUIRE_OK(ug_model_param(model, "five", 1, (int64_t[]){5}, UG_INIT_CONSTANT, 1.0f, &t5));
    REQUIRE_OK(ug_graph_param(g, tb, &vb));
    REQUIRE_OK(ug_graph_param(g, tm, &vm));
    REQUIRE_OK(ug_graph_param(g, tv, &vv));
    REQUIRE_OK(ug_graph_param(g, t5, &v5));
    ug_value *vw = NULL;
    REQUIRE_OK(ug_graph_param(g, tw, &vw));
    const ug_conv2d_params g4 = {{1, 1}, {1, 1}, {1, 1}, 4};
    const ug_pool2d_params k3p2 = {{3, 3}, {1, 1}, {2, 2}}, ok = {{2, 2}, {2, 2}, {0, 0}};
    th_context("graph ops");
    CHECK_G_CONV_ERROR(ug_g_conv2d(g, x3, w, NULL, NULL, &out), out, "conv2d", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_conv2d(g, x, w_bad, NULL, NULL, &out), out, "conv2d", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_conv2d(g, x, w, NULL, &g4, &out), out, "conv2d", IA, SH);
    CHECK_G_CONV_ERROR(ug_g_max_pool2d(g, x, &k3p2, &out), out, "max_pool2d", IA, SH);
    CHECK_G_CONV_ERROR(ug_g_avg_pool2d(g, x3, &ok, &out), out, "avg_pool2d", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_global_avg_pool2d(g, x3, &out), out, "global_avg_pool2d", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_batch_norm(g, x1, vw, vb, vm, vv, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_batch_norm(g, x, v5, vb, vm, vv, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_G_CONV_ERROR(ug_g_batch_norm(g, x, vw, vb, v5, vv, 0.1f, 1e-5f, &out), out, "batch_norm", SH, SH);
    CHECK_G_CONV_ERROR(ug_nn_conv2d(g, "c", x3, 4, 3, 3, NULL, &out), out, "conv2d", SH, SH);
    CHECK_G_CONV_ERROR(ug_nn_conv2d(g, "c2", x, 4, 3, 3, &g4, &out), out, "conv2d", IA, SH);
    CHECK_G_CONV_ERROR(ug_nn_batch_norm(g, "b", x1, &out), out, "batch_norm", SH, IA);
    /* The graph still works after the refusals. */
    CHECK_OK(ug_g_conv2d(g, x, w, NULL, NULL, &out));
}

static void test_conv_graph_errors(ug_device *dev)
{
    ug_model *model = NULL;
    ug_graph *g = NULL;
    REQUIRE_OK(ug_model_create(dev, 1, &model));
    if (ug_graph_create(model, &g) == UG_OK)
        conv_graph_errors(dev, model, g);
    else
        th_fail(TH_LOC, "ug_graph_create: %s", ug_last_error());
    ug_graph_free(g);
    ug_model_free(model);
}

/* floor((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1, in double. */
static double output_size(double in, double kernel, double stride, double pad, double dilation)
{
    double room = in + 2 * pad - dilation * (kernel - 1) - 1;
    return room < 0 ? 0 : floor(room / stride) + 1;
}

/* Windows far larger than the image (padded so that they fit) cost no
 * more than the image: a 2^31-1 kernel once ran for minutes on the CPU.
 * Huge strides, dilations and paddings either give the output size
 * worked out here in double or are refused, with no overflow on the way
 * (the sanitizer build stops at one); and conv2d's NULLs are named. */
static void test_huge_windows(ug_device *dev)
{
    double v[25], largest = -1e9, sum = 0;
    for (int i = 0; i < 25; i++) {
        v[i] = (double)((i * 7) % 25) - 3.0;
        largest = v[i] > largest ? v[i] : largest;
        sum += v[i];
    }
    ug_tensor *x = th_tensor(dev, UG_F32, 4, ((int64_t[]){1, 1, 5, 5}), v);
    ug_tensor *w = filled(dev, UG_F32, 4, (int64_t[]){1, 1, 3, 3});
    REQUIRE(x && w);
    const int pads[] = {(1 << 30) - 1, 50000000};
    const int kernels[] = {INT_MAX, 100000000};
    for (int k = 0; k < 2; k++) {
        th_context("pooling, kernel %d, padding %d", kernels[k], pads[k]);
        const ug_pool2d_params p = {.kernel = {kernels[k], kernels[k]}, .padding = {pads[k], pads[k]}};
        ug_tensor *out = NULL;
        if (CHECK_STATUS(ug_max_pool2d(x, &p, &out), UG_OK)) {
            th_track(out);
            CHECK(ug_tensor_numel(out) == 1);
            float f = 0;
            CHECK_OK(ug_tensor_download(out, &f, sizeof f));
            CHECK_MSG(f == (float)largest, "max pooling gave %g, the image's largest value is %g", (double)f, largest);
        }
        if (CHECK_STATUS(ug_avg_pool2d(x, &p, &out), UG_OK)) {
            th_track(out);
            float f = 0;
            CHECK_OK(ug_tensor_download(out, &f, sizeof f));
            double span = fmin(kernels[k], 5.0 + 2.0 * pads[k]); /* the window within the padded image */
            double want = sum / (span * span); /* padding counts, as PyTorch's count_include_pad */
            CHECK_MSG(fabs(f - want) <= 1e-5 * fabs(want), "average pooling gave %g, expected %g", (double)f, want);
        }
    }
    const int sizes[] = {1, 2, 100000000, 1 << 30, INT_MAX};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++) {
                const ug_conv2d_params p = {.stride = {sizes[a], sizes[a]}, .padding = {sizes[c], sizes[c]},
                                            .dilation = {sizes[b], sizes[b]}};
                th_context("conv2d stride %d, dilation %d, padding %d", sizes[a], sizes[b], sizes[c]);
                double want = output_size(5, 3, sizes[a], sizes[c], sizes[b]);
                ug_tensor *out = NULL;
                ug_status st = ug_conv2d(x, w, NULL, &p, &out);
                if (st == UG_OK) {
                    th_track(out);
                    CHECK_MSG(ug_tensor_dim(out, 2) == want && ug_tensor_dim(out, 3) == want,
                              "output %lldx%lld, expected %.0f", (long long)ug_tensor_dim(out, 2),
                              (long long)ug_tensor_dim(out, 3), want);
                } else {
                    CHECK_MSG(want < 1 || want * want > 1e6, "refused (%s) an output of %.0fx%.0f", ug_last_error(),
                              want, want);
                }
                const ug_pool2d_params q = {.kernel = {sizes[b], sizes[b]}, .stride = {sizes[a], sizes[a]},
                                            .padding = {sizes[c], sizes[c]}};
                want = 2.0 * sizes[c] > sizes[b] ? 0 : output_size(5, sizes[b], sizes[a], sizes[c], 1);
                th_context("max_pool2d kernel %d, stride %d, padding %d", sizes[b], sizes[a], sizes[c]);
                st = ug_max_pool2d(x, &q, &out);
                if (st == UG_OK) {
                    th_track(out);
                    CHECK(ug_tensor_dim(out, 2) == want && ug_tensor_dim(out, 3) == want);
                } else {
                    CHECK_MSG(want < 1 || want * want > 1e6, "refused (%s) an output of %.0fx%.0f", ug_last_error(),
                              want, want);
                }
            }
    th_context("%s", "");
    ug_tensor *out = NULL;
    CHECK_STATUS(ug_conv2d(NULL, w, NULL, NULL, &out), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("conv2d", "x is NULL");
    CHECK_STATUS(ug_conv2d(x, NULL, NULL, NULL, &out), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("conv2d", "weight is NULL");
}

/* A model parameter asked for with a NULL shape (once a crash when the
 * name existed), too many axes or a bound that is not finite. */
static void test_model_param_arguments(ug_device *dev)
{
    ug_model *m = NULL;
    REQUIRE_OK(ug_model_create(dev, 1, &m));
    ug_tensor *t = NULL, *again = NULL;
    CHECK_OK(ug_model_param(m, "w", 2, (int64_t[]){2, 3}, UG_INIT_UNIFORM, 1.0f, &t));
    CHECK_STATUS(ug_model_param(m, "w", 2, NULL, UG_INIT_UNIFORM, 1.0f, &again), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("'w'", "NULL shape");
    CHECK(again == NULL);
    CHECK_STATUS(ug_model_param(m, "v", 2, NULL, UG_INIT_UNIFORM, 1.0f, &again), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_model_param(m, "v", UG_MAX_DIMS + 1, (int64_t[UG_MAX_DIMS + 1]){1}, UG_INIT_UNIFORM, 1.0f,
                                &again), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_model_param(m, "v", -1, NULL, UG_INIT_UNIFORM, 1.0f, &again), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_model_param(m, "v", 1, (int64_t[]){4}, UG_INIT_UNIFORM, NAN, &again), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("bound nan");
    CHECK_EQ_I64(ug_model_param_count(m), 1);
    CHECK_OK(ug_model_param(m, "w", 2, (int64_t[]){2, 3}, UG_INIT_UNIFORM, 1.0f, &again));
    CHECK(again == t);
    ug_model_free(m);
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
        TH_DEVICE_TEST(conv_errors),
        TH_DEVICE_TEST(conv_graph_errors),
        TH_DEVICE_TEST(huge_windows),
        TH_DEVICE_TEST(model_param_arguments),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
