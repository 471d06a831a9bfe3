/* Devices, tensors (transfers, views, copies between devices), dtypes, fill. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

/* Sizes that are not multiples of any work-group size. */
static const int64_t odd_sizes[] = {1, 3, 17, 1000, 4097, 65537};
#define N_ODD_SIZES (int)(sizeof odd_sizes / sizeof odd_sizes[0])
static const ug_dtype all_dtypes[] = {UG_F32, UG_F16, UG_I32, UG_U8, UG_BF16};

/* A host buffer of n elements of dtype with varied bit patterns. */
static void *pattern(ug_dtype dtype, int64_t n, uint32_t salt)
{
    size_t es = ug_dtype_size(dtype);
    unsigned char *p = th_alloc((size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)i * 2654435761u ^ salt;
        if (dtype == UG_F32) {
            float f = (float)(int32_t)v * 1e-6f;
            memcpy(p + (size_t)i * 4, &f, 4);
        } else if (dtype == UG_F16) {
            uint16_t h = (uint16_t)(v & 0x7bffu); /* finite halves */
            memcpy(p + (size_t)i * 2, &h, 2);
        } else if (dtype == UG_BF16) {
            uint16_t b = (uint16_t)(v & 0x7f7fu); /* finite bfloat16s */
            memcpy(p + (size_t)i * 2, &b, 2);
        } else {
            memcpy(p + (size_t)i * es, &v, es);
        }
    }
    return p;
}

static void test_dtype_facts(ug_device *dev)
{
    (void)dev;
    CHECK(ug_dtype_size(UG_F32) == 4 && ug_dtype_size(UG_F16) == 2);
    CHECK(ug_dtype_size(UG_I32) == 4 && ug_dtype_size(UG_U8) == 1 && ug_dtype_size(UG_BF16) == 2);
    CHECK(ug_dtype_size((ug_dtype)17) == 0);
    CHECK(strcmp(ug_dtype_name(UG_F32), "f32") == 0 && strcmp(ug_dtype_name(UG_F16), "f16") == 0);
    CHECK(strcmp(ug_dtype_name(UG_I32), "i32") == 0 && strcmp(ug_dtype_name(UG_U8), "u8") == 0);
    CHECK(strcmp(ug_dtype_name(UG_BF16), "bf16") == 0);
    CHECK(strcmp(ug_dtype_name((ug_dtype)17), "invalid") == 0);
    CHECK(strcmp(ug_status_name(UG_ERR_SHAPE), "UG_ERR_SHAPE") == 0);
    CHECK(strcmp(ug_status_name(UG_OK), "UG_OK") == 0);
}

/* The library's host f16 conversions against the reference converter. */
static void test_dtype_conversions(ug_device *dev)
{
    (void)dev;
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = ref_f16_value((uint16_t)h);
        float got = ug_f16_to_f32((unsigned short)h);
        bool same = isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want);
        if (!same && bad++ < 5)
            th_fail(TH_LOC, "ug_f16_to_f32(0x%04x) = %.9g, expected %.9g", h, got, want);
    }
    /* f32 -> f16: edge cases, then many floats spread over the range. */
    float cases[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e10f, -1e10f,
                     5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 6.1035156e-05f,
                     6.0975552e-05f, 1.00048828125f, 1.00146484375f, 2049.0f, 0.1f,
                     INFINITY, -INFINITY, 1e-30f};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t want = ref_f16_bits(cases[i]);
        unsigned short got = ug_f32_to_f16(cases[i]);
        CHECK_MSG(got == want, "ug_f32_to_f16(%.9g) = 0x%04x, expected 0x%04x", cases[i], got, want);
    }
    CHECK((ug_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (ug_f32_to_f16(NAN) & 0x3ff) != 0);
    for (uint32_t i = 0; i < 200000; i++) {
        /* Every 2^32/200000-th bit pattern covers subnormals to overflow. */
        uint32_t bits = i * 21475u + 12345u;
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        uint16_t want = ref_f16_bits(f);
        unsigned short got = ug_f32_to_f16(f);
        if (got != want && bad++ < 10)
            th_fail(TH_LOC, "ug_f32_to_f16(%.9g [0x%08x]) = 0x%04x, expected 0x%04x", f, bits, got,
                    want);
    }
}

/* The library's host bfloat16 conversions against the reference converter:
 * every bf16 to f32, and f32 to bf16 over spread bit patterns (subnormals
 * to overflow) and PyTorch's edge cases. */
static void test_bf16_conversions(ug_device *dev)
{
    (void)dev;
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        double want = ref_bf16_value((uint16_t)b);
        float got = ug_bf16_to_f32((unsigned short)b);
        bool same = isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want);
        if (!same && bad++ < 5)
            th_fail(TH_LOC, "ug_bf16_to_f32(0x%04x) = %.9g, expected %.9g", b, got, want);
    }
    CHECK(ug_f32_to_bf16(NAN) == 0x7fc0 && ug_f32_to_bf16(-NAN) == 0x7fc0);
    CHECK(ug_f32_to_bf16(3.4028235e38f) == 0x7f80);  /* past the largest bf16: inf */
    CHECK(ug_f32_to_bf16(-3.3895314e38f) == 0xff7f); /* the largest, negated */
    CHECK(ug_f32_to_bf16(1.00390625f) == 0x3f80);    /* tie: to even (1) */
    CHECK(ug_f32_to_bf16(1.01171875f) == 0x3f82);    /* tie: to even (up) */
    for (uint32_t i = 0; i < 200000; i++) {
        uint32_t bits = i * 21475u + 12345u;
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        uint16_t want = ref_bf16_bits(f);
        unsigned short got = ug_f32_to_bf16(f);
        if (got != want && bad++ < 10)
            th_fail(TH_LOC, "ug_f32_to_bf16(%.9g [0x%08x]) = 0x%04x, expected 0x%04x", f, bits, got,
                    want);
    }
}

static void test_device_enumeration(ug_device *dev)
{
    (void)dev;
    int n = ug_device_count();
    CHECK(n >= 1);
    bool have_cpu = false;
    char ids[64][32];
    int listed = 0;
    for (int i = 0; i < n && i < 64; i++) {
        ug_device_info info;
        memset(&info, 0, sizeof info);
        if (!CHECK_STATUS(ug_device_info_at(i, &info), UG_OK))
            continue;
        CHECK_MSG(info.id[0] != '\0' && info.backend[0] != '\0', "device %d has no id/backend", i);
        CHECK_MSG(strncmp(info.id, info.backend, strlen(info.backend)) == 0,
                  "id %s does not start with backend %s", info.id, info.backend);
        CHECK_MSG(info.max_allocation > 0 && info.global_memory > 0,
                  "%s reports no memory", info.id);
        have_cpu |= strcmp(info.id, "cpu") == 0;
        for (int j = 0; j < listed; j++)
            CHECK_MSG(strcmp(ids[j], info.id) != 0, "device id %s listed twice", info.id);
        snprintf(ids[listed++], sizeof ids[0], "%s", info.id);
    }
    CHECK_MSG(have_cpu, "the cpu device is not listed");
    /* Backends' device counts add up to the device list. */
    int sum = 0;
    for (int b = 0; b < ug_backend_count(); b++) {
        const char *name = NULL, *reason = NULL;
        int count = -1;
        if (!CHECK_STATUS(ug_backend_query(b, &name, &count, &reason), UG_OK))
            continue;
        CHECK(name != NULL && count >= 0);
        if (count == 0)
            CHECK_MSG(reason && reason[0], "backend %s has no devices and no reason", name);
        sum += count > 0 ? count : 0;
    }
    CHECK_EQ_I64(sum, n);
    CHECK_STATUS(ug_device_info_at(n, &(ug_device_info){0}), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_device_info_at(-1, &(ug_device_info){0}), UG_ERR_INVALID_ARGUMENT);
    /* "auto" opens something, and "cpu" opens the cpu. */
    ug_device *a = NULL, *c = NULL;
    if (CHECK_STATUS(ug_device_open("auto", &a), UG_OK)) {
        CHECK(a != NULL);
        ug_device_close(a);
    }
    if (CHECK_STATUS(ug_device_open("cpu", &c), UG_OK)) {
        CHECK(c && strcmp(ug_device_name(c), "cpu") == 0);
        ug_device_close(c);
    }
}

/* "auto" and NULL open a GPU if there is one, else cpu; UG_DEVICE (set by
 * the tensor_ug_device ctest run) overrides both. */
static void test_auto_device(ug_device *dev)
{
    (void)dev;
    const char *env = getenv("UG_DEVICE");
    ug_device *by_auto = NULL, *by_null = NULL;
    if (env && *env) {
        ug_device *wanted = NULL;
        if (ug_device_open(env, &wanted) != UG_OK) {
            th_skip("UG_DEVICE=%s names a device that is not present here", env);
            return;
        }
        REQUIRE_OK(ug_device_open("auto", &by_auto));
        CHECK_MSG(by_auto == wanted, "with UG_DEVICE=%s, \"auto\" opened %s", env,
                  ug_device_name(by_auto));
        ug_device_close(wanted);
    } else {
        REQUIRE_OK(ug_device_open("auto", &by_auto));
        bool any_gpu = false;
        for (int i = 0; i < ug_device_count(); i++) {
            ug_device_info info;
            if (ug_device_info_at(i, &info) == UG_OK)
                any_gpu |= info.is_gpu;
        }
        ug_device_info got;
        CHECK_OK(ug_device_get_info(by_auto, &got));
        if (any_gpu)
            CHECK_MSG(got.is_gpu, "a GPU is present but \"auto\" opened %s", got.id);
        else
            CHECK_MSG(strcmp(got.id, "cpu") == 0, "no GPU, but \"auto\" opened %s", got.id);
    }
    if (CHECK_STATUS(ug_device_open(NULL, &by_null), UG_OK)) {
        CHECK_MSG(by_null == by_auto, "NULL opened %s, \"auto\" %s", ug_device_name(by_null),
                  ug_device_name(by_auto));
        ug_device_close(by_null);
    }
    ug_device_close(by_auto);
}

static void test_device_open_twice(ug_device *dev)
{
    const char *id = ug_device_name(dev);
    REQUIRE(id != NULL);
    ug_device *again = NULL;
    REQUIRE_OK(ug_device_open(id, &again));
    CHECK_MSG(again == dev, "opening %s twice gave two handles", id);
    ug_device_close(again);
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    CHECK(strcmp(info.id, id) == 0);
    CHECK_OK(ug_device_synchronize(dev));
    /* After the extra close the device still works. */
    int64_t shape[] = {3};
    double v[] = {1, 2, 3};
    ug_tensor *t = th_tensor(dev, UG_F32, 1, shape, v);
    double *back = th_download(t);
    if (back)
        th_compare("after reopen", back, v, 3, 0.0);
}

static void test_tensor_metadata(ug_device *dev)
{
    int64_t shape[] = {64, 784};
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F16, 2, shape, &t));
    th_track(t);
    CHECK(ug_tensor_device(t) == dev);
    CHECK(ug_tensor_dtype(t) == UG_F16);
    CHECK_EQ_I64(ug_tensor_ndim(t), 2);
    CHECK_EQ_I64(ug_tensor_dim(t, 0), 64);
    CHECK_EQ_I64(ug_tensor_dim(t, 1), 784);
    CHECK_EQ_I64(ug_tensor_dim(t, -1), 784);
    CHECK_EQ_I64(ug_tensor_dim(t, -2), 64);
    CHECK_EQ_I64(ug_tensor_dim(t, 2), -1);
    CHECK_EQ_I64(ug_tensor_dim(t, -3), -1);
    CHECK_EQ_I64(ug_tensor_numel(t), 64 * 784);
    CHECK_EQ_I64(ug_tensor_nbytes(t), 64 * 784 * 2);
    int64_t got[UG_MAX_DIMS] = {0};
    ug_tensor_shape(t, got);
    CHECK(got[0] == 64 && got[1] == 784);
    char buf[64];
    const char *s = ug_tensor_shape_string(t, buf, sizeof buf);
    CHECK_MSG(s && strcmp(s, "[64,784]") == 0, "shape string is \"%s\"", s ? s : "(null)");
    /* Eight dimensions are allowed. */
    int64_t eight[] = {2, 1, 3, 1, 2, 1, 1, 2};
    ug_tensor *e = NULL;
    CHECK_OK(ug_tensor_create(dev, UG_F32, 8, eight, &e));
    th_track(e);
    th_check_tensor(e, UG_F32, 8, eight);
}

/* Blocking round trips for every dtype and awkward size, bitwise. */
static void test_upload_download(ug_device *dev)
{
    for (int d = 0; d < 4; d++) {
        for (int s = 0; s < N_ODD_SIZES; s++) {
            ug_dtype dt = all_dtypes[d];
            int64_t n = odd_sizes[s];
            th_context("%s, %lld elements", ug_dtype_name(dt), (long long)n);
            size_t bytes = (size_t)n * ug_dtype_size(dt);
            void *src = pattern(dt, n, (uint32_t)(d * 7 + s));
            ug_tensor *t = NULL;
            if (!CHECK_STATUS(ug_tensor_create(dev, dt, 1, &n, &t), UG_OK))
                continue;
            th_track(t);
            CHECK_OK(ug_tensor_upload(t, src, bytes));
            void *back = th_download_raw(t);
            th_compare_bits("round trip", back, src, (int64_t)bytes, 1);
            /* from_host is the same thing in one call. */
            ug_tensor *u = NULL;
            if (CHECK_STATUS(ug_tensor_from_host(dev, dt, 1, &n, src, &u), UG_OK)) {
                th_track(u);
                th_compare_bits("from_host", th_download_raw(u), src, (int64_t)bytes, 1);
            }
        }
    }
}

/* Asynchronous transfers finish by ug_device_synchronize. */
static void test_upload_download_async(ug_device *dev)
{
    for (int s = 0; s < N_ODD_SIZES; s++) {
        int64_t n = odd_sizes[s];
        th_context("%lld elements", (long long)n);
        size_t bytes = (size_t)n * 4;
        void *src = pattern(UG_F32, n, 99u + (uint32_t)s);
        void *dst = th_alloc(bytes);
        ug_tensor *t = NULL;
        if (!CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &t), UG_OK))
            continue;
        th_track(t);
        CHECK_OK(ug_tensor_upload_async(t, src, bytes));
        /* An op queued behind the upload sees the data. */
        ug_tensor *neg = NULL;
        CHECK_OK(ug_neg(t, &neg));
        th_track(neg);
        CHECK_OK(ug_tensor_download_async(t, dst, bytes));
        void *ndst = th_alloc(bytes);
        if (neg)
            CHECK_OK(ug_tensor_download_async(neg, ndst, bytes));
        CHECK_OK(ug_device_synchronize(dev));
        th_compare_bits("async round trip", dst, src, n, 4);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += ((float *)ndst)[i] != -((float *)src)[i];
        CHECK_MSG(bad == 0 || !neg, "%d elements of neg(async upload) are wrong", bad);
    }
    /* Pinned host memory works as a transfer buffer. */
    int64_t n = 4097;
    float *pinned = NULL;
    if (CHECK_STATUS(ug_host_alloc(dev, (size_t)n * 4, (void **)&pinned), UG_OK) && pinned) {
        for (int64_t i = 0; i < n; i++)
            pinned[i] = (float)i * 0.5f;
        ug_tensor *t = NULL;
        if (CHECK_STATUS(ug_tensor_create(dev, UG_F32, 1, &n, &t), UG_OK)) {
            th_track(t);
            CHECK_OK(ug_tensor_upload_async(t, pinned, (size_t)n * 4));
            CHECK_OK(ug_device_synchronize(dev));
            memset(pinned, 0, (size_t)n * 4);
            CHECK_OK(ug_tensor_download(t, pinned, (size_t)n * 4));
            int bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += pinned[i] != (float)i * 0.5f;
            CHECK_MSG(bad == 0, "%d elements wrong through pinned memory", bad);
        }
        ug_host_free(dev, pinned);
    }
}

static void test_scalar_tensor(ug_device *dev)
{
    ug_tensor *s = NULL;
    REQUIRE_OK(ug_tensor_create(dev, UG_F32, 0, NULL, &s));
    th_track(s);
    CHECK_EQ_I64(ug_tensor_ndim(s), 0);
    CHECK_EQ_I64(ug_tensor_numel(s), 1);
    CHECK_EQ_I64(ug_tensor_nbytes(s), 4);
    float v = 2.5f, back = 0.0f;
    CHECK_OK(ug_tensor_upload(s, &v, 4));
    CHECK_OK(ug_tensor_download(s, &back, 4));
    CHECK(back == 2.5f);
    /* A [1] tensor reshaped to a scalar and back. */
    int64_t one = 1;
    double three = 3.0;
    ug_tensor *t = th_tensor(dev, UG_F32, 1, &one, &three);
    ug_tensor *r = NULL;
    REQUIRE(t);
    CHECK_OK(ug_tensor_reshape(t, 0, NULL, &r));
    th_track(r);
    if (r) {
        CHECK_EQ_I64(ug_tensor_ndim(r), 0);
        double *rv = th_download(r);
        CHECK(rv && rv[0] == 3.0);
        /* scalar + scalar is a scalar. */
        ug_tensor *sum = NULL;
        CHECK_OK(ug_add(s, r, &sum));
        th_track(sum);
        if (th_check_tensor(sum, UG_F32, 0, NULL)) {
            double *sv = th_download(sum);
            CHECK(sv && sv[0] == 5.5);
        }
    }
}

static void test_zero_size_tensor(ug_device *dev)
{
    int64_t shapes[][3] = {{0, 5, 1}, {3, 0, 2}, {0, 0, 0}};
    for (int i = 0; i < 3; i++) {
        ug_tensor *t = NULL;
        if (!CHECK_STATUS(ug_tensor_create(dev, UG_F32, 3, shapes[i], &t), UG_OK))
            continue;
        th_track(t);
        CHECK_EQ_I64(ug_tensor_numel(t), 0);
        CHECK_EQ_I64(ug_tensor_nbytes(t), 0);
        float dummy = 1.0f;
        CHECK_OK(ug_tensor_upload(t, &dummy, 0));
        CHECK_OK(ug_tensor_download(t, &dummy, 0));
        CHECK(dummy == 1.0f);
        ug_tensor *c = NULL;
        CHECK_OK(ug_clone(t, &c));
        th_track(c);
        th_check_tensor(c, UG_F32, 3, shapes[i]);
        CHECK_OK(ug_fill(t, 2.0f));
        CHECK_OK(ug_random_uniform(t, 1, 0, 0.0f, 1.0f));
    }
}

/* Slices share storage with their parent and read the right rows. */
static void test_slice_views(ug_device *dev)
{
    int64_t shape[] = {10, 3};
    double v[30];
    for (int i = 0; i < 30; i++)
        v[i] = i;
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, v);
    REQUIRE(t);
    ug_tensor *s = NULL, *ss = NULL, *whole = NULL, *last = NULL;
    REQUIRE_OK(ug_tensor_slice(t, 3, 5, &s));
    th_track(s);
    int64_t s_shape[] = {5, 3};
    th_check_tensor(s, UG_F32, 2, s_shape);
    double *sv = th_download(s);
    th_compare("slice [3,8)", sv, v + 9, 15, 0.0);
    /* A slice of a slice adds the offsets. */
    REQUIRE_OK(ug_tensor_slice(s, 2, 2, &ss));
    th_track(ss);
    th_compare("slice of slice", th_download(ss), v + 15, 6, 0.0);
    CHECK_OK(ug_tensor_slice(t, 0, 10, &whole));
    th_track(whole);
    th_compare("whole slice", th_download(whole), v, 30, 0.0);
    CHECK_OK(ug_tensor_slice(t, 9, 1, &last));
    th_track(last);
    th_compare("last row", th_download(last), v + 27, 3, 0.0);
    /* Writing through a slice changes the parent's rows only. */
    float row[6] = {-1, -2, -3, -4, -5, -6};
    CHECK_OK(ug_tensor_upload(ss, row, sizeof row));
    double want[30];
    memcpy(want, v, sizeof want);
    for (int i = 0; i < 6; i++)
        want[15 + i] = row[i];
    th_compare("parent after writing a slice", th_download(t), want, 30, 0.0);
    /* The storage lives while a view uses it. */
    th_release(t);
    th_compare("slice after the parent is freed", th_download(s), want + 9, 15, 0.0);
}

static void test_reshape_views(ug_device *dev)
{
    int64_t shape[] = {4, 6};
    double *v = th_random_values(24, -1, 1);
    th_round_to(UG_F32, v, 24);
    ug_tensor *t = th_tensor(dev, UG_F32, 2, shape, v);
    REQUIRE(t);
    struct {
        int ndim;
        int64_t in[4], out[4];
    } cases[] = {
        {1, {-1}, {24}},         {2, {3, -1}, {3, 8}},   {3, {-1, 2, 3}, {4, 2, 3}},
        {4, {1, 2, -1, 1}, {1, 2, 12, 1}}, {2, {24, 1}, {24, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ug_tensor *r = NULL;
        if (!CHECK_STATUS(ug_tensor_reshape(t, cases[i].ndim, cases[i].in, &r), UG_OK))
            continue;
        th_track(r);
        th_check_tensor(r, UG_F32, cases[i].ndim, cases[i].out);
        th_compare("reshape", th_download(r), v, 24, 0.0);
    }
    /* Reshape of a slice keeps the slice's offset. */
    ug_tensor *s = NULL, *rs = NULL;
    REQUIRE_OK(ug_tensor_slice(t, 1, 2, &s));
    th_track(s);
    int64_t flat[] = {-1};
    REQUIRE_OK(ug_tensor_reshape(s, 1, flat, &rs));
    th_track(rs);
    int64_t twelve = 12;
    th_check_tensor(rs, UG_F32, 1, &twelve);
    th_compare("reshape of slice", th_download(rs), v + 6, 12, 0.0);
    /* And shares storage: writes through it show in the parent. */
    float w[12];
    for (int i = 0; i < 12; i++)
        w[i] = 100.0f + (float)i;
    CHECK_OK(ug_tensor_upload(rs, w, sizeof w));
    double want[24];
    memcpy(want, v, sizeof want);
    for (int i = 0; i < 12; i++)
        want[6 + i] = w[i];
    th_compare("parent after writing a reshaped slice", th_download(t), want, 24, 0.0);
}

/* Ops are queued and may run later: freeing an input right after queueing
 * an op, then reusing its pool block for new data, must not change the
 * op's result. */
static void test_free_while_queued(ug_device *dev)
{
    int64_t n = 1 << 20;
    for (int round = 0; round < 4; round++) {
        th_context("round %d", round);
        double *v = th_random_values(n, -2, 2);
        th_round_to(UG_F32, v, n);
        ug_tensor *x = th_tensor(dev, UG_F32, 1, &n, v);
        REQUIRE(x);
        ug_tensor *y = NULL, *z = NULL;
        REQUIRE_OK(ug_scale_shift(x, 2.0f, 1.0f, &y));
        th_track(y);
        REQUIRE_OK(ug_exp(y, &z));
        th_track(z);
        th_release(x);
        th_release(y);
        /* Likely the same blocks again, overwritten at once. */
        ug_tensor *junk1 = NULL, *junk2 = NULL;
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, &n, &junk1));
        th_track(junk1);
        REQUIRE_OK(ug_tensor_create(dev, UG_F32, 1, &n, &junk2));
        th_track(junk2);
        float *garbage = th_alloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            garbage[i] = 1000.0f;
        CHECK_OK(ug_tensor_upload(junk1, garbage, (size_t)n * 4));
        CHECK_OK(ug_fill(junk2, -1000.0f));
        double *want = th_alloc((size_t)n * sizeof *want);
        for (int64_t i = 0; i < n; i++)
            want[i] = exp((double)(float)(2.0 * v[i] + 1.0));
        th_compare("exp(2x+1) after its inputs were freed", th_download(z), want, n, TH_TOL_F32);
    }
}

/* ug_tensor_to_device between every pair of devices (itself included),
 * from plain tensors and from views at an offset, for every dtype. */
static void test_to_device_all_pairs(ug_device *dev)
{
    for (int d = 0; d < th_device_count(); d++) {
        ug_device *dst_dev = th_device(d);
        for (int k = 0; k < 4; k++) {
            ug_dtype dt = all_dtypes[k];
            int64_t n = 4097;
            th_context("%s -> %s, %s", ug_device_name(dev), ug_device_name(dst_dev),
                       ug_dtype_name(dt));
            void *src = pattern(dt, n, 7u * (uint32_t)k + 1u);
            ug_tensor *t = NULL, *moved = NULL;
            if (!CHECK_STATUS(ug_tensor_from_host(dev, dt, 1, &n, src, &t), UG_OK))
                continue;
            th_track(t);
            if (!CHECK_STATUS(ug_tensor_to_device(t, dst_dev, &moved), UG_OK))
                continue;
            th_track(moved);
            CHECK(ug_tensor_device(moved) == dst_dev);
            th_check_tensor(moved, dt, 1, &n);
            th_compare_bits("to_device", th_download_raw(moved), src,
                            (int64_t)((size_t)n * ug_dtype_size(dt)), 1);
            /* From a view at an offset. */
            ug_tensor *view = NULL, *moved_view = NULL;
            if (CHECK_STATUS(ug_tensor_slice(t, 1000, 17, &view), UG_OK)) {
                th_track(view);
                if (CHECK_STATUS(ug_tensor_to_device(view, dst_dev, &moved_view), UG_OK)) {
                    th_track(moved_view);
                    size_t es = ug_dtype_size(dt);
                    th_compare_bits("to_device of a view", th_download_raw(moved_view),
                                    (unsigned char *)src + 1000 * es, (int64_t)(17 * es), 1);
                }
            }
        }
    }
    if (th_device_count() < 2)
        th_skip("only one device: no pair of different devices to copy between");
}

/* ug_tensor_copy: same device, across devices, into and out of guarded views. */
static void test_copy_tensors(ug_device *dev)
{
    for (int d = 0; d < th_device_count(); d++) {
        ug_device *other = th_device(d);
        for (int k = 0; k < 2; k++) {
            ug_dtype dt = k ? UG_F16 : UG_F32;
            th_context("%s -> %s, %s", ug_device_name(dev), ug_device_name(other),
                       ug_dtype_name(dt));
            int64_t shape[] = {17, 3}, flat = 51;
            double *v = th_random_values(51, -10, 10);
            th_round_to(dt, v, 51);
            ug_tensor *src = th_tensor(dev, dt, 2, shape, v);
            /* Destination: a [51] view inside a guarded tensor on the other device. */
            th_guard *g = NULL;
            ug_tensor *dst = th_guarded_output(other, dt, 1, &flat, &g);
            if (!src || !dst)
                continue;
            CHECK_OK(ug_tensor_copy(dst, src));
            th_compare("copy into a guarded view", th_download(dst), v, 51, 0.0);
            th_guard_check_outside(g);
            /* Source: a guarded view; destination a plain tensor. */
            th_guard *g2 = NULL;
            ug_tensor *vsrc = th_guarded(other, dt, 2, shape, v, &g2);
            ug_tensor *plain = NULL;
            if (!vsrc || !CHECK_STATUS(ug_tensor_create(dev, dt, 2, shape, &plain), UG_OK))
                continue;
            th_track(plain);
            CHECK_OK(ug_tensor_copy(plain, vsrc));
            th_compare("copy from a guarded view", th_download(plain), v, 51, 0.0);
            th_guard_check(g2);
        }
    }
}

/* Uploads into a view write its elements only. */
static void test_upload_into_guarded_view(ug_device *dev)
{
    for (int s = 0; s < N_ODD_SIZES; s++) {
        int64_t n = odd_sizes[s];
        th_context("%lld elements", (long long)n);
        for (int async = 0; async < 2; async++) {
            th_guard *g = NULL;
            ug_tensor *view = th_guarded_output(dev, UG_F32, 1, &n, &g);
            if (!view)
                continue;
            float *src = pattern(UG_F32, n, (uint32_t)s);
            if (async) {
                CHECK_OK(ug_tensor_upload_async(view, src, (size_t)n * 4));
                CHECK_OK(ug_device_synchronize(dev));
            } else {
                CHECK_OK(ug_tensor_upload(view, src, (size_t)n * 4));
            }
            th_compare_bits(async ? "async upload into view" : "upload into view",
                            th_download_raw(view), src, n, 4);
            th_guard_check_outside(g);
        }
    }
}

/* ug_clone of a view is a contiguous copy with its own storage. */
static void test_clone_view(ug_device *dev)
{
    for (int k = 0; k < 2; k++) {
        ug_dtype dt = k ? UG_F16 : UG_F32;
        th_context("%s", ug_dtype_name(dt));
        int64_t shape[] = {5, 7, 3};
        double *v = th_random_values(105, -4, 4);
        th_round_to(dt, v, 105);
        th_guard *g = NULL;
        ug_tensor *x = th_guarded(dev, dt, 3, shape, v, &g);
        ug_tensor *c = NULL;
        if (!x || !CHECK_STATUS(ug_clone(x, &c), UG_OK))
            continue;
        th_track(c);
        th_check_tensor(c, dt, 3, shape);
        th_compare("clone", th_download(c), v, 105, 0.0);
        th_guard_check(g);
        /* Changing the original leaves the clone alone. */
        CHECK_OK(ug_fill(x, 7.0f));
        th_compare("clone after the source changed", th_download(c), v, 105, 0.0);
    }
}

/* ug_fill into guarded views: every element set, nothing outside. */
static void test_fill_guarded(ug_device *dev)
{
    const float values[] = {0.0f, -1.5f, 3.14159265f, 1e30f, INFINITY};
    for (int k = 0; k < 2; k++) {
        ug_dtype dt = k ? UG_F16 : UG_F32;
        for (int s = 0; s < N_ODD_SIZES; s++) {
            int64_t n = odd_sizes[s];
            float value = values[s % 5];
            th_context("%s, %lld elements, value %g", ug_dtype_name(dt), (long long)n, value);
            th_guard *g = NULL;
            int64_t shape[] = {n, 1};
            ug_tensor *view = th_guarded_output(dev, dt, 2, shape, &g);
            if (!view)
                continue;
            CHECK_OK(ug_fill(view, value));
            double *got = th_download(view);
            double *want = th_alloc((size_t)n * sizeof *want);
            for (int64_t i = 0; i < n; i++)
                want[i] = value;
            th_round_to(dt, want, n); /* 1e30 is inf in f16 */
            th_compare("fill", got, want, n, 0.0);
            th_guard_check_outside(g);
        }
    }
}

/* Copies between overlapping views of one buffer behave like memmove on
 * every device, in both directions; a copy onto itself is a no-op. */
static void test_overlapping_copy(ug_device *dev)
{
    int64_t n = 10;
    double v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int forward = 0; forward < 2; forward++) {
        th_context(forward ? "dst after src" : "dst before src");
        ug_tensor *t = th_tensor(dev, UG_F32, 1, &n, v);
        REQUIRE(t);
        ug_tensor *a = NULL, *b = NULL;
        REQUIRE_OK(ug_tensor_slice(t, 0, 7, &a));
        th_track(a);
        REQUIRE_OK(ug_tensor_slice(t, 3, 7, &b));
        th_track(b);
        REQUIRE_OK(forward ? ug_tensor_copy(b, a) : ug_tensor_copy(a, b));
        REQUIRE_OK(ug_tensor_copy(a, a));
        double *got = th_download(t);
        REQUIRE(got);
        double want[10];
        memcpy(want, v, sizeof want);
        if (forward)
            memmove(want + 3, want, 7 * sizeof *want);
        else
            memmove(want, want + 3, 7 * sizeof *want);
        th_compare("overlapping copy", got, want, 10, 0.0);
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(dtype_facts),
        TH_HOST_TEST(dtype_conversions),
        TH_HOST_TEST(bf16_conversions),
        TH_HOST_TEST(device_enumeration),
        TH_HOST_TEST(auto_device),
        TH_DEVICE_TEST(device_open_twice),
        TH_DEVICE_TEST(tensor_metadata),
        TH_DEVICE_TEST(upload_download),
        TH_DEVICE_TEST(upload_download_async),
        TH_DEVICE_TEST(scalar_tensor),
        TH_DEVICE_TEST(zero_size_tensor),
        TH_DEVICE_TEST(slice_views),
        TH_DEVICE_TEST(reshape_views),
        TH_DEVICE_TEST(free_while_queued),
        TH_DEVICE_TEST(to_device_all_pairs),
        TH_DEVICE_TEST(copy_tensors),
        TH_DEVICE_TEST(upload_into_guarded_view),
        TH_DEVICE_TEST(clone_view),
        TH_DEVICE_TEST(fill_guarded),
        TH_DEVICE_TEST(overlapping_copy),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
