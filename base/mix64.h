/* splitmix64's output function: x plus the golden-ratio increment, mixed
 * so that neighbouring inputs give unrelated outputs. Shared by the
 * loader's shuffles, dropout's key and temporary file names. */
#ifndef UG_CORE_MIX64_H
#define UG_CORE_MIX64_H

#include <stdint.h>

static inline uint64_t ug_mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
