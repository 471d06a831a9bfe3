/* What the library's own parts do with a checkpoint beyond its public API. */
#ifndef UG_CORE_IO_CHECKPOINT_INTERNAL_H
#define UG_CORE_IO_CHECKPOINT_INTERNAL_H

#include "unigrad/checkpoint.h"

/* The optimizer the checkpoint saves and loads from now on (of the same
 * model), returning the one it had: the trainer saves a sharded optimizer
 * through a whole copy gathered for the save. */
ug_optimizer *ug_checkpoint_swap_optimizer(ug_checkpoint *ck, ug_optimizer *opt);
/* The same for the model: a pipeline stage saves the whole model gathered
 * from every stage. */
ug_model *ug_checkpoint_swap_model(ug_checkpoint *ck, ug_model *model);
/* Tensors saved by name beside the parts (the caller keeps them alive
 * until cleared with count 0): the last stage's running sums, which stage
 * 0 saves for it. */
void ug_checkpoint_set_extras(ug_checkpoint *ck, int count, const char *const *names, ug_tensor *const *tensors);
/* The model is one stage's part of the file's: loading passes over the
 * other stages' parameters and state. */
void ug_checkpoint_model_is_part(ug_checkpoint *ck);

#endif
