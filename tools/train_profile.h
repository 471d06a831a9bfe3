/* ug-train --profile: records a few steps of the run with the profiler
 * (profiler.h), writes their Chrome trace and prints the top ops. */
#ifndef UG_TOOLS_TRAIN_PROFILE_H
#define UG_TOOLS_TRAIN_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/unigrad.h"

typedef struct train_profile {
    const char *path;         /* NULL: no profiling */
    int64_t skip, steps;      /* steps run before recording, steps recorded */
    ug_device *device;
    ug_profiler *profiler;
    int64_t first, last;      /* the steps recorded (from 1) */
    bool reported;
} train_profile;

/* After each step (global_step from 1, of total in the run): starts
 * recording after skip steps (fewer when the run is short), stops after
 * steps more. */
ug_status train_profile_step(train_profile *tp, int64_t global_step, int64_t total);
/* Whether recording has stopped and the report is due. */
bool train_profile_ready(const train_profile *tp);
/* Stops recording if it runs (the run ended first), writes the trace and
 * prints the table of the top ops. */
ug_status train_profile_report(train_profile *tp);
void train_profile_free(train_profile *tp);

#endif
