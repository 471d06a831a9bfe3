/* Replacing a file so that a crash, kill -9 or full disk at any point leaves
 * either the previous file or the complete new one at its path, never a
 * mixture: the new contents go to a temporary file in the same folder,
 * which is flushed to disk and then renamed over the path (rename is
 * atomic within a file system), and the folder is flushed so the rename
 * itself survives a power loss.
 *
 *     ug_atomic_file *f;
 *     UG_TRY(ug_atomic_open(path, &f));
 *     if ((st = ug_atomic_write(f, data, bytes)) != UG_OK) { ug_atomic_abort(f); return st; }
 *     return ug_atomic_commit(f, keep);
 *
 * Every file system call here counts one UG_FAULT_FILE_IO event (base/fault.h),
 * so the tests can make each one fail in turn. Internal: not exported. */
#ifndef UG_CORE_ATOMIC_FILE_H
#define UG_CORE_ATOMIC_FILE_H

#include <stddef.h>

#include "unigrad/status.h"

typedef struct ug_atomic_file ug_atomic_file;

/* The most versions ug_atomic_commit keeps. */
#define UG_ATOMIC_MAX_KEEP 1000

/* Creates the temporary file "<path>.tmp.XXXXXX" (six random characters,
 * created exclusively; a name too long for that is cut to fit) in path's
 * folder, with the mode a new file gets (0666 less the umask), and locks
 * it (flock) while it exists. First removes the temporary files of this
 * path that no process holds: those of a writer killed mid-save. A path
 * that is a symbolic link saves to the file it points to; the link stays.
 * UG_ERR_IO naming the call and strerror on failure; UG_ERR_INVALID_ARGUMENT
 * for an empty path or one ending in '/'. */
ug_status ug_atomic_open(const char *path, ug_atomic_file **out);

/* Appends bytes, looping over short writes and EINTR. On failure (UG_ERR_IO
 * with the byte count and strerror, ENOSPC's text for a full disk) the file
 * is spoilt: the caller must ug_atomic_abort it. */
ug_status ug_atomic_write(ug_atomic_file *f, const void *data, size_t bytes);

/* Flushes and closes the temporary file; with keep > 1, first keeps the
 * keep - 1 previous versions: path.{keep-2} -> path.{keep-1}, ..., path.1 ->
 * path.2, then path is hard-linked as path.1, so path itself is present
 * throughout; renames the temporary file over path; flushes the folder.
 * Frees f in every case.
 *
 * Processes saving one path at once each succeed: the rotation runs under
 * a lock of the folder (flock), and a writer still holding it after 10 s
 * is reported as "another process has been saving there".
 *
 * Any failure up to and including the final rename removes the temporary
 * file and leaves path as it was (older copies may already have moved one
 * place along), UG_ERR_IO: "saving ck.safetensors: fsync of
 * ck.safetensors.tmp.Ab12Cd failed: Input/output error; the previous
 * ck.safetensors is unchanged". A failure of the folder's fsync comes after
 * the rename: path then holds the new contents, which a crash might still
 * undo, and the message says so. UG_ERR_INVALID_ARGUMENT for keep < 1 or
 * keep > UG_ATOMIC_MAX_KEEP, UG_ERR_STATE after a failed write (nothing is changed). */
ug_status ug_atomic_commit(ug_atomic_file *f, int keep);

/* Removes the temporary file and frees f; NULL is ignored. */
void ug_atomic_abort(ug_atomic_file *f);

#endif
