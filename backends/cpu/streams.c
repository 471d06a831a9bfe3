/* Streams and events of the CPU backend.
 *
 * The default stream runs on the calling thread: a kernel has finished when
 * its entry returns. A side stream is an ordered task queue with a thread
 * of its own: while a side stream is bound (stream_bind, thread-local),
 * kernels and transfers are queued on it with a copy of their arguments
 * and run there in order, each still spreading over the device's
 * worker threads when they are free. Events carry sequence numbers: recording
 * takes the next one, and the event has completed when the marker of its
 * latest record has run; the clock is CLOCK_MONOTONIC. A task's failure is
 * kept, with its message, and reported by the next wait on the stream. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/internal.h"
#include "base/fault.h"

typedef enum task_kind { TASK_CALL, TASK_MARKER, TASK_WAIT } task_kind;

typedef struct task {
    struct task *next;
    task_kind kind;
    ug_status (*call)(ug_bdev *dev, const void *args); /* TASK_CALL */
    ug_bevent *event;                                  /* TASK_MARKER, TASK_WAIT */
    uint64_t seq;
    _Alignas(max_align_t) unsigned char args[];
} task;

struct ug_bevent {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    uint64_t recorded, completed; /* sequence numbers */
    int64_t completed_ns;
    int refs; /* the owner's and each queued marker's; guarded by lock */
};

struct ug_bstream {
    ug_bdev *dev;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    task *head, *tail;
    bool busy, stop;
    ug_status error;    /* the first failure since the last wait */
    char message[512];
    ug_bstream *next;   /* the device's list */
};

static _Thread_local ug_bstream *bound;
/* Side streams bound on any thread: while none is, entries run at once
 * without reaching the thread-local (a call in a shared library). */
static atomic_int bindings;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- events ---- */

static void event_release(ug_bevent *e)
{
    pthread_mutex_lock(&e->lock);
    bool last = --e->refs == 0;
    pthread_mutex_unlock(&e->lock);
    if (!last)
        return;
    pthread_cond_destroy(&e->changed);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static void event_complete(ug_bevent *e, uint64_t seq)
{
    pthread_mutex_lock(&e->lock);
    if (seq > e->completed) {
        e->completed = seq;
        e->completed_ns = now_ns();
    }
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->lock);
}

static void event_wait_for(ug_bevent *e, uint64_t seq)
{
    pthread_mutex_lock(&e->lock);
    while (e->completed < seq)
        pthread_cond_wait(&e->changed, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

ug_status ug_cpu_event_create(ug_bdev *dev, bool timing, ug_bevent **out)
{
    (void)dev;
    (void)timing; /* the host clock costs nothing to read */
    ug_bevent *e = ug_calloc(1, sizeof *e);
    if (!e)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for an event");
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->changed, NULL);
    e->refs = 1;
    *out = e;
    return UG_OK;
}

void ug_cpu_event_destroy(ug_bdev *dev, ug_bevent *event)
{
    (void)dev;
    if (event)
        event_release(event);
}

ug_status ug_cpu_event_query(ug_bdev *dev, ug_bevent *e, bool *done)
{
    (void)dev;
    pthread_mutex_lock(&e->lock);
    *done = e->completed >= e->recorded;
    pthread_mutex_unlock(&e->lock);
    return UG_OK;
}

ug_status ug_cpu_event_elapsed(ug_bdev *dev, ug_bevent *start, ug_bevent *end, int64_t *ns)
{
    (void)dev;
    pthread_mutex_lock(&start->lock);
    int64_t t0 = start->completed_ns;
    pthread_mutex_unlock(&start->lock);
    pthread_mutex_lock(&end->lock);
    int64_t t1 = end->completed_ns;
    pthread_mutex_unlock(&end->lock);
    *ns = t1 - t0;
    return UG_OK;
}

/* The memory is the host's: its address, and no native stream. */
ug_status ug_cpu_native(ug_bdev *dev, ug_mem mem, void **address, void **stream)
{
    (void)dev;
    *address = mem;
    *stream = NULL;
    return UG_OK;
}

/* ---- side streams ---- */

static void run_task(ug_bstream *s, task *t)
{
    if (t->kind == TASK_MARKER) {
        event_complete(t->event, t->seq);
        event_release(t->event);
        return;
    }
    if (t->kind == TASK_WAIT) {
        event_wait_for(t->event, t->seq);
        event_release(t->event);
        return;
    }
    ug_status st = t->call(s->dev, t->args);
    if (st != UG_OK) {
        pthread_mutex_lock(&s->lock);
        if (s->error == UG_OK) {
            s->error = st;
            snprintf(s->message, sizeof s->message, "%s", ug_cpu_host->last_error());
        }
        pthread_mutex_unlock(&s->lock);
    }
}

static void *stream_main(void *arg)
{
    ug_bstream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->work, &s->lock);
        if (!s->head)
            break; /* stopping with nothing left */
        task *t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&s->lock);
        run_task(s, t);
        free(t);
        pthread_mutex_lock(&s->lock);
        s->busy = false;
        if (!s->head)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void push(ug_bstream *s, task *t)
{
    t->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
}

static task *new_task(task_kind kind, size_t args_bytes)
{
    task *t = ug_calloc(1, sizeof *t + args_bytes);
    if (t)
        t->kind = kind;
    return t;
}

static ug_status no_task_memory(void)
{
    return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory queueing work on a stream");
}

ug_status ug_cpu_stream_create(ug_bdev *dev, ug_bstream **out)
{
    ug_bstream *s = ug_calloc(1, sizeof *s);
    if (!s)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory for a stream");
    s->dev = dev;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    int rc = pthread_create(&s->thread, NULL, stream_main, s);
    if (rc != 0) {
        pthread_cond_destroy(&s->idle);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: pthread_create for a stream failed: %s",
                            strerror(rc));
    }
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_PUSH(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    *out = s;
    return UG_OK;
}

/* Waits until the stream has run everything queued; returns (and clears)
 * the first failure. */
static ug_status drain(ug_bstream *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->head || s->busy)
        pthread_cond_wait(&s->idle, &s->lock);
    ug_status st = s->error;
    char message[sizeof s->message];
    memcpy(message, s->message, sizeof message);
    s->error = UG_OK;
    pthread_mutex_unlock(&s->lock);
    if (st != UG_OK)
        return UG_CPU_ERROR(st, "work queued on a stream failed: %s", message);
    return UG_OK;
}

void ug_cpu_stream_destroy(ug_bdev *dev, ug_bstream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&dev->streams_lock);
    UG_STREAM_LIST_REMOVE(&dev->streams, s);
    pthread_mutex_unlock(&dev->streams_lock);
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL); /* runs what is queued first */
    if (bound == s)
        ug_cpu_stream_bind(dev, NULL);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void ug_cpu_stream_bind(ug_bdev *dev, ug_bstream *stream)
{
    (void)dev;
    if (stream && !bound)
        atomic_fetch_add(&bindings, 1);
    else if (!stream && bound)
        atomic_fetch_sub(&bindings, 1);
    bound = stream;
}

ug_status ug_cpu_stream_synchronize(ug_bdev *dev, ug_bstream *stream)
{
    (void)dev;
    return stream ? drain(stream) : UG_OK; /* the default stream has finished already */
}

ug_status ug_cpu_synchronize(ug_bdev *dev)
{
    ug_status first = UG_OK;
    pthread_mutex_lock(&dev->streams_lock);
    for (ug_bstream *s = dev->streams; s; s = s->next) {
        ug_status st = drain(s);
        if (first == UG_OK)
            first = st;
    }
    pthread_mutex_unlock(&dev->streams_lock);
    return first;
}

ug_status ug_cpu_event_record(ug_bdev *dev, ug_bevent *e, ug_bstream *stream)
{
    (void)dev;
    task *t = stream ? new_task(TASK_MARKER, 0) : NULL;
    if (stream && !t)
        return no_task_memory();
    pthread_mutex_lock(&e->lock);
    uint64_t seq = ++e->recorded;
    if (t)
        e->refs++;
    pthread_mutex_unlock(&e->lock);
    if (!stream) {
        event_complete(e, seq);
        return UG_OK;
    }
    t->event = e;
    t->seq = seq;
    push(stream, t);
    return UG_OK;
}

ug_status ug_cpu_event_wait(ug_bdev *dev, ug_bstream *stream, ug_bevent *e)
{
    (void)dev;
    pthread_mutex_lock(&e->lock);
    uint64_t seq = e->recorded;
    pthread_mutex_unlock(&e->lock);
    if (!stream) { /* the default stream is the calling thread */
        event_wait_for(e, seq);
        return UG_OK;
    }
    task *t = new_task(TASK_WAIT, 0);
    if (!t)
        return no_task_memory();
    pthread_mutex_lock(&e->lock);
    e->refs++;
    pthread_mutex_unlock(&e->lock);
    t->event = e;
    t->seq = seq;
    push(stream, t);
    return UG_OK;
}

ug_status ug_cpu_event_synchronize(ug_bdev *dev, ug_bevent *e)
{
    return ug_cpu_event_wait(dev, NULL, e);
}

/* ---- queued entries ---- */

bool ug_cpu_queue_bound(void)
{
    return atomic_load_explicit(&bindings, memory_order_relaxed) && bound != NULL;
}

ug_status ug_cpu_queue_call(ug_status (*call)(ug_bdev *, const void *), const void *args,
                            size_t bytes, bool blocking)
{
    ug_bstream *s = bound;
    task *t = new_task(TASK_CALL, bytes);
    if (!t)
        return no_task_memory();
    t->call = call;
    memcpy(t->args, args, bytes);
    push(s, t);
    return blocking ? drain(s) : UG_OK;
}
