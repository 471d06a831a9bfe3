/* Strings by key, kept in the order they were set (a checkpoint's
 * metadata): a hash index makes setting and finding a key constant time,
 * so a checkpoint of 100,000 keys saves and loads in linear time.
 * Internal: not exported. */
#ifndef UG_CORE_STRING_MAP_H
#define UG_CORE_STRING_MAP_H

#include <stddef.h>

#include "unigrad/status.h"

typedef struct ug_string_map {
    int count, capacity;
    char **keys, **values; /* in the order set, count of each */
    int *slots;            /* open addressing: index + 1, 0 when empty */
    size_t slot_count;     /* a power of two, at least twice count */
} ug_string_map;

/* Sets key to value (replacing it), copying both; UG_ERR_OUT_OF_MEMORY
 * leaves the map as it was. */
ug_status ug_strings_set(ug_string_map *map, const char *key, const char *value);
/* key's value, or NULL. */
const char *ug_strings_get(const ug_string_map *map, const char *key);
/* Frees every string and the index; the map is empty after. */
void ug_strings_clear(ug_string_map *map);
/* A copy of text from ug_malloc, or NULL. */
char *ug_string_copy(const char *text);

#endif
