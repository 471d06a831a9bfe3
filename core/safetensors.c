/* safetensors reading and writing (safetensors.h).
 *
 * The header is read by a small strict parser for exactly the grammar the
 * format has (an object of tensor entries and one metadata object of
 * strings) rather than a general JSON library: no nesting beyond it can
 * even be expressed, every position is known for messages, and nothing
 * is allocated for values that are then refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/regular_file.h"
#include "core/safetensors.h"

/* Tensors are read into and written from host memory as they are in the
 * file. A big-endian host would need a byte swap per element here. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c assumes a little-endian host: add byte swaps to ug_st_read and "
               "ug_st_save for this one");

/* The format's dtypes. ug < 0: unigrad has no such type. */
static const struct {
    const char *name;
    int bytes;
    int ug;
} dtypes[] = {
    {"F32", 4, UG_F32},  {"F16", 2, UG_F16},   {"BF16", 2, UG_BF16},      {"I32", 4, UG_I32},
    {"U8", 1, UG_U8},    {"BOOL", 1, -1},      {"I8", 1, -1},             {"I16", 2, -1},
    {"U16", 2, -1},      {"U32", 4, -1},       {"I64", 8, -1},            {"U64", 8, -1},
    {"F64", 8, -1},      {"F8_E4M3", 1, -1},   {"F8_E5M2", 1, -1},
};
enum { DTYPES = (int)(sizeof dtypes / sizeof dtypes[0]) };
#define DTYPE_LIST "F32, F16, BF16, I32, U8, BOOL, I8, I16, U16, U32, I64, U64, F64, F8_E4M3 or F8_E5M2"

typedef struct st_meta {
    char *key, *value;
} st_meta;

struct ug_st_file {
    char *path;
    int fd; /* -1: parsed from memory */
    uint64_t file_bytes;
    int count, cap;
    ug_st_tensor *tensors;
    ug_st_tensor **by_name; /* sorted by name, for ug_st_find */
    int meta_count, meta_cap;
    st_meta *meta;
    st_meta **meta_by_key;
};

const char *ug_st_dtype_name(ug_dtype dtype)
{
    for (int i = 0; i < DTYPES; i++)
        if (dtypes[i].ug >= 0 && dtypes[i].ug == (int)dtype)
            return dtypes[i].name;
    return NULL;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when it is not
 * one: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) len = 3, lo = 0xa0;
    else if (c >= 0xe1 && c <= 0xec) len = 3;
    else if (c == 0xed) len = 3, hi = 0x9f;
    else if (c >= 0xee && c <= 0xef) len = 3;
    else if (c == 0xf0) len = 4, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    else if (c == 0xf4) len = 4, hi = 0x8f;
    else return 0;
    if ((size_t)len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/* A name as JSON would write it, quoted and cut at about 120 bytes, for
 * messages (names may hold quotes or control characters). */
static const char *quoted(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    buf[o++] = '"';
    for (const char *p = s; *p && o + 10 < len; p++) {
        unsigned char c = (unsigned char)*p;
        if (o > 120 && (c & 0xc0) != 0x80) { /* cut between characters */
            o += (size_t)snprintf(buf + o, len - o, "...");
            break;
        }
        if (c == '"' || c == '\\')
            buf[o++] = '\\', buf[o++] = (char)c;
        else if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}
#define QBUF 160

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(ug_st_tensor *const *)a)->name, (*(ug_st_tensor *const *)b)->name);
}

static int cmp_meta_key(const void *a, const void *b)
{
    return strcmp((*(st_meta *const *)a)->key, (*(st_meta *const *)b)->key);
}

/* By data offsets, then header order (the array's order), so ties among
 * empty tensors sort the same way every time. */
static int cmp_tensor_offsets(const void *a, const void *b)
{
    const ug_st_tensor *x = *(ug_st_tensor *const *)a, *y = *(ug_st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* ---- reading ---- */

typedef struct parser {
    const char *path;
    const unsigned char *s;
    size_t n, p;
    uint64_t base;   /* file offset of the buffer: 8 + N */
    uint64_t buffer; /* its length */
    ug_st_file *f;
    uint64_t *name_at, *offsets_at; /* per tensor: JSON positions for messages */
    uint64_t *meta_at;
    char *str; /* the string parsed last, decoded, NUL-terminated */
    size_t str_len, str_cap;
    char ctx[QBUF + 16]; /* "tensor \"name\": " inside an entry, for every message there */
} parser;

static ug_status perr(const parser *P, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ug_status perr(const parser *P, uint64_t at, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ug_set_error(UG_ERR_FORMAT, "%s: byte %llu: %s%s", P->path,
                        (unsigned long long)(8 + at), P->ctx, msg);
}

static ug_status oom(const char *path)
{
    return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory reading the header", path);
}

/* What is at position at, for "found ...". */
static const char *found(const parser *P, size_t at, char *buf)
{
    if (at >= P->n)
        return "the end of the header";
    unsigned c = P->s[at];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 16, "'%c'", (char)c);
    else
        snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static void skip_ws(parser *P)
{
    while (P->p < P->n && (P->s[P->p] == ' ' || P->s[P->p] == '\t' || P->s[P->p] == '\n' ||
                           P->s[P->p] == '\r'))
        P->p++;
}

static bool at_char(parser *P, char c)
{
    skip_ws(P);
    return P->p < P->n && P->s[P->p] == (unsigned char)c;
}

static ug_status expect(parser *P, char c, const char *what)
{
    char b[16];
    if (!at_char(P, c))
        return perr(P, P->p, "found %s, expected %s", found(P, P->p, b), what);
    P->p++;
    return UG_OK;
}

static bool put(parser *P, const void *bytes, size_t k)
{
    if (P->str_len + k + 1 > P->str_cap) {
        size_t cap = P->str_cap ? P->str_cap : 64;
        while (cap < P->str_len + k + 1)
            cap *= 2;
        char *s = ug_realloc(P->str, cap);
        if (!s)
            return false;
        P->str = s;
        P->str_cap = cap;
    }
    memcpy(P->str + P->str_len, bytes, k);
    P->str_len += k;
    P->str[P->str_len] = '\0';
    return true;
}

static int hex4(const parser *P, size_t at)
{
    if (at + 4 > P->n)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = P->s[at + (size_t)i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

#define ESCAPES "\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX"

/* A JSON string at the next non-space position, decoded into P->str. */
static ug_status parse_string(parser *P, const char *what)
{
    char b[16];
    skip_ws(P);
    size_t start = P->p;
    if (P->p >= P->n || P->s[P->p] != '"')
        return perr(P, P->p, "found %s, expected %s", found(P, P->p, b), what);
    P->p++;
    P->str_len = 0;
    if (!put(P, "", 0))
        return oom(P->path);
    for (;;) {
        if (P->p >= P->n)
            return perr(P, start, "a string that the header ends inside, expected its closing '\"'");
        unsigned c = P->s[P->p];
        if (c == '"') {
            P->p++;
            return UG_OK;
        }
        if (c < 0x20)
            return perr(P, P->p,
                        "control character 0x%02x inside a string, expected it escaped (\\n, "
                        "\\t, \\u00XX)",
                        c);
        if (c != '\\') {
            int len = utf8_len(P->s + P->p, P->n - P->p);
            if (!len)
                return perr(P, P->p, "byte 0x%02x that is not valid UTF-8, expected UTF-8 text", c);
            if (!put(P, P->s + P->p, (size_t)len))
                return oom(P->path);
            P->p += (size_t)len;
            continue;
        }
        size_t esc = P->p++;
        if (P->p >= P->n)
            return perr(P, esc, "'\\' at the end of the header, expected an escape and the string's end");
        char e = (char)P->s[P->p++], one = 0;
        switch (e) {
        case '"': case '\\': case '/': one = e; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': break;
        default:
            if ((unsigned char)e >= 0x20 && (unsigned char)e < 0x7f)
                return perr(P, esc, "the escape \\%c, expected one of " ESCAPES, e);
            return perr(P, esc, "'\\' then byte 0x%02x, expected one of " ESCAPES, (unsigned char)e);
        }
        if (one) {
            if (!put(P, &one, 1))
                return oom(P->path);
            continue;
        }
        long cp = hex4(P, P->p);
        if (cp < 0)
            return perr(P, esc, "\\u not followed by 4 hex digits, expected \\uXXXX");
        P->p += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return perr(P, esc,
                        "\\u%04lX, a low surrogate with no high one before it, expected a UTF-16 "
                        "pair \\uD800-\\uDBFF \\uDC00-\\uDFFF",
                        cp);
        if (cp >= 0xd800 && cp <= 0xdbff) {
            long lo = P->p + 6 <= P->n && P->s[P->p] == '\\' && P->s[P->p + 1] == 'u'
                          ? hex4(P, P->p + 2)
                          : -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return perr(P, esc,
                            "\\u%04lX, a high surrogate not followed by a low one, expected a "
                            "UTF-16 pair \\uD800-\\uDBFF \\uDC00-\\uDFFF",
                            cp);
            P->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0)
            return perr(P, esc, "\\u0000, expected no NUL character (names are C strings)");
        unsigned char u[4];
        size_t k;
        if (cp < 0x80) u[0] = (unsigned char)cp, k = 1;
        else if (cp < 0x800)
            u[0] = (unsigned char)(0xc0 | (cp >> 6)), u[1] = (unsigned char)(0x80 | (cp & 0x3f)),
            k = 2;
        else if (cp < 0x10000)
            u[0] = (unsigned char)(0xe0 | (cp >> 12)),
            u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)),
            u[2] = (unsigned char)(0x80 | (cp & 0x3f)), k = 3;
        else
            u[0] = (unsigned char)(0xf0 | (cp >> 18)),
            u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f)),
            u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)),
            u[3] = (unsigned char)(0x80 | (cp & 0x3f)), k = 4;
        if (!put(P, u, k))
            return oom(P->path);
    }
}

/* An unsigned JSON integer of at most max at the next non-space position;
 * anything else that looks like a number is named as found. */
static ug_status parse_uint(parser *P, uint64_t max, const char *what, uint64_t *out)
{
    char b[16];
    skip_ws(P);
    size_t at = P->p, e = at;
    bool digits = true;
    while (e < P->n && P->s[e] && strchr("0123456789+-.eE", P->s[e])) {
        digits &= P->s[e] >= '0' && P->s[e] <= '9';
        e++;
    }
    int len = (int)(e - at > 40 ? 40 : e - at);
    const char *more = e - at > 40 ? "..." : "";
    const char *tok = (const char *)P->s + at;
    if (e == at)
        return perr(P, at, "found %s, expected %s (an unsigned integer)", found(P, at, b), what);
    if (!digits)
        return perr(P, at, "found %.*s%s, expected %s: an unsigned integer", len, tok, more, what);
    if (tok[0] == '0' && e - at > 1)
        return perr(P, at, "found %.*s%s, expected %s without leading zeros (JSON has none)", len,
                    tok, more, what);
    uint64_t v = 0;
    for (size_t i = at; i < e; i++) {
        uint64_t d = (uint64_t)(P->s[i] - '0');
        if (v > (max - d) / 10)
            return perr(P, at, "found %.*s%s, expected %s of at most %llu", len, tok, more, what,
                        (unsigned long long)max);
        v = v * 10 + d;
    }
    P->p = e;
    *out = v;
    return UG_OK;
}

/* After an element: ',' and another one, or close. A ',' before close is
 * refused as JSON refuses it. */
static ug_status next_or_close(parser *P, char close, const char *what, bool *more)
{
    char b[16];
    skip_ws(P);
    if (P->p < P->n && P->s[P->p] == ',') {
        size_t comma = P->p++;
        if (at_char(P, close))
            return perr(P, comma, "',' before '%c', expected another %s (JSON has no trailing commas)",
                        close, what);
        *more = true;
        return UG_OK;
    }
    if (P->p < P->n && P->s[P->p] == (unsigned char)close) {
        P->p++;
        *more = false;
        return UG_OK;
    }
    return perr(P, P->p, "found %s, expected ',' or '%c' after a %s", found(P, P->p, b), close, what);
}

/* "[" unsigned integers "]": at most cap of them. */
static ug_status parse_uint_array(parser *P, const char *key, uint64_t max, uint64_t *values,
                                  int cap, int *count)
{
    char what[64];
    snprintf(what, sizeof what, "'[' (the %s array)", key);
    UG_TRY(expect(P, '[', what));
    *count = 0;
    if (at_char(P, ']')) {
        P->p++;
        return UG_OK;
    }
    snprintf(what, sizeof what, "a %s number", key);
    for (bool more = true; more;) {
        uint64_t v = 0;
        size_t at = (skip_ws(P), P->p);
        UG_TRY(parse_uint(P, max, what, &v));
        if (*count == cap)
            return perr(P, at, "%s with more than %d numbers, expected %s", key, cap,
                        cap == 2 ? "2 ([begin, end])" : "at most 8 dimensions (UG_MAX_DIMS)");
        values[(*count)++] = v;
        UG_TRY(next_or_close(P, ']', what, &more));
    }
    return UG_OK;
}

static void shape_text(const ug_st_tensor *t, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* One tensor entry; its name is in P->str, at key_at. */
static ug_status parse_tensor(parser *P, uint64_t key_at)
{
    ug_st_file *f = P->f;
    char q[QBUF];
    if (f->count == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        ug_st_tensor *t = ug_realloc(f->tensors, (size_t)cap * sizeof *t);
        if (t)
            f->tensors = t;
        uint64_t *a = t ? ug_realloc(P->name_at, (size_t)cap * sizeof *a) : NULL;
        if (a)
            P->name_at = a;
        uint64_t *o = a ? ug_realloc(P->offsets_at, (size_t)cap * sizeof *o) : NULL;
        if (!o)
            return oom(P->path);
        P->offsets_at = o;
        f->cap = cap;
    }
    ug_st_tensor *t = &f->tensors[f->count];
    memset(t, 0, sizeof *t);
    t->name = ug_malloc(P->str_len + 1);
    if (!t->name)
        return oom(P->path);
    memcpy(t->name, P->str, P->str_len + 1);
    P->name_at[f->count] = key_at;
    P->offsets_at[f->count] = key_at;
    f->count++; /* freed with the file from here on */
    snprintf(P->ctx, sizeof P->ctx, "tensor %s: ", quoted(t->name, q, sizeof q));

    skip_ws(P);
    size_t open_at = P->p;
    UG_TRY(expect(P, '{', "'{' (the tensor's dtype, shape and data_offsets)"));
    bool have_dtype = false, have_shape = false, have_offsets = false;
    uint64_t off[2] = {0, 0};
    bool more = !at_char(P, '}');
    if (!more)
        P->p++;
    while (more) {
        skip_ws(P);
        size_t at = P->p;
        UG_TRY(parse_string(P, "a key: \"dtype\", \"shape\" or \"data_offsets\""));
        UG_TRY(expect(P, ':', "':' after the key"));
        bool *have = !strcmp(P->str, "dtype")          ? &have_dtype
                     : !strcmp(P->str, "shape")        ? &have_shape
                     : !strcmp(P->str, "data_offsets") ? &have_offsets
                                                       : NULL;
        if (!have) {
            char q2[QBUF];
            return perr(P, at, "the key %s, expected \"dtype\", \"shape\" or \"data_offsets\"",
                        quoted(P->str, q2, sizeof q2));
        }
        if (*have)
            return perr(P, at, "a second \"%s\", expected each key once", P->str);
        *have = true;
        if (have == &have_dtype) {
            skip_ws(P);
            size_t vat = P->p;
            UG_TRY(parse_string(P, "a dtype string such as \"F32\""));
            int d = 0;
            while (d < DTYPES && strcmp(dtypes[d].name, P->str) != 0)
                d++;
            if (d == DTYPES) {
                char q2[QBUF];
                return perr(P, vat, "the dtype %s, expected one of " DTYPE_LIST,
                            quoted(P->str, q2, sizeof q2));
            }
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[d].name);
            t->elem_bytes = dtypes[d].bytes;
            t->dtype = dtypes[d].ug >= 0 ? (ug_dtype)dtypes[d].ug : UG_ST_NO_DTYPE;
        } else if (have == &have_shape) {
            uint64_t dims[UG_MAX_DIMS];
            UG_TRY(parse_uint_array(P, "shape", INT64_MAX, dims, UG_MAX_DIMS, &t->ndim));
            for (int i = 0; i < t->ndim; i++)
                t->shape[i] = (int64_t)dims[i];
        } else {
            skip_ws(P);
            P->offsets_at[f->count - 1] = P->p;
            int k = 0;
            UG_TRY(parse_uint_array(P, "data_offsets", UINT64_MAX, off, 2, &k));
            if (k != 2)
                return perr(P, P->offsets_at[f->count - 1],
                            "data_offsets with %d number%s, expected 2 ([begin, end])",
                            k, k == 1 ? "" : "s");
        }
        UG_TRY(next_or_close(P, '}', "key of the tensor", &more));
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return perr(P, open_at, "no \"%s\", expected \"dtype\", \"shape\" and \"data_offsets\"",
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");

    /* Now the entry is whole: its numbers must agree. */
    uint64_t at = P->offsets_at[f->count - 1];
    char shape[200];
    shape_text(t, shape, sizeof shape);
    uint64_t bytes = (uint64_t)t->elem_bytes;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0)
            bytes = 0; /* empty, however large the other dimensions */
    for (int i = 0; i < t->ndim && bytes; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (bytes > UINT64_MAX / d)
            return perr(P, at, "%s %s holds more than 2^64 bytes, expected a size a file can have",
                        t->dtype_name, shape);
        bytes *= d;
    }
    t->bytes = bytes;
    if (off[0] > off[1])
        return perr(P, at, "data_offsets [%llu, %llu] begin after they end, expected begin <= end",
                    (unsigned long long)off[0], (unsigned long long)off[1]);
    if (off[1] > P->buffer)
        return perr(P, at,
                    "data_offsets [%llu, %llu] end past the buffer, expected at most "
                    "%llu (the file ends at byte %llu)",
                    (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)P->buffer, (unsigned long long)(P->base + P->buffer));
    if (off[1] - off[0] != bytes)
        return perr(P, at, "data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu",
                    (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)(off[1] - off[0]), t->dtype_name, shape,
                    (unsigned long long)bytes);
    t->offset = P->base + off[0];
    P->ctx[0] = '\0';
    return UG_OK;
}

static ug_status parse_metadata(parser *P)
{
    ug_st_file *f = P->f;
    char q[QBUF], b[16];
    UG_TRY(expect(P, '{', "'{' (\"__metadata__\" is an object of strings)"));
    bool more = !at_char(P, '}');
    if (!more)
        P->p++;
    while (more) {
        skip_ws(P);
        size_t at = P->p;
        UG_TRY(parse_string(P, "a string (a metadata key)"));
        if (f->meta_count == f->meta_cap) {
            int cap = f->meta_cap ? 2 * f->meta_cap : 8;
            st_meta *m = ug_realloc(f->meta, (size_t)cap * sizeof *m);
            if (m)
                f->meta = m;
            uint64_t *a = m ? ug_realloc(P->meta_at, (size_t)cap * sizeof *a) : NULL;
            if (!a)
                return oom(P->path);
            P->meta_at = a;
            f->meta_cap = cap;
        }
        st_meta *m = &f->meta[f->meta_count];
        m->value = NULL;
        m->key = ug_malloc(P->str_len + 1);
        if (!m->key)
            return oom(P->path);
        memcpy(m->key, P->str, P->str_len + 1);
        P->meta_at[f->meta_count++] = at;
        UG_TRY(expect(P, ':', "':' after the key"));
        skip_ws(P);
        if (P->p >= P->n || P->s[P->p] != '"')
            return perr(P, P->p, "metadata %s: found %s, expected a string value (metadata maps strings to strings)",
                        quoted(m->key, q, sizeof q), found(P, P->p, b));
        UG_TRY(parse_string(P, "a string"));
        m->value = ug_malloc(P->str_len + 1);
        if (!m->value)
            return oom(P->path);
        memcpy(m->value, P->str, P->str_len + 1);
        UG_TRY(next_or_close(P, '}', "metadata entry", &more));
    }
    return UG_OK;
}

static ug_status parse_header(parser *P)
{
    ug_st_file *f = P->f;
    char q[QBUF], b[16];
    if (P->n == 0 || P->s[0] != '{')
        return perr(P, 0, "found %s, expected '{' (the header is a JSON object)", found(P, 0, b));
    P->p = 1;
    uint64_t meta_key_at = 0;
    bool seen_meta = false;
    bool more = !at_char(P, '}');
    if (!more)
        P->p++;
    while (more) {
        skip_ws(P);
        size_t at = P->p;
        UG_TRY(parse_string(P, "a string (a tensor name or \"__metadata__\")"));
        UG_TRY(expect(P, ':', "':' after the name"));
        if (!strcmp(P->str, "__metadata__")) {
            if (seen_meta)
                return perr(P, at, "a second \"__metadata__\" (the first at byte %llu), expected one",
                            (unsigned long long)(8 + meta_key_at));
            seen_meta = true;
            meta_key_at = at;
            UG_TRY(parse_metadata(P));
        } else {
            UG_TRY(parse_tensor(P, at));
        }
        UG_TRY(next_or_close(P, '}', "tensor", &more));
    }
    skip_ws(P);
    if (P->p != P->n)
        return perr(P, P->p, "found %s after the header's JSON object, expected only spaces up to the buffer",
                    found(P, P->p, b));

    /* Names and metadata keys: unique. */
    if (f->count) {
        f->by_name = ug_malloc((size_t)f->count * sizeof *f->by_name);
        if (!f->by_name)
            return oom(P->path);
        for (int i = 0; i < f->count; i++)
            f->by_name[i] = &f->tensors[i];
        qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, cmp_tensor_name);
        for (int i = 1; i < f->count; i++)
            if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name)) {
                uint64_t a = P->name_at[f->by_name[i - 1] - f->tensors];
                uint64_t z = P->name_at[f->by_name[i] - f->tensors];
                return perr(P, a > z ? a : z, "tensor %s again (first at byte %llu), expected unique names",
                            quoted(f->by_name[i]->name, q, sizeof q),
                            (unsigned long long)(8 + (a < z ? a : z)));
            }
    }
    if (f->meta_count) {
        f->meta_by_key = ug_malloc((size_t)f->meta_count * sizeof *f->meta_by_key);
        if (!f->meta_by_key)
            return oom(P->path);
        for (int i = 0; i < f->meta_count; i++)
            f->meta_by_key[i] = &f->meta[i];
        qsort(f->meta_by_key, (size_t)f->meta_count, sizeof *f->meta_by_key, cmp_meta_key);
        for (int i = 1; i < f->meta_count; i++)
            if (!strcmp(f->meta_by_key[i - 1]->key, f->meta_by_key[i]->key)) {
                uint64_t a = P->meta_at[f->meta_by_key[i - 1] - f->meta];
                uint64_t z = P->meta_at[f->meta_by_key[i] - f->meta];
                return perr(P, a > z ? a : z, "metadata key %s again (first at byte %llu), expected unique keys",
                            quoted(f->meta_by_key[i]->key, q, sizeof q),
                            (unsigned long long)(8 + (a < z ? a : z)));
            }
    }

    /* The tensors tile the buffer: sorted by offset, each begins where the
     * one before ends, and the last ends with the file. */
    ug_st_tensor **order = f->count ? ug_malloc((size_t)f->count * sizeof *order) : NULL;
    if (f->count && !order)
        return oom(P->path);
    for (int i = 0; i < f->count; i++)
        order[i] = &f->tensors[i];
    if (f->count)
        qsort(order, (size_t)f->count, sizeof *order, cmp_tensor_offsets);
    uint64_t end = P->base;
    const ug_st_tensor *prev = NULL;
    ug_status st = UG_OK;
    for (int i = 0; i < f->count && st == UG_OK; i++) {
        const ug_st_tensor *t = order[i];
        uint64_t at = P->offsets_at[t - f->tensors];
        unsigned long long b0 = t->offset - P->base, b1 = b0 + t->bytes;
        char q2[QBUF];
        if (t->offset > end && !prev)
            st = perr(P, at,
                      "tensor %s: data_offsets [%llu, %llu], the first tensor in the buffer, "
                      "expected it to begin at 0 (bytes 0 to %llu belong to no tensor)",
                      quoted(t->name, q, sizeof q), b0, b1, b0);
        else if (t->offset > end)
            st = perr(P, at,
                      "tensor %s: data_offsets [%llu, %llu] leave a gap after tensor %s, which ends "
                      "at %llu, expected no gap (bytes %llu to %llu belong to no tensor)",
                      quoted(t->name, q, sizeof q), b0, b1, quoted(prev->name, q2, sizeof q2),
                      (unsigned long long)(end - P->base), (unsigned long long)(end - P->base), b0);
        else if (t->offset < end)
            st = perr(P, at,
                      "tensor %s: data_offsets [%llu, %llu] overlap tensor %s [%llu, %llu], "
                      "expected tensors not to overlap",
                      quoted(t->name, q, sizeof q), b0, b1, quoted(prev->name, q2, sizeof q2),
                      (unsigned long long)(prev->offset - P->base),
                      (unsigned long long)(prev->offset - P->base + prev->bytes));
        end = t->offset + t->bytes;
        prev = t;
    }
    free(order);
    if (st != UG_OK)
        return st;
    if (end != P->base + P->buffer) {
        /* The file offset here is where the unclaimed bytes begin. */
        char what[QBUF + 64];
        if (prev)
            snprintf(what, sizeof what, "the last tensor's data (%s)", quoted(prev->name, q, sizeof q));
        else
            snprintf(what, sizeof what, "the header, with no tensors");
        return perr(P, end - 8, "%llu more bytes after %s, expected the file to end there",
                    (unsigned long long)(P->base + P->buffer - end), what);
    }
    return UG_OK;
}

void ug_st_close(ug_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->count; i++)
        free(f->tensors[i].name);
    for (int i = 0; i < f->meta_count; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    if (f->fd >= 0)
        close(f->fd);
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->meta_by_key);
    free(f->path);
    free(f);
}

/* The checks on N that come before anything is allocated for it. */
static ug_status check_header_length(const char *path, uint64_t n, uint64_t file_bytes)
{
    if (n > UG_ST_MAX_HEADER)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: byte 0: header length %llu, expected at most %u (the format's "
                            "limit; is this a safetensors file?)",
                            path, (unsigned long long)n, UG_ST_MAX_HEADER);
    if (n > file_bytes - 8)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: byte 0: header length %llu goes past the end of the file (%llu "
                            "bytes), expected at most %llu",
                            path, (unsigned long long)n, (unsigned long long)file_bytes,
                            (unsigned long long)(file_bytes - 8));
    return UG_OK;
}

ug_status ug_st_parse(const char *path_for_messages, const char *json, size_t json_bytes,
                      uint64_t file_bytes, ug_st_file **out)
{
    const char *path = path_for_messages ? path_for_messages : "(safetensors header)";
    if (!out || (!json && json_bytes))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_parse: %s is NULL", out ? "json" : "out");
    *out = NULL;
    if (file_bytes < 8)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: byte 0: a file of %llu bytes, expected at least 8 (the header length)",
                            path, (unsigned long long)file_bytes);
    UG_TRY(check_header_length(path, json_bytes, file_bytes));
    ug_st_file *f = ug_calloc(1, sizeof *f);
    if (!f || !(f->path = ug_malloc(strlen(path) + 1))) {
        free(f);
        return oom(path);
    }
    strcpy(f->path, path);
    f->fd = -1;
    f->file_bytes = file_bytes;
    parser P = {
        .path = path,
        .s = (const unsigned char *)json,
        .n = json_bytes,
        .base = 8 + (uint64_t)json_bytes,
        .buffer = file_bytes - 8 - (uint64_t)json_bytes,
        .f = f,
    };
    ug_status st = parse_header(&P);
    free(P.name_at);
    free(P.offsets_at);
    free(P.meta_at);
    free(P.str);
    if (st != UG_OK) {
        ug_st_close(f);
        return st;
    }
    *out = f;
    return UG_OK;
}

/* pread of exactly bytes unless the file ends first: the count read, or
 * -1 with errno. */
static int64_t read_at(int fd, void *dst, uint64_t bytes, uint64_t offset)
{
    uint64_t got = 0;
    while (got < bytes) {
        uint64_t left = bytes - got;
        size_t chunk = left < ((uint64_t)1 << 30) ? (size_t)left : (size_t)1 << 30;
        ssize_t n = pread(fd, (char *)dst + got, chunk, (off_t)(offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    return (int64_t)got;
}

ug_status ug_st_open(const char *path, ug_st_file **out)
{
    if (!path || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_open: %s is NULL", path ? "out" : "path");
    *out = NULL;
    int fd = -1;
    uint64_t size = 0;
    UG_TRY(ug_open_regular_file(path, "the safetensors file", &fd, &size));
    unsigned char len[8];
    char *json = NULL;
    ug_status st;
    int64_t got = size < 8 ? 0 : read_at(fd, len, 8, 0);
    if (got < 0) {
        st = ug_set_error(UG_ERR_IO, "%s: reading the header length failed: %s", path, strerror(errno));
        goto fail;
    }
    if (size < 8 || got < 8) {
        st = ug_set_error(UG_ERR_FORMAT,
                          "%s: byte 0: a file of %llu bytes, expected at least 8 (the header length)",
                          path, (unsigned long long)(size < 8 ? size : (uint64_t)got));
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len[i];
    if ((st = check_header_length(path, n, size)) != UG_OK)
        goto fail;
    json = ug_malloc(n ? (size_t)n : 1);
    if (!json) {
        st = oom(path);
        goto fail;
    }
    got = read_at(fd, json, n, 8);
    if (got < 0) {
        st = ug_set_error(UG_ERR_IO, "%s: reading the %llu-byte header failed: %s", path,
                          (unsigned long long)n, strerror(errno));
        goto fail;
    }
    if ((uint64_t)got < n) {
        st = ug_set_error(UG_ERR_FORMAT,
                          "%s: byte %llu: the end of the file, expected the header up to byte %llu "
                          "(the file shrank while being opened)",
                          path, (unsigned long long)(8 + got), (unsigned long long)(8 + n));
        goto fail;
    }
    ug_st_file *f = NULL;
    if ((st = ug_st_parse(path, json, (size_t)n, size, &f)) != UG_OK)
        goto fail;
    free(json);
    f->fd = fd;
    *out = f;
    return UG_OK;
fail:
    free(json);
    close(fd);
    return st;
}

int ug_st_count(const ug_st_file *f) { return f ? f->count : 0; }

const ug_st_tensor *ug_st_at(const ug_st_file *f, int index)
{
    return f && index >= 0 && index < f->count ? &f->tensors[index] : NULL;
}

const ug_st_tensor *ug_st_find(const ug_st_file *f, const char *name)
{
    if (!f || !name || !f->count)
        return NULL;
    ug_st_tensor key = {.name = (char *)name}, *pkey = &key;
    ug_st_tensor **hit = bsearch(&pkey, f->by_name, (size_t)f->count, sizeof *f->by_name, cmp_tensor_name);
    return hit ? *hit : NULL;
}

int ug_st_metadata_count(const ug_st_file *f) { return f ? f->meta_count : 0; }

const char *ug_st_metadata(const ug_st_file *f, const char *key)
{
    if (!f || !key || !f->meta_count)
        return NULL;
    st_meta m = {.key = (char *)key}, *pm = &m;
    st_meta **hit = bsearch(&pm, f->meta_by_key, (size_t)f->meta_count, sizeof *f->meta_by_key, cmp_meta_key);
    return hit ? (*hit)->value : NULL;
}

void ug_st_metadata_at(const ug_st_file *f, int index, const char **key, const char **value)
{
    bool in = f && index >= 0 && index < f->meta_count;
    if (key)
        *key = in ? f->meta[index].key : NULL;
    if (value)
        *value = in ? f->meta[index].value : NULL;
}

const char *ug_st_path(const ug_st_file *f) { return f ? f->path : NULL; }

ug_status ug_st_read(ug_st_file *f, const ug_st_tensor *t, void *dst, size_t bytes)
{
    char q[QBUF];
    if (!f || !t || (!dst && bytes))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_read: %s is NULL",
                            !f ? "the file" : !t ? "the tensor" : "dst");
    if (t < f->tensors || t >= f->tensors + f->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_read: %s: the tensor is not one of this file's",
                            f->path);
    if ((uint64_t)bytes != t->bytes)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_st_read: %s: tensor %s holds %llu bytes, but the destination has %zu",
                            f->path, quoted(t->name, q, sizeof q), (unsigned long long)t->bytes, bytes);
    if (f->fd < 0)
        return ug_set_error(UG_ERR_STATE, "ug_st_read: %s was parsed from memory: no file to read",
                            f->path);
    int64_t got = read_at(f->fd, dst, t->bytes, t->offset);
    if (got < 0)
        return ug_set_error(UG_ERR_IO, "%s: reading tensor %s (%llu bytes at byte %llu) failed: %s",
                            f->path, quoted(t->name, q, sizeof q), (unsigned long long)t->bytes,
                            (unsigned long long)t->offset, strerror(errno));
    if ((uint64_t)got < t->bytes)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: byte %llu: the end of the file, expected tensor %s's data up to "
                            "byte %llu (the file shrank after it was opened)",
                            f->path, (unsigned long long)(t->offset + (uint64_t)got),
                            quoted(t->name, q, sizeof q), (unsigned long long)(t->offset + t->bytes));
    return UG_OK;
}

/* ---- writing ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void add(sbuf *b, const char *s, size_t k)
{
    if (b->oom)
        return;
    if (b->len + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + k + 1)
            cap *= 2;
        char *p = ug_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, k);
    b->len += k;
    b->p[b->len] = '\0';
}

static void adds(sbuf *b, const char *s) { add(b, s, strlen(s)); }

static void addf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(sbuf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        b->oom = true; /* not with this file's formats: numbers and dtype names */
    else
        add(b, tmp, (size_t)k);
}

/* A JSON string: quotes, backslashes and control characters escaped, the
 * rest (valid UTF-8, checked before) as it is. */
static void add_json_string(sbuf *b, const char *s)
{
    add(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            add(b, e, 2);
        } else if (c < 0x20) {
            addf(b, "\\u%04x", c);
        } else {
            add(b, p, 1);
        }
    }
    add(b, "\"", 1);
}

static bool valid_utf8(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int k = utf8_len((const unsigned char *)s + i, n - i);
        if (!k)
            return false;
        i += (size_t)k;
    }
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted copy of n strings; the first repeated one, if any, in *dup. */
static ug_status find_duplicate(const char *path, const char *const *names, int n, const char **dup)
{
    *dup = NULL;
    if (n < 2)
        return UG_OK;
    const char **s = ug_malloc((size_t)n * sizeof *s);
    if (!s)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str);
    for (int i = 1; i < n && !*dup; i++)
        if (!strcmp(s[i - 1], s[i]))
            *dup = s[i];
    free(s);
    return UG_OK;
}

static ug_status check_entries(const char *path, const ug_st_entry *tensors, int count,
                               const char *const *meta_keys, const char *const *meta_values,
                               int meta_count, uint64_t *sizes)
{
    char q[QBUF];
    uint64_t total = 0;
    if (count < 0 || meta_count < 0 || (count && !tensors) ||
        (meta_count && (!meta_keys || !meta_values)))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: %d tensors at %p, %d metadata at %p/%p",
                            path, count, (const void *)tensors, meta_count, (const void *)meta_keys,
                            (const void *)meta_values);
    for (int i = 0; i < count; i++) {
        const ug_st_entry *e = &tensors[i];
        if (!e->name || !valid_utf8(e->name) || !strcmp(e->name, "__metadata__"))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %d: the name %s, expected %s", path,
                                i, e->name ? quoted(e->name, q, sizeof q) : "NULL",
                                e->name && !strcmp(e->name, "__metadata__")
                                    ? "any other (\"__metadata__\" is the format's)"
                                    : "a UTF-8 string");
        if (!ug_st_dtype_name(e->dtype))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %s: dtype %d, expected a ug_dtype",
                                path, quoted(e->name, q, sizeof q), (int)e->dtype);
        if (e->ndim < 0 || e->ndim > UG_MAX_DIMS || (e->ndim && !e->shape))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "saving %s: tensor %s: ndim %d%s, expected 0 to %d with a shape", path,
                                quoted(e->name, q, sizeof q), e->ndim, e->shape ? "" : " and no shape",
                                UG_MAX_DIMS);
        uint64_t bytes = ug_dtype_size(e->dtype);
        bool overflow = false;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0)
                return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                    "saving %s: tensor %s: dimension %d is %lld, expected >= 0", path,
                                    quoted(e->name, q, sizeof q), d, (long long)e->shape[d]);
            uint64_t n = (uint64_t)e->shape[d];
            if (n && bytes > (UINT64_MAX >> 1) / n)
                overflow = true;
            else
                bytes *= n;
        }
        for (int d = 0; d < e->ndim; d++)
            if (e->shape[d] == 0)
                bytes = 0, overflow = false;
        if (overflow)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %s: more than 2^63 bytes", path,
                                quoted(e->name, q, sizeof q));
        if (bytes && !e->data)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %s: data is NULL", path,
                                quoted(e->name, q, sizeof q));
        sizes[i] = bytes;
        if (total + bytes < total)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: more than 2^64 bytes in all", path);
        total += bytes;
    }
    for (int i = 0; i < meta_count; i++)
        if (!meta_keys[i] || !meta_values[i] || !valid_utf8(meta_keys[i]) || !valid_utf8(meta_values[i]))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "saving %s: metadata %d: %s, expected UTF-8 strings", path, i,
                                !meta_keys[i] || !meta_values[i] ? "NULL" : "not UTF-8");
    const char *dup = NULL;
    const char **names = count ? ug_malloc((size_t)count * sizeof *names) : NULL;
    if (count && !names)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
    for (int i = 0; i < count; i++)
        names[i] = tensors[i].name;
    ug_status st = find_duplicate(path, names, count, &dup);
    free(names);
    UG_TRY(st);
    if (dup)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: two tensors named %s, expected unique names",
                            path, quoted(dup, q, sizeof q));
    UG_TRY(find_duplicate(path, meta_keys, meta_count, &dup));
    if (dup)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: two metadata keys %s, expected unique keys",
                            path, quoted(dup, q, sizeof q));
    return UG_OK;
}

ug_status ug_st_save(const char *path, const ug_st_entry *tensors, int count,
                     const char *const *meta_keys, const char *const *meta_values, int meta_count,
                     int keep)
{
    if (!path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_st_save: path is NULL");
    if (keep < 1 || keep > UG_ATOMIC_MAX_KEEP)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: keep %d copies, expected 1 to %d",
                            path, keep, UG_ATOMIC_MAX_KEEP);
    uint64_t *sizes = ug_malloc((size_t)(count > 0 ? count : 1) * sizeof *sizes);
    if (!sizes)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", path);
    ug_status st = check_entries(path, tensors, count, meta_keys, meta_values, meta_count, sizes);
    if (st != UG_OK) {
        free(sizes);
        return st;
    }

    sbuf h = {0};
    adds(&h, "{");
    if (meta_count) {
        adds(&h, "\"__metadata__\":{");
        for (int i = 0; i < meta_count; i++) {
            if (i)
                adds(&h, ",");
            add_json_string(&h, meta_keys[i]);
            adds(&h, ":");
            add_json_string(&h, meta_values[i]);
        }
        adds(&h, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const ug_st_entry *e = &tensors[i];
        if (i || meta_count)
            adds(&h, ",");
        add_json_string(&h, e->name);
        addf(&h, ":{\"dtype\":\"%s\",\"shape\":[", ug_st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++)
            addf(&h, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        addf(&h, "],\"data_offsets\":[%llu,", (unsigned long long)offset);
        offset += sizes[i]; /* no wrap: check_entries checked the total */
        addf(&h, "%llu]}", (unsigned long long)offset);
    }
    adds(&h, "}");
    /* Spaces up to a multiple of 8, so the buffer (at 8 + N) is aligned for
     * readers that map the file. */
    while (!h.oom && h.len % 8)
        adds(&h, " ");
    if (h.oom) {
        free(h.p);
        free(sizes);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory for the header", path);
    }
    if (h.len > UG_ST_MAX_HEADER) {
        free(h.p);
        free(sizes);
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "saving %s: the header would be %zu bytes, more than readers accept (%u)",
                            path, h.len, UG_ST_MAX_HEADER);
    }

    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    ug_atomic_file *f = NULL;
    st = ug_atomic_open(path, &f);
    if (st == UG_OK)
        st = ug_atomic_write(f, len, sizeof len);
    if (st == UG_OK)
        st = ug_atomic_write(f, h.p, h.len);
    for (int i = 0; i < count && st == UG_OK; i++)
        st = ug_atomic_write(f, tensors[i].data, (size_t)sizes[i]);
    free(h.p);
    free(sizes);
    if (st != UG_OK) {
        ug_atomic_abort(f);
        return st;
    }
    return ug_atomic_commit(f, keep);
}
