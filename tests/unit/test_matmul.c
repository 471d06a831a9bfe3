/* Matrix products: every transpose combination, batched with shared
 * operands, K = 0 and empty shapes, f32 and f16, views as inputs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

/* Builds a and b of the given stored shapes, runs ug_matmul, compares. */
static bool check_matmul(ug_device *dev, ug_dtype dt, int na, const int64_t *sa, int nb,
                         const int64_t *sb, bool ta, bool tb, bool guarded)
{
    char s1[128], s2[128];
    th_context("%s %s%s x %s%s%s", ug_dtype_name(dt), th_shape_str(na, sa, s1, sizeof s1),
               ta ? "^T" : "", th_shape_str(nb, sb, s2, sizeof s2), tb ? "^T" : "",
               guarded ? ", guarded views" : "");
    int before = th_failures();
    int64_t n_a = ref_numel(na, sa), n_b = ref_numel(nb, sb);
    double *a = th_random_values(n_a, -1, 1), *b = th_random_values(n_b, -1, 1);
    th_round_to(dt, a, n_a);
    th_round_to(dt, b, n_b);
    th_guard *ga = NULL, *gb = NULL;
    ug_tensor *A = guarded ? th_guarded(dev, dt, na, sa, a, &ga) : th_tensor(dev, dt, na, sa, a);
    ug_tensor *B = guarded ? th_guarded(dev, dt, nb, sb, b, &gb) : th_tensor(dev, dt, nb, sb, b);
    if (!A || !B)
        return false;
    int no;
    int64_t so[REF_MAX_DIMS];
    /* Output size bound: batch * M * N fits in the product of both numels + a bit. */
    int64_t m = ta ? sa[na - 1] : sa[na - 2], n = tb ? sb[nb - 2] : sb[nb - 1];
    int64_t batch = na > 2 ? ref_numel(na - 2, sa) : nb > 2 ? ref_numel(nb - 2, sb) : 1;
    double *want = th_alloc((size_t)(batch * m * n + 1) * sizeof *want);
    if (!ref_matmul(na, sa, a, nb, sb, b, ta, tb, want, &no, so)) {
        th_fail(TH_LOC, "test bug: shapes do not fit");
        return false;
    }
    th_round_to(dt, want, batch * m * n);
    ug_tensor *out = NULL;
    ug_status s = ug_matmul(A, B, ta, tb, &out);
    th_track(out);
    if (!CHECK_STATUS(s, UG_OK))
        return false;
    if (th_check_tensor(out, dt, no, so))
        th_compare("matmul", th_download(out), want, batch * m * n, TH_TOL_MATMUL);
    th_guard_check(ga);
    th_guard_check(gb);
    return th_failures() == before;
}

/* 2-D product of logical sizes M x K by K x N, stored per transpose. */
static bool check_mkn(ug_device *dev, ug_dtype dt, int64_t m, int64_t k, int64_t n, bool ta,
                      bool tb, bool guarded)
{
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    return check_matmul(dev, dt, 2, sa, 2, sb, ta, tb, guarded);
}

static void test_matmul_shapes(ug_device *dev)
{
    static const int64_t mkn[][3] = {{1, 1, 1},   {3, 5, 7},   {17, 33, 65}, {64, 127, 31},
                                     {1, 1000, 1}, {100, 1, 100}, {2, 3, 4097}, {129, 65, 1},
                                     /* a small C over a long K (a GPU's dot kernel) */
                                     {10, 500, 64},
                                     /* few tiles over a long K (a GPU's split K) */
                                     {64, 700, 120},
                                     /* enough 128x128 tiles to fill a GPU, edges in both */
                                     {300, 70, 520},
                                     /* whole tiles, rows a multiple of 16 bytes (a GPU's
                                      * 16-byte loads), K ending half a step in */
                                     {256, 72, 384}};
    for (size_t c = 0; c < sizeof mkn / sizeof mkn[0]; c++)
        for (int t = 0; t < 4; t++)
            if (!check_mkn(dev, UG_F32, mkn[c][0], mkn[c][1], mkn[c][2], t & 1, (t & 2) != 0,
                           (c + (size_t)t) % 3 == 0))
                return;
}

/* An MLP layer's shapes: forward X W^T, and the two backward products. */
static void test_matmul_training_shapes(ug_device *dev)
{
    int64_t x[] = {64, 784}, w[] = {500, 784}, dy[] = {64, 500};
    if (!check_matmul(dev, UG_F32, 2, x, 2, w, false, true, false)) /* [64,500] */
        return;
    if (!check_matmul(dev, UG_F32, 2, dy, 2, w, false, false, false)) /* dX [64,784] */
        return;
    check_matmul(dev, UG_F32, 2, dy, 2, x, true, false, true); /* dW [500,784] */
}

static void test_matmul_batched(ug_device *dev)
{
    static const struct {
        int na, nb;
        int64_t sa[4], sb[4];
        bool ta, tb;
    } cases[] = {
        {3, 3, {4, 5, 6}, {4, 6, 7}, false, false},
        {4, 4, {2, 3, 4, 5}, {2, 3, 5, 6}, false, false},
        {3, 2, {3, 5, 6}, {6, 7}, false, false},   /* b shared by every batch */
        {2, 3, {5, 6}, {3, 6, 7}, false, false},   /* a shared by every batch */
        {3, 3, {3, 6, 5}, {3, 7, 6}, true, true},
        {3, 2, {3, 6, 5}, {7, 6}, true, true},
        {4, 2, {2, 2, 17, 9}, {13, 9}, false, true},
        {2, 4, {9, 17}, {2, 1, 9, 13}, true, false},
        {3, 3, {1, 1, 1}, {1, 1, 1}, false, false},
        {3, 2, {3, 300, 4}, {5, 300}, true, true}, /* a small C over a long K */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        if (!check_matmul(dev, UG_F32, cases[c].na, cases[c].sa, cases[c].nb, cases[c].sb,
                          cases[c].ta, cases[c].tb, c % 2 == 1))
            return;
}

/* K = 0 gives zeros (even if the output's memory held garbage); M = 0 or
 * N = 0 give empty outputs. */
static void test_matmul_empty(ug_device *dev)
{
    /* Put garbage in the pool's cache first, so a kernel that skips K = 0
     * leaves it visible in a reused block. */
    int64_t junk_shape[] = {4096};
    ug_tensor *junk = th_tensor(dev, UG_F32, 1, junk_shape, th_random_values(4096, 5, 9));
    th_release(junk);
    static const struct {
        int na, nb;
        int64_t sa[3], sb[3];
        bool ta, tb;
    } cases[] = {
        {2, 2, {3, 0}, {0, 4}, false, false},
        {2, 2, {0, 3}, {4, 0}, true, true},
        {3, 2, {2, 3, 0}, {0, 4}, false, false},
        {2, 2, {0, 5}, {5, 4}, false, false},
        {2, 2, {3, 5}, {5, 0}, false, false},
        {3, 3, {0, 3, 5}, {0, 5, 4}, false, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        if (!check_matmul(dev, UG_F32, cases[c].na, cases[c].sa, cases[c].nb, cases[c].sb,
                          cases[c].ta, cases[c].tb, false))
            return;
    /* K = 0 at a size that cannot come from a zeroed fresh block. */
    int64_t a[] = {64, 0}, b[] = {0, 64};
    check_matmul(dev, UG_F32, 2, a, 2, b, false, false, false);
}

static void test_matmul_f16(ug_device *dev)
{
    for (int t = 0; t < 4; t++)
        if (!check_mkn(dev, UG_F16, 17, 33, 9, t & 1, (t & 2) != 0, t % 2 == 0) ||
            !check_mkn(dev, UG_F16, 128, 40, 132, t & 1, (t & 2) != 0, false)) /* 8-byte loads */
            return;
    int64_t sa[] = {3, 5, 40}, sb[] = {40, 7};
    if (!check_matmul(dev, UG_F16, 3, sa, 2, sb, false, false, true))
        return;
    if (!check_mkn(dev, UG_F16, 6, 300, 10, false, true, false)) /* a small C over a long K */
        return;
    if (!check_mkn(dev, UG_F16, 64, 300, 100, true, false, true)) /* few tiles over a long K */
        return;
    int64_t x[] = {64, 784}, w[] = {500, 784};
    check_matmul(dev, UG_F16, 2, x, 2, w, false, true, false);
}

/* Transposed operands given as views (slices) of bigger tensors. */
static void test_matmul_views(ug_device *dev)
{
    for (int t = 0; t < 4; t++)
        if (!check_mkn(dev, UG_F32, 31, 47, 29, t & 1, (t & 2) != 0, true))
            return;
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(matmul_shapes),
        TH_DEVICE_TEST(matmul_training_shapes),
        TH_DEVICE_TEST(matmul_batched),
        TH_DEVICE_TEST(matmul_empty),
        TH_DEVICE_TEST(matmul_f16),
        TH_DEVICE_TEST(matmul_views),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
