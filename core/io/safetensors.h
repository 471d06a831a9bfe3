/* safetensors files (https://github.com/huggingface/safetensors), the format
 * of training checkpoints: an 8-byte little-endian header length N, N bytes
 * of a UTF-8 JSON object, then the tensors' bytes (little-endian,
 * row-major). The JSON maps each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets
 * into the byte buffer after the header) and may hold "__metadata__", an
 * object of strings.
 *
 * Reading checks everything the reference implementation checks, and a
 * little more: a header of at most 100 MB within the file, strict JSON
 * (unknown keys, duplicate names and non-string metadata refused), known
 * dtypes, end - begin == numel * element size, and tensors that tile the
 * buffer exactly (no overlap, no gap, nothing after the last). Every error
 * is UG_ERR_FORMAT "<path>: byte <file offset>: <what was found>, expected
 * <what>". Writing pads the header with spaces so the buffer starts at a
 * multiple of 8, and replaces the file atomically (base/atomic_file.h).
 * Internal: the public checkpoint API is built on this. */
#ifndef UG_CORE_SAFETENSORS_H
#define UG_CORE_SAFETENSORS_H

#include <stdint.h>

#include "unigrad/dtype.h"
#include "unigrad/status.h"
#include "unigrad/tensor.h"

/* The dtype of a tensor whose safetensors dtype unigrad has no type for
 * (F64, I64, BOOL, ...): parsed and validated, readable as raw bytes, not
 * loadable into a ug_tensor. */
#define UG_ST_NO_DTYPE ((ug_dtype)UG_DTYPE_COUNT)

/* The largest header the reference reader accepts. */
#define UG_ST_MAX_HEADER 100000000u

typedef struct ug_st_tensor {
    char *name;
    char dtype_name[8];  /* as in the file: "F32", "F8_E4M3", ... */
    ug_dtype dtype;      /* UG_ST_NO_DTYPE when unigrad has no such type */
    int elem_bytes;      /* bytes per element */
    int ndim;
    int64_t shape[UG_MAX_DIMS];
    uint64_t offset;     /* absolute in the file */
    uint64_t bytes;      /* numel * elem_bytes */
} ug_st_tensor;

typedef struct ug_st_file ug_st_file;

/* Opens path, reads and validates its header against the file's length.
 * UG_ERR_IO (with strerror) when it cannot be opened or read,
 * UG_ERR_FORMAT for a file shorter than 8 bytes or any invalid header. */
ug_status ug_st_open(const char *path, ug_st_file **out);

/* The same validation on a header already in memory: json, json_bytes long
 * (N), of a file of file_bytes in all (8 + N + the buffer). Messages name
 * path_for_messages. The result has no file: ug_st_read refuses it (read
 * tensor t from bytes t->offset .. t->offset + t->bytes of the file). */
ug_status ug_st_parse(const char *path_for_messages, const char *json, size_t json_bytes,
                      uint64_t file_bytes, ug_st_file **out);

/* Tensors in the header's order. */
int ug_st_count(const ug_st_file *f);
const ug_st_tensor *ug_st_at(const ug_st_file *f, int index);  /* NULL out of range */
const ug_st_tensor *ug_st_find(const ug_st_file *f, const char *name); /* NULL when absent */

/* The "__metadata__" entries, in the header's order. */
int ug_st_metadata_count(const ug_st_file *f);
const char *ug_st_metadata(const ug_st_file *f, const char *key); /* NULL when absent */
/* Sets *key and *value (NULL both out of range). */
void ug_st_metadata_at(const ug_st_file *f, int index, const char **key, const char **value);

/* The path given to ug_st_open / ug_st_parse. */
const char *ug_st_path(const ug_st_file *f);

/* Reads tensor t (from this file) into dst; bytes must equal t->bytes. A
 * file that has become shorter than its header says: UG_ERR_FORMAT naming
 * the offset; a failed read: UG_ERR_IO with strerror. */
ug_status ug_st_read(ug_st_file *f, const ug_st_tensor *t, void *dst, size_t bytes);

void ug_st_close(ug_st_file *f); /* NULL ok */

/* The safetensors name of a unigrad dtype ("F32", "BF16", ...); NULL for a
 * value outside the enum. */
const char *ug_st_dtype_name(ug_dtype dtype);

/* A tensor to save: host data, row-major, numel * ug_dtype_size(dtype)
 * bytes (data may be NULL when that is 0). */
typedef struct ug_st_entry {
    const char *name;     /* UTF-8, unique, not "__metadata__" */
    ug_dtype dtype;
    int ndim;             /* 0 .. UG_MAX_DIMS; 0 is a scalar */
    const int64_t *shape; /* may be NULL when ndim is 0 */
    const void *data;
} ug_st_entry;

/* Writes tensors (in this order) and metadata (UTF-8 strings, unique keys)
 * to path through ug_atomic_file, keeping keep - 1 previous versions as
 * path.1, path.2, ... (keep >= 1). UG_ERR_INVALID_ARGUMENT for a bad entry
 * (nothing is written), UG_ERR_IO when the file cannot be written (path is
 * then as it was; see ug_atomic_commit). */
ug_status ug_st_save(const char *path, const ug_st_entry *tensors, int count,
                     const char *const *meta_keys, const char *const *meta_values, int meta_count,
                     int keep);

#endif
