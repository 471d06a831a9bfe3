/* What the library's own parts do with a checkpoint beyond its public API. */
#ifndef UG_CORE_IO_CHECKPOINT_INTERNAL_H
#define UG_CORE_IO_CHECKPOINT_INTERNAL_H

#include "unigrad/checkpoint.h"

/* The optimizer the checkpoint saves and loads from now on (of the same
 * model), returning the one it had: the trainer saves a sharded optimizer
 * through a whole copy gathered for the save. */
ug_optimizer *ug_checkpoint_swap_optimizer(ug_checkpoint *ck, ug_optimizer *opt);

#endif
