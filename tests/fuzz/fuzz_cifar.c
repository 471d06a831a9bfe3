/* libFuzzer harness for the CIFAR-10 reader: any bytes as a folder's
 * test_batch.bin must give UG_OK with a consistent data set or an error
 * status with a message, never a crash, a leak or undefined behaviour
 * (built with ASan/UBSan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_file.h"

#include "unigrad/unigrad.h"

static char dir[64], path[96];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(dir, sizeof dir, "cifar", "");
    if (mkdir(dir, 0700) != 0)
        abort();
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    /* Small inputs' worth of records, so the fuzzer explores the format. */
    ug_idx_set_max_bytes((uint64_t)16 << 20);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write_file(path, data, size);
    ug_dataset *ds = NULL;
    ug_status st = ug_dataset_from_cifar10(dir, false, 1.0f / 255.0f, 0.0f, &ds);
    if (st == UG_OK) {
        /* A data set of whole records, each label a CIFAR-10 class. */
        if (ug_dataset_count(ds) * 3073 != (int64_t)size || ug_dataset_features(ds) != 3072 ||
            ug_dataset_require_classes(ds, 10) != UG_OK)
            abort();
        ug_dataset_free(ds);
    } else if (!ug_last_error()[0] || ds) {
        abort(); /* a failure must say why and return no data set */
    }
    return 0;
}
