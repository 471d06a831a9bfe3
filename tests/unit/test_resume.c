/* Exact resume (include/unigrad/checkpoint.h): a training run killed with
 * SIGKILL at a random update and resumed from its last checkpoint ends with
 * bitwise the parameters of a run that was never interrupted, with dropout,
 * shuffling, a warm-up and cosine schedule, gradient clipping, gradient
 * accumulation, evaluation passes and mixed precision (bf16; f16 with loss
 * scaling) in the run, for an MLP and for a CNN (batch norm's running
 * statistics being model state).
 *
 * The run to kill is this program again (fork and exec of /proc/self/exe
 * with --child), so it starts with no device state inherited; it reports
 * each checkpoint it saved on a pipe, and the parent kills it after a
 * randomly chosen one, possibly in the middle of the next save. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "unigrad/checkpoint.h"

enum { SAMPLES = 600, SIDE = 8, FEATURES = SIDE * SIDE, CLASSES = 4, BATCH = 32, EPOCHS = 3, ACCUMULATE = 2,
       HIDDEN = 40 };

typedef struct run_config {
    ug_dtype precision;
    bool cnn;               /* conv + batch norm + max-pool before the MLP */
    const char *checkpoint; /* saved after every update, when not NULL */
    bool resume;            /* start from the checkpoint */
    int progress_fd;        /* -1, or where "saved N\n" goes after each save */
} run_config;

/* Bytes with a pattern a small network can learn: the label is the
 * feature group with the largest sum. */
static ug_status make_data(ug_dataset **out)
{
    static uint8_t x[SAMPLES * FEATURES];
    static int32_t labels[SAMPLES];
    uint64_t s = 12345;
    for (int i = 0; i < SAMPLES; i++) {
        labels[i] = i % CLASSES;
        for (int f = 0; f < FEATURES; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int boost = f % CLASSES == labels[i] ? 60 : 0;
            x[i * FEATURES + f] = (uint8_t)((s >> 33) % 190 + (uint64_t)boost);
        }
    }
    ug_dataset_arrays a = {.count = SAMPLES, .features = FEATURES, .x_dtype = UG_U8, .x = x, .labels = labels};
    ug_status st = ug_dataset_create(&a, out);
    return st == UG_OK ? ug_dataset_transform(*out, 1.0f / 128.0f, -1.0f) : st;
}

typedef struct run {
    ug_dataset *data;
    ug_model *model;
    ug_optimizer *opt;
    ug_graph *g;
    ug_loader *loader, *eval_loader;
    ug_checkpoint *ck;
    ug_value *x, *y, *loss, *loss_sum;
} run;

static void run_free(run *r)
{
    ug_checkpoint_free(r->ck);
    ug_loader_free(r->loader);
    ug_loader_free(r->eval_loader);
    ug_graph_free(r->g);
    ug_optimizer_free(r->opt);
    ug_model_free(r->model);
    ug_dataset_free(r->data);
}

static ug_status build(ug_device *dev, const run_config *c, run *r)
{
    TRY(make_data(&r->data));
    TRY(ug_model_create(dev, 7, &r->model));
    TRY(ug_graph_create(r->model, &r->g));
    TRY(ug_graph_set_precision(r->g, c->precision));
    TRY(ug_graph_set_seed(r->g, 99));
    ug_value *h = NULL, *logits = NULL;
    TRY(ug_graph_input(r->g, "x", c->precision, 2, (int64_t[]){BATCH, FEATURES}, &r->x));
    TRY(ug_graph_input(r->g, "y", UG_I32, 1, (int64_t[]){BATCH}, &r->y));
    h = r->x;
    if (c->cnn) {
        const ug_conv2d_params same = {.padding = {1, 1}};
        const ug_pool2d_params halve = {.kernel = {2, 2}};
        TRY(ug_g_reshape(r->g, h, 4, (int64_t[]){BATCH, 1, SIDE, SIDE}, &h));
        TRY(ug_nn_conv2d(r->g, "conv1", h, 6, 3, 3, &same, &h));
        TRY(ug_nn_batch_norm(r->g, "bn1", h, &h));
        TRY(ug_g_relu(r->g, h, &h));
        TRY(ug_g_max_pool2d(r->g, h, &halve, &h));
        TRY(ug_nn_flatten(r->g, h, &h));
    }
    TRY(ug_nn_linear(r->g, "fc1", h, HIDDEN, &h));
    TRY(ug_g_relu(r->g, h, &h));
    TRY(ug_g_dropout(r->g, h, 0.3f, &h));
    TRY(ug_nn_linear(r->g, "fc2", h, CLASSES, &logits));
    TRY(ug_g_cross_entropy(r->g, logits, r->y, 0.0f, &r->loss));
    TRY(ug_graph_accumulate_rows(r->g, r->loss, &r->loss_sum));
    TRY(ug_graph_backward(r->g, r->loss));
    ug_optimizer_config oc = ug_optimizer_defaults(UG_ADAMW);
    oc.lr = 3e-3f;
    oc.schedule = UG_SCHEDULE_COSINE;
    oc.warmup_steps = 5;
    oc.total_steps = 40;
    oc.max_grad_norm = 1.0f;
    oc.loss_scaling.enabled = c->precision == UG_F16;
    TRY(ug_optimizer_create(r->model, &oc, &r->opt));
    TRY(ug_graph_set_optimizer(r->g, r->opt));
    TRY(ug_graph_compile(r->g));
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = BATCH;
    lc.seed = 5;
    lc.x_dtype = c->precision;
    TRY(ug_loader_create(r->data, dev, &lc, &r->loader));
    lc.shuffle = false;
    TRY(ug_loader_create(r->data, dev, &lc, &r->eval_loader));
    TRY(ug_checkpoint_create(&r->ck));
    TRY(ug_checkpoint_add_model(r->ck, r->model));
    TRY(ug_checkpoint_add_optimizer(r->ck, r->opt));
    TRY(ug_checkpoint_add_graph(r->ck, "train", r->g));
    return ug_checkpoint_add_loader(r->ck, "train", r->loader);
}

static ug_status update(run *r, const run_config *c)
{
    TRY(ug_graph_run_update(r->g));
    if (!c->checkpoint)
        return UG_OK;
    TRY(ug_checkpoint_save(r->ck, c->checkpoint));
    if (c->progress_fd >= 0) {
        char line[32];
        int n = snprintf(line, sizeof line, "saved %lld\n", (long long)ug_optimizer_steps(r->opt));
        if (write(c->progress_fd, line, (size_t)n) != n)
            return UG_ERR_IO;
    }
    return UG_OK;
}

/* The training loop: epochs of micro-batch pairs, an update after each
 * pair and after an epoch's odd last batch, and an evaluation pass over
 * the data's first batch at each epoch's end (which advances the graph's
 * run count, dropout's counter, too). */
static ug_status train(ug_device *dev, const run_config *c, run *r)
{
    TRY(build(dev, c, r));
    int64_t epoch = 0;
    if (c->resume) {
        TRY(ug_checkpoint_load(r->ck, c->checkpoint));
        int64_t next = 0;
        ug_loader_position(r->loader, &epoch, &next);
    } else {
        TRY(ug_loader_start_epoch(r->loader, 0));
    }
    int pending = 0;
    while (epoch < EPOCHS) {
        ug_batch b;
        bool done = false;
        TRY(ug_loader_next(r->loader, &b, &done));
        if (!done) {
            TRY(ug_graph_bind(r->g, r->x, b.x));
            TRY(ug_graph_bind(r->g, r->y, b.y));
            TRY(ug_graph_run_backward(r->g));
            if (++pending == ACCUMULATE) {
                pending = 0;
                TRY(update(r, c));
            }
            continue;
        }
        if (pending) {
            pending = 0;
            TRY(update(r, c));
        }
        ug_batch first;
        TRY(ug_loader_start_epoch(r->eval_loader, 0));
        TRY(ug_loader_next(r->eval_loader, &first, &done));
        TRY(ug_graph_bind(r->g, r->x, first.x));
        TRY(ug_graph_bind(r->g, r->y, first.y));
        TRY(ug_graph_set_training(r->g, false));
        TRY(ug_graph_run_forward(r->g));
        TRY(ug_graph_set_training(r->g, true));
        if (++epoch < EPOCHS)
            TRY(ug_loader_start_epoch(r->loader, epoch));
    }
    return UG_OK;
}

/* ---- the child ---- */

static int child_main(int argc, char **argv)
{
    /* --child DEVICE PRECISION CNN CHECKPOINT FD */
    if (argc != 7)
        return 3;
    run_config c = {.precision = (ug_dtype)atoi(argv[3]), .cnn = atoi(argv[4]) != 0, .checkpoint = argv[5],
                    .progress_fd = atoi(argv[6])};
    ug_device *dev = NULL;
    run r = {0};
    ug_status st = ug_device_open(argv[2], &dev);
    if (st == UG_OK)
        st = train(dev, &c, &r);
    if (st != UG_OK)
        fprintf(stderr, "child: %s\n", ug_last_error());
    run_free(&r);
    ug_device_close(dev);
    return st == UG_OK ? 0 : 1;
}

/* ---- the test ---- */

static float *final_params(ug_model *m, int64_t *count)
{
    int64_t total = 0;
    for (int i = 0; i < ug_model_param_count(m); i++) {
        ug_tensor *t = NULL;
        ug_model_param_at(m, i, NULL, &t);
        total += ug_tensor_numel(t);
    }
    float *all = th_alloc((size_t)total * sizeof(float)), *p = all;
    for (int i = 0; i < ug_model_param_count(m); i++) {
        ug_tensor *t = NULL;
        ug_model_param_at(m, i, NULL, &t);
        if (ug_tensor_download(t, p, ug_tensor_nbytes(t)) != UG_OK)
            th_fail(TH_LOC, "download: %s", ug_last_error());
        p += ug_tensor_numel(t);
    }
    *count = total;
    return all;
}

/* Starts the child, kills it after its kill_after-th save; returns the
 * saves it reported. */
static int64_t run_and_kill(ug_device *dev, const run_config *c, const char *path, int64_t kill_after)
{
    int fds[2];
    if (pipe(fds) != 0) {
        th_fail(TH_LOC, "pipe: %s", strerror(errno));
        return -1;
    }
    char precision_text[16], fd_text[16];
    snprintf(precision_text, sizeof precision_text, "%d", (int)c->precision);
    snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
    ug_device_info info;
    ug_device_get_info(dev, &info);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        execl("/proc/self/exe", "test_resume", "--child", info.id, precision_text, c->cnn ? "1" : "0", path, fd_text,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        th_fail(TH_LOC, "fork: %s", strerror(errno));
        return -1;
    }
    FILE *progress = fdopen(fds[0], "r");
    int64_t saved = 0;
    long long n = 0;
    while (saved < kill_after && progress && fscanf(progress, "saved %lld\n", &n) == 1)
        saved = n;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    if (progress)
        fclose(progress);
    else
        close(fds[0]);
    if (saved < kill_after)
        th_fail(TH_LOC, "the child stopped after %lld saves (status %d), before save %lld", (long long)saved, status,
                (long long)kill_after);
    return saved;
}

static void kill_and_resume(ug_device *dev, ug_dtype precision, bool cnn)
{
    const char *model = cnn ? "cnn" : "mlp";
    th_context("%s %s", model, ug_dtype_name(precision));
    char dir[] = "/tmp/ug-test-resume-XXXXXX";
    if (!mkdtemp(dir)) {
        th_fail(TH_LOC, "mkdtemp: %s", strerror(errno));
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/run.safetensors", dir);

    run_config plain = {.precision = precision, .cnn = cnn, .progress_fd = -1};
    run whole = {0};
    if (train(dev, &plain, &whole) != UG_OK)
        th_fail(TH_LOC, "uninterrupted run: %s", ug_last_error());
    int64_t updates = whole.opt ? ug_optimizer_steps(whole.opt) : 0, count = 0, resumed_count = 0;
    float *want = whole.model ? final_params(whole.model, &count) : NULL;
    run_free(&whole);

    /* A random update to kill after (from the seed test_kill_and_resume
     * prints, so a failure can be replayed). */
    int64_t kill_after = 2 + rand() % (updates > 6 ? updates - 4 : 1);
    if (precision == UG_BF16)
        kill_after = updates / EPOCHS; /* the first epoch's last update: resumed at its evaluation */
    printf("  %s %s: %lld updates, killing after save %lld\n", model, ug_dtype_name(precision), (long long)updates,
           (long long)kill_after);
    run_config child = {.precision = precision, .cnn = cnn};
    run_and_kill(dev, &child, path, kill_after);

    run_config resume = {.precision = precision, .cnn = cnn, .checkpoint = path, .resume = true, .progress_fd = -1};
    run resumed = {0};
    if (train(dev, &resume, &resumed) != UG_OK)
        th_fail(TH_LOC, "resumed run: %s", ug_last_error());
    CHECK_EQ_I64(resumed.opt ? ug_optimizer_steps(resumed.opt) : -1, updates);
    float *got = resumed.model ? final_params(resumed.model, &resumed_count) : NULL;
    run_free(&resumed);
    CHECK_EQ_I64(resumed_count, count);
    if (want && got && count == resumed_count) {
        int64_t differ = 0;
        for (int64_t i = 0; i < count; i++)
            differ += memcmp(&want[i], &got[i], sizeof(float)) != 0;
        CHECK_MSG(differ == 0, "%lld of %lld parameters differ from the uninterrupted run's", (long long)differ,
                  (long long)count);
    }
    /* A kill during a save leaves at most its temporary file behind. */
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0)
        th_fail(TH_LOC, "could not remove %s", dir);
}

static void test_kill_and_resume(ug_device *dev)
{
    unsigned seed = getenv("UG_TEST_SEED") ? (unsigned)atoi(getenv("UG_TEST_SEED"))
                                           : (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("  kill points from seed %u (UG_TEST_SEED replays them)\n", seed);
    srand(seed);
    for (int cnn = 0; cnn < 2; cnn++) {
        kill_and_resume(dev, UG_F32, cnn);
        kill_and_resume(dev, UG_BF16, cnn);
        kill_and_resume(dev, UG_F16, cnn);
    }
}

/* ---- refused checkpoints ---- */

static float *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *bytes = th_alloc((size_t)*size + 1);
    size_t got = fread(bytes, 1, (size_t)*size, f);
    fclose(f);
    return got == (size_t)*size ? bytes : NULL;
}

static bool write_bytes(const char *path, const void *bytes, size_t size)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(bytes, 1, size, f) == size;
    return (f ? fclose(f) == 0 : false) && ok;
}

/* Each way a checkpoint can be wrong for the parts it is loaded into is
 * refused with what was expected, and a refused load changes nothing. */
static void test_checkpoint_errors(ug_device *dev)
{
    char dir[] = "/tmp/ug-test-ckerr-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[128], bad[128];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    run_config c = {.precision = UG_F32, .checkpoint = NULL, .progress_fd = -1};
    run r = {0};
    if (train(dev, &c, &r) != UG_OK) {
        th_fail(TH_LOC, "training: %s", ug_last_error());
        run_free(&r);
        return;
    }
    CHECK_OK(ug_checkpoint_set_string(r.ck, "note", "hello"));
    CHECK_OK(ug_checkpoint_save(r.ck, path));
    int64_t count = 0, after_count = 0;
    float *before = final_params(r.model, &count);

    CHECK_STATUS(ug_checkpoint_load(r.ck, "/nonexistent/x.safetensors"), UG_ERR_IO);
    CHECK_ERROR_HAS("/nonexistent/x.safetensors", "No such file");
    CHECK_STATUS(ug_checkpoint_set_string(r.ck, "unigrad.mine", "x"), UG_ERR_INVALID_ARGUMENT);

    /* Another model's file: fc1 of another width. */
    run other = {0};
    ug_model *wide = NULL;
    ug_graph *g = NULL;
    ug_value *x = NULL, *h = NULL;
    ug_checkpoint *ck = NULL;
    CHECK_OK(ug_model_create(dev, 1, &wide));
    CHECK_OK(ug_graph_create(wide, &g));
    CHECK_OK(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){BATCH, FEATURES}, &x));
    CHECK_OK(ug_nn_linear(g, "fc1", x, HIDDEN + 1, &h));
    CHECK_OK(ug_nn_linear(g, "fc2", h, CLASSES, &h));
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_model(ck, wide));
    CHECK_STATUS(ug_checkpoint_load(ck, path), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("a.safetensors: byte ", "'fc1.weight' is F32 [40, 64]", "[41, 64]");
    ug_checkpoint_free(ck);
    ug_graph_free(g);
    ug_model_free(wide);
    (void)other;

    /* The model alone loads from the whole checkpoint (optimizer state is
     * not its part), and an SGD optimizer is not the saved AdamW. */
    ug_optimizer *sgd = NULL;
    ug_optimizer_config sc = ug_optimizer_defaults(UG_SGD);
    sc.momentum = 0.9f;
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_model(ck, r.model));
    CHECK_OK(ug_checkpoint_load(ck, path));
    CHECK(ug_checkpoint_string(ck, "note") && !strcmp(ug_checkpoint_string(ck, "note"), "hello"));
    CHECK_OK(ug_optimizer_create(r.model, &sc, &sgd));
    CHECK_OK(ug_checkpoint_add_optimizer(ck, sgd));
    CHECK_STATUS(ug_checkpoint_load(ck, path), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("the optimizer is sgd, the checkpoint's is adamw");
    ug_checkpoint_free(ck);
    ug_optimizer_free(sgd);

    /* A loader of another batch size: the saved position would mean other
     * samples. */
    ug_loader_config lc = ug_loader_default_config();
    lc.batch_size = 16;
    lc.seed = 5;
    ug_loader *small = NULL;
    CHECK_OK(ug_loader_create(r.data, dev, &lc, &small));
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_loader(ck, "train", small));
    CHECK_STATUS(ug_checkpoint_load(ck, path), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("loader 'train'", "batch size 32", "batch size 16");
    ug_checkpoint_free(ck);
    ug_loader_free(small);

    /* Damaged files: the steps made a word (same length), and the file cut
     * short; neither changes the parameters. */
    long size = 0;
    char *bytes = (char *)read_file(path, &size);
    REQUIRE(bytes);
    bytes[size] = '\0';
    char *steps = strstr(bytes + 8, "\"unigrad.optimizer.steps\":\"");
    REQUIRE(steps);
    steps += strlen("\"unigrad.optimizer.steps\":\"");
    steps[0] = 'x';
    CHECK(write_bytes(bad, bytes, (size_t)size));
    CHECK_STATUS(ug_checkpoint_load(r.ck, bad), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("unigrad.optimizer.steps", "expected a whole number");
    steps[0] = '1';
    CHECK(write_bytes(bad, bytes, (size_t)size - 1));
    CHECK_STATUS(ug_checkpoint_load(r.ck, bad), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("bad.safetensors");
    float *after = final_params(r.model, &after_count);
    CHECK(count == after_count && memcmp(before, after, (size_t)count * sizeof(float)) == 0);

    /* No save with micro-batches pending: their gradients are not saved. */
    ug_batch b;
    bool done = false;
    CHECK_OK(ug_loader_start_epoch(r.loader, 0));
    CHECK_OK(ug_loader_next(r.loader, &b, &done));
    CHECK_OK(ug_graph_bind(r.g, r.x, b.x));
    CHECK_OK(ug_graph_bind(r.g, r.y, b.y));
    CHECK_OK(ug_graph_run_backward(r.g));
    CHECK_STATUS(ug_checkpoint_save(r.ck, path), UG_ERR_STATE);
    CHECK_ERROR_HAS("the gradients of 1 micro-batch not yet applied", "ug_graph_run_update");
    CHECK_OK(ug_graph_run_update(r.g));
    run_free(&r);
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0)
        th_fail(TH_LOC, "could not remove %s", dir);
}

/* A checkpoint saved before the loader's first epoch puts a loader that
 * has run since back there, and SGD's momentum buffers are not dropped in
 * silence into an SGD without momentum. */
static void test_restores_what_was_saved(ug_device *dev)
{
    char dir[] = "/tmp/ug-test-ckparts-XXXXXX", path[128];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    run r = {0};
    run_config c = {.precision = UG_F32, .progress_fd = -1};
    ug_checkpoint *ck = NULL;
    ug_optimizer *momentum = NULL, *plain = NULL;
    ug_status st = build(dev, &c, &r);
    if (st == UG_OK)
        st = ug_checkpoint_save(r.ck, path);
    ug_batch b;
    bool done = false;
    if (st == UG_OK)
        st = ug_loader_start_epoch(r.loader, 0);
    for (int i = 0; i < 3 && st == UG_OK; i++)
        st = ug_loader_next(r.loader, &b, &done);
    if (st != UG_OK) {
        th_fail(TH_LOC, "training: %s", ug_last_error());
        goto done;
    }
    CHECK_OK(ug_checkpoint_load(r.ck, path));
    int64_t epoch = 0, next = 0;
    ug_loader_position(r.loader, &epoch, &next);
    CHECK_MSG(epoch == -1 && next == 0, "the loader is at epoch %lld, batch %lld; saved before its first epoch",
              (long long)epoch, (long long)next);

    ug_optimizer_config sc = ug_optimizer_defaults(UG_SGD);
    sc.momentum = 0.9f;
    CHECK_OK(ug_optimizer_create(r.model, &sc, &momentum));
    sc.momentum = 0.0f;
    CHECK_OK(ug_optimizer_create(r.model, &sc, &plain));
    REQUIRE(momentum && plain);
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_optimizer(ck, momentum));
    CHECK_OK(ug_checkpoint_save(ck, path));
    ug_checkpoint_free(ck);
    CHECK_OK(ug_checkpoint_create(&ck));
    CHECK_OK(ug_checkpoint_add_optimizer(ck, plain));
    CHECK_STATUS(ug_checkpoint_load(ck, path), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("momentum_buffer", "does not keep", "momentum > 0");
done:
    ug_checkpoint_free(ck);
    ug_optimizer_free(momentum);
    ug_optimizer_free(plain);
    run_free(&r);
    unlink(path);
    rmdir(dir);
}

/* 100,000 strings of the caller's survive a save and load, each looked up
 * (a linear search per key made this quadratic: 12 s to load). */
static void test_many_strings(ug_device *dev)
{
    (void)dev;
    enum { KEYS = 100000 };
    char dir[] = "/tmp/ug-test-ckstrings-XXXXXX", path[128], key[32], value[32];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    ug_checkpoint *ck = NULL, *back = NULL;
    REQUIRE_OK(ug_checkpoint_create(&ck));
    ug_status st = UG_OK;
    for (int i = 0; i < KEYS && st == UG_OK; i++) {
        snprintf(key, sizeof key, "key%d", (i * 7919) % KEYS);
        snprintf(value, sizeof value, "v%d", i);
        st = ug_checkpoint_set_string(ck, key, value);
    }
    CHECK_OK(st);
    CHECK_OK(ug_checkpoint_set_string(ck, "key5", "replaced"));
    CHECK_OK(ug_checkpoint_save(ck, path));
    CHECK_OK(ug_checkpoint_create(&back));
    CHECK_OK(ug_checkpoint_load(back, path));
    int wrong = 0;
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof key, "key%d", (i * 7919) % KEYS);
        snprintf(value, sizeof value, "v%d", i);
        const char *got = ug_checkpoint_string(back, key);
        wrong += !got || strcmp(got, (i * 7919) % KEYS == 5 ? "replaced" : value) != 0;
    }
    CHECK_MSG(wrong == 0, "%d of %d strings did not come back", wrong, KEYS);
    CHECK(ug_checkpoint_string(back, "key100000") == NULL);
    ug_checkpoint_free(ck);
    ug_checkpoint_free(back);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    /* Bitwise resume with cuDNN or MIOpen needs their fixed deterministic
     * algorithms (checkpoint.h); the children inherit it. */
    setenv("UG_DETERMINISTIC", "1", 1);
    if (argc > 1 && !strcmp(argv[1], "--child"))
        return child_main(argc, argv);
    static const th_test tests[] = {
        TH_DEVICE_TEST(kill_and_resume),
        TH_DEVICE_TEST(checkpoint_errors),
        TH_DEVICE_TEST(restores_what_was_saved),
        TH_HOST_TEST(many_strings),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
