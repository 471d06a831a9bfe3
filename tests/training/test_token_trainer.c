/* The trainer on token sets (ug_trainer_create_tokens): a next-token model
 * (embedding, linear, per-token cross-entropy) learning a repeating
 * pattern far below ln V within max_steps; its reports every eval_every
 * updates (the training windows since the last, the fixed validation
 * batches, perplexity and bits per token); a run stopped and resumed from
 * its checkpoint ending bitwise as the uninterrupted one (accumulation,
 * dropout, a cosine schedule over max_steps), stopped between reports and
 * right after one; two replicas drawing their rows of each global batch,
 * against one device and resumed; and what a token run refuses. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_support.h"

#define OK(expr) CHECK_STATUS(expr, UG_OK)

/* ---- the task: a pattern of VOCAB symbols, each followed by one other ---- */

enum { VOCAB = 12, TRAIN_TOKENS = 600, VAL_TOKENS = 200 };

typedef struct model_spec {
    float dropout;
} model_spec;

static ug_status build_next_token(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    const model_spec *m = user;
    ug_value *h = NULL;
    ug_status st = ug_nn_embedding(g, "wte", x, VOCAB, 16, 0.5f, &h);
    if (st == UG_OK && m && m->dropout > 0.0f)
        st = ug_g_dropout(g, h, m->dropout, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "head", h, VOCAB, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* Token i of the pattern: 5 i + 3 mod 12 (5 is prime to 12, so each
 * symbol is followed by one symbol always). */
static ug_tokens *pattern(int64_t first, int64_t count)
{
    int32_t *ids = th_alloc((size_t)count * sizeof *ids);
    for (int64_t i = 0; i < count; i++)
        ids[i] = (int32_t)((5 * (first + i) + 3) % VOCAB);
    ug_tokens *t = NULL;
    if (ug_tokens_from_ids(ids, count, VOCAB, &t) != UG_OK)
        th_fail(TH_LOC, "ug_tokens_from_ids: %s", ug_last_error());
    return t;
}

/* What the callbacks saw. */
enum { MAX_REPORTS = 8 };
typedef struct run_log {
    int reports;
    ug_trainer_epoch report[MAX_REPORTS];
    int64_t steps, last_global_batch, last_batches;
    int64_t stop_after_batch;   /* sets the stop flag after that global batch (0: never) */
    volatile sig_atomic_t stop;
} run_log;

static ug_status log_report(const ug_trainer_epoch *e, void *user)
{
    run_log *log = user;
    if (log->reports < MAX_REPORTS)
        log->report[log->reports] = *e;
    log->reports++;
    return UG_OK;
}

static ug_status log_step(const ug_trainer_step *s, void *user)
{
    run_log *log = user;
    log->steps++;
    log->last_global_batch = s->global_batch;
    log->last_batches = s->batches;
    if (log->stop_after_batch && s->global_batch == log->stop_after_batch)
        log->stop = 1;
    return UG_OK;
}

static ug_trainer_config token_config(run_log *log)
{
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = 8;
    c.block_size = 16;
    c.max_steps = 120;
    c.eval_every = 40;
    c.eval_iters = 4;
    c.seed = 11;
    c.optimizer.lr = 0.05f;
    c.log_every = 1;
    c.on_epoch = log_report;
    c.on_step = log_step;
    c.user = log;
    c.stop = &log->stop;
    return c;
}

TS_TEST(token_run_learns_a_pattern)
{
    ug_tokens *train = pattern(0, TRAIN_TOKENS), *val = pattern(TRAIN_TOKENS, VAL_TOKENS);
    REQUIRE(train && val);
    static run_log runs;
    memset(&runs, 0, sizeof runs);
    ug_trainer_config c = token_config(&runs);
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    ug_trainer *t = NULL;
    ug_status st = ug_trainer_create_tokens(dev, train, val, build_next_token, NULL, &c, &t);
    /* The trainer keeps the sets: the program's handles may go now. */
    ug_tokens_free(train);
    ug_tokens_free(val);
    REQUIRE(OK(st));
    CHECK_EQ_I64(ug_optimizer_get_config(ug_trainer_optimizer(t)).total_steps, 120); /* cosine over max_steps */
    if (OK(ug_trainer_fit(t))) {
        CHECK_EQ_I64(ug_optimizer_steps(ug_trainer_optimizer(t)), 120);
        CHECK_EQ_I64(runs.steps, 120);
        CHECK_EQ_I64(runs.last_global_batch, 120);
        CHECK_EQ_I64(runs.last_batches, 120);
        CHECK_EQ_I64(runs.reports, 3);
        const double ln_v = log((double)VOCAB);
        for (int i = 0; i < 3 && i < runs.reports; i++) {
            const ug_trainer_epoch *e = &runs.report[i];
            th_context("report %d", i);
            CHECK_EQ_I64(e->epoch, i);
            CHECK_EQ_I64(e->updates, 40 * (i + 1));
            CHECK_EQ_I64(e->train.samples, 40 * 8); /* the windows since the last report */
            CHECK_EQ_I64(e->validation.samples, 4 * 8);
            CHECK(fabs(e->validation.perplexity - exp(e->validation.loss)) <= 1e-12 * e->validation.perplexity);
            CHECK(fabs(e->validation.bits_per_token - e->validation.loss / log(2.0)) <= 1e-12);
            CHECK(e->train.accuracy >= 0.0 && e->train.accuracy <= 1.0);
        }
        th_context("the end");
        const ug_trainer_epoch *first = &runs.report[0], *last = &runs.report[2];
        CHECK_MSG(first->train.loss < ln_v + 0.5, "the first span's loss %.3f is far above ln %d", first->train.loss,
                  VOCAB);
        CHECK_MSG(last->validation.loss < 0.1 * ln_v, "the validation loss %.4f did not fall well below ln %d = %.3f",
                  last->validation.loss, VOCAB, ln_v);
        CHECK_MSG(last->validation.accuracy > 0.99, "validation accuracy %.3f", last->validation.accuracy);
        CHECK(last->validation.perplexity < 1.3);
        /* The same fixed batches as the last report's, and the same model. */
        ug_tokens *again = pattern(TRAIN_TOKENS, VAL_TOKENS);
        ug_trainer_metrics m;
        if (again && OK(ug_trainer_evaluate_tokens(t, again, &m)))
            CHECK_MSG(m.loss == last->validation.loss && m.samples == 32,
                      "evaluating the validation tokens gives %.9g, the report %.9g", m.loss, last->validation.loss);
        /* A token run evaluates token sets only. */
        int32_t labels[2] = {0, 1};
        float x[2] = {0, 0};
        ug_dataset *data = NULL;
        if (OK(ug_dataset_from_arrays(2, 1, x, labels, &data)))
            CHECK_STATUS(ug_trainer_evaluate(t, data, &m), UG_ERR_STATE);
        ug_dataset_free(data);
        ug_tokens_free(again);
    }
    ug_trainer_free(t);
}

/* build_next_token without dropout, cut after the embedding. */
static ug_status build_staged_tokens(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    ug_value *h = NULL;
    ug_status st = ug_nn_embedding(g, "wte", x, VOCAB, 16, 0.5f, &h);
    if (st == UG_OK) st = ug_pipeline_boundary(g, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "head", h, VOCAB, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* A token run on two pipeline stages (cpu and this device, or opencl:0 on
 * cpu), each batch of 8 windows in 4 micro-batches: its reports (stage
 * 1's figures, through stage 0's callback), the embedding (stage 0's)
 * and an evaluation of the validation tokens from stage 0 after fit are
 * one device's on whole batches within float rounding. */
TS_TEST(token_run_stages)
{
    const char *other = ts_second_stage(dev);
    if (!other)
        return;
    ug_tokens *train = pattern(0, TRAIN_TOKENS), *val = pattern(TRAIN_TOKENS, VAL_TOKENS);
    REQUIRE(train && val);
    static run_log runs[2];
    memset(runs, 0, sizeof runs);
    char stages[80];
    snprintf(stages, sizeof stages, "cpu,%s", other);
    float *wte[2] = {NULL};
    int64_t n[2] = {0};
    ug_trainer_metrics m[2];
    for (int k = 0; k < 2; k++) {
        ug_trainer_config c = token_config(&runs[k]);
        c.stages = k ? stages : NULL;
        c.micro_batches = k ? 4 : 0;
        ug_trainer *t = NULL;
        if (OK(ug_trainer_create_tokens(k ? NULL : dev, train, val, build_staged_tokens, NULL, &c, &t)) &&
            OK(ug_trainer_fit(t)) && OK(ug_trainer_evaluate_tokens(t, val, &m[k])))
            wte[k] = ts_model_params(ug_trainer_model(t), &n[k]);
        ug_trainer_free(t);
    }
    REQUIRE(wte[0] && wte[1] && n[1] == VOCAB * 16 && n[0] > n[1]);
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n[1]; i++) {
        scale = fmax(scale, fabs(wte[0][i]));
        worst = fmax(worst, fabs((double)wte[0][i] - wte[1][i]));
    }
    CHECK_MSG(worst <= 1e-4 * scale, "stage 0's wte is %g from one device's (largest %g)", worst, scale);
    CHECK_EQ_I64(runs[1].reports, runs[0].reports);
    for (int i = 0; i < runs[0].reports && i < MAX_REPORTS; i++) {
        const ug_trainer_epoch *a = &runs[0].report[i], *b = &runs[1].report[i];
        /* late losses are near 0, where -log p is float rounding's: 1e-6 besides */
        CHECK_MSG(fabs(a->train.loss - b->train.loss) <= 1e-4 * a->train.loss + 1e-6 &&
                      fabs(a->validation.loss - b->validation.loss) <= 1e-4 * a->validation.loss + 1e-6,
                  "report %d: stages %.7g and %.7g, one device %.7g and %.7g", i, b->train.loss, b->validation.loss,
                  a->train.loss, a->validation.loss);
    }
    CHECK_MSG(m[1].samples == m[0].samples && fabs(m[1].loss - m[0].loss) <= 1e-4 * m[0].loss + 1e-6,
              "evaluated from stage 0: %lld windows, loss %.7g; one device %lld, %.7g", (long long)m[1].samples,
              m[1].loss, (long long)m[0].samples, m[0].loss);
    ug_tokens_free(train);
    ug_tokens_free(val);
}

/* Parameters of a finished run (tracked). */
static float *run_params(ug_device *dev, const ug_trainer_config *c, model_spec *spec, int64_t *count, bool *stopped)
{
    ug_tokens *train = pattern(0, TRAIN_TOKENS), *val = pattern(TRAIN_TOKENS, VAL_TOKENS);
    ug_trainer *t = NULL;
    float *params = NULL;
    if (train && val && OK(ug_trainer_create_tokens(dev, train, val, build_next_token, spec, c, &t)) &&
        OK(ug_trainer_fit(t)))
        params = ts_model_params(ug_trainer_model(t), count);
    if (stopped)
        *stopped = t && ug_trainer_stopped(t);
    ug_trainer_free(t);
    ug_tokens_free(train);
    ug_tokens_free(val);
    return params;
}

/* Stopped after stop_batch micro-batches and resumed, the run ends with
 * the parameters and reports of the uninterrupted one, bit for bit. */
static void check_resume(ug_device *dev, int64_t stop_batch)
{
    th_context("stopped after micro-batch %lld", (long long)stop_batch);
    char dir[] = "/tmp/ug-test-token-trainer-XXXXXX", path[128];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    model_spec spec = {.dropout = 0.1f};
    static run_log whole, stopped, resumed;
    memset(&whole, 0, sizeof whole);
    ug_trainer_config c = token_config(&whole);
    c.max_steps = 12;
    c.eval_every = 4;
    c.accumulate = 2;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = 2;
    int64_t n_whole = 0, n_resumed = 0;
    float *a = run_params(dev, &c, &spec, &n_whole, NULL);

    memset(&stopped, 0, sizeof stopped);
    stopped.stop_after_batch = stop_batch;
    c = token_config(&stopped);
    c.max_steps = 12;
    c.eval_every = 4;
    c.accumulate = 2;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = 2;
    c.checkpoint = path;
    bool was_stopped = false;
    run_params(dev, &c, &spec, &n_resumed, &was_stopped);
    CHECK_MSG(was_stopped, "the run did not stop on the flag");

    memset(&resumed, 0, sizeof resumed);
    c.user = &resumed;
    c.stop = &resumed.stop;
    c.resume = path;
    float *b = run_params(dev, &c, &spec, &n_resumed, NULL);
    if (a && b) {
        CHECK_EQ_I64(n_resumed, n_whole);
        CHECK_MSG(n_resumed == n_whole && !memcmp(a, b, (size_t)n_whole * sizeof *a),
                  "the resumed run's parameters differ from the uninterrupted run's");
    }
    CHECK_EQ_I64(whole.reports, 3);
    CHECK_EQ_I64(stopped.reports + resumed.reports, 3);
    CHECK_EQ_I64(resumed.steps + stopped.steps, 24);
    /* Every report, the one whose span the stop cut included. */
    for (int i = 0; i < 3 && whole.reports == 3 && stopped.reports + resumed.reports == 3; i++) {
        const ug_trainer_epoch *w = &whole.report[i];
        const ug_trainer_epoch *r = i < stopped.reports ? &stopped.report[i] : &resumed.report[i - stopped.reports];
        CHECK_EQ_I64(r->epoch, i);
        CHECK_MSG(r->train.loss == w->train.loss && r->train.samples == w->train.samples,
                  "report %d: the span's training loss is %.9g over %lld windows, uninterrupted %.9g over %lld", i,
                  r->train.loss, (long long)r->train.samples, w->train.loss, (long long)w->train.samples);
        CHECK_MSG(r->validation.loss == w->validation.loss, "report %d: the validation loss is %.9g, uninterrupted %.9g",
                  i, r->validation.loss, w->validation.loss);
    }
    /* A resume that would draw other windows is refused, naming why. */
    c.block_size = 8;
    ug_tokens *train = pattern(0, TRAIN_TOKENS);
    ug_trainer *t = NULL;
    if (train && CHECK_STATUS(ug_trainer_create_tokens(dev, train, NULL, build_next_token, &spec, &c, &t),
                              UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("block_size 16", "has 8");
    CHECK(t == NULL);
    ug_tokens_free(train);
    unlink(path);
    rmdir(dir);
}

TS_TEST(token_run_resumes_between_reports) { check_resume(dev, 10); } /* after update 5 */
TS_TEST(token_run_resumes_after_a_report) { check_resume(dev, 16); }  /* after update 8, reported */

/* ---- two replicas, each drawing its rows of every global batch ---- */

typedef struct token_rank {
    ug_device *device;
    ug_comm *comm;
    const char *checkpoint, *resume;
    int64_t stop_at;          /* this rank asks to stop after that micro-batch (0: never) */
    ug_status status;
    char message[384];
    float params[512];
    int64_t param_count;
    double val_loss;
    run_log runs;
} token_rank;

static void *fit_token_rank(void *arg)
{
    token_rank *r = arg;
    ug_trainer_config c = token_config(&r->runs);
    c.max_steps = 10;
    c.eval_every = 5;
    c.batch_size = 7; /* 3 rows and 4 */
    c.comm = r->comm;
    c.checkpoint = r->checkpoint;
    c.resume = r->resume;
    r->runs.stop_after_batch = r->stop_at;
    ug_tokens *train = NULL, *val = NULL;
    int32_t ids[TRAIN_TOKENS + VAL_TOKENS];
    for (int i = 0; i < TRAIN_TOKENS + VAL_TOKENS; i++)
        ids[i] = (int32_t)((5 * i + 3) % VOCAB);
    ug_trainer *t = NULL;
    ug_status st = ug_tokens_from_ids(ids, TRAIN_TOKENS, VOCAB, &train);
    if (st == UG_OK) st = ug_tokens_from_ids(ids + TRAIN_TOKENS, VAL_TOKENS, VOCAB, &val);
    if (st == UG_OK) st = ug_trainer_create_tokens(r->device, train, val, build_next_token, NULL, &c, &t);
    if (st == UG_OK) st = ug_trainer_fit(t);
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", st == UG_OK ? "" : ug_last_error());
    ug_model *model = t ? ug_trainer_model(t) : NULL;
    for (int i = 0; st == UG_OK && model && i < ug_model_param_count(model); i++) {
        const char *name = NULL;
        ug_tensor *p = NULL;
        ug_model_param_at(model, i, &name, &p);
        const int64_t n = ug_tensor_numel(p);
        if (r->param_count + n <= 512 &&
            ug_model_read_param(model, name, r->params + r->param_count, (size_t)n * sizeof(float)) == UG_OK)
            r->param_count += n;
    }
    r->val_loss = r->runs.reports ? r->runs.report[r->runs.reports - 1].validation.loss : NAN;
    ug_trainer_free(t);
    ug_tokens_free(train);
    ug_tokens_free(val);
    ug_comm_free(r->comm);
    return NULL;
}

/* Two ranks on dev trained as setup says, into pair. */
static void fit_pair(ug_device *dev, const token_rank *setup, token_rank pair[2])
{
    ug_comm *comms[2] = {NULL, NULL};
    if (ug_comm_local_create(2, (ug_device *[]){dev, dev}, comms) != UG_OK) {
        th_fail(TH_LOC, "ug_comm_local_create: %s", ug_last_error());
        return;
    }
    pthread_t threads[2];
    for (int r = 0; r < 2; r++) {
        pair[r] = *setup;
        pair[r].device = dev;
        pair[r].comm = comms[r];
        pair[r].stop_at = r == 1 ? setup->stop_at : 0; /* rank 1 alone is asked */
        pthread_create(&threads[r], NULL, fit_token_rank, &pair[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(threads[r], NULL);
}

TS_TEST(token_run_data_parallel)
{
    static token_rank one, pair[2];
    memset(&one, 0, sizeof one);
    memset(pair, 0, sizeof pair);
    one.device = dev;
    fit_token_rank(&one);
    if (one.status != UG_OK) {
        th_fail(TH_LOC, "one device: %s", one.message);
        return;
    }
    fit_pair(dev, &(token_rank){0}, pair);
    for (int r = 0; r < 2; r++) {
        th_context("rank %d", r);
        if (pair[r].status != UG_OK) {
            th_fail(TH_LOC, "%s", pair[r].message);
            continue;
        }
        CHECK_EQ_I64(pair[r].param_count, one.param_count);
        CHECK_EQ_I64(pair[r].runs.reports, 2);
        /* The windows split over the ranks, summed over them: the report
         * counts the global batches' windows. */
        CHECK_EQ_I64(pair[r].runs.report[0].train.samples, 5 * 7);
        double worst = 0.0, largest = 0.0;
        for (int64_t i = 0; i < one.param_count && i < pair[r].param_count; i++) {
            worst = fmax(worst, fabs((double)pair[r].params[i] - one.params[i]));
            largest = fmax(largest, fabs((double)one.params[i]));
        }
        CHECK_MSG(worst <= 1e-4 * largest, "the replicas' parameters are %.3g from one device's (largest %.3g)",
                  worst, largest);
        CHECK(fabs(pair[r].val_loss - one.val_loss) <= 1e-4 * (1.0 + one.val_loss));
    }
    CHECK_MSG(pair[0].param_count == pair[1].param_count &&
                  !memcmp(pair[0].params, pair[1].params, (size_t)pair[0].param_count * sizeof(float)),
              "the two replicas' parameters differ");

    /* Stopped after update 3 of the first span of 5 and resumed: the same
     * parameters, and the reports' windows (each rank's rows of the updates
     * before the stop counted again). The loss of the span the stop cut
     * is not compared: a checkpoint holds rank 0's running sums, which
     * every rank restores (as a data set's epoch cut by a resume does). */
    char dir[] = "/tmp/ug-test-token-trainer-XXXXXX", path[128];
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/run.safetensors", dir);
    static token_rank stopped[2], resumed[2];
    fit_pair(dev, &(token_rank){.checkpoint = path, .stop_at = 3}, stopped);
    fit_pair(dev, &(token_rank){.checkpoint = path, .resume = path}, resumed);
    for (int r = 0; r < 2; r++) {
        th_context("rank %d, resumed", r);
        CHECK_MSG(stopped[r].status == UG_OK && resumed[r].status == UG_OK, "%s%s", stopped[r].message,
                  resumed[r].message);
        CHECK_EQ_I64(stopped[r].runs.reports, 0);
        CHECK_EQ_I64(resumed[r].runs.reports, 2);
        CHECK_MSG(resumed[r].param_count == pair[r].param_count &&
                      !memcmp(resumed[r].params, pair[r].params, (size_t)pair[r].param_count * sizeof(float)),
                  "the resumed replicas' parameters differ from the uninterrupted ones'");
        for (int i = 0; i < 2 && resumed[r].runs.reports == 2; i++) {
            const ug_trainer_epoch *a = &pair[r].runs.report[i], *b = &resumed[r].runs.report[i];
            CHECK_MSG(a->train.samples == b->train.samples && (i == 0 || a->train.loss == b->train.loss),
                      "report %d: %lld windows, loss %.9g; uninterrupted %lld, %.9g", i, (long long)b->train.samples,
                      b->train.loss, (long long)a->train.samples, a->train.loss);
        }
    }
    unlink(path);
    rmdir(dir);
}

/* ---- refusals ---- */

static void zero_batch(ug_trainer_config *c) { c->batch_size = 0; }
static void zero_block(ug_trainer_config *c) { c->block_size = 0; }
static void zero_steps(ug_trainer_config *c) { c->max_steps = 0; }
static void zero_eval_iters(ug_trainer_config *c) { c->eval_iters = 0; }
static void val_split(ug_trainer_config *c) { c->val_split = 0.1; }
static void top_k(ug_trainer_config *c) { c->top_k = 3; }
static void epoch_steps(ug_trainer_config *c) { c->optimizer.schedule = UG_SCHEDULE_STEP, c->optimizer.step_size = 0; }
static void long_block(ug_trainer_config *c) { c->block_size = VAL_TOKENS; }
static void augment(ug_trainer_config *c) { c->augment.flip = 0.5f; }

TS_TEST(token_run_refusals)
{
    static const struct {
        void (*configure)(ug_trainer_config *c);
        const char *named;
    } cases[] = {{zero_batch, "batch_size is 0"},     {zero_block, "block_size is 0"},
                 {zero_steps, "max_steps is 0"},      {zero_eval_iters, "eval_iters is 0"},
                 {val_split, "ug_tokens_split"},      {top_k, "top_k and confusion"},
                 {epoch_steps, "step_size is 0"},     {long_block, "the validation tokens (200)"},
                 {augment, "augment"}};
    ug_tokens *train = pattern(0, TRAIN_TOKENS), *val = pattern(TRAIN_TOKENS, VAL_TOKENS);
    REQUIRE(train && val);
    static run_log runs;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_context("case %zu", i);
        ug_trainer_config c = token_config(&runs);
        cases[i].configure(&c);
        ug_trainer *t = NULL;
        if (CHECK_STATUS(ug_trainer_create_tokens(dev, train, val, build_next_token, NULL, &c, &t),
                         UG_ERR_INVALID_ARGUMENT))
            CHECK_ERROR_HAS(cases[i].named);
        CHECK(t == NULL);
    }
    th_context("other");
    ug_trainer_config c = token_config(&runs);
    ug_trainer *t = NULL;
    CHECK_STATUS(ug_trainer_create_tokens(dev, NULL, val, build_next_token, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT);
    /* A validation set of more ids than the model's vocabulary. */
    int32_t wide[40];
    for (int i = 0; i < 40; i++)
        wide[i] = i % 20;
    ug_tokens *other = NULL;
    if (OK(ug_tokens_from_ids(wide, 40, 0, &other)) &&
        CHECK_STATUS(ug_trainer_create_tokens(dev, train, other, build_next_token, NULL, &c, &t),
                     UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("vocabulary");
    ug_tokens_free(other);
    /* A data set's run has epochs, not max_steps. */
    int32_t labels[2] = {0, 1};
    float x[2] = {0, 0};
    ug_dataset *data = NULL;
    if (OK(ug_dataset_from_arrays(2, 1, x, labels, &data)) &&
        CHECK_STATUS(ug_trainer_create(dev, data, NULL, build_next_token, NULL, &c, &t), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("max_steps", "ug_trainer_create_tokens");
    ug_dataset_free(data);
    CHECK(t == NULL);
    ug_tokens_free(train);
    ug_tokens_free(val);
}

/* A step made for windows (ug_train_step_create with block_size) is the
 * token trainer's step: on a constant sequence every window is the same,
 * so the trainer's one update and one step on that window leave the same
 * parameters, bit for bit. */
TS_TEST(token_step_is_the_trainers_step)
{
    enum { COUNT = 64 };
    int32_t ids[COUNT];
    for (int i = 0; i < COUNT; i++)
        ids[i] = 7;
    ug_tokens *train = NULL;
    REQUIRE(OK(ug_tokens_from_ids(ids, COUNT, VOCAB, &train)));
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = 4;
    c.block_size = 16;
    c.max_steps = 1;
    c.seed = 5;
    c.optimizer.lr = 0.05f;
    ug_trainer *t = NULL;
    int64_t n_trainer = 0, n_step = 0;
    float *by_trainer = NULL, *by_step = NULL;
    if (OK(ug_trainer_create_tokens(dev, train, NULL, build_next_token, NULL, &c, &t)) && OK(ug_trainer_fit(t)))
        by_trainer = ts_model_params(ug_trainer_model(t), &n_trainer);
    ug_trainer_free(t);
    ug_tokens_free(train);
    ug_train_step *s = NULL;
    c.max_steps = 0;
    const int64_t shape[2] = {4, 16};
    ug_tensor *x = NULL;
    if (OK(ug_train_step_create(dev, 16, 0, build_next_token, NULL, &c, &s)) &&
        OK(ug_tensor_from_host(dev, UG_I32, 2, shape, ids, &x)) && OK(ug_train_step_run(s, x, x, false)))
        by_step = ts_model_params(ug_train_step_model(s), &n_step);
    ug_tensor_free(x);
    ug_train_step_free(s);
    REQUIRE(by_trainer && by_step && n_trainer == n_step);
    int differ = 0;
    for (int64_t i = 0; i < n_step; i++)
        differ += memcmp(&by_trainer[i], &by_step[i], sizeof(float)) != 0;
    CHECK_MSG(differ == 0, "%d of %lld parameters differ from the trainer's", differ, (long long)n_step);
    /* A window's length is block_size, and it has no target width. */
    s = NULL;
    if (CHECK_STATUS(ug_train_step_create(dev, 8, 0, build_next_token, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("features must be block_size");
    CHECK_STATUS(ug_train_step_create(dev, 16, 3, build_next_token, NULL, &c, &s), UG_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(token_run_learns_a_pattern),
        TH_DEVICE_TEST(token_run_resumes_between_reports),
        TH_DEVICE_TEST(token_run_resumes_after_a_report),
        TH_DEVICE_TEST(token_run_data_parallel),
        TH_DEVICE_TEST(token_run_stages),
        TH_DEVICE_TEST(token_run_refusals),
        TH_DEVICE_TEST(token_step_is_the_trainers_step),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
