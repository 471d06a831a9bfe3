/* Tests of the IDX reader and data sets made from IDX files
 * (include/unigrad/data.h). IDX files are written by the tests themselves,
 * plain and gzip (zlib), into a private temporary folder; the real
 * Fashion-MNIST files are read when the system has them. The loader's
 * tests: test_data.c. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "unigrad/data.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* ---- files ---- */

static char temp_dir[64];

static void remove_temp_dir(void)
{
    DIR *d = opendir(temp_dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", temp_dir, e->d_name);
        unlink(path);
        rmdir(path);
    }
    closedir(d);
    rmdir(temp_dir);
}

/* A path in the test's temporary folder (made on first use). */
static const char *temp_path(const char *name)
{
    static char buf[8][512];
    static int next;
    if (!temp_dir[0]) {
        snprintf(temp_dir, sizeof temp_dir, "/tmp/ug-test-data-XXXXXX");
        if (!mkdtemp(temp_dir)) {
            fprintf(stderr, "mkdtemp failed: %s\n", strerror(errno));
            exit(2);
        }
        atexit(remove_temp_dir);
    }
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", temp_dir, name);
    return p;
}

static bool write_file(const char *path, const void *bytes, size_t len, bool gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        if (!gz)
            return false;
        int n = len ? gzwrite(gz, bytes, (unsigned)len) : 0;
        return gzclose(gz) == Z_OK && (size_t)n == len;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    size_t n = fwrite(bytes, 1, len, f);
    return fclose(f) == 0 && n == len;
}

typedef struct bytes {
    unsigned char *p;
    size_t len;
} bytes;

/* IDX bytes: header for type/ndim/dims, then elem_size * numel data bytes
 * taken from data (already big-endian). */
static bytes idx_bytes(unsigned char type, int ndim, const uint32_t *dims, const void *data,
                       size_t data_len)
{
    bytes b;
    b.len = 4 + 4 * (size_t)ndim + data_len;
    b.p = th_alloc(b.len + 1);
    b.p[0] = 0;
    b.p[1] = 0;
    b.p[2] = type;
    b.p[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        b.p[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        b.p[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        b.p[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        b.p[7 + 4 * i] = (unsigned char)dims[i];
    }
    if (data_len)
        memcpy(b.p + 4 + 4 * (size_t)ndim, data, data_len);
    return b;
}

static void be32_put(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes an u8 IDX file of the given shape; values from vals. */
static bool write_u8_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *vals,
                         bool gzip)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    bytes b = idx_bytes(0x08, ndim, dims, vals, n);
    return write_file(path, b.p, b.len, gzip);
}

/* Writes a 32-bit (i32 or f32) IDX file; values given in host order. */
static bool write_32_idx(const char *path, unsigned char type, int ndim, const uint32_t *dims,
                         const void *vals, bool gzip)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    unsigned char *be = th_alloc(4 * n + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, (const char *)vals + 4 * i, 4);
        be32_put(be + 4 * i, v);
    }
    bytes b = idx_bytes(type, ndim, dims, be, 4 * n);
    return write_file(path, b.p, b.len, gzip);
}

/* ---- the IDX reader ---- */

/* A header declaring more than the limit is refused before any allocation;
 * an honest, well-compressed file too (16 MiB of zeros under an 8 MiB
 * limit), and it reads once the limit is raised. */
static void test_idx_size_limit(ug_device *dev)
{
    (void)dev;
    CHECK_EQ_I64(ug_idx_max_bytes(), (int64_t)512 << 20);
    const char *big = temp_path("declares-1g.idx");
    uint32_t gig[3] = {1024, 1024, 1024};
    bytes header = idx_bytes(0x08, 3, gig, (const uint8_t *)"", 0);
    REQUIRE(write_file(big, header.p, header.len, false));
    ug_idx *idx = NULL;
    if (CHECK_STATUS(ug_idx_read(big, &idx), UG_ERR_FORMAT))
        CHECK_ERROR_HAS("declares 1073741824 bytes", "limit of 536870912", "UG_IDX_MAX_BYTES");

    const char *honest = temp_path("zeros-16m.idx.gz");
    uint32_t dims[2] = {4096, 4096};
    uint8_t *zeros = th_alloc((size_t)4096 * 4096);
    REQUIRE(write_u8_idx(honest, 2, dims, zeros, true));
    ug_idx_set_max_bytes((uint64_t)8 << 20);
    CHECK_STATUS(ug_idx_read(honest, &idx), UG_ERR_FORMAT);
    ug_idx_set_max_bytes((uint64_t)16 << 20);
    if (CHECK_STATUS(ug_idx_read(honest, &idx), UG_OK)) {
        CHECK_EQ_I64(idx->shape[0], 4096);
        ug_idx_free(idx);
    }
    ug_idx_set_max_bytes(0); /* back to the default */
}

static void test_idx_round_trip(ug_device *dev)
{
    (void)dev;
    for (int gz = 0; gz < 2; gz++) {
        th_context("%s", gz ? "gzip" : "plain");
        /* u8, three dimensions */
        uint32_t d3[3] = {3, 4, 5};
        uint8_t u8v[60];
        for (int i = 0; i < 60; i++)
            u8v[i] = (uint8_t)(i * 37 + 11);
        const char *p = temp_path(gz ? "u8.idx.gz" : "u8.idx");
        REQUIRE(write_u8_idx(p, 3, d3, u8v, gz));
        ug_idx *idx = NULL;
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->dtype == UG_U8);
        CHECK_EQ_I64(idx->ndim, 3);
        CHECK(idx->shape[0] == 3 && idx->shape[1] == 4 && idx->shape[2] == 5);
        CHECK(memcmp(idx->data, u8v, 60) == 0);
        ug_idx_free(idx);

        /* i32 with negative and extreme values */
        int32_t i32v[6] = {0, -1, 2147483647, -2147483647 - 1, 123456789, -42};
        uint32_t d1[1] = {6};
        p = temp_path(gz ? "i32.idx.gz" : "i32.idx");
        REQUIRE(write_32_idx(p, 0x0C, 1, d1, i32v, gz));
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->dtype == UG_I32);
        CHECK_EQ_I64(idx->ndim, 1);
        CHECK_EQ_I64(idx->shape[0], 6);
        CHECK(memcmp(idx->data, i32v, sizeof i32v) == 0);
        ug_idx_free(idx);

        /* f32, bit for bit (negative zero, infinity, a subnormal) */
        float f32v[8] = {0.5f, -0.0f, 1e30f, -3.25f, 1.0f / 3.0f, 1e-40f, 0, 0};
        f32v[6] = 1.0f / 0.0f;
        f32v[7] = 65504.0f;
        uint32_t d2[2] = {2, 4};
        p = temp_path(gz ? "f32.idx.gz" : "f32.idx");
        REQUIRE(write_32_idx(p, 0x0D, 2, d2, f32v, gz));
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->dtype == UG_F32);
        CHECK(idx->ndim == 2 && idx->shape[0] == 2 && idx->shape[1] == 4);
        CHECK(memcmp(idx->data, f32v, sizeof f32v) == 0);
        ug_idx_free(idx);

        /* i8 and i16 widen to i32 exactly */
        unsigned char i8raw[5] = {0x00, 0x7F, 0x80, 0xFF, 0x05};
        int32_t i8want[5] = {0, 127, -128, -1, 5};
        uint32_t d5[1] = {5};
        bytes b = idx_bytes(0x09, 1, d5, i8raw, 5);
        p = temp_path(gz ? "i8.idx.gz" : "i8.idx");
        REQUIRE(write_file(p, b.p, b.len, gz));
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->dtype == UG_I32 && idx->shape[0] == 5);
        CHECK(memcmp(idx->data, i8want, sizeof i8want) == 0);
        ug_idx_free(idx);

        unsigned char i16raw[8] = {0x00, 0x01, 0x7F, 0xFF, 0x80, 0x00, 0xFF, 0xFE};
        int32_t i16want[4] = {1, 32767, -32768, -2};
        uint32_t d22[2] = {2, 2};
        b = idx_bytes(0x0B, 2, d22, i16raw, 8);
        p = temp_path(gz ? "i16.idx.gz" : "i16.idx");
        REQUIRE(write_file(p, b.p, b.len, gz));
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->dtype == UG_I32 && idx->ndim == 2 && idx->shape[1] == 2);
        CHECK(memcmp(idx->data, i16want, sizeof i16want) == 0);
        ug_idx_free(idx);

        /* eight dimensions, the most allowed */
        uint32_t d8[8] = {1, 2, 1, 2, 1, 2, 1, 3};
        uint8_t v24[24];
        for (int i = 0; i < 24; i++)
            v24[i] = (uint8_t)(200 + i);
        p = temp_path(gz ? "d8.idx.gz" : "d8.idx");
        REQUIRE(write_u8_idx(p, 8, d8, v24, gz));
        REQUIRE_OK(ug_idx_read(p, &idx));
        CHECK(idx->ndim == 8 && idx->shape[7] == 3);
        CHECK(memcmp(idx->data, v24, 24) == 0);
        ug_idx_free(idx);
    }
    CHECK_STATUS(ug_idx_read(NULL, NULL), UG_ERR_INVALID_ARGUMENT);
    ug_idx_free(NULL);
}

/* Writes raw bytes, reads them as IDX, and expects status with the path
 * and every given phrase in the message. */
static void expect_bad(const char *what, const char *name, const void *raw, size_t len,
                       bool gzip, ug_status want, const char *phrase1, const char *phrase2)
{
    th_context("%s", what);
    const char *p = temp_path(name);
    if (raw && !write_file(p, raw, len, gzip)) {
        th_fail(TH_LOC, "could not write %s", p);
        return;
    }
    ug_idx *idx = (ug_idx *)(uintptr_t)1;
    if (CHECK_STATUS(ug_idx_read(p, &idx), want)) {
        CHECK(idx == NULL);
        CHECK_ERROR_HAS(p, phrase1, phrase2);
        CHECK_ERROR_HAS("offset");
    }
}

static void test_idx_errors(ug_device *dev)
{
    (void)dev;
    uint8_t ten[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    uint32_t d10[1] = {10};

    bytes b = idx_bytes(0x08, 1, d10, ten, 10);
    b.p[0] = 0x01;
    expect_bad("bad magic", "magic.idx", b.p, b.len, false, UG_ERR_FORMAT, "not an IDX file",
               "01 00");
    expect_bad("bad magic (gzip)", "magic.idx.gz", b.p, b.len, true, UG_ERR_FORMAT,
               "not an IDX file", "byte");

    b = idx_bytes(0x07, 1, d10, ten, 10);
    expect_bad("unknown type", "type.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "unknown IDX element type 0x07", "byte offset 2");
    b = idx_bytes(0x0E, 1, d10, ten, 10);
    expect_bad("f64 type", "f64.idx", b.p, b.len, false, UG_ERR_FORMAT, "0x0E (f64)",
               "not supported");

    b = idx_bytes(0x08, 0, NULL, ten, 1);
    expect_bad("ndim 0", "ndim0.idx", b.p, b.len, false, UG_ERR_FORMAT, "dimension count 0",
               "byte offset 3");
    uint32_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    b = idx_bytes(0x08, 9, ones, ten, 1);
    expect_bad("ndim 9", "ndim9.idx", b.p, b.len, false, UG_ERR_FORMAT, "dimension count 9",
               "outside 1..8");

    /* A header of three dimensions cut after two sizes. */
    uint32_t d3[3] = {2, 2, 2};
    b = idx_bytes(0x08, 3, d3, ten, 8);
    expect_bad("truncated header", "header.idx", b.p, 12, false, UG_ERR_FORMAT,
               "truncated header", "byte offset 12");
    expect_bad("truncated magic", "magic2.idx", b.p, 3, false, UG_ERR_FORMAT, "truncated header",
               "byte offset 3");
    expect_bad("truncated header (gzip)", "header.idx.gz", b.p, 10, true, UG_ERR_FORMAT,
               "truncated header", "byte offset 10");

    b = idx_bytes(0x08, 1, d10, ten, 7);
    expect_bad("truncated data", "data.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "expected 10 bytes of data after the 8-byte header, found 7", "byte offset 15");
    expect_bad("truncated data (gzip)", "data.idx.gz", b.p, b.len, true, UG_ERR_FORMAT,
               "expected 10 bytes of data after the 8-byte header, found 7", "byte offset 15");
    int32_t three[3] = {1, 2, 3};
    uint32_t d4[1] = {4};
    b = idx_bytes(0x0C, 1, d4, three, 11); /* 4 i32 need 16 bytes */
    expect_bad("truncated i32 data", "data32.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "expected 16 bytes of data after the 8-byte header, found 11", "byte offset 19");

    b = idx_bytes(0x08, 1, d10, ten, 13);
    expect_bad("trailing bytes", "trail.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "3 trailing bytes", "byte offset 18");
    expect_bad("trailing bytes (gzip)", "trail.idx.gz", b.p, b.len, true, UG_ERR_FORMAT,
               "3 trailing bytes", "byte offset 18");

    uint32_t huge[4] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    b = idx_bytes(0x08, 4, huge, ten, 16);
    expect_bad("size overflow", "overflow.idx", b.p, b.len, false, UG_ERR_FORMAT, "overflow",
               "byte offset");
    uint32_t huge2[2] = {0xFFFFFFFFu, 0xFFFFFFFFu};
    b = idx_bytes(0x0C, 2, huge2, ten, 16);
    expect_bad("size overflow i32", "overflow2.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "overflow", "byte offset 8");
    /* Sizes within the limit that claim far more data than the file holds:
     * no allocation of the claimed size, a truncation message. */
    uint32_t big[2] = {0x2000u, 0x2000u};
    b = idx_bytes(0x0D, 2, big, ten, 16);
    expect_bad("sizes past the data", "big.idx", b.p, b.len, false, UG_ERR_FORMAT,
               "expected 268435456 bytes of data after the 12-byte header, found 16",
               "byte offset 28");
    uint32_t zero[2] = {3, 0};
    b = idx_bytes(0x08, 2, zero, ten, 0);
    expect_bad("zero dimension", "zero.idx", b.p, b.len, false, UG_ERR_FORMAT, "dimension 1",
               "byte offset 8");

    expect_bad("empty file", "empty.idx", "", 0, false, UG_ERR_FORMAT, "empty", "byte offset 0");
    expect_bad("empty gzip", "empty.idx.gz", "", 0, true, UG_ERR_FORMAT, "empty",
               "byte offset 0");

    char missing[600];
    snprintf(missing, sizeof missing, "%s", temp_path("does-not-exist.idx"));
    th_context("nonexistent path");
    ug_idx *idx = NULL;
    if (CHECK_STATUS(ug_idx_read(missing, &idx), UG_ERR_IO))
        CHECK_ERROR_HAS(missing, strerror(ENOENT));
    th_context("a directory");
    if (CHECK_STATUS(ug_idx_read(temp_dir, &idx), UG_ERR_IO))
        CHECK_ERROR_HAS(temp_dir, "a folder, expected a regular file");
    /* A FIFO with no writer: refused at once, never a read that waits. */
    th_context("a FIFO");
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s", temp_path("fifo.idx"));
    if (mkfifo(fifo, 0600) != 0) {
        th_fail(TH_LOC, "mkfifo %s: %s", fifo, strerror(errno));
    } else {
        if (CHECK_STATUS(ug_idx_read(fifo, &idx), UG_ERR_IO))
            CHECK_ERROR_HAS(fifo, "a FIFO (named pipe), expected a regular file");
        ug_dataset *fifo_set = NULL;
        CHECK_STATUS(ug_dataset_from_idx(fifo, fifo, 1.0f, 0.0f, &fifo_set), UG_ERR_IO);
        unlink(fifo);
    }

    /* A gzip file damaged in the middle of its compressed stream. */
    th_context("corrupt gzip");
    enum { N = 20000 };
    uint8_t *vals = th_alloc(N);
    for (int i = 0; i < N; i++)
        vals[i] = (uint8_t)((i * i) % 251 ^ (i >> 3));
    uint32_t dn[2] = {100, 200};
    const char *p = temp_path("corrupt.idx.gz");
    REQUIRE(write_u8_idx(p, 2, dn, vals, true));
    FILE *f = fopen(p, "r+b");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    REQUIRE(size > 200);
    for (long at = size / 2; at < size / 2 + 8; at++) {
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x5A, f);
    }
    fclose(f);
    if (CHECK_STATUS(ug_idx_read(p, &idx), UG_ERR_FORMAT))
        CHECK_ERROR_HAS(p, "gzip", "offset");

    /* A gzip file cut in half. */
    th_context("truncated gzip");
    const char *q = temp_path("cut.idx.gz");
    REQUIRE(write_u8_idx(q, 2, dn, vals, true));
    REQUIRE(truncate(q, size / 2) == 0);
    if (CHECK_STATUS(ug_idx_read(q, &idx), UG_ERR_FORMAT))
        CHECK_ERROR_HAS(q, "expected 20000 bytes of data after the 12-byte header", "offset",
                        "cut short");
}

/* ---- data sets ---- */

static void test_dataset_from_idx_errors(ug_device *dev)
{
    (void)dev;
    uint8_t img[5 * 6];
    for (int i = 0; i < 30; i++)
        img[i] = (uint8_t)(i * 8);
    uint32_t di[3] = {5, 2, 3}, dl5[1] = {5}, dl4[1] = {4};
    uint8_t lab[5] = {3, 0, 9, 2, 1};
    const char *ip = temp_path("ds-images.idx");
    char ipath[512];
    snprintf(ipath, sizeof ipath, "%s", ip);
    REQUIRE(write_u8_idx(ipath, 3, di, img, false));

    char lpath[512];
    snprintf(lpath, sizeof lpath, "%s", temp_path("ds-labels.idx.gz"));
    REQUIRE(write_u8_idx(lpath, 1, dl5, lab, true));
    ug_dataset *ds = NULL;
    REQUIRE_OK(ug_dataset_from_idx(ipath, lpath, 1.0f / 255.0f, 0.0f, &ds));
    CHECK_EQ_I64(ug_dataset_count(ds), 5);
    CHECK_EQ_I64(ug_dataset_features(ds), 6);
    CHECK_EQ_I64(ug_dataset_classes(ds), 10);
    ug_dataset_free(ds);

    th_context("count mismatch");
    char l4[512];
    snprintf(l4, sizeof l4, "%s", temp_path("ds-labels4.idx"));
    REQUIRE(write_u8_idx(l4, 1, dl4, lab, false));
    ds = (ug_dataset *)(uintptr_t)1;
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, l4, 1.0f, 0.0f, &ds), UG_ERR_SHAPE)) {
        CHECK(ds == NULL);
        CHECK_ERROR_HAS(ipath, l4, "5 samples", "4 labels");
    }

    th_context("negative label");
    unsigned char neg[5] = {1, 2, 0xFD, 0xFF, 4}; /* i8: 1, 2, -3, -1, 4 */
    bytes b = idx_bytes(0x09, 1, dl5, neg, 5);
    char ln[512];
    snprintf(ln, sizeof ln, "%s", temp_path("ds-neg.idx"));
    REQUIRE(write_file(ln, b.p, b.len, false));
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, ln, 1.0f, 0.0f, &ds), UG_ERR_FORMAT))
        CHECK_ERROR_HAS(ln, "label -3 at index 2", "byte offset 10");
    int32_t neg32[5] = {0, 1, 2, 3, -7};
    snprintf(ln, sizeof ln, "%s", temp_path("ds-neg32.idx"));
    REQUIRE(write_32_idx(ln, 0x0C, 1, dl5, neg32, false));
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, ln, 1.0f, 0.0f, &ds), UG_ERR_FORMAT))
        CHECK_ERROR_HAS(ln, "label -7 at index 4", "byte offset 24");

    th_context("f32 labels");
    float fl[5] = {0, 1, 2, 3, 4};
    snprintf(ln, sizeof ln, "%s", temp_path("ds-f32.idx"));
    REQUIRE(write_32_idx(ln, 0x0D, 1, dl5, fl, false));
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, ln, 1.0f, 0.0f, &ds), UG_ERR_DTYPE))
        CHECK_ERROR_HAS(ln, "f32");

    th_context("2-D labels");
    uint32_t dl2[2] = {5, 1};
    snprintf(ln, sizeof ln, "%s", temp_path("ds-2d.idx"));
    REQUIRE(write_u8_idx(ln, 2, dl2, lab, false));
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, ln, 1.0f, 0.0f, &ds), UG_ERR_SHAPE))
        CHECK_ERROR_HAS(ln, "[5,1]");

    th_context("a bad images file");
    const char *missing = temp_path("no-images.idx");
    if (CHECK_STATUS(ug_dataset_from_idx(missing, lpath, 1.0f, 0.0f, &ds), UG_ERR_IO))
        CHECK_ERROR_HAS(missing);
    if (CHECK_STATUS(ug_dataset_from_idx(ipath, missing, 1.0f, 0.0f, &ds), UG_ERR_IO))
        CHECK_ERROR_HAS(missing);
    CHECK_STATUS(ug_dataset_from_idx(ipath, lpath, 0.0f / 0.0f, 0.0f, &ds),
                 UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_dataset_from_idx(NULL, lpath, 1.0f, 0.0f, &ds), UG_ERR_INVALID_ARGUMENT);

    th_context("from arrays");
    float x[6] = {1, 2, 3, 4, 5, 6};
    int32_t y[3] = {0, 4, 1};
    REQUIRE_OK(ug_dataset_from_arrays(3, 2, x, y, &ds));
    CHECK_EQ_I64(ug_dataset_count(ds), 3);
    CHECK_EQ_I64(ug_dataset_features(ds), 2);
    CHECK_EQ_I64(ug_dataset_classes(ds), 5);
    ug_dataset_free(ds);
    y[1] = -2;
    if (CHECK_STATUS(ug_dataset_from_arrays(3, 2, x, y, &ds), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("label -2 at index 1");
    y[1] = 1;
    CHECK_STATUS(ug_dataset_from_arrays(0, 2, x, y, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_dataset_from_arrays(3, 0, x, y, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_dataset_from_arrays(3, 2, NULL, y, &ds), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_dataset_from_arrays(INT64_MAX / 2, 3, x, y, &ds), UG_ERR_OUT_OF_MEMORY);
    ug_dataset_free(NULL);
}

/* ---- Fashion-MNIST, when present ---- */

static bool have_fashion(void)
{
    struct stat st;
    return stat(FASHION_DIR "/train-images-idx3-ubyte.gz", &st) == 0 &&
           stat(FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &st) == 0;
}

static void test_fashion_mnist_files(ug_device *dev)
{
    (void)dev;
    if (!have_fashion()) {
        th_skip("Fashion-MNIST is not installed under " FASHION_DIR);
        return;
    }
    static const struct {
        const char *images, *labels;
        int64_t count;
    } splits[] = {
        {FASHION_DIR "/train-images-idx3-ubyte.gz", FASHION_DIR "/train-labels-idx1-ubyte.gz", 60000},
        {FASHION_DIR "/t10k-images-idx3-ubyte.gz", FASHION_DIR "/t10k-labels-idx1-ubyte.gz", 10000},
    };
    for (int s = 0; s < 2; s++) {
        th_context("%s", splits[s].images);
        ug_idx *img = NULL, *lab = NULL;
        REQUIRE_OK(ug_idx_read(splits[s].images, &img));
        CHECK(img->dtype == UG_U8 && img->ndim == 3);
        CHECK(img->shape[0] == splits[s].count && img->shape[1] == 28 && img->shape[2] == 28);
        ug_idx_free(img);
        REQUIRE_OK(ug_idx_read(splits[s].labels, &lab));
        CHECK(lab->dtype == UG_U8 && lab->ndim == 1 && lab->shape[0] == splits[s].count);
        /* Balanced: every class holds a tenth of the split. */
        int64_t per_class[10] = {0};
        bool in_range = true;
        const uint8_t *v = lab->data;
        for (int64_t i = 0; i < lab->shape[0]; i++) {
            if (v[i] > 9)
                in_range = false;
            else
                per_class[v[i]]++;
        }
        CHECK(in_range);
        for (int k = 0; k < 10; k++)
            CHECK_EQ_I64(per_class[k], splits[s].count / 10);
        ug_idx_free(lab);

        ug_dataset *ds = NULL;
        REQUIRE_OK(ug_dataset_from_idx(splits[s].images, splits[s].labels, 1.0f / 255.0f, 0.0f, &ds));
        CHECK_EQ_I64(ug_dataset_count(ds), splits[s].count);
        CHECK_EQ_I64(ug_dataset_features(ds), 784);
        CHECK_EQ_I64(ug_dataset_classes(ds), 10);
        ug_dataset_free(ds);
    }
    /* Train images with test labels: the counts differ. */
    ug_dataset *ds = NULL;
    if (CHECK_STATUS(ug_dataset_from_idx(splits[0].images, splits[1].labels, 1.0f, 0.0f, &ds),
                     UG_ERR_SHAPE))
        CHECK_ERROR_HAS(splits[0].images, splits[1].labels, "60000", "10000");
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(idx_round_trip),
        TH_HOST_TEST(idx_errors),
        TH_HOST_TEST(idx_size_limit),
        TH_HOST_TEST(dataset_from_idx_errors),
        TH_HOST_TEST(fashion_mnist_files),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
