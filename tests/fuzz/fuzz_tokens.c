/* libFuzzer harness for the token data readers (tokens.h): the token file
 * reader and the character vocabulary's JSON parser. The first byte
 * chooses the reader and its settings, the rest is the file. Any bytes
 * must give UG_OK with a consistent result or an error status with a
 * message, never a crash, a leak or undefined behaviour (built with
 * ASan/UBSan). A vocabulary that loads is saved and loaded again to the
 * same symbols; a token file that opens holds whole ids, each below its
 * vocabulary size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

#include "unigrad/unigrad.h"

static char path[64], saved[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(path, sizeof path, "tokens", ".bin");
    fuzz_file_name(saved, sizeof saved, "tokens", ".json");
    return 0;
}

static void fuzz_vocab(void)
{
    ug_char_vocab *v = NULL, *again = NULL;
    if (ug_char_vocab_load(path, &v) != UG_OK) {
        if (!ug_last_error()[0] || v)
            abort(); /* a failure must say why and return nothing */
        return;
    }
    const int n = ug_char_vocab_size(v);
    if (n < 1 || n > 256 || ug_char_vocab_symbol(v, n) != -1)
        abort();
    for (int id = 1; id < n; id++)
        if (ug_char_vocab_symbol(v, id) <= ug_char_vocab_symbol(v, id - 1))
            abort();
    if (ug_char_vocab_save(v, saved) != UG_OK || ug_char_vocab_load(saved, &again) != UG_OK ||
        ug_char_vocab_size(again) != n)
        abort();
    for (int id = 0; id < n; id++)
        if (ug_char_vocab_symbol(again, id) != ug_char_vocab_symbol(v, id))
            abort();
    ug_char_vocab_free(again);
    ug_char_vocab_free(v);
}

/* settings: bits 1-2 the width (1, 2, 4, or 3, which is refused), bits
 * 3-7 the vocabulary size (0: computed, else 37 times it). */
static void fuzz_token_file(uint8_t settings, size_t bytes)
{
    static const int widths[4] = {1, 2, 4, 3};
    const ug_token_file file = {.width = widths[(settings >> 1) & 3], .vocab_size = (int64_t)(settings >> 3) * 37};
    ug_tokens *t = NULL;
    if (ug_tokens_open(path, &file, &t) != UG_OK) {
        if (!ug_last_error()[0] || t)
            abort();
        return;
    }
    const int64_t count = ug_tokens_count(t), vocab = ug_tokens_vocab_size(t);
    if (count < 1 || (size_t)count * (size_t)file.width != bytes || (file.vocab_size && vocab != file.vocab_size))
        abort();
    int32_t ids[256];
    for (int64_t at = 0; at < count; at += 256) {
        const int64_t n = count - at < 256 ? count - at : 256;
        if (ug_tokens_read(t, at, n, ids) != UG_OK)
            abort();
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab)
                abort();
    }
    ug_tokens_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fuzz_write_file(path, data + 1, size - 1);
    if (data[0] & 1)
        fuzz_vocab();
    else
        fuzz_token_file(data[0], size - 1);
    return 0;
}
