/* Optimizers: state, learning-rate schedules, gradient clipping and the
 * update nodes appended to a training graph. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
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
};

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
    return UG_OK;
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

ug_status ug_optimizer_create(ug_model *model, const ug_optimizer_config *config, ug_optimizer **out)
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

void ug_optimizer_retain(ug_optimizer *opt) { __atomic_add_fetch(&opt->refs, 1, __ATOMIC_RELAXED); }

void ug_optimizer_free(ug_optimizer *opt)
{
    if (!opt || __atomic_sub_fetch(&opt->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; opt->state && i < opt->params * opt->slots; i++)
        ug_tensor_free(opt->state[i]);
    free(opt->state);
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
    UG_TRY(ug_optimizer_create(model, &opt->config, &copy));
    ug_status st = UG_OK;
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

/* Parameters per multi-tensor launch: a stack array's. */
enum { UG_OPTIM_GROUP_MAX = 64 };

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

/* What every parameter's update shares: the rule and the step's gate. */
static ug_optim_args shared_args(const ug_optimizer *opt, const ug_tensor *gate)
{
    const ug_optimizer_config *c = &opt->config;
    return (ug_optim_args){.kind = c->type == UG_SGD ? UG_OPTIM_SGD : c->type == UG_ADAM ? UG_OPTIM_ADAM : UG_OPTIM_ADAMW,
                           .gate = ug_kview_of(gate), .weight_decay = c->weight_decay, .momentum = c->momentum,
                           .dampening = c->dampening, .nesterov = c->nesterov, .beta1 = c->beta1,
                           .beta2 = c->beta2, .eps = c->eps};
}

/* Parameter index's buffers: its update node's inputs (param, grad, the
 * gate, then a folded check's flag or NULL), its state and half copy. */
static ug_optim_tensor param_tensor(const ug_optimizer *opt, int index, const ug_tensor *const *in)
{
    ug_optim_tensor t = {.param = ug_kview_of(in[0]), .grad = ug_kview_of(in[1]), .n = ug_tensor_numel(in[0])};
    if (in[3])
        t.check = ug_kview_of(in[3]);
    if (opt->slots > 0)
        t.state0 = ug_kview_of(opt->state[index * opt->slots]);
    if (opt->slots > 1)
        t.state1 = ug_kview_of(opt->state[index * opt->slots + 1]);
    const ug_tensor *copy = ug_model_half_copy_at(opt->model, index);
    if (copy)
        t.copy = ug_kview_of(copy);
    return t;
}

/* One parameter's update: in param, grad and the step's gate; the
 * parameter is updated in place, so the node has no result. */
static ug_status optimizer_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)out;
    const ug_optimizer *opt = op->p.optim.graph->optimizer;
    const ug_optim_tensor t = param_tensor(opt, op->p.optim.param_index, in);
    if (t.n == 0)
        return UG_OK;
    ug_optim_args args = shared_args(opt, in[2]);
    args.param = t.param, args.grad = t.grad, args.state0 = t.state0, args.state1 = t.state1;
    args.copy = t.copy, args.check = t.check, args.n = t.n;
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_OPTIMIZER, op->name, in[0]->dtype, &args);
}

/* Every parameter's update in one launch (PyTorch's multi-tensor apply):
 * the graph groups the update nodes (they share the gate). */
static ug_status optimizer_launch_group(const ug_op *const *ops, const ug_tensor *const *ins, int count)
{
    const ug_optimizer *opt = ops[0]->p.optim.graph->optimizer;
    ug_optim_tensor tensors[UG_OPTIM_GROUP_MAX];
    for (int first = 0; first < count; first += UG_OPTIM_GROUP_MAX) {
        const ug_tensor *const *in = &ins[first * UG_OP_MAX_INPUTS];
        ug_optim_args args = shared_args(opt, in[2]);
        for (int k = first; k < count && k < first + UG_OPTIM_GROUP_MAX; k++) {
            const ug_tensor *const *mine = &ins[k * UG_OP_MAX_INPUTS];
            tensors[args.count++] = param_tensor(opt, ops[k]->p.optim.param_index, mine);
        }
        args.tensors = tensors;
        UG_TRY(ug_dispatch(ug_dev(in[0]), UG_KERNEL_OPTIMIZER, ops[first]->name, in[0]->dtype, &args));
    }
    return UG_OK;
}

static void optimizer_describe(const ug_op *op, char *out, size_t len)
{
    ug_optim_type type = op->p.optim.graph->optimizer->config.type;
    snprintf(out, len, "%s", type == UG_SGD ? "sgd" : type == UG_ADAM ? "adam" : "adamw");
}

/* The gradient, as the update reads it. */
static int optimizer_check_slot(const ug_op *op, int operand)
{
    (void)op;
    return operand == 1 ? 0 : -1;
}

const ug_op_def ug_op_optimizer = {.family = "optimizer update", .launch = optimizer_launch,
                                   .launch_group = optimizer_launch_group, .describe = optimizer_describe,
                                   .check_slot = optimizer_check_slot};

/* The step's scalars (kernels/common/optim_step.h): in the gradients' sum
 * of squares when the step clips or scales; out the gate every parameter's
 * update reads. */
static ug_status step_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)op, (void)nin, (void)in, (void)nout;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {UG_GATE_SIZE}};
    return UG_OK;
}

static ug_status step_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_optimizer *opt = op->p.optim.graph->optimizer;
    ug_optim_args args = {.kind = UG_OPTIM_STEP, .param = ug_kview_of(out[0]), .state0 = ug_kview_of(opt->step_state),
                          .n = 1, .rule = step_rule(&opt->config)};
    if (in[0])
        args.grad = ug_kview_of(in[0]);
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_OPTIMIZER, op->name, UG_F32, &args);
}

const ug_op_def ug_op_optimizer_step = {.family = "optimizer step", .infer = step_infer, .launch = step_launch};

/* The backward pass's first gradient, d loss / d loss: 1, or the loss
 * scale when the graph's optimizer scales the loss (read on the device).
 * A micro-batch accumulated (ug_graph_run_backward) weights it by its
 * share of a full batch's rows, so that gradients of unequal batches add
 * up as one batch of all their rows; a full batch's gradient stays that
 * of ug_graph_run bit for bit. */
static ug_status seed_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin, (void)in, (void)nout;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = op->p.seed.ndim};
    memcpy(out[0].shape, op->p.seed.shape, sizeof(int64_t) * (size_t)op->p.seed.ndim);
    return UG_OK;
}

void ug_loss_seed_of(const ug_graph *g, ug_kview *scale, float *weight)
{
    *weight = g->accumulating ? (float)g->rows / g->gradient_rows : 1.0f;
    const ug_optimizer *opt = g->optimizer;
    *scale = opt && opt->config.loss_scaling.enabled ? ug_kview_of(opt->step_state) : (ug_kview){0};
}

static ug_status seed_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)in;
    ug_kview scale;
    float weight;
    ug_loss_seed_of(op->p.seed.graph, &scale, &weight);
    if (!scale.mem)
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, weight, out[0], NULL);
    ug_unary_args scaled = {.op = UG_UNARY_SCALE_SHIFT, .alpha = weight, .y = ug_kview_of(out[0]), .x = scale,
                            .ndim = 1, .shape = {ug_tensor_numel(out[0])}, .x_strides = {0}};
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_UNARY, op->name, UG_F32, &scaled);
}

const ug_op_def ug_op_loss_seed = {.family = "loss seed", .infer = seed_infer, .launch = seed_launch,
                                   .seeds_backward = true};

/* The sum of every gradient's squares, on the device. */
static ug_status sum_of_squares(ug_graph *g, ug_value **total)
{
    *total = NULL;
    for (int i = 0; i < g->value_count; i++) {
        ug_value *p = g->values[i];
        if (p->kind != VALUE_PARAM || !p->grad)
            continue;
        ug_value *sq = NULL;
        UG_TRY(ug_g_reduce_axes(g, p->grad, UG_RKERNEL_SUMSQ, 0, true, false, &sq));
        if (*total)
            UG_TRY(ug_g_add(g, *total, sq, total));
        else
            *total = sq;
    }
    return UG_OK;
}

ug_status ug_optim_append(ug_graph *g, ug_optimizer *opt)
{
    /* The gate: the step's rate and counts, and the factor that unscales
     * and clips (clip_grad_norm_'s over every gradient). */
    ug_value *total = NULL, *gate = NULL;
    if (opt->config.loss_scaling.enabled || opt->config.max_grad_norm > 0.0f)
        UG_TRY(sum_of_squares(g, &total));
    ug_op step = {.def = &ug_op_optimizer_step, .name = "optimizer step", .p.optim = {.graph = g, .param_index = -1}};
    UG_TRY(ug_op_graph(g, &step, total ? 1 : 0, &total, &gate));
    for (int i = 0; i < g->value_count; i++) {
        ug_value *p = g->values[i];
        if (p->kind != VALUE_PARAM || !p->grad)
            continue;
        int index = ug_model_param_index(g->model, p->param);
        if (index >= opt->params)
            return ug_set_error(UG_ERR_STATE,
                                "ug_graph_set_optimizer: parameter '%s' was created after the optimizer; "
                                "create the optimizer once the model is complete",
                                p->name);
        graph_node *n;
        ug_value *in[3] = {p, p->grad, gate};
        ug_op op = {.def = &ug_op_optimizer, .name = "optimizer update",
                    .p.optim = {.graph = g, .param_index = index}};
        UG_TRY(ug_graph_add_node(g, &op, NULL, 3, in, &n));
    }
    return UG_OK;
}
