/* Files the library keeps to skip work a later process would repeat: the
 * OpenCL program's device binary, the measured tuning choices. They live in
 * $XDG_CACHE_HOME/unigrad (else $HOME/.cache/unigrad).
 *
 * A file is [magic: 8 bytes][key length: u64][data length: u64]
 * [checksum: u64, FNV-1a 64 of key and data][key][data], little-endian as
 * the host writes it. The key is the text of everything the contents depend
 * on (device, driver, library versions), compared in full on load, so a
 * file is never used for another device or driver even if two keys' hashes
 * (which name the files) collided. A file is replaced atomically
 * (base/atomic_file.h): readers see the old or the new one, never a part.
 * No usable folder means no caching, never an error. Internal: not
 * exported. */
#ifndef UG_BASE_CACHE_FILE_H
#define UG_BASE_CACHE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/status.h"

/* FNV-1a 64 over bytes; start from UG_FNV1A_BASIS. */
#define UG_FNV1A_BASIS 0xcbf29ce484222325ull
uint64_t ug_fnv1a(uint64_t hash, const void *data, size_t len);
/* Over s and its terminating NUL, so "ab"+"c" and "a"+"bc" differ. */
uint64_t ug_fnv1a_str(uint64_t hash, const char *s);

/* "<cache folder>/<prefix>-<16 hex digits of the key's hash><suffix>",
 * creating the folder if needed; false when there is no usable folder. */
bool ug_cache_path(const char *prefix, const char *key, size_t key_len, const char *suffix,
                   char *out, size_t len);

typedef enum ug_cache_result {
    UG_CACHE_HIT,     /* *data (ug_malloc'd, NUL-terminated past *size) holds the contents */
    UG_CACHE_MISSING, /* no file: nothing to say */
    UG_CACHE_DAMAGED, /* a file that fails a check; why says which */
} ug_cache_result;

/* Reads path's file if its magic and key are these and its checksum
 * holds. Files over max_bytes are damaged, and so is anything at path but
 * a regular file (a FIFO, a device), refused without a wait. */
ug_cache_result ug_cache_load(const char *path, const char magic[8], const char *key,
                              size_t key_len, size_t max_bytes, unsigned char **data,
                              size_t *size, char *why, size_t why_len);

/* Replaces path's file atomically; on failure (UG_ERR_IO, with the
 * message set) nothing is left behind and the old file stays. A FIFO,
 * socket or device at path is removed first: no cache file of ours. */
ug_status ug_cache_store(const char *path, const char magic[8], const char *key, size_t key_len,
                         const void *data, size_t size);

#endif
