/* ug-train --profile (see train_profile.h). */
#include "train_profile.h"

#include <stdio.h>

#include "wrap.h"

enum { TOP_OPS = 15 };

ug_status train_profile_step(train_profile *tp, int64_t global_step, int64_t total)
{
    if (!tp->path || tp->reported)
        return UG_OK;
    if (!tp->profiler) {
        /* A short run starts sooner, so that it still records its steps. */
        int64_t start = total - tp->steps < tp->skip ? total - tp->steps : tp->skip;
        if (global_step < (start < 1 ? 1 : start))
            return UG_OK;
        tp->first = global_step + 1;
        return ug_profiler_start(tp->device, &tp->profiler);
    }
    if (global_step - tp->first + 1 < tp->steps || tp->last)
        return UG_OK;
    tp->last = global_step;
    return ug_profiler_stop(tp->profiler);
}

bool train_profile_ready(const train_profile *tp) { return tp->profiler && tp->last && !tp->reported; }

ug_status train_profile_report(train_profile *tp)
{
    if (!tp->path || tp->reported)
        return UG_OK;
    tp->reported = true;
    if (!tp->profiler) {
        printf("profile: the run ended before a step could be recorded\n");
        return UG_OK;
    }
    ug_status st = ug_profiler_stop(tp->profiler);
    if (st == UG_OK)
        st = ug_profiler_write_trace(tp->profiler, tp->path);
    if (st != UG_OK)
        return st;
    char steps[64], text[1024];
    if (!tp->last)
        snprintf(steps, sizeof steps, "steps %lld to the run's end", (long long)tp->first);
    else if (tp->last == tp->first)
        snprintf(steps, sizeof steps, "step %lld", (long long)tp->first);
    else
        snprintf(steps, sizeof steps, "steps %lld-%lld", (long long)tp->first, (long long)tp->last);
    snprintf(text, sizeof text, "%s on %s written to %s (open it in ui.perfetto.dev); top ops by device time:",
             steps, ug_device_name(tp->device), tp->path);
    print_wrapped(stdout, "profile: ", text);
    st = ug_profiler_print_table(tp->profiler, UG_PROFILE_BY_DEVICE_TIME, TOP_OPS, stdout);
    fflush(stdout);
    return st;
}

void train_profile_free(train_profile *tp)
{
    ug_profiler_free(tp->profiler);
    tp->profiler = NULL;
}
