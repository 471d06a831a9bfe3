/* libFuzzer harness for the IDX reader (plain and gzip): any bytes must
 * give UG_OK with a consistent array or an error status with a message,
 * never a crash, a leak or undefined behaviour (built with ASan/UBSan).
 * The reader takes a path, so each input is written to a private file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

#include "unigrad/unigrad.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(path, sizeof path, "idx", ".idx");
    /* Keep each input's declared size small, so the fuzzer explores the
     * format rather than the allocator. */
    ug_idx_set_max_bytes((uint64_t)16 << 20);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write_file(path, data, size);
    ug_idx *idx = NULL;
    ug_status st = ug_idx_read(path, &idx);
    if (st == UG_OK) {
        int64_t n = 1;
        for (int i = 0; i < idx->ndim; i++)
            n *= idx->shape[i];
        /* Touch every element: the array must hold what the shape says. */
        volatile uint8_t sink = 0;
        for (int64_t i = 0; i < n * (int64_t)ug_dtype_size(idx->dtype); i++)
            sink ^= ((const uint8_t *)idx->data)[i];
        (void)sink;
        ug_idx_free(idx);
    } else if (!ug_last_error()[0] || idx) {
        abort(); /* a failure must say why and return no array */
    }
    return 0;
}
