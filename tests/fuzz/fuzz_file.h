/* For harnesses of readers that take a path: each input goes to a file of
 * the process's own, named once at start. */
#ifndef UG_FUZZ_FILE_H
#define UG_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* "/tmp/ug-fuzz-<name>-<pid><suffix>" into path. */
static inline void fuzz_file_name(char *path, size_t len, const char *name, const char *suffix)
{
    snprintf(path, len, "/tmp/ug-fuzz-%s-%d%s", name, (int)getpid(), suffix);
}

/* Writes the input to path; aborts (a harness failure, not a finding) when
 * it cannot. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
}

#endif
