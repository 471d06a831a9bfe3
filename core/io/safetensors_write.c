/* Saving safetensors files (safetensors.h): the header written with its
 * buffer padded to 8 bytes, the file replaced atomically. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/text.h"
#include "core/io/safetensors_internal.h"

static bool valid_utf8(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int k = ug_st_utf8_len((const unsigned char *)s + i, n - i);
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
                                i, e->name ? ug_st_quoted(e->name, q, sizeof q) : "NULL",
                                e->name && !strcmp(e->name, "__metadata__")
                                    ? "any other (\"__metadata__\" is the format's)"
                                    : "a UTF-8 string");
        if (!ug_st_dtype_name(e->dtype))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %s: dtype %d, expected a ug_dtype",
                                path, ug_st_quoted(e->name, q, sizeof q), (int)e->dtype);
        if (e->ndim < 0 || e->ndim > UG_MAX_DIMS || (e->ndim && !e->shape))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "saving %s: tensor %s: ndim %d%s, expected 0 to %d with a shape", path,
                                ug_st_quoted(e->name, q, sizeof q), e->ndim, e->shape ? "" : " and no shape",
                                UG_MAX_DIMS);
        uint64_t bytes = ug_dtype_size(e->dtype);
        bool overflow = false;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0)
                return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                    "saving %s: tensor %s: dimension %d is %lld, expected >= 0", path,
                                    ug_st_quoted(e->name, q, sizeof q), d, (long long)e->shape[d]);
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
                                ug_st_quoted(e->name, q, sizeof q));
        if (bytes && !e->data)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: tensor %s: data is NULL", path,
                                ug_st_quoted(e->name, q, sizeof q));
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
                            path, ug_st_quoted(dup, q, sizeof q));
    UG_TRY(find_duplicate(path, meta_keys, meta_count, &dup));
    if (dup)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "saving %s: two metadata keys %s, expected unique keys",
                            path, ug_st_quoted(dup, q, sizeof q));
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

    ug_text h = {0};
    ug_text_puts(&h, "{");
    if (meta_count) {
        ug_text_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < meta_count; i++) {
            if (i)
                ug_text_puts(&h, ",");
            ug_text_json_string(&h, meta_keys[i]);
            ug_text_puts(&h, ":");
            ug_text_json_string(&h, meta_values[i]);
        }
        ug_text_puts(&h, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const ug_st_entry *e = &tensors[i];
        if (i || meta_count)
            ug_text_puts(&h, ",");
        ug_text_json_string(&h, e->name);
        ug_text_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", ug_st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++)
            ug_text_printf(&h, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        ug_text_printf(&h, "],\"data_offsets\":[%llu,", (unsigned long long)offset);
        offset += sizes[i]; /* no wrap: check_entries checked the total */
        ug_text_printf(&h, "%llu]}", (unsigned long long)offset);
    }
    ug_text_puts(&h, "}");
    /* Spaces up to a multiple of 8, so the buffer (at 8 + N) is aligned for
     * readers that map the file. */
    while (!h.failed && h.len % 8)
        ug_text_puts(&h, " ");
    if (h.failed) {
        ug_text_free(&h);
        free(sizes);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "saving %s: out of host memory for the header", path);
    }
    if (h.len > UG_ST_MAX_HEADER) {
        ug_text_free(&h);
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
        st = ug_atomic_write(f, h.data, h.len);
    for (int i = 0; i < count && st == UG_OK; i++)
        st = ug_atomic_write(f, tensors[i].data, (size_t)sizes[i]);
    ug_text_free(&h);
    free(sizes);
    if (st != UG_OK) {
        ug_atomic_abort(f);
        return st;
    }
    return ug_atomic_commit(f, keep);
}
