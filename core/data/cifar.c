/* CIFAR-10's binary version (cifar-10-batches-bin), as its authors
 * describe it: files of 3073-byte records, a label byte (0 to 9) then 3072
 * pixel bytes, the red, green and blue 32x32 planes with rows top to
 * bottom. A sample is thus [3, 32, 32], the layout the loader hands the
 * convolutions, kept as bytes (value = scale * byte + shift on assembly,
 * as ug_dataset_from_idx keeps images). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/data/internal.h"

enum { CIFAR_PIXELS = 3072, CIFAR_RECORD = CIFAR_PIXELS + 1, CIFAR_TRAIN_FILES = 5, CHUNK = 256 };

static ug_status open_batch(const char *op, const char *path, FILE **f, int64_t *records)
{
    struct stat st;
    *f = fopen(path, "rb");
    if (!*f || fstat(fileno(*f), &st) != 0) {
        const int err = errno;
        if (*f)
            fclose(*f);
        *f = NULL;
        return ug_set_error(UG_ERR_IO, "%s: cannot open %s (%s); give the folder cifar-10-binary.tar.gz unpacks "
                            "to (cifar-10-batches-bin)", op, path, strerror(err));
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0) {
        fclose(*f);
        *f = NULL;
        return ug_set_error(UG_ERR_FORMAT, "%s: %s holds %lld bytes, not a whole number of %d-byte records (a "
                            "label byte and 3072 pixels): a truncated download, or another format (CIFAR-100's "
                            "records have two label bytes)", op, path, (long long)st.st_size, CIFAR_RECORD);
    }
    *records = (int64_t)(st.st_size / CIFAR_RECORD);
    return UG_OK;
}

/* Reads a file's records into x and labels, CHUNK records at a time
 * through chunk. */
static ug_status read_batch(const char *op, const char *path, FILE *f, int64_t records, uint8_t *chunk, uint8_t *x,
                            int32_t *labels)
{
    for (int64_t done = 0; done < records;) {
        const size_t want = (size_t)(records - done < CHUNK ? records - done : CHUNK);
        if (fread(chunk, CIFAR_RECORD, want, f) != want)
            return ug_set_error(UG_ERR_IO, "%s: %s ended early at record %lld (did it change while being read?)",
                                op, path, (long long)done);
        for (size_t r = 0; r < want; r++, done++) {
            const uint8_t *rec = chunk + r * CIFAR_RECORD;
            if (rec[0] > 9)
                return ug_set_error(UG_ERR_FORMAT, "%s: %s: record %lld (byte offset %lld) has label %d; CIFAR-10's "
                                    "labels are 0 to 9", op, path, (long long)done, (long long)done * CIFAR_RECORD,
                                    rec[0]);
            labels[done] = rec[0];
            memcpy(x + done * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
    }
    return UG_OK;
}

ug_status ug_dataset_from_cifar10(const char *dir, bool train, float scale, float shift, ug_dataset **out)
{
    const char *op = "ug_dataset_from_cifar10";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!dir)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dir is NULL", op);
    if (!isfinite(scale) || !isfinite(shift))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: scale %g and shift %g must be finite", op, (double)scale,
                            (double)shift);
    const int files = train ? CIFAR_TRAIN_FILES : 1;
    char paths[CIFAR_TRAIN_FILES][4096];
    FILE *f[CIFAR_TRAIN_FILES] = {NULL};
    int64_t records[CIFAR_TRAIN_FILES] = {0}, count = 0;
    ug_status st = UG_OK;
    for (int i = 0; i < files && st == UG_OK; i++) {
        int n = train ? snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", dir, i + 1)
                      : snprintf(paths[i], sizeof paths[i], "%s/test_batch.bin", dir);
        st = n > 0 && (size_t)n < sizeof paths[i] ? open_batch(op, paths[i], &f[i], &records[i])
                                                   : ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dir is too long", op);
        count += records[i];
    }
    /* The bytes a reader may hold, as for IDX files (UG_IDX_MAX_BYTES). */
    if (st == UG_OK && (uint64_t)count * CIFAR_RECORD > ug_idx_max_bytes())
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: %lld records are more than the %llu bytes a reader may hold; "
                          "raise UG_IDX_MAX_BYTES or ug_idx_set_max_bytes", op, (long long)count,
                          (unsigned long long)ug_idx_max_bytes());
    ug_dataset *ds = NULL;
    uint8_t *chunk = NULL;
    if (st == UG_OK)
        st = ug_dataset_alloc(count, CIFAR_PIXELS, true, UG_U8, 0, true, op, &ds);
    if (st == UG_OK && !(chunk = ug_malloc(CHUNK * CIFAR_RECORD)))
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    int64_t first = 0;
    for (int i = 0; i < files && st == UG_OK; first += records[i], i++)
        st = read_batch(op, paths[i], f[i], records[i], chunk, (uint8_t *)ds->x + first * CIFAR_PIXELS,
                        ds->labels + first);
    free(chunk);
    for (int i = 0; i < files; i++)
        if (f[i])
            fclose(f[i]);
    if (st != UG_OK) {
        ug_dataset_free(ds);
        return st;
    }
    ds->scale = scale;
    ds->shift = shift;
    ds->classes = 10;
    *out = ds;
    return UG_OK;
}
