/* Opening a file to read, for every reader of user-named files (checkpoints,
 * IDX data): only a regular file is read, and opening never blocks, so a
 * FIFO, a device or a folder named by mistake gets an error instead of a
 * read that never ends. Internal: not exported. */
#ifndef UG_CORE_REGULAR_FILE_H
#define UG_CORE_REGULAR_FILE_H

#include <stdint.h>

#include "unigrad/status.h"

/* Opens path read-only (close-on-exec) into *fd and sets *bytes (when
 * not NULL) to its size. UG_ERR_IO "<path>: cannot open <what>: <strerror>", or "<path>: a
 * FIFO (named pipe), expected a regular file" (folder, device, socket)
 * with nothing left open. */
ug_status ug_open_regular_file(const char *path, const char *what, int *fd, uint64_t *bytes);

/* What a file of stat's st_mode is, for messages: "a folder", "a FIFO
 * (named pipe)", "a character device", ... */
const char *ug_file_kind(unsigned mode);

#endif
