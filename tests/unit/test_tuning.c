/* Tuning and its cache. The cache file format (base/cache_file.h) against
 * hand-made damage: a changed byte, a cut, another key, another kind of
 * file. Warnings reach the handler, and nothing without one. On OpenCL, the
 * GEMM tuning across processes, as users meet it: the first product
 * measures and saves, a second process loads (the file is not rewritten), a
 * damaged file is reported and measured again, UG_AUTOTUNE=0 neither reads
 * nor writes, and ug_device_autotune measures again on request; every
 * product in those processes is exact against a double-precision
 * reference. Links the library's objects for base/cache_file.h. */
#define _POSIX_C_SOURCE 200809L /* fork, execl, setenv, mkdtemp */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cache_file.h"
#include "base/error.h"
#include "harness.h"

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

/* ---- the OpenCL GEMM tuning, process by process ---- */

enum { M = 96, N = 80, K = 72 };

static void print_warning(const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "warning: %s\n", message);
}

/* Child mode: one product on device_id, checked exactly (the operands are
 * multiples of 1/4, so every sum is exact in f32); exit 0 when right.
 * Warnings go to stderr, which the parent reads. */
static int product_child(const char *device_id)
{
    ug_set_warning_handler(print_warning, NULL);
    ug_device *dev = NULL;
    if (ug_device_open(device_id, &dev) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    static float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 9 - 4) / 4.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 7 - 3) / 4.0f;
    const int64_t a_shape[2] = {M, K}, b_shape[2] = {K, N};
    ug_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    int rc = 0;
    if (ug_tensor_from_host(dev, UG_F32, 2, a_shape, a, &ta) != UG_OK ||
        ug_tensor_from_host(dev, UG_F32, 2, b_shape, b, &tb) != UG_OK ||
        ug_matmul(ta, tb, false, false, &tc) != UG_OK ||
        ug_tensor_download(tc, c, sizeof c) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        rc = 3;
    }
    for (int i = 0; i < M && rc == 0; i++) {
        for (int j = 0; j < N; j++) {
            double sum = 0;
            for (int p = 0; p < K; p++)
                sum += (double)a[i * K + p] * b[p * N + j];
            if ((double)c[i * N + j] != sum) {
                fprintf(stderr, "child: product %g at (%d,%d), expected %g\n", c[i * N + j], i,
                        j, sum);
                rc = 4;
                break;
            }
        }
    }
    ug_tensor_free(ta);
    ug_tensor_free(tb);
    ug_tensor_free(tc);
    ug_device_close(dev);
    return rc;
}

/* Runs a product in a fresh process with this cache folder, its stderr in
 * stderr_path; the exit status. */
static int run_child(const char *device_id, const char *cache, bool autotune,
                     const char *stderr_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("XDG_CACHE_HOME", cache, 1);
        if (autotune)
            unsetenv("UG_AUTOTUNE");
        else
            setenv("UG_AUTOTUNE", "0", 1);
        int fd = open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        execl("/proc/self/exe", "test_tuning", "--product", device_id, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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
    static const th_test tests[] = {
        TH_HOST_TEST(cache_file_checks),
        TH_HOST_TEST(warnings_reach_the_handler),
        TH_DEVICE_TEST(opencl_gemm_tuning),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
