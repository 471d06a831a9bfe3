/* Atomic, durable file replacement (atomic_file.h). */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/mix64.h"
#include "base/regular_file.h"
#include "base/text.h"

/* Attempts at a free temporary name; the characters ".tmp.XXXXXX" add. */
enum { TRIES = 100, TEMP_SUFFIX = 11 };

struct ug_atomic_file {
    int fd;       /* the temporary file; -1 once closed */
    int lock_fd;  /* the same file, locked while it exists: see remove_stale_temporaries */
    bool failed;  /* a write failed: the contents are incomplete */
    uint64_t written;
    char *path;   /* as given, or the file a symbolic link given points to */
    char *tmp;    /* tmp_prefix.tmp.XXXXXX */
    char *dir;    /* path's folder, "." for a bare name */
    char *tmp_prefix; /* path, its name cut to leave room for ".tmp.XXXXXX" */
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

/* Removes the temporary files of earlier saves of this path that nobody
 * writes any more (a writer killed with SIGKILL leaves one): a writer
 * holds a lock on its temporary file until it is renamed or removed, so
 * one whose lock can be taken is abandoned. Best effort, not counted as
 * file calls: a failure here is no reason to refuse the save. */
static void remove_stale_temporaries(const char *dir, const char *prefix, size_t prefix_len)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char full[PATH_MAX];
    for (struct dirent *e; (e = readdir(d));) {
        if (strlen(e->d_name) != prefix_len + TEMP_SUFFIX || strncmp(e->d_name, prefix, prefix_len) != 0 ||
            strncmp(e->d_name + prefix_len, ".tmp.", 5) != 0 ||
            snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full)
            continue;
        int fd = open(full, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat held, named;
        /* Still the same file under that name once locked: then remove it. */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 && S_ISREG(held.st_mode) &&
            held.st_nlink > 0 && lstat(full, &named) == 0 && named.st_ino == held.st_ino &&
            named.st_dev == held.st_dev)
            unlink(full);
        close(fd);
    }
    closedir(d);
}

/* Creates and locks a fresh temporary file; false with errno set when it
 * cannot be created. A file removed by another save's cleanup between
 * its creation and the lock (no links left) is given up for a new name. */
static bool create_temporary(ug_atomic_file *f, size_t name)
{
    for (int i = 0; i < TRIES; i++) {
        char suffix[7] = {0};
        random_suffix(suffix);
        snprintf(f->tmp, name, "%s.tmp.%s", f->tmp_prefix, suffix);
        /* open rather than mkstemp: mkstemp's mode is 0600, while a saved
         * file should get the mode of any new file (0666 less the umask),
         * which only the kernel applies without a race on umask(). */
        f->fd = injected(EACCES) ? -1 : open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd < 0 && errno == EEXIST)
            continue;
        if (f->fd < 0)
            return false;
        /* The lock is held on a descriptor of its own, kept open until the
         * rename: the written one is closed before it. */
        struct stat st;
        f->lock_fd = open(f->tmp, O_RDONLY | O_CLOEXEC);
        if (f->lock_fd >= 0 && flock(f->lock_fd, LOCK_EX) == 0 && fstat(f->lock_fd, &st) == 0 && st.st_nlink > 0)
            return true;
        close(f->fd);
        if (f->lock_fd >= 0)
            close(f->lock_fd);
        f->fd = f->lock_fd = -1;
    }
    errno = EEXIST;
    return false;
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
    /* Through a symbolic link: the file it points to is replaced, and the
     * link stays. */
    char *resolved = NULL;
    struct stat link;
    if (lstat(path, &link) == 0 && S_ISLNK(link.st_mode)) {
        resolved = realpath(path, NULL);
        if (!resolved)
            return ug_set_error(UG_ERR_IO, "saving %s: a symbolic link whose target cannot be resolved: %s",
                                path, strerror(errno));
        path = resolved;
        len = strlen(path);
    }
    /* Only a regular file is replaced: renaming over a FIFO, a device
     * (/dev/null, as root) or a socket would delete it for everyone. */
    struct stat target;
    if (stat(path, &target) == 0 && !S_ISREG(target.st_mode)) {
        ug_status st = ug_set_error(UG_ERR_IO, "saving %s: it is %s, not a regular file; nothing was written: "
                                    "give the name of a file to create or replace",
                                    path, ug_file_kind(target.st_mode));
        free(resolved);
        return st;
    }
    /* One block: the struct, then path, tmp, dir, the temporary names'
     * prefix and two rotation names. */
    size_t name = len + 16;
    ug_atomic_file *f = ug_malloc(sizeof *f + 6 * name);
    if (!f) {
        ug_status st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
        free(resolved);
        return st;
    }
    char *p = (char *)(f + 1);
    f->path = p;
    f->tmp = p + name;
    f->dir = p + 2 * name;
    f->tmp_prefix = p + 3 * name;
    f->from = p + 4 * name;
    f->to = p + 5 * name;
    f->fd = f->lock_fd = -1;
    f->failed = false;
    f->written = 0;
    memcpy(f->path, path, len + 1);
    free(resolved);
    const char *slash = strrchr(f->path, '/'), *base = slash ? slash + 1 : f->path;
    if (!slash)
        strcpy(f->dir, ".");
    else if (slash == f->path)
        strcpy(f->dir, "/");
    else
        snprintf(f->dir, name, "%.*s", (int)(slash - f->path), f->path);
    /* The temporary name must fit wherever the final name does: a long
     * name is cut (at a character boundary) to leave room for ".tmp.XXXXXX". */
    long name_max = pathconf(f->dir, _PC_NAME_MAX);
    size_t room = name_max > TEMP_SUFFIX ? (size_t)name_max - TEMP_SUFFIX : 1;
    size_t keep_chars = ug_utf8_prefix(base, room);
    if (!keep_chars) /* not UTF-8 there: cut at the byte */
        keep_chars = room;
    snprintf(f->tmp_prefix, name, "%.*s", (int)(base - f->path + (ptrdiff_t)keep_chars), f->path);
    remove_stale_temporaries(f->dir, base, keep_chars);
    if (create_temporary(f, name)) {
        *out = f;
        return UG_OK;
    }
    int err = errno;
    char after[600];
    outcome(f->path, after, sizeof after);
    ug_status st = ug_set_error(UG_ERR_IO, "saving %s: creating %s failed: %s; %s", f->path, f->tmp,
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
    if (f->lock_fd >= 0)
        close(f->lock_fd); /* after the unlink: no cleanup takes it while it is named */
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

/* Keeping copies moves several names (rotate), which another process
 * saving the same path must not interleave with: the folder is locked
 * for those few calls. Waits up to 10 s for another holder; false if it
 * still holds it then. A file system that cannot lock goes without. */
static bool lock_folder(int dfd)
{
    for (int waited_ms = 0;; waited_ms++) {
        if (flock(dfd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
            return true;
        if (waited_ms == 10000)
            return false;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
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
    if (keep > 1 && !lock_folder(dfd)) {
        close(dfd);
        return fail(f, "lock (another process has been saving there for 10 s) of the folder", f->dir,
                    EWOULDBLOCK);
    }
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
