/* ug-train's checkpoints: the options a run was started with (saved in
 * its checkpoints, so --resume needs nothing else), and Ctrl-C, which
 * ends the run at the next update with a checkpoint. */
#ifndef UG_TOOLS_TRAIN_CHECKPOINT_H
#define UG_TOOLS_TRAIN_CHECKPOINT_H

#include <signal.h>
#include <stdbool.h>

#include "train_options.h"

/* The checkpoint string holding the run's options. */
#define TRAIN_ARGS_KEY "ug-train.args"

/* argv[1..argc) without --resume (and its value) and --resume-override, one per line, for
 * TRAIN_ARGS_KEY; NULL when out of memory or an argument holds a newline.
 * free() it. */
char *train_join_args(int argc, char **argv);
/* The run's argv to parse on --resume: argv[0], then the options saved in
 * the checkpoint at path, then argv[1..) (which override them). NULL with
 * the reason on stderr. free() the array (one block). */
char **train_resume_args(const char *path, int argc, char **argv, int *out_argc);

/* The run's options into o: argv's, or with --resume the checkpoint's
 * and argv's over them. *kept (free()) is the list its checkpoints keep
 * (train_join_args); *resumed (free(), after o's last use: o points into
 * it) the merged arguments of a resumed run, else NULL. Returns a
 * TRAIN_OPTIONS_ value, or -1 with the reason on stderr when the
 * checkpoint could not be read or the options kept. */
int train_read_options(int argc, char **argv, train_options *o, char **kept, char ***resumed);

/* Ctrl-C (SIGINT), SIGTERM and SIGHUP set train_interrupt_signal (the
 * trainer's stop flag) to the signal instead of ending the process; a
 * second one ends it at once. 0 before one. */
extern volatile sig_atomic_t train_interrupt_signal;
void train_catch_interrupts(void);
/* Whether the file that --option writes (a checkpoint, trace or plot,
 * each replaced whole) can be saved at path: not a folder, device or
 * FIFO, and its folder takes a new file (one is made and removed). false
 * with the reason on stderr. */
bool train_check_output_file(const char *option, const char *path);

#endif
