/* Optimizers: state, learning-rate schedules, gradient clipping and the
 * update nodes appended to a training graph. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "kernels/common/scaler.h"
#include "unigrad/ops.h"

struct ug_optimizer {
    int refs;                /* the program's handle plus graphs (atomic) */
    ug_model *model;
    ug_optimizer_config config;
    int slots;               /* state tensors per parameter */
    int params;
    ug_tensor **state;       /* params * slots */
    ug_tensor *scaler;       /* f32 [UG_SCALER_SIZE] with loss scaling, else NULL */
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
                        ls->growth_interval < 1 || ls->growth_interval > UG_SCALER_MAX_COUNT))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: loss scaling needs an init_scale in [%g, %g] (a normal f32; got %g), a finite "
                            "growth_factor > 1 (got %g), a backoff_factor in (0, 1) (got %g) and a "
                            "growth_interval in [1, 2^24] (got %lld)",
                            op, (double)FLT_MIN, (double)FLT_MAX, (double)ls->init_scale, (double)ls->growth_factor,
                            (double)ls->backoff_factor, (long long)ls->growth_interval);
    return UG_OK;
}

/* The scaler's state as its f32 values on the device. */
static ug_status write_scaler(ug_optimizer *opt, const ug_loss_scaler_state *s, int64_t steps)
{
    float values[UG_SCALER_SIZE] = {0};
    values[UG_SCALER_SCALE] = s->scale;
    values[UG_SCALER_TRACKER] = (float)s->clean_steps;
    values[UG_SCALER_SKIPPED] = (float)s->skipped_steps;
    values[UG_SCALER_STEPS] = (float)(steps - s->skipped_steps);
    return ug_tensor_upload(opt->scaler, values, sizeof values);
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
    if (config->loss_scaling.enabled) {
        ug_loss_scaler_state initial = {.scale = config->loss_scaling.init_scale};
        ug_status st = ug_tensor_new(ug_model_device(model), UG_F32, 1, (int64_t[]){UG_SCALER_SIZE},
                                     "loss scaler state", &opt->scaler);
        if (st == UG_OK)
            st = write_scaler(opt, &initial, 0);
        if (st != UG_OK) {
            ug_optimizer_free(opt);
            return st;
        }
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
    ug_tensor_free(opt->scaler);
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
    if (st == UG_OK && opt->scaler)
        st = ug_tensor_copy(copy->scaler, opt->scaler);
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
    if (!opt->scaler)
        return ug_set_error(UG_ERR_STATE, "%s: the optimizer has no loss scaling (config.loss_scaling.enabled)", op);
    float values[UG_SCALER_SIZE];
    ug_status st = ug_tensor_download(opt->scaler, values, sizeof values);
    if (st != UG_OK)
        return ug_prefix_error(st, "%s", op);
    *state = (ug_loss_scaler_state){.scale = values[UG_SCALER_SCALE],
                                    .clean_steps = (int64_t)values[UG_SCALER_TRACKER],
                                    .skipped_steps = (int64_t)values[UG_SCALER_SKIPPED]};
    return UG_OK;
}

ug_status ug_optim_check_restore(const ug_optimizer *opt, int64_t steps, const ug_loss_scaler_state *state)
{
    if (steps < 0 || steps > UG_OPTIMIZER_MAX_STEPS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "steps %lld must be in [0, 2^53]", (long long)steps);
    if (!state)
        return UG_OK;
    const int64_t exact = UG_SCALER_MAX_COUNT; /* the device keeps counts in f32 */
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
    if (state && opt->scaler)
        UG_TRY(write_scaler(opt, state, steps));
    opt->steps = steps;
    return UG_OK;
}

ug_status ug_optimizer_set_loss_scaler(ug_optimizer *opt, const ug_loss_scaler_state *state)
{
    const char *op = "ug_optimizer_set_loss_scaler";
    if (!opt || !state)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, opt ? "state" : "optimizer");
    if (!opt->scaler)
        return ug_set_error(UG_ERR_STATE, "%s: the optimizer has no loss scaling (config.loss_scaling.enabled)", op);
    ug_status st = ug_optim_restore(opt, opt->steps, state);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

ug_status ug_optimizer_set_steps(ug_optimizer *opt, int64_t steps)
{
    const char *op = "ug_optimizer_set_steps";
    if (!opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", op);
    ug_loss_scaler_state s;
    if (opt->scaler) { /* the device's step count follows: steps less those skipped */
        UG_TRY(ug_optimizer_loss_scaler(opt, &s));
        if (s.skipped_steps > steps)
            s.skipped_steps = steps;
    }
    ug_status st = ug_optim_restore(opt, steps, opt->scaler ? &s : NULL);
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

static float lr_at(const ug_optimizer_config *c, int64_t step)
{
    switch (c->schedule) {
    case UG_SCHEDULE_STEP:
        return c->lr * powf(c->gamma, (float)(step / c->step_size));
    case UG_SCHEDULE_COSINE: {
        if (step < c->warmup_steps)
            return (float)((double)c->lr * (double)(step + 1) / (double)c->warmup_steps); /* no overflow */
        double progress = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
        if (progress > 1.0)
            progress = 1.0;
        return (float)(c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * progress)));
    }
    default:
        return c->lr;
    }
}

float ug_optimizer_current_lr(const ug_optimizer *opt) { return opt ? lr_at(&opt->config, opt->steps) : 0.0f; }

static void fill_args(const ug_optimizer *opt, int param_index, ug_optim_args *args)
{
    const ug_optimizer_config *c = &opt->config;
    int64_t t = opt->steps + 1;
    args->kind = c->type == UG_SGD ? UG_OPTIM_SGD : c->type == UG_ADAM ? UG_OPTIM_ADAM : UG_OPTIM_ADAMW;
    args->lr = lr_at(c, opt->steps);
    args->weight_decay = c->weight_decay;
    args->momentum = c->momentum;
    args->dampening = c->dampening;
    args->nesterov = c->nesterov;
    args->first_step = opt->steps == 0;
    args->beta1 = c->beta1;
    args->beta2 = c->beta2;
    args->eps = c->eps;
    /* In double, as PyTorch computes 1 - beta^t on the host. */
    args->bias_correction1 = (float)(1.0 - pow((double)c->beta1, (double)t));
    args->bias_correction2 = (float)(1.0 - pow((double)c->beta2, (double)t));
    if (opt->slots > 0)
        args->state0 = ug_kview_of(opt->state[param_index * opt->slots]);
    if (opt->slots > 1)
        args->state1 = ug_kview_of(opt->state[param_index * opt->slots + 1]);
}

void ug_optim_step_done(ug_optimizer *opt) { opt->steps++; }

int ug_optim_slots(const ug_optimizer *opt) { return opt->slots; }

/* One parameter's update: in param, grad (and the clipping scale); the
 * parameter is updated in place, so the node has no result. */
static ug_status optimizer_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)out;
    ug_optim_args args = {0};
    fill_args(op->p.optim.graph->optimizer, op->p.optim.param_index, &args);
    args.param = ug_kview_of(in[0]);
    args.grad = ug_kview_of(in[1]);
    const ug_tensor *copy = ug_model_half_copy_at(ug_optimizer_model(op->p.optim.graph->optimizer),
                                                  op->p.optim.param_index);
    if (copy)
        args.copy = ug_kview_of(copy);
    if (in[2]) {
        args.grad_scale = ug_kview_of(in[2]);
        args.gated = op->p.optim.graph->optimizer->scaler != NULL;
    }
    args.n = ug_tensor_numel(in[0]);
    if (args.n == 0)
        return UG_OK;
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_OPTIMIZER, op->name, in[0]->dtype, &args);
}

static void optimizer_describe(const ug_op *op, char *out, size_t len)
{
    ug_optim_type type = op->p.optim.graph->optimizer->config.type;
    snprintf(out, len, "%s", type == UG_SGD ? "sgd" : type == UG_ADAM ? "adam" : "adamw");
}

const ug_op_def ug_op_optimizer = {.family = "optimizer update", .launch = optimizer_launch,
                                   .describe = optimizer_describe};

/* The loss scaler's update (kernels/common/scaler.h): in the gradients' sum
 * of squares; out the gate every parameter's update reads. */
static ug_status scaler_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)op, (void)nin, (void)in, (void)nout;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {UG_GATE_SIZE}};
    return UG_OK;
}

static ug_status scaler_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_optimizer *opt = op->p.optim.graph->optimizer;
    const ug_loss_scaling *ls = &opt->config.loss_scaling;
    ug_optim_args args = {.kind = UG_OPTIM_SCALER, .param = ug_kview_of(out[0]), .grad = ug_kview_of(in[0]),
                          .state0 = ug_kview_of(opt->scaler), .n = 1, .growth = ls->growth_factor,
                          .backoff = ls->backoff_factor, .growth_interval = (float)ls->growth_interval,
                          .max_norm = opt->config.max_grad_norm};
    if (opt->config.type != UG_SGD) /* the gate carries Adam's bias corrections */
        args.beta1 = opt->config.beta1, args.beta2 = opt->config.beta2;
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_OPTIMIZER, op->name, UG_F32, &args);
}

const ug_op_def ug_op_loss_scaler = {.family = "loss scaler", .infer = scaler_infer, .launch = scaler_launch};

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

static ug_status seed_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)in;
    const ug_graph *g = op->p.seed.graph;
    const float weight = g->accumulating ? (float)g->rows / g->gradient_rows : 1.0f;
    const ug_optimizer *opt = g->optimizer;
    if (!opt || !opt->scaler)
        return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, weight, out[0], NULL);
    ug_unary_args scaled = {.op = UG_UNARY_SCALE_SHIFT, .alpha = weight, .y = ug_kview_of(out[0]),
                            .x = ug_kview_of(opt->scaler), .ndim = 1, .shape = {ug_tensor_numel(out[0])},
                            .x_strides = {0}};
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_UNARY, op->name, UG_F32, &scaled);
}

const ug_op_def ug_op_loss_seed = {.family = "loss seed", .infer = seed_infer, .launch = seed_launch};

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

/* scale = min(1, max_norm / (||g||_2 + 1e-6)) over every gradient, as
 * torch.nn.utils.clip_grad_norm_, computed on the device so the step needs
 * no synchronisation. */
static ug_status append_clipping(ug_graph *g, float max_norm, ug_value **scale)
{
    ug_value *total = NULL;
    UG_TRY(sum_of_squares(g, &total));
    ug_value *norm = NULL, *shifted = NULL, *inverse = NULL, *ratio = NULL;
    UG_TRY(ug_g_sqrt(g, total, &norm));
    UG_TRY(ug_g_scale_shift(g, norm, 1.0f, 1e-6f, &shifted));
    UG_TRY(ug_g_unary(g, UG_UNARY_RECIPROCAL, 0, 0, shifted, &inverse));
    UG_TRY(ug_g_scale_shift(g, inverse, max_norm, 0.0f, &ratio));
    return ug_g_unary(g, UG_UNARY_CLAMP, -INFINITY, 1.0f, ratio, scale);
}

ug_status ug_optim_append(ug_graph *g, ug_optimizer *opt)
{
    ug_value *scale = NULL;
    if (opt->scaler) { /* the scaler's gate unscales and clips */
        ug_value *total = NULL;
        UG_TRY(sum_of_squares(g, &total));
        ug_op op = {.def = &ug_op_loss_scaler, .name = "loss scaler", .p.optim = {.graph = g, .param_index = -1}};
        UG_TRY(ug_op_graph(g, &op, 1, &total, &scale));
    } else if (opt->config.max_grad_norm > 0.0f) {
        UG_TRY(append_clipping(g, opt->config.max_grad_norm, &scale));
    }
    g->grad_scale = scale;
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
        ug_value *in[3] = {p, p->grad, scale};
        ug_op op = {.def = &ug_op_optimizer, .name = "optimizer update",
                    .p.optim = {.graph = g, .param_index = index}};
        UG_TRY(ug_graph_add_node(g, &op, NULL, scale ? 3 : 2, in, &n));
    }
    return UG_OK;
}
