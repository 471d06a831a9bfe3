/* An optimizer's parameter groups in a checkpoint's metadata
 * (core/io/checkpoint.c saves and checks them through these). Internal. */
#ifndef UG_CORE_IO_CHECKPOINT_GROUPS_H
#define UG_CORE_IO_CHECKPOINT_GROUPS_H

#include "core/io/safetensors.h"
#include "core/io/string_map.h"
#include "unigrad/optim.h"

/* Adds opt's groups to meta: nothing for an optimizer without groups. */
ug_status ug_checkpoint_save_groups(const ug_optimizer *opt, ug_string_map *meta);
/* Refuses (UG_ERR_FORMAT, naming the difference) a file whose groups are
 * not opt's: their number, each one's name, weight decay and rate scale,
 * and each parameter's group. A file saved without groups passes. */
ug_status ug_checkpoint_check_groups(const ug_st_file *file, const ug_optimizer *opt);

#endif
