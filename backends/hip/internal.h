/* Internal header of the HIP/CUDA module: the per-device state and the
 * functions its files share. The module is one source tree built twice:
 * by hipcc (AMD, table name "hip") and by nvcc with UG_CUDA defined
 * (NVIDIA, table name "cuda", HIP names mapped by hip_to_cuda.h). */
#ifndef UG_HIP_H
#define UG_HIP_H

#ifdef UG_CUDA
#include "backends/hip/hip_to_cuda.h"
#define UG_HIP_BACKEND "cuda"
#define UG_HIP_DISPLAY "CUDA" /* in prose */
#define UG_HIP_RT "cuda" /* prefix of runtime call names in messages */
#else
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define UG_HIP_BACKEND "hip"
#define UG_HIP_DISPLAY "HIP"
#define UG_HIP_RT "hip"
#endif

#include <pthread.h>

#include "backends/backend.h"

/* Threads per block of the 1-D kernels: UG_HIP_BLOCK, with the device
 * code (kernels/hip/common.h). Cap on blocks per grid dimension; kernels
 * loop (grid stride) past it. */
#define UG_HIP_MAX_GRID 65535

/* A runtime stream with what work on it needs of its own: a BLAS handle
 * bound to it and reduction scratch. The device's default stream and each
 * side stream (streams.cpp) have one. */
typedef struct ug_hip_queue {
    hipStream_t stream;
    void *blas;           /* vendor BLAS handle, NULL: own GEMM kernel */
    void *blas_workspace; /* the handle's workspace (cuBLAS), or NULL */
    void *scratch;        /* reductions' and split GEMMs' partials, grown on demand */
    size_t scratch_bytes;
    void *retired[40];    /* scratch outgrown, kept for the captured graphs that name it */
    int retired_count;
    void *dnn;            /* the DNN library's handle (conv.cpp), made at first use */
    void *attention_plans; /* the library's attention plans on dnn (attention_cudnn.cpp) */
    /* Counts of a launch's finished blocks, for kernels whose last block
     * to finish completes the work (a split GEMM's tiles, gemm_own.hip; the
     * cross-entropy's mean, rowwise.hip); each kernel leaves them 0. */
    unsigned *block_counts;
} ug_hip_queue;

#define UG_HIP_BLOCK_COUNTS 4096

struct ug_bstream {
    ug_hip_queue q;
    ug_bstream *next;     /* the device's list */
};

/* The device's convolution plans (conv.cpp), GEMM choices
 * (gemm_choice.cpp) and attention choices (attention_choice.cpp). */
typedef struct ug_hip_convs ug_hip_convs;
typedef struct ug_hip_gemms ug_hip_gemms;
typedef struct ug_hip_attentions ug_hip_attentions;

struct ug_bdev {
    int index;            /* the module's device index */
    int ordinal;          /* the runtime's device number */
    int sm_count;         /* compute units / SMs, to size grids */
    ug_hip_queue main;    /* the default stream */
    pthread_mutex_t streams_lock;
    ug_bstream *streams;  /* side streams */
    ug_hip_convs *convs;
    ug_hip_gemms *gemms;
    ug_hip_attentions *attentions;
};

/* Set by the module entry; every error goes through it. */
extern const ug_backend_host *ug_hip_host;

/* Records a failed runtime call "what" (e.g. UG_HIP_RT "Malloc") as
 * UG_ERR_BACKEND (or status when given) and clears the runtime's
 * last-error slot so later launch checks do not see it again. */
ug_status ug_hip_fail(ug_status status, hipError_t err, const char *what);
/* Makes dev's device current on this thread (runtime state is per thread). */
ug_status ug_hip_enter(ug_bdev *dev);
/* hipGetLastError after a launch: UG_ERR_BACKEND naming the kernel. */
ug_status ug_hip_launched(const char *kernel);
/* Device scratch of at least bytes on the current queue, for partial
 * results that one launch writes and the next reads (kept until the queue
 * closes). */
ug_status ug_hip_scratch(ug_bdev *dev, size_t bytes, void **out);

/* streams.cpp: the queue work goes to on the calling thread (the bound
 * side stream's, else the default), queues, and the stream entries. */
ug_hip_queue *ug_hip_current(ug_bdev *dev);
ug_status ug_hip_queue_open(ug_bdev *dev, ug_hip_queue *q);
void ug_hip_queue_close(ug_hip_queue *q);
ug_stream_create_fn ug_hip_stream_create;
ug_stream_destroy_fn ug_hip_stream_destroy;
ug_stream_bind_fn ug_hip_stream_bind;
ug_stream_synchronize_fn ug_hip_stream_synchronize;
ug_stream_capture_begin_fn ug_hip_stream_capture_begin;
ug_stream_capture_end_fn ug_hip_stream_capture_end;
ug_stream_replay_fn ug_hip_stream_replay;
ug_replay_free_fn ug_hip_replay_free;
ug_event_create_fn ug_hip_event_create;
ug_event_destroy_fn ug_hip_event_destroy;
ug_event_record_fn ug_hip_event_record;
ug_event_wait_fn ug_hip_event_wait;
ug_event_query_fn ug_hip_event_query;
ug_event_synchronize_fn ug_hip_event_synchronize;
ug_event_elapsed_fn ug_hip_event_elapsed;
ug_native_fn ug_hip_native;

static inline size_t ug_hip_dtype_size(ug_dtype t)
{
    return t == UG_F16 || t == UG_BF16 ? 2 : t == UG_U8 ? 1 : t == UG_I64 ? 8 : 4;
}
/* A view's first element. */
static inline char *ug_hip_ptr(const ug_kview *v)
{
    return v->mem ? (char *)v->mem + v->offset * (int64_t)ug_hip_dtype_size(v->dtype) : NULL;
}
/* Blocks for n items at block threads each, capped (kernels grid-stride). */
static inline unsigned ug_hip_blocks(int64_t n, int block)
{
    int64_t b = (n + block - 1) / block;
    return (unsigned)(b < 1 ? 1 : b > UG_HIP_MAX_GRID ? UG_HIP_MAX_GRID : b);
}

/* Kernel families: each entry in the launcher file of its family's name
 * (backends/hip/<family>.hip, the device code in kernels/hip/<family>.h;
 * gemm.cpp, conv.cpp), launching on the current queue's stream. */
UG_BACKEND_KERNELS(ug_hip)
/* gemm_own.hip: the module's own GEMM kernel, behind ug_hip_gemm
 * (gemm.cpp), which tries the vendor BLAS first. */
ug_gemm_fn ug_hip_gemm_own;
/* The own kernel on one of its paths (UG_HIP_GEMM_OWN_*, below); the path
 * that suits a's shape untimed (the dot kernel for a small C, else the tile
 * whose blocks fill the GPU), which ug_hip_gemm_own runs. */
ug_status ug_hip_gemm_own_path(ug_bdev *dev, const ug_gemm_args *a, int path);
/* Whether path is worth timing for a (the dot kernel wants a small C, a
 * split K one product and a K of two slices or more); one that is not is
 * not timed. */
bool ug_hip_gemm_own_fits(const ug_bdev *dev, const ug_gemm_args *a, int path);
int ug_hip_gemm_default_path(const ug_bdev *dev, const ug_gemm_args *a);
/* gemm_choice.cpp: the own kernel UG_GEMM names (own64, own128, own-dot,
 * own-split), which then runs every product; -1 when it names none. */
int ug_hip_gemm_forced_path(void);
/* Queues a kernel that spins for about `cycles` of the GPU's clock. */
ug_status ug_hip_gemm_hold(ug_bdev *dev, long long cycles);
/* Whether the current queue's stream is being captured (or its state is
 * unknown): nothing may be timed then. */
bool ug_hip_capturing(ug_bdev *dev);
/* elementwise.hip: a kernel whose attributes tell whether the module has
 * code for the current device. */
const void *ug_hip_probe_kernel(void);

/* gemm.cpp: vendor BLAS loaded at run time, or the own kernel. */
void ug_hip_blas_load(void);
void ug_hip_blas_open(ug_hip_queue *q);
void ug_hip_blas_close(ug_hip_queue *q);
/* "rocBLAS", "cuBLAS", "own (UG_GEMM=own)", "own (no librocblas)" ... */
const char *ug_hip_blas_path(const ug_bdev *dev);
/* The loaded library and its version ("cuBLAS 13.1.0"), or "none". */
const char *ug_hip_blas_version(void);
ug_gemm_fn ug_hip_gemm;

/* gemm_choice.cpp: the vendor's GEMM or an own kernel per shape, timed
 * once and cached. device_key names the device and its driver in the cache
 * key. */
enum {
    UG_HIP_GEMM_VENDOR,
    UG_HIP_GEMM_OWN_64,
    UG_HIP_GEMM_OWN_128,
    UG_HIP_GEMM_OWN_DOT,
    UG_HIP_GEMM_OWN_SPLIT,
    UG_HIP_GEMM_PATHS
};
ug_status ug_hip_gemms_open(ug_bdev *dev, const char *device_key);
void ug_hip_gemms_close(ug_bdev *dev);
/* The path that runs a's shape fastest, timed at the shape's first product:
 * the vendor's (vendor, NULL where the library cannot run a) or an own one. */
int ug_hip_gemm_path(ug_bdev *dev, const ug_gemm_args *a, ug_gemm_fn *vendor);
/* Says each choice made in this process, a line at a time. */
void ug_hip_gemm_report(ug_bdev *dev, void (*say)(void *ctx, const char *line), void *ctx);

/* conv.cpp: convolutions through cuDNN or MIOpen, loaded at run time.
 * device_key names the device and its driver in the choices' cache key. */
ug_status ug_hip_convs_open(ug_bdev *dev, const char *device_key);
void ug_hip_convs_close(ug_bdev *dev);
void ug_hip_conv_close(ug_hip_queue *q); /* the queue's handle */
/* "cuDNN 9.10.2", or "im2col (libcudnn.so.9: cannot open ...)" */
const char *ug_hip_conv_path(void);
ug_conv_plan_fn ug_hip_conv_plan;
ug_conv2d_fn ug_hip_conv2d;
ug_autotune_fn ug_hip_autotune;

/* The queue's DNN library handle (cuDNN, MIOpen), made at its first use;
 * UG_ERR_UNSUPPORTED where the library is not loaded. */
ug_status ug_hip_dnn_handle(ug_bdev *dev, void **out);

/* attention.hip: the module's own attention kernels. */
ug_status ug_hip_attention_own(ug_bdev *dev, const ug_attention_args *a);
/* attention_cudnn.cpp: the library's fused attention (cuDNN's, in the CUDA
 * flavour). Why it cannot take a (a type, head size, layout, mask or
 * dropout it lacks, or no library), or NULL where it may; a graph it still
 * refuses when planned makes ug_hip_library_attention return
 * UG_ERR_UNSUPPORTED. Plans are made per queue at a shape's first run. */
const char *ug_hip_library_attention_refusal(const ug_attention_args *a);
ug_status ug_hip_library_attention(ug_bdev *dev, const ug_attention_args *a);
/* "cuDNN 9.10.2", or "none (why)". */
const char *ug_hip_library_attention_version(void);
void ug_hip_attention_plans_close(ug_hip_queue *q);
/* attention_choice.cpp: own kernels or the library per pass and shape,
 * timed once and cached like the GEMMs. */
enum { UG_HIP_ATTENTION_OWN, UG_HIP_ATTENTION_LIBRARY, UG_HIP_ATTENTION_PATHS };
ug_status ug_hip_attentions_open(ug_bdev *dev, const char *device_key);
void ug_hip_attentions_close(ug_bdev *dev);
int ug_hip_attention_path(ug_bdev *dev, const ug_attention_args *a);
void ug_hip_attention_report(ug_bdev *dev, void (*say)(void *ctx, const char *line), void *ctx);

/* memory.cpp */
ug_alloc_fn ug_hip_alloc;
ug_release_fn ug_hip_release;
ug_write_fn ug_hip_write;
ug_read_fn ug_hip_read;
ug_copy_fn ug_hip_copy;
ug_copy_peer_fn ug_hip_copy_peer;
ug_synchronize_fn ug_hip_synchronize;
ug_host_alloc_fn ug_hip_host_alloc;
ug_host_free_fn ug_hip_host_free;

#endif
