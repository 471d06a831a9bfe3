/* Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3"), with the constants of backend.h. Header-only so the kernel and
 * any host code use one definition. */
#ifndef UG_CPU_PHILOX_H
#define UG_CPU_PHILOX_H

#include <stdint.h>

#include "backends/backend.h"

typedef struct ug_philox4 {
    uint32_t v[4];
} ug_philox4;

/* One round: two 32x32->64 products mixed with the other words and the key. */
static inline ug_philox4 ug_philox_round(ug_philox4 c, uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)UG_PHILOX_M0 * c.v[0];
    uint64_t p1 = (uint64_t)UG_PHILOX_M1 * c.v[2];
    ug_philox4 r;
    r.v[0] = (uint32_t)(p1 >> 32) ^ c.v[1] ^ k0;
    r.v[1] = (uint32_t)p1;
    r.v[2] = (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1;
    r.v[3] = (uint32_t)p0;
    return r;
}

/* Ten rounds, the key bumped by (W0, W1) between rounds. */
static inline ug_philox4 ug_philox4x32_10(ug_philox4 c, uint32_t k0, uint32_t k1)
{
    for (int i = 0; i < 10; i++) {
        if (i > 0) {
            k0 += UG_PHILOX_W0;
            k1 += UG_PHILOX_W1;
        }
        c = ug_philox_round(c, k0, k1);
    }
    return c;
}

/* The draw of element counter `counter` under `seed`, as backend.h lays
 * them out: counter (lo, hi, 0, 0), key (seed lo, seed hi). */
static inline ug_philox4 ug_philox_draw(uint64_t seed, uint64_t counter)
{
    ug_philox4 c = {{(uint32_t)counter, (uint32_t)(counter >> 32), 0u, 0u}};
    return ug_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

#endif
