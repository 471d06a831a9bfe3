/* Decoding a fuzzer's bytes into configuration values: each read takes the
 * next bytes (zeros once they run out). Integers come from a table of the
 * values that break arithmetic (0, -1, 2^31, 2^62, INT64_MAX, ...) or from
 * small ranges, and floats from any bit pattern (NaN, inf, subnormals), so
 * the fuzzer reaches the edges of every field at once. */
#ifndef UG_FUZZ_INPUT_H
#define UG_FUZZ_INPUT_H

#include <stdint.h>
#include <string.h>

/* The harnesses' device pools hold at most this: a configuration asking
 * for more (a batch of 2^24 rows) is refused as out of memory, as it would
 * be on a device of this size, instead of passing libFuzzer's RSS limit. */
#define FUZZ_POOL_LIMIT ((uint64_t)256 << 20)

typedef struct fuzz_input {
    const uint8_t *data;
    size_t size, at;
} fuzz_input;

static inline uint8_t fuzz_byte(fuzz_input *in) { return in->at < in->size ? in->data[in->at++] : 0; }

static inline uint64_t fuzz_bits(fuzz_input *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | fuzz_byte(in);
    return v;
}

/* An integer: an edge value, or one in [0, small). */
static inline int64_t fuzz_int(fuzz_input *in, int64_t small)
{
    static const int64_t edges[] = {0, 1, -1, 2, 3, 7, 64, INT32_MAX, (int64_t)INT32_MAX + 2, INT32_MIN,
                                    (int64_t)1 << 24, ((int64_t)1 << 24) + 1, (int64_t)1 << 53,
                                    ((int64_t)1 << 53) + 1, (int64_t)1 << 62, ((int64_t)1 << 62) + 1,
                                    INT64_MAX, INT64_MIN};
    uint8_t pick = fuzz_byte(in);
    if (pick < 64)
        return edges[pick % (sizeof edges / sizeof *edges)];
    return small > 0 ? (int64_t)(fuzz_bits(in, 2) % (uint64_t)small) : 0;
}

/* A float: an edge value, a plain one, or any 32 bits. */
static inline float fuzz_float(fuzz_input *in)
{
    static const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-3f, 1e-40f, 1.17549435e-38f,
                                  3.4e38f, 1e30f, 65536.0f, 0.999f, 1.0001f};
    uint8_t pick = fuzz_byte(in);
    if (pick < 128)
        return edges[pick % (sizeof edges / sizeof *edges)];
    uint32_t bits = (uint32_t)fuzz_bits(in, 4);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif
