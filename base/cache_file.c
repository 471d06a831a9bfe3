/* Cache files: see cache_file.h. */
#include "base/cache_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/fault.h"
#include "base/regular_file.h"

typedef struct cache_header {
    char magic[8];
    uint64_t key_bytes;
    uint64_t data_bytes;
    uint64_t checksum;
} cache_header;

uint64_t ug_fnv1a(uint64_t hash, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; ++i) {
        hash ^= p[i];
        hash *= 0x100000001b3ull;
    }
    return hash;
}

uint64_t ug_fnv1a_str(uint64_t hash, const char *s)
{
    return ug_fnv1a(hash, s, strlen(s) + 1);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Creates base/sub (sub may hold one '/') below an existing base, never
 * the base itself (a missing $HOME is not ours to create); true when the
 * result is a writable directory. */
static bool make_below(const char *base, const char *sub, char *out, size_t len)
{
    if (!is_dir(base) || snprintf(out, len, "%s/%s", base, sub) >= (int)len)
        return false;
    for (char *p = out + strlen(base) + 1; *p; ++p) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(out, 0700) != 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return false;
    return is_dir(out) && access(out, W_OK | X_OK) == 0;
}

static bool cache_dir(char *out, size_t len)
{
    /* XDG: a relative or empty $XDG_CACHE_HOME is invalid and ignored; a
     * missing one is created when its parent exists. */
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') {
        if (!is_dir(xdg))
            mkdir(xdg, 0700); /* one level: fails harmlessly without a parent */
        if (make_below(xdg, "unigrad", out, len))
            return true;
    }
    const char *home = getenv("HOME");
    return home && home[0] == '/' && make_below(home, ".cache/unigrad", out, len);
}

bool ug_cache_path(const char *prefix, const char *key, size_t key_len, const char *suffix,
                   char *out, size_t len)
{
    char dir[PATH_MAX];
    if (!cache_dir(dir, sizeof dir))
        return false;
    int n = snprintf(out, len, "%s/%s-%016llx%s", dir, prefix,
                     (unsigned long long)ug_fnv1a(UG_FNV1A_BASIS, key, key_len), suffix);
    return n > 0 && (size_t)n < len;
}

static uint64_t checksum(const char *key, size_t key_len, const void *data, size_t size)
{
    return ug_fnv1a(ug_fnv1a(UG_FNV1A_BASIS, key, key_len), data, size);
}

ug_cache_result ug_cache_load(const char *path, const char magic[8], const char *key,
                              size_t key_len, size_t max_bytes, unsigned char **data,
                              size_t *size, char *why, size_t why_len)
{
    *data = NULL;
    *size = 0;
    /* Anything at the path but a regular file (a FIFO would block the
     * open, or every read, until some writer came) is refused, not read.
     * No file is the usual case and says nothing (nor sets the thread's
     * message). */
    struct stat sb;
    if (stat(path, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return UG_CACHE_MISSING;
    int fd = -1;
    FILE *f = NULL;
    if (ug_open_regular_file(path, "a cache file", &fd, NULL) != UG_OK ||
        !(f = fdopen(fd, "rb"))) {
        if (fd >= 0) {
            snprintf(why, why_len, "%s: fdopen failed: %s", path, strerror(errno));
            close(fd);
        } else {
            snprintf(why, why_len, "%s", ug_last_error());
        }
        return UG_CACHE_DAMAGED;
    }
    cache_header h;
    const char *problem = NULL;
    char *stored_key = NULL;
    unsigned char *bytes = NULL;
    if (fread(&h, sizeof h, 1, f) != 1)
        problem = "shorter than its header";
    else if (memcmp(h.magic, magic, 8) != 0)
        problem = "not a file of this kind (wrong magic)";
    else if (h.key_bytes != key_len || h.data_bytes > max_bytes)
        problem = h.key_bytes != key_len ? "written for another device, driver or version"
                                         : "larger than any such file";
    else if (!(stored_key = ug_malloc(key_len + 1)) ||
             !(bytes = ug_malloc((size_t)h.data_bytes + 1)))
        problem = "too large to read (out of host memory)";
    else if (fread(stored_key, 1, key_len, f) != key_len ||
             fread(bytes, 1, (size_t)h.data_bytes, f) != (size_t)h.data_bytes ||
             fgetc(f) != EOF)
        problem = "truncated or with bytes past its end";
    else if (memcmp(stored_key, key, key_len) != 0)
        problem = "written for another device, driver or version";
    else if (checksum(key, key_len, bytes, (size_t)h.data_bytes) != h.checksum)
        problem = "damaged (its checksum does not match)";
    fclose(f);
    free(stored_key);
    if (problem) {
        free(bytes);
        snprintf(why, why_len, "%s is %s", path, problem);
        return UG_CACHE_DAMAGED;
    }
    bytes[h.data_bytes] = '\0';
    *data = bytes;
    *size = (size_t)h.data_bytes;
    return UG_CACHE_HIT;
}

ug_status ug_cache_store(const char *path, const char magic[8], const char *key, size_t key_len,
                         const void *data, size_t size)
{
    cache_header h;
    memcpy(h.magic, magic, 8);
    h.key_bytes = key_len;
    h.data_bytes = size;
    h.checksum = checksum(key, key_len, data, size);
    /* A FIFO, socket or device at the path is no cache file of ours (the
     * reader refuses it): it goes, as a damaged file is overwritten, so the
     * work is not redone by every later process. The atomic writer would
     * refuse to replace it, rightly for a path a user named. */
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode) && !S_ISDIR(sb.st_mode))
        unlink(path);
    ug_atomic_file *f = NULL;
    ug_status st = ug_atomic_open(path, &f);
    if (st != UG_OK)
        return st;
    if ((st = ug_atomic_write(f, &h, sizeof h)) != UG_OK ||
        (st = ug_atomic_write(f, key, key_len)) != UG_OK ||
        (st = ug_atomic_write(f, data, size)) != UG_OK) {
        ug_atomic_abort(f);
        return st;
    }
    return ug_atomic_commit(f, 1);
}
