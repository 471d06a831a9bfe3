/* ug-train's progress display. On a terminal one line is redrawn in place,
 * made to fit its width (asked again at each redraw); elsewhere (a file, a
 * pipe, a rank of mpirun, whose output mpirun passes through a
 * pseudo-terminal of its own into wherever its own goes) or on a terminal
 * under PROGRESS_MIN_WIDTH columns, plain lines: one every
 * PROGRESS_LINE_SECONDS and one at each epoch's end.
 *
 * samples/s counts the run's samples, every replica's in a data-parallel
 * run (progress_set_global), as the epoch's line does. */
#ifndef UG_TOOLS_TRAIN_PROGRESS_H
#define UG_TOOLS_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { PROGRESS_MIN_WIDTH = 40, PROGRESS_LINE_SECONDS = 30 };

typedef enum progress_mode { PROGRESS_OFF, PROGRESS_LINES, PROGRESS_LIVE } progress_mode;

typedef struct train_progress {
    progress_mode mode;
    int epoch, epochs;
    int64_t steps;          /* batches in the epoch */
    double start;           /* the epoch's, in progress_clock seconds */
    double last_draw;
    double last_line;       /* when the last plain line was printed (or the epoch started) */
    int64_t batch;          /* the run's batch, every replica's part of it; 0: count the samples given */
    int64_t epoch_samples;  /* the epoch's samples, every replica's */
    bool open;              /* a live line is on screen, not yet ended */
    int open_length;        /* its columns */
} train_progress;

/* Monotonic seconds. */
double progress_clock(void);

/* Off when quiet; live when stdout is a terminal (not mpirun's), else
 * plain lines. */
void progress_init(train_progress *p, bool quiet);
/* A data-parallel run: samples/s counts the run's samples, step x batch
 * (the global batch) up to epoch_samples, not the samples given to
 * progress_show (this replica's part). */
void progress_set_global(train_progress *p, int64_t batch, int64_t epoch_samples);
void progress_start_epoch(train_progress *p, int epoch, int epochs, int64_t steps);
/* Whether progress_show should be called after this step: about 4 times a
 * second live, every PROGRESS_LINE_SECONDS in lines (the caller then reads
 * the loss, which waits for the device). Never for the epoch's last step,
 * which progress_end_epoch shows. */
bool progress_due(const train_progress *p, int64_t step);
void progress_show(train_progress *p, int64_t step, int64_t samples, float loss);
/* The epoch's final state, and the end of its line. */
void progress_end_epoch(train_progress *p, int64_t step, int64_t samples, float loss);
/* Ends a live line so that other output (an error) starts on its own. */
void progress_break(train_progress *p);

/* The live line for a terminal of width columns: at most width - 1 of
 * them. The bar shrinks, then goes, then the rate, the time and the step
 * count; returns the line's length. final: the time taken instead of the
 * time left. */
size_t progress_compose(char *buf, size_t len, int width, int epoch, int epochs, int64_t step, int64_t steps,
                        float loss, double rate, double seconds, bool final);

#endif
