/* The character vocabulary (include/unigrad/tokens.h): nanoGPT's
 * shakespeare_char tokenizer over bytes, and its small JSON file.
 *
 * The file is read by a strict parser for exactly the grammar the writer
 * produces plus JSON's whitespace and key order: an object of "format",
 * "version" and "bytes", each once. Anything else is refused with the byte
 * offset, so a file from another tool, or a damaged one, never gives a
 * vocabulary that would silently map text to other ids. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/regular_file.h"
#include "base/text.h"
#include "core/data/tokens_internal.h"

#define VOCAB_FORMAT "unigrad-char-vocab"
enum { VOCAB_VERSION = 1, VOCAB_MAX_FILE = 64 * 1024 };

struct ug_char_vocab {
    int count;
    uint8_t symbols[256];      /* by id */
    int16_t ids[256];          /* by byte; -1 outside the vocabulary */
};

/* The vocabulary of the bytes marked in present, in increasing order. */
static ug_status from_present(const bool present[256], const char *op, ug_char_vocab **out)
{
    ug_char_vocab *v = ug_calloc(1, sizeof *v);
    if (!v)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int b = 0; b < 256; b++) {
        v->ids[b] = -1;
        if (present[b]) {
            v->ids[b] = (int16_t)v->count;
            v->symbols[v->count++] = (uint8_t)b;
        }
    }
    *out = v;
    return UG_OK;
}

ug_status ug_char_vocab_build(const void *text, size_t bytes, ug_char_vocab **out)
{
    const char *op = "ug_char_vocab_build";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!text || !bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op,
                            !text ? "text is NULL" : "the text is empty; a vocabulary needs a symbol");
    bool present[256] = {false};
    const uint8_t *p = text;
    for (size_t i = 0; i < bytes; i++)
        present[p[i]] = true;
    return from_present(present, op, out);
}

ug_status ug_char_vocab_from_symbols(const uint8_t *symbols, int count, ug_char_vocab **out)
{
    const char *op = "ug_char_vocab_from_symbols";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!symbols || count < 1 || count > 256)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op,
                            !symbols ? "symbols is NULL" : "count is outside 1..256");
    bool present[256] = {false};
    for (int i = 0; i < count; i++) {
        if (i > 0 && symbols[i] <= symbols[i - 1])
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: symbols[%d] (%d) does not follow symbols[%d] (%d): the "
                                                         "symbols are distinct bytes in increasing order",
                                op, i, symbols[i], i - 1, symbols[i - 1]);
        present[symbols[i]] = true;
    }
    return from_present(present, op, out);
}

void ug_char_vocab_free(ug_char_vocab *v) { free(v); }
int ug_char_vocab_size(const ug_char_vocab *v) { return v ? v->count : 0; }

int ug_char_vocab_symbol(const ug_char_vocab *v, int32_t id)
{
    return v && id >= 0 && id < v->count ? v->symbols[id] : -1;
}

/* A byte for a message: itself when printable, else its code. */
static const char *shown(uint8_t b, char buf[8])
{
    if (b >= 0x20 && b < 0x7f && b != '\'')
        snprintf(buf, 8, "'%c'", b);
    else
        snprintf(buf, 8, "0x%02x", b);
    return buf;
}

ug_status ug_char_vocab_encode(const ug_char_vocab *v, const void *text, size_t bytes, int32_t *ids)
{
    const char *op = "ug_char_vocab_encode";
    if (!v || ((!text || !ids) && bytes))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !v ? "vocab" : !text ? "text" : "ids");
    const uint8_t *p = text;
    for (size_t i = 0; i < bytes; i++) {
        const int id = v->ids[p[i]];
        if (id < 0) {
            char buf[8];
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: byte %s at offset %zu is not in the vocabulary of %d "
                                                         "symbols",
                                op, shown(p[i], buf), i, v->count);
        }
        ids[i] = id;
    }
    return UG_OK;
}

ug_status ug_char_vocab_decode(const ug_char_vocab *v, const int32_t *ids, int64_t count, char *text)
{
    const char *op = "ug_char_vocab_decode";
    if (!v || ((!ids || !text) && count))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !v ? "vocab" : !ids ? "ids" : "text");
    if (count < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: count %lld is negative", op, (long long)count);
    for (int64_t i = 0; i < count; i++) {
        if (ids[i] < 0 || ids[i] >= v->count)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: ids[%lld] is %d, outside the vocabulary's 0..%d", op,
                                (long long)i, ids[i], v->count - 1);
        text[i] = (char)v->symbols[ids[i]];
    }
    return UG_OK;
}

ug_status ug_tokens_from_text(const ug_char_vocab *v, const void *text, size_t bytes, ug_tokens **out)
{
    const char *op = "ug_tokens_from_text";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!v || !text || !bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s", op,
                            !v ? "vocab is NULL" : !text ? "text is NULL" : "the text is empty");
    if (bytes > (size_t)INT64_MAX / sizeof(int32_t))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %zu bytes of text are too many", op, bytes);
    int32_t *ids = ug_malloc(bytes * sizeof *ids);
    if (!ids)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: %zu ids: out of host memory", op, bytes);
    ug_status st = ug_char_vocab_encode(v, text, bytes, ids);
    if (st == UG_OK)
        st = ug_tokens_from_ids(ids, (int64_t)bytes, v->count, out);
    free(ids);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

ug_status ug_char_vocab_save(const ug_char_vocab *v, const char *path)
{
    if (!v || !path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_char_vocab_save: %s is NULL", !v ? "vocab" : "path");
    ug_text text = {0};
    ug_text_printf(&text, "{\"format\": \"%s\", \"version\": %d, \"bytes\": [", VOCAB_FORMAT, VOCAB_VERSION);
    for (int i = 0; i < v->count; i++)
        ug_text_printf(&text, "%s%d", i ? ", " : "", v->symbols[i]);
    ug_text_puts(&text, "]}\n");
    if (text.failed) {
        ug_text_free(&text);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_char_vocab_save: out of host memory");
    }
    ug_atomic_file *f = NULL;
    ug_status st = ug_atomic_open(path, &f);
    if (st == UG_OK) {
        st = ug_atomic_write(f, text.data, text.len);
        if (st == UG_OK)
            st = ug_atomic_commit(f, 1); /* frees f */
        else
            ug_atomic_abort(f);
    }
    ug_text_free(&text);
    return st;
}

/* ---- the file's parser ---- */

typedef struct parser {
    const char *path;
    const uint8_t *p;
    size_t n, at;
} parser;

static ug_status refuse(const parser *r, const char *expected)
{
    char buf[8];
    if (r->at >= r->n)
        return ug_set_error(UG_ERR_FORMAT, "%s: the file ends at byte offset %zu where %s was expected", r->path,
                            r->at, expected);
    return ug_set_error(UG_ERR_FORMAT, "%s: byte offset %zu: %s where %s was expected (a character vocabulary is "
                                       "{\"format\": \"" VOCAB_FORMAT "\", \"version\": 1, \"bytes\": [...]})",
                        r->path, r->at, shown(r->p[r->at], buf), expected);
}

static void skip_space(parser *r)
{
    while (r->at < r->n && (r->p[r->at] == ' ' || r->p[r->at] == '\t' || r->p[r->at] == '\n' || r->p[r->at] == '\r'))
        r->at++;
}

static ug_status expect(parser *r, char c, const char *what)
{
    skip_space(r);
    if (r->at >= r->n || r->p[r->at] != (uint8_t)c)
        return refuse(r, what);
    r->at++;
    return UG_OK;
}

/* A string of plain printable ASCII (no escapes: nothing the writer
 * writes needs one) into buf. */
static ug_status string(parser *r, char *buf, size_t cap, const char *what)
{
    UG_TRY(expect(r, '"', what));
    size_t len = 0;
    while (r->at < r->n && r->p[r->at] != '"') {
        const uint8_t c = r->p[r->at];
        if (c < 0x20 || c >= 0x7f || c == '\\' || len + 1 >= cap)
            return refuse(r, len + 1 >= cap ? "the string's end" : "a plain character of a string");
        buf[len++] = (char)c;
        r->at++;
    }
    if (r->at >= r->n)
        return refuse(r, "the string's closing quote");
    r->at++;
    buf[len] = '\0';
    return UG_OK;
}

/* A whole number in 0..max, written as JSON writes one (no sign, no
 * leading zero, no fraction). */
static ug_status number(parser *r, int max, int *out, const char *what)
{
    skip_space(r);
    const size_t start = r->at;
    int value = 0;
    while (r->at < r->n && r->p[r->at] >= '0' && r->p[r->at] <= '9') {
        value = value * 10 + (r->p[r->at] - '0');
        if (value > max || (r->at > start && r->p[start] == '0')) {
            r->at = start;
            return refuse(r, what);
        }
        r->at++;
    }
    if (r->at == start)
        return refuse(r, what);
    *out = value;
    return UG_OK;
}

static ug_status parse_bytes(parser *r, bool present[256], int *count)
{
    UG_TRY(expect(r, '[', "'[' opening the bytes"));
    skip_space(r);
    int previous = -1;
    for (;;) {
        int b = 0;
        const size_t at = (skip_space(r), r->at);
        UG_TRY(number(r, 255, &b, "a byte value in 0..255"));
        if (b <= previous) {
            r->at = at;
            return refuse(r, "a byte above the one before (the symbols in increasing order, each once)");
        }
        present[b] = true;
        previous = b;
        (*count)++;
        skip_space(r);
        if (r->at < r->n && r->p[r->at] == ']') {
            r->at++;
            return UG_OK;
        }
        UG_TRY(expect(r, ',', "',' or ']' after a byte"));
    }
}

static ug_status parse_vocab(parser *r, bool present[256])
{
    bool seen_format = false, seen_version = false, seen_bytes = false;
    int count = 0;
    UG_TRY(expect(r, '{', "'{' opening the vocabulary"));
    for (;;) {
        char key[16], value[32];
        skip_space(r);
        const size_t key_at = r->at;
        UG_TRY(string(r, key, sizeof key, "a key (\"format\", \"version\" or \"bytes\")"));
        UG_TRY(expect(r, ':', "':' after a key"));
        const bool is_format = !strcmp(key, "format"), is_version = !strcmp(key, "version");
        const bool is_bytes = !strcmp(key, "bytes");
        bool *seen = is_format ? &seen_format : is_version ? &seen_version : is_bytes ? &seen_bytes : NULL;
        if (!seen || *seen) {
            r->at = key_at;
            return refuse(r, seen ? "a key not given before" : "\"format\", \"version\" or \"bytes\"");
        }
        *seen = true;
        skip_space(r);
        const size_t value_at = r->at;
        int version = 0;
        if (is_format) {
            UG_TRY(string(r, value, sizeof value, "the format's name, \"" VOCAB_FORMAT "\""));
            if (strcmp(value, VOCAB_FORMAT)) {
                r->at = value_at;
                return refuse(r, "the format \"" VOCAB_FORMAT "\"");
            }
        } else if (is_version) {
            UG_TRY(number(r, 1000000, &version, "the version, 1"));
            if (version != VOCAB_VERSION) {
                r->at = value_at;
                return refuse(r, "version 1 (a later unigrad wrote this file?)");
            }
        } else {
            UG_TRY(parse_bytes(r, present, &count));
        }
        skip_space(r);
        if (r->at < r->n && r->p[r->at] == '}') {
            r->at++;
            break;
        }
        UG_TRY(expect(r, ',', "',' or '}' after a value"));
    }
    if (!seen_format || !seen_version || !seen_bytes)
        return refuse(r, !seen_format ? "the key \"format\"" : !seen_version ? "the key \"version\"" : "the key \"bytes\"");
    skip_space(r);
    return r->at == r->n ? UG_OK : refuse(r, "the end of the file after the vocabulary");
}

/* A whole file's bytes into a vocabulary. */
static ug_status parse_file(const char *path, const uint8_t *data, size_t n, ug_char_vocab **out)
{
    parser r = {path, data, n, 0};
    bool present[256] = {false};
    UG_TRY(parse_vocab(&r, present));
    return from_present(present, "ug_char_vocab_load", out);
}

ug_status ug_char_vocab_load(const char *path, ug_char_vocab **out)
{
    const char *op = "ug_char_vocab_load";
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: path is NULL", op);
    int fd = -1;
    uint64_t bytes = 0;
    UG_TRY(ug_open_regular_file(path, "the vocabulary", &fd, &bytes));
    if (bytes > VOCAB_MAX_FILE) {
        close(fd);
        return ug_set_error(UG_ERR_FORMAT, "%s: %llu bytes; a character vocabulary file is at most %d", path,
                            (unsigned long long)bytes, VOCAB_MAX_FILE);
    }
    uint8_t *data = ug_malloc(bytes ? (size_t)bytes : 1);
    if (!data) {
        close(fd);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    size_t got = 0;
    while (got < bytes) {
        const ssize_t k = read(fd, data + got, (size_t)bytes - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    ug_status st = got == bytes ? parse_file(path, data, got, out)
                                : ug_set_error(UG_ERR_IO, "%s: read %zu of its %llu bytes", path, got,
                                               (unsigned long long)bytes);
    free(data);
    return st;
}
