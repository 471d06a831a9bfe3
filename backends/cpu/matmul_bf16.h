/* bf16 products through oneDNN's matmul (matmul_bf16.c) on processors that
 * multiply bf16 natively (AVX512-BF16, AMX): a GEMM tile's product without
 * widening its operands to f32. Present when the build found oneDNN
 * (UG_CPU_ONEDNN); elsewhere bf16 is never native and tiles widen. */
#ifndef UG_CPU_MATMUL_BF16_H
#define UG_CPU_MATMUL_BF16_H

#include "backends/cpu/internal.h"

/* One tile's C [m, n] = alpha sum over `entries` of op(A_e) op(B_e) +
 * beta C, the entries stride_a and stride_b elements apart, A and B bf16
 * row-major with leading dimensions lda and ldb (as stored: k x m when
 * trans_a), C f32 or bf16 (rounded once, after the sum). */
typedef struct ug_cpu_product {
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, entries;
    float alpha, beta;
    const void *a, *b;
    void *c;
    ug_dtype c_dtype;
} ug_cpu_product;

typedef enum ug_cpu_product_result {
    UG_CPU_PRODUCT_DONE = 0,
    UG_CPU_PRODUCT_NOT_TAKEN, /* no native kernel for it: widen to f32 */
    UG_CPU_PRODUCT_FAILED     /* out of memory or a library error */
} ug_cpu_product_result;

#ifdef UG_CPU_ONEDNN
ug_status ug_cpu_matmuls_create(ug_cpu_matmuls **out);
void ug_cpu_matmuls_destroy(ug_cpu_matmuls *matmuls);
/* Whether oneDNN multiplies bf16 natively on this processor (its effective
 * ISA: DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI turns it off). */
bool ug_cpu_native_bf16(void);
/* Runs p on the calling thread alone. */
ug_cpu_product_result ug_cpu_matmul_bf16(ug_cpu_matmuls *matmuls, const ug_cpu_product *p);
#else
static inline bool ug_cpu_native_bf16(void) { return false; }
#endif

#endif
