/* libFuzzer harness for the safetensors reader (core/io/safetensors.h): the
 * input is a whole file (header length, header, buffer). Its header goes
 * through ug_st_parse, which must give UG_OK with tensors that tile the
 * buffer exactly, or an error status with a message and no file; never a
 * crash, a leak or undefined behaviour (built with ASan/UBSan). Every
 * tensor accepted is then read from the input's bytes. Internal functions:
 * linked with the library's objects. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0 && size >= 8; i--)
        n = n << 8 | data[i];
    /* A length past the input is passed as it is: the parser must refuse
     * it before reading a byte of the header. */
    const char *json = size >= 8 ? (const char *)data + 8 : "";
    ug_st_file *f = NULL;
    ug_status st = ug_st_parse("fuzz.safetensors", json, (size_t)n, size, &f);
    if (st != UG_OK) {
        if (f || !ug_last_error()[0])
            abort(); /* a failure must say why and return no file */
        return 0;
    }
    uint64_t covered = 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < ug_st_count(f); i++) {
        const ug_st_tensor *t = ug_st_at(f, i);
        if (t->offset < 8 + n || t->offset > size || t->bytes > size - t->offset)
            abort(); /* outside the buffer */
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (uint64_t)t->shape[d];
        if (t->bytes != numel * (uint64_t)t->elem_bytes || ug_st_find(f, t->name) != t)
            abort();
        for (uint64_t b = 0; b < t->bytes; b++)
            sink ^= data[t->offset + b];
        covered += t->bytes;
    }
    (void)sink;
    if (covered != size - 8 - n)
        abort(); /* the tensors must cover the buffer */
    for (int i = 0; i < ug_st_metadata_count(f); i++) {
        const char *key, *value;
        ug_st_metadata_at(f, i, &key, &value);
        if (!key || !value || !ug_st_metadata(f, key))
            abort();
    }
    ug_st_close(f);
    return 0;
}
