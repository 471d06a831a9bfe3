/* Elementwise kernels: unary (also the cast, transpose and expand), binary
 * with broadcasting and a fused activation, and raw strided copies. The operation is a run-time argument
 * (uniform across the launch, so the branch costs little); the dtypes are
 * compile-time, one kernel per combination. Each kind comes as a
 * contiguous fast path and a strided path that reads through up to 8
 * (shape, stride) pairs passed by value in a struct. */

/* ug_unary_kind */
#define UG_U_COPY 0
#define UG_U_NEG 1
#define UG_U_ABS 2
#define UG_U_EXP 3
#define UG_U_LOG 4
#define UG_U_SQRT 5
#define UG_U_RELU 6
#define UG_U_SIGMOID 7
#define UG_U_TANH 8
#define UG_U_GELU 9
#define UG_U_SCALE_SHIFT 10
#define UG_U_FILL 11
#define UG_U_SQUARE 12
#define UG_U_RECIPROCAL 13
#define UG_U_CLAMP 14

/* ug_binary_kind */
#define UG_B_ADD 0
#define UG_B_SUB 1
#define UG_B_MUL 2
#define UG_B_DIV 3
#define UG_B_MAXIMUM 4
#define UG_B_MINIMUM 5
#define UG_B_RELU_GRAD 6
#define UG_B_SIGMOID_GRAD 7
#define UG_B_TANH_GRAD 8
#define UG_B_GELU_GRAD 9
#define UG_B_ABS_GRAD 10
#define UG_B_SQRT_GRAD 11
#define UG_B_GE_MASK 12
#define UG_B_DROPOUT 13

inline float ug_unary_op(int op, float x, float alpha, float beta)
{
    switch (op) {
    case UG_U_COPY: return x;
    case UG_U_NEG: return -x;
    case UG_U_ABS: return fabs(x);
    case UG_U_EXP: return exp(x);
    case UG_U_LOG: return log(x);
    case UG_U_SQRT: return sqrt(x);
    case UG_U_RELU: return x < 0.0f ? 0.0f : x; /* NaN stays NaN */
    case UG_U_SIGMOID: return 1.0f / (1.0f + exp(-x));
    case UG_U_TANH: return tanh(x);
    case UG_U_GELU: return 0.5f * x * (1.0f + erf(x * M_SQRT1_2_F));
    case UG_U_SCALE_SHIFT: return alpha * x + beta;
    case UG_U_FILL: return beta;
    case UG_U_SQUARE: return x * x;
    case UG_U_RECIPROCAL: return 1.0f / x;
    case UG_U_CLAMP: {
        /* min(max(x, alpha), beta), NaN propagating like PyTorch's clamp. */
        float y = x < alpha ? alpha : x;
        return y > beta ? beta : y;
    }
    }
    return x;
}

inline float ug_binary_op(int op, float a, float b, float alpha)
{
    switch (op) {
    case UG_B_ADD: return a + b;
    case UG_B_SUB: return a - b;
    case UG_B_MUL: return a * b;
    case UG_B_DIV: return a / b;
    case UG_B_MAXIMUM: return (a > b || isnan(a)) ? a : b; /* NaN propagates */
    case UG_B_MINIMUM: return (a < b || isnan(a)) ? a : b;
    case UG_B_RELU_GRAD: return b > 0.0f ? a : 0.0f;
    case UG_B_SIGMOID_GRAD: return a * b * (1.0f - b);
    case UG_B_TANH_GRAD: return a * (1.0f - b * b);
    case UG_B_GELU_GRAD: {
        /* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
        const float cdf = 0.5f * (1.0f + erf(b * M_SQRT1_2_F));
        const float pdf = exp(-0.5f * b * b) * 0.398942280401432678f; /* 1/sqrt(2 pi) */
        return a * (cdf + b * pdf);
    }
    case UG_B_ABS_GRAD: return a * sign(b);
    case UG_B_SQRT_GRAD: return 0.5f * a / b;
    case UG_B_GE_MASK: return a >= b ? 1.0f : 0.0f;
    case UG_B_DROPOUT: return b >= alpha ? a / (1.0f - alpha) : 0.0f;
    }
    return a;
}

/* y = op(x): y contiguous, x contiguous or strided. FILL never reads x. */
#define UG_UNARY_KERNELS(TI, TO)                                                         \
    kernel void unary_contig_##TI##_##TO(global UG_T_##TO *y, ulong yoff,                \
                                         const global UG_T_##TI *x, ulong xoff, long n,  \
                                         int op, float alpha, float beta)                \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float v = op == UG_U_FILL ? 0.0f : UG_LD_##TI(x, xoff + i);                \
        UG_ST_##TO(y, yoff + i, ug_unary_op(op, v, alpha, beta));                        \
    }                                                                                    \
    kernel void unary_strided_##TI##_##TO(global UG_T_##TO *y, ulong yoff,               \
                                          const global UG_T_##TI *x, ulong xoff, long n, \
                                          int op, float alpha, float beta, int ndim,     \
                                          ug_layout1 lay)                                \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const long xi = xoff + ug_strided_offset(i, ndim, lay.shape, lay.xs);            \
        const float v = op == UG_U_FILL ? 0.0f : UG_LD_##TI(x, xi);                      \
        UG_ST_##TO(y, yoff + i, ug_unary_op(op, v, alpha, beta));                        \
    }

UG_UNARY_KERNELS(f32, f32)
UG_UNARY_KERNELS(f32, f16)
UG_UNARY_KERNELS(f16, f32)
UG_UNARY_KERNELS(f16, f16)
UG_UNARY_KERNELS(i32, f32)
UG_UNARY_KERNELS(i32, f16)
UG_UNARY_KERNELS(u8, f32)
UG_UNARY_KERNELS(u8, f16)

/* Same-dtype strided copy of raw elements (any dtype, bits preserved:
 * i32 beyond 2^24, NaN payloads). Contiguous copies use clEnqueueCopyBuffer. */
#define UG_COPY_KERNEL(NAME, T)                                                          \
    kernel void copy_strided_##NAME(global T *y, ulong yoff, const global T *x,          \
                                    ulong xoff, long n, int ndim, ug_layout1 lay)        \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        y[yoff + i] = x[xoff + ug_strided_offset(i, ndim, lay.shape, lay.xs)];           \
    }

UG_COPY_KERNEL(u8, uchar)
UG_COPY_KERNEL(u16, ushort)
UG_COPY_KERNEL(u32, uint)

/* y = post(a op b). y may alias a or b exactly: each item reads its inputs
 * before writing its own element, so no restrict and no hazard. */
#define UG_BINARY_KERNELS(T)                                                             \
    kernel void binary_contig_##T(global UG_T_##T *y, ulong yoff,                        \
                                  const global UG_T_##T *a, ulong aoff,                  \
                                  const global UG_T_##T *b, ulong boff, long n, int op,  \
                                  int post, float alpha)                                 \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float v = ug_binary_op(op, UG_LD_##T(a, aoff + i), UG_LD_##T(b, boff + i), \
                                     alpha);                                             \
        UG_ST_##T(y, yoff + i, ug_unary_op(post, v, 0.0f, 0.0f));                        \
    }                                                                                    \
    kernel void binary_strided_##T(global UG_T_##T *y, ulong yoff,                       \
                                   const global UG_T_##T *a, ulong aoff,                 \
                                   const global UG_T_##T *b, ulong boff, long n, int op, \
                                   int post, float alpha, int ndim, ug_layout2 lay)     \
    {                                                                                    \
        const long i = get_global_id(0);                                                 \
        if (i >= n)                                                                      \
            return;                                                                      \
        const float va = UG_LD_##T(a, aoff + ug_strided_offset(i, ndim, lay.shape, lay.as)); \
        const float vb = UG_LD_##T(b, boff + ug_strided_offset(i, ndim, lay.shape, lay.bs)); \
        const float v = ug_binary_op(op, va, vb, alpha);                                 \
        UG_ST_##T(y, yoff + i, ug_unary_op(post, v, 0.0f, 0.0f));                        \
    }

UG_BINARY_KERNELS(f32)
UG_BINARY_KERNELS(f16)
