/* ug-train's CSV log as a file: --csv's (a resumed run adds to its own),
 * or a temporary one that --plot draws from when --csv is not given; and
 * --plot's picture of it after each epoch. The rows are train_report.c's. */
#ifndef UG_TOOLS_TRAIN_LOG_H
#define UG_TOOLS_TRAIN_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "train_options.h"

typedef struct train_log {
    FILE *file;               /* NULL: no log */
    char path[4096];
    bool temporary;           /* removed by train_log_close */
} train_log;

/* Opens the log the options ask for (none without --csv and --plot), its
 * header written unless it is a resumed run's own. 0, or 1 with the
 * reason on stderr (a resumed run never appends to a file that is not a
 * log of this version). */
int train_log_open(const train_options *o, train_log *log);
/* --plot: the curves so far into png. A failure is a warning on stderr:
 * training goes on. */
void train_log_plot(train_log *log, const char *png, const char *device_name);
/* Closes the log (a temporary one removed): 0, or 1 with the reason on
 * stderr when the last rows could not be written. */
int train_log_close(train_log *log);

#endif
