/* The checkpoint file layer's reading (core/io/safetensors.h): round trips
 * of every dtype, scalars, empty tensors, odd names and metadata; the
 * format's dtypes unigrad has no type for; one damaged file per error
 * class, each checked for its status and for the byte offset and words of
 * its message. Saving and atomic replacement: test_safetensors_save.c.
 *
 * Modes for the independent reader tests/unit/read_safetensors.py:
 *   --write-sample FILE   write the sample file it checks
 *   --check-python FILE   check the file it wrote (exit 0 when right)
 *   --write-corpus DIR    write the fuzzer's seed files */
#define _GNU_SOURCE /* truncate */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "core/io/safetensors.h"
#include "harness.h"
#include "safetensors_files.h"

/* ---- round trips ---- */

static void test_round_trip(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);

    float f32[6], scalar = -1.5f;
    uint16_t f16[5], bf16[4];
    int32_t i32[6];
    uint8_t u8[7];
    for (int i = 0; i < 6; i++)
        f32[i] = (float)(i * 1.25 - 3), i32[i] = i * -1000003;
    for (int i = 0; i < 5; i++)
        f16[i] = (uint16_t)(0x3c00 + 17 * i);
    for (int i = 0; i < 4; i++)
        bf16[i] = (uint16_t)(0xbf80 - 3 * i);
    for (int i = 0; i < 7; i++)
        u8[i] = (uint8_t)(250 + i);
    const int64_t s23[] = {2, 3}, s5[] = {5}, s4[] = {4}, s321[] = {3, 2, 1}, s7[] = {7},
                  s03[] = {0, 3}, s40[] = {4, 0}, s6[] = {1, 1, 1, 1, 1, 1, 1, 6};
    const ug_st_entry e[] = {
        {"fc1.weight", UG_F32, 2, s23, f32},
        {"h\xc3\xa9llo \xe2\x86\x92 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80", UG_F16, 1, s5, f16},
        {"quote\"back\\slash/", UG_BF16, 1, s4, bf16},
        {"ctrl\x01\ttab\nnl\x1f", UG_I32, 3, s321, i32},
        {"", UG_U8, 1, s7, u8},
        {"scalar", UG_F32, 0, NULL, &scalar},
        {"empty", UG_F32, 2, s03, NULL},
        {"empty.i32", UG_I32, 2, s40, NULL},
        {"eight.dims", UG_F32, 8, s6, f32},
    };
    const int n = (int)(sizeof e / sizeof e[0]);
    const char *keys[] = {"step", "note \xe2\x9c\x93", "empty"};
    const char *values[] = {"1200", "a \"quote\", a \\ and\ta tab", ""};
    REQUIRE_OK(ug_st_save(path, e, n, keys, values, 3, 1));

    size_t size = 0;
    unsigned char *raw = slurp(path, &size);
    REQUIRE(raw && size >= 8);
    uint64_t hn = le64(raw);
    CHECK_MSG((8 + hn) % 8 == 0, "the buffer starts at %llu, not a multiple of 8",
              (unsigned long long)(8 + hn));
    REQUIRE(8 + hn <= size);
    char *header = th_alloc(hn + 1);
    memcpy(header, raw + 8, hn);
    /* Escapes as JSON writes them; padding by spaces after the object. */
    CHECK(th_contains(header, "\"quote\\\"back\\\\slash/\""));
    CHECK(th_contains(header, "\"ctrl\\u0001\\u0009tab\\u000anl\\u001f\""));
    CHECK(th_contains(header, "{\"__metadata__\":{\"step\":\"1200\""));
    size_t end = hn;
    while (end && header[end - 1] == ' ')
        end--;
    CHECK(end && header[end - 1] == '}' && hn - end < 8);

    ug_st_file *f = NULL;
    REQUIRE_OK(ug_st_open(path, &f));
    CHECK(!strcmp(ug_st_path(f), path));
    CHECK_EQ_I64(ug_st_count(f), n);
    uint64_t covered = 0;
    for (int i = 0; i < n && i < ug_st_count(f); i++) {
        const ug_st_tensor *t = ug_st_at(f, i);
        th_context("tensor %d", i);
        REQUIRE(t);
        CHECK(!strcmp(t->name, e[i].name));
        CHECK_EQ_I64(t->dtype, e[i].dtype);
        CHECK(!strcmp(t->dtype_name, ug_st_dtype_name(e[i].dtype)));
        CHECK_EQ_I64(t->elem_bytes, ug_dtype_size(e[i].dtype));
        CHECK_EQ_I64(t->ndim, e[i].ndim);
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            CHECK_EQ_I64(t->shape[d], e[i].shape[d]);
            numel *= (uint64_t)e[i].shape[d];
        }
        CHECK_EQ_I64(t->bytes, numel * ug_dtype_size(e[i].dtype));
        CHECK(t->offset >= 8 + hn && t->offset + t->bytes <= size);
        covered += t->bytes;
        unsigned char *got = th_alloc((size_t)t->bytes);
        CHECK_OK(ug_st_read(f, t, got, (size_t)t->bytes));
        CHECK(t->bytes == 0 || memcmp(got, e[i].data, (size_t)t->bytes) == 0);
        CHECK(ug_st_find(f, e[i].name) == t);
    }
    th_context("%s", "");
    CHECK_EQ_I64(covered, size - 8 - hn);
    CHECK(ug_st_at(f, n) == NULL && ug_st_at(f, -1) == NULL);
    CHECK(ug_st_find(f, "absent") == NULL);
    CHECK_EQ_I64(ug_st_metadata_count(f), 3);
    for (int i = 0; i < 3; i++) {
        const char *k = NULL, *v = NULL;
        ug_st_metadata_at(f, i, &k, &v);
        CHECK(k && v && !strcmp(k, keys[i]) && !strcmp(v, values[i]));
        CHECK(ug_st_metadata(f, keys[i]) && !strcmp(ug_st_metadata(f, keys[i]), values[i]));
    }
    CHECK(ug_st_metadata(f, "absent") == NULL);
    /* A destination of the wrong size is refused. */
    float one;
    CHECK_STATUS(ug_st_read(f, ug_st_at(f, 0), &one, sizeof one), UG_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("\"fc1.weight\" holds 24 bytes");
    ug_st_close(f);

    /* The same header from memory: the same tensors, but nothing to read. */
    f = NULL;
    REQUIRE_OK(ug_st_parse(path, (const char *)raw + 8, (size_t)hn, size, &f));
    CHECK_EQ_I64(ug_st_count(f), n);
    CHECK_EQ_I64(ug_st_at(f, 3)->offset - 8 - hn, 2 * 3 * 4 + 5 * 2 + 4 * 2);
    CHECK_STATUS(ug_st_read(f, ug_st_at(f, 5), &one, sizeof one), UG_ERR_STATE);
    ug_st_close(f);

    /* No metadata and no tensors: "{}" padded, and it reads back. */
    REQUIRE_OK(ug_st_save(path, NULL, 0, NULL, NULL, 0, 1));
    CHECK(file_is(path, (const unsigned char *)"\x08\0\0\0\0\0\0\0{}      ", 16));
    REQUIRE_OK(ug_st_open(path, &f));
    CHECK_EQ_I64(ug_st_count(f) + ug_st_metadata_count(f), 0);
    ug_st_close(f);
    CHECK_EQ_I64(temp_files(dir), 0);
    remove_dir(dir);
}

/* The format's dtypes unigrad has no type for: validated, sized, readable
 * as raw bytes, marked not loadable. */
static void test_foreign_dtypes(ug_device *dev)
{
    (void)dev;
    static const struct {
        const char *name;
        int bytes;
    } d[] = {{"BOOL", 1}, {"I8", 1},  {"I16", 2},     {"U16", 2},
             {"U32", 4},  {"U64", 8}, {"F64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    const int n = (int)(sizeof d / sizeof d[0]);
    char dir[] = "/tmp/ug-st-XXXXXX", path[128], json[2048];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/foreign.safetensors", dir);
    size_t o = (size_t)snprintf(json, sizeof json, "{");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)d[i].bytes * 3;
        o += (size_t)snprintf(json + o, sizeof json - o,
                              "%s\"t%d\": {\"shape\": [3], \"dtype\": \"%s\", \"data_offsets\": [%llu, %llu]}",
                              i ? ", " : "", i, d[i].name, (unsigned long long)at,
                              (unsigned long long)(at + bytes));
        at += bytes;
    }
    snprintf(json + o, sizeof json - o, "}");
    REQUIRE(write_raw(path, json, strlen(json), at));
    ug_st_file *f = NULL;
    REQUIRE_OK(ug_st_open(path, &f));
    size_t size = 0;
    unsigned char *raw = slurp(path, &size);
    REQUIRE(raw);
    for (int i = 0; i < n && i < ug_st_count(f); i++) {
        const ug_st_tensor *t = ug_st_at(f, i);
        th_context("%s", d[i].name);
        CHECK(!strcmp(t->dtype_name, d[i].name));
        CHECK_EQ_I64(t->dtype, UG_ST_NO_DTYPE);
        CHECK_EQ_I64(t->elem_bytes, d[i].bytes);
        CHECK_EQ_I64(t->bytes, 3 * d[i].bytes);
        unsigned char got[32];
        CHECK_OK(ug_st_read(f, t, got, (size_t)t->bytes));
        CHECK(memcmp(got, raw + t->offset, (size_t)t->bytes) == 0);
    }
    ug_st_close(f);
    remove_dir(dir);
}

/* ---- damaged files ---- */

static char bad_dir[32];

/* Byte offset in the file of the nth (1-based) occurrence of needle in json. */
static long long at_nth(const char *json, const char *needle, int nth)
{
    const char *p = strstr(json, needle);
    for (int i = 1; i < nth && p; i++)
        p = strstr(p + 1, needle);
    return p ? 8 + (long long)(p - json) : -1;
}
static long long at(const char *json, const char *needle) { return at_nth(json, needle, 1); }

/* A file of json (len bytes; (size_t)-1: strlen) and buffer bytes must be
 * refused by ug_st_open and ug_st_parse with UG_ERR_FORMAT and a message
 * "<path>: byte <byte>: ...<what>...". */
#define BAD(label, json, len, buffer, byte, what) bad(TH_LOC, label, json, len, buffer, byte, what)
static void bad(const char *file, int line, const char *label, const char *json, size_t len,
                uint64_t buffer, long long byte, const char *what)
{
    if (len == (size_t)-1)
        len = strlen(json);
    char path[128], where[160];
    snprintf(path, sizeof path, "%s/%s.safetensors", bad_dir, label);
    th_context("%s", label);
    if (!write_raw(path, json, len, buffer)) {
        th_fail(file, line, "cannot write %s", path);
        return;
    }
    snprintf(where, sizeof where, "%s: byte %lld: ", path, byte);
    for (int how = 0; how < 2; how++) {
        ug_st_file *f = NULL;
        ug_clear_error();
        ug_status st = how == 0 ? ug_st_open(path, &f) : ug_st_parse(path, json, len, 8 + len + buffer, &f);
        if (st != UG_ERR_FORMAT || f)
            th_fail(file, line, "%s: %s returned %s, expected UG_ERR_FORMAT (%s)", label,
                    how ? "ug_st_parse" : "ug_st_open", ug_status_name(st), ug_last_error());
        if (!th_contains(ug_last_error(), where) || !th_contains(ug_last_error(), what))
            th_fail(file, line, "%s: the message \"%s\" should hold \"%s\" and \"%s\"", label,
                    ug_last_error(), where, what);
        ug_st_close(f);
    }
    unlink(path);
}

#define A4 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"
#define B4 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}"

static void test_bad_json(ug_device *dev)
{
    (void)dev;
    strcpy(bad_dir, "/tmp/ug-st-XXXXXX");
    REQUIRE(make_dir(bad_dir));
    const char *j;
    size_t N = (size_t)-1;

    j = "{\"a\":" A4;
    BAD("truncated", j, N, 4, 8 + (long long)strlen(j), "found the end of the header, expected ',' or '}'");
    j = "{\"a\":" A4 ",}";
    BAD("trailing_comma", j, N, 4, at(j, ",}"), "',' before '}', expected another tensor");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}";
    BAD("trailing_comma_shape", j, N, 4, at(j, ",]"), "',' before ']'");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}";
    BAD("trailing_comma_entry", j, N, 4, at(j, ",}"), "',' before '}'");
    j = "{\"a\\qb\":" A4 "}";
    BAD("bad_escape", j, N, 4, at(j, "\\"), "the escape \\q, expected one of \\\" \\\\");
    j = "{\"\\ud800x\":" A4 "}";
    BAD("lone_high_surrogate", j, N, 4, at(j, "\\"), "\\uD800, a high surrogate not followed by a low one");
    j = "{\"\\ud800\\u0041\":" A4 "}";
    BAD("high_surrogate_then_bmp", j, N, 4, at(j, "\\"), "a high surrogate not followed by a low one");
    j = "{\"\\udc00\":" A4 "}";
    BAD("lone_low_surrogate", j, N, 4, at(j, "\\"), "\\uDC00, a low surrogate with no high one");
    j = "{\"\\u12g4\":" A4 "}";
    BAD("bad_hex", j, N, 4, at(j, "\\"), "\\u not followed by 4 hex digits");
    j = "{\"a\\u0000\":" A4 "}";
    BAD("nul_escape", j, N, 4, at(j, "\\"), "\\u0000, expected no NUL character");
    j = "{\"a\xff\":" A4 "}";
    BAD("invalid_utf8", j, N, 4, at(j, "\xff"), "byte 0xff that is not valid UTF-8");
    j = "{\"a\xed\xa0\x80\":" A4 "}"; /* a UTF-16 surrogate encoded as UTF-8 */
    BAD("utf8_surrogate", j, N, 4, at(j, "\xed"), "byte 0xed that is not valid UTF-8");
    j = "{\"a\xc0\xaf\":" A4 "}"; /* overlong '/' */
    BAD("utf8_overlong", j, N, 4, at(j, "\xc0"), "byte 0xc0 that is not valid UTF-8");
    j = "{\"a\nb\":" A4 "}";
    BAD("control_in_string", j, N, 4, at(j, "\n"), "control character 0x0a inside a string");
    j = "{\"abc";
    BAD("unterminated_string", j, N, 0, 9, "a string that the header ends inside");
    j = "{\"a\" " A4 "}";
    BAD("missing_colon", j, N, 4, at(j, " {") + 1, "found '{', expected ':' after the name");
    j = "{\"a\":" A4 " \"b\":" B4 "}";
    BAD("missing_comma", j, N, 8, at(j, "\"b\""), "found '\"', expected ',' or '}' after a tensor");
    j = "{a:" A4 "}";
    BAD("unquoted_name", j, N, 4, 9, "found 'a', expected a string (a tensor name");
    j = "[{\"a\":" A4 "}]";
    BAD("top_level_array", j, N, 4, 8, "found '[', expected '{' (the header is a JSON object)");
    j = "\"a\"";
    BAD("top_level_string", j, N, 0, 8, "found '\"', expected '{'");
    j = " {}";
    BAD("leading_space", j, N, 0, 8, "found ' ', expected '{'");
    j = "";
    BAD("empty_header", j, N, 0, 8, "found the end of the header, expected '{'");
    j = "{}x";
    BAD("trailing_garbage", j, N, 0, 10, "found 'x' after the header's JSON object, expected only spaces");
    j = "{}{}";
    BAD("two_objects", j, N, 0, 10, "found '{' after the header's JSON object");
    BAD("nul_padding", "{}\0\0\0\0\0\0", 8, 0, 10, "found byte 0x00 after the header's JSON object");
    j = "{\"a\":5}";
    BAD("entry_not_object", j, N, 0, at(j, "5"), "found '5', expected '{' (the tensor's dtype");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}";
    BAD("nested_shape", j, N, 4, at(j, "[1]"), "found '[', expected a shape number");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}";
    BAD("shape_not_array", j, N, 4, at(j, "1,"), "found '1', expected '[' (the shape array)");
    j = "{\"a\":{\"dtype\":[\"F32\"],\"shape\":[1],\"data_offsets\":[0,4]}}";
    BAD("dtype_not_string", j, N, 4, at(j, "[\"F32"), "found '[', expected a dtype string");
    remove_dir(bad_dir);
}

static void test_bad_entries(ug_device *dev)
{
    (void)dev;
    strcpy(bad_dir, "/tmp/ug-st-XXXXXX");
    REQUIRE(make_dir(bad_dir));
    const char *j;
    size_t N = (size_t)-1;

    j = "{\"a\":" A4 ",\"b\":" B4 ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    BAD("duplicate_name", j, N, 12, at_nth(j, "\"a\"", 2), "tensor \"a\" again (first at byte 9), expected unique names");
    j = "{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}";
    BAD("unknown_dtype", j, N, 16, at(j, "\"F128\""), "tensor \"a\": the dtype \"F128\", expected one of F32, F16, BF16");
    j = "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    BAD("lowercase_dtype", j, N, 4, at(j, "\"f32\""), "the dtype \"f32\", expected one of");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
    BAD("negative_dim", j, N, 4, at(j, "-1"), "found -1, expected a shape number: an unsigned integer");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}";
    BAD("fractional_dim", j, N, 10, at(j, "2.5"), "found 2.5, expected a shape number: an unsigned integer");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,400]}}";
    BAD("exponent_dim", j, N, 400, at(j, "1e2"), "found 1e2, expected a shape number");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}";
    BAD("leading_zero", j, N, 4, at(j, "01"), "found 01, expected a shape number without leading zeros");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}";
    BAD("huge_dim", j, N, 4, at(j, "922"), "found 9223372036854775808, expected a shape number of at most 9223372036854775807");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}";
    BAD("huge_offset", j, N, 4, at(j, "184"), "expected a data_offsets number of at most 18446744073709551615");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}";
    BAD("numel_overflow", j, N, 4, at(j, "[0,4]"), "tensor \"a\": F32 [4294967296, 4294967296] holds more than 2^64 bytes");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}";
    BAD("nine_dims", j, N, 4, at(j, "9]"), "shape with more than 8 numbers, expected at most 8 dimensions");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}";
    BAD("begin_after_end", j, N, 8, at(j, "[8,4]"), "tensor \"a\": data_offsets [8, 4] begin after they end, expected begin <= end");
    j = "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[5,6],\"data_offsets\":[0,100]}}";
    BAD("size_mismatch", j, N, 100, at(j, "[0,100]"),
        "tensor \"fc1.weight\": data_offsets [0, 100] hold 100 bytes, but F32 [5, 6] needs 120");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}";
    BAD("beyond_buffer", j, N, 16, at(j, "[0,400]"), "tensor \"a\": data_offsets [0, 400] end past the buffer, expected at most 16");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}";
    BAD("three_offsets", j, N, 4, at(j, "8]"), "data_offsets with more than 2 numbers, expected 2");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}";
    BAD("one_offset", j, N, 4, at(j, "[4]"), "data_offsets with 1 number, expected 2 ([begin, end])");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    BAD("overlap", j, N, 12, at(j, "[4,12]"), "tensor \"b\": data_offsets [4, 12] overlap tensor \"a\" [0, 8], expected tensors not to overlap");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}";
    BAD("empty_inside_another", j, N, 8, at(j, "[4,4]"), "tensor \"e\": data_offsets [4, 4] overlap tensor \"a\"");
    j = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},\"a\":" A4 "}";
    BAD("gap", j, N, 12, at(j, "[8,12]"), "tensor \"b\": data_offsets [8, 12] leave a gap after tensor \"a\", which ends at 4, expected no gap");
    j = "{\"a\":" B4 "}";
    BAD("gap_at_start", j, N, 8, at(j, "[4,8]"), "the first tensor in the buffer, expected it to begin at 0");
    j = "{\"a\":" A4 "}";
    BAD("trailing_bytes", j, N, 12, 8 + (long long)strlen(j) + 4,
        "8 more bytes after the last tensor's data (\"a\"), expected the file to end there");
    j = "{}";
    BAD("buffer_without_tensors", j, N, 4, 10, "4 more bytes after the header, with no tensors");
    j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}";
    BAD("unknown_key", j, N, 4, at(j, "\"extra\""), "tensor \"a\": the key \"extra\", expected \"dtype\", \"shape\" or \"data_offsets\"");
    j = "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}";
    BAD("missing_shape", j, N, 4, at(j, "{\"dtype"), "tensor \"a\": no \"shape\"");
    j = "{\"a\":{}}";
    BAD("empty_entry", j, N, 0, at(j, "{}"), "tensor \"a\": no \"dtype\"");
    j = "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    BAD("duplicate_key", j, N, 4, at_nth(j, "\"dtype\"", 2), "tensor \"a\": a second \"dtype\"");
    j = "{\"__metadata__\":{\"k\":1}}";
    BAD("metadata_number", j, N, 0, at(j, "1"), "metadata \"k\": found '1', expected a string value");
    j = "{\"__metadata__\":{\"k\":{}}}";
    BAD("metadata_object", j, N, 0, at(j, "{}"), "metadata \"k\": found '{', expected a string value");
    j = "{\"__metadata__\":{\"k\":null}}";
    BAD("metadata_null", j, N, 0, at(j, "null"), "metadata \"k\": found 'n', expected a string value");
    j = "{\"__metadata__\":\"x\"}";
    BAD("metadata_string", j, N, 0, at(j, "\"x\""), "expected '{' (\"__metadata__\" is an object of strings)");
    j = "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}";
    BAD("metadata_duplicate", j, N, 0, at_nth(j, "\"k\"", 2), "metadata key \"k\" again (first at byte 25)");
    j = "{\"__metadata__\":{},\"__metadata__\":{}}";
    BAD("metadata_twice", j, N, 0, at_nth(j, "\"__", 2), "a second \"__metadata__\" (the first at byte 9)");
    remove_dir(bad_dir);
}

/* The header length and the file's size. */
static void test_bad_lengths(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-st-XXXXXX", path[128];
    REQUIRE(make_dir(dir));
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    ug_st_file *f = NULL;

    for (int size = 0; size < 8; size += 5) {
        FILE *w = fopen(path, "wb");
        REQUIRE(w);
        fwrite("\x02\0\0\0\0", 1, (size_t)size, w);
        fclose(w);
        char want[64];
        snprintf(want, sizeof want, "a file of %d bytes, expected at least 8", size);
        CHECK_STATUS(ug_st_open(path, &f), UG_ERR_FORMAT);
        CHECK_ERROR_HAS(path, ": byte 0: ", want);
        CHECK(f == NULL);
    }
    /* 1000 bytes of header declared, 8 present. */
    REQUIRE(write_raw(path, "{}      ", 8, 0));
    FILE *w = fopen(path, "r+b");
    REQUIRE(w);
    fwrite("\xe8\x03", 1, 2, w);
    fclose(w);
    CHECK_STATUS(ug_st_open(path, &f), UG_ERR_FORMAT);
    CHECK_ERROR_HAS(": byte 0: header length 1000 goes past the end of the file (16 bytes), expected at most 8");
    /* Over the format's 100 MB: refused before anything is allocated, even
     * with a file that long (a sparse one). */
    w = fopen(path, "wb");
    REQUIRE(w);
    fwrite("\x01\xe1\xf5\x05\0\0\0\0", 1, 8, w); /* 100000001 */
    fclose(w);
    REQUIRE(truncate(path, 8 + 100000001 + 16) == 0);
    CHECK_STATUS(ug_st_open(path, &f), UG_ERR_FORMAT);
    CHECK_ERROR_HAS(": byte 0: header length 100000001, expected at most 100000000");
    CHECK_STATUS(ug_st_parse(path, "", 100000001, 8 + 100000001 + 16, &f), UG_ERR_FORMAT);
    CHECK_ERROR_HAS(": byte 0: header length 100000001, expected at most 100000000");
    w = fopen(path, "wb");
    REQUIRE(w);
    fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, w);
    fclose(w);
    CHECK_STATUS(ug_st_open(path, &f), UG_ERR_FORMAT);
    CHECK_ERROR_HAS("header length 18446744073709551615, expected at most 100000000");
    CHECK(f == NULL);

    /* Missing files and folders are I/O errors with the system's reason. */
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    CHECK_STATUS(ug_st_open(path, &f), UG_ERR_IO);
    CHECK_ERROR_HAS(path, strerror(ENOENT));
    CHECK_STATUS(ug_st_open(dir, &f), UG_ERR_IO);
    CHECK_ERROR_HAS(dir, "a folder, expected a regular file");

    /* A file that shrinks after it was opened: the read names the offset. */
    snprintf(path, sizeof path, "%s/shrinks.safetensors", dir);
    REQUIRE_OK(write_sample(path));
    REQUIRE_OK(ug_st_open(path, &f));
    const ug_st_tensor *t = ug_st_find(f, "volume");
    REQUIRE(t);
    REQUIRE(truncate(path, (off_t)(t->offset + 10)) == 0);
    void *buf = th_alloc((size_t)t->bytes);
    CHECK_STATUS(ug_st_read(f, t, buf, (size_t)t->bytes), UG_ERR_FORMAT);
    char want[512];
    snprintf(want, sizeof want, "%s: byte %llu: the end of the file, expected tensor \"volume\"'s data up to byte %llu",
             path, (unsigned long long)(t->offset + 10), (unsigned long long)(t->offset + t->bytes));
    CHECK_ERROR_HAS(want);
    ug_st_close(f);
    remove_dir(dir);
}

/* ---- modes for the Python reader and the fuzzer's corpus ---- */

static int fail_line(const char *what)
{
    fprintf(stderr, "test_safetensors --check-python: %s\n", what);
    return 1;
}

/* Checks the file tests/unit/read_safetensors.py writes (its write_sample). */
static int check_python(const char *path)
{
    ug_st_file *f = NULL;
    if (ug_st_open(path, &f) != UG_OK)
        return fail_line(ug_last_error());
    int bad = 0;
#define EXPECT(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "test_safetensors --check-python: line %d: %s\n", __LINE__, #cond); \
            bad = 1;                                                                       \
        }                                                                                  \
    } while (0)
    static const struct {
        const char *name, *dtype;
        int ndim;
        int64_t shape[2];
    } want[] = {
        {"w", "F32", 2, {2, 3}}, {"h", "F16", 1, {4}},  {"b", "BF16", 1, {3}},
        {"i", "I32", 2, {2, 2}}, {"u", "U8", 1, {3}},   {"d", "F64", 1, {2}},
        {"l", "I64", 1, {1}},    {"s", "I32", 0, {0}},  {"e", "F32", 1, {0}},
        {"\xf0\x9f\x98\x80 \"x\"\\", "U8", 1, {1}},
    };
    const int n = (int)(sizeof want / sizeof want[0]);
    EXPECT(ug_st_count(f) == n);
    unsigned char buf[64];
    for (int i = 0; i < n && i < ug_st_count(f); i++) {
        const ug_st_tensor *t = ug_st_at(f, i);
        EXPECT(!strcmp(t->name, want[i].name) && !strcmp(t->dtype_name, want[i].dtype));
        EXPECT(t->ndim == want[i].ndim);
        for (int d = 0; d < t->ndim && d < 2; d++)
            EXPECT(t->shape[d] == want[i].shape[d]);
        if (t->bytes > sizeof buf || ug_st_read(f, t, buf, (size_t)t->bytes) != UG_OK) {
            EXPECT(!"read");
            continue;
        }
        switch (i) {
        case 0:
            for (int k = 0; k < 6; k++) {
                float v;
                memcpy(&v, buf + 4 * k, 4);
                EXPECT(v == (float)(k * 0.5 - 1));
            }
            break;
        case 1: {
            static const uint16_t h[] = {0x3800, 0xc000, 0x7bff, 0x0001};
            EXPECT(t->dtype == UG_F16 && !memcmp(buf, h, sizeof h));
            EXPECT(ug_f16_to_f32(h[3]) == ldexpf(1, -24));
            break;
        }
        case 2: {
            static const uint16_t b[] = {0x3f80, 0xbf00, 0x7180};
            EXPECT(t->dtype == UG_BF16 && !memcmp(buf, b, sizeof b));
            EXPECT(ug_bf16_to_f32(b[2]) == ldexpf(1, 100));
            break;
        }
        case 3: {
            static const int32_t v[] = {-1, 0, 2147483647, (-2147483647 - 1)};
            EXPECT(t->dtype == UG_I32 && !memcmp(buf, v, sizeof v));
            break;
        }
        case 4: EXPECT(t->dtype == UG_U8 && buf[0] == 0 && buf[1] == 128 && buf[2] == 255); break;
        case 5: {
            static const double v[] = {1.5, -2.25};
            EXPECT(t->dtype == UG_ST_NO_DTYPE && !memcmp(buf, v, sizeof v));
            break;
        }
        case 6: {
            int64_t v = -((int64_t)1 << 40);
            EXPECT(t->dtype == UG_I64 && !memcmp(buf, &v, 8));
            break;
        }
        case 7: {
            int32_t v;
            memcpy(&v, buf, 4);
            EXPECT(t->bytes == 4 && v == 7);
            break;
        }
        case 8: EXPECT(t->bytes == 0); break;
        case 9: EXPECT(t->bytes == 1 && buf[0] == 42); break;
        }
    }
    EXPECT(ug_st_metadata_count(f) == 2);
    EXPECT(ug_st_metadata(f, "writer") && !strcmp(ug_st_metadata(f, "writer"), "numpy"));
    EXPECT(ug_st_metadata(f, "emoji") && !strcmp(ug_st_metadata(f, "emoji"), "\xf0\x9f\x98\x80"));
#undef EXPECT
    ug_st_close(f);
    if (!bad)
        printf("test_safetensors --check-python: %s: %d tensors as written\n", path, n);
    return bad;
}

/* Small valid files for the fuzzer to start from. */
static int write_corpus(const char *dir)
{
    char path[512];
    ug_status st;
    snprintf(path, sizeof path, "%s/sample.safetensors", dir);
    st = write_sample(path);
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    if (st == UG_OK)
        st = ug_st_save(path, NULL, 0, NULL, NULL, 0, 1);
    const char *k[] = {"step", "lr"}, *v[] = {"100", "0.001"};
    snprintf(path, sizeof path, "%s/metadata.safetensors", dir);
    if (st == UG_OK)
        st = ug_st_save(path, NULL, 0, k, v, 2, 1);
    float x = 1.0f;
    uint16_t h[2] = {0x3c00, 0xbc00};
    const int64_t s2[] = {2}, s0[] = {0, 5};
    const ug_st_entry e[] = {{"s", UG_F32, 0, NULL, &x}, {"h", UG_F16, 1, s2, h}, {"z", UG_U8, 2, s0, NULL}};
    snprintf(path, sizeof path, "%s/small.safetensors", dir);
    if (st == UG_OK)
        st = ug_st_save(path, e, 3, NULL, NULL, 0, 1);
    const char *foreign =
        "{\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
        "\"\\ud83d\\ude00\\n\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[8,10]},"
        "\"f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],\"data_offsets\":[10,11]}}";
    snprintf(path, sizeof path, "%s/foreign.safetensors", dir);
    if (st == UG_OK && !write_raw(path, foreign, strlen(foreign), 11))
        st = ug_set_error(UG_ERR_IO, "cannot write %s", path);
    if (st != UG_OK) {
        fprintf(stderr, "test_safetensors --write-corpus: %s\n", ug_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write-sample")) {
        if (write_sample(argv[2]) != UG_OK) {
            fprintf(stderr, "test_safetensors --write-sample: %s\n", ug_last_error());
            return 1;
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--check-python"))
        return check_python(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--write-corpus"))
        return write_corpus(argv[2]);
    static const th_test tests[] = {
        TH_HOST_TEST(round_trip),
        TH_HOST_TEST(foreign_dtypes),
        TH_HOST_TEST(bad_json),
        TH_HOST_TEST(bad_entries),
        TH_HOST_TEST(bad_lengths),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
