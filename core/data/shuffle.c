/* Seeded permutations of sample indices, shared by the loader's epochs and
 * data set splits. */
#include "core/data/internal.h"
#include "base/mix64.h"

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = ug_mix64(*state);
    *state += 0x9E3779B97F4A7C15ull;
    return z;
}

/* Uniform in [0, bound) without modulo bias: reject the low values that
 * would make some residues more likely. */
static uint64_t below(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t r = splitmix64(state);
        if (r >= threshold)
            return r % bound;
    }
}

void ug_shuffled_order(int64_t *perm, int64_t n, bool shuffle, uint64_t seed, uint64_t stream)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (!shuffle)
        return;
    /* The key mixes seed and stream through splitmix64 itself, so
     * neighbouring seeds or streams give unrelated orders. */
    uint64_t s = seed;
    uint64_t key = splitmix64(&s);
    s = key ^ stream;
    uint64_t state = splitmix64(&s);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)below(&state, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
