/* Opening a safetensors file and reading its tensors (safetensors.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/regular_file.h"
#include "core/io/safetensors_internal.h"

/* pread of exactly bytes unless the file ends first: the count read, or
 * -1 with errno. */
static int64_t read_at(int fd, void *dst, uint64_t bytes, uint64_t offset)
{
    uint64_t got = 0;
    while (got < bytes) {
        uint64_t left = bytes - got;
        size_t chunk = left < ((uint64_t)1 << 30) ? (size_t)left : (size_t)1 << 30;
        ssize_t n = pread(fd, (char *)dst + got, chunk, (off_t)(offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    return (int64_t)got;
}

ug_status ug_st_open(const char *path, ug_st_file **out)
{
    if (!path || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_open: %s is NULL", path ? "out" : "path");
    *out = NULL;
    int fd = -1;
    uint64_t size = 0;
    UG_TRY(ug_open_regular_file(path, "the safetensors file", &fd, &size));
    unsigned char len[8];
    char *json = NULL;
    ug_status st;
    int64_t got = size < 8 ? 0 : read_at(fd, len, 8, 0);
    if (got < 0) {
        st = ug_set_error(UG_ERR_IO, "%s: reading the header length failed: %s", path, strerror(errno));
        goto fail;
    }
    if (size < 8 || got < 8) {
        st = ug_set_error(UG_ERR_FORMAT,
                          "%s: byte 0: a file of %llu bytes, expected at least 8 (the header length)",
                          path, (unsigned long long)(size < 8 ? size : (uint64_t)got));
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len[i];
    if ((st = ug_st_check_header_length(path, n, size)) != UG_OK)
        goto fail;
    json = ug_malloc(n ? (size_t)n : 1);
    if (!json) {
        st = ug_st_oom(path);
        goto fail;
    }
    got = read_at(fd, json, n, 8);
    if (got < 0) {
        st = ug_set_error(UG_ERR_IO, "%s: reading the %llu-byte header failed: %s", path,
                          (unsigned long long)n, strerror(errno));
        goto fail;
    }
    if ((uint64_t)got < n) {
        st = ug_set_error(UG_ERR_FORMAT,
                          "%s: byte %llu: the end of the file, expected the header up to byte %llu "
                          "(the file shrank while being opened)",
                          path, (unsigned long long)(8 + got), (unsigned long long)(8 + n));
        goto fail;
    }
    ug_st_file *f = NULL;
    if ((st = ug_st_parse(path, json, (size_t)n, size, &f)) != UG_OK)
        goto fail;
    free(json);
    f->fd = fd;
    *out = f;
    return UG_OK;
fail:
    free(json);
    close(fd);
    return st;
}

ug_status ug_st_read(ug_st_file *f, const ug_st_tensor *t, void *dst, size_t bytes)
{
    char q[QBUF];
    if (!f || !t || (!dst && bytes))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_read: %s is NULL",
                            !f ? "the file" : !t ? "the tensor" : "dst");
    if (t < f->tensors || t >= f->tensors + f->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_read: %s: the tensor is not one of this file's",
                            f->path);
    if ((uint64_t)bytes != t->bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_st_read: %s: tensor %s holds %llu bytes, but the destination has %zu",
                            f->path, ug_st_quoted(t->name, q, sizeof q), (unsigned long long)t->bytes, bytes);
    if (f->fd < 0)
        return ug_set_error(UG_ERR_STATE, "ug_st_read: %s was parsed from memory: no file to read",
                            f->path);
    int64_t got = read_at(f->fd, dst, t->bytes, t->offset);
    if (got < 0)
        return ug_set_error(UG_ERR_IO, "%s: reading tensor %s (%llu bytes at byte %llu) failed: %s",
                            f->path, ug_st_quoted(t->name, q, sizeof q), (unsigned long long)t->bytes,
                            (unsigned long long)t->offset, strerror(errno));
    if ((uint64_t)got < t->bytes)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: byte %llu: the end of the file, expected tensor %s's data up to "
                            "byte %llu (the file shrank after it was opened)",
                            f->path, (unsigned long long)(t->offset + (uint64_t)got),
                            ug_st_quoted(t->name, q, sizeof q), (unsigned long long)(t->offset + t->bytes));
    return UG_OK;
}
