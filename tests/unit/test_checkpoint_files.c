/* Checkpoint files against what users' machines do to them: two processes
 * saving one path, names as long as the file system allows, writers
 * killed mid-save, FIFOs and folders named by mistake, symbolic links;
 * and a full checkpoint load (model, optimizer with loss scaling, graph,
 * loader, strings) made to fail at each host allocation, device allocation
 * and wait for the device in turn, after which nothing may have changed.
 * Linked with the core's objects for the fault hooks. */
#define _GNU_SOURCE /* mkdtemp, mkfifo, symlink */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fault.h"
#include "children.h"
#include "harness.h"
#include "unigrad/checkpoint.h"

static int count_temporaries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return d ? n : -1;
}

static void remove_tree(const char *dir)
{
    char command[600];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0)
        th_fail(TH_LOC, "could not remove %s", dir);
}

/* A checkpoint of strings alone, saved to path with keep copies. */
static ug_status save_strings(const char *path, const char *value, int keep)
{
    ug_checkpoint *ck = NULL;
    ug_status st = ug_checkpoint_create(&ck);
    if (st == UG_OK)
        st = ug_checkpoint_set_string(ck, "value", value);
    if (st == UG_OK)
        st = ug_checkpoint_set_keep(ck, keep);
    if (st == UG_OK)
        st = ug_checkpoint_save(ck, path);
    ug_checkpoint_free(ck);
    return st;
}

/* The string saved at path, or "" when it cannot be loaded. */
static const char *load_string(const char *path, char *buf, size_t len)
{
    ug_checkpoint *ck = NULL;
    buf[0] = '\0';
    if (ug_checkpoint_create(&ck) == UG_OK && ug_checkpoint_load(ck, path) == UG_OK &&
        ug_checkpoint_string(ck, "value"))
        snprintf(buf, len, "%s", ug_checkpoint_string(ck, "value"));
    ug_checkpoint_free(ck);
    return buf;
}

/* The writers below are this program run again (children.h). */
static pid_t start_writer(const char *role, const char *arg, const char *path)
{
    const char *const args[] = {"test_checkpoint_files", role, arg, path, NULL};
    return th_spawn_self(args, NULL, NULL, NULL);
}

/* --writer C PATH: 150 saves of PATH with keep 2, exiting 1 if any failed. */
static int writer_main(const char *name, const char *path)
{
    int failed = 0;
    for (int i = 0; i < 150; i++) {
        char value[32];
        snprintf(value, sizeof value, "writer %s save %d", name, i);
        if (save_strings(path, value, 2) != UG_OK && failed++ == 0)
            fprintf(stderr, "writer %s: %s\n", name, ug_last_error());
    }
    return failed ? 1 : 0;
}

/* --saver FD PATH: saves PATH until killed, writing a byte to FD after
 * the first save, so that the kill falls among saves. */
static int saver_main(const char *fd, const char *path)
{
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    save_strings(path, big, 1);
    if (write(atoi(fd), "", 1) != 1)
        return 1;
    for (;;)
        save_strings(path, big, 1);
}

/* Two processes saving one path with keep 2, 150 times each: every save
 * succeeds (the rotation once raced: "link ... failed: File exists"), and
 * the file and its copy load. */
static void test_concurrent_writers(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-writers-XXXXXX", path[128], copy[140], buf[64];
    REQUIRE(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    snprintf(copy, sizeof copy, "%s.1", path);
    pid_t children[2];
    for (int c = 0; c < 2; c++)
        REQUIRE((children[c] = start_writer("--writer", c ? "1" : "0", path)) > 0);
    for (int c = 0; c < 2; c++) {
        int status = th_wait_child(children[c], 0);
        CHECK_MSG(status == 0, "writer %d had failed saves (status %d)", c, status);
    }
    CHECK_MSG(!strncmp(load_string(path, buf, sizeof buf), "writer ", 7), "%s holds \"%s\"", path, buf);
    CHECK_MSG(!strncmp(load_string(copy, buf, sizeof buf), "writer ", 7), "%s holds \"%s\"", copy, buf);
    CHECK_EQ_I64(count_temporaries(dir), 0);
    remove_tree(dir);
}

/* A name of 250 bytes (255 is the limit) saves, keeps a copy and loads:
 * the temporary name is cut to fit. */
static void test_long_names(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-long-XXXXXX", path[512], buf[64];
    REQUIRE(mkdtemp(dir));
    int used = snprintf(path, sizeof path, "%s/", dir);
    memset(path + used, 'n', 250);
    path[used + 250] = '\0';
    CHECK_OK(save_strings(path, "first", 2));
    CHECK_OK(save_strings(path, "second", 2));
    CHECK(!strcmp(load_string(path, buf, sizeof buf), "second"));
    strcat(path, ".1");
    CHECK(!strcmp(load_string(path, buf, sizeof buf), "first"));
    CHECK_EQ_I64(count_temporaries(dir), 0);
    remove_tree(dir);
}

/* Writers killed with SIGKILL mid-save leave temporary files; the next
 * save of the path removes them, but never one a live writer holds. */
static void test_stale_temporaries(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-stale-XXXXXX", path[128], stale[160], held[160];
    REQUIRE(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    int killed_with_temporaries = 0;
    for (int round = 0; round < 40 && killed_with_temporaries < 3; round++) {
        int saving[2];
        REQUIRE(pipe(saving) == 0);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", saving[1]);
        pid_t child = start_writer("--saver", fd, path);
        close(saving[1]);
        REQUIRE(child > 0);
        char byte;
        CHECK_MSG(read(saving[0], &byte, 1) == 1, "the saver did not save");
        close(saving[0]);
        usleep(2000 + 1000 * (unsigned)(round % 7));
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        killed_with_temporaries += count_temporaries(dir) > 0;
    }
    printf("    %d kills left temporary files\n", killed_with_temporaries);
    /* One made by hand, so the case is covered whatever the kills left. */
    snprintf(stale, sizeof stale, "%s.tmp.Stale1", path);
    FILE *f = fopen(stale, "wb");
    REQUIRE(f && fputs("half a checkpoint", f) >= 0 && fclose(f) == 0);
    /* One held by a writer (this process, through a lock of its own). */
    snprintf(held, sizeof held, "%s.tmp.Held01", path);
    FILE *h = fopen(held, "wb");
    REQUIRE(h);
    REQUIRE(flock(fileno(h), LOCK_EX) == 0);
    CHECK_OK(save_strings(path, "after the kills", 1));
    CHECK(access(stale, F_OK) != 0);
    CHECK_MSG(access(held, F_OK) == 0, "the save removed a temporary file a live writer holds");
    fclose(h);
    unlink(held);
    CHECK_EQ_I64(count_temporaries(dir), 0);
    remove_tree(dir);
}

/* Not regular files: refused at once, never a read that waits forever. */
static void test_not_regular_files(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-fifo-XXXXXX", fifo[128];
    REQUIRE(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/pipe.safetensors", dir);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    ug_checkpoint *ck = NULL;
    REQUIRE_OK(ug_checkpoint_create(&ck));
    CHECK_STATUS(ug_checkpoint_load(ck, fifo), UG_ERR_IO);
    CHECK_ERROR_HAS(fifo, "a FIFO (named pipe), expected a regular file");
    CHECK_STATUS(ug_checkpoint_load(ck, dir), UG_ERR_IO);
    CHECK_ERROR_HAS(dir, "a folder, expected a regular file");
    CHECK_STATUS(ug_checkpoint_load(ck, "/dev/zero"), UG_ERR_IO);
    CHECK_ERROR_HAS("a character device");
    ug_checkpoint_free(ck);
    remove_tree(dir);
}

/* Saving to a symbolic link replaces the file it points to; the link
 * stays a link. A link to nowhere is refused with what it is. */
static void test_symbolic_links(ug_device *unused)
{
    (void)unused;
    char dir[] = "/tmp/ug-test-link-XXXXXX", target[128], link[128], dangling[128], buf[64];
    REQUIRE(mkdtemp(dir));
    snprintf(target, sizeof target, "%s/real.safetensors", dir);
    snprintf(link, sizeof link, "%s/latest.safetensors", dir);
    snprintf(dangling, sizeof dangling, "%s/nowhere.safetensors", dir);
    CHECK_OK(save_strings(target, "old", 1));
    REQUIRE(symlink("real.safetensors", link) == 0);
    CHECK_OK(save_strings(link, "new", 2));
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(!strcmp(load_string(target, buf, sizeof buf), "new"));
    strcat(target, ".1");
    CHECK(!strcmp(load_string(target, buf, sizeof buf), "old"));
    REQUIRE(symlink("missing/file", dangling) == 0);
    CHECK_STATUS(save_strings(dangling, "x", 1), UG_ERR_IO);
    CHECK_ERROR_HAS(dangling, "symbolic link");
    CHECK_EQ_I64(count_temporaries(dir), 0);
    remove_tree(dir);
}

/* ---- a full load made to fail at every step ---- */

enum { ROWS = 8, IN = 6, OUT = 3 };

typedef struct setup {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_dataset *data;
    ug_loader *loader;
    ug_checkpoint *ck;
    ug_value *x, *y, *loss_sum;
} setup;

static void setup_free(setup *s)
{
    ug_checkpoint_free(s->ck);
    ug_loader_free(s->loader);
    ug_dataset_free(s->data);
    ug_graph_free(s->graph);
    ug_optimizer_free(s->opt);
    ug_model_free(s->model);
}

static ug_status build(ug_device *dev, setup *s)
{
    static float x[4 * ROWS * IN];
    static int32_t labels[4 * ROWS];
    for (int i = 0; i < 4 * ROWS * IN; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 4 * ROWS; i++)
        labels[i] = i % OUT;
    TRY(ug_dataset_from_arrays(4 * ROWS, IN, x, labels, &s->data));
    TRY(ug_model_create(dev, 3, &s->model));
    TRY(ug_graph_create(s->model, &s->graph));
    ug_value *logits = NULL, *loss = NULL;
    TRY(ug_graph_input(s->graph, "x", UG_F32, 2, (int64_t[]){ROWS, IN}, &s->x));
    TRY(ug_graph_input(s->graph, "y", UG_I32, 1, (int64_t[]){ROWS}, &s->y));
    TRY(ug_nn_linear(s->graph, "fc", s->x, OUT, &logits));
    TRY(ug_g_cross_entropy(s->graph, logits, s->y, 0.0f, &loss));
    TRY(ug_graph_accumulate_rows(s->graph, loss, &s->loss_sum));
    TRY(ug_graph_backward(s->graph, loss));
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    c.loss_scaling.enabled = true;
    TRY(ug_optimizer_create(s->model, &c, &s->opt));
    TRY(ug_graph_set_optimizer(s->graph, s->opt));
    TRY(ug_graph_compile(s->graph));
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = ROWS;
    TRY(ug_loader_create(s->data, dev, &lc, &s->loader));
    TRY(ug_loader_start_epoch(s->loader, 0));
    TRY(ug_checkpoint_create(&s->ck));
    TRY(ug_checkpoint_add_optimizer(s->ck, s->opt));
    TRY(ug_checkpoint_add_graph(s->ck, "train", s->graph));
    return ug_checkpoint_add_loader(s->ck, "train", s->loader);
}

static ug_status step(setup *s)
{
    ug_batch b;
    bool done = false;
    TRY(ug_loader_next(s->loader, &b, &done));
    TRY(ug_graph_bind(s->graph, s->x, b.x));
    TRY(ug_graph_bind(s->graph, s->y, b.y));
    return ug_graph_run(s->graph);
}

/* Everything a load restores, as bytes: parameters, Adam's state, the
 * step count, the scaler, the loader's position, the running sum and the
 * caller's string. */
typedef struct snapshot {
    float values[2 * 3 * (IN * OUT + OUT) + 1];
    int64_t steps, epoch, next;
    ug_loss_scaler_state scaler;
    char note[32];
} snapshot;

static bool take(setup *s, snapshot *out)
{
    memset(out, 0, sizeof *out);
    float *v = out->values;
    for (int i = 0; i < ug_model_param_count(s->model); i++) {
        ug_tensor *t = NULL;
        if (ug_model_param_at(s->model, i, NULL, &t) != UG_OK || ug_tensor_download(t, v, ug_tensor_nbytes(t)) != UG_OK)
            return false;
        v += ug_tensor_numel(t);
        for (int k = 0; k < ug_optimizer_state_count(s->opt); k++) {
            ug_tensor *state = NULL;
            if (ug_optimizer_state(s->opt, i, k, &state) != UG_OK ||
                ug_tensor_download(state, v, ug_tensor_nbytes(state)) != UG_OK)
                return false;
            v += ug_tensor_numel(state);
        }
    }
    if (ug_graph_read(s->graph, s->loss_sum, v, sizeof *v) != UG_OK)
        return false;
    out->steps = ug_optimizer_steps(s->opt);
    ug_loader_position(s->loader, &out->epoch, &out->next);
    const char *note = ug_checkpoint_string(s->ck, "note");
    snprintf(out->note, sizeof out->note, "%s", note ? note : "");
    return ug_optimizer_loss_scaler(s->opt, &out->scaler) == UG_OK;
}

static void test_load_fault_sweep(ug_device *dev)
{
    char dir[] = "/tmp/ug-test-loadsweep-XXXXXX", saved[128], later[128];
    REQUIRE(mkdtemp(dir));
    snprintf(saved, sizeof saved, "%s/a.safetensors", dir);
    snprintf(later, sizeof later, "%s/b.safetensors", dir);
    setup s = {0};
    snapshot a, b, now;
    /* The whole epoch first: a loader with batches left prefetches them on
     * its workers, whose uploads would count as this thread's waits. */
    ug_status st = build(dev, &s);
    for (int i = 0; i < 4 && st == UG_OK; i++)
        st = step(&s);
    if (st == UG_OK)
        st = ug_checkpoint_set_string(s.ck, "note", "state a");
    if (st == UG_OK)
        st = ug_checkpoint_save(s.ck, saved);
    if (st == UG_OK) /* one more update on the last batch */
        st = ug_graph_run(s.graph);
    if (st == UG_OK)
        st = ug_checkpoint_set_string(s.ck, "note", "state b");
    if (st == UG_OK)
        st = ug_checkpoint_save(s.ck, later);
    if (st != UG_OK || !take(&s, &b) || ug_checkpoint_load(s.ck, saved) != UG_OK || !take(&s, &a)) {
        th_fail(TH_LOC, "setting up: %s", ug_last_error());
        goto done;
    }
    CHECK(memcmp(&a, &b, sizeof a) != 0);
    static const struct {
        ug_fault_kind kind;
        const char *name;
    } kinds[] = {{UG_FAULT_HOST_ALLOC, "host allocation"},
                 {UG_FAULT_DEVICE_ALLOC, "device allocation"},
                 {UG_FAULT_HOST_WAIT, "wait for the device"}};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        int64_t n = 1;
        for (;; n++) {
            th_context("%s %lld", kinds[k].name, (long long)n);
            if (ug_checkpoint_load(s.ck, later) != UG_OK) { /* back to state b, unarmed */
                th_fail(TH_LOC, "reloading b: %s", ug_last_error());
                goto done;
            }
            ug_fault_arm(kinds[k].kind, n);
            st = ug_checkpoint_load(s.ck, saved);
            int64_t events = ug_fault_events(kinds[k].kind);
            ug_fault_arm(kinds[k].kind, 0);
            if (!take(&s, &now)) {
                th_fail(TH_LOC, "reading the state: %s", ug_last_error());
                goto done;
            }
            if (events < n) { /* past the last one: the load went through */
                CHECK_OK(st);
                CHECK_MSG(!memcmp(&now, &a, sizeof a), "the load gave other state than was saved");
                break;
            }
            CHECK_MSG(st != UG_OK, "the load returned UG_OK though its %s %lld failed", kinds[k].name,
                      (long long)n);
            CHECK_MSG(!memcmp(&now, &b, sizeof b), "a failed load (%s) changed the state", ug_last_error());
            if (th_failures() || n == 1000)
                break;
        }
        printf("    %s: %lld events, each made to fail\n", kinds[k].name, (long long)(n - 1));
    }
    th_context("%s", "");
done:
    setup_free(&s);
    remove_tree(dir);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--writer"))
        return writer_main(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "--saver"))
        return saver_main(argv[2], argv[3]);
    static const th_test tests[] = {
        TH_HOST_TEST(concurrent_writers),
        TH_HOST_TEST(long_names),
        TH_HOST_TEST(stale_temporaries),
        TH_HOST_TEST(not_regular_files),
        TH_HOST_TEST(symbolic_links),
        TH_DEVICE_TEST(load_fault_sweep),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
