/* A rank's communication thread: the side stream of engines that stage
 * tensors through host memory (in-process, MPI). Collectives queued on it
 * run in order, each once the device has written its tensor (an event of
 * the compute stream), while the rank's own thread goes on queueing
 * compute: data-parallel training reduces a gradient bucket this way as
 * soon as backward has finished it.
 *
 * Every rank must issue its collectives in one order, so the rank's thread
 * calls none while the queue holds any: comm.c drains it first. The thread
 * stages on a side stream of its own, so its transfers wait for the event
 * only, not for the compute queued after it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "unigrad/stream.h"

enum { QUEUE = 256 };

typedef struct side_job {
    int bucket;
    ug_event *ready;
    comm_timing *timing; /* filled when done; may be NULL */
} side_job;

struct comm_side {
    ug_comm *comm;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    side_job jobs[QUEUE];
    int head, count;     /* queued and not finished */
    bool quit;
    ug_status failed;    /* the first failure, and its message */
    char why[512];
    float *staging;
    size_t staging_floats;
};

static ug_status run_job(comm_side *s, const side_job *job)
{
    UG_TRY(ug_event_synchronize(job->ready));
    const double start = ug_seconds_now();
    UG_TRY(ug_comm_reduce_bucket(s->comm, job->bucket, &s->staging, &s->staging_floats));
    if (job->timing)
        *job->timing = (comm_timing){start, ug_seconds_now()};
    return UG_OK;
}

static void *side_main(void *arg)
{
    comm_side *s = arg;
    ug_stream *stream = NULL;
    ug_status made = ug_stream_create(s->comm->device, &stream);
    if (made == UG_OK)
        made = ug_stream_set_current(s->comm->device, stream);
    char made_why[512];
    snprintf(made_why, sizeof made_why, "%s", made == UG_OK ? "" : ug_last_error());
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->count && !s->quit)
            pthread_cond_wait(&s->changed, &s->lock);
        if (!s->count)
            break;
        side_job job = s->jobs[s->head];
        const bool skip = s->failed != UG_OK; /* the group is broken: the rest would fail too */
        pthread_mutex_unlock(&s->lock);
        ug_status st = made;
        if (st == UG_OK && !skip)
            st = run_job(s, &job);
        const char *why = made != UG_OK ? made_why : ug_last_error();
        pthread_mutex_lock(&s->lock);
        if (st != UG_OK && s->failed == UG_OK) {
            s->failed = st;
            snprintf(s->why, sizeof s->why, "%s", why);
        }
        s->head = (s->head + 1) % QUEUE;
        s->count--;
        pthread_cond_broadcast(&s->changed);
    }
    pthread_mutex_unlock(&s->lock);
    ug_stream_free(stream);
    return NULL;
}

static ug_status start(ug_comm *c)
{
    comm_side *s = ug_calloc(1, sizeof *s);
    if (!s)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm: out of host memory for the communication thread");
    s->comm = c;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (pthread_create(&s->thread, NULL, side_main, s) != 0) {
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return ug_set_error(UG_ERR_BACKEND, "ug_comm: could not start the communication thread");
    }
    c->side = s;
    return UG_OK;
}

ug_status ug_comm_side_submit(ug_comm *c, int bucket, ug_event *ready, comm_timing *timing)
{
    if (!c->side)
        UG_TRY(start(c));
    comm_side *s = c->side;
    pthread_mutex_lock(&s->lock);
    while (s->count == QUEUE) /* the thread is behind: wait for a place */
        pthread_cond_wait(&s->changed, &s->lock);
    s->jobs[(s->head + s->count) % QUEUE] = (side_job){bucket, ready, timing};
    s->count++;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    return UG_OK;
}

ug_status ug_comm_side_drain(ug_comm *c)
{
    comm_side *s = c->side;
    if (!s)
        return UG_OK;
    pthread_mutex_lock(&s->lock);
    while (s->count)
        pthread_cond_wait(&s->changed, &s->lock);
    ug_status st = s->failed;
    char why[512];
    snprintf(why, sizeof why, "%s", s->why);
    s->failed = UG_OK;
    pthread_mutex_unlock(&s->lock);
    return st == UG_OK ? UG_OK : ug_set_error(st, "%s", why);
}

void ug_comm_side_stop(ug_comm *c)
{
    comm_side *s = c->side;
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->quit = true;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    ug_comm_free_staging(c, s->staging);
    free(s);
    c->side = NULL;
}
