/* The IDX reader (the format of MNIST and Fashion-MNIST).
 *
 * Layout: bytes 0-1 are zero, byte 2 the element type, byte 3 the number of
 * dimensions, then one big-endian u32 size per dimension, then the elements,
 * big-endian, row-major. Files are often gzip-compressed; zlib's gzread
 * reads a gzip stream and a plain file alike (it looks for the 1f 8b magic),
 * so one code path serves both, and byte offsets in messages are offsets in
 * the IDX data (the decompressed stream for a gzip file).
 *
 * The file is untrusted input: every field is checked, sizes are multiplied
 * with overflow checks, and the data buffer grows as data actually arrives
 * rather than being sized from the header, so a 20-byte file claiming
 * terabytes fails with a "truncated" message instead of a huge allocation. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/fault.h"
#include "core/data/internal.h"
#include "base/regular_file.h"
#include "core/runtime/internal.h"

typedef struct idx_type {
    unsigned char code;
    const char *name;
    size_t size;       /* bytes per element in the file */
    ug_dtype dtype;    /* what it becomes in memory */
} idx_type;

/* i8 and i16 have no ug_dtype; widening them to i32 is exact, so they are
 * read rather than refused. f64 (0x0E) would lose precision as f32, so it is
 * refused with a message saying what to do. */
static const idx_type idx_types[] = {
    {0x08, "u8", 1, UG_U8},
    {0x09, "i8", 1, UG_I32},
    {0x0B, "i16", 2, UG_I32},
    {0x0C, "i32", 4, UG_I32},
    {0x0D, "f32", 4, UG_F32},
};

#define IDX_SUPPORTED "0x08 (u8), 0x09 (i8, read as i32), 0x0B (i16, read as i32), 0x0C (i32), 0x0D (f32)"

typedef struct reader {
    gzFile gz;
    const char *path;
    uint64_t pos;      /* bytes of IDX data consumed so far */
} reader;

/* " of the decompressed data" after an offset when the file is gzip. */
static const char *where(reader *r) { return gzdirect(r->gz) ? "" : " of the decompressed data"; }

/* zlib's messages start with the file's name, "<fd:3>: " for gzdopen. */
static const char *zlib_message(const char *msg)
{
    if (!msg || !*msg)
        return "unknown error";
    const char *colon = msg[0] == '<' ? strstr(msg, ">: ") : NULL;
    return colon ? colon + 3 : msg;
}

static ug_status stream_error(reader *r, const char *during)
{
    int errnum = 0;
    const char *msg = zlib_message(gzerror(r->gz, &errnum));
    if (errnum == Z_ERRNO) /* msg is strerror of the failed read */
        return ug_set_error(UG_ERR_IO, "%s: read error at byte offset %llu while reading %s: %s",
                            r->path, (unsigned long long)r->pos, during, msg);
    if (errnum == Z_MEM_ERROR)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: zlib ran out of memory at byte offset %llu",
                            r->path, (unsigned long long)r->pos);
    /* zlib decompresses ahead of what was asked for, and a checksum error
     * shows only at the end of the stream, so the compressed offset where
     * zlib stopped says more than the IDX offset reached. */
    return ug_set_error(UG_ERR_FORMAT,
                        "%s: the gzip stream is corrupt (zlib: %s), found at byte offset %lld "
                        "of the compressed file while reading %s (%llu bytes of IDX data read); "
                        "the file is damaged, fetch it again",
                        r->path, msg, (long long)gzoffset(r->gz), during,
                        (unsigned long long)r->pos);
}

/* Reads up to n bytes; *got is what arrived before the end of the data. A
 * gzip stream that is cut short ends like a plain file here (zlib reports
 * it as Z_BUF_ERROR, which truncated_note() turns into a remark). */
static ug_status read_some(reader *r, void *buf, size_t n, size_t *got, const char *during)
{
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (1u << 30))
            want = 1u << 30;
        int k = gzread(r->gz, (char *)buf + *got, (unsigned)want);
        if (k < 0)
            return stream_error(r, during);
        if (k == 0) {
            int errnum = 0;
            gzerror(r->gz, &errnum);
            if (errnum != Z_OK && errnum != Z_BUF_ERROR)
                return stream_error(r, during);
            break;
        }
        *got += (size_t)k;
        r->pos += (uint64_t)k;
    }
    return UG_OK;
}

static const char *truncated_note(reader *r)
{
    int errnum = 0;
    gzerror(r->gz, &errnum);
    return errnum == Z_BUF_ERROR ? " (the gzip stream itself is cut short)" : "";
}

#define IDX_DEFAULT_MAX_BYTES ((uint64_t)512 << 20)
static _Atomic uint64_t max_bytes_set; /* 0: not set by the program */

void ug_idx_set_max_bytes(uint64_t bytes) { max_bytes_set = bytes; }

uint64_t ug_idx_max_bytes(void)
{
    uint64_t set = max_bytes_set, env = 0;
    if (set)
        return set;
    const char *text = getenv("UG_IDX_MAX_BYTES");
    if (text && *text && ug_memory_parse_size(text, &env) == UG_OK && env > 0)
        return env;
    return IDX_DEFAULT_MAX_BYTES;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the elements: grows the buffer as data arrives (see the top). */
static ug_status read_data(reader *r, size_t header, size_t expected, unsigned char **out)
{
    size_t cap = expected < (1u << 20) ? expected : (1u << 20);
    unsigned char *buf = ug_malloc(cap ? cap : 1);
    if (!buf)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes of data",
                            r->path, cap);
    size_t have = 0;
    for (;;) {
        size_t got = 0;
        ug_status st = read_some(r, buf + have, cap - have, &got, "the data");
        if (st != UG_OK) {
            free(buf);
            return st;
        }
        have += got;
        if (have < cap)
            break; /* the data ended early */
        if (cap == expected)
            break;
        size_t grown = cap <= expected / 2 ? cap * 2 : expected;
        unsigned char *g = ug_realloc(buf, grown);
        if (!g) {
            free(buf);
            return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                                "%s: out of host memory for %zu bytes of data", r->path, grown);
        }
        buf = g;
        cap = grown;
    }
    if (have < expected) {
        free(buf);
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: truncated data: expected %zu bytes of data after the %zu-byte "
                            "header, found %zu (the data ends at byte offset %llu%s)%s",
                            r->path, expected, header, have, (unsigned long long)r->pos,
                            where(r), truncated_note(r));
    }
    /* Anything after the data means the header's sizes do not describe the
     * file: refuse rather than silently drop it. */
    unsigned char scratch[4096];
    uint64_t end = r->pos, extra = 0;
    for (;;) {
        size_t got = 0;
        ug_status st = read_some(r, scratch, sizeof scratch, &got, "past the end of the data");
        if (st != UG_OK) {
            free(buf);
            return st;
        }
        extra += got;
        if (got < sizeof scratch)
            break;
    }
    if (extra) {
        free(buf);
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: %llu trailing bytes after the data: the header's sizes account "
                            "for %zu bytes of data after the %zu-byte header, so the file should "
                            "end at byte offset %llu%s",
                            r->path, (unsigned long long)extra, expected, header,
                            (unsigned long long)end, where(r));
    }
    *out = buf;
    return UG_OK;
}

static ug_status parse(reader *r, ug_idx *idx, size_t *elem_size, size_t *header_bytes)
{
    unsigned char head[4];
    size_t got = 0;
    UG_TRY(read_some(r, head, 4, &got, "the header"));
    if (got == 0)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: the file is empty%s; expected an IDX header at byte offset 0",
                            r->path, truncated_note(r));
    if (got < 4)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: truncated header: the file ends at byte offset %zu%s, inside "
                            "the 4-byte IDX magic%s",
                            r->path, got, where(r), truncated_note(r));
    if (head[0] != 0 || head[1] != 0)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: not an IDX file: bytes at offset 0-1 are %02x %02x, expected "
                            "00 00 (an IDX file starts 00 00, type byte, dimension count)",
                            r->path, head[0], head[1]);
    const idx_type *type = NULL;
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == head[2])
            type = &idx_types[i];
    if (!type && head[2] == 0x0E)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: element type 0x0E (f64) at byte offset 2 is not supported: "
                            "unigrad reads " IDX_SUPPORTED "; convert the file to f32",
                            r->path);
    if (!type)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: unknown IDX element type 0x%02x at byte offset 2; supported: "
                            IDX_SUPPORTED,
                            r->path, head[2]);
    int ndim = head[3];
    if (ndim < 1 || ndim > UG_MAX_DIMS)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: dimension count %d at byte offset 3 is outside 1..%d",
                            r->path, ndim, UG_MAX_DIMS);
    size_t header = 4 + 4 * (size_t)ndim;
    unsigned char sizes[4 * UG_MAX_DIMS];
    UG_TRY(read_some(r, sizes, 4 * (size_t)ndim, &got, "the header"));
    if (got < 4 * (size_t)ndim)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: truncated header: %d dimensions need a %zu-byte header, but "
                            "the file ends at byte offset %llu%s%s",
                            r->path, ndim, header, (unsigned long long)r->pos, where(r),
                            truncated_note(r));
    /* numel * element size must fit size_t and int64_t (tensor shapes). */
    uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX
                                                               : (uint64_t)SIZE_MAX;
    uint64_t bytes = type->size;
    for (int i = 0; i < ndim; i++) {
        uint32_t d = be32(sizes + 4 * i);
        if (d == 0)
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: dimension %d (the size at byte offset %d) is 0; an IDX "
                                "array here must hold at least one element",
                                r->path, i, 4 + 4 * i);
        /* The widened in-memory copy of i8/i16 is 4 bytes an element. */
        if (bytes > limit / d || (uint64_t)d * bytes > limit / 4)
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: the sizes overflow: with dimension %d (%u, at byte offset "
                                "%d) the array would hold more bytes than fit in memory",
                                r->path, i, d, 4 + 4 * i);
        bytes *= d;
        idx->shape[i] = d;
    }
    uint64_t held = type->size < 4 && type->dtype == UG_I32 ? bytes / type->size * 4 : bytes;
    if (held > ug_idx_max_bytes())
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: the header declares %llu bytes of data, above the limit of %llu "
                            "for IDX arrays; if the file is right, raise the limit with "
                            "UG_IDX_MAX_BYTES or ug_idx_set_max_bytes",
                            r->path, (unsigned long long)held,
                            (unsigned long long)ug_idx_max_bytes());
    idx->ndim = ndim;
    idx->dtype = type->dtype;
    *elem_size = type->size;
    *header_bytes = header;

    unsigned char *raw = NULL;
    UG_TRY(read_data(r, header, (size_t)bytes, &raw));
    size_t numel = (size_t)bytes / type->size;
    /* Big-endian to host order, assembling values from bytes so the host's
     * own byte order does not matter. */
    if (type->code == 0x0C || type->code == 0x0D) {
        for (size_t i = 0; i < numel; i++) {
            uint32_t v = be32(raw + 4 * i);
            memcpy(raw + 4 * i, &v, 4);
        }
    } else if (type->code == 0x09 || type->code == 0x0B) {
        int32_t *wide = ug_malloc(numel * sizeof *wide);
        if (!wide) {
            free(raw);
            return ug_set_error(UG_ERR_OUT_OF_MEMORY,
                                "%s: out of host memory widening %zu elements to i32", r->path,
                                numel);
        }
        for (size_t i = 0; i < numel; i++) {
            if (type->code == 0x09)
                wide[i] = (int8_t)raw[i];
            else
                wide[i] = (int16_t)(uint16_t)((unsigned)raw[2 * i] << 8 | raw[2 * i + 1]);
        }
        free(raw);
        raw = (unsigned char *)wide;
    }
    idx->data = raw;
    return UG_OK;
}

ug_status ug_idx_read_ex(const char *path, ug_idx **out, size_t *file_elem_size,
                         size_t *header_bytes)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_idx_read: out is NULL");
    *out = NULL;
    if (!path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_idx_read: path is NULL");
    /* open() first so a missing or unreadable file gets errno's message;
     * gzopen would fold it into a generic failure. */
    int fd = -1;
    UG_TRY(ug_open_regular_file(path, "the IDX file", &fd, NULL));
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory opening the file",
                            path);
    }
    gzbuffer(gz, 1u << 17); /* fewer, larger reads for 30 MB data sets */
    ug_idx *idx = ug_calloc(1, sizeof *idx);
    if (!idx) {
        gzclose_r(gz);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    }
    reader r = {gz, path, 0};
    size_t elem = 0, header = 0;
    ug_status st = parse(&r, idx, &elem, &header);
    gzclose_r(gz); /* closes fd too */
    if (st != UG_OK) {
        ug_idx_free(idx);
        return st;
    }
    if (file_elem_size)
        *file_elem_size = elem;
    if (header_bytes)
        *header_bytes = header;
    *out = idx;
    return UG_OK;
}

ug_status ug_idx_read(const char *path, ug_idx **out)
{
    return ug_idx_read_ex(path, out, NULL, NULL);
}

void ug_idx_free(ug_idx *idx)
{
    if (!idx)
        return;
    free(idx->data);
    free(idx);
}
