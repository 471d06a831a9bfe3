/* The CPU kernels' conversions between storage types and f32 (internal.h's
 * ug_cpu_load and ug_cpu_store), called on every run of every kernel that
 * takes half types: the contiguous cases are vector loops (F16C for f16,
 * integer lanes for bf16, chosen for the processor at load time), so that a
 * bf16 tensor costs its kernels fewer bytes, not more instructions. */
#include <string.h>

#include "backends/cpu/internal.h"
#include "base/half.h"

/* bf16 is f32's upper half: widening is a shift. */
UG_CPU_WIDE
static void widen_bf16(const unsigned short *restrict p, int64_t n, float *restrict out)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)p[i] << 16;
        memcpy(&out[i], &bits, sizeof bits);
    }
}

/* ug_bfloat_from_f32's rounding, written as selects so the loop vectorises:
 * round to nearest even by adding 0x7fff plus the kept half's lowest bit;
 * any NaN becomes the quiet NaN 0x7fc0. */
UG_CPU_WIDE
static void round_bf16(unsigned short *restrict p, int64_t n, const float *restrict in)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, &in[i], sizeof x);
        uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        p[i] = (unsigned short)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
    }
}

/* x86's F16C converts eight halves per instruction, rounding to nearest
 * even as ug_half_from_f32 does; a processor without it (or another
 * architecture) converts one at a time in software. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define UG_CPU_F16C 1

/* AVX (with the OS saving its registers) and F16C: cpuid leaf 1's ECX bit
 * 29, asked directly since clang's __builtin_cpu_supports has no "f16c". */
static bool has_f16c(void)
{
    static int known = -1; /* kernels on several threads may ask at once */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        k = __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

__attribute__((target("avx,f16c"))) static int64_t load_f16c(const unsigned short *p, int64_t n, float *out)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i))));
    return i;
}

__attribute__((target("avx,f16c"))) static int64_t store_f16c(unsigned short *p, int64_t n, const float *in)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(p + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

void ug_cpu_load(const void *base, ug_dtype dtype, int64_t stride, int64_t n, float *out)
{
    switch (dtype) {
    case UG_F32: {
        const float *p = base;
        if (stride == 1)
            memcpy(out, p, (size_t)n * sizeof *out);
        else
            for (int64_t i = 0; i < n; i++)
                out[i] = p[i * stride];
        break;
    }
    case UG_F16: {
        const unsigned short *p = base;
        int64_t i = 0;
#ifdef UG_CPU_F16C
        if (stride == 1 && has_f16c())
            i = load_f16c(p, n, out);
#endif
        for (; i < n; i++)
            out[i] = ug_half_to_f32(p[i * stride]);
        break;
    }
    case UG_BF16:
        if (stride == 1)
            widen_bf16(base, n, out);
        else
            for (int64_t i = 0; i < n; i++)
                out[i] = ug_bfloat_to_f32(((const unsigned short *)base)[i * stride]);
        break;
    case UG_I32: {
        const int32_t *p = base;
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)p[i * stride];
        break;
    }
    case UG_U8: {
        const uint8_t *p = base;
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)p[i * stride];
        break;
    }
    case UG_I64: {
        const int64_t *p = base;
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)p[i * stride];
        break;
    }
    }
}

void ug_cpu_store(void *base, ug_dtype dtype, int64_t n, const float *in)
{
    if (dtype == UG_F32) {
        memcpy(base, in, (size_t)n * sizeof *in);
    } else if (dtype == UG_F16) {
        unsigned short *p = base;
        int64_t i = 0;
#ifdef UG_CPU_F16C
        if (has_f16c())
            i = store_f16c(p, n, in);
#endif
        for (; i < n; i++)
            p[i] = ug_half_from_f32(in[i]);
    } else if (dtype == UG_BF16) {
        round_bf16(base, n, in);
    }
}

