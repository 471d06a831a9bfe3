/* A 2-block GPT's first 20 AdamW steps on the device under test against
 * an independent double-precision reference (tests/training/gpt_reference.py,
 * numpy only, as the checkpoint reader is).
 *
 * The model is examples/gpt.c's (tools/gpt_model.c) at a tiny size: token
 * and position embeddings, two pre-norm blocks (layer norm, causal multi-head
 * self-attention, residual; layer norm, linear 4C, exact GELU, linear C,
 * residual), a final layer norm and the token table as the head (tied),
 * mean cross-entropy over every token. The optimizer is nanoGPT's: AdamW
 * with weight decay on matrices only, warm-up and cosine decay, clipping
 * by global norm at 1.0.
 *
 * This program trains on a ug_graph directly (no trainer), saving the
 * initial parameters, the final ones and the 20 losses into a temporary
 * directory; the reference reads the initial parameters, redoes the 20
 * steps in float64 (forward and backward written out by hand) and
 * compares. It exits 77 from here when the reference's numpy is missing
 * (ctest: skipped). The reference also requires that clipping acted in
 * some steps and not in others, so the comparison covers both paths. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpt_model.h"
#include "harness.h"
#include "train_support.h"

enum { VOCAB = 13, BLOCK = 8, DIM = 16, HEADS = 2, LAYERS = 2, BATCH = 3, STEPS = 20 };

/* The reference's exit status when numpy is missing. */
enum { REFERENCE_SKIP = 77 };

static bool numpy_missing;

/* The model (tools/gpt_model.c), embeddings at GPT-2's standard deviation
 * 0.02 as examples/gpt.c. With this seed the gradient norm starts below 1
 * (0.76 to 0.90 in the first five steps), rises above it from step 5
 * (clipped) and ends below it. */
static gpt_config tiny = {.vocab = VOCAB, .block = BLOCK, .layers = LAYERS, .heads = HEADS, .dim = DIM};

/* Step k's batch; gpt_reference.py computes the same. */
static void batch(int k, int32_t *x, int32_t *y)
{
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < BLOCK; t++) {
            x[b * BLOCK + t] = (7 * b + 3 * t + 5 * k) % VOCAB;
            y[b * BLOCK + t] = (7 * b + 3 * (t + 1) + 5 * k) % VOCAB;
        }
}

static ug_optimizer_config optimizer(void)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
    c.lr = 1e-2f;
    c.beta2 = 0.99f;
    /* Larger than PyTorch's 1e-8 on purpose: a gradient that is 0 in exact
     * arithmetic but f32 rounding noise on a device (the key projection's
     * bias: softmax is invariant to it) would otherwise get lr-sized Adam
     * steps of a random sign, where the reference moves it by nothing. */
    c.eps = 1e-4f;
    c.weight_decay = 0.1f;
    c.max_grad_norm = 1.0f;
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 5;
    c.total_steps = STEPS;
    c.min_lr = 1e-3f;
    return c;
}

static bool save_params(ug_model *m, const char *path)
{
    ug_checkpoint *ck = NULL;
    ug_status st = ug_checkpoint_create(&ck);
    if (st == UG_OK) st = ug_checkpoint_add_model(ck, m);
    if (st == UG_OK) st = ug_checkpoint_save(ck, path);
    ug_checkpoint_free(ck);
    if (st != UG_OK)
        th_fail(TH_LOC, "saving %s returned %s: %s", path, ug_status_name(st), ug_last_error());
    return st == UG_OK;
}

/* Runs the reference on dir's files: 0 when it agrees. */
static int run_reference(const char *dir)
{
    char cmd[4096];
    const int n = snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", UG_TEST_PYTHON3, UG_TEST_GPT_REFERENCE, dir);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1;
    fflush(stdout);
    const int status = system(cmd);
    return status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

static void remove_outputs(const char *dir)
{
    static const char *const files[] = {"initial.safetensors", "final.safetensors", "losses.txt"};
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

TS_TEST(gpt_matches_reference)
{
    if (!*UG_TEST_PYTHON3) {
        numpy_missing = true;
        th_skip("python3 was not found when configuring: install python3-numpy");
        return;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/ug_gpt_reference.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    REQUIRE(mkdtemp(dir));

    ug_model *m = ts_model(dev, 1234);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(g);
    const int64_t shape[2] = {BATCH, BLOCK};
    ug_value *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_I32, 2, shape, &x));
    REQUIRE_OK(ug_graph_input(g, "y", UG_I32, 2, shape, &y));
    REQUIRE_OK(gpt_logits(g, x, NULL, &tiny, &logits));
    REQUIRE_OK(ug_g_cross_entropy(g, logits, y, 0.0f, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_optimizer_config c = optimizer();
    REQUIRE_OK(ug_optimizer_decay_matrices_only(&c));
    ug_optimizer *opt = ts_optimizer(m, &c);
    REQUIRE(opt);
    REQUIRE_OK(ug_graph_set_optimizer(g, opt));
    REQUIRE_OK(ug_graph_compile(g));

    snprintf(path, sizeof path, "%s/initial.safetensors", dir);
    REQUIRE(save_params(m, path));
    double losses[STEPS];
    for (int k = 0; k < STEPS; k++) {
        int32_t xs[BATCH * BLOCK], ys[BATCH * BLOCK];
        batch(k, xs, ys);
        ug_tensor *xv = NULL, *yv = NULL;
        REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 2, shape, xs, &xv));
        th_track(xv);
        REQUIRE_OK(ug_tensor_from_host(dev, UG_I32, 2, shape, ys, &yv));
        th_track(yv);
        REQUIRE_OK(ug_graph_bind(g, x, xv));
        REQUIRE_OK(ug_graph_bind(g, y, yv));
        REQUIRE_OK(ug_graph_run(g));
        float value = 0.0f;
        REQUIRE_OK(ug_graph_read(g, loss, &value, sizeof value));
        losses[k] = value;
    }
    snprintf(path, sizeof path, "%s/final.safetensors", dir);
    REQUIRE(save_params(m, path));
    snprintf(path, sizeof path, "%s/losses.txt", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    for (int k = 0; k < STEPS; k++)
        fprintf(f, "%.9g\n", losses[k]);
    REQUIRE(fclose(f) == 0);

    const int rc = run_reference(dir);
    if (rc == REFERENCE_SKIP) {
        numpy_missing = true;
        th_skip("numpy is missing: install python3-numpy");
    } else {
        CHECK_MSG(rc == 0, "gpt_reference.py exited with %d; its files are in %s", rc, dir);
    }
    if (rc == 0 || rc == REFERENCE_SKIP)
        remove_outputs(dir);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {TH_DEVICE_TEST(gpt_matches_reference)};
    const int rc = th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
    return rc == 0 && numpy_missing ? TH_SKIP_EXIT : rc;
}
