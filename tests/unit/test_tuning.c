/* Tuning and its cache. The cache file format (base/cache_file.h) against
 * hand-made damage: a changed byte, a cut, another key, another kind of
 * file. Warnings reach the handler, and nothing without one. On OpenCL, the
 * GEMM tuning across processes, as users meet it: the first product
 * measures and saves, a second process loads (the file is not rewritten), a
 * damaged file is reported and measured again, UG_AUTOTUNE=0 neither reads
 * nor writes, and ug_device_autotune measures again on request; a sound
 * file holding CLBlast parameters off CLBlast's rules, or legal ones that
 * compute wrongly on the device, is ignored with a warning; FIFOs at the
 * cache paths are refused, not waited on. Every product in those processes
 * is exact against a double-precision reference, one of them of a shape
 * that goes through CLBlast even on POCL's CPU device. The rules
 * (backends/opencl/gemm_choice.h) against hand-worked sets. Links the
 * library's objects for base/cache_file.h. */
#define _POSIX_C_SOURCE 200809L /* fork, execl, setenv, mkdtemp */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cache_file.h"
#include "base/error.h"
#include "children.h"
#include "harness.h"
#ifdef UG_TEST_OPENCL_BUILT
#include "backends/opencl/gemm_choice.h"
#endif

static const char magic[8] = {'U', 'G', 'T', 'E', 'S', 'T', '0', '1'};

static char *temp_folder(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ug-test-tuning-XXXXXX");
    return mkdtemp(dir);
}

/* XDG_CACHE_HOME as the test found it, set again when its folder goes:
 * the tests after it (and the cache writes of a device's other choices)
 * would otherwise make the removed folder again. */
static char saved_cache_home[512];
static bool had_cache_home;

static void use_cache_home(const char *dir)
{
    const char *was = getenv("XDG_CACHE_HOME");
    had_cache_home = was != NULL;
    snprintf(saved_cache_home, sizeof saved_cache_home, "%s", was ? was : "");
    setenv("XDG_CACHE_HOME", dir, 1);
}

static void remove_folder(const char *dir)
{
    if (had_cache_home)
        setenv("XDG_CACHE_HOME", saved_cache_home, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0);
}

/* Overwrites the byte at offset (from the end when negative). */
static void flip_byte(const char *path, long offset)
{
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    REQUIRE(fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET) == 0);
    int c = fgetc(f);
    REQUIRE(c != EOF);
    REQUIRE(fseek(f, -1, SEEK_CUR) == 0);
    fputc(c ^ 0x21, f);
    fclose(f);
}

static ug_cache_result load(const char *path, const char *key, char *why, size_t why_len,
                            char **data)
{
    size_t size = 0;
    unsigned char *bytes = NULL;
    ug_cache_result r =
        ug_cache_load(path, magic, key, strlen(key), 1024, &bytes, &size, why, why_len);
    *data = (char *)bytes;
    return r;
}

static void test_cache_file_checks(ug_device *unused)
{
    (void)unused;
    char *dir = temp_folder();
    REQUIRE(dir);
    use_cache_home(dir);
    const char *key = "device A\ndriver 1.0";
    char path[512], why[700];
    REQUIRE(ug_cache_path("test", key, strlen(key), ".txt", path, sizeof path));
    CHECK_MSG(strstr(path, "/unigrad/test-") != NULL, "path %s", path);

    char *data = NULL;
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_MISSING);
    REQUIRE_OK(ug_cache_store(path, magic, key, strlen(key), "chosen 42\n", 10));
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_HIT);
    CHECK(data && strcmp(data, "chosen 42\n") == 0);
    free(data);

    /* The same file asked for under another key: never used. */
    CHECK(load(path, "device B\ndriver 1.0", why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "another device") != NULL, "why: %s", why);
    CHECK(load(path, "device A\ndriver 1.1", why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "another device") != NULL, "why: %s", why);
    CHECK(!data);

    flip_byte(path, -2); /* in the data */
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "checksum") != NULL && strstr(why, path) != NULL, "why: %s", why);

    REQUIRE_OK(ug_cache_store(path, magic, key, strlen(key), "chosen 42\n", 10));
    REQUIRE(truncate(path, 40) == 0);
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "truncated") != NULL, "why: %s", why);
    REQUIRE(truncate(path, 10) == 0);
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "header") != NULL, "why: %s", why);

    REQUIRE_OK(ug_cache_store(path, magic, key, strlen(key), "chosen 42\n", 10));
    flip_byte(path, 0);
    CHECK(load(path, key, why, sizeof why, &data) == UG_CACHE_DAMAGED);
    CHECK_MSG(strstr(why, "magic") != NULL, "why: %s", why);
    remove_folder(dir);
}

/* --load-fifo PATH: the reader's answer for the FIFO at PATH, 0 if it
 * was refused with a reason naming it. */
static int load_fifo_child(const char *path)
{
    char why[700] = "", *data = NULL;
    ug_cache_result r = load(path, "key", why, sizeof why, &data);
    bool named = strstr(why, path) && strstr(why, "FIFO");
    if (!named)
        fprintf(stderr, "why: %s\n", why);
    return r == UG_CACHE_DAMAGED && !data && named ? 0 : 1;
}

/* A FIFO where a cache file belongs (put there by mistake or by another
 * user): the reader refuses it at once. It runs in a child ended after
 * 30 s, so the old reader, which waited for a writer forever, fails here
 * rather than at ctest's timeout. */
static void test_cache_fifo_is_refused(ug_device *unused)
{
    (void)unused;
    char *dir = temp_folder();
    REQUIRE(dir);
    char path[256];
    snprintf(path, sizeof path, "%s/entry.txt", dir);
    REQUIRE(mkfifo(path, 0600) == 0);
    const char *const args[] = {"test_tuning", "--load-fifo", path, NULL};
    fflush(NULL);
    int status = th_wait_child(th_spawn_self(args, NULL, NULL, NULL), 30);
    CHECK_MSG(status != 128 + SIGALRM, "reading a FIFO at a cache path hung (ended after 30 s)");
    CHECK_MSG(status == 0, "a FIFO at a cache path was not refused with a reason naming it (status %d)", status);
    struct stat st;
    CHECK_MSG(stat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the reader changed the FIFO");
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0);
}

static void record_warning(const char *message, void *user)
{
    snprintf(user, 256, "%s", message);
}

static void test_warnings_reach_the_handler(ug_device *unused)
{
    (void)unused;
    char got[256] = "";
    ug_set_warning_handler(record_warning, got);
    ug_warn("cache %s is damaged", "x.txt");
    CHECK_MSG(strcmp(got, "cache x.txt is damaged") == 0, "got '%s'", got);
    ug_set_warning_handler(NULL, NULL);
    got[0] = '\0';
    ug_warn("dropped"); /* the default: not to the old handler */
    CHECK(got[0] == '\0');
}

#ifdef UG_TEST_OPENCL_BUILT
/* A set from its 16 values in CLBlast's order (GEMMK KREG KWG KWI MDIMA
 * MDIMC MWG NDIMB NDIMC NWG SA SB STRM STRN VWM VWN). */
static gemm_params set_of(const size_t v[XGEMM_PARAMS], size_t min_indirect)
{
    gemm_params p;
    memcpy(p.xgemm, v, sizeof p.xgemm);
    p.min_indirect = min_indirect;
    return p;
}

static void expect_rule(const size_t v[XGEMM_PARAMS], const gemm_limits *limits, const char *broken)
{
    gemm_params p = set_of(v, 64);
    char why[200] = "";
    bool legal = gemm_params_legal(&p, limits, why, sizeof why);
    if (!broken)
        CHECK_MSG(legal, "a legal set refused: %s", why);
    else
        CHECK_MSG(!legal && strstr(why, broken), "expected '%s', got %s (%s)", broken,
                  legal ? "legal" : "refused", why);
}

/* Sets from CLBlast 1.5.3's database and this project's candidates pass;
 * each rule, worked out by hand, refuses a set that breaks only it. */
static void test_gemm_parameter_rules(ug_device *unused)
{
    (void)unused;
    const gemm_limits none = {0, {0, 0}, 0}, small = {64, {64, 64}, 4096};
    /* CLBlast's database: Radeon RX 480, Radeon R9 290X, a kernel-1 set, and
     * one with KWG 16 below KDIMB = 32, legal since it caches neither tile. */
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 16, 16, 16, 64, 1, 1, 0, 0, 1, 2}, &none, NULL);
    expect_rule((size_t[]){0, 1, 16, 2, 16, 32, 128, 32, 8, 64, 1, 1, 1, 1, 4, 2}, &none, NULL);
    expect_rule((size_t[]){1, 4, 1, 1, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 4, 4}, &none, NULL);
    expect_rule((size_t[]){0, 1, 16, 2, 32, 32, 32, 8, 8, 32, 0, 0, 0, 0, 1, 1}, &none, NULL);
    /* The POCL set: 64 threads, 2 * 4 * 32 * 64 = 16 KiB of local memory. */
    const size_t pocl[] = {0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8};
    expect_rule(pocl, &small, "16384 bytes of local memory; the device has 4096");
    expect_rule(pocl, &(gemm_limits){64, {64, 64}, 16384}, NULL);
    expect_rule(pocl, &(gemm_limits){32, {64, 64}, 0}, "MDIMC*NDIMC = 64 threads; the device takes 32");
    expect_rule(pocl, &(gemm_limits){0, {4, 64}, 0}, "MDIMC x NDIMC = 8 x 8 threads");
    /* 64 / (8 * 16): MWI = 8 values per thread hold no whole 16-wide vector. */
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 16, 8}, &none,
                "MWG 64 is not a multiple of MDIMC*VWM = 128");
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 16}, &none,
                "NWG 64 is not a multiple of NDIMC*VWN = 128");
    expect_rule((size_t[]){0, 1, 32, 3, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none,
                "KWG 32 is not a multiple of KWI 3");
    /* MDIMA 16: 64 / (16 * 8) loads per thread. */
    expect_rule((size_t[]){0, 1, 32, 2, 16, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none,
                "MWG 64 is not a multiple of MDIMA*VWM = 128");
    /* 8 x 8 threads as MDIMA 2 x KDIMA 32 rows: KWG 16 holds half of one. */
    expect_rule((size_t[]){0, 1, 16, 2, 2, 8, 64, 8, 8, 64, 1, 0, 0, 0, 8, 8}, &none,
                "KWG 16 is not a multiple of MDIMC*NDIMC/MDIMA = 32");
    /* 8 x 6 = 48 threads do not fill NDIMB 32 columns. */
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 64, 32, 6, 96, 0, 1, 0, 0, 8, 1}, &none,
                "MDIMC*NDIMC = 48 is not a multiple of NDIMB 32");
    expect_rule((size_t[]){2, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none, "GEMMK is 2");
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 3, 8}, &none, "VWM is 3");
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 32, 8}, &none, "VWM is 32");
    expect_rule((size_t[]){0, 2, 32, 2, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none, "KREG is 2");
    /* Zeros are refused before any rule divides by them. */
    expect_rule((size_t[]){0, 1, 32, 2, 8, 0, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none, "MDIMC is 0");
    expect_rule((size_t[]){0, 1, 0, 0, 8, 8, 64, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none, "KWG is 0");
    expect_rule((size_t[]){0, 1, 32, 2, 8, 8, 512, 8, 8, 64, 1, 1, 1, 1, 8, 8}, &none,
                "MWG is 512, not within 1 to 256");
    /* 256 / 1 * 256 / 2 = 32768 results per thread. */
    expect_rule((size_t[]){0, 1, 32, 2, 1, 1, 256, 2, 2, 256, 0, 0, 0, 0, 1, 1}, &none,
                "(MWG/MDIMC)*(NWG/NDIMC) = 32768, is over 4096");
    /* Kernel 1: KREG 2 holds no whole 4-wide vector; kernel 0's fields fixed. */
    expect_rule((size_t[]){1, 2, 1, 1, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 4, 4}, &none,
                "KREG 2 is not a multiple of VWN 4");
    expect_rule((size_t[]){1, 4, 1, 1, 8, 8, 64, 8, 8, 64, 1, 0, 0, 0, 4, 4}, &none,
                "kernel 1 (GEMMK 1) takes");
    expect_rule((size_t[]){1, 4, 32, 2, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 4, 4}, &none,
                "kernel 1 (GEMMK 1) takes");
    gemm_params p = set_of(pocl, 0);
    char why[200] = "";
    CHECK_MSG(!gemm_params_legal(&p, &none, why, sizeof why) && strstr(why, "XGEMM_MIN_INDIRECT_SIZE is 0"),
              "why: %s", why);

    /* The text: a choice survives formatting and parsing; anything but
     * that form is refused. */
    gemm_choice c = {set_of(pocl, 64), 1.5e-3, "POCL set"}, back;
    char text[512];
    gemm_choice_format(&c, text, sizeof text);
    CHECK_MSG(gemm_choice_parse(text, &back) && memcmp(&back.params, &c.params, sizeof c.params) == 0 &&
                  fabs(back.seconds - 1.5e-3) < 1e-12 && strcmp(back.label, "POCL set") == 0,
              "round trip of: %s", text);
    static const char *const refused[] = {
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds 1.0\nx\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 8\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds nan\nx\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 8\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds inf\nx\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 8\nXGEMM_MIN_INDIRECT_SIZE 0\nmicroseconds 1.0\nx\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 -1\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds 1.0\nx\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 8\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds 1.0\nx\ny\n",
        "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 8 8\nXGEMM_MIN_INDIRECT_SIZE 64\nmicroseconds 1.0\nx",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CHECK_MSG(!gemm_choice_parse(refused[i], &back), "parsed: %s", refused[i]);
}
#endif

/* ---- the OpenCL GEMM tuning, process by process ---- */

/* Two products: M x K by K x N, and one only N2 = 16 wide, which POCL's
 * CPU device hands to CLBlast (its own kernels take 32 columns and more),
 * big enough (M2*N2*K2 >= 64^3) for CLBlast's Xgemm kernel, the one the
 * tuned parameters are for. */
enum { M = 96, N = 80, K = 72, M2 = 256, N2 = 16, K2 = 128 };

static void print_warning(const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "warning: %s\n", message);
}

/* One m x k by k x n product on dev, checked exactly (the operands are
 * multiples of 1/4, so every sum is exact in f32): 0 when right, 3 when
 * it failed, 4 when wrong. */
static int checked_product(ug_device *dev, int m, int n, int k)
{
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n)),
          *c = malloc(sizeof(float) * (size_t)(m * n));
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 3;
    }
    for (int i = 0; i < m * k; i++)
        a[i] = (float)(i % 9 - 4) / 4.0f;
    for (int i = 0; i < k * n; i++)
        b[i] = (float)(i % 7 - 3) / 4.0f;
    const int64_t a_shape[2] = {m, k}, b_shape[2] = {k, n};
    ug_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    int rc = 0;
    if (ug_tensor_from_host(dev, UG_F32, 2, a_shape, a, &ta) != UG_OK ||
        ug_tensor_from_host(dev, UG_F32, 2, b_shape, b, &tb) != UG_OK ||
        ug_matmul(ta, tb, false, false, &tc) != UG_OK ||
        ug_tensor_download(tc, c, sizeof(float) * (size_t)(m * n)) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        rc = 3;
    }
    for (int i = 0; i < m && rc == 0; i++) {
        for (int j = 0; j < n; j++) {
            double sum = 0;
            for (int p = 0; p < k; p++)
                sum += (double)a[i * k + p] * b[p * n + j];
            if ((double)c[i * n + j] != sum) {
                fprintf(stderr, "child: %dx%dx%d product %g at (%d,%d), expected %g\n", m, n, k,
                        c[i * n + j], i, j, sum);
                rc = 4;
                break;
            }
        }
    }
    ug_tensor_free(ta);
    ug_tensor_free(tb);
    ug_tensor_free(tc);
    free(a);
    free(b);
    free(c);
    return rc;
}

/* Child mode: the two products on device_id; exit 0 when both are right.
 * Warnings go to stderr, which the parent reads. */
static int product_child(const char *device_id)
{
    ug_set_warning_handler(print_warning, NULL);
    ug_device *dev = NULL;
    if (ug_device_open(device_id, &dev) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    int rc = checked_product(dev, M, N, K);
    if (rc == 0)
        rc = checked_product(dev, M2, N2, K2);
    ug_device_close(dev);
    return rc;
}

/* The longest a child may take: a tuning that measures every candidate
 * takes a minute on POCL with its compiler cache cold. A child still
 * running then is stuck (ended with SIGALRM): the test fails with its
 * status, 128 + SIGALRM, long before ctest's timeout. */
enum { CHILD_SECONDS = 300 };

/* Runs the products in a fresh process with this cache folder, its stderr
 * in stderr_path; the exit status. */
static int run_child(const char *device_id, const char *cache, bool autotune,
                     const char *stderr_path)
{
    const char *const env[] = {"XDG_CACHE_HOME", cache, "UG_AUTOTUNE", autotune ? NULL : "0", NULL};
    const char *const args[] = {"test_tuning", "--product", device_id, NULL};
    fflush(NULL);
    return th_wait_child(th_spawn_self(args, env, NULL, stderr_path), CHILD_SECONDS);
}

/* The tuning file in cache/unigrad (path), and its inode: 0 if none. */
static ino_t tuning_file(const char *cache, char *path, size_t len)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/unigrad", cache);
    DIR *d = opendir(dir);
    ino_t inode = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "clblast-gemm-", 13) == 0 && n > 4 &&
            strcmp(e->d_name + n - 4, ".txt") == 0) {
            struct stat st;
            snprintf(path, len, "%s/%s", dir, e->d_name);
            if (stat(path, &st) == 0)
                inode = st.st_ino;
        }
    }
    if (d)
        closedir(d);
    return inode;
}

static bool file_has(const char *path, const char *text)
{
    char buf[4096] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, text) != NULL;
}

/* Rewrites the cache file at path (key kept) to hold text, with a checksum
 * that holds: a file sound in form whose parameters the test chooses. */
static bool rewrite_entry(const char *path, const char *text)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char magic_read[8], key[2048];
    uint64_t lengths[3]; /* key, data, checksum */
    bool ok = fread(magic_read, 8, 1, f) == 1 && fread(lengths, sizeof lengths, 1, f) == 1 &&
              lengths[0] < sizeof key && fread(key, 1, (size_t)lengths[0], f) == lengths[0];
    fclose(f);
    return ok && ug_cache_store(path, magic_read, key, (size_t)lengths[0], text, strlen(text)) == UG_OK;
}

/* Puts a FIFO in place of every file in cache/unigrad whose name starts
 * with prefix; how many. */
static int fifos_for(const char *cache, const char *prefix)
{
    char dir[600], path[900];
    snprintf(dir, sizeof dir, "%s/unigrad", cache);
    DIR *d = opendir(dir);
    int count = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || strstr(e->d_name, ".lock"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0 && mkfifo(path, 0600) == 0)
            count++;
    }
    if (d)
        closedir(d);
    return count;
}

/* Sound files whose parameters CLBlast must not be given, or that compute
 * wrongly here, and FIFOs at the cache paths: each child's products are
 * exact, with a warning naming the file, and none waits for ever. */
static void cache_entries_checked(const ug_device_info *info, const char *cache, const char *err)
{
    char path[1024] = "";
    REQUIRE(tuning_file(cache, path, sizeof path) != 0);

    th_context("a sound file with parameters off CLBlast's rules");
    /* MWG 64 / MDIMC 8 leaves each thread 8 values of a row: no whole
     * 16-wide vector (VWM). The switch to the Xgemm kernel is lowered to
     * 8^3 so that both products reach it; the old code returned UG_OK with
     * wrong values (0.6875 off on POCL). */
    REQUIRE(rewrite_entry(path, "Xgemm 0 1 32 2 8 8 64 8 8 64 1 1 1 1 16 8\n"
                                "XGEMM_MIN_INDIRECT_SIZE 8\nmicroseconds 1.0\ncrafted\n"));
    ino_t crafted = tuning_file(cache, path, sizeof path);
    CHECK_EQ_I64(run_child(info->id, cache, true, err), 0);
    CHECK_MSG(file_has(err, "warning: the GEMM tuning cache") && file_has(err, path) &&
                  file_has(err, "is ignored") && file_has(err, "delete the file") &&
                  file_has(err, "MWG 64 is not a multiple of MDIMC*VWM = 128"),
              "no warning naming the file, the broken rule and the remedy in the child's stderr");
    CHECK_MSG(tuning_file(cache, path, sizeof path) == crafted,
              "the ignored file was replaced; it is left for a person to look at");

    th_context("a legal set that computes wrongly here");
    /* Kernel 1 (GEMMK 1) within every rule and range of CLBlast's tuner,
     * which POCL 3.1 computes wrongly (3e31 off): caught by the one check
     * a loaded set gets. A device that computes it right loads it. */
    REQUIRE(rewrite_entry(path, "Xgemm 1 4 1 1 4 4 64 4 4 16 0 0 0 0 4 4\n"
                                "XGEMM_MIN_INDIRECT_SIZE 8\nmicroseconds 1.0\ncrafted\n"));
    CHECK_EQ_I64(run_child(info->id, cache, true, err), 0);
    const bool pocl = strstr(info->vendor, "Portable Computing Language") != NULL;
    if (pocl || file_has(err, "warning"))
        CHECK_MSG(file_has(err, "warning: the GEMM tuning cache") && file_has(err, path) &&
                      file_has(err, "is ignored") && file_has(err, "a wrong product"),
                  "no warning of a wrong product in the child's stderr");

    th_context("FIFOs at the program and tuning cache paths");
    /* The old reader opened them without O_NONBLOCK and waited for a writer
     * for ever (the child ended by its alarm). */
    CHECK(fifos_for(cache, "opencl-") >= 1);
    CHECK_EQ_I64(fifos_for(cache, "clblast-gemm-"), 1);
    CHECK_EQ_I64(run_child(info->id, cache, true, err), 0);
    CHECK_MSG(file_has(err, "warning: the GEMM tuning cache") && file_has(err, "FIFO") &&
                  file_has(err, "measuring again"),
              "no warning naming the FIFO in the child's stderr");
    struct stat st;
    CHECK_MSG(tuning_file(cache, path, sizeof path) != 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode),
              "the FIFO was not replaced by a measured choice");
}

static void test_opencl_gemm_tuning(ug_device *dev)
{
    ug_device_info info;
    REQUIRE_OK(ug_device_get_info(dev, &info));
    char report[4096];
    CHECK(ug_device_autotune(NULL, report, sizeof report) == UG_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(ug_last_error(), "device is NULL") != NULL, "message: %s", ug_last_error());
    /* A report longer than its buffer ends with a line saying it was cut;
     * one that fits does not. */
    char small[60];
    REQUIRE_OK(ug_device_autotune(dev, small, sizeof small));
    const bool cut = strlen(small) == sizeof small - 1 && strstr(small, "(cut: the report is longer");
    CHECK_MSG(strlen(small) < sizeof small && (cut || !strstr(small, "(cut:")), "report: %s", small);
    REQUIRE_OK(ug_device_autotune(dev, report, sizeof report));
    CHECK_MSG(strlen(report) >= sizeof small - 1 ? cut : !cut, "a report of %zu characters, cut at %zu: %s",
              strlen(report), sizeof small, small);
    if (strncmp(info.id, "opencl", 6) != 0) {
        if (strcmp(info.id, "cpu") == 0)
            CHECK_MSG(strstr(report, "nothing to tune") != NULL, "report: %s", report);
        th_skip("the GEMM tuning belongs to the OpenCL backend");
        return;
    }
    char *cache = temp_folder();
    REQUIRE(cache);
    char err[128], path[1024] = "";
    snprintf(err, sizeof err, "%s/stderr", cache);

    th_context("UG_AUTOTUNE=0");
    CHECK_EQ_I64(run_child(info.id, cache, false, err), 0);
    CHECK_MSG(tuning_file(cache, path, sizeof path) == 0, "UG_AUTOTUNE=0 wrote %s", path);

    th_context("the first product measures and saves");
    CHECK_EQ_I64(run_child(info.id, cache, true, err), 0);
    ino_t first = tuning_file(cache, path, sizeof path);
    CHECK_MSG(first != 0, "no tuning file after the first product");

    th_context("a second process loads");
    CHECK_EQ_I64(run_child(info.id, cache, true, err), 0);
    CHECK_MSG(tuning_file(cache, path, sizeof path) == first, "the tuning file was rewritten");
    CHECK_MSG(!file_has(err, "warning"), "a warning for a sound cache");

    th_context("a damaged file is reported and measured again");
    flip_byte(path, -3);
    CHECK_EQ_I64(run_child(info.id, cache, true, err), 0);
    CHECK_MSG(file_has(err, "warning: the GEMM tuning cache") &&
                  file_has(err, "damaged") && file_has(err, "measuring again"),
              "no warning naming the damage in the child's stderr");
    ino_t again = tuning_file(cache, path, sizeof path);
    CHECK_MSG(again != 0 && again != first, "the damaged file was not replaced");
    CHECK_EQ_I64(run_child(info.id, cache, true, err), 0);
    CHECK_MSG(tuning_file(cache, path, sizeof path) == again, "the replacement did not load");

    cache_entries_checked(&info, cache, err);

    th_context("ug_device_autotune measures on request");
    use_cache_home(cache);
    REQUIRE_OK(ug_device_autotune(dev, report, sizeof report));
    CHECK_MSG(strstr(report, "chosen: ") && strstr(report, "saved to ") &&
                  strstr(report, "CLBlast's database"),
              "report: %s", report);
    ino_t requested = tuning_file(cache, path, sizeof path);
    CHECK_MSG(requested != 0 && requested != again, "ug_device_autotune did not save");
    CHECK_EQ_I64(product_child(info.id), 0); /* this process, with its choice installed */
    remove_folder(cache);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--product") == 0)
        return product_child(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--load-fifo") == 0)
        return load_fifo_child(argv[2]);
    static const th_test tests[] = {
        TH_HOST_TEST(cache_file_checks),
        TH_HOST_TEST(cache_fifo_is_refused),
#ifdef UG_TEST_OPENCL_BUILT
        TH_HOST_TEST(gemm_parameter_rules),
#endif
        TH_HOST_TEST(warnings_reach_the_handler),
        TH_DEVICE_TEST(opencl_gemm_tuning),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
