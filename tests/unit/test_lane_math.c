/* The CPU backend's exp, erf and tanh (kernels/common/lane_math.h) against
 * libm's double functions over a sweep of f32 bit patterns, the edges of
 * their ranges, and in vectorised loops against one call at a time (same
 * bits: this file is built as the CPU kernels are, -O3 without FMA
 * contraction). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kernels/common/lane_math.h"

/* The spacing of f32 values at the magnitude of r, denormals included. */
static double ulp_at(double r)
{
    const double a = fabs(r);
    if (a < 0x1p-126)
        return 0x1p-149;
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 24);
}

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Called through a pointer, so each value goes through on its own. */
typedef float (*lane_fn)(float);
static float call_exp(float x) { return ug_lane_expf(x); }
static float call_erf(float x) { return ug_lane_erff(x); }
static float call_tanh(float x) { return ug_lane_tanhf(x); }
static volatile lane_fn one_exp = call_exp, one_erf = call_erf, one_tanh = call_tanh;

/* Worst error in ulps of f(x) against ref over every step-th f32 in
 * [lo, hi] (by bit pattern, both signs), and where it was. */
static double worst_ulps(lane_fn f, double (*ref)(double), float lo, float hi, uint32_t step, float *at)
{
    double worst = 0.0;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t b = 0; b < 0x7f800000u; b += step) {
            const float x = sign ? -from_bits(b) : from_bits(b);
            if (x < lo || x > hi)
                continue;
            const double r = ref(x), e = fabs((double)f(x) - r) / ulp_at(r);
            if (e > worst) {
                worst = e;
                *at = x;
            }
        }
    return worst;
}

static void test_exp_accuracy(ug_device *dev)
{
    (void)dev;
    float at = 0.0f;
    /* Every result from the largest finite down into the denormals. */
    const double e = worst_ulps(one_exp, exp, -103.0f, 88.72f, 97, &at);
    CHECK_MSG(e <= 1.5, "exp: %.2f ulps at %.9g", e, at);
    CHECK(one_exp(0.0f) == 1.0f && one_exp(-0.0f) == 1.0f);
    CHECK(one_exp(1.0f) == (float)exp(1.0));
    CHECK(isinf(one_exp(89.0f)) && isinf(one_exp(INFINITY)) && one_exp(INFINITY) > 0);
    CHECK(one_exp(-104.5f) == 0.0f && one_exp(-INFINITY) == 0.0f && one_exp(-1e30f) == 0.0f);
    CHECK(isnan(one_exp(NAN)));
    CHECK(one_exp(-100.0f) > 0.0f && one_exp(-100.0f) < 0x1p-126f); /* a denormal, not 0 */
}

static void test_erf_accuracy(ug_device *dev)
{
    (void)dev;
    float at = 0.0f;
    const double e = worst_ulps(one_erf, erf, -8.0f, 8.0f, 61, &at);
    CHECK_MSG(e <= 3.0, "erf: %.2f ulps at %.9g", e, at);
    /* Either side of the switch between the two forms. */
    for (float x = 0.9f; x < 0.95f; x += 1e-4f) {
        const double r = erf(x);
        CHECK_MSG(fabs(one_erf(x) - r) <= 4 * ulp_at(r), "erf(%.9g)", x);
    }
    CHECK(one_erf(0.0f) == 0.0f && one_erf(4.0f) == 1.0f && one_erf(-4.0f) == -1.0f);
    CHECK(one_erf(INFINITY) == 1.0f && one_erf(-INFINITY) == -1.0f && isnan(one_erf(NAN)));
    CHECK(one_erf(1e-30f) > 0.0f && one_erf(-1e-30f) < 0.0f);
}

static void test_tanh_accuracy(ug_device *dev)
{
    (void)dev;
    float at = 0.0f;
    const double e = worst_ulps(one_tanh, tanh, -20.0f, 20.0f, 61, &at);
    CHECK_MSG(e <= 3.0, "tanh: %.2f ulps at %.9g", e, at);
    CHECK(one_tanh(0.0f) == 0.0f && one_tanh(100.0f) == 1.0f && one_tanh(-100.0f) == -1.0f);
    CHECK(one_tanh(INFINITY) == 1.0f && one_tanh(-INFINITY) == -1.0f && isnan(one_tanh(NAN)));
    CHECK(one_tanh(1e-30f) == 1e-30f);
}

/* A loop the compiler vectorises gives the bits of one call at a time. */
static void test_vector_loops_match_calls(ug_device *dev)
{
    (void)dev;
    enum { N = 4099 };
    static float x[N], ye[N], yf[N], yt[N];
    for (int i = 0; i < N; i++)
        x[i] = -110.0f + 200.0f * (float)i / (float)N + (float)(i % 7) * 1e-3f;
    for (int i = 0; i < N; i++)
        ye[i] = ug_lane_expf(x[i]);
    for (int i = 0; i < N; i++)
        yf[i] = ug_lane_erff(x[i] * 0.05f);
    for (int i = 0; i < N; i++)
        yt[i] = ug_lane_tanhf(x[i] * 0.1f);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        const float e = one_exp(x[i]), f = one_erf(x[i] * 0.05f), t = one_tanh(x[i] * 0.1f);
        differ += memcmp(&e, &ye[i], sizeof e) != 0 || memcmp(&f, &yf[i], sizeof f) != 0 ||
                  memcmp(&t, &yt[i], sizeof t) != 0;
    }
    CHECK_MSG(differ == 0, "%d of %d values differ between the loop and single calls", differ, N);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(exp_accuracy),
        TH_HOST_TEST(erf_accuracy),
        TH_HOST_TEST(tanh_accuracy),
        TH_HOST_TEST(vector_loops_match_calls),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
