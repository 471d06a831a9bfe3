/* Each process's pool figures, published for ug-smi: a file per process,
 * <dir>/<pid>.pool, in a folder only its user can enter ($XDG_RUNTIME_DIR/
 * unigrad, else /tmp/unigrad-<uid>, mode 0700, checked to be the user's own
 * folder and no link). Devices are listed from their opening to their
 * closing. The pool marks every change with a relaxed atomic store (no
 * lock, no system call on its path); a publisher thread, started at the
 * first device's opening, rewrites the file (a new file renamed over the
 * old) within a quarter of a second of a change, whatever the process does
 * meanwhile: a program whose allocations come in a burst and then stop
 * (a planned training step) is shown as it is, not as its first
 * allocation left it. The file is removed at exit. A killed process's
 * file stays: readers recognise it as stale (no such process, or one
 * started at another time) and remove it. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/monitor/internal.h"
#include "core/monitor/registry.h"
#include "unigrad/memory.h"

enum { MAX_DEVICES = 64 };
/* How often the publisher looks for a change: ug-smi's figure is at most
 * this late, and an idle process wakes this often (a load and a compare). */
static const long PUBLISH_EVERY_NS = 250000000;

/* The pool's hot path stores this and nothing else. */
static atomic_bool dirty;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the exit hook wakes the publisher to stop it */
    ug_device *devices[MAX_DEVICES]; /* open devices, added at open, removed at close */
    int count;
    bool published, exit_hook, fork_hooks, closing, publisher_running, wake_ready;
    pthread_t publisher;
    char path[512];
} state = {.lock = PTHREAD_MUTEX_INITIALIZER};
bool ug_registry_dir(char *dir, size_t len, char *why, size_t why_len)
{
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    if (runtime && runtime[0] == '/')
        snprintf(dir, len, "%s/unigrad", runtime);
    else
        snprintf(dir, len, "/tmp/unigrad-%ld", (long)getuid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, why_len, "cannot create %s: %s", dir, strerror(errno));
        return false;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        snprintf(why, why_len, "%s is not a folder of this user's alone (mode 0700)", dir);
        return false;
    }
    return true;
}

/* Field 22 of /proc/<pid>/stat: the process's start, which tells a
 * process apart from a later one with its number. */
static unsigned long long start_time(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = ug_monitor_open(path);
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long long start = 0;
    for (int field = 2; p && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (p)
        sscanf(p, "%llu", &start);
    return start;
}

/* Rewrites the file (lock held). Nothing once the exit has begun: the
 * devices may be gone, and the file must not come back after its removal. */
static void publish(void)
{
    atomic_store_explicit(&dirty, false, memory_order_relaxed); /* a change from now on: published next time */
    char dir[400], why[160];
    if (state.closing || !ug_registry_dir(dir, sizeof dir, why, sizeof why))
        return;
    snprintf(state.path, sizeof state.path, "%s/%ld.pool", dir, (long)getpid());
    char tmp[540], command[32] = "?";
    snprintf(tmp, sizeof tmp, "%s.tmp", state.path);
    FILE *comm = ug_monitor_open("/proc/self/comm"); /* the process's (its first thread's), from any thread */
    if (comm && fgets(command, sizeof command, comm))
        command[strcspn(command, "\n")] = '\0';
    if (comm)
        fclose(comm);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    fprintf(f, "unigrad-pool 1\npid %ld\nstart %llu\ncommand %s\n", (long)getpid(), start_time((long)getpid()),
            command);
    for (int i = 0; i < state.count; i++) {
        uint64_t shown[3]; /* not ug_memory_get_stats: the pool's lock is never taken under this one */
        ug_pool_shown(state.devices[i], shown);
        fprintf(f, "device %s %llu %llu %llu\n", ug_device_name(state.devices[i]), (unsigned long long)shown[0],
                (unsigned long long)shown[1], (unsigned long long)shown[2]);
    }
    bool written = fclose(f) == 0;
    if (written && rename(tmp, state.path) == 0)
        state.published = true;
    else
        unlink(tmp);
}

static void *publisher(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&state.lock);
    while (!state.closing) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += PUBLISH_EVERY_NS;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&state.wake, &state.lock, &until); /* early only at exit */
        if (atomic_load_explicit(&dirty, memory_order_relaxed))
            publish();
    }
    pthread_mutex_unlock(&state.lock);
    return NULL;
}

/* At exit, before the runtime's own exit handler frees the devices left
 * open (it registered first, so it runs after this): the publisher
 * stopped and joined (a library unloaded by dlclose runs this too, and its
 * code must not run on), then the file removed. */
static void at_exit(void)
{
    pthread_mutex_lock(&state.lock);
    state.closing = true;
    bool join = state.publisher_running;
    state.publisher_running = false;
    if (join)
        pthread_cond_broadcast(&state.wake);
    pthread_mutex_unlock(&state.lock);
    if (join)
        pthread_join(state.publisher, NULL);
    pthread_mutex_lock(&state.lock);
    if (state.published)
        unlink(state.path);
    state.published = false;
    pthread_mutex_unlock(&state.lock);
}

/* A fork: no lock held across it, so the child's is free. The child has
 * no publisher (threads do not survive fork) and the file is its
 * parent's, not to be removed at its exit; a device it opens starts its
 * own publisher. */
static void before_fork(void) { pthread_mutex_lock(&state.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&state.lock); }
static void after_fork_child(void)
{
    state.publisher_running = false;
    state.published = false;
    /* The condition variable may count the parent's publisher as a
     * waiter, which no thread here will ever undo: initialised afresh
     * before the child uses it, never signalled or destroyed as it is. */
    state.wake_ready = false;
    pthread_mutex_unlock(&state.lock);
}

/* Starts the publisher (lock held): its signals blocked, so the program's
 * handlers run in the program's threads. Without it (no thread to be had)
 * the file is written only at a device's closing and when the process
 * samples its devices itself. */
static void start_publisher(void)
{
    if (!state.wake_ready) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        state.wake_ready = pthread_cond_init(&state.wake, &attr) == 0;
        pthread_condattr_destroy(&attr);
    }
    if (!state.exit_hook) /* after device.c's exit handler, so before it at exit */
        state.exit_hook = atexit(at_exit) == 0;
    if (!state.fork_hooks)
        state.fork_hooks = pthread_atfork(before_fork, after_fork_parent, after_fork_child) == 0;
    if (!state.wake_ready || !state.exit_hook || !state.fork_hooks || state.publisher_running || state.closing)
        return;
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    state.publisher_running = pthread_create(&state.publisher, NULL, publisher, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

void ug_registry_changed(void) { atomic_store_explicit(&dirty, true, memory_order_relaxed); }

void ug_registry_add(ug_device *device)
{
    pthread_mutex_lock(&state.lock);
    if (state.count < MAX_DEVICES)
        state.devices[state.count++] = device;
    start_publisher(); /* listed from its pool's first change */
    pthread_mutex_unlock(&state.lock);
}

void ug_registry_remove(ug_device *device)
{
    pthread_mutex_lock(&state.lock);
    for (int i = 0; i < state.count; i++)
        if (state.devices[i] == device) {
            state.devices[i] = state.devices[--state.count];
            publish(); /* a closed device leaves the file at once */
            break;
        }
    pthread_mutex_unlock(&state.lock);
}

/* This process's own figures, current for its own samples. */
static void publish_own_changes(void)
{
    pthread_mutex_lock(&state.lock);
    if (atomic_load_explicit(&dirty, memory_order_relaxed) && state.count)
        publish();
    pthread_mutex_unlock(&state.lock);
}

/* One file's figures on id, or false when it is stale or not a pool file.
 * Anyone of this user can put anything in the folder: anything but a
 * regular file is passed over unopened, only as many lines as a real
 * file has are read, and the command loses its control characters (it
 * goes to terminals). */
static bool read_entry(const char *path, const char *id, ug_sample_process *p, bool *stale)
{
    *stale = false;
    FILE *f = ug_monitor_open(path);
    if (!f)
        return false;
    char line[256], device[64];
    long pid = 0;
    unsigned long long start = 0, in_use = 0, cached = 0, peak = 0;
    bool header = fgets(line, sizeof line, f) && !strncmp(line, "unigrad-pool 1", 14), found = false;
    *p = (ug_sample_process){0};
    for (int lines = 0; header && lines < 4 + 2 * MAX_DEVICES && fgets(line, sizeof line, f); lines++) {
        if (sscanf(line, "pid %ld", &pid) == 1 || sscanf(line, "start %llu", &start) == 1)
            continue;
        if (!strncmp(line, "command ", 8)) {
            snprintf(p->command, sizeof p->command, "%.*s", (int)strcspn(line + 8, "\n"), line + 8);
            for (char *c = p->command; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                    *c = '?';
        } else if (sscanf(line, "device %63s %llu %llu %llu", device, &in_use, &cached, &peak) == 4 &&
                   !strcmp(device, id)) {
            p->bytes_in_use = in_use;
            p->bytes_cached = cached;
            p->peak_bytes_in_use = peak;
            found = true;
        }
    }
    fclose(f);
    if (!header || pid <= 0 || pid > INT_MAX) /* pid_t's range: kill(-1, 0) would say "alive" */
        return false;
    bool alive = kill((pid_t)pid, 0) == 0 || errno == EPERM;
    *stale = !alive || start_time(pid) != start;
    p->pid = pid;
    return found && !*stale;
}

void ug_registry_processes(const char *id, ug_device_sample *s)
{
    char dir[400], why[160];
    s->process_count = 0;
    if (!ug_registry_dir(dir, sizeof dir, why, sizeof why))
        return;
    publish_own_changes();
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".pool") != 0)
            continue;
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ug_sample_process p;
        bool stale = false;
        if (read_entry(path, id, &p, &stale)) {
            if (s->process_count < UG_SAMPLE_MAX_PROCESSES)
                s->processes[s->process_count] = p;
            s->process_count++;
        } else if (stale) {
            unlink(path); /* a killed process's */
        }
    }
    if (d)
        closedir(d);
}
