/* TensorBoard logs: scalars in event files that TensorBoard opens
 * (`tensorboard --logdir DIR`), as torch.utils.tensorboard.SummaryWriter
 * writes them, with no TensorFlow or protobuf library.
 *
 *     ug_tensorboard *tb;
 *     ug_tensorboard_open("runs/mlp", &tb);
 *     config.on_step = ug_tensorboard_on_step;    // the trainer's figures
 *     config.on_epoch = ug_tensorboard_on_epoch;
 *     config.user = tb;
 *     ...
 *     ug_tensorboard_scalar(tb, "epoch/test_accuracy", step, 100.0 * accuracy);
 *     ug_tensorboard_close(tb);
 *
 * A file is a sequence of TFRecords (length, masked CRC-32C of the length,
 * an Event protobuf, its masked CRC-32C), each written whole and flushed
 * at every epoch, so a run killed midway leaves a file TensorBoard reads
 * up to its last complete record. */
#ifndef UNIGRAD_TENSORBOARD_H
#define UNIGRAD_TENSORBOARD_H

#include <stdint.h>

#include "unigrad/export.h"
#include "unigrad/status.h"
#include "unigrad/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_tensorboard ug_tensorboard;

/* Creates dir and its parents if needed, and a new event file in
 * it, named as TensorBoard's writers name theirs:
 * events.out.tfevents.<seconds>.<host>.<pid>.<n>. */
UG_API ug_status ug_tensorboard_open(const char *dir, ug_tensorboard **out);
/* The event file's path. */
UG_API const char *ug_tensorboard_path(const ug_tensorboard *tb);
/* A scalar of the series tag ("train/loss") at step, stored as a float
 * (TensorBoard's simple_value). Tags are 1 to 255 bytes of printable ASCII. */
UG_API ug_status ug_tensorboard_scalar(ug_tensorboard *tb, const char *tag, int64_t step, double value);
UG_API ug_status ug_tensorboard_flush(ug_tensorboard *tb);
/* Flushes, closes and frees (NULL is ignored); UG_ERR_IO when the last
 * writes failed. */
UG_API ug_status ug_tensorboard_close(ug_tensorboard *tb);

/* The trainer's callbacks with user = the ug_tensorboard, or called from
 * the caller's own. A step logs train/loss (when the trainer read it:
 * every config.log_every batches), train/lr and train/samples_per_s at
 * its global batch; an epoch logs epoch/train_loss, epoch/train_accuracy,
 * epoch/val_loss and epoch/val_accuracy (with validation), epoch/lr,
 * epoch/samples_per_s, memory/pool_in_use_mib, memory/pool_peak_mib and,
 * with loss scaling, amp/loss_scale and amp/skipped_steps, at the global
 * batch of its end, then flushes. */
UG_API ug_status ug_tensorboard_on_step(const ug_trainer_step *step, void *tensorboard);
UG_API ug_status ug_tensorboard_on_epoch(const ug_trainer_epoch *epoch, void *tensorboard);

#ifdef __cplusplus
}
#endif
#endif
