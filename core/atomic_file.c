/* Atomic, durable file replacement (atomic_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/mix64.h"

enum { TRIES = 100 };

struct ug_atomic_file {
    int fd;       /* the temporary file; -1 once closed */
    bool failed;  /* a write failed: the contents are incomplete */
    uint64_t written;
    char *path;   /* as given */
    char *tmp;    /* path.tmp.XXXXXX */
    char *dir;    /* path's folder, "." for a bare name */
    char *from, *to; /* room for path.N, for the rotation */
};

/* Counts one UG_FAULT_FILE_IO event; true (with errno set to err, the
 * failure the real call would give) when this one must fail. */
static bool injected(int err)
{
    if (!ug_fault_hit(UG_FAULT_FILE_IO))
        return false;
    errno = err;
    return true;
}

/* What a failure before the final rename leaves at path, for messages. */
static void outcome(const char *path, char *buf, size_t len)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        snprintf(buf, len, "the previous %s is unchanged", path);
    else
        snprintf(buf, len, "%s was not created", path);
}

/* Frees f (closing and removing its temporary file) and returns UG_ERR_IO
 * naming the call that failed with errno err. */
static ug_status fail(ug_atomic_file *f, const char *call, const char *target, int err)
{
    char after[600];
    outcome(f->path, after, sizeof after);
    ug_status st = ug_set_error(UG_ERR_IO, "saving %s: %s of %s failed: %s; %s", f->path, call,
                                target, strerror(err), after);
    ug_atomic_abort(f);
    return st;
}

/* Six characters for the temporary name: process, time and a counter,
 * mixed, so concurrent writers (threads or processes) rarely collide, and
 * O_EXCL settles it when they do. */
static void random_suffix(char *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ug_mix64(((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec ^
                       ug_mix64((uint64_t)ts.tv_nsec) ^
                       ug_mix64(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)));
    for (int i = 0; i < 6; i++) {
        out[i] = alphabet[x % 62];
        x /= 62;
    }
}

ug_status ug_atomic_open(const char *path, ug_atomic_file **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_atomic_open: out is NULL");
    *out = NULL;
    size_t len = path ? strlen(path) : 0;
    if (!len || path[len - 1] == '/')
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving \"%s\": expected a file name",
                            path ? path : "(null)");
    /* One block: the struct, then path, tmp, dir and two rotation names. */
    size_t name = len + 16;
    ug_atomic_file *f = ug_malloc(sizeof *f + 5 * name);
    if (!f)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
    char *p = (char *)(f + 1);
    f->path = p;
    f->tmp = p + name;
    f->dir = p + 2 * name;
    f->from = p + 3 * name;
    f->to = p + 4 * name;
    f->fd = -1;
    f->failed = false;
    f->written = 0;
    memcpy(f->path, path, len + 1);
    const char *slash = strrchr(path, '/');
    if (!slash)
        strcpy(f->dir, ".");
    else if (slash == path)
        strcpy(f->dir, "/");
    else
        snprintf(f->dir, name, "%.*s", (int)(slash - path), path);

    for (int i = 0; i < TRIES; i++) {
        char suffix[7] = {0};
        random_suffix(suffix);
        snprintf(f->tmp, name, "%s.tmp.%s", path, suffix);
        /* open rather than mkstemp: mkstemp's mode is 0600, while a saved
         * file should get the mode of any new file (0666 less the umask),
         * which only the kernel applies without a race on umask(). */
        f->fd = injected(EACCES) ? -1
                                 : open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0) {
            *out = f;
            return UG_OK;
        }
        if (errno != EEXIST)
            break;
    }
    int err = errno;
    char after[600];
    outcome(path, after, sizeof after);
    ug_status st = ug_set_error(UG_ERR_IO, "saving %s: creating %s failed: %s; %s", path, f->tmp,
                                strerror(err), after);
    free(f);
    return st;
}

ug_status ug_atomic_write(ug_atomic_file *f, const void *data, size_t bytes)
{
    if (!f || f->fd < 0 || (bytes && !data))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_atomic_write: %s",
                            !f ? "no file" : f->fd < 0 ? "the file is closed" : "data is NULL");
    if (f->failed)
        return ug_set_error(UG_ERR_STATE, "saving %s: an earlier write failed", f->path);
    const char *p = data;
    while (bytes > 0) {
        /* Linux moves at most about 2 GiB per call; the loop takes the rest. */
        size_t chunk = bytes < ((size_t)1 << 30) ? bytes : (size_t)1 << 30;
        ssize_t n = injected(ENOSPC) ? -1 : write(f->fd, p, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* 0 from a regular file means no room was left. */
            int err = n < 0 ? errno : ENOSPC;
            f->failed = true;
            char after[600];
            outcome(f->path, after, sizeof after);
            return ug_set_error(UG_ERR_IO,
                                "saving %s: writing %zu bytes at byte %llu of %s failed: %s; %s",
                                f->path, bytes, (unsigned long long)f->written, f->tmp,
                                strerror(err), after);
        }
        p += n;
        bytes -= (size_t)n;
        f->written += (uint64_t)n;
    }
    return UG_OK;
}

void ug_atomic_abort(ug_atomic_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    /* Not counted as an event: the cleanup must not be made to fail, or
     * the tests could not check that no temporary file is left. */
    if (f->tmp[0])
        unlink(f->tmp);
    free(f);
}

/* Moves path.{keep-2} .. path.1 one place along, then links path as path.1
 * (the file system has no atomic "copy": a hard link keeps path present).
 * A missing file (fewer saves so far than keep) is skipped. */
static bool rotate(ug_atomic_file *f, int keep, const char **call, const char **target)
{
    for (int i = keep - 2; i >= 1; i--) {
        snprintf(f->from, strlen(f->path) + 16, "%s.%d", f->path, i);
        snprintf(f->to, strlen(f->path) + 16, "%s.%d", f->path, i + 1);
        if ((injected(EIO) || rename(f->from, f->to) != 0) && errno != ENOENT) {
            *call = "rename (keeping older copies)";
            *target = f->from;
            return false;
        }
    }
    snprintf(f->to, strlen(f->path) + 16, "%s.1", f->path);
    if ((injected(EIO) || unlink(f->to) != 0) && errno != ENOENT) {
        *call = "unlink (of the stale copy)";
        *target = f->to;
        return false;
    }
    if ((injected(EIO) || link(f->path, f->to) != 0) && errno != ENOENT) {
        *call = "link (keeping the previous copy)";
        *target = f->path;
        return false;
    }
    return true;
}

ug_status ug_atomic_commit(ug_atomic_file *f, int keep)
{
    if (!f)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_atomic_commit: no file");
    if (keep < 1 || keep > UG_ATOMIC_MAX_KEEP || f->failed || f->fd < 0) {
        ug_status st =
            f->failed ? ug_set_error(UG_ERR_STATE,
                                     "saving %s: an earlier write failed; nothing was replaced",
                                     f->path)
            : f->fd < 0 ? ug_set_error(UG_ERR_STATE, "saving %s: the file is closed", f->path)
                        : ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                       "saving %s: keep %d copies, expected 1 to %d", f->path,
                                       keep, UG_ATOMIC_MAX_KEEP);
        ug_atomic_abort(f);
        return st;
    }
    int fd = f->fd;
    if (injected(EIO) || fsync(fd) != 0)
        return fail(f, "fsync", f->tmp, errno);
    f->fd = -1;
    int rc = close(fd);
    if (injected(EIO))
        rc = -1;
    if (rc != 0)
        return fail(f, "close", f->tmp, errno);
    /* The folder is opened before anything at path moves, so failing to
     * open it leaves path as it was. */
    int dfd = injected(EACCES) ? -1 : open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return fail(f, "open of the folder", f->dir, errno);
    const char *call = "", *target = "";
    if (keep > 1 && !rotate(f, keep, &call, &target)) {
        int err = errno;
        close(dfd);
        return fail(f, call, target, err);
    }
    if (injected(EXDEV) || rename(f->tmp, f->path) != 0) {
        int err = errno;
        close(dfd);
        return fail(f, "rename", f->tmp, err);
    }
    /* Flushing the folder makes the rename durable. A file system that
     * cannot sync a folder (EINVAL, ENOTSUP) gives no more guarantee
     * anyway. */
    ug_status st = UG_OK;
    if (injected(EIO) || (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)) {
        int err = errno;
        st = ug_set_error(UG_ERR_IO,
                          "saving %s: fsync of the folder %s failed: %s; %s holds the new "
                          "contents, but a crash could still bring back the previous file",
                          f->path, f->dir, strerror(err), f->path);
    }
    close(dfd);
    f->tmp[0] = '\0'; /* renamed: nothing to remove */
    ug_atomic_abort(f);
    return st;
}
