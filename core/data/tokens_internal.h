/* Token sets as the sampler reads them (tokens.c, token_sampler.c). */
#ifndef UG_CORE_DATA_TOKENS_INTERNAL_H
#define UG_CORE_DATA_TOKENS_INTERNAL_H

#include <stdint.h>

#include "unigrad/tokens.h"

/* A range shares its base's storage (holding a reference); the base holds
 * the mapping or the heap copy. */
struct ug_tokens {
    int refs;                  /* the program's handle, ranges and samplers (atomic) */
    ug_tokens *base;           /* a range's base, else NULL */
    const uint8_t *data;       /* the first id's bytes */
    int width;                 /* bytes an id, little-endian: 1, 2 or 4 */
    int64_t count, vocab;
    void *map;                 /* a file's mapping (base only), or NULL */
    size_t map_bytes;
    void *owned;               /* a copy's ids (base only), or NULL */
};

void ug_tokens_retain(const ug_tokens *tokens);

/* Ids [start, start + count) into dst as i32 or i64 (the caller checked
 * the range and the dtype). */
void ug_tokens_gather(const ug_tokens *tokens, int64_t start, int64_t count, ug_dtype dtype, void *dst);

#endif
