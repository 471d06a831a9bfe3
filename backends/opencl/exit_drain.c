/* Draining the open queues before the process's exit handlers run.
 *
 * POCL compiles a kernel for its launch in a thread of its own, with LLVM,
 * whose function-local statics register their destructors (atexit) when
 * first used: during that compile, after any handler of ours. A program
 * that returns from main with kernels queued has those destructors run
 * first (handlers run last-registered first) while the compiler thread
 * still uses them: SIGSEGV in POCL's compiler thread, every time.
 *
 * The calling thread's thread-local destructors run before every atexit
 * handler (glibc's exit: __call_tls_dtors, then the handlers), so each
 * thread that launches registers one that finishes every open queue. */
#include <stdbool.h>
#include <stdlib.h>

#include "backends/opencl/internal.h"

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static ug_bdev **open_devices;
static int open_count, open_capacity;

bool ug_opencl_open_list_add(ug_bdev *dev)
{
    pthread_mutex_lock(&open_lock);
    bool ok = true;
    if (open_count == open_capacity) {
        int capacity = open_capacity ? 2 * open_capacity : 4;
        ug_bdev **grown = realloc(open_devices, (size_t)capacity * sizeof *grown);
        ok = grown != NULL;
        if (ok) {
            open_devices = grown;
            open_capacity = capacity;
        }
    }
    if (ok)
        open_devices[open_count++] = dev;
    pthread_mutex_unlock(&open_lock);
    return ok;
}

void ug_opencl_open_list_remove(ug_bdev *dev)
{
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < open_count; i++)
        if (open_devices[i] == dev)
            open_devices[i] = open_devices[--open_count];
    if (!open_count) {
        free(open_devices);
        open_devices = NULL;
        open_capacity = 0;
    }
    pthread_mutex_unlock(&open_lock);
}

static void finish_open_queues(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < open_count; i++)
        ug_opencl_finish_all(open_devices[i]);
    pthread_mutex_unlock(&open_lock);
}

#ifdef __GLIBC__
/* glibc's registration of a thread-local destructor (what C++ thread_local
 * objects use), tied to this library so it is never called once unloaded. */
extern int __cxa_thread_atexit_impl(void (*func)(void *), void *obj, void *dso_symbol);
extern void *__dso_handle;

void ug_opencl_drain_at_exit(void)
{
    static _Thread_local bool registered;
    if (!registered)
        registered = __cxa_thread_atexit_impl(finish_open_queues, NULL, &__dso_handle) == 0;
}
#else
/* Elsewhere an atexit handler, registered at each thread's first launch:
 * the best there is without thread-local destructors at exit. */
static void finish_at_exit(void) { finish_open_queues(NULL); }

void ug_opencl_drain_at_exit(void)
{
    static _Thread_local bool registered;
    if (!registered)
        registered = atexit(finish_at_exit) == 0;
}
#endif
