/* The checkpoint file layer's saving (core/io/safetensors.h) and atomic
 * file replacement (base/atomic_file.h): refused arguments, the new file's
 * mode, a real write failure (RLIMIT_FSIZE) for the short-write loop, the
 * rotation of kept copies; I/O failures injected at every file call of a
 * save (UG_FAULT_FILE_IO), through the file layer and the public
 * checkpoint API, after which the file at the path must be exactly the old
 * one (or the new one, for a failure after the final rename) with no
 * temporary file left; and every host allocation of a save and a read
 * made to fail. */
#define _GNU_SOURCE /* setrlimit */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "core/io/safetensors.h"
#include "harness.h"
#include "safetensors_files.h"
#include "unigrad/checkpoint.h"

/* ---- writing: refused arguments, atomic replacement ---- */

static void test_save_refuses(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/refused.safetensors", dir);
    float x[4] = {1, 2, 3, 4};
    const int64_t s4[] = {4}, neg[] = {-1};
    const ug_st_entry dup[] = {{"w", UG_F32, 1, s4, x}, {"v", UG_F32, 1, s4, x}, {"w", UG_F32, 1, s4, x}};
    CHECK_STATUS(ug_st_save(path, dup, 3, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS(path, "two tensors named \"w\"");
    const ug_st_entry reserved[] = {{"__metadata__", UG_F32, 1, s4, x}};
    CHECK_STATUS(ug_st_save(path, reserved, 1, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("\"__metadata__\" is the format's");
    const ug_st_entry bad_utf8[] = {{"a\xff", UG_F32, 1, s4, x}};
    CHECK_STATUS(ug_st_save(path, bad_utf8, 1, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("expected a UTF-8 string");
    const ug_st_entry negative[] = {{"n", UG_F32, 1, neg, x}};
    CHECK_STATUS(ug_st_save(path, negative, 1, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("dimension 0 is -1");
    const ug_st_entry no_data[] = {{"n", UG_F32, 1, s4, NULL}};
    CHECK_STATUS(ug_st_save(path, no_data, 1, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    const ug_st_entry bad_dtype[] = {{"n", (ug_dtype)99, 1, s4, x}};
    CHECK_STATUS(ug_st_save(path, bad_dtype, 1, NULL, NULL, 0, 1), UG_ERR_INVALID_ARGUMENT);
    const char *k[] = {"a", "a"}, *v[] = {"1", "2"};
    CHECK_STATUS(ug_st_save(path, NULL, 0, k, v, 2, 1), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("two metadata keys \"a\"");
    CHECK_STATUS(ug_st_save(path, NULL, 0, NULL, NULL, 0, 0), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("keep 0 copies, expected 1 to 1000");
    CHECK(!exists(path));
    CHECK_EQ_I64(temp_files(dir), 0);

    /* A missing folder: the system's reason, and nothing created. */
    snprintf(path, sizeof path, "%s/no/such/folder.safetensors", dir);
    CHECK_STATUS(ug_st_save(path, NULL, 0, NULL, NULL, 0, 1), UG_ERR_IO);
    CHECK_ERROR_HAS("saving ", path, strerror(ENOENT), "was not created");
    remove_dir(dir);
}

/* A saved file gets the mode of any new file: 0666 less the umask. */
static void test_save_mode(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/mode.safetensors", dir);
    static const mode_t masks[] = {022, 027, 002};
    for (int i = 0; i < 3; i++) {
        mode_t old = umask(masks[i]);
        ug_status st = ug_st_save(path, NULL, 0, NULL, NULL, 0, 1);
        umask(old);
        CHECK_OK(st);
        struct stat sb;
        REQUIRE(stat(path, &sb) == 0);
        CHECK_EQ_I64(sb.st_mode & 0777, 0666 & ~masks[i]);
    }
    remove_dir(dir);
}

/* A real failing write: RLIMIT_FSIZE stops the file part way (a short
 * write, then EFBIG), as a full disk does with ENOSPC. */
static void test_save_real_write_failure(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    REQUIRE_OK(write_sample(path));
    size_t old_size = 0;
    unsigned char *old = slurp(path, &old_size);
    REQUIRE(old);

    enum { BIG = 1 << 16 };
    float *x = th_alloc(BIG * sizeof *x);
    const int64_t shape[] = {BIG};
    const ug_st_entry e[] = {{"big", UG_F32, 1, shape, x}};
    struct rlimit saved, small;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    small = saved;
    small.rlim_cur = 10000;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    ug_status st = ug_st_save(path, e, 1, NULL, NULL, 0, 1);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, was);
    CHECK_STATUS(st, UG_ERR_IO);
    /* The first write call of the data moved 10000 - 8 - 48 bytes; the
     * next, of the rest, failed. */
    CHECK_ERROR_HAS("saving ", path, ": writing ", " bytes at byte 10000 of ", ".tmp.",
                    strerror(EFBIG), "the previous ", " is unchanged");
    CHECK(file_is(path, old, old_size));
    CHECK_EQ_I64(temp_files(dir), 0);
    remove_dir(dir);
}

/* The atomic file directly: a failed write spoils it; commit refuses. */
static void test_atomic_file_misuse(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/a.bin", dir);
    ug_atomic_file *f = NULL;
    REQUIRE_OK(ug_atomic_open(path, &f));
    CHECK_EQ_I64(temp_files(dir), 1);
    ug_fault_arm(UG_FAULT_FILE_IO, 1);
    CHECK_STATUS(ug_atomic_write(f, "abc", 3), UG_ERR_IO);
    ug_fault_arm(UG_FAULT_FILE_IO, 0);
    CHECK_ERROR_HAS("writing 3 bytes at byte 0 of ", strerror(ENOSPC), "a.bin was not created");
    CHECK_STATUS(ug_atomic_write(f, "abc", 3), UG_ERR_STATE);
    CHECK_STATUS(ug_atomic_commit(f, 1), UG_ERR_STATE);
    CHECK(!exists(path));
    CHECK_EQ_I64(temp_files(dir), 0);
    f = NULL;
    REQUIRE_OK(ug_atomic_open(path, &f));
    CHECK_STATUS(ug_atomic_commit(f, 0), UG_ERR_INVALID_ARGUMENT);
    CHECK_EQ_I64(temp_files(dir), 0);
    ug_atomic_abort(NULL);
    CHECK_STATUS(ug_atomic_open("", &f), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_atomic_open("dir/", &f), UG_ERR_INVALID_ARGUMENT);
    /* A bare name: the folder is ".". */
    char cwd[512];
    REQUIRE(getcwd(cwd, sizeof cwd));
    REQUIRE(chdir(dir) == 0);
    ug_status st = ug_atomic_open("bare.bin", &f);
    if (st == UG_OK) {
        st = ug_atomic_write(f, "xyz", 3);
        st = st == UG_OK ? ug_atomic_commit(f, 2) : (ug_atomic_abort(f), st);
    }
    CHECK(chdir(cwd) == 0);
    CHECK_OK(st);
    snprintf(path, sizeof path, "%s/bare.bin", dir);
    CHECK(file_is(path, (const unsigned char *)"xyz", 3));
    remove_dir(dir);
}

/* A FIFO, a device or a link to one is never replaced by a regular file
 * (as root, saving to /dev/null would delete it for every program). */
static void test_atomic_file_special_targets(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", fifo[128], link[128];
    REQUIRE(make_dir(dir));
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    snprintf(link, sizeof link, "%s/null", dir);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    REQUIRE(symlink("/dev/null", link) == 0);
    const char *targets[] = {fifo, "/dev/null", link};
    const char *kinds[] = {"a FIFO", "a character device", "a character device"};
    for (int i = 0; i < 3; i++) {
        ug_atomic_file *f = NULL;
        if (CHECK_STATUS(ug_atomic_open(targets[i], &f), UG_ERR_IO))
            CHECK_ERROR_HAS(kinds[i], "not a regular file; nothing was written");
        CHECK(f == NULL);
    }
    struct stat st;
    CHECK(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_EQ_I64(temp_files(dir), 0);
    remove(fifo);
    remove(link);
    remove_dir(dir);
}

/* Versions 1..5 saved with keep = 3: path, path.1 and path.2 hold the last
 * three, nothing older stays. */
static void test_keep_rotation(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128], name[160];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    unsigned char *saved[6] = {0};
    size_t sizes[6] = {0};
    for (int v = 1; v <= 5; v++) {
        th_context("save %d", v);
        int32_t x[3] = {v, v * 10, v * 100};
        const int64_t shape[] = {v % 3 + 1};
        char step[8];
        snprintf(step, sizeof step, "%d", v);
        const char *k[] = {"step"}, *val[] = {step};
        const ug_st_entry e[] = {{"x", UG_I32, 1, shape, x}};
        REQUIRE_OK(ug_st_save(path, e, 1, k, val, 1, 3));
        saved[v] = slurp(path, &sizes[v]);
        REQUIRE(saved[v]);
        for (int back = 0; back < 4; back++) {
            if (back)
                snprintf(name, sizeof name, "%s.%d", path, back);
            else
                snprintf(name, sizeof name, "%s", path);
            if (back < 3 && v - back >= 1)
                CHECK_MSG(file_is(name, saved[v - back], sizes[v - back]),
                          "%s should hold save %d", name, v - back);
            else
                CHECK_MSG(!exists(name), "%s should not exist", name);
        }
        ug_st_file *f = NULL;
        REQUIRE_OK(ug_st_open(path, &f));
        CHECK(!strcmp(ug_st_metadata(f, "step"), step));
        ug_st_close(f);
        CHECK_EQ_I64(temp_files(dir), 0);
    }
    /* keep = 1 afterwards: path only is replaced; the copies stay as they are. */
    th_context("%s", "keep 1");
    REQUIRE_OK(ug_st_save(path, NULL, 0, NULL, NULL, 0, 1));
    snprintf(name, sizeof name, "%s.1", path);
    CHECK(file_is(name, saved[4], sizes[4]));
    remove_dir(dir);
}

/* ---- injected I/O failures ---- */

typedef struct content {
    int32_t x[64];
    float y[33];
} content;

static ug_status save_content(const char *path, const content *c, int keep)
{
    const int64_t sx[] = {8, 8}, sy[] = {33};
    const ug_st_entry e[] = {{"x", UG_I32, 2, sx, c->x}, {"y", UG_F32, 1, sy, c->y}};
    const char *k[] = {"what"}, *v[] = {c->x[0] == 1 ? "A" : "B"};
    return ug_st_save(path, e, 2, k, v, 1, keep);
}

/* The injected errno of each call, as the message names it. */
static int expected_errno(const char *msg)
{
    if (th_contains(msg, ": writing "))
        return ENOSPC;
    if (th_contains(msg, ": creating ") || th_contains(msg, ": open of the folder"))
        return EACCES;
    if (th_contains(msg, ": rename of "))
        return EXDEV;
    return EIO;
}

/* Save A; then for n = 1, 2, ... make the n-th file call of saving B over
 * it fail. Every failure is UG_ERR_IO with the system's text, leaves no
 * temporary file, and leaves A at the path, except the folder's fsync, the
 * last call, which comes after the rename: B is then in place. */
static void sweep(int keep)
{
    char dir[] = "/tmp/ug-st-XXXXXX", path[128], name[160];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    content a, b, older;
    for (int i = 0; i < 64; i++)
        a.x[i] = 1 + i, b.x[i] = 2 + 3 * i, older.x[i] = -i;
    for (int i = 0; i < 33; i++)
        a.y[i] = (float)i, b.y[i] = (float)-i, older.y[i] = 0.5f;
    /* The files A and B, for comparing. */
    snprintf(name, sizeof name, "%s/b.safetensors", dir);
    REQUIRE_OK(save_content(name, &b, 1));
    size_t b_size = 0, a_size = 0, older_size = 0;
    unsigned char *b_bytes = slurp(name, &b_size);
    REQUIRE(b_bytes && unlink(name) == 0);
    REQUIRE_OK(save_content(path, &older, 1));
    unsigned char *older_bytes = slurp(path, &older_size);
    REQUIRE_OK(save_content(path, &a, 1));
    unsigned char *a_bytes = slurp(path, &a_size);
    REQUIRE(older_bytes && a_bytes);

    bool saw_write = false, saw_fsync = false, saw_rename = false, saw_dir_fsync = false,
         saw_rotate = false;
    int64_t n = 1;
    for (;; n++) {
        th_context("keep %d, file call %lld", keep, (long long)n);
        /* Each round starts from the same folder: path = A, path.1 = older
         * (new files: a failed round may have left path and path.1 linked). */
        for (int k = 1; k < keep + 2; k++) {
            snprintf(name, sizeof name, "%s.%d", path, k);
            unlink(name);
        }
        unlink(path);
        if (keep > 1) {
            snprintf(name, sizeof name, "%s.1", path);
            FILE *w = fopen(name, "wb");
            REQUIRE(w && fwrite(older_bytes, 1, older_size, w) == older_size && fclose(w) == 0);
        }
        FILE *w = fopen(path, "wb");
        REQUIRE(w && fwrite(a_bytes, 1, a_size, w) == a_size && fclose(w) == 0);

        ug_clear_error();
        ug_fault_arm(UG_FAULT_FILE_IO, n);
        ug_status st = save_content(path, &b, keep);
        int64_t events = ug_fault_events(UG_FAULT_FILE_IO);
        ug_fault_arm(UG_FAULT_FILE_IO, 0);
        CHECK_EQ_I64(temp_files(dir), 0);
        if (events < n) { /* the save ended before the n-th call: all covered */
            CHECK_OK(st);
            CHECK(file_is(path, b_bytes, b_size));
            if (keep > 1) {
                snprintf(name, sizeof name, "%s.1", path);
                CHECK(file_is(name, a_bytes, a_size));
                snprintf(name, sizeof name, "%s.2", path);
                CHECK(file_is(name, older_bytes, older_size));
            }
            break;
        }
        const char *msg = ug_last_error();
        if (!CHECK_STATUS(st, UG_ERR_IO))
            break;
        CHECK_MSG(th_contains(msg, strerror(expected_errno(msg))) && th_contains(msg, "saving ") &&
                      th_contains(msg, path),
                  "the message \"%s\" should name the path and \"%s\"", msg,
                  strerror(expected_errno(msg)));
        saw_write |= th_contains(msg, ": writing ");
        saw_fsync |= th_contains(msg, ": fsync of ") && th_contains(msg, ".tmp.");
        saw_rename |= th_contains(msg, ": rename of ");
        saw_rotate |= th_contains(msg, "(keeping");
        if (th_contains(msg, "fsync of the folder")) {
            saw_dir_fsync = true;
            CHECK(th_contains(msg, "holds the new contents"));
            CHECK(file_is(path, b_bytes, b_size));
            if (keep > 1) {
                snprintf(name, sizeof name, "%s.1", path);
                CHECK(file_is(name, a_bytes, a_size));
            }
        } else {
            CHECK_MSG(file_is(path, a_bytes, a_size), "%s changed after: %s", path, msg);
            CHECK(th_contains(msg, " is unchanged"));
            /* The copies may have moved along, never to B's contents. */
            for (int k = 1; k < keep; k++) {
                snprintf(name, sizeof name, "%s.%d", path, k);
                CHECK(!exists(name) || file_is(name, a_bytes, a_size) ||
                      file_is(name, older_bytes, older_size));
            }
        }
        if (th_failures())
            break;
        REQUIRE(n < 1000);
    }
    th_context("keep %d", keep);
    CHECK(saw_write && saw_fsync && saw_rename && saw_dir_fsync);
    if (keep > 1)
        CHECK(saw_rotate);
    printf("    keep %d: %lld file calls, each made to fail\n", keep, (long long)(n - 1));
    remove_dir(dir);
}

static void test_io_failure_sweep(ug_device *dev)
{
    (void)dev;
    sweep(1);
    sweep(3);
}

/* The same sweep through the public checkpoint API: a model and its Adam
 * state saved (A), the parameters changed, then each file call of the
 * next save made to fail in turn. Afterwards a fresh checkpoint of the
 * model always loads, and gives back A's values. */
static void test_checkpoint_io_sweep(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-cksweep-XXXXXX";
    REQUIRE(make_dir(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    ug_device *dev = NULL;
    ug_model *model = NULL;
    ug_optimizer *opt = NULL;
    ug_checkpoint *ck = NULL;
    ug_tensor *w = NULL;
    REQUIRE_OK(ug_device_open("cpu", &dev));
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {-1, -2, -3, -4, -5, -6}, got[6];
    CHECK_OK(ug_model_create(dev, 0, &model));
    CHECK_OK(ug_model_param(model, "w", 2, (int64_t[]){2, 3}, UG_INIT_CONSTANT, 0.0f, &w));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAM);
    CHECK_OK(ug_optimizer_create(model, &oc, &opt));
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_optimizer(ck, opt));
    CHECK_OK(ug_model_write_param(model, "w", a, sizeof a));
    CHECK_OK(ug_optimizer_set_steps(opt, 7));
    REQUIRE_OK(ug_checkpoint_save(ck, path));
    CHECK_OK(ug_model_write_param(model, "w", b, sizeof b));
    CHECK_OK(ug_optimizer_set_steps(opt, 8));
    int64_t n = 1;
    for (; n < 100; n++) {
        ug_fault_arm(UG_FAULT_FILE_IO, n);
        ug_status st = ug_checkpoint_save(ck, path);
        int64_t events = ug_fault_events(UG_FAULT_FILE_IO);
        ug_fault_arm(UG_FAULT_FILE_IO, 0);
        CHECK_EQ_I64(temp_files(dir), 0);
        if (events < n) {
            CHECK_OK(st);
            break;
        }
        CHECK_STATUS(st, UG_ERR_IO);
        bool after_rename = th_contains(ug_last_error(), "fsync of the folder");
        /* The file on disk loads: A's values, or B's when only the
         * folder's flush failed, after the rename. */
        ug_checkpoint *check = NULL;
        CHECK_OK(ug_checkpoint_create(&check));
        CHECK_OK(ug_checkpoint_add_optimizer(check, opt));
        CHECK_OK(ug_checkpoint_load(check, path));
        ug_checkpoint_free(check);
        CHECK_OK(ug_model_read_param(model, "w", got, sizeof got));
        CHECK_MSG(!memcmp(got, after_rename ? b : a, sizeof got), "file call %lld: the loaded values are not %s's",
                  (long long)n, after_rename ? "B" : "A");
        CHECK_EQ_I64(ug_optimizer_steps(opt), after_rename ? 8 : 7);
        CHECK_OK(ug_model_write_param(model, "w", b, sizeof b)); /* B again for the next save */
        CHECK_OK(ug_optimizer_set_steps(opt, 8));
        if (th_failures())
            break;
    }
    printf("    a checkpoint's %lld file calls, each made to fail\n", (long long)(n - 1));
    CHECK(n > 5);
    ug_checkpoint_free(ck);
    ug_optimizer_free(opt);
    ug_model_free(model);
    ug_device_close(dev);
    remove_dir(dir);
}

/* The n-th host allocation of a save, then of an open and read, fails:
 * UG_ERR_OUT_OF_MEMORY with a message, no temporary file, no leak (ASan),
 * and the file as it was. */
static void test_host_allocation_sweep(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/oom.safetensors", dir);
    REQUIRE_OK(ug_st_save(path, NULL, 0, NULL, NULL, 0, 1));
    size_t old_size = 0;
    unsigned char *old = slurp(path, &old_size);
    REQUIRE(old);
    for (int stage = 0; stage < 2; stage++) {
        int64_t n = 1;
        for (;; n++) {
            th_context("%s, allocation %lld", stage ? "open" : "save", (long long)n);
            ug_st_file *f = NULL;
            ug_fault_arm(UG_FAULT_HOST_ALLOC, n);
            ug_status st = UG_OK;
            if (stage == 0) {
                st = write_sample(path);
            } else {
                st = ug_st_open(path, &f);
                for (int i = 0; st == UG_OK && i < ug_st_count(f); i++) {
                    unsigned char buf[256];
                    st = ug_st_read(f, ug_st_at(f, i), buf, (size_t)ug_st_at(f, i)->bytes);
                }
            }
            int64_t events = ug_fault_events(UG_FAULT_HOST_ALLOC);
            ug_fault_arm(UG_FAULT_HOST_ALLOC, 0);
            ug_st_close(f);
            CHECK_EQ_I64(temp_files(dir), 0);
            if (events < n) {
                CHECK_OK(st);
                break;
            }
            CHECK_STATUS(st, UG_ERR_OUT_OF_MEMORY);
            CHECK_ERROR_HAS(path, "out of host memory");
            if (stage == 0)
                CHECK(file_is(path, old, old_size));
            if (th_failures())
                break;
            REQUIRE(n < 1000);
        }
        printf("    %s: %lld host allocations, each made to fail\n", stage ? "open" : "save",
               (long long)(n - 1));
    }
    remove_dir(dir);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(save_refuses),
        TH_HOST_TEST(save_mode),
        TH_HOST_TEST(save_real_write_failure),
        TH_HOST_TEST(atomic_file_misuse),
        TH_HOST_TEST(atomic_file_special_targets),
        TH_HOST_TEST(keep_rotation),
        TH_HOST_TEST(io_failure_sweep),
        TH_HOST_TEST(checkpoint_io_sweep),
        TH_HOST_TEST(host_allocation_sweep),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
