/* Shared state and helpers of the CPU backend. Buffers are plain 64-byte
 * aligned host pointers (ug_mem is the pointer itself), kernels run
 * synchronously on the caller plus the device's worker threads. */
#ifndef UG_CPU_INTERNAL_H
#define UG_CPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/cpu/threads.h"

typedef struct ug_cpu_convs ug_cpu_convs;
typedef struct ug_cpu_matmuls ug_cpu_matmuls;

struct ug_bdev {
    ug_cpu_workers *workers;
    int threads;          /* budget: workers + the caller */
    ug_cpu_convs *convs;  /* oneDNN's convolutions (convs.h); NULL without it */
    ug_cpu_matmuls *matmuls; /* oneDNN's bf16 products (matmul_bf16.h); NULL without it */
    pthread_mutex_t streams_lock;
    ug_bstream *streams;  /* side streams (streams.c) */
};

/* Set once by ug_cpu_backend; never NULL afterwards (a no-op stand-in is
 * used when the core passes none). */
extern const ug_backend_host *ug_cpu_host;

#define UG_CPU_ERROR(...) (ug_cpu_host->set_error(__VA_ARGS__))

/* Work below this many elements runs inline: waking workers costs more. */
#define UG_CPU_MIN_PARALLEL 32768

/* Lets gcc vectorise loops whose output may alias an input exactly (distance
 * 0 is no loop-carried dependence, but gcc cannot prove it). clang adds
 * run-time overlap checks by itself, and its assume_safety pragma warns on
 * loops that call libm, so it gets nothing. */
#if defined(__GNUC__) && !defined(__clang__)
#define UG_CPU_IVDEP _Pragma("GCC ivdep")
#else
#define UG_CPU_IVDEP
#endif

/* The kernel loops, compiled for the baseline x86-64 (SSE2, 4 floats a
 * vector), AVX2 (8) and AVX-512 (16), the widest the processor has picked
 * when the library loads (an ifunc). Contraction into FMA stays off
 * (-ffp-contract=off, CMakeLists.txt), and the reductions keep their
 * lanes, so every version gives the same bits. ThreadSanitizer cannot run
 * an ifunc's resolver, so its builds keep the baseline. GCC only: clang 14
 * gives a static function's resolver an external name, so two files' clones
 * of one name (row_max in reduce.c and rowwise.c) collide at link time. */
#if defined(__SANITIZE_THREAD__)
#define UG_CPU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UG_CPU_TSAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__linux__) && !defined(__clang__) && !defined(UG_CPU_TSAN)
#define UG_CPU_WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define UG_CPU_WIDE
#endif

/* Address of element `offset` of a view. */
static inline char *ug_cpu_ptr(ug_kview v)
{
    return (char *)v.mem + v.offset * (int64_t)ug_dtype_size(v.dtype);
}

/* The dtypes arithmetic kernels take (computing in f32). */
static inline bool ug_cpu_float_dtype(ug_dtype t) { return t == UG_F32 || t == UG_F16 || t == UG_BF16; }

/* Whether any of x[0..n) is NaN or infinite (x - x is NaN exactly then),
 * as an integer reduction, so the loop it sits in still vectorises. */
static inline bool ug_cpu_any_nonfinite(const float *x, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= ug_nonfinite(x[i]);
    return bad;
}

/* Sets a numeric check folded into a kernel (backend.h) to NaN: atomically,
 * since every thread that finds a bad value may store it at once. */
static inline void ug_cpu_set_check(ug_kview check)
{
    const uint32_t nan_bits = 0x7fc00000u; /* f32 quiet NaN */
    __atomic_store_n((uint32_t *)(void *)ug_cpu_ptr(check), nan_bits, __ATOMIC_RELAXED);
}

/* An epilogue's post-op, match, check and running sum (backend.h's
 * ug_epilogue, the math of kernels/common/epilogue.h) on results r[0..n),
 * the results pos.. of the call, before they are stored; a pair is the
 * caller's (binary ops and the GEMM apply theirs in blocks that
 * vectorise). Positions are one thread's. */
static inline void ug_cpu_epilogue(const ug_epilogue *e, float *r, int64_t pos, int64_t n)
{
    for (int64_t c = 0; e->post != UG_UNARY_COPY && c < n; c++)
        r[c] = ug_epilogue_value(0, 0, 0.0f, 0, 0.0f, e->post, r[c]);
    if (e->match.mem) {
        const char *m = ug_cpu_ptr(e->match);
        for (int64_t c = 0; c < n; c++)
            r[c] = ug_epilogue_match(r[c], e->match.dtype == UG_I32 ? (float)((const int32_t *)(const void *)m)[pos + c]
                                                                    : ((const float *)(const void *)m)[pos + c]);
    }
    if (e->check.mem && ug_cpu_any_nonfinite(r, n))
        ug_cpu_set_check(e->check);
    if (e->sum.mem) {
        float *sum = (float *)(void *)ug_cpu_ptr(e->sum) + pos;
        for (int64_t c = 0; c < n; c++)
            sum[c] += e->sum_alpha * r[c];
    }
}

/* Reads n elements of any dtype, stride apart (0 repeats one), as f32. */
void ug_cpu_load(const void *base, ug_dtype dtype, int64_t stride, int64_t n, float *out);
/* Writes n contiguous f32 values as dtype (f32, f16 or bf16). */
void ug_cpu_store(void *base, ug_dtype dtype, int64_t n, const float *in);

/* streams.c: streams, events, and the queueing of entries while a side
 * stream is bound on the calling thread. */
ug_stream_create_fn ug_cpu_stream_create;
ug_stream_destroy_fn ug_cpu_stream_destroy;
ug_stream_bind_fn ug_cpu_stream_bind;
ug_stream_synchronize_fn ug_cpu_stream_synchronize;
ug_synchronize_fn ug_cpu_synchronize;
ug_event_create_fn ug_cpu_event_create;
ug_event_destroy_fn ug_cpu_event_destroy;
ug_event_record_fn ug_cpu_event_record;
ug_event_wait_fn ug_cpu_event_wait;
ug_event_query_fn ug_cpu_event_query;
ug_event_synchronize_fn ug_cpu_event_synchronize;
ug_event_elapsed_fn ug_cpu_event_elapsed;
ug_native_fn ug_cpu_native;
/* Whether a side stream is bound on the calling thread. */
bool ug_cpu_queue_bound(void);
/* Queues call(dev, copy of args) on the bound stream; blocking waits for it
 * (and reports any failure of the stream's work). */
ug_status ug_cpu_queue_call(ug_status (*call)(ug_bdev *, const void *), const void *args,
                            size_t bytes, bool blocking);

/* One entry per kernel family (ug_cpu_<slot>), each in its family's file. */
UG_BACKEND_KERNELS(ug_cpu)

#endif
