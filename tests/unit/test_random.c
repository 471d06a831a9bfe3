/* Counter-based random numbers: every device must draw exactly what the
 * reference Philox 4x32-10 gives for the documented layout. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

static const int64_t odd_sizes[] = {1, 3, 17, 1000, 4097, 65537};
#define N_ODD_SIZES (int)(sizeof odd_sizes / sizeof odd_sizes[0])

/* Published Random123 vectors, so the reference below is itself right. */
static void test_philox_known_answers(ug_device *dev)
{
    (void)dev;
    uint32_t zero_ctr[4] = {0, 0, 0, 0}, zero_key[2] = {0, 0}, out[4];
    ref_philox4x32_10(zero_ctr, zero_key, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
          out[3] == 0x9b00dbd8u);
    uint32_t ones_ctr[4] = {~0u, ~0u, ~0u, ~0u}, ones_key[2] = {~0u, ~0u};
    ref_philox4x32_10(ones_ctr, ones_key, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
          out[3] == 0x6d5451fdu);
}

/* Draws into a fresh tensor of n elements; NULL on failure. */
static ug_tensor *draw(ug_device *dev, ug_dtype dt, int64_t n, bool normal, uint64_t seed,
                       uint64_t offset, float p0, float p1)
{
    ug_tensor *t = NULL;
    ug_status s = ug_tensor_create(dev, dt, 1, &n, &t);
    if (!CHECK_STATUS(s, UG_OK))
        return NULL;
    th_track(t);
    s = normal ? ug_random_normal(t, seed, offset, p0, p1)
               : ug_random_uniform(t, seed, offset, p0, p1);
    if (!CHECK_STATUS(s, UG_OK))
        return NULL;
    return t;
}

/* Uniform numbers on ranges where low + (high-low) u is exact in f32
 * ([0,1), [-2,2)) equal the reference bit for bit. */
static void test_uniform_bitwise(ug_device *dev)
{
    static const struct {
        uint64_t seed, offset;
        float low, high;
    } cases[] = {
        {0, 0, 0.0f, 1.0f},
        {42, 0, 0.0f, 1.0f},
        {0x123456789abcdef0ull, 1000, -2.0f, 2.0f}, /* the key's high word matters */
        {7, 0x00000001fffffff0ull, 0.0f, 1.0f},     /* counters cross 2^32 */
        {~0ull, 0xfffffffffffff000ull, -2.0f, 2.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int s = 0; s < N_ODD_SIZES; s++) {
            int64_t n = odd_sizes[s];
            th_context("seed 0x%llx offset 0x%llx [%g,%g), %lld elements",
                       (unsigned long long)cases[c].seed, (unsigned long long)cases[c].offset,
                       cases[c].low, cases[c].high, (long long)n);
            ug_tensor *t = draw(dev, UG_F32, n, false, cases[c].seed, cases[c].offset,
                                cases[c].low, cases[c].high);
            if (!t)
                return;
            float *want = th_alloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++)
                want[i] = (float)ref_random_uniform(cases[c].seed, cases[c].offset + (uint64_t)i,
                                                    cases[c].low, cases[c].high);
            if (!th_compare_bits("uniform", th_download_raw(t), want, n, 4))
                return;
        }
    }
}

/* Any range: within rounding of the reference, and identical on every
 * device (same seed and offset give the same numbers everywhere). */
static void test_uniform_any_range(ug_device *dev)
{
    int64_t n = 4097;
    const float low = -0.3f, high = 1.7f;
    ug_tensor *t = draw(dev, UG_F32, n, false, 1234, 77, low, high);
    if (!t)
        return;
    double *got = th_download(t);
    float *got_bits = th_download_raw(t);
    double *want = th_alloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = ref_random_uniform(1234, 77 + (uint64_t)i, low, high);
    /* f32 evaluation rounds at most three times: a few ulps of 2. */
    int bad = 0;
    for (int64_t i = 0; got && i < n; i++) {
        bool in_range = got[i] >= low && got[i] < high;
        if ((fabs(got[i] - want[i]) > 1e-6 || !in_range) && bad++ < 5)
            th_fail(TH_LOC, "uniform element %lld is %.9g, expected %.9g in [%g,%g)",
                    (long long)i, got[i], want[i], low, high);
    }
    for (int d = 0; d < th_device_count(); d++) {
        ug_device *other = th_device(d);
        if (other == dev)
            continue;
        th_context("%s against %s", ug_device_name(dev), ug_device_name(other));
        ug_tensor *u = draw(other, UG_F32, n, false, 1234, 77, low, high);
        if (u && got_bits)
            th_compare_bits("same draw on another device", th_download_raw(u), got_bits, n, 4);
        ug_tensor *nd = draw(dev, UG_F32, n, true, 99, 5, 0.5f, 3.0f);
        ug_tensor *no = draw(other, UG_F32, n, true, 99, 5, 0.5f, 3.0f);
        /* Normal numbers too are the same bits on every device: their log,
         * cos and sqrt are kernels/common/random.h's, not the devices'. */
        if (nd && no)
            th_compare_bits("same normal draw on another device", th_download_raw(no),
                            th_download_raw(nd), n, 4);
    }
}

static void test_normal_matches_reference(ug_device *dev)
{
    static const struct {
        uint64_t seed, offset;
        float mean, std;
    } cases[] = {
        {0, 0, 0.0f, 1.0f},
        {2024, 12345, 0.0f, 1.0f},
        {0xfedcba9876543210ull, 0x0000000100000000ull - 100, 0.0f, 1.0f},
        {5, 0, 2.0f, 0.5f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int s = 0; s < N_ODD_SIZES; s++) {
            int64_t n = odd_sizes[s];
            th_context("normal seed 0x%llx offset 0x%llx mean %g std %g, %lld elements",
                       (unsigned long long)cases[c].seed, (unsigned long long)cases[c].offset,
                       cases[c].mean, cases[c].std, (long long)n);
            ug_tensor *t = draw(dev, UG_F32, n, true, cases[c].seed, cases[c].offset,
                                cases[c].mean, cases[c].std);
            if (!t)
                return;
            double *got = th_download(t);
            int bad = 0;
            for (int64_t i = 0; got && i < n; i++) {
                double want = ref_random_normal(cases[c].seed, cases[c].offset + (uint64_t)i,
                                                cases[c].mean, cases[c].std);
                /* f32 log, sqrt and cos: within 1e-5 absolute. */
                if (!(fabs(got[i] - want) <= 1e-5) && bad++ < 5)
                    th_fail(TH_LOC, "normal element %lld is %.9g, expected %.9g", (long long)i,
                            got[i], want);
            }
            if (bad)
                return;
        }
    }
}

/* Offset k continues the stream: a draw at offset 10 equals elements 10..
 * of the draw at offset 0, for uniform and normal. */
static void test_offset_continues_stream(ug_device *dev)
{
    int64_t n = 1000;
    for (int normal = 0; normal < 2; normal++) {
        th_context("%s", normal ? "normal" : "uniform");
        ug_tensor *a = draw(dev, UG_F32, n, normal, 31337, 0, 0.0f, 1.0f);
        ug_tensor *b = draw(dev, UG_F32, n - 10, normal, 31337, 10, 0.0f, 1.0f);
        if (!a || !b)
            return;
        float *fa = th_download_raw(a), *fb = th_download_raw(b);
        if (fa && fb)
            th_compare_bits("offset 10 against elements 10..", fb, fa + 10, n - 10, 4);
        /* Drawing again gives the same numbers. */
        ug_tensor *c = draw(dev, UG_F32, n, normal, 31337, 0, 0.0f, 1.0f);
        if (c && fa)
            th_compare_bits("same seed and offset again", th_download_raw(c), fa, n, 4);
        /* A different seed gives different numbers. */
        ug_tensor *d = draw(dev, UG_F32, n, normal, 31338, 0, 0.0f, 1.0f);
        float *fd = d ? th_download_raw(d) : NULL;
        int same = 0;
        for (int64_t i = 0; fa && fd && i < n; i++)
            same += fa[i] == fd[i];
        CHECK_MSG(fd && same < 10, "seeds 31337 and 31338 agree on %d of %lld numbers", same,
                  (long long)n);
    }
}

/* f16 tensors receive the f32 number rounded to nearest even. */
static void test_random_f16(ug_device *dev)
{
    int64_t n = 4097;
    ug_tensor *t = draw(dev, UG_F16, n, false, 99, 3, -2.0f, 2.0f);
    if (!t)
        return;
    uint16_t *got = th_download_raw(t);
    uint16_t *want = th_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        want[i] = ref_f16_bits((float)ref_random_uniform(99, 3 + (uint64_t)i, -2.0, 2.0));
    th_compare_bits("f16 uniform", got, want, n, 2);
    ug_tensor *u = draw(dev, UG_F16, n, true, 99, 3, 0.0f, 1.0f);
    double *g = th_download(u);
    double *w = th_alloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++)
        w[i] = ref_random_normal(99, 3 + (uint64_t)i, 0.0, 1.0);
    th_round_to(UG_F16, w, n);
    if (g)
        th_compare("f16 normal", g, w, n, TH_TOL_F16);
}

/* Drawing into a view writes its elements only, and element i of the view
 * takes counter offset + i (not its position in the parent). */
static void test_random_into_guarded_view(ug_device *dev)
{
    for (int k = 0; k < 2; k++) {
        ug_dtype dt = k ? UG_F16 : UG_F32;
        for (int s = 0; s < N_ODD_SIZES; s++) {
            for (int normal = 0; normal < 2; normal++) {
                int64_t n = odd_sizes[s];
                th_context("%s %s, %lld elements", normal ? "normal" : "uniform",
                           ug_dtype_name(dt), (long long)n);
                th_guard *g = NULL;
                ug_tensor *v = th_guarded_output(dev, dt, 1, &n, &g);
                if (!v)
                    return;
                ug_status st = normal ? ug_random_normal(v, 8, 1000, 0.0f, 1.0f)
                                      : ug_random_uniform(v, 8, 1000, 0.0f, 1.0f);
                if (!CHECK_STATUS(st, UG_OK))
                    return;
                double *got = th_download(v);
                double *want = th_alloc((size_t)n * sizeof *want);
                for (int64_t i = 0; i < n; i++)
                    want[i] = normal ? ref_random_normal(8, 1000 + (uint64_t)i, 0.0, 1.0)
                                     : ref_random_uniform(8, 1000 + (uint64_t)i, 0.0, 1.0);
                th_round_to(dt, want, n);
                th_compare("random into a view", got, want, n, th_tol(dt));
                th_guard_check_outside(g);
            }
        }
    }
}

/* Moments of a large draw, a sanity check on the whole pipeline. */
static void test_random_moments(ug_device *dev)
{
    int64_t n = 1 << 20;
    ug_tensor *u = draw(dev, UG_F32, n, false, 1, 0, 0.0f, 1.0f);
    ug_tensor *z = draw(dev, UG_F32, n, true, 2, 0, 0.0f, 1.0f);
    double *a = th_download(u), *b = th_download(z);
    if (!a || !b)
        return;
    double ma = 0, mb = 0, vb = 0;
    for (int64_t i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
        vb += b[i] * b[i];
    }
    ma /= (double)n;
    mb /= (double)n;
    vb = vb / (double)n - mb * mb;
    /* Standard errors: 0.29/1024 and 1/1024; allow 5 of them. */
    CHECK_MSG(fabs(ma - 0.5) < 0.0015, "uniform mean %g", ma);
    CHECK_MSG(fabs(mb) < 0.005, "normal mean %g", mb);
    CHECK_MSG(fabs(vb - 1.0) < 0.01, "normal variance %g", vb);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(philox_known_answers),
        TH_DEVICE_TEST(uniform_bitwise),
        TH_DEVICE_TEST(uniform_any_range),
        TH_DEVICE_TEST(normal_matches_reference),
        TH_DEVICE_TEST(offset_continues_stream),
        TH_DEVICE_TEST(random_f16),
        TH_DEVICE_TEST(random_into_guarded_view),
        TH_DEVICE_TEST(random_moments),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
