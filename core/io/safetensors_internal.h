/* What the safetensors files (safetensors.c: the file handle and helpers;
 * io/safetensors_parse.c: the header; io/safetensors_read.c: opening and reading;
 * io/safetensors_write.c: saving) share. */
#ifndef UG_CORE_SAFETENSORS_INTERNAL_H
#define UG_CORE_SAFETENSORS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/io/safetensors.h"

/* Tensors are read into and written from host memory as they are in the
 * file. A big-endian host would need a byte swap per element. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors assumes a little-endian host: add byte swaps to ug_st_read and "
               "ug_st_save for this one");

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

/* Room for a quoted name in messages (ug_st_quoted). */
#define QBUF 160

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when it is not
 * one: no overlong forms, no surrogates, nothing past U+10FFFF. */
int ug_st_utf8_len(const unsigned char *s, size_t n);
/* s in double quotes with quotes, backslashes and control characters
 * escaped, cut after about 120 bytes, into buf (QBUF bytes). */
const char *ug_st_quoted(const char *s, char *buf, size_t len);
/* bsearch/qsort orders of ug_st_file's by_name and meta_by_key. */
int ug_st_cmp_tensor_name(const void *a, const void *b);
int ug_st_cmp_meta_key(const void *a, const void *b);
ug_status ug_st_oom(const char *path);
/* The checks on N, the header length, before anything is allocated for it. */
ug_status ug_st_check_header_length(const char *path, uint64_t n, uint64_t file_bytes);

#endif
