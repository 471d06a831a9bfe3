/* Opening a file to read (regular_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/regular_file.h"

const char *ug_file_kind(unsigned mode)
{
    return S_ISDIR(mode)    ? "a folder"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

ug_status ug_open_regular_file(const char *path, const char *what, int *fd, uint64_t *bytes)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer that may never come. It has no effect on a regular file. */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f < 0)
        return ug_set_error(UG_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        return ug_set_error(UG_ERR_IO, "%s: fstat failed: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return ug_set_error(UG_ERR_IO, "%s: %s, expected a regular file (%s)", path, ug_file_kind(sb.st_mode), what);
    }
    /* Reads of a regular file block as usual (the flag matters to them
     * only on some network file systems). */
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    if (bytes)
        *bytes = (uint64_t)sb.st_size;
    return UG_OK;
}
