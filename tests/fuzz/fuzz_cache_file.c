/* libFuzzer harness for the cache files' reader (base/cache_file.h): any
 * bytes must give a hit with the data it declares, a missing file, or a
 * damaged one with a reason, never a crash, a leak or undefined behaviour
 * (built with ASan/UBSan). The reader takes a path, so each input is
 * written to a private file. Internal: links the library's objects. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

#include "base/cache_file.h"

static char path[64];
static const char magic[8] = {'U', 'G', 'C', 'L', 'B', 'T', 'N', '1'};
static const char key[] = "fuzz key\ndriver 1";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(path, sizeof path, "cache", ".bin");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write_file(path, data, size);
    unsigned char *got = NULL;
    size_t got_size = 0;
    char why[256] = "";
    ug_cache_result r = ug_cache_load(path, magic, key, strlen(key), 4096, &got, &got_size, why,
                                      sizeof why);
    if (r == UG_CACHE_HIT) {
        /* The data is what the file holds after its header and key. */
        if (!got || got_size > 4096 || got[got_size] != '\0' || got_size + 32 + strlen(key) != size ||
            memcmp(got, data + 32 + strlen(key), got_size) != 0)
            abort();
    } else if (got || got_size || (r == UG_CACHE_DAMAGED && !why[0])) {
        abort();
    }
    free(got);
    return 0;
}
