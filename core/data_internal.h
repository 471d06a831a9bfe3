/* Shared by the data files (idx.c, dataset.c, loader.c): the dataset's
 * layout, which the loader gathers from directly. */
#ifndef UG_CORE_DATA_INTERNAL_H
#define UG_CORE_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "unigrad/data.h"

struct ug_dataset {
    int refs;          /* the program's handle plus loaders (atomic) */
    int64_t count;     /* samples */
    int64_t features;  /* f32 values per sample */
    float *x;          /* count * features, row-major */
    int32_t *labels;   /* count, each in [0, classes) */
    int32_t classes;   /* largest label + 1 */
};

/* Loaders keep their data set: ug_dataset_free drops a reference. */
void ug_dataset_retain(const ug_dataset *dataset);

/* ug_idx_read that also reports the size of one element in the file (a
 * converted i8 or i16 array reads as i32 but sat in 1 or 2 bytes) and the
 * header length, so later checks can name the byte offset of an element. */
ug_status ug_idx_read_ex(const char *path, ug_idx **out, size_t *file_elem_size,
                         size_t *header_bytes);

/* Test hook, not in the public headers: the worker preparing batch number
 * `batch` (of every later epoch; -1 turns it off) makes its upload fail with
 * the core's own error, so the tests can see a worker's error reach
 * ug_loader_next. */
void ug_loader_debug_fail_batch(ug_loader *loader, int64_t batch);

#endif
