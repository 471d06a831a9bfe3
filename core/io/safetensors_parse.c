/* The safetensors header (safetensors.h), read by a small strict parser
 * for exactly the grammar the format has (an object of tensor entries and
 * one metadata object of strings) rather than a general JSON library: no
 * nesting beyond it can even be expressed, every position is known for
 * messages, and nothing is allocated for values that are then refused. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/io/safetensors_internal.h"

/* The format's dtypes. ug < 0: unigrad has no such type. */
static const struct {
    const char *name;
    int bytes;
    int ug;
} dtypes[] = {
    {"F32", 4, UG_F32},  {"F16", 2, UG_F16},   {"BF16", 2, UG_BF16},      {"I32", 4, UG_I32},
    {"U8", 1, UG_U8},    {"BOOL", 1, -1},      {"I8", 1, -1},             {"I16", 2, -1},
    {"U16", 2, -1},      {"U32", 4, -1},       {"I64", 8, UG_I64},            {"U64", 8, -1},
    {"F64", 8, -1},      {"F8_E4M3", 1, -1},   {"F8_E5M2", 1, -1},
};
enum { DTYPES = (int)(sizeof dtypes / sizeof dtypes[0]) };
#define DTYPE_LIST "F32, F16, BF16, I32, U8, BOOL, I8, I16, U16, U32, I64, U64, F64, F8_E4M3 or F8_E5M2"

const char *ug_st_dtype_name(ug_dtype dtype)
{
    for (int i = 0; i < DTYPES; i++)
        if (dtypes[i].ug >= 0 && dtypes[i].ug == (int)dtype)
            return dtypes[i].name;
    return NULL;
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
        return ug_st_oom(P->path);
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
            int len = ug_st_utf8_len(P->s + P->p, P->n - P->p);
            if (!len)
                return perr(P, P->p, "byte 0x%02x that is not valid UTF-8, expected UTF-8 text", c);
            if (!put(P, P->s + P->p, (size_t)len))
                return ug_st_oom(P->path);
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
                return ug_st_oom(P->path);
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
            return ug_st_oom(P->path);
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
            return ug_st_oom(P->path);
        P->offsets_at = o;
        f->cap = cap;
    }
    ug_st_tensor *t = &f->tensors[f->count];
    memset(t, 0, sizeof *t);
    t->name = ug_malloc(P->str_len + 1);
    if (!t->name)
        return ug_st_oom(P->path);
    memcpy(t->name, P->str, P->str_len + 1);
    P->name_at[f->count] = key_at;
    P->offsets_at[f->count] = key_at;
    f->count++; /* freed with the file from here on */
    snprintf(P->ctx, sizeof P->ctx, "tensor %s: ", ug_st_quoted(t->name, q, sizeof q));

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
                        ug_st_quoted(P->str, q2, sizeof q2));
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
                            ug_st_quoted(P->str, q2, sizeof q2));
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
                return ug_st_oom(P->path);
            P->meta_at = a;
            f->meta_cap = cap;
        }
        st_meta *m = &f->meta[f->meta_count];
        m->value = NULL;
        m->key = ug_malloc(P->str_len + 1);
        if (!m->key)
            return ug_st_oom(P->path);
        memcpy(m->key, P->str, P->str_len + 1);
        P->meta_at[f->meta_count++] = at;
        UG_TRY(expect(P, ':', "':' after the key"));
        skip_ws(P);
        if (P->p >= P->n || P->s[P->p] != '"')
            return perr(P, P->p, "metadata %s: found %s, expected a string value (metadata maps strings to strings)",
                        ug_st_quoted(m->key, q, sizeof q), found(P, P->p, b));
        UG_TRY(parse_string(P, "a string"));
        m->value = ug_malloc(P->str_len + 1);
        if (!m->value)
            return ug_st_oom(P->path);
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
            return ug_st_oom(P->path);
        for (int i = 0; i < f->count; i++)
            f->by_name[i] = &f->tensors[i];
        qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, ug_st_cmp_tensor_name);
        for (int i = 1; i < f->count; i++)
            if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name)) {
                uint64_t a = P->name_at[f->by_name[i - 1] - f->tensors];
                uint64_t z = P->name_at[f->by_name[i] - f->tensors];
                return perr(P, a > z ? a : z, "tensor %s again (first at byte %llu), expected unique names",
                            ug_st_quoted(f->by_name[i]->name, q, sizeof q),
                            (unsigned long long)(8 + (a < z ? a : z)));
            }
    }
    if (f->meta_count) {
        f->meta_by_key = ug_malloc((size_t)f->meta_count * sizeof *f->meta_by_key);
        if (!f->meta_by_key)
            return ug_st_oom(P->path);
        for (int i = 0; i < f->meta_count; i++)
            f->meta_by_key[i] = &f->meta[i];
        qsort(f->meta_by_key, (size_t)f->meta_count, sizeof *f->meta_by_key, ug_st_cmp_meta_key);
        for (int i = 1; i < f->meta_count; i++)
            if (!strcmp(f->meta_by_key[i - 1]->key, f->meta_by_key[i]->key)) {
                uint64_t a = P->meta_at[f->meta_by_key[i - 1] - f->meta];
                uint64_t z = P->meta_at[f->meta_by_key[i] - f->meta];
                return perr(P, a > z ? a : z, "metadata key %s again (first at byte %llu), expected unique keys",
                            ug_st_quoted(f->meta_by_key[i]->key, q, sizeof q),
                            (unsigned long long)(8 + (a < z ? a : z)));
            }
    }

    /* The tensors tile the buffer: sorted by offset, each begins where the
     * one before ends, and the last ends with the file. */
    ug_st_tensor **order = f->count ? ug_malloc((size_t)f->count * sizeof *order) : NULL;
    if (f->count && !order)
        return ug_st_oom(P->path);
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
                      ug_st_quoted(t->name, q, sizeof q), b0, b1, b0);
        else if (t->offset > end)
            st = perr(P, at,
                      "tensor %s: data_offsets [%llu, %llu] leave a gap after tensor %s, which ends "
                      "at %llu, expected no gap (bytes %llu to %llu belong to no tensor)",
                      ug_st_quoted(t->name, q, sizeof q), b0, b1, ug_st_quoted(prev->name, q2, sizeof q2),
                      (unsigned long long)(end - P->base), (unsigned long long)(end - P->base), b0);
        else if (t->offset < end)
            st = perr(P, at,
                      "tensor %s: data_offsets [%llu, %llu] overlap tensor %s [%llu, %llu], "
                      "expected tensors not to overlap",
                      ug_st_quoted(t->name, q, sizeof q), b0, b1, ug_st_quoted(prev->name, q2, sizeof q2),
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
            snprintf(what, sizeof what, "the last tensor's data (%s)", ug_st_quoted(prev->name, q, sizeof q));
        else
            snprintf(what, sizeof what, "the header, with no tensors");
        return perr(P, end - 8, "%llu more bytes after %s, expected the file to end there",
                    (unsigned long long)(P->base + P->buffer - end), what);
    }
    return UG_OK;
}

/* The checks on N that come before anything is allocated for it. */
ug_status ug_st_check_header_length(const char *path, uint64_t n, uint64_t file_bytes)
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
    UG_TRY(ug_st_check_header_length(path, json_bytes, file_bytes));
    ug_st_file *f = ug_calloc(1, sizeof *f);
    if (!f || !(f->path = ug_malloc(strlen(path) + 1))) {
        free(f);
        return ug_st_oom(path);
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
