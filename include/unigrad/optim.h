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

typedef struct ug_optimizer_config {
    ug_optim_type type;
    float lr;
    float weight_decay;
    /* SGD */
    float momentum, dampening;
    bool nesterov;
    /* Adam, AdamW */
    float beta1, beta2, eps;
    /* schedule; steps count optimizer updates from 0 */
    ug_schedule schedule;
    int64_t step_size;       /* STEP */
    float gamma;             /* STEP */
    int64_t warmup_steps;    /* COSINE */
    int64_t total_steps;     /* COSINE */
    float min_lr;            /* COSINE */
    /* Gradient clipping by global norm (as torch.nn.utils.clip_grad_norm_);
     * 0 disables it. */
    float max_grad_norm;
} ug_optimizer_config;

/* PyTorch's defaults: SGD lr 1e-3 (PyTorch requires one; pick yours),
 * momentum 0; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0;
 * AdamW the same with weight decay 1e-2. Constant schedule, no clipping. */
UG_API ug_optimizer_config ug_optimizer_defaults(ug_optim_type type);

UG_API ug_status ug_optimizer_create(ug_model *model, const ug_optimizer_config *config,
                              ug_optimizer **out);
UG_API void ug_optimizer_free(ug_optimizer *optimizer);
/* Updates done so far, and the learning rate the next one will use. */
UG_API int64_t ug_optimizer_steps(const ug_optimizer *optimizer);
UG_API float ug_optimizer_current_lr(const ug_optimizer *optimizer);

/* State for checkpoints: number of state tensors per parameter (SGD with
 * momentum 1, Adam 2) and access to them; and the step counter. */
UG_API int ug_optimizer_state_count(const ug_optimizer *optimizer);
UG_API ug_status ug_optimizer_state(const ug_optimizer *optimizer, int param_index, int slot,
                             ug_tensor **tensor);
UG_API ug_status ug_optimizer_set_steps(ug_optimizer *optimizer, int64_t steps);
/* The optimizer with its state and step count, for model (a ug_model_copy
 * of the optimizer's model, on any device). */
UG_API ug_status ug_optimizer_copy(const ug_optimizer *optimizer, ug_model *model,
                                   ug_optimizer **out);

#ifdef __cplusplus
}
#endif
#endif
