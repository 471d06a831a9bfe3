/* A profiler's recording, shared by the recorder (profiler.c), the Chrome
 * trace writer (trace.c) and the summary (summary.c). */
#ifndef UG_CORE_PROFILE_RECORDING_H
#define UG_CORE_PROFILE_RECORDING_H

#include "core/profile/hooks.h"
#include "core/profile/kernel_cost.h"
#include "unigrad/profiler.h"

enum { PROFILE_MAX_DEVICES = 32, PROFILE_MAX_STREAMS = 16 };

typedef enum record_kind {
    RECORD_KERNEL,
    RECORD_TRANSFER,
    RECORD_WAIT,    /* the host waiting for a device: host times only */
    RECORD_RANGE,   /* ug_profiler_range_push .. pop */
    RECORD_MEMORY   /* the pool's counters: host_start only */
} record_kind;

typedef struct profile_record {
    record_kind kind;
    int device;                 /* index in the profiler's devices; -1: none */
    int stream;
    int thread;                 /* the host thread's number, from 1 */
    int depth;                  /* RECORD_RANGE: ranges open around it on its thread */
    char name[144];
    const char *family;         /* a static string */
    ug_dtype dtype;
    char shape[48];             /* RECORD_KERNEL: from its arguments; RECORD_WAIT: the device */
    double flops, bytes;
    int64_t host_start, host_end;     /* ns since the profiler started; end -1: still open */
    int64_t device_start, device_end; /* the same clock; -1: not known */
    int64_t wait_start;         /* RECORD_TRANSFER: from then to device_start it waited in its
                                 * queue (queued at host_start, cut after its track's previous
                                 * wait); -1: it did not */
    ug_bevent *start_event, *end_event;
    uint64_t in_use, cached, peak;    /* RECORD_MEMORY */
} profile_record;

typedef struct profile_device {
    ug_device *device;          /* retained while recording */
    char id[32];
    char description[176];      /* "cpu: AMD EPYC 7B13 (2 threads)" */
    ug_bevent *base;            /* recorded at host time base_ns */
    int64_t base_ns;
    /* The device's tracks: [0] the default stream (NULL) as the first
     * host thread using it queues to it; other threads' work on the default
     * stream goes to tracks of their own (on the CPU it runs on them,
     * alongside), side streams to one track each. */
    ug_bstream *streams[PROFILE_MAX_STREAMS];
    int stream_threads[PROFILE_MAX_STREAMS]; /* the default stream's: the host thread; else 0 */
    int stream_count;
    ug_bevent **spare;          /* timing events made ahead */
    int spare_count, spare_capacity;
} profile_device;

/* A summary row (ug_profile_op) with its own copies of the strings. */
typedef struct profile_row {
    char name[144];
    const char *family;
    int device;
    bool range;
    int64_t calls, device_ns, host_ns;
    double flops, bytes;
} profile_row;

struct ug_profiler {
    ug_device *only;            /* NULL: every device */
    bool closing;               /* stopping: launches begun still end, nothing new starts */
    bool stopped;
    uint64_t generation;        /* tells this profiler's open ranges from an earlier one's */
    int64_t start_ns;           /* host clock at start */
    int64_t stop_ns;            /* since start */
    profile_device devices[PROFILE_MAX_DEVICES];
    int device_count;
    profile_record *records;
    size_t count, capacity;
    uint64_t dropped;           /* records past the cap, counted only */
    int threads;                /* the highest host thread number seen */
    profile_row *rows;          /* after stop: ops, then ranges */
    int row_count, op_rows;
    int *sorted[3];             /* row indices per ug_profile_order, ops then ranges */
};

/* summary.c: the rows of a stopped profiler. */
ug_status ug_profile_summarize(ug_profiler *p);

#endif
