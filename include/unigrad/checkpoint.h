/* Training checkpoints: everything a run needs to continue bit for bit,
 * in one safetensors file that Python reads with the safetensors or numpy
 * libraries. (Where cuDNN or MIOpen run the convolutions, bit for bit needs
 * deterministic mode, conv.h: their fastest algorithms may sum in any order
 * and a new process may time another one fastest.)
 *
 * A checkpoint object lists the parts of a training run (a model, its
 * optimizer, graphs, loaders, and the caller's own strings); saving writes
 * them and loading restores them into the same kinds of parts, on any
 * device:
 *
 *   ug_checkpoint *ck;   ug_checkpoint_create(&ck);
 *   ug_checkpoint_add_model(ck, model);
 *   ug_checkpoint_add_optimizer(ck, opt);
 *   ug_checkpoint_add_graph(ck, "train", g);
 *   ug_checkpoint_add_loader(ck, "train", loader);
 *   ug_checkpoint_set_string(ck, "config", "...");
 *   ... ug_checkpoint_save(ck, "run.safetensors") after an update ...
 *   ... or, to resume, ug_checkpoint_load(ck, "run.safetensors") ...
 *
 * The file holds:
 *   - every model tensor by name ("fc1.weight", "bn1.running_mean"), f32;
 *   - each parameter's optimizer state as "<parameter>.<slot>" with
 *     PyTorch's slot names ("fc1.weight.exp_avg", "fc1.weight.exp_avg_sq",
 *     "fc1.weight.momentum_buffer");
 *   - in "__metadata__" (strings): the optimizer's type and update count
 *     (the schedule's position), its parameter groups (each one's name,
 *     weight decay and rate scale, and each parameter's group), the loss
 *     scaler's state, each graph's random seed and run count (dropout's
 *     counters), each loader's seed, epoch and position, and the caller's
 *     strings.
 * Saving replaces the file atomically and durably (a temporary file in the
 * same folder, fsync, rename, fsync of the folder): a crash, kill -9 or full
 * disk at any moment leaves the previous checkpoint whole and loadable, and
 * a failed save returns UG_ERR_IO with the reason, changing nothing in the
 * run. Loading validates the whole file (header, JSON, dtypes, shapes
 * against the parts, offsets, file length) before changing anything, and
 * names the path, the byte offset and what was expected on failure. An
 * optimizer whose parameter groups are not the file's (their number,
 * names, settings, or a parameter's group) is refused: its state would go
 * on under other settings. A file saved without groups loads into any
 * optimizer.
 *
 * The parts are used, not owned: they must stay alive while the checkpoint
 * saves or loads them. */
#ifndef UNIGRAD_CHECKPOINT_H
#define UNIGRAD_CHECKPOINT_H

#include "unigrad/data.h"
#include "unigrad/graph.h"
#include "unigrad/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_checkpoint ug_checkpoint;

UG_API ug_status ug_checkpoint_create(ug_checkpoint **out);
UG_API void ug_checkpoint_free(ug_checkpoint *checkpoint);

/* The parts. One model and one optimizer (of that model); graphs and
 * loaders by a name unique among them ("train", "eval"). */
UG_API ug_status ug_checkpoint_add_model(ug_checkpoint *checkpoint, ug_model *model);
UG_API ug_status ug_checkpoint_add_optimizer(ug_checkpoint *checkpoint, ug_optimizer *optimizer);
UG_API ug_status ug_checkpoint_add_graph(ug_checkpoint *checkpoint, const char *name, ug_graph *graph);
UG_API ug_status ug_checkpoint_add_loader(ug_checkpoint *checkpoint, const char *name, ug_loader *loader);

/* The caller's own strings (a configuration, an epoch's best loss): set
 * before saving; after loading, the file's. Keys starting with "unigrad."
 * are the library's. NULL when the key is absent; the string stays valid
 * until the checkpoint is freed or loads again. */
UG_API ug_status ug_checkpoint_set_string(ug_checkpoint *checkpoint, const char *key, const char *value);
UG_API const char *ug_checkpoint_string(const ug_checkpoint *checkpoint, const char *key);

/* Keep the last keep files: saving to PATH first moves the older ones to
 * PATH.1 .. PATH.<keep-1> (PATH.1 the newest). Default 1. */
UG_API ug_status ug_checkpoint_set_keep(ug_checkpoint *checkpoint, int keep);

/* Saves the parts. Graphs must be between updates (no micro-batches
 * accumulated); a loader's position is the batches it handed out. Waits for
 * the devices. */
UG_API ug_status ug_checkpoint_save(ug_checkpoint *checkpoint, const char *path);
/* Restores the parts from path: all of them, or none (any error leaves
 * every part as it was). Tensors of parts the checkpoint does not list
 * (the optimizer's, when only a model is added) are ignored, so a model's
 * weights load from a training checkpoint. A loader restarts its epoch at
 * the saved position: its next ug_loader_next continues the epoch (call no
 * ug_loader_start_epoch for it). */
UG_API ug_status ug_checkpoint_load(ug_checkpoint *checkpoint, const char *path);

#ifdef __cplusplus
}
#endif
#endif
