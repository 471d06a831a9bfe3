/* unigrad OpenCL kernels: helpers shared by every family. The host
 * concatenates this file first and the other .cl files after it, in name
 * order, into one program.
 *
 * Rules every kernel follows:
 * - f16 is a storage type only (POCL and others have no cl_khr_fp16):
 *   loads and stores go through vload_half / vstore_half (round to nearest
 *   even) and all arithmetic is f32.
 * - Buffers come with an element offset (OpenCL cannot offset a cl_mem).
 * - The global size is rounded up to the work-group size, so every 1-D
 *   kernel checks its index against n.
 * - Sizes and indices are 64-bit: a buffer may pass 2^31 elements. */

/* No a*b+c contraction into fma: the host references and the other
 * backends round every operation, and random uniform must be bitwise equal
 * to the host's Philox. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef UG_WG
#define UG_WG 256 /* the largest work-group the host launches: sizes local arrays */
#endif

/* UG_DT_* (ug_dtype), UG_R_* (ug_reduce_kind), UG_OPTIM_* and UG_LN_*
 * (flag bits) come from the host as -D options generated from its enums
 * (backends/opencl/program.c). */

/* f32 to bfloat16 as the host's ug_f32_to_bf16: round to nearest even
 * (adding 0x7fff, plus 1 when the kept half is odd, carries exactly when
 * the dropped half rounds up), any NaN to 0x7fc0. Integer operations, so
 * a device that flushes subnormal floats still rounds them. */
inline ushort ug_f32_to_bf16(float v)
{
    uint x = as_uint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (ushort)0x7fc0u;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* Element type, load (to f32) and store (from f32) per dtype, for the
 * macros that instantiate one kernel per dtype. */
#define UG_T_f32 float
#define UG_T_f16 half
#define UG_T_i32 int
#define UG_T_i64 long
#define UG_T_u8 uchar
#define UG_T_bf16 ushort /* bfloat16's bits: the top half of an f32 */
#define UG_LD_f32(p, i) ((p)[i])
#define UG_LD_f16(p, i) vload_half((size_t)(i), (p))
#define UG_LD_i32(p, i) ((float)(p)[i])
#define UG_LD_i64(p, i) ((float)(p)[i])
#define UG_LD_u8(p, i) ((float)(p)[i])
#define UG_LD_bf16(p, i) as_float((uint)(p)[i] << 16)
#define UG_ST_f32(p, i, v) ((p)[i] = (v))
#define UG_ST_f16(p, i, v) vstore_half((v), (size_t)(i), (p))
#define UG_ST_bf16(p, i, v) ((p)[i] = ug_f32_to_bf16(v))

/* Store through a runtime dtype (f32, f16 or bf16), for outputs written
 * once per row where a kernel per output dtype is not worth it. */
inline void ug_store_dt(global uchar *p, long i, int dt, float v)
{
    if (dt == UG_DT_F16)
        vstore_half(v, (size_t)i, (global half *)p);
    else if (dt == UG_DT_BF16)
        ((global ushort *)p)[i] = ug_f32_to_bf16(v);
    else
        ((global float *)p)[i] = v;
}

/* Shapes and strides of a strided operand, passed by value as one struct
 * argument (vector arguments such as long8 change the CPU ABI and make
 * POCL's compiler warn). The host mirrors these layouts with cl_long. */
typedef struct ug_layout1 {
    long shape[8];
    long xs[8];
} ug_layout1;

typedef struct ug_layout2 {
    long shape[8];
    long as[8];
    long bs[8];
} ug_layout2;

/* Element offset of the strided position of flat (row-major) index i. */
inline long ug_strided_offset(long i, int ndim, const long *shape, const long *strides)
{
    long off = 0;
    for (int d = ndim - 1; d > 0; --d) {
        const long q = i / shape[d];
        off += (i - q * shape[d]) * strides[d];
        i = q;
    }
    return off + i * strides[0];
}

/* A numeric check folded into a kernel (backend.h's ug_epilogue): the
 * flag's buffer, offset and whether there is one, set to NaN when a value
 * the kernel read or wrote was NaN or infinite (ug_nonfinite). */
#define UG_CHECK_PARAMS global float *check, ulong check_off, int check_on
inline void ug_check_flag(global float *check, ulong check_off, int check_on, bool bad)
{
    if (check_on && bad)
        check[check_off] = NAN;
}

/* A running sum folded into a kernel (backend.h): sum[k] += alpha * r as
 * the kernel writes its result k, when there is one. */
#define UG_SUM_PARAMS global float *sum, ulong sum_off, int sum_on, float sum_alpha
inline void ug_sum_add(global float *sum, ulong sum_off, int sum_on, float sum_alpha, long k, float r)
{
    if (sum_on)
        sum[sum_off + k] += sum_alpha * r;
}

/* max that propagates NaN (fmax would drop it). */
inline float ug_max_nan(float a, float b)
{
    return (a > b || isnan(a)) ? a : b;
}

/* Work-group reductions over a 1-D group; every item must call them. The
 * trailing barrier lets the caller reuse buf at once. */
inline float ug_wg_sum(local float *buf, float v)
{
    const int lid = get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            buf[lid] += buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float ug_wg_max(local float *buf, float v)
{
    const int lid = get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s)
            buf[lid] = ug_max_nan(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Pairwise (tree) summation of one work-item's stream of terms: serial
 * sums of UG_PW_BLOCK terms, merged like a binary counter, so the error
 * grows with log(n) rather than n and 2^24 ones sum to exactly 2^24. */
#define UG_PW_BLOCK 32
typedef struct ug_pw {
    float stack[32];
    int depth;
    uint blocks;
    int in_block;
    float block;
} ug_pw;

inline void ug_pw_init(ug_pw *a)
{
    a->depth = 0;
    a->blocks = 0;
    a->in_block = 0;
    a->block = 0.0f;
}

inline void ug_pw_add(ug_pw *a, float v)
{
    a->block += v;
    if (++a->in_block == UG_PW_BLOCK) {
        float s = a->block;
        for (uint c = ++a->blocks; (c & 1u) == 0u; c >>= 1)
            s = a->stack[--a->depth] + s;
        a->stack[a->depth++] = s;
        a->block = 0.0f;
        a->in_block = 0;
    }
}

inline float ug_pw_total(ug_pw *a)
{
    float t = a->block;
    while (a->depth > 0)
        t = a->stack[--a->depth] + t;
    return t;
}
