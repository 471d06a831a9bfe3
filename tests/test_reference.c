/* Checks the test suite's own reference implementations against published
 * or hand-computed answers, so that a library test failing means the
 * library is wrong, not the reference. Needs no device. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

/* Known-answer vectors of Philox 4x32-10 from Random123 (kat_vectors). */
static void test_philox_known_answers(ug_device *dev)
{
    (void)dev;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        ref_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int w = 0; w < 4; w++)
            CHECK_MSG(out[w] == kat[i].out[w], "vector %zu word %d: 0x%08x, expected 0x%08x", i,
                      w, out[w], kat[i].out[w]);
    }
    /* The library's layout: counter (index lo, index hi, 0, 0), key (seed lo,
     * seed hi); index 0 and seed 0 is the first vector. */
    uint32_t r0, r1;
    ref_philox_words(0, 0, &r0, &r1);
    CHECK(r0 == 0x6627e8d5u && r1 == 0xe169c58du);
    ref_philox_words(0xffffffffffffffffull, 0xffffffffull, &r0, &r1);
    uint32_t ctr[4] = {0xffffffffu, 0, 0, 0}, key[2] = {0xffffffffu, 0xffffffffu}, out[4];
    ref_philox4x32_10(ctr, key, out);
    CHECK(r0 == out[0] && r1 == out[1]);
    /* uniform uses the top 24 bits of r0. */
    ref_philox_words(0, 0, &r0, &r1);
    CHECK(ref_random_uniform(0, 0, 0.0, 1.0) == (double)(0x6627e8d5u >> 8) / 16777216.0);
    CHECK(ref_random_uniform(0, 0, -2.0, 2.0) == -2.0 + 4.0 * (double)(0x6627e8d5u >> 8) / 16777216.0);
    double u1 = ((0x6627e8d5u >> 8) + 1.0) / 16777216.0, u2 = (0xe169c58du >> 8) / 16777216.0;
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    CHECK(fabs(ref_random_normal(0, 0, 1.0, 2.0) - (1.0 + 2.0 * z)) < 1e-12);
}

static void test_f16_reference_known_values(ug_device *dev)
{
    (void)dev;
    static const struct {
        double value;
        uint16_t bits;
    } cases[] = {
        {0.0, 0x0000}, {-0.0, 0x8000}, {1.0, 0x3c00}, {-2.0, 0xc000}, {0.5, 0x3800},
        {65504.0, 0x7bff},               /* largest finite */
        {65519.0, 0x7bff},               /* below the halfway point */
        {65520.0, 0x7c00},               /* halfway to 2^16 rounds to inf */
        {1e6, 0x7c00}, {-INFINITY, 0xfc00},
        {5.960464477539063e-08, 0x0001}, /* 2^-24, smallest subnormal */
        {2.98023223876953125e-08, 0x0000}, /* 2^-25: tie, rounds to even 0 */
        {4.470348358154297e-08, 0x0001}, /* 1.5 * 2^-25: above the tie */
        {6.097555160522461e-05, 0x03ff}, /* largest subnormal */
        {6.103515625e-05, 0x0400},       /* 2^-14, smallest normal */
        {0.1, 0x2e66}, {1.0 / 3.0, 0x3555}, {3.14159265358979, 0x4248},
        {1.0009765625, 0x3c01},          /* 1 + 2^-10 */
        {1.00048828125, 0x3c00},         /* 1 + 2^-11: tie, to even */
        {1.00146484375, 0x3c02},         /* 1 + 3 * 2^-11: tie, to even (up) */
        {2049.0, 0x6800},                /* tie between 2048 and 2050 */
        {2051.0, 0x6802},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t b = ref_f16_bits(cases[i].value);
        CHECK_MSG(b == cases[i].bits, "f16 of %.17g is 0x%04x, expected 0x%04x",
                  cases[i].value, b, cases[i].bits);
    }
    CHECK(ref_f16_bits(NAN) == 0x7e00 || (ref_f16_bits(NAN) & 0x7c00) == 0x7c00);
    /* Every non-NaN half decodes and encodes to itself. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double v = ref_f16_value((uint16_t)h);
        if (isnan(v)) {
            bad += !((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
            continue;
        }
        bad += ref_f16_bits(v) != h;
    }
    CHECK_MSG(bad == 0, "%d half values do not round-trip", bad);
    CHECK(ref_f16_value(0x3c00) == 1.0);
    CHECK(ref_f16_value(0x0001) == ldexp(1.0, -24));
    CHECK(ref_f16_value(0x7bff) == 65504.0);
    CHECK(isinf(ref_f16_value(0xfc00)) && ref_f16_value(0xfc00) < 0);
}

static void test_reference_broadcast(ug_device *dev)
{
    (void)dev;
    int n;
    int64_t out[REF_MAX_DIMS];
    int64_t a[] = {2, 1, 3}, b[] = {4, 1};
    CHECK(ref_broadcast_shape(3, a, 2, b, &n, out) && n == 3 && out[0] == 2 && out[1] == 4 &&
          out[2] == 3);
    int64_t c[] = {3, 4}, d[] = {2, 4};
    CHECK(!ref_broadcast_shape(2, c, 2, d, &n, out));
    int64_t e[] = {0, 4}, f[] = {4};
    CHECK(ref_broadcast_shape(2, e, 1, f, &n, out) && n == 2 && out[0] == 0 && out[1] == 4);
    CHECK(ref_broadcast_shape(0, NULL, 2, c, &n, out) && n == 2 && out[0] == 3 && out[1] == 4);
    /* [3,1] - [1,4]: out[i][j] = x[i] - y[j]. */
    int64_t s31[] = {3, 1}, s14[] = {1, 4};
    double x[] = {10, 20, 30}, y[] = {1, 2, 3, 4}, r[12];
    ref_binary(REF_SUB, 2, s31, x, 2, s14, y, r);
    double want[] = {9, 8, 7, 6, 19, 18, 17, 16, 29, 28, 27, 26};
    CHECK(memcmp(r, want, sizeof want) == 0);
    /* [2,1,3] * [4,1]: out[i][j][k] = p[i][k] * q[j]. */
    double p[] = {1, 2, 3, 4, 5, 6}, q[] = {1, 10, 100, 1000}, r2[24];
    ref_binary(REF_MUL, 3, a, p, 2, b, q, r2);
    CHECK(r2[0] == 1 && r2[5] == 30 && r2[11] == 3000 && r2[12] == 4 && r2[23] == 6000);
    CHECK(ref_binary_scalar(REF_MAXIMUM, -1, 2) == 2 && ref_binary_scalar(REF_MINIMUM, -1, 2) == -1);
    CHECK(ref_binary_scalar(REF_DIV, 1, 4) == 0.25);
    /* NaN on either side of maximum/minimum gives NaN (torch.maximum). */
    CHECK(isnan(ref_binary_scalar(REF_MAXIMUM, NAN, 1)) && isnan(ref_binary_scalar(REF_MAXIMUM, 1, NAN)));
    CHECK(isnan(ref_binary_scalar(REF_MINIMUM, NAN, 1)) && isnan(ref_binary_scalar(REF_MINIMUM, 1, NAN)));
}

static void test_reference_unary(ug_device *dev)
{
    (void)dev;
    /* Known values: gelu(1) = Phi(1) = 0.8413447460685429; sigmoid(0) = 0.5. */
    CHECK(fabs(ref_unary_scalar(REF_GELU, 1.0) - 0.8413447460685429) < 1e-15);
    CHECK(fabs(ref_unary_scalar(REF_GELU, -2.0) - (-2.0 * 0.022750131948179195)) < 1e-15);
    /* silu(1) = 1 / (1 + 1/e) = 0.7310585786300049. */
    CHECK(fabs(ref_unary_scalar(REF_SILU, 1.0) - 0.7310585786300049) < 1e-15);
    CHECK(ref_unary_scalar(REF_SIGMOID, 0.0) == 0.5);
    CHECK(ref_unary_scalar(REF_RELU, -3.0) == 0.0 && ref_unary_scalar(REF_RELU, 3.0) == 3.0);
    CHECK(isnan(ref_unary_scalar(REF_RELU, NAN))); /* as torch.relu */
    CHECK(ref_unary_scalar(REF_ABS, -3.5) == 3.5 && ref_unary_scalar(REF_NEG, 2.0) == -2.0);
    CHECK(isinf(ref_unary_scalar(REF_LOG, 0.0)) && isnan(ref_unary_scalar(REF_SQRT, -1.0)));
    double x[] = {1, 2}, y[2];
    ref_scale_shift(x, y, 2, 3.0, -1.0);
    CHECK(y[0] == 2.0 && y[1] == 5.0);
}

static void test_reference_reduce(ug_device *dev)
{
    (void)dev;
    int64_t shape[] = {2, 3};
    double x[] = {1, 5, 5, 7, -2, 7}, r[3];
    ref_reduce(REF_RSUM, 2, shape, x, 0, false, r);
    CHECK(r[0] == 8 && r[1] == 3 && r[2] == 12);
    ref_reduce(REF_RSUM, 2, shape, x, 1, false, r);
    CHECK(r[0] == 11 && r[1] == 12);
    ref_reduce(REF_RARGMAX, 2, shape, x, 1, false, r);
    CHECK(r[0] == 1 && r[1] == 0); /* ties pick the first */
    ref_reduce(REF_RMAX, 2, shape, x, 0, true, r);
    CHECK(r[0] == 7);
    ref_reduce(REF_RARGMAX, 2, shape, x, 0, true, r);
    CHECK(r[0] == 3);
    ref_reduce(REF_RMEAN, 2, shape, x, 0, true, r);
    CHECK(r[0] == 23.0 / 6.0);
    ref_reduce(REF_RSUMSQ, 2, shape, x, 1, false, r);
    CHECK(r[0] == 51 && r[1] == 102);
    /* A NaN is the maximum; argmax gives the first NaN (torch.max/argmax). */
    double y[] = {1, NAN, 9, NAN, 2, 3};
    ref_reduce(REF_RMAX, 2, shape, y, 1, false, r);
    CHECK(isnan(r[0]) && isnan(r[1]));
    ref_reduce(REF_RARGMAX, 2, shape, y, 1, false, r);
    CHECK(r[0] == 1 && r[1] == 0);
    ref_reduce(REF_RARGMAX, 2, shape, y, 0, true, r);
    CHECK(r[0] == 1);
}

static void test_reference_layernorm_xent(ug_device *dev)
{
    (void)dev;
    /* Row [1, 3]: mean 2, variance 1, normalised [-1, 1]. */
    double x[] = {1, 3}, gamma[] = {2, 3}, beta[] = {0.5, -1}, y[2];
    ref_layernorm(x, gamma, beta, y, 1, 2, 0.0);
    CHECK(y[0] == -1.5 && y[1] == 2.0);
    /* Two equal logits: log 2; smoothing 0.5 of 2 classes gives the same. */
    double logits[] = {0, 0, 0, 0, 0, 0}, labels[] = {1, 0, 2}, loss[3];
    ref_cross_entropy(logits, labels, loss, 3, 2, 0.0);
    CHECK(fabs(loss[0] - log(2.0)) < 1e-15 && fabs(loss[1] - log(2.0)) < 1e-15 && isnan(loss[2]));
    double big[] = {0, 10}, one[] = {0}, l2[1];
    ref_cross_entropy(big, one, l2, 1, 2, 0.2); /* 0.9 * -log p0 + 0.1 * -log p1 */
    double lse = 10 + log(1 + exp(-10.0));
    CHECK(fabs(l2[0] - (0.9 * lse + 0.1 * (lse - 10))) < 1e-12);
}

static void test_reference_matmul(ug_device *dev)
{
    (void)dev;
    /* [2,3] x [3,2] by hand. */
    int64_t sa[] = {2, 3}, sb[] = {3, 2}, so[REF_MAX_DIMS];
    double a[] = {1, 2, 3, 4, 5, 6}, b[] = {7, 8, 9, 10, 11, 12}, c[4];
    int n;
    CHECK(ref_matmul(2, sa, a, 2, sb, b, false, false, c, &n, so));
    CHECK(n == 2 && so[0] == 2 && so[1] == 2);
    CHECK(c[0] == 58 && c[1] == 64 && c[2] == 139 && c[3] == 154);
    /* The same through transposed storage: a^T stored [3,2], b^T stored [2,3]. */
    double at[] = {1, 4, 2, 5, 3, 6}, bt[] = {7, 9, 11, 8, 10, 12}, c2[4];
    int64_t sat[] = {3, 2}, sbt[] = {2, 3};
    CHECK(ref_matmul(2, sat, at, 2, sbt, bt, true, true, c2, &n, so));
    CHECK(memcmp(c, c2, sizeof c) == 0);
    CHECK(!ref_matmul(2, sa, a, 2, sa, a, false, false, c2, &n, so));
    /* K = 0 gives zeros. */
    int64_t z1[] = {2, 0}, z2[] = {0, 2};
    CHECK(ref_matmul(2, z1, a, 2, z2, b, false, false, c2, &n, so) && c2[0] == 0 && c2[3] == 0);
}

static void test_reference_softmax_transpose(ug_device *dev)
{
    (void)dev;
    double x[] = {1, 2, 3, 1000, 1000, -INFINITY}, y[6], l[6];
    ref_softmax(x, y, 2, 3, false);
    ref_softmax(x, l, 2, 3, true);
    double e = exp(1.0);
    CHECK(fabs(y[2] - e * e / (1 + e + e * e)) < 1e-15);
    CHECK(fabs(y[0] + y[1] + y[2] - 1.0) < 1e-15);
    CHECK(y[3] == 0.5 && y[4] == 0.5 && y[5] == 0.0);
    CHECK(fabs(l[3] + log(2.0)) < 1e-15 && isinf(l[5]) && l[5] < 0);
    int64_t shape[] = {2, 2, 3};
    double t[12], u[12];
    for (int i = 0; i < 12; i++)
        t[i] = i;
    ref_transpose(3, shape, t, u);
    double want[] = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};
    CHECK(memcmp(u, want, sizeof want) == 0);
}

/* The comparison itself: NMSE, NaN/inf positions. */
static void test_nmse_definition(ug_device *dev)
{
    (void)dev;
    double ref[] = {1, 2, 3, 4}, got[] = {1, 2, 3, 5};
    CHECK(fabs(th_nmse(got, ref, 4) - 1.0 / 30.0) < 1e-15);
    double zero[] = {0, 0}, small[] = {1e-4, 0};
    CHECK(fabs(th_nmse(small, zero, 2) - 1e-8) < 1e-20);
    CHECK(th_nmse(ref, ref, 4) == 0.0);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(philox_known_answers),
        TH_HOST_TEST(f16_reference_known_values),
        TH_HOST_TEST(reference_broadcast),
        TH_HOST_TEST(reference_unary),
        TH_HOST_TEST(reference_reduce),
        TH_HOST_TEST(reference_matmul),
        TH_HOST_TEST(reference_softmax_transpose),
        TH_HOST_TEST(reference_layernorm_xent),
        TH_HOST_TEST(nmse_definition),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
