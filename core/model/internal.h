/* Models and optimizers as the graphs that train them see them: a model's
 * parameters (and their half copies for mixed precision), an optimizer's
 * state. Graphs (core/graph/) stand on these; these stand on the ops
 * (core/ops/) and the runtime, and know nothing of graphs. */
#ifndef UG_CORE_MODEL_INTERNAL_H
#define UG_CORE_MODEL_INTERNAL_H

#include "core/ops/op.h"
#include "unigrad/graph.h"
#include "unigrad/optim.h"

/* model.c */
int ug_model_param_index(const ug_model *model, const ug_tensor *param);
/* Graphs and optimizers keep their model: ug_model_free drops a reference. */
void ug_model_retain(ug_model *model);
/* Frees the parameters from index count on (a failed layer's). */
void ug_model_truncate(ug_model *model, int count);
/* The same for parameters of another pipeline stage: the parameters made
 * after take the initial values they take in the whole model. */
void ug_model_drop_last(ug_model *model, int count);
/* Parameter index's half copy in dtype, made from it on first use: what
 * mixed-precision graphs read, kept current by every optimizer update and
 * ug_model_write_param. A model keeps copies in one half dtype. */
ug_status ug_model_half_copy(ug_model *model, int index, ug_dtype dtype, ug_tensor **out);
/* The copy if there is one (NULL otherwise). */
ug_tensor *ug_model_half_copy_at(const ug_model *model, int index);

/* optimizer.c */
/* Graphs keep their optimizer the way they keep their model. */
void ug_optimizer_retain(ug_optimizer *opt);
/* What the optimizer's ops read (core/ops/optim.c), fixed at creation. */
const ug_optim_source *ug_optimizer_source(const ug_optimizer *opt);
/* Whether opt can take a step count and (when not NULL) loss scaler state,
 * as a checkpoint restores them: checked before anything is written. */
ug_status ug_optim_check_restore(const ug_optimizer *opt, int64_t steps, const ug_loss_scaler_state *state);
/* Sets both, once checked (a checkpoint's load). */
ug_status ug_optim_restore(ug_optimizer *opt, int64_t steps, const ug_loss_scaler_state *state);
void ug_optim_step_done(ug_optimizer *opt);
/* State tensors per parameter (shaped like it; 1-D, its part, when sharded). */
int ug_optim_slots(const ug_optimizer *opt);
ug_model *ug_optimizer_model(const ug_optimizer *opt);
/* Rank `rank` of `size`'s part of a parameter of n elements (ZeRO stage
 * 1): [n * rank / size, n * (rank + 1) / size), as begin and count. */
void ug_optim_shard_range(int64_t n, int rank, int size, int64_t *begin, int64_t *count);
/* Keeps only rank's part of every state tensor (ug_optim_shard_range), so
 * that its updates write only that part of each parameter (the comm's
 * ug_comm_shard_optimizer, which has checked rank and size). agree (when
 * not NULL) gets this rank's status once the parts are made, and returns
 * the group's: anything but UG_OK leaves the optimizer as it was. Sharding
 * again as the same rank of the same size is nothing; as another, refused. */
ug_status ug_optim_shard(ug_optimizer *opt, int rank, int size, ug_status (*agree)(void *ctx, ug_status mine),
                         void *ctx);
/* An optimizer like opt (configuration, groups, steps, loss scaler) on its
 * model, not sharded, its state zeros: what a sharded one's parts are
 * gathered into to be saved whole. */
ug_status ug_optim_whole_copy(const ug_optimizer *opt, ug_optimizer **out);
/* Whether the state is sharded, and as which rank of how many (0 of 1 when not). */
bool ug_optim_sharded(const ug_optimizer *opt, int *rank, int *size);

/* optimizer_groups.c: parameter groups (optim.h) */
/* Checks config's groups on their own (what they choose needs a model);
 * op names the caller in messages. */
ug_status ug_optim_groups_check(const ug_optimizer_config *config, const char *op);
/* The group that chooses each of the model's first params parameters,
 * group_of[i] (-1: none), once checked; refuses a parameter two groups
 * choose and a name or predicate that chooses none. */
ug_status ug_optim_groups_assign(const ug_optimizer_config *config, const ug_model *model, int params,
                                 int *group_of, const char *op);
/* "group 'decay'", "group 2" (unnamed) or "no group" (-1), in buf. */
const char *ug_optim_group_name(const ug_optimizer_config *config, int group, char *buf, size_t len);

#endif
