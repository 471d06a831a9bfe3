/* libFuzzer harness for the optimizer's configuration and restored state
 * (structure-aware: the bytes decode into a ug_optimizer_config with its
 * parameter groups, a step count and loss-scaler state). Whatever the
 * values, every call returns a status with a message, never crashes, leaks
 * or overflows (ASan/UBSan); an accepted configuration's learning rate is
 * finite and >= 0 at any step count it accepts, times any group's rate
 * scale too: the schedule can never produce garbage; and every parameter
 * of an accepted configuration is in at most one group, one whose rule
 * chooses it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "unigrad/unigrad.h"

static ug_device *device;
static ug_model *model;

/* A vector, a matrix and a bias, as groups choose them. */
static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} params[] = {{"w", 1, {4}}, {"fc.weight", 2, {3, 4}}, {"fc.bias", 1, {3}}};
enum { PARAMS = sizeof params / sizeof params[0] };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (ug_device_open("cpu", &device) != UG_OK || ug_memory_set_limit(device, FUZZ_POOL_LIMIT) != UG_OK ||
        ug_model_create(device, 1, &model) != UG_OK)
        abort();
    for (int i = 0; i < PARAMS; i++) {
        ug_tensor *p = NULL;
        if (ug_model_param(model, params[i].name, params[i].ndim, params[i].shape, UG_INIT_UNIFORM, 1.0f, &p) !=
            UG_OK)
            abort();
    }
    return 0;
}

static bool is_matrix(const char *name, int ndim, const int64_t *shape, void *user)
{
    (void)name, (void)shape, (void)user;
    return ndim >= 2;
}

static bool never(const char *name, int ndim, const int64_t *shape, void *user)
{
    (void)name, (void)ndim, (void)shape, (void)user;
    return false;
}

/* A field of size bytes: text from the table, or raw bytes that may leave
 * it unterminated. */
static void fuzz_text(fuzz_input *in, char *field, size_t size, const char *const *table, size_t count)
{
    const uint8_t pick = fuzz_byte(in);
    if (pick < 200) {
        snprintf(field, size, "%s", table[pick % count]);
        return;
    }
    for (size_t i = 0; i < size; i++)
        field[i] = (char)(fuzz_byte(in) % 96 + 32);
    if (pick & 1)
        field[size - 1] = '\0';
}

/* Parameter groups from the bytes: any count (the edges too), names,
 * selections, patterns, predicates and settings. */
static void fuzz_groups(fuzz_input *in, ug_optimizer_config *c)
{
    static const char *const names[] = {"", "decay", "no_decay", "decay", "g"};
    static const char *const patterns[] = {"", "*", "w", "fc.*", "*.bias", "?", "nothing", "w w",
                                           "** fc.weigh?", " \t ", "fc.bias *.weight", "*w*"};
    static const ug_param_predicate predicates[] = {NULL, is_matrix, never};
    const bool many = fuzz_byte(in) & 1;
    c->group_count = many ? (int)fuzz_int(in, UG_OPTIMIZER_MAX_GROUPS + 2) : (int)(fuzz_byte(in) % 4);
    const int filled = c->group_count < 0 ? 0 : c->group_count > UG_OPTIMIZER_MAX_GROUPS
                                                    ? UG_OPTIMIZER_MAX_GROUPS : c->group_count;
    for (int k = 0; k < filled; k++) {
        ug_param_group *g = &c->groups[k];
        fuzz_text(in, g->name, sizeof g->name, names, sizeof names / sizeof *names);
        g->select = (ug_param_select)(fuzz_byte(in) % 5);
        fuzz_text(in, g->pattern, sizeof g->pattern, patterns, sizeof patterns / sizeof *patterns);
        g->predicate = predicates[fuzz_byte(in) % 3];
        g->weight_decay = fuzz_float(in);
        g->lr_scale = fuzz_float(in);
    }
}

/* Each parameter in at most one group, whose rule chooses it. */
static void check_groups(const ug_optimizer *opt, const ug_optimizer_config *c)
{
    for (int i = 0; i < PARAMS; i++) {
        int k = -2;
        if (ug_optimizer_param_group(opt, i, &k) != UG_OK || k < -1 || k >= c->group_count)
            abort();
        if (k < 0)
            continue;
        const ug_param_group *g = &c->groups[k];
        const bool matrix = params[i].ndim >= 2;
        if ((g->select == UG_SELECT_MATRICES && !matrix) || (g->select == UG_SELECT_VECTORS && matrix) ||
            (g->select == UG_SELECT_PREDICATE && g->predicate == never))
            abort();
        const float rate = ug_optimizer_current_lr(opt) * g->lr_scale;
        if (!isfinite(rate) || rate < 0.0f) {
            fprintf(stderr, "group %d's rate %g\n", k, (double)rate);
            abort();
        }
    }
}

static void check_message(ug_status st)
{
    if (st != UG_OK && !ug_last_error()[0])
        abort(); /* every refusal says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size, 0};
    ug_optimizer_config c = ug_optimizer_defaults((ug_optim_type)(fuzz_byte(&in) % 4));
    c.type = (ug_optim_type)(fuzz_byte(&in) % 4);
    float *floats[] = {&c.lr, &c.weight_decay, &c.momentum, &c.dampening, &c.beta1, &c.beta2, &c.eps,
                       &c.gamma, &c.min_lr, &c.max_grad_norm, &c.loss_scaling.init_scale,
                       &c.loss_scaling.growth_factor, &c.loss_scaling.backoff_factor};
    uint8_t which = fuzz_byte(&in); /* which floats take fuzzed values, the rest their defaults */
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++)
        if (which & (1u << (i % 8)))
            *floats[i] = fuzz_float(&in);
    c.nesterov = fuzz_byte(&in) & 1;
    c.schedule = (ug_schedule)(fuzz_byte(&in) % 4);
    c.step_size = fuzz_int(&in, 100);
    c.warmup_steps = fuzz_int(&in, 100);
    c.total_steps = fuzz_int(&in, 1000);
    c.loss_scaling.enabled = fuzz_byte(&in) & 1;
    c.loss_scaling.growth_interval = fuzz_int(&in, 5000);
    fuzz_groups(&in, &c);

    /* The helpers on the same configuration: a status with a message, and
     * on success one group more (or two) that the optimizer still checks. */
    ug_optimizer_config more;
    memcpy(&more, &c, sizeof c);
    const int before = more.group_count;
    ug_status added = fuzz_byte(&in) & 1 ? ug_optimizer_decay_matrices_only(&more)
                                         : ug_optimizer_add_group(&more, &c.groups[0]);
    check_message(added);
    if (added == UG_OK && more.group_count <= before)
        abort();
    if (added != UG_OK && memcmp(&more, &c, sizeof c))
        abort(); /* a refused group leaves the configuration as it was */

    ug_optimizer *opt = NULL;
    ug_status st = ug_optimizer_create(model, &c, &opt);
    check_message(st);
    if (st != UG_OK)
        return 0;
    check_groups(opt, &c);
    for (int k = 0; k < 4; k++) {
        int64_t steps = fuzz_int(&in, 100000);
        st = ug_optimizer_set_steps(opt, steps);
        check_message(st);
        float lr = ug_optimizer_current_lr(opt);
        if (!isfinite(lr) || lr < 0.0f) {
            fprintf(stderr, "learning rate %g at step %lld\n", (double)lr, (long long)ug_optimizer_steps(opt));
            abort();
        }
        check_groups(opt, &c);
        ug_loss_scaler_state s = {.scale = fuzz_float(&in), .clean_steps = fuzz_int(&in, 3000),
                                  .skipped_steps = fuzz_int(&in, 100)};
        check_message(ug_optimizer_set_loss_scaler(opt, &s));
        ug_loss_scaler_state back;
        if (c.loss_scaling.enabled && ug_optimizer_loss_scaler(opt, &back) == UG_OK &&
            (!(back.scale >= 1.17549435e-38f) || !isfinite(back.scale)))
            abort(); /* the scale stays a normal f32 */
    }
    ug_optimizer_free(opt);
    return 0;
}
