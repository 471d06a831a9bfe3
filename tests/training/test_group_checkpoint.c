#define _DEFAULT_SOURCE /* mkdtemp */
/* Parameter groups (optim.h) through checkpoints (checkpoint.h) and
 * optimizer copies, on every device: a run saved part way and resumed
 * into a new model, optimizer and graph ends bitwise where the
 * uninterrupted run ends; a file whose groups are not the optimizer's
 * (their number, a name, a weight decay, a rate scale, a parameter's
 * group) is refused with the difference named, changing nothing; a file
 * saved without groups loads into an optimizer with groups; a copy keeps
 * each parameter's group without asking the predicate again.
 *
 * The model: parameters shaped as a GPT's (matrices and vectors) in
 *     loss = sum_k [ sum(p_k * c_k) + 0.5 * sum(p_k * p_k) ]
 * (test_param_groups.c checks the numbers against a reference; here only
 * equality between runs matters), with AdamW decaying the matrices only,
 * the vectors at half rate, warm-up and cosine decay and clipping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "train_support.h"
#include "unigrad/checkpoint.h"

typedef struct param_spec {
    const char *name;
    int ndim;
    int64_t shape[2];
} param_spec;

static const param_spec SPECS[] = {
    {"wte.weight", 2, {10, 15}}, {"h.fc.weight", 2, {12, 15}}, {"h.fc.bias", 1, {70}},
    {"ln_f.weight", 1, {150}},   {"h.proj.weight", 2, {9, 8}},
};
enum { PARAMS = sizeof SPECS / sizeof SPECS[0], STEPS = 6, SAVED_AT = 3 };

typedef struct run {
    ug_model *model;
    ug_graph *graph;
    ug_optimizer *opt;
    ug_checkpoint *ck;
} run;

static int64_t numel(const param_spec *s) { return s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1]; }

/* A model (the same initial values and inputs every time), its graph and
 * an optimizer of c, listed in a checkpoint. False (failure recorded) on
 * error. */
static bool make_run(ug_device *dev, const ug_optimizer_config *c, run *r)
{
    memset(r, 0, sizeof *r);
    th_seed(0xc4ec);
    r->model = ts_model(dev, 9);
    r->graph = r->model ? ts_graph(r->model) : NULL;
    if (!r->graph)
        return false;
    ug_graph *g = r->graph;
    ug_value *total = NULL, *cval[PARAMS] = {0};
    ug_tensor *cin[PARAMS] = {0};
    ug_status st = UG_OK;
    for (int k = 0; k < PARAMS && st == UG_OK; k++) {
        const int64_t n = numel(&SPECS[k]);
        float *pf = th_alloc((size_t)n * sizeof *pf), *cf = th_alloc((size_t)n * sizeof *cf);
        for (int64_t i = 0; i < n; i++) {
            pf[i] = (float)th_uniform(-1.0, 1.0);
            cf[i] = (float)th_uniform(-1.0, 1.0);
        }
        cin[k] = ts_tensor_f32(dev, SPECS[k].ndim, SPECS[k].shape, cf);
        if (!cin[k])
            return false;
        char input[16];
        snprintf(input, sizeof input, "c%d", k);
        ug_tensor *t = NULL;
        ug_value *p = NULL, *pc = NULL, *pp = NULL, *s1 = NULL, *s2 = NULL, *term = NULL;
        st = ug_model_param(r->model, SPECS[k].name, SPECS[k].ndim, SPECS[k].shape, UG_INIT_UNIFORM, 1.0f, &t);
        if (st == UG_OK) st = ug_model_write_param(r->model, SPECS[k].name, pf, (size_t)n * sizeof *pf);
        if (st == UG_OK) st = ug_graph_param(g, t, &p);
        if (st == UG_OK) st = ug_graph_input(g, input, UG_F32, SPECS[k].ndim, SPECS[k].shape, &cval[k]);
        if (st == UG_OK) st = ug_g_mul(g, p, cval[k], &pc);
        if (st == UG_OK) st = ug_g_mul(g, p, p, &pp);
        if (st == UG_OK) st = ug_g_sum(g, pc, 0, true, &s1);
        if (st == UG_OK) st = ug_g_sum(g, pp, 0, true, &s2);
        if (st == UG_OK) st = ug_g_scale_shift(g, s2, 0.5f, 0.0f, &s2);
        if (st == UG_OK) st = ug_g_add(g, s1, s2, &term);
        if (st == UG_OK) st = total ? ug_g_add(g, total, term, &total) : (total = term, UG_OK);
    }
    if (st == UG_OK) st = ug_graph_backward(g, total);
    if (st == UG_OK) {
        r->opt = ts_optimizer(r->model, c);
        st = r->opt ? ug_graph_set_optimizer(g, r->opt) : UG_ERR_STATE;
    }
    if (st == UG_OK) st = ug_graph_compile(g);
    for (int k = 0; k < PARAMS && st == UG_OK; k++)
        st = ug_graph_bind(g, cval[k], cin[k]);
    if (st == UG_OK) st = ug_checkpoint_create(&r->ck);
    if (st == UG_OK) st = ug_checkpoint_add_optimizer(r->ck, r->opt);
    if (st == UG_OK) st = ug_checkpoint_add_graph(r->ck, "train", g);
    if (st != UG_OK)
        th_fail(TH_LOC, "making the run: %s", ug_last_error());
    return st == UG_OK;
}

static void free_run(run *r)
{
    ug_checkpoint_free(r->ck);
    r->ck = NULL;
}

static ug_optimizer_config grouped(void)
{
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
    c.lr = 0.05f;
    c.weight_decay = 0.1f;
    c.schedule = UG_SCHEDULE_COSINE;
    c.warmup_steps = 2;
    c.total_steps = 8;
    c.max_grad_norm = 1.0f;
    ug_optimizer_decay_matrices_only(&c);
    c.groups[1].lr_scale = 0.5f;
    return c;
}

/* Every parameter and every state tensor of r, bitwise equal to want's. */
static void check_same(const run *got, const run *want, const char *what)
{
    for (int k = 0; k < PARAMS; k++) {
        const size_t bytes = (size_t)numel(&SPECS[k]) * sizeof(float);
        float *a = th_alloc(bytes), *b = th_alloc(bytes);
        REQUIRE_OK(ug_model_read_param(got->model, SPECS[k].name, a, bytes));
        REQUIRE_OK(ug_model_read_param(want->model, SPECS[k].name, b, bytes));
        CHECK_MSG(!memcmp(a, b, bytes), "%s: %s differs from the uninterrupted run's", what, SPECS[k].name);
        for (int slot = 0; slot < ug_optimizer_state_count(want->opt); slot++) {
            ug_tensor *sa = NULL, *sb = NULL;
            REQUIRE_OK(ug_optimizer_state(got->opt, k, slot, &sa));
            REQUIRE_OK(ug_optimizer_state(want->opt, k, slot, &sb));
            REQUIRE_OK(ug_tensor_download(sa, a, bytes));
            REQUIRE_OK(ug_tensor_download(sb, b, bytes));
            CHECK_MSG(!memcmp(a, b, bytes), "%s: %s's %s differs from the uninterrupted run's", what,
                      SPECS[k].name, ug_optimizer_state_name(want->opt, slot));
        }
    }
    CHECK_EQ_I64(ug_optimizer_steps(got->opt), ug_optimizer_steps(want->opt));
}

static bool steps(run *r, int count)
{
    for (int s = 0; s < count; s++) {
        ug_status st = ug_graph_run(r->graph);
        if (st != UG_OK) {
            th_fail(TH_LOC, "ug_graph_run: %s", ug_last_error());
            return false;
        }
    }
    return true;
}

static bool temp_path(char *dir, char *path, size_t len)
{
    if (!mkdtemp(dir)) {
        th_fail(TH_LOC, "mkdtemp failed");
        return false;
    }
    snprintf(path, len, "%s/run.safetensors", dir);
    return true;
}

static void remove_temp(const char *dir, const char *path)
{
    remove(path);
    rmdir(dir);
}

TS_TEST(resume_is_bitwise)
{
    const ug_optimizer_config c = grouped();
    char dir[] = "/tmp/ug-groups-XXXXXX", path[64];
    REQUIRE(temp_path(dir, path, sizeof path));
    run straight, first, resumed;
    bool ok = make_run(dev, &c, &straight) && steps(&straight, STEPS) && make_run(dev, &c, &first) &&
              steps(&first, SAVED_AT);
    if (ok)
        CHECK_OK(ug_checkpoint_save(first.ck, path));
    if (ok && make_run(dev, &c, &resumed)) {
        CHECK_OK(ug_checkpoint_load(resumed.ck, path));
        CHECK_EQ_I64(ug_optimizer_steps(resumed.opt), SAVED_AT);
        if (steps(&resumed, STEPS - SAVED_AT))
            check_same(&resumed, &straight, "resumed at update 3");
        free_run(&resumed);
    }
    free_run(&first);
    free_run(&straight);
    remove_temp(dir, path);
}

/* Loads path into a run of c: refused with UG_ERR_FORMAT and the message
 * parts, and the run's parameters and steps unchanged. */
static void refused(ug_device *dev, const ug_optimizer_config *c, const char *path, const char *part,
                    const char *part2)
{
    run r;
    if (!make_run(dev, c, &r))
        return;
    const size_t bytes = (size_t)numel(&SPECS[0]) * sizeof(float);
    float *before = th_alloc(bytes), *after = th_alloc(bytes);
    CHECK_OK(ug_model_read_param(r.model, SPECS[0].name, before, bytes));
    if (CHECK_STATUS(ug_checkpoint_load(r.ck, path), UG_ERR_FORMAT))
        CHECK_ERROR_HAS(path, part, part2);
    CHECK_OK(ug_model_read_param(r.model, SPECS[0].name, after, bytes));
    CHECK_MSG(!memcmp(before, after, bytes), "a refused load changed %s", SPECS[0].name);
    CHECK_EQ_I64(ug_optimizer_steps(r.opt), 0);
    free_run(&r);
}

static ug_param_group names_group(const char *name, const char *pattern, float weight_decay)
{
    ug_param_group g = ug_param_group_defaults();
    snprintf(g.name, sizeof g.name, "%s", name);
    snprintf(g.pattern, sizeof g.pattern, "%s", pattern);
    g.weight_decay = weight_decay;
    return g;
}

TS_TEST(other_groups_refused)
{
    const ug_optimizer_config c = grouped();
    char dir[] = "/tmp/ug-groups-XXXXXX", path[64];
    REQUIRE(temp_path(dir, path, sizeof path));
    run saved;
    if (make_run(dev, &c, &saved) && steps(&saved, 2))
        CHECK_OK(ug_checkpoint_save(saved.ck, path));
    free_run(&saved);

    ug_optimizer_config other = c;
    other.groups[0].weight_decay = 0.2f;
    refused(dev, &other, path, "group 'decay' was saved with weight_decay 0.100000001, and this optimizer's has "
            "0.200000003", "create the optimizer with the checkpoint's groups");
    other = c;
    other.groups[1].lr_scale = 1.0f;
    refused(dev, &other, path, "group 'no_decay' was saved with lr_scale 0.5, and this optimizer's has 1", NULL);
    other = c;
    snprintf(other.groups[0].name, sizeof other.groups[0].name, "matrices");
    refused(dev, &other, path, "parameter group 0 was saved as 'decay'; this optimizer's is group 'matrices'", NULL);
    other = c;
    other.group_count = 0;
    refused(dev, &other, path, "saved with 2 parameter groups and this one has 0", NULL);

    /* The same groups by name and settings, choosing other parameters. */
    ug_optimizer_config a = ug_optimizer_defaults(UG_ADAMW), b = a;
    const ug_param_group embeddings = names_group("embeddings", "wte.weight", 0.1f);
    const ug_param_group wider = names_group("embeddings", "wte.weight h.proj.weight", 0.1f);
    CHECK_OK(ug_optimizer_add_group(&a, &embeddings));
    CHECK_OK(ug_optimizer_add_group(&b, &wider));
    if (make_run(dev, &a, &saved) && steps(&saved, 1))
        CHECK_OK(ug_checkpoint_save(saved.ck, path));
    free_run(&saved);
    refused(dev, &b, path, "parameter 'h.proj.weight' was in no group when saved and is in group 'embeddings'",
            NULL);
    remove_temp(dir, path);
}

/* A file saved without groups loads into an optimizer with them (as files
 * saved before groups existed), and a grouped file's model alone loads. */
TS_TEST(files_without_groups_load)
{
    ug_optimizer_config plain = ug_optimizer_defaults(UG_ADAMW);
    const ug_optimizer_config c = grouped();
    char dir[] = "/tmp/ug-groups-XXXXXX", path[64];
    REQUIRE(temp_path(dir, path, sizeof path));
    run saved, loaded;
    if (make_run(dev, &plain, &saved) && steps(&saved, 2))
        CHECK_OK(ug_checkpoint_save(saved.ck, path));
    if (make_run(dev, &c, &loaded)) {
        CHECK_OK(ug_checkpoint_load(loaded.ck, path));
        CHECK_EQ_I64(ug_optimizer_steps(loaded.opt), 2);
        free_run(&loaded);
    }
    free_run(&saved);

    if (make_run(dev, &c, &saved) && steps(&saved, 2))
        CHECK_OK(ug_checkpoint_save(saved.ck, path));
    ug_model *m = ts_model(dev, 3);
    ug_checkpoint *ck = NULL;
    for (int k = 0; m && k < PARAMS; k++) {
        ug_tensor *t = NULL;
        CHECK_OK(ug_model_param(m, SPECS[k].name, SPECS[k].ndim, SPECS[k].shape, UG_INIT_UNIFORM, 1.0f, &t));
    }
    if (m && CHECK_STATUS(ug_checkpoint_create(&ck), UG_OK) && CHECK_STATUS(ug_checkpoint_add_model(ck, m), UG_OK))
        CHECK_OK(ug_checkpoint_load(ck, path));
    ug_checkpoint_free(ck);
    free_run(&saved);
    remove_temp(dir, path);
}

static bool counted_vector(const char *name, int ndim, const int64_t *shape, void *user)
{
    (void)name, (void)shape;
    ++*(int *)user;
    return ndim < 2;
}

/* ug_optimizer_copy keeps each parameter's group (the predicate is not
 * asked again: its user data may be gone). */
TS_TEST(copy_keeps_groups)
{
    int calls = 0;
    ug_optimizer_config c = grouped();
    c.groups[1].select = UG_SELECT_PREDICATE;
    c.groups[1].predicate = counted_vector;
    c.groups[1].user = &calls;
    run original;
    REQUIRE(make_run(dev, &c, &original));
    const int asked = calls;
    CHECK(asked == PARAMS);
    REQUIRE(steps(&original, 2));
    ug_model *model = NULL;
    ug_optimizer *copy = NULL;
    REQUIRE_OK(ug_model_copy(original.model, dev, &model));
    ug_status st = ug_optimizer_copy(original.opt, model, &copy);
    CHECK_OK(st);
    CHECK_MSG(calls == asked, "the copy asked the predicate %d more times", calls - asked);
    for (int k = 0; st == UG_OK && k < PARAMS; k++) {
        int mine = -2, theirs = -2;
        CHECK_OK(ug_optimizer_param_group(original.opt, k, &mine));
        CHECK_OK(ug_optimizer_param_group(copy, k, &theirs));
        CHECK_MSG(mine == theirs && mine == (SPECS[k].ndim < 2 ? 1 : 0), "%s: group %d in the original, %d in "
                  "the copy", SPECS[k].name, mine, theirs);
    }
    if (st == UG_OK)
        CHECK(ug_optimizer_get_config(copy).group_count == 2);
    ug_optimizer_free(copy);
    ug_model_free(model);
    free_run(&original);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(resume_is_bitwise),
        TH_DEVICE_TEST(other_groups_refused),
        TH_DEVICE_TEST(files_without_groups_load),
        TH_DEVICE_TEST(copy_keeps_groups),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
