/* Strings by key (io/string_map.h). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/io/string_map.h"

void ug_strings_clear(ug_string_map *s)
{
    for (int i = 0; i < s->count; i++) {
        free(s->keys[i]);
        free(s->values[i]);
    }
    free(s->keys);
    free(s->values);
    free(s->slots);
    *s = (ug_string_map){0};
}

char *ug_string_copy(const char *text)
{
    size_t n = strlen(text) + 1;
    char *c = ug_malloc(n);
    if (c)
        memcpy(c, text, n);
    return c;
}

static size_t hash_string(const char *text) /* FNV-1a */
{
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 0x100000001b3u;
    return (size_t)h;
}

/* The slot that holds key, or the empty one where it would go. */
static size_t slot_of(const ug_string_map *s, const char *key)
{
    size_t mask = s->slot_count - 1, i = hash_string(key) & mask;
    while (s->slots[i] && strcmp(s->keys[s->slots[i] - 1], key) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Room for one more string: the arrays, and the index at most half full. */
static bool reserve(ug_string_map *s)
{
    if (s->count == s->capacity) {
        int cap = s->capacity ? 2 * s->capacity : 8;
        char **k = ug_realloc(s->keys, (size_t)cap * sizeof *k);
        if (k)
            s->keys = k;
        char **v = k ? ug_realloc(s->values, (size_t)cap * sizeof *v) : NULL;
        if (v)
            s->values = v;
        if (!k || !v)
            return false;
        s->capacity = cap;
    }
    if (2 * (size_t)(s->count + 1) <= s->slot_count)
        return true;
    size_t n = s->slot_count ? 2 * s->slot_count : 16;
    int *slots = ug_calloc(n, sizeof *slots), *old = s->slots;
    if (!slots)
        return false;
    s->slots = slots;
    s->slot_count = n;
    for (int i = 0; i < s->count; i++)
        s->slots[slot_of(s, s->keys[i])] = i + 1;
    free(old);
    return true;
}

ug_status ug_strings_set(ug_string_map *s, const char *key, const char *value)
{
    char *v = ug_string_copy(value);
    char *k = v && reserve(s) ? ug_string_copy(key) : NULL;
    if (!k) {
        free(v);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    size_t slot = slot_of(s, key);
    if (s->slots[slot]) {
        int i = s->slots[slot] - 1;
        free(k);
        free(s->values[i]);
        s->values[i] = v;
        return UG_OK;
    }
    s->keys[s->count] = k;
    s->values[s->count++] = v;
    s->slots[slot] = s->count;
    return UG_OK;
}

const char *ug_strings_get(const ug_string_map *s, const char *key)
{
    if (!s->count)
        return NULL;
    size_t slot = slot_of(s, key);
    return s->slots[slot] ? s->values[s->slots[slot] - 1] : NULL;
}
