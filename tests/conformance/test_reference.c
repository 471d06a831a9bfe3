/* Checks the test suite's own reference implementations against published
 * or hand-computed answers, so that a library test failing means the
 * library is wrong, not the reference. Needs no device. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "kernels/common/elementwise.h" /* the library's kinds, by name */
#include "op_table.h"
#include "reference.h"

static double unary(const char *name, double x)
{
    const op_unary *row = op_unary_named(name);
    return row ? row->f(x) : NAN;
}

static double binary(const char *name, double a, double b)
{
    const op_binary *row = op_binary_named(name);
    return row ? row->f(a, b) : NAN;
}

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

static void test_bf16_reference_known_values(ug_device *dev)
{
    (void)dev;
    static const struct {
        double value;
        uint16_t bits;
    } cases[] = {
        {0.0, 0x0000}, {-0.0, 0x8000}, {1.0, 0x3f80}, {-2.0, 0xc000},
        {0.1, 0x3dcd}, {1.0 / 3.0, 0x3eab}, {3.14159265358979, 0x4049}, {65504.0, 0x4780},
        {1.0078125, 0x3f81},                  /* 1 + 2^-7 */
        {1.00390625, 0x3f80},                 /* 1 + 2^-8: tie, to even */
        {1.01171875, 0x3f82},                 /* 1 + 3 * 2^-8: tie, to even (up) */
        {0x1p-133, 0x0001},                   /* smallest subnormal */
        {0x1p-134, 0x0000},                   /* tie, to even 0 */
        {0x1.8p-134, 0x0001},
        {0x1p-126, 0x0080},                   /* smallest normal */
        {0x1.fep127, 0x7f7f},                 /* largest finite, (2 - 2^-7) 2^127 */
        {0x1.ffp127, 0x7f80},                 /* halfway to 2^128: inf */
        {1e39, 0x7f80}, {-INFINITY, 0xff80}, {NAN, 0x7fc0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t b = ref_bf16_bits(cases[i].value);
        CHECK_MSG(b == cases[i].bits, "bf16 of %.17g is 0x%04x, expected 0x%04x",
                  cases[i].value, b, cases[i].bits);
    }
    /* Every non-NaN bfloat16 decodes and encodes to itself. */
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        double v = ref_bf16_value((uint16_t)b);
        bad += isnan(v) ? !((b & 0x7f80) == 0x7f80 && (b & 0x7f)) : ref_bf16_bits(v) != b;
    }
    CHECK_MSG(bad == 0, "%d bfloat16 values do not round-trip", bad);
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
    ref_binary(op_binary_named("sub")->f, 2, s31, x, 2, s14, y, r);
    double want[] = {9, 8, 7, 6, 19, 18, 17, 16, 29, 28, 27, 26};
    CHECK(memcmp(r, want, sizeof want) == 0);
    /* [2,1,3] * [4,1]: out[i][j][k] = p[i][k] * q[j]. */
    double p[] = {1, 2, 3, 4, 5, 6}, q[] = {1, 10, 100, 1000}, r2[24];
    ref_binary(op_binary_named("mul")->f, 3, a, p, 2, b, q, r2);
    CHECK(r2[0] == 1 && r2[5] == 30 && r2[11] == 3000 && r2[12] == 4 && r2[23] == 6000);
    CHECK(binary("maximum", -1, 2) == 2 && binary("minimum", -1, 2) == -1);
    CHECK(binary("div", 1, 4) == 0.25);
    /* NaN on either side of maximum/minimum gives NaN (torch.maximum). */
    CHECK(isnan(binary("maximum", NAN, 1)) && isnan(binary("maximum", 1, NAN)));
    CHECK(isnan(binary("minimum", NAN, 1)) && isnan(binary("minimum", 1, NAN)));
}

static void test_reference_unary(ug_device *dev)
{
    (void)dev;
    /* Known values: gelu(1) = Phi(1) = 0.8413447460685429; sigmoid(0) = 0.5. */
    CHECK(fabs(unary("gelu", 1.0) - 0.8413447460685429) < 1e-15);
    CHECK(fabs(unary("gelu", -2.0) - (-2.0 * 0.022750131948179195)) < 1e-15);
    /* silu(1) = 1 / (1 + 1/e) = 0.7310585786300049. */
    CHECK(fabs(unary("silu", 1.0) - 0.7310585786300049) < 1e-15);
    CHECK(unary("sigmoid", 0.0) == 0.5);
    CHECK(unary("relu", -3.0) == 0.0 && unary("relu", 3.0) == 3.0);
    CHECK(isnan(unary("relu", NAN))); /* as torch.relu */
    CHECK(unary("relu6", -3.0) == 0.0 && unary("relu6", 3.0) == 3.0 && unary("relu6", 7.5) == 6.0);
    CHECK(isnan(unary("relu6", NAN)) && unary("relu6", INFINITY) == 6.0); /* as torch.nn.ReLU6 */
    CHECK(unary("clamp", -3.0) == -1.5 && unary("clamp", 0.5) == 0.5 && unary("clamp", 7.5) == 2.0);
    CHECK(unary("abs", -3.5) == 3.5 && unary("neg", 2.0) == -2.0);
    CHECK(isinf(unary("log", 0.0)) && isnan(unary("sqrt", -1.0)));
    double x[] = {1, 2}, y[2];
    ref_scale_shift(x, y, 2, 3.0, -1.0);
    CHECK(y[0] == 2.0 && y[1] == 5.0);
}

/* Each row's derivative against central differences of its own f, at
 * points spread over its range: the derivative column is checked, not
 * trusted. Points within 1e-3 of a kink (abs, relu at 0) are skipped. */
static void test_op_table_derivatives(ug_device *dev)
{
    (void)dev;
    const double h = 1e-6;
    for (int r = 0; r < op_unary_count; r++) {
        const op_unary *op = &op_unaries[r];
        th_context("%s", op->name);
        for (int i = 0; i <= 40; i++) {
            const double x = op->lo + (op->hi - op->lo) * i / 40.0 + 0.0123;
            if (fabs(x) < 1e-3)
                continue;
            const double fd = (op->f(x + h) - op->f(x - h)) / (2 * h);
            CHECK_MSG(fabs(fd - op->df(x)) <= 1e-5 * (1 + fabs(fd)), "f'(%g): %.9g, differences %.9g",
                      x, op->df(x), fd);
        }
    }
    for (int r = 0; r < op_binary_count; r++) {
        const op_binary *op = &op_binaries[r];
        if (!op->differentiable)
            continue;
        th_context("%s", op->name);
        for (int i = 0; i <= 12; i++)
            for (int j = 0; j <= 12; j++) {
                const double a = op->alo + (op->ahi - op->alo) * i / 12.0 + 0.0123;
                double b = op->blo + (op->bhi - op->blo) * j / 12.0 + 0.0371;
                if (fabs(b) < op->baway || fabs(a - b) < 1e-3)
                    continue;
                const double da = (op->f(a + h, b) - op->f(a - h, b)) / (2 * h);
                const double db = (op->f(a, b + h) - op->f(a, b - h)) / (2 * h);
                CHECK_MSG(fabs(da - op->dfa(a, b)) <= 1e-5 * (1 + fabs(da)) &&
                              fabs(db - op->dfb(a, b)) <= 1e-5 * (1 + fabs(db)),
                          "at (%g, %g): %g, %g; differences %g, %g", a, b, op->dfa(a, b),
                          op->dfb(a, b), da, db);
            }
    }
}

/* Every elementwise kind of the library (kernels/common/elementwise.h) has
 * a row, or is a building block with the test that covers it: a new op
 * without a row fails here. */
static void check_kind_covered(const char *family, const char *kind, int index, bool has_row,
                               const op_building_block *blocks, int nblocks)
{
    bool block = false;
    for (int i = 0; i < nblocks; i++)
        block |= !strcmp(blocks[i].kind, kind);
    CHECK_MSG(has_row || block, "%s op %s (%d) has no row in tests/support/op_table.c", family, kind, index);
    CHECK_MSG(!(has_row && block), "%s op %s has a row and is listed as a building block", family,
              kind);
}

static void test_op_table_covers_library(ug_device *dev)
{
    (void)dev;
    static const char *const unary_kinds[] = {
#define KIND_NAME_(NAME, EXPR) #NAME,
        UG_UNARY_OPS(KIND_NAME_)};
    static const char *const binary_kinds[] = {UG_BINARY_OPS(KIND_NAME_)
#undef KIND_NAME_
    };
    for (int k = 0; k < UG_UNARY_COUNT; k++) {
        bool row = false;
        for (int r = 0; r < op_unary_count; r++)
            row |= op_unaries[r].kind == k;
        check_kind_covered("unary", unary_kinds[k], k, row, op_unary_blocks, op_unary_block_count);
    }
    for (int k = 0; k < UG_BINARY_COUNT; k++) {
        bool row = false;
        for (int r = 0; r < op_binary_count; r++)
            row |= op_binaries[r].kind == k;
        check_kind_covered("binary", binary_kinds[k], k, row, op_binary_blocks, op_binary_block_count);
    }
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
    ref_layernorm(x, NULL, NULL, y, 1, 2, 0.0); /* no affine part */
    CHECK(y[0] == -1.0 && y[1] == 1.0);
    /* Row [3, 4, 0, 5] over 2 rows of 2: mean squares 12.5 and 12.5; with
     * eps 12.5 the root is 5, so y = x / 5 * gamma. */
    double xr[] = {3, 4, 0, 5}, yr[4];
    ref_rmsnorm(xr, gamma, yr, 2, 2, 12.5);
    CHECK(fabs(yr[0] - 1.2) < 1e-15 && fabs(yr[1] - 2.4) < 1e-15 && yr[2] == 0.0 && yr[3] == 3.0);
    ref_rmsnorm(xr, NULL, yr, 1, 4, 0.0); /* mean squares 50 / 4 */
    CHECK(fabs(yr[1] - 4.0 / sqrt(12.5)) < 1e-15);
    /* Two equal logits: log 2; smoothing 0.5 of 2 classes gives the same. */
    double logits[] = {0, 0, 0, 0, 0, 0}, labels[] = {1, 0, 2}, loss[3];
    ref_cross_entropy(logits, labels, loss, 3, 2, 0.0);
    CHECK(fabs(loss[0] - log(2.0)) < 1e-15 && fabs(loss[1] - log(2.0)) < 1e-15 && isnan(loss[2]));
    double big[] = {0, 10}, one[] = {0}, l2[1];
    ref_cross_entropy(big, one, l2, 1, 2, 0.2); /* 0.9 * -log p0 + 0.1 * -log p1 */
    double lse = 10 + log(1 + exp(-10.0));
    CHECK(fabs(l2[0] - (0.9 * lse + 0.1 * (lse - 10))) < 1e-12);
}

/* The mean with an ignored label, by hand: rows [0, 0] label 1 (loss
 * log 2), [0, log 3] label 0 (p0 = 1/4: loss log 4), [5, 7] label -100. */
static void test_reference_xent_mean(ug_device *dev)
{
    (void)dev;
    const double x[] = {0, 0, 0, log(3.0), 5, 7}, l2 = log(2.0);
    const int64_t labels[] = {1, 0, -100}, all_ignored[] = {-100, -100, -100};
    double dx[6];
    CHECK(fabs(ref_cross_entropy_mean(x, labels, 3, 2, 0.0, true, -100, dx) - 1.5 * l2) < 1e-15);
    const double want[] = {0.25, -0.25, -0.375, 0.375, 0, 0}; /* (softmax - onehot) / 2 */
    for (int i = 0; i < 6; i++)
        CHECK_MSG(fabs(dx[i] - want[i]) < 1e-15, "dx[%d] = %.17g, expected %g", i, dx[i], want[i]);
    /* Not ignored, -100 is a label outside [0, 2): NaN. */
    CHECK(isnan(ref_cross_entropy_mean(x, labels, 3, 2, 0.0, false, -100, NULL)));
    /* An index in [0, classes): row 1 (label 0) ignored; rows 0 and 2 counted. */
    const int64_t two[] = {1, 0, 1};
    const double lse = 7 + log(1 + exp(-2.0));
    CHECK(fabs(ref_cross_entropy_mean(x, two, 3, 2, 0.0, true, 0, NULL) - (l2 + lse - 7) / 2) < 1e-15);
    /* Every row ignored: NaN, and no gradient anywhere. */
    CHECK(isnan(ref_cross_entropy_mean(x, all_ignored, 3, 2, 0.0, true, -100, dx)));
    for (int i = 0; i < 6; i++)
        CHECK(dx[i] == 0.0);
    /* Smoothing 0.5 of 2 classes: targets [1/4, 3/4] and [3/4, 1/4]. */
    const double smooth = (l2 + 0.75 * log(4.0) + 0.25 * log(4.0 / 3.0)) / 2;
    CHECK(fabs(ref_cross_entropy_mean(x, labels, 3, 2, 0.5, true, -100, dx) - smooth) < 1e-15);
    CHECK(fabs(dx[0] - (0.5 - 0.25) / 2) < 1e-15 && fabs(dx[2] - (0.25 - 0.75) / 2) < 1e-15 && dx[5] == 0.0);
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

/* ---- convolutional ops: hand-computed answers ---- */

static void test_reference_conv_known(ug_device *dev)
{
    (void)dev;
    CHECK(ref_conv_out(7, 3, 1, 0, 1) == 5 && ref_conv_out(7, 3, 2, 1, 1) == 4);
    CHECK(ref_conv_out(5, 3, 1, 0, 2) == 1 && ref_conv_out(9, 5, 2, 2, 1) == 5);
    CHECK(ref_conv_out(2, 3, 1, 0, 1) < 1 && ref_conv_out(1, 1, 1, 0, 1) == 1);
    /* x = 1..9 in 3x3, w = [[1, 0], [0, -1]]: x[i][j] - x[i+1][j+1] = -4, + 0.5. */
    double x[9], w[] = {1, 0, 0, -1}, bias[] = {0.5}, y[4];
    for (int i = 0; i < 9; i++)
        x[i] = i + 1;
    ref_conv_geom p = {1, 1, 3, 3, 1, 2, 2, {1, 1}, {0, 0}, {1, 1}, 1};
    ref_conv2d(&p, x, w, bias, y);
    CHECK(y[0] == -3.5 && y[1] == -3.5 && y[2] == -3.5 && y[3] == -3.5);
    /* Padding 1, stride 2: outputs at the corners read the zero border. */
    p.padding[0] = p.padding[1] = 1;
    p.stride[0] = p.stride[1] = 2;
    ref_conv2d(&p, x, w, NULL, y);
    CHECK(y[0] == -1 && y[1] == -3 && y[2] == -7 && y[3] == -4);
    /* Groups: 2 channels [2, 3], weights [10, 100]: groups 2 keeps them
     * apart, groups 1 with one output channel sums them. */
    double x2[] = {2, 3}, w2[] = {10, 100}, y2[2];
    ref_conv_geom g2 = {1, 2, 1, 1, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, 2};
    ref_conv2d(&g2, x2, w2, NULL, y2);
    CHECK(y2[0] == 20 && y2[1] == 300);
    ref_conv_geom g1 = {1, 2, 1, 1, 1, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1};
    ref_conv2d(&g1, x2, w2, NULL, y2);
    CHECK(y2[0] == 320);
    /* Dilation 2 along the width: taps 2 apart. */
    double x3[] = {1, 2, 3, 4, 5}, w3[] = {1, 1}, y3[3];
    ref_conv_geom d = {1, 1, 1, 5, 1, 1, 2, {1, 1}, {0, 0}, {1, 2}, 1};
    ref_conv2d(&d, x3, w3, NULL, y3);
    CHECK(y3[0] == 4 && y3[1] == 6 && y3[2] == 8);

    /* Max pool: ties go to the first, a NaN wins, padding never does. */
    ref_pool_geom mp = {1, 1, 4, {1, 2}, {1, 1}, {0, 0}};
    double t[] = {3, 3, 1, 3}, ty[3];
    int64_t idx[3];
    ref_max_pool2d(&mp, t, ty, idx);
    CHECK(ty[0] == 3 && ty[1] == 3 && ty[2] == 3 && idx[0] == 0 && idx[1] == 1 && idx[2] == 3);
    double nx[] = {1, NAN, 5, 7};
    ref_max_pool2d(&mp, nx, ty, idx);
    CHECK(isnan(ty[0]) && isnan(ty[1]) && ty[2] == 7 && idx[0] == 1 && idx[1] == 1 && idx[2] == 3);
    double tdx[4], tdy[] = {1, 10, 100};
    ref_max_pool2d_backward(&mp, t, tdy, tdx);
    CHECK(tdx[0] == 1 && tdx[1] == 10 && tdx[2] == 0 && tdx[3] == 100);
    ref_pool_geom pp = {1, 1, 3, {1, 3}, {1, 1}, {0, 1}};
    double neg[] = {-5, -6, -7};
    ref_max_pool2d(&pp, neg, ty, idx);
    CHECK(ty[0] == -5 && ty[1] == -5 && ty[2] == -6 && idx[2] == 1);
    /* Avg pool counts the padding: [1, 2, 3] padded by 1, windows of 3. */
    double a[] = {1, 2, 3};
    ref_avg_pool2d(&pp, a, ty);
    CHECK(ty[0] == 1 && ty[1] == 2 && fabs(ty[2] - 5.0 / 3.0) < 1e-15);
    ref_pool_geom ps = {1, 1, 3, {1, 2}, {1, 2}, {0, 1}};
    ref_avg_pool2d(&ps, a, ty);
    CHECK(ty[0] == 0.5 && ty[1] == 2.5);
    double ady[] = {2, 4}, adx[3];
    ref_avg_pool2d_backward(&ps, ady, adx);
    CHECK(adx[0] == 1 && adx[1] == 2 && adx[2] == 2);

    /* Batch norm of [1, 3] (one channel, two rows): mean 2, biased variance
     * 1, unbiased 2: running mean 0.1 * 2, running var 0.9 + 0.1 * 2. */
    double bx[] = {1, 3}, one[] = {1}, zero[] = {0}, rm[] = {0}, rv[] = {1}, by[2];
    ref_batch_norm(bx, 2, 1, 1, one, zero, rm, rv, true, 0.1, 0.0, by);
    CHECK(by[0] == -1 && by[1] == 1);
    CHECK(fabs(rm[0] - 0.2) < 1e-15 && fabs(rv[0] - 1.1) < 1e-15);
    /* Eval: (x - 1) / sqrt(3 + 1) * 4 + 0.5 with the running statistics. */
    double em[] = {1}, ev[] = {3}, ew[] = {4}, eb[] = {0.5};
    ref_batch_norm(bx, 2, 1, 1, ew, eb, em, ev, false, 0.1, 1.0, by);
    CHECK(by[0] == 0.5 && by[1] == 4.5 && em[0] == 1 && ev[0] == 3);
}

/* ---- convolutional ops: gradients against central differences of the
 * forward references ---- */

typedef struct fd_op {
    int kind; /* 0 conv2d, 1 max pool, 2 avg pool, 3 batch norm training, 4 eval */
    ref_conv_geom conv;
    ref_pool_geom pool;
    int64_t n, c, inner;
    double *p[3]; /* x, weight, bias */
    int64_t count[3];
    double rm[8], rv[8];
    const double *dy;
    int64_t ny;
} fd_op;

/* sum(y * dy) */
static double fd_objective(const fd_op *op)
{
    double *y = th_alloc((size_t)op->ny * sizeof *y), total = 0.0;
    switch (op->kind) {
    case 0: ref_conv2d(&op->conv, op->p[0], op->p[1], op->p[2], y); break;
    case 1: ref_max_pool2d(&op->pool, op->p[0], y, NULL); break;
    case 2: ref_avg_pool2d(&op->pool, op->p[0], y); break;
    default: {
        double rm[8], rv[8];
        memcpy(rm, op->rm, sizeof rm);
        memcpy(rv, op->rv, sizeof rv);
        ref_batch_norm(op->p[0], op->n, op->c, op->inner, op->p[1], op->p[2], rm, rv,
                       op->kind == 3, 0.1, 1e-5, y);
    }
    }
    for (int64_t i = 0; i < op->ny; i++)
        total += y[i] * op->dy[i];
    return total;
}

static void fd_compare(fd_op *op, double *const *analytic, const char *name)
{
    const double h = 1e-5;
    for (int k = 0; k < 3; k++) {
        if (!op->p[k] || !analytic[k])
            continue;
        double worst = 0.0, scale = 0.0;
        for (int64_t i = 0; i < op->count[k]; i++) {
            const double keep = op->p[k][i];
            op->p[k][i] = keep + h;
            const double up = fd_objective(op);
            op->p[k][i] = keep - h;
            const double down = fd_objective(op);
            op->p[k][i] = keep;
            worst = fmax(worst, fabs((up - down) / (2 * h) - analytic[k][i]));
            scale = fmax(scale, fabs(analytic[k][i]));
        }
        CHECK_MSG(scale > 0 && worst <= 1e-6 * scale, "%s, operand %d: finite differences differ by %.3g (largest %.3g)",
                  name, k, worst, scale);
    }
}

static void test_reference_conv_gradients(ug_device *dev)
{
    (void)dev;
    static const ref_conv_geom convs[] = {
        {2, 3, 5, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},
        {1, 4, 7, 5, 6, 3, 2, {2, 1}, {2, 0}, {1, 2}, 2},
        {2, 3, 6, 6, 3, 3, 3, {1, 2}, {1, 1}, {2, 1}, 3},
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        th_context("conv case %zu", i);
        fd_op op = {.kind = 0, .conv = convs[i]};
        const ref_conv_geom *p = &op.conv;
        const int64_t oh = ref_conv_out(p->h, p->kh, p->stride[0], p->padding[0], p->dilation[0]);
        const int64_t ow = ref_conv_out(p->w, p->kw, p->stride[1], p->padding[1], p->dilation[1]);
        op.count[0] = p->n * p->c * p->h * p->w;
        op.count[1] = p->oc * (p->c / p->groups) * p->kh * p->kw;
        op.count[2] = p->oc;
        op.ny = p->n * p->oc * oh * ow;
        for (int k = 0; k < 3; k++)
            op.p[k] = th_random_values(op.count[k], -1, 1);
        op.dy = th_random_values(op.ny, -1, 1);
        double *g[3];
        for (int k = 0; k < 3; k++)
            g[k] = th_alloc((size_t)op.count[k] * sizeof(double));
        ref_conv2d_backward(p, op.p[0], op.p[1], op.dy, g[0], g[1], g[2]);
        fd_compare(&op, g, "conv2d");
    }
    static const ref_pool_geom pools[] = {
        {3, 5, 7, {3, 3}, {2, 2}, {1, 1}},
        {2, 6, 5, {2, 3}, {1, 2}, {1, 0}},
    };
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
        for (int kind = 1; kind <= 2; kind++) {
            th_context("%s pool case %zu", kind == 1 ? "max" : "avg", i);
            fd_op op = {.kind = kind, .pool = pools[i]};
            const ref_pool_geom *p = &op.pool;
            op.count[0] = p->planes * p->h * p->w;
            op.ny = p->planes * ref_conv_out(p->h, p->kernel[0], p->stride[0], p->padding[0], 1) *
                    ref_conv_out(p->w, p->kernel[1], p->stride[1], p->padding[1], 1);
            op.p[0] = th_random_values(op.count[0], -1, 1);
            op.dy = th_random_values(op.ny, -1, 1);
            double *g[3] = {th_alloc((size_t)op.count[0] * sizeof(double)), NULL, NULL};
            if (kind == 1)
                ref_max_pool2d_backward(p, op.p[0], op.dy, g[0]);
            else
                ref_avg_pool2d_backward(p, op.dy, g[0]);
            fd_compare(&op, g, kind == 1 ? "max_pool2d" : "avg_pool2d");
        }
    }
    for (int kind = 3; kind <= 4; kind++) {
        for (int shape = 0; shape < 2; shape++) {
            th_context("batch norm %s, inner %d", kind == 3 ? "training" : "eval", shape ? 6 : 1);
            fd_op op = {.kind = kind, .n = 4, .c = 3, .inner = shape ? 6 : 1};
            op.count[0] = op.ny = op.n * op.c * op.inner;
            op.count[1] = op.count[2] = op.c;
            op.p[0] = th_random_values(op.count[0], -2, 2);
            op.p[1] = th_random_values(op.c, 0.5, 1.5);
            op.p[2] = th_random_values(op.c, -1, 1);
            for (int ch = 0; ch < 3; ch++) {
                op.rm[ch] = th_uniform(-0.5, 0.5);
                op.rv[ch] = th_uniform(0.5, 2);
            }
            op.dy = th_random_values(op.ny, -1, 1);
            double *g[3];
            for (int k = 0; k < 3; k++)
                g[k] = th_alloc((size_t)op.count[k] * sizeof(double));
            ref_batch_norm_backward(op.p[0], op.n, op.c, op.inner, op.p[1], op.rm, op.rv,
                                    kind == 3, 1e-5, op.dy, g[0], g[1], g[2]);
            fd_compare(&op, g, "batch_norm");
        }
    }
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
        TH_HOST_TEST(bf16_reference_known_values),
        TH_HOST_TEST(reference_broadcast),
        TH_HOST_TEST(reference_unary),
        TH_HOST_TEST(op_table_derivatives),
        TH_HOST_TEST(op_table_covers_library),
        TH_HOST_TEST(reference_reduce),
        TH_HOST_TEST(reference_matmul),
        TH_HOST_TEST(reference_softmax_transpose),
        TH_HOST_TEST(reference_layernorm_xent),
        TH_HOST_TEST(reference_xent_mean),
        TH_HOST_TEST(reference_conv_known),
        TH_HOST_TEST(reference_conv_gradients),
        TH_HOST_TEST(nmse_definition),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
