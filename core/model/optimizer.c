/* Optimizers: configuration, state, learning-rate schedules, clipping and
 * loss scaling, as the optimizer's ops read them (ug_optim_source); the
 * graph appends the update nodes (core/graph/update.c). Parameter groups
 * are checked and chosen in optimizer_groups.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/model/internal.h"
#include "unigrad/ops.h"

struct ug_optimizer {
    int refs;                /* the program's handle plus graphs (atomic) */
    ug_model *model;
    ug_optimizer_config config;
    int slots;               /* state tensors per parameter */
    int params;
    ug_tensor **state;       /* params * slots */
    /* f32 [UG_STEP_STATE_SIZE] (kernels/common/optim_step.h): the device's
     * step counts and loss scaler, which every step reads and advances. */
    ug_tensor *step_state;
    int64_t steps;
    /* [params]: each parameter's group (-1: none) and its settings. */
    int *group_of;
    float *weight_decay, *lr_scale;
    /* [params], when the state is sharded over shard_size ranks (ZeRO stage
     * 1, ug_comm_shard_optimizer): this rank's part of each parameter,
     * elements [shard_begin, shard_begin + shard_count), the only part its
     * state holds and its updates write. NULL: whole parameters. */
    int64_t *shard_begin, *shard_count;
    int shard_rank, shard_size;
    ug_optim_source source;  /* what the update ops read */
};

static ug_step_rule step_rule(const ug_optimizer_config *c);

ug_optimizer_config ug_optimizer_defaults(ug_optim_type type)
{
    ug_optimizer_config c = {0};
    c.type = type;
    c.lr = 1e-3f;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = 1e-8f;
    c.weight_decay = type == UG_ADAMW ? 1e-2f : 0.0f;
    c.gamma = 0.1f;
    c.step_size = 1;
    c.loss_scaling = (ug_loss_scaling){.enabled = false, .init_scale = 65536.0f, .growth_factor = 2.0f,
                                       .backoff_factor = 0.5f, .growth_interval = 2000};
    return c;
}

/* True when x is finite and in [low, high]; NaN fails every comparison. */
static bool within(float x, float low, float high) { return x >= low && x <= high; }

/* Every setting is checked here, where it enters: one that can only make
 * NaN, infinite or negative learning rates or updates is refused. */
static ug_status check_config(const ug_optimizer_config *c)
{
    const char *op = "ug_optimizer_create";
    if (c->type != UG_SGD && c->type != UG_ADAM && c->type != UG_ADAMW)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: type %d is not a ug_optim_type", op, (int)c->type);
    if (!within(c->lr, 0.0f, FLT_MAX))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: learning rate %g must be finite and >= 0", op, (double)c->lr);
    if (!within(c->weight_decay, 0.0f, FLT_MAX))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: weight decay %g must be finite and >= 0", op,
                            (double)c->weight_decay);
    if (c->type == UG_SGD) {
        if (!within(c->momentum, 0.0f, 1.0f) || !within(c->dampening, 0.0f, 1.0f))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: momentum %g and dampening %g must be in [0, 1]", op,
                                (double)c->momentum, (double)c->dampening);
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: Nesterov momentum requires momentum > 0 and dampening 0 (as in PyTorch)", op);
    } else {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: betas (%g, %g) must be in [0, 1)", op,
                                (double)c->beta1, (double)c->beta2);
        if (!within(c->eps, 0.0f, FLT_MAX))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: eps %g must be finite and >= 0", op, (double)c->eps);
    }
    if ((unsigned)c->schedule > UG_SCHEDULE_COSINE)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: schedule %d is not a ug_schedule", op, (int)c->schedule);
    if (c->schedule == UG_SCHEDULE_STEP && (c->step_size <= 0 || !(c->gamma > 0.0f && c->gamma <= 1.0f)))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: the step schedule needs step_size > 0 (got %lld) and gamma in (0, 1] (got %g)", op,
                            (long long)c->step_size, (double)c->gamma);
    if (c->schedule == UG_SCHEDULE_COSINE && (c->total_steps <= c->warmup_steps || c->warmup_steps < 0))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: cosine schedule needs 0 <= warmup_steps < total_steps (got %lld and %lld)", op,
                            (long long)c->warmup_steps, (long long)c->total_steps);
    if (c->schedule == UG_SCHEDULE_COSINE && !within(c->min_lr, 0.0f, c->lr))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: cosine schedule needs min_lr in [0, lr %g] (got %g)", op,
                            (double)c->lr, (double)c->min_lr);
    if (!(c->max_grad_norm >= 0.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: max_grad_norm %g must be >= 0", op, (double)c->max_grad_norm);
    const ug_loss_scaling *ls = &c->loss_scaling;
    /* The scale stays a normal f32: 1 / scale is then finite. */
    if (ls->enabled && (!within(ls->init_scale, FLT_MIN, FLT_MAX) || !(ls->growth_factor > 1.0f) ||
                        !isfinite(ls->growth_factor) || !(ls->backoff_factor > 0.0f && ls->backoff_factor < 1.0f) ||
                        ls->growth_interval < 1 || ls->growth_interval > UG_STEP_MAX_COUNT))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: loss scaling needs an init_scale in [%g, %g] (a normal f32; got %g), a finite "
                            "growth_factor > 1 (got %g), a backoff_factor in (0, 1) (got %g) and a "
                            "growth_interval in [1, 2^24] (got %lld)",
                            op, (double)FLT_MIN, (double)FLT_MAX, (double)ls->init_scale, (double)ls->growth_factor,
                            (double)ls->backoff_factor, (long long)ls->growth_interval);
    return ug_optim_groups_check(c, op);
}

static float device_count(int64_t n) { return (float)(n < UG_STEP_MAX_COUNT ? n : UG_STEP_MAX_COUNT); }

/* The step state as its f32 values on the device: steps made, and the
 * loss scaler's state (scale 1 and no skipped step without scaling). */
static ug_status write_step_state(ug_optimizer *opt, const ug_loss_scaler_state *s, int64_t steps)
{
    const ug_loss_scaler_state none = {.scale = 1.0f};
    if (!s)
        s = &none;
    float values[UG_STEP_STATE_SIZE] = {0};
    values[UG_STEP_SCALE] = s->scale;
    values[UG_STEP_CLEAN] = device_count(s->clean_steps);
    values[UG_STEP_SKIPPED] = device_count(s->skipped_steps);
    values[UG_STEP_TAKEN] = device_count(steps - s->skipped_steps);
    values[UG_STEP_MADE] = device_count(steps);
    return ug_tensor_upload(opt->step_state, values, sizeof values);
}

static const ug_tensor *half_copy_of(const void *model, int index)
{
    return ug_model_half_copy_at(model, index);
}

/* The rule and hyperparameters every update reads, and where its tensors are. */
static void set_source(ug_optimizer *opt)
{
    const ug_optimizer_config *c = &opt->config;
    opt->source = (ug_optim_source){
        .shared = {.kind = c->type == UG_SGD ? UG_OPTIM_SGD : c->type == UG_ADAM ? UG_OPTIM_ADAM : UG_OPTIM_ADAMW,
                   .weight_decay = c->weight_decay, .lr_scale = 1.0f, .momentum = c->momentum,
                   .dampening = c->dampening,
                   .nesterov = c->nesterov, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps},
        .rule = step_rule(c), .step_state = opt->step_state, .state = opt->state, .slots = opt->slots,
        .weight_decay = opt->weight_decay, .lr_scale = opt->lr_scale, .half_copy = half_copy_of,
        .model = opt->model, .shard_begin = opt->shard_begin, .shard_count = opt->shard_count};
}

const ug_optim_source *ug_optimizer_source(const ug_optimizer *opt) { return &opt->source; }

/* Each parameter's group, and the settings its updates carry: the
 * group's, or the configuration's outside any group. group_of NULL: chosen
 * now by the configuration's groups; else copied (an optimizer's copy,
 * which calls no predicate again). */
static ug_status set_groups(ug_optimizer *opt, const int *group_of)
{
    const size_t n = (size_t)opt->params;
    opt->group_of = ug_calloc(n, sizeof *opt->group_of);
    opt->weight_decay = ug_calloc(n, sizeof *opt->weight_decay);
    opt->lr_scale = ug_calloc(n, sizeof *opt->lr_scale);
    if (!opt->group_of || !opt->weight_decay || !opt->lr_scale)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_optimizer_create: out of host memory");
    if (group_of)
        memcpy(opt->group_of, group_of, n * sizeof *group_of);
    else
        UG_TRY(ug_optim_groups_assign(&opt->config, opt->model, opt->params, opt->group_of, "ug_optimizer_create"));
    for (int i = 0; i < opt->params; i++) {
        const int k = opt->group_of[i];
        opt->weight_decay[i] = k >= 0 ? opt->config.groups[k].weight_decay : opt->config.weight_decay;
        opt->lr_scale[i] = k >= 0 ? opt->config.groups[k].lr_scale : 1.0f;
    }
    return UG_OK;
}

static ug_status create(ug_model *model, const ug_optimizer_config *config, const int *group_of,
                        ug_optimizer **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_optimizer_create: out is NULL");
    *out = NULL;
    if (!model || !config)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_optimizer_create: %s is NULL", model ? "config" : "model");
    UG_TRY(check_config(config));
    int params = ug_model_param_count(model);
    if (params == 0)
        return ug_set_error(UG_ERR_STATE,
                            "ug_optimizer_create: the model has no parameters yet; build a graph with its layers first");
    ug_optimizer *opt = ug_calloc(1, sizeof *opt);
    if (!opt)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_optimizer_create: out of host memory");
    ug_model_retain(model);
    opt->refs = 1;
    opt->model = model;
    opt->config = *config;
    opt->params = params;
    opt->slots = config->type == UG_SGD ? (config->momentum > 0.0f ? 1 : 0) : 2;
    ug_status grouped = set_groups(opt, group_of);
    if (grouped != UG_OK) {
        ug_optimizer_free(opt);
        return grouped;
    }
    opt->state = ug_calloc((size_t)(params * opt->slots) + 1, sizeof *opt->state);
    if (!opt->state) {
        ug_optimizer_free(opt);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_optimizer_create: out of host memory");
    }
    const ug_loss_scaler_state initial = {.scale = config->loss_scaling.init_scale};
    ug_status made = ug_tensor_new(ug_model_device(model), UG_F32, 1, (int64_t[]){UG_STEP_STATE_SIZE},
                                   "optimizer step state", &opt->step_state);
    if (made == UG_OK)
        made = write_step_state(opt, config->loss_scaling.enabled ? &initial : NULL, 0);
    if (made != UG_OK) {
        ug_optimizer_free(opt);
        return made;
    }
    set_source(opt);
    for (int i = 0; i < params; i++) {
        ug_tensor *p = NULL;
        ug_model_param_at(model, i, NULL, &p);
        for (int s = 0; s < opt->slots; s++) {
            ug_tensor **slot = &opt->state[i * opt->slots + s];
            ug_status st = ug_tensor_new(ug_model_device(model), UG_F32, p->ndim, p->shape, "optimizer state", slot);
            if (st == UG_OK)
                st = ug_fill(*slot, 0.0f);
            if (st != UG_OK) {
                ug_optimizer_free(opt);
                return st;
            }
        }
    }
    *out = opt;
    return UG_OK;
}

ug_status ug_optimizer_create(ug_model *model, const ug_optimizer_config *config, ug_optimizer **out)
{
    return create(model, config, NULL, out);
}

void ug_optimizer_retain(ug_optimizer *opt) { __atomic_add_fetch(&opt->refs, 1, __ATOMIC_RELAXED); }

void ug_optimizer_free(ug_optimizer *opt)
{
    if (!opt || __atomic_sub_fetch(&opt->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; opt->state && i < opt->params * opt->slots; i++)
        ug_tensor_free(opt->state[i]);
    free(opt->state);
    free(opt->shard_begin);
    free(opt->shard_count);
    free(opt->group_of);
    free(opt->weight_decay);
    free(opt->lr_scale);
    ug_tensor_free(opt->step_state);
    ug_model_free(opt->model);
    free(opt);
}

ug_status ug_optimizer_copy(const ug_optimizer *opt, ug_model *model, ug_optimizer **out)
{
    const char *op = "ug_optimizer_copy";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!opt || !model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, opt ? "model" : "optimizer");
    if (ug_model_param_count(model) != opt->params)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: the model has %d parameters, the optimizer's %d; copy the model with "
                            "ug_model_copy",
                            op, ug_model_param_count(model), opt->params);
    ug_optimizer *copy = NULL;
    UG_TRY(create(model, &opt->config, opt->group_of, &copy));
    ug_status st = opt->shard_begin ? ug_optim_shard(copy, opt->shard_rank, opt->shard_size, NULL, NULL) : UG_OK;
    for (int i = 0; i < opt->params * opt->slots && st == UG_OK; i++)
        st = ug_tensor_copy(copy->state[i], opt->state[i]);
    if (st == UG_OK)
        st = ug_tensor_copy(copy->step_state, opt->step_state);
    if (st != UG_OK) {
        ug_optimizer_free(copy);
        return ug_prefix_error(st, "%s", op);
    }
    copy->steps = opt->steps;
    *out = copy;
    return UG_OK;
}

ug_status ug_optim_whole_copy(const ug_optimizer *opt, ug_optimizer **out)
{
    UG_TRY(create(opt->model, &opt->config, opt->group_of, out));
    ug_status st = ug_tensor_copy((*out)->step_state, opt->step_state);
    if (st != UG_OK) {
        ug_optimizer_free(*out);
        *out = NULL;
        return st;
    }
    (*out)->steps = opt->steps;
    return UG_OK;
}

ug_model *ug_optimizer_model(const ug_optimizer *opt) { return opt->model; }
int64_t ug_optimizer_steps(const ug_optimizer *opt) { return opt ? opt->steps : 0; }
int ug_optimizer_state_count(const ug_optimizer *opt) { return opt ? opt->slots : 0; }

ug_status ug_optimizer_loss_scaler(const ug_optimizer *opt, ug_loss_scaler_state *state)
{
    const char *op = "ug_optimizer_loss_scaler";
    if (!opt || !state)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, opt ? "state" : "optimizer");
    if (!opt->config.loss_scaling.enabled)
        return ug_set_error(UG_ERR_STATE, "%s: the optimizer has no loss scaling (config.loss_scaling.enabled)", op);
    float values[UG_STEP_STATE_SIZE];
    ug_status st = ug_tensor_download(opt->step_state, values, sizeof values);
    if (st != UG_OK)
        return ug_prefix_error(st, "%s", op);
    *state = (ug_loss_scaler_state){.scale = values[UG_STEP_SCALE],
                                    .clean_steps = (int64_t)values[UG_STEP_CLEAN],
                                    .skipped_steps = (int64_t)values[UG_STEP_SKIPPED]};
    return UG_OK;
}

ug_status ug_optim_check_restore(const ug_optimizer *opt, int64_t steps, const ug_loss_scaler_state *state)
{
    if (steps < 0 || steps > UG_OPTIMIZER_MAX_STEPS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "steps %lld must be in [0, 2^53]", (long long)steps);
    if (!state)
        return UG_OK;
    const int64_t exact = UG_STEP_MAX_COUNT; /* the device keeps counts in f32 */
    if (!within(state->scale, FLT_MIN, FLT_MAX) || state->clean_steps < 0 ||
        state->clean_steps >= opt->config.loss_scaling.growth_interval || state->skipped_steps < 0 ||
        state->skipped_steps > steps || state->skipped_steps > exact || steps - state->skipped_steps > exact)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "loss scaler state: scale %g must be a normal f32 (%g to %g), clean_steps %lld in "
                            "[0, growth_interval %lld), skipped_steps %lld in [0, the optimizer's steps %lld], "
                            "and skipped and taken steps at most 2^24 each",
                            (double)state->scale, (double)FLT_MIN, (double)FLT_MAX, (long long)state->clean_steps,
                            (long long)opt->config.loss_scaling.growth_interval, (long long)state->skipped_steps,
                            (long long)steps);
    return UG_OK;
}

ug_status ug_optim_restore(ug_optimizer *opt, int64_t steps, const ug_loss_scaler_state *state)
{
    UG_TRY(ug_optim_check_restore(opt, steps, state));
    ug_loss_scaler_state kept;
    if (opt->config.loss_scaling.enabled && !state) { /* the scaler stays as it is */
        UG_TRY(ug_optimizer_loss_scaler(opt, &kept));
        if (kept.skipped_steps > steps)
            kept.skipped_steps = steps;
        state = &kept;
    }
    UG_TRY(write_step_state(opt, opt->config.loss_scaling.enabled ? state : NULL, steps));
    opt->steps = steps;
    return UG_OK;
}

ug_status ug_optimizer_set_loss_scaler(ug_optimizer *opt, const ug_loss_scaler_state *state)
{
    const char *op = "ug_optimizer_set_loss_scaler";
    if (!opt || !state)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, opt ? "state" : "optimizer");
    if (!opt->config.loss_scaling.enabled)
        return ug_set_error(UG_ERR_STATE, "%s: the optimizer has no loss scaling (config.loss_scaling.enabled)", op);
    ug_status st = ug_optim_restore(opt, opt->steps, state);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

ug_status ug_optimizer_set_steps(ug_optimizer *opt, int64_t steps)
{
    const char *op = "ug_optimizer_set_steps";
    if (!opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", op);
    /* The device's counts follow (a loss scaler's kept). */
    ug_status st = ug_optim_restore(opt, steps, NULL);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

const char *ug_optimizer_state_name(const ug_optimizer *opt, int slot)
{
    if (!opt || slot < 0 || slot >= opt->slots)
        return NULL;
    if (opt->config.type == UG_SGD)
        return "momentum_buffer";
    return slot == 0 ? "exp_avg" : "exp_avg_sq";
}

ug_status ug_optimizer_find_state(const ug_optimizer *opt, const char *param, const char *slot_name,
                                  ug_tensor **tensor)
{
    const char *op = "ug_optimizer_find_state";
    if (!opt || !param || !slot_name || !tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    *tensor = NULL;
    int slot = 0;
    while (slot < opt->slots && strcmp(ug_optimizer_state_name(opt, slot), slot_name) != 0)
        slot++;
    if (slot == opt->slots)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: this optimizer has no state '%s'%s%s%s%s", op,
                            slot_name, opt->slots ? " (it has " : " (it keeps none)",
                            opt->slots ? ug_optimizer_state_name(opt, 0) : "",
                            opt->slots > 1 ? " and " : "", opt->slots > 1 ? ug_optimizer_state_name(opt, 1) : "");
    for (int i = 0; i < opt->params; i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(opt->model, i, &name, &t));
        if (!strcmp(name, param))
            return ug_optimizer_state(opt, i, slot, tensor);
    }
    return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                        "%s: '%s' is not one of the %d parameters the optimizer updates", op, param, opt->params);
}

int ug_optimizer_param_count(const ug_optimizer *opt) { return opt ? opt->params : 0; }

ug_optimizer_config ug_optimizer_get_config(const ug_optimizer *opt)
{
    return opt ? opt->config : ug_optimizer_defaults(UG_ADAM);
}

ug_status ug_optimizer_param_group(const ug_optimizer *opt, int param_index, int *group)
{
    const char *op = "ug_optimizer_param_group";
    if (!opt || !group)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, opt ? "group" : "optimizer");
    if (param_index < 0 || param_index >= opt->params)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: parameter %d out of range (the optimizer updates %d)", op,
                            param_index, opt->params);
    *group = opt->group_of[param_index];
    return UG_OK;
}

ug_status ug_optimizer_state(const ug_optimizer *opt, int param_index, int slot, ug_tensor **tensor)
{
    if (!opt || !tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_optimizer_state: NULL argument");
    if (param_index < 0 || param_index >= opt->params || slot < 0 || slot >= opt->slots)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_optimizer_state: parameter %d slot %d out of range (%d parameters, %d slots)",
                            param_index, slot, opt->params, opt->slots);
    *tensor = opt->state[param_index * opt->slots + slot];
    return UG_OK;
}

void ug_optim_shard_range(int64_t n, int rank, int size, int64_t *begin, int64_t *count)
{
    /* n * rank / size in 128 bits: n may be near INT64_MAX / size */
    *begin = (int64_t)((__int128)n * rank / size);
    *count = (int64_t)((__int128)n * (rank + 1) / size) - *begin;
}

bool ug_optim_sharded(const ug_optimizer *opt, int *rank, int *size)
{
    if (rank)
        *rank = opt->shard_begin ? opt->shard_rank : 0;
    if (size)
        *size = opt->shard_begin ? opt->shard_size : 1;
    return opt->shard_begin != NULL;
}

/* Each state tensor cut to this rank's part: all the new tensors are made
 * and filled, and agree told, before any old one is freed, so a failure
 * here or on another rank changes nothing. */
ug_status ug_optim_shard(ug_optimizer *opt, int rank, int size, ug_status (*agree)(void *ctx, ug_status mine),
                         void *ctx)
{
    const char *op = "ug_comm_shard_optimizer";
    if (opt->shard_begin) {
        ug_status st = opt->shard_rank == rank && opt->shard_size == size
                           ? UG_OK
                           : ug_set_error(UG_ERR_STATE, "%s: the optimizer is sharded already, as rank %d of %d",
                                          op, opt->shard_rank, opt->shard_size);
        return agree ? agree(ctx, st) : st;
    }
    const size_t n = (size_t)opt->params, states = n * (size_t)opt->slots;
    int64_t *begin = ug_calloc(n + 1, sizeof *begin), *count = ug_calloc(n + 1, sizeof *count);
    ug_tensor **parts = ug_calloc(states + 1, sizeof *parts);
    ug_status st = begin && count && parts ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int i = 0; st == UG_OK && i < opt->params; i++) {
        ug_tensor *param = NULL;
        ug_model_param_at(opt->model, i, NULL, &param);
        ug_optim_shard_range(ug_tensor_numel(param), rank, size, &begin[i], &count[i]);
        for (int s = 0; st == UG_OK && s < opt->slots; s++) {
            ug_tensor *whole = opt->state[i * opt->slots + s], *flat = NULL, *slice = NULL;
            st = ug_tensor_new(ug_model_device(opt->model), UG_F32, 1, &count[i], "optimizer state",
                               &parts[i * opt->slots + s]);
            if (st == UG_OK)
                st = ug_tensor_reshape(whole, 1, (int64_t[]){ug_tensor_numel(whole)}, &flat);
            if (st == UG_OK)
                st = ug_tensor_slice(flat, begin[i], count[i], &slice);
            if (st == UG_OK)
                st = ug_tensor_copy(parts[i * opt->slots + s], slice);
            ug_tensor_free(slice);
            ug_tensor_free(flat);
        }
    }
    const ug_status mine = st;
    if (agree)
        st = agree(ctx, st);
    if (st != UG_OK) {
        for (size_t k = 0; parts && k < states; k++)
            ug_tensor_free(parts[k]);
        free(parts);
        free(begin);
        free(count);
        return mine != UG_OK ? ug_prefix_error(st, "%s", op) : st; /* another rank's names the call */
    }
    for (size_t k = 0; k < states; k++) {
        ug_tensor_free(opt->state[k]);
        opt->state[k] = parts[k];
    }
    free(parts);
    opt->shard_begin = begin;
    opt->shard_count = count;
    opt->shard_rank = rank;
    opt->shard_size = size;
    set_source(opt);
    return UG_OK;
}

/* What the device's step decides from (kernels/common/optim_step.h). */
static ug_step_rule step_rule(const ug_optimizer_config *c)
{
    const ug_loss_scaling *ls = &c->loss_scaling;
    ug_step_rule r = {.schedule = c->schedule == UG_SCHEDULE_STEP     ? UG_STEP_DECAY
                                  : c->schedule == UG_SCHEDULE_COSINE ? UG_STEP_COSINE
                                                                      : UG_STEP_CONSTANT,
                      .lr = c->lr, .gamma = c->gamma, .step_size = (float)c->step_size,
                      .warmup = (float)c->warmup_steps, .total = (float)c->total_steps, .min_lr = c->min_lr,
                      .scaling = ls->enabled, .growth = ls->growth_factor, .backoff = ls->backoff_factor,
                      .growth_interval = (float)ls->growth_interval, .max_norm = c->max_grad_norm};
    if (c->type != UG_SGD) /* the gate carries Adam's bias corrections */
        r.beta1 = c->beta1, r.beta2 = c->beta2;
    return r;
}

/* The rate the device's next step takes: the same function on the same
 * f32 count. */
float ug_optimizer_current_lr(const ug_optimizer *opt)
{
    if (!opt)
        return 0.0f;
    const ug_step_rule r = step_rule(&opt->config);
    return ug_schedule_lr(r.schedule, r.lr, r.gamma, r.step_size, r.warmup, r.total, r.min_lr,
                          device_count(opt->steps));
}

void ug_optim_step_done(ug_optimizer *opt) { opt->steps++; }

int ug_optim_slots(const ug_optimizer *opt) { return opt->slots; }

