/* safetensors files (safetensors.h): the file handle, its accessors, and
 * the helpers the parser, reader and writer share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "core/io/safetensors_internal.h"

/* Length of the UTF-8 sequence at s (at most n bytes), 0 when it is not
 * one: no overlong forms, no surrogates, nothing past U+10FFFF. */
int ug_st_utf8_len(const unsigned char *s, size_t n)
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
const char *ug_st_quoted(const char *s, char *buf, size_t len)
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

int ug_st_cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(ug_st_tensor *const *)a)->name, (*(ug_st_tensor *const *)b)->name);
}

int ug_st_cmp_meta_key(const void *a, const void *b)
{
    return strcmp((*(st_meta *const *)a)->key, (*(st_meta *const *)b)->key);
}

ug_status ug_st_oom(const char *path)
{
    return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory reading the header", path);
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
    ug_st_tensor **hit = bsearch(&pkey, f->by_name, (size_t)f->count, sizeof *f->by_name, ug_st_cmp_tensor_name);
    return hit ? *hit : NULL;
}

int ug_st_metadata_count(const ug_st_file *f) { return f ? f->meta_count : 0; }

const char *ug_st_metadata(const ug_st_file *f, const char *key)
{
    if (!f || !key || !f->meta_count)
        return NULL;
    st_meta m = {.key = (char *)key}, *pm = &m;
    st_meta **hit = bsearch(&pm, f->meta_by_key, (size_t)f->meta_count, sizeof *f->meta_by_key, ug_st_cmp_meta_key);
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
