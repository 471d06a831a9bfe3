/* Optimizers with PyTorch's update rules and defaults, parameter groups,
 * learning-rate schedules and gradient clipping. An optimizer belongs to
 * one model; its update runs inside a graph (ug_graph_set_optimizer), one
 * launch for every parameter where the backend can. */
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

/* Parameter groups, PyTorch's param_groups: parameters chosen by name or
 * shape, each group with its own weight decay and learning rate. nanoGPT's
 * configure_optimizers, for one, decays its matrices (linear and embedding
 * weights) and not its vectors (biases, norm weights):
 *
 *   ug_optimizer_config c = ug_optimizer_defaults(UG_ADAMW);
 *   c.weight_decay = 0.1f;
 *   ug_optimizer_decay_matrices_only(&c);     two groups: "decay", "no_decay"
 *
 * or, group by group:
 *
 *   ug_param_group g = ug_param_group_defaults();
 *   snprintf(g.name, sizeof g.name, "embeddings");
 *   snprintf(g.pattern, sizeof g.pattern, "wte.weight wpe.weight");
 *   g.lr_scale = 0.1f;                        a tenth of the schedule's rate
 *   ug_optimizer_add_group(&c, &g);
 *
 * A parameter belongs to at most one group; the optimizer refuses one that
 * two groups choose, and a name pattern or predicate that chooses no
 * parameter (a misspelt name), naming them. A shape rule may choose none
 * (UG_SELECT_VECTORS in a model without biases or norms). Parameters no
 * group chooses keep the configuration's weight_decay and the schedule's
 * rate.
 *
 * Each group's update is PyTorch's rule with the group's settings: its
 * weight decay (SGD's and Adam's L2 term, AdamW's decoupled decay) and its
 * rate, lr_scale times the schedule's (ug_optimizer_current_lr), so
 * warm-up and cosine decay move every group's rate together, as a PyTorch
 * scheduler moves each group's lr. Gradient clipping and loss scaling see
 * every group's gradients together (clip_grad_norm_ over
 * model.parameters()). Groups add no launch: the updates of all groups run
 * as one, each parameter carrying its group's settings. A checkpoint
 * records the groups, and loading it into an optimizer whose groups differ
 * is refused (checkpoint.h). */
typedef enum ug_param_select {
    /* pattern: names or shell-style globs ('*' any characters, '?' one),
     * separated by spaces; a parameter matching any of them. */
    UG_SELECT_NAMES = 0,
    UG_SELECT_MATRICES,  /* 2 or more dimensions: linear, embedding and convolution weights */
    UG_SELECT_VECTORS,   /* 0 or 1 dimension: biases, norm weights and shifts */
    UG_SELECT_PREDICATE  /* those for which predicate returns true */
} ug_param_select;

/* Whether parameter name (of ndim dimensions, shape) belongs to a group.
 * Called by ug_optimizer_create for every parameter of the model (and by a
 * trainer each time it creates its optimizer): user must stay valid while
 * a configuration that names the predicate is used. */
typedef bool (*ug_param_predicate)(const char *name, int ndim, const int64_t *shape, void *user);

enum { UG_OPTIMIZER_MAX_GROUPS = 8, UG_PARAM_GROUP_NAME = 32, UG_PARAM_GROUP_PATTERN = 256 };

typedef struct ug_param_group {
    /* For messages and checkpoints: 1 to 31 characters, unique among the
     * groups; empty: "group <k>". */
    char name[UG_PARAM_GROUP_NAME];
    ug_param_select select;
    char pattern[UG_PARAM_GROUP_PATTERN]; /* UG_SELECT_NAMES only */
    ug_param_predicate predicate;         /* UG_SELECT_PREDICATE only */
    void *user;                           /* passed to predicate */
    float weight_decay;                   /* finite, >= 0 */
    /* Finite, >= 0. 0 leaves the group's parameters where they are (their
     * state still follows the gradients, as with PyTorch's lr 0). */
    float lr_scale;
} ug_param_group;

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
    /* Parameter groups (above): groups[0 .. group_count - 1]. */
    int group_count;
    ug_param_group groups[UG_OPTIMIZER_MAX_GROUPS];
} ug_optimizer_config;

/* PyTorch's defaults: SGD lr 1e-3 (PyTorch requires one; pick yours),
 * momentum 0; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0;
 * AdamW the same with weight decay 1e-2. Constant schedule, no clipping;
 * loss scaling off, with GradScaler's defaults for when it is turned on. */
UG_API ug_optimizer_config ug_optimizer_defaults(ug_optim_type type);

/* A group choosing by name (an empty pattern, to fill in), with no weight
 * decay and the schedule's rate (lr_scale 1). */
UG_API ug_param_group ug_param_group_defaults(void);
/* Appends a copy of group to config's groups, checked as
 * ug_optimizer_create checks it (but for what it chooses, which needs the
 * model); config is unchanged on error. */
UG_API ug_status ug_optimizer_add_group(ug_optimizer_config *config, const ug_param_group *group);
/* nanoGPT's rule: appends the groups "decay" (UG_SELECT_MATRICES, weight
 * decay config->weight_decay) and "no_decay" (UG_SELECT_VECTORS, none),
 * both at the schedule's rate; every parameter is in one of them. */
UG_API ug_status ug_optimizer_decay_matrices_only(ug_optimizer_config *config);

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
 * momentum 1, Adam 2) and access to them (shaped like the parameter; 1-D,
 * this rank's part of it, when the state is sharded: comm.h's
 * ug_comm_shard_optimizer); and the step counter. */
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
/* The group parameter param_index (0 to ug_optimizer_param_count - 1) is
 * in: an index into the configuration's groups, or -1 when no group chose
 * it (the configuration's weight decay and the schedule's rate). */
UG_API ug_status ug_optimizer_param_group(const ug_optimizer *optimizer, int param_index, int *group);
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
/* The optimizer with its state, step count and each parameter's group
 * (no predicate is called again), for model (a ug_model_copy of the
 * optimizer's model, on any device). */
UG_API ug_status ug_optimizer_copy(const ug_optimizer *optimizer, ug_model *model,
                                   ug_optimizer **out);

#ifdef __cplusplus
}
#endif
#endif
