/* Each process's pool figures, published for ug-smi: a file per process,
 * <dir>/<pid>.pool, in a folder only its user can enter ($XDG_RUNTIME_DIR/
 * unigrad, else /tmp/unigrad-<uid>, mode 0700, checked to be the user's own
 * folder and no link). Devices are listed from their opening to their
 * closing; the pool marks every change (an atomic flag: no lock on its
 * path), and the file is rewritten (a new file renamed over the old) at
 * most twice a second, when a later change or a wait for a device comes,
 * and removed at exit. A killed
 * process's file stays: readers recognise it as stale (no such process,
 * or one started at another time) and remove it. */
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
static const int64_t PUBLISH_EVERY_NS = 500000000;

/* The pool's hot path only stores dirty and reads the coarse clock; the
 * lock is taken when a publication is due. */
static atomic_bool dirty;
static atomic_llong next_due_ns;

static struct {
    pthread_mutex_t lock;
    ug_device *devices[MAX_DEVICES]; /* open devices, added at open, removed at close */
    int count;
    bool published, exit_hook;
    char path[512];
} state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

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

static void remove_file(void)
{
    pthread_mutex_lock(&state.lock);
    if (state.published)
        unlink(state.path);
    state.published = false;
    pthread_mutex_unlock(&state.lock);
}

/* Rewrites the file (lock held). */
static void publish(void)
{
    atomic_store(&dirty, false);
    atomic_store(&next_due_ns, coarse_ns() + PUBLISH_EVERY_NS);
    char dir[400], why[160];
    if (!ug_registry_dir(dir, sizeof dir, why, sizeof why))
        return;
    snprintf(state.path, sizeof state.path, "%s/%ld.pool", dir, (long)getpid());
    char tmp[540], command[32] = "?";
    snprintf(tmp, sizeof tmp, "%s.tmp", state.path);
    FILE *comm = ug_monitor_open("/proc/self/comm");
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
        ug_memory_stats stats;
        if (ug_memory_get_stats(state.devices[i], &stats) == UG_OK)
            fprintf(f, "device %s %llu %llu %llu\n", ug_device_name(state.devices[i]),
                    (unsigned long long)stats.bytes_in_use, (unsigned long long)stats.bytes_cached,
                    (unsigned long long)stats.peak_bytes_in_use);
    }
    bool written = fclose(f) == 0;
    if (written && rename(tmp, state.path) == 0) {
        state.published = true;
        if (!state.exit_hook)
            state.exit_hook = atexit(remove_file) == 0;
    } else {
        unlink(tmp);
    }
}

/* Publishes when a change waits and the time has come. */
static void publish_if_due(void)
{
    if (!atomic_load_explicit(&dirty, memory_order_relaxed) ||
        coarse_ns() < atomic_load_explicit(&next_due_ns, memory_order_relaxed))
        return;
    pthread_mutex_lock(&state.lock);
    if (atomic_load(&dirty) && coarse_ns() >= atomic_load(&next_due_ns))
        publish();
    pthread_mutex_unlock(&state.lock);
}

void ug_registry_changed(void)
{
    atomic_store_explicit(&dirty, true, memory_order_relaxed);
    publish_if_due();
}

void ug_registry_wait_done(void) { publish_if_due(); }

void ug_registry_add(ug_device *device)
{
    pthread_mutex_lock(&state.lock);
    if (state.count < MAX_DEVICES)
        state.devices[state.count++] = device;
    pthread_mutex_unlock(&state.lock);
}

void ug_registry_remove(ug_device *device)
{
    pthread_mutex_lock(&state.lock);
    for (int i = 0; i < state.count; i++)
        if (state.devices[i] == device) {
            state.devices[i] = state.devices[--state.count];
            atomic_store(&dirty, true);
            publish(); /* a closed device leaves the file at once */
            break;
        }
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
    ug_registry_wait_done(); /* this process's own figures, current */
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
