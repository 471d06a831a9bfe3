/* The host's monotonic clock in seconds, for durations and timeouts. */
#ifndef UG_BASE_CLOCK_H
#define UG_BASE_CLOCK_H

#include <time.h>

static inline double ug_seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
