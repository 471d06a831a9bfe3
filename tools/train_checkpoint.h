/* ug-train's checkpoints: the options a run was started with (saved in
 * its checkpoints, so --resume needs nothing else), the best weights kept
 * for early stopping, and Ctrl-C, which ends the run at the next update
 * with a checkpoint. */
#ifndef UG_TOOLS_TRAIN_CHECKPOINT_H
#define UG_TOOLS_TRAIN_CHECKPOINT_H

#include <stdbool.h>

#include "unigrad/unigrad.h"

/* The checkpoint string holding the run's options. */
#define TRAIN_ARGS_KEY "ug-train.args"

/* argv[1..argc) without --resume (and its value), one per line, for
 * TRAIN_ARGS_KEY; NULL when out of memory or an argument holds a newline.
 * free() it. */
char *train_join_args(int argc, char **argv);
/* The run's argv to parse on --resume: argv[0], then the options saved in
 * the checkpoint at path, then argv[1..) (which override them). NULL with
 * the reason on stderr. free() the array (one block). */
char **train_resume_args(const char *path, int argc, char **argv, int *out_argc);

/* The parameters' values at one point of training, on the host. */
typedef struct train_weights {
    int count;
    float **values;
    size_t *bytes;
} train_weights;
ug_status train_weights_take(train_weights *w, const ug_model *model);
ug_status train_weights_restore(const train_weights *w, ug_model *model);
void train_weights_free(train_weights *w);

/* Ctrl-C (SIGINT), SIGTERM and SIGHUP set a flag instead of ending the
 * process; a second one ends it at once. train_interrupted gives the
 * signal, 0 before one. */
void train_catch_interrupts(void);
int train_interrupted(void);
/* Whether checkpoints can be saved at path: its folder takes a new file
 * (one is made and removed). false with the reason on stderr. */
bool train_check_save_path(const char *path);

#endif
