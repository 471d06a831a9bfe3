/* Optimizers with PyTorch's update rules and defaults, learning-rate
 * schedules and gradient clipping. An optimizer belongs to one model; its
 * update runs inside a graph (ug_graph_set_optimizer), one kernel per
 * parameter. */
#ifndef UNIGRAD_OPTIM_H
#define UNIGRAD_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ug_optim_type { UG_SGD = 0, UG_ADAM, UG_ADAMW } ug_optim_type;

typedef enum ug_schedule {
    UG_SCHEDULE_CONSTANT = 0,
    UG_SCHEDULE_STEP,    /* lr * gamma^(floor(step / step_size)) */
    UG_SCHEDULE_COSINE   /* warm-up lr * (step + 1) / warmup_steps, then
                          * min_lr + (lr - min_lr) (1 + cos(pi p)) / 2 with
                          * p = (step - warmup) / (total - warmup), capped at 1 */
} ug_schedule;

/* Dynamic loss scaling for training with half-precision activations, with
 * torch.cuda.amp.GradScaler's semantics: the backward pass starts from the
 * loss times the scale, so small gradients stay representable in f16, and
 * the update divides the scale out of the gradients before clipping them
 * (as PyTorch's unscale_ then clip_grad_norm_). A step whose gradients hold
 * an inf or NaN is skipped: parameters and optimizer state stay bit for bit
 * as they were, the optimizer's own step count (Adam's bias correction)
 * does not advance, and the scale is multiplied by backoff_factor. After
 * growth_interval clean steps in a row, it is multiplied by growth_factor.
 * The scale stays a normal f32 (FLT_MIN to FLT_MAX: backoff stops at
 * FLT_MIN, growth that would overflow is not taken), and the gradients are
 * checked after unscaling, so no step ever applies a non-finite update.
 * All of it runs on the device: a step never waits for the host. The
 * gradients a graph holds (ug_graph_grad) are the scaled ones. */
typedef struct ug_loss_scaling {
    bool enabled;
    float init_scale;         /* default 65536; a normal f32 */
    float growth_factor;      /* default 2 */
    float backoff_factor;     /* default 0.5 */
    int64_t growth_interval;  /* default 2000, at most 2^24 */
} ug_loss_scaling;

/* The scaler's state, for checkpoints. */
typedef struct ug_loss_scaler_state {
    float scale;
    int64_t clean_steps;      /* since the scale last changed (GradScaler's growth tracker) */
    int64_t skipped_steps;    /* updates skipped for a non-finite gradient */
} ug_loss_scaler_state;

typedef struct ug_optimizer_config {
    ug_optim_type type;
    float lr;
    float weight_decay;
    /* SGD */
    float momentum, dampening; /* each in [0, 1] */
    bool nesterov;
    /* Adam, AdamW */
    float beta1, beta2, eps;
    /* schedule; steps count optimizer updates from 0 */
    ug_schedule schedule;
    int64_t step_size;       /* STEP */
    float gamma;             /* STEP, in (0, 1] */
    int64_t warmup_steps;    /* COSINE */
    int64_t total_steps;     /* COSINE */
    float min_lr;            /* COSINE, in [0, lr] */
    /* Gradient clipping by global norm (as torch.nn.utils.clip_grad_norm_);
     * 0 disables it. */
    float max_grad_norm;
    ug_loss_scaling loss_scaling;
} ug_optimizer_config;

/* PyTorch's defaults: SGD lr 1e-3 (PyTorch requires one; pick yours),
 * momentum 0; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0;
 * AdamW the same with weight decay 1e-2. Constant schedule, no clipping;
 * loss scaling off, with GradScaler's defaults for when it is turned on. */
UG_API ug_optimizer_config ug_optimizer_defaults(ug_optim_type type);

UG_API ug_status ug_optimizer_create(ug_model *model, const ug_optimizer_config *config,
                              ug_optimizer **out);
UG_API void ug_optimizer_free(ug_optimizer *optimizer);
/* Updates done so far, and the learning rate the next one will use. With
 * loss scaling, skipped updates count here (the schedule advances through
 * them, as a PyTorch scheduler stepped every iteration); the optimizer's own
 * step count is this less ug_loss_scaler_state's skipped_steps. */
UG_API int64_t ug_optimizer_steps(const ug_optimizer *optimizer);
UG_API float ug_optimizer_current_lr(const ug_optimizer *optimizer);

/* State for checkpoints: number of state tensors per parameter (SGD with
 * momentum 1, Adam 2) and access to them; and the step counter. */
UG_API int ug_optimizer_state_count(const ug_optimizer *optimizer);
UG_API ug_status ug_optimizer_state(const ug_optimizer *optimizer, int param_index, int slot,
                             ug_tensor **tensor);
/* A slot's name, PyTorch's: "momentum_buffer" (SGD), "exp_avg" and
 * "exp_avg_sq" (Adam, AdamW); NULL out of range. */
UG_API const char *ug_optimizer_state_name(const ug_optimizer *optimizer, int slot);
/* A state tensor by parameter and slot name ("fc1.weight", "exp_avg"). */
UG_API ug_status ug_optimizer_find_state(const ug_optimizer *optimizer, const char *param,
                                         const char *slot, ug_tensor **tensor);
/* The parameters the optimizer updates: the model's first ones, those
 * that existed when it was created. */
UG_API int ug_optimizer_param_count(const ug_optimizer *optimizer);
UG_API ug_optimizer_config ug_optimizer_get_config(const ug_optimizer *optimizer);
/* Sets the update count, 0 to UG_OPTIMIZER_MAX_STEPS; with loss scaling,
 * at most 2^24 updates taken (not skipped), the device's exact f32 count. */
#define UG_OPTIMIZER_MAX_STEPS ((int64_t)1 << 53)
UG_API ug_status ug_optimizer_set_steps(ug_optimizer *optimizer, int64_t steps);
/* The loss scaler's state, read from the device (waiting for it), and set.
 * UG_ERR_STATE when the optimizer was created without loss scaling. To
 * restore a checkpoint, set the step count (ug_optimizer_set_steps) first:
 * skipped_steps may not exceed it. */
UG_API ug_status ug_optimizer_loss_scaler(const ug_optimizer *optimizer, ug_loss_scaler_state *state);
UG_API ug_status ug_optimizer_set_loss_scaler(ug_optimizer *optimizer, const ug_loss_scaler_state *state);
/* The optimizer with its state and step count, for model (a ug_model_copy
 * of the optimizer's model, on any device). */
UG_API ug_status ug_optimizer_copy(const ug_optimizer *optimizer, ug_model *model,
                                   ug_optimizer **out);

#ifdef __cplusplus
}
#endif
#endif
