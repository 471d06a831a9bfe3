/* Private declarations shared by the OpenCL backend's files.
 *
 * ug_mem is a cl_mem. Each opened device owns one context, one in-order
 * queue, one program built from the embedded kernels (cached on disk), and
 * every cl_kernel created once. clSetKernelArg mutates a shared kernel object,
 * so setting arguments and enqueueing happen under the device's launch lock;
 * plain transfers need no lock (clEnqueue* calls are thread-safe). */
#ifndef UG_OPENCL_INTERNAL_H
#define UG_OPENCL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <CL/cl.h>

#include "backends/backend.h"

/* The program's kernel families, one line each: the enum name, the kernel
 * name, and the dtype variants of its input and output (bit d: dtype d; 0:
 * the family has none). A family has one kernel per variant, named
 * <name>[_<in dtype>[_<out dtype>]] ("unary_contig_u8_f16"); program.c
 * creates them and ug_opencl_kernel_for looks one up, so no kernel is found by
 * position. */
#define UG_OPENCL_DT(d) (1u << (d))
#define UG_OPENCL_FLOATS (UG_OPENCL_DT(UG_F32) | UG_OPENCL_DT(UG_F16) | UG_OPENCL_DT(UG_BF16))
#define UG_OPENCL_ALL_DTYPES \
    (UG_OPENCL_FLOATS | UG_OPENCL_DT(UG_I32) | UG_OPENCL_DT(UG_U8) | UG_OPENCL_DT(UG_I64))
#define UG_OPENCL_INDICES (UG_OPENCL_DT(UG_I32) | UG_OPENCL_DT(UG_I64))
#define UG_OPENCL_KERNELS(X)                                                               \
    X(UNARY_CONTIG, "unary_contig", UG_OPENCL_ALL_DTYPES, UG_OPENCL_FLOATS)                \
    X(UNARY_STRIDED, "unary_strided", UG_OPENCL_ALL_DTYPES, UG_OPENCL_FLOATS)              \
    X(COPY_STRIDED, "copy_strided", UG_OPENCL_ALL_DTYPES, 0)                               \
    X(COPY_ROWS, "copy_rows", UG_OPENCL_ALL_DTYPES, 0)                                     \
    X(BINARY_CONTIG, "binary_contig", UG_OPENCL_FLOATS, 0)                                 \
    X(BINARY_STRIDED, "binary_strided", UG_OPENCL_FLOATS, 0)                               \
    X(UNARY_CHUNKED, "unary_chunked", 0, 0)                                                \
    X(BINARY_CHUNKED, "binary_chunked", 0, 0)                                              \
    X(BINARY_ROWS, "binary_rows", 0, 0)                                                    \
    X(GEMM_SCALE_C, "gemm_scale_c", 0, 0)                                                  \
    X(GEMM_TILED, "gemm_f32_tiled", 0, 0)                                                  \
    X(GEMM_NT, "gemm_f32_nt", 0, 0)                                                        \
    /* half A and B, f32 accumulation */                                                   \
    X(GEMM_HALF, "gemm", UG_OPENCL_DT(UG_F16) | UG_OPENCL_DT(UG_BF16), UG_OPENCL_FLOATS)   \
    X(REDUCE, "reduce", UG_OPENCL_FLOATS, 0)                                               \
    X(REDUCE_ROWS, "reduce_rows_f32", 0, 0)                                                \
    X(REDUCE_COLS, "reduce_cols_f32", 0, 0)                                                \
    X(SOFTMAX, "softmax", UG_OPENCL_FLOATS, 0)                                             \
    X(RANDOM, "random", UG_OPENCL_FLOATS, 0)                                               \
    X(XENT_FWD, "xent_fwd", 0, 0)                                                          \
    X(XENT_BWD, "xent_bwd", 0, 0)                                                          \
    X(XENT_MEAN, "xent_mean", 0, 0)                                                        \
    X(LAYERNORM_FWD, "layernorm_fwd", 0, 0)                                                \
    X(LAYERNORM_BWD, "layernorm_bwd", 0, 0)                                                \
    X(OPTIM_SGD, "optim_sgd", 0, 0)                                                        \
    X(OPTIM_SGD_PLAIN, "optim_sgd_plain", 0, 0)                                            \
    X(OPTIM_ADAM, "optim_adam", 0, 0)                                                      \
    X(OPTIM_ADAM_PLAIN, "optim_adam_plain", 0, 0)                                          \
    X(OPTIM_STEP, "optim_step", 0, 0)                                                      \
    X(IM2COL, "im2col", UG_OPENCL_FLOATS, 0)                                               \
    X(COL2IM, "col2im", UG_OPENCL_FLOATS, 0)                                               \
    X(IM2COL_PLANES, "im2col_planes", UG_OPENCL_FLOATS, 0)                                     \
    X(COL2IM_ROWS, "col2im_rows", UG_OPENCL_FLOATS, 0)                                     \
    X(MAXPOOL_FWD, "maxpool_fwd", UG_OPENCL_FLOATS, 0)                                     \
    X(MAXPOOL_BWD, "maxpool_bwd", UG_OPENCL_FLOATS, 0)                                     \
    X(AVGPOOL_FWD, "avgpool_fwd", UG_OPENCL_FLOATS, 0)                                     \
    X(AVGPOOL_BWD, "avgpool_bwd", UG_OPENCL_FLOATS, 0)                                     \
    X(UPSAMPLE_FWD, "upsample_fwd", UG_OPENCL_FLOATS, 0)                                   \
    X(UPSAMPLE_BWD, "upsample_bwd", UG_OPENCL_FLOATS, 0)                                   \
    X(AUGMENT, "augment", UG_OPENCL_FLOATS, 0)                                             \
    X(BATCHNORM_FWD, "batchnorm_fwd", UG_OPENCL_FLOATS, 0)                                 \
    X(BATCHNORM_BWD, "batchnorm_bwd", UG_OPENCL_FLOATS, 0)                                 \
    X(BATCHNORM_FWD_ROWS, "batchnorm_fwd_rows", UG_OPENCL_FLOATS, 0)                       \
    X(BATCHNORM_BWD_ROWS, "batchnorm_bwd_rows", UG_OPENCL_FLOATS, 0)                       \
    X(GATHER, "gather", UG_OPENCL_ALL_DTYPES, UG_OPENCL_INDICES)                           \
    X(GATHER_SUM, "gather_sum", UG_OPENCL_FLOATS, UG_OPENCL_INDICES)                       \
    X(GATHER_SCATTER, "gather_scatter", UG_OPENCL_ALL_DTYPES, UG_OPENCL_INDICES)           \
    X(ATTENTION_FWD, "attention_fwd", UG_OPENCL_FLOATS, 0)                                 \
    X(ATTENTION_DQ, "attention_dq", UG_OPENCL_FLOATS, 0)                                   \
    X(ATTENTION_DKV, "attention_dkv", UG_OPENCL_FLOATS, 0)                                 \
    X(ATTENTION_FWD_BLOCKS, "attention_fwd_blocks", UG_OPENCL_FLOATS, 0)                   \
    X(ATTENTION_DQ_BLOCKS, "attention_dq_blocks", UG_OPENCL_FLOATS, 0)                     \
    X(ATTENTION_DKV_BLOCKS, "attention_dkv_blocks", UG_OPENCL_FLOATS, 0)                     \
    X(FRAME_PLANES, "frame_planes_f32", 0, 0)                                              \
    X(CONV_PACK, "conv_pack_f32", 0, 0)                                                    \
    X(CONV_DIRECT, "conv_direct_f32", 0, 0)                                                \
    X(CONV_WGRAD, "conv_wgrad_f32", 0, 0)

typedef enum ug_opencl_family {
#define UG_OPENCL_FAMILY_ENUM_(NAME, name, in, out) UG_OPENCL_##NAME,
    UG_OPENCL_KERNELS(UG_OPENCL_FAMILY_ENUM_)
#undef UG_OPENCL_FAMILY_ENUM_
    UG_OPENCL_FAMILY_COUNT
} ug_opencl_family;

/* Bits of the optimizer kernels' flags argument (passed to the compiler as
 * -D options, so the kernel sources hold no copy). */
enum {
    UG_OPENCL_OPTIM_NESTEROV = 1,
    UG_OPENCL_OPTIM_DECOUPLED = 1, /* AdamW */
    UG_OPENCL_OPTIM_COPY = 2,      /* also store the result in the half copy */
    UG_OPENCL_OPTIM_CHECK = 4      /* a numeric check of the gradient folded in */
};

/* Bits of the layernorm kernels' flags argument: which optional buffers
 * are given, and RMSNorm (also -D options). */
enum {
    UG_OPENCL_LN_GAMMA = 1,
    UG_OPENCL_LN_BETA = 2,
    UG_OPENCL_LN_MEAN = 4,
    UG_OPENCL_LN_RSTD = 8,
    UG_OPENCL_LN_RMS = 16
};

typedef struct ug_opencl_kernel {
    cl_kernel kernel;
    size_t wg; /* work-group size: a power of two, <= UG_OPENCL_MAX_WG */
} ug_opencl_kernel;

/* Largest work-group the host launches; kernels size local arrays by it
 * (passed to the compiler as -DUG_WG). */
#define UG_OPENCL_MAX_WG 256

typedef struct ug_opencl_pin {
    void *ptr;
    cl_mem mem;
} ug_opencl_pin;

/* An in-order queue with the scratch its two-pass reductions use between
 * their passes: the device's default queue and each side stream's. */
typedef struct ug_opencl_queue {
    cl_command_queue queue;
    cl_mem scratch_v;               /* f32 partials of two-pass reductions */
    cl_mem scratch_i;               /* i32 partial indices (ARGMAX) */
    size_t scratch_elems;
    /* Timing events are 4-byte fills of stamp_target on the queue itself
     * (created at the first one): in order, a fill ends when the queue's
     * work before it has, by the device's clock. A fill, not a marker,
     * because NVIDIA's OpenCL gives markers no device times (every marker
     * read the same instant on an H100); on the queue itself, not a
     * profiled companion waiting for a marker here, because POCL starts
     * such a cross-queue wait up to hundreds of microseconds late, which a
     * profile of every kernel would misread as idle device time. */
    cl_mem stamp_target;
} ug_opencl_queue;

struct ug_bstream {
    ug_opencl_queue q;
    ug_bstream *next;               /* the device's list */
};

struct ug_bdev {
    int index;
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    ug_opencl_queue main;           /* the default stream */
    cl_program program;
    /* [family][in dtype][out dtype]; families without a dtype use [0][0]. */
    ug_opencl_kernel kernels[UG_OPENCL_FAMILY_COUNT][UG_DTYPE_COUNT][UG_DTYPE_COUNT];
    size_t target_groups;           /* work-groups that keep the device busy */
    bool is_pocl;
    bool is_cpu;                    /* CL_DEVICE_TYPE_CPU: POCL's pthread device, Intel's CPU runtime */

    /* Guards clSetKernelArg + enqueue, and a queue's reduction scratch
     * between the two passes of one reduction. */
    pthread_mutex_t launch_lock;

    /* Side streams (streams.c); the lock also guards the queues' stamp targets. */
    pthread_mutex_t streams_lock;
    ug_bstream *streams;

    /* Pinned host buffers: host_free gets only the pointer. */
    pthread_mutex_t pin_lock;
    ug_opencl_pin *pins;
    size_t pin_count, pin_cap;

    char name[128];
    char driver[128];
    char platform_version[256];
    /* Whether gemm_tune.c has chosen the GEMM's parameters. */
    pthread_mutex_t tune_lock;
    bool gemm_tuned;
};

/* Open devices, whose queues are finished before the process's exit
 * handlers run (exit_drain.c): ug_opencl_drain_at_exit registers that for the
 * calling thread; every launch calls it. */
bool ug_opencl_open_list_add(ug_bdev *dev);
void ug_opencl_open_list_remove(ug_bdev *dev);
void ug_opencl_drain_at_exit(void);

/* streams.c: the queue entries go to on the calling thread (the bound side
 * stream's, else the default), queue creation and the stream entries. */
ug_opencl_queue *ug_opencl_current(ug_bdev *dev);
/* A transfer's queue (the calling thread's, as ug_opencl_current's) and, where a
 * timing event just opened a bracket on it, *own_event: where the transfer's
 * own event goes, for the bracket's time (see streams.c); else NULL. */
cl_command_queue ug_opencl_transfer_queue(ug_bdev *dev, cl_event **own_event);
/* An enqueue not through ug_opencl_current (pinned memory's maps): the thread's
 * bracket is no transfer's alone. */
void ug_opencl_not_bracketed(void);
ug_status ug_opencl_queue_open(ug_bdev *dev, ug_opencl_queue *q);
void ug_opencl_queue_close(ug_opencl_queue *q);
/* Finishes every queue of the device (exit, close). */
void ug_opencl_finish_all(ug_bdev *dev);
ug_stream_create_fn ug_opencl_stream_create;
ug_stream_destroy_fn ug_opencl_stream_destroy;
ug_stream_bind_fn ug_opencl_stream_bind;
ug_stream_synchronize_fn ug_opencl_stream_synchronize;
ug_event_create_fn ug_opencl_event_create;
ug_event_destroy_fn ug_opencl_event_destroy;
ug_event_record_fn ug_opencl_event_record;
ug_event_wait_fn ug_opencl_event_wait;
ug_event_query_fn ug_opencl_event_query;
ug_event_synchronize_fn ug_opencl_event_synchronize;
ug_event_elapsed_fn ug_opencl_event_elapsed;
ug_native_fn ug_opencl_native;

extern const ug_backend_host *ug_opencl_host;

/* errors.c */
const char *ug_opencl_error_name(cl_int err);
const char *ug_opencl_clblast_error_name(int status);
/* Sets "<call>: <code> <NAME>" and returns status. */
ug_status ug_opencl_fail(ug_status status, const char *call, cl_int err);
/* UG_ERR_OUT_OF_MEMORY for the allocation failures, else UG_ERR_BACKEND. */
ug_status ug_opencl_status_of(cl_int err);

/* device.c */
ug_status ug_opencl_device_string(cl_device_id device, cl_device_info what, char *out, size_t len);

/* memory.c */
ug_alloc_fn ug_opencl_alloc;
ug_release_fn ug_opencl_release;
ug_write_fn ug_opencl_write;
ug_read_fn ug_opencl_read;
ug_copy_fn ug_opencl_copy;
ug_synchronize_fn ug_opencl_synchronize;
ug_host_alloc_fn ug_opencl_host_alloc;
ug_host_free_fn ug_opencl_host_free;
/* Unmaps and releases every pinned buffer still held (device_close). */
void ug_opencl_pins_release_all(ug_bdev *dev);

/* program.c: builds (or loads from the disk cache) the program and
 * creates every kernel; ug_opencl_program_release undoes it. */
ug_status ug_opencl_program_create(ug_bdev *dev);
void ug_opencl_program_release(ug_bdev *dev);
/* The family's kernel for these dtypes (UG_F32 where the family has none),
 * or UG_ERR_DTYPE naming what exists. */
ug_status ug_opencl_kernel_for(ug_bdev *dev, ug_opencl_family family, ug_dtype in, ug_dtype out,
                               const ug_opencl_kernel **out_kernel);

/* launch.c: launching. An argument is a pointer and a size, exactly
 * what clSetKernelArg takes. */
typedef struct ug_opencl_arg {
    size_t size;
    const void *value;
} ug_opencl_arg;
#define UG_OPENCL_ARG(v) ((ug_opencl_arg){sizeof(v), &(v)})
/* A view as the two kernel arguments name and name_off. */
#define UG_OPENCL_VIEW(name, view)                \
    cl_mem name = (cl_mem)(view).mem;             \
    cl_ulong name##_off = (cl_ulong)(view).offset

/* A numeric check folded into a kernel (backend.h's check views) as the
 * three kernel arguments name, name_off and name_on; without one, `unused`
 * is bound in its place (not every driver takes a NULL buffer), never
 * written. */
#define UG_OPENCL_CHECK(name, view, unused)                           \
    cl_mem name = (view).mem ? (cl_mem)(view).mem : (cl_mem)(unused); \
    cl_ulong name##_off = (cl_ulong)(view).offset;                    \
    cl_int name##_on = (view).mem != NULL
/* A running sum folded in (UG_SUM_PARAMS): UG_OPENCL_CHECK's three arguments
 * and name_alpha. */
#define UG_OPENCL_SUM(name, view, alpha, unused) \
    UG_OPENCL_CHECK(name, view, unused);         \
    cl_float name##_alpha = (alpha)

/* Sets the arguments and enqueues; the caller holds launch_lock. */
ug_status ug_opencl_launch_locked(ug_bdev *dev, const ug_opencl_kernel *kernel, cl_uint dims,
                                  const size_t *global, const size_t *local, const ug_opencl_arg *args,
                                  cl_uint nargs);
/* The same, taking and dropping launch_lock. */
ug_status ug_opencl_launch(ug_bdev *dev, const ug_opencl_kernel *kernel, cl_uint dims, const size_t *global,
                           const size_t *local, const ug_opencl_arg *args, cl_uint nargs);
size_t ug_opencl_round_up(size_t n, size_t multiple);
/* A 1-D launch over n items with the kernel's work-group size. */
ug_status ug_opencl_launch_1d(ug_bdev *dev, const ug_opencl_kernel *kernel, size_t n,
                              const ug_opencl_arg *args, cl_uint nargs);

/* One entry per kernel family (ug_opencl_<slot>), each in its family's file. */
UG_BACKEND_KERNELS(ug_opencl)
/* Stride-1 f32 convolutions on CPU devices without im2col (conv.c). */
ug_conv_plan_fn ug_opencl_conv_plan;
ug_conv2d_fn ug_opencl_conv2d;

/* gemm.c: drops CLBlast's compiled programs, which hold our context. */
void ug_opencl_gemm_release(void);
/* gemm_tune.c: at open, notes CLBlast's own parameters and installs the
 * fixed ones; before each f32 product, makes sure the device's parameters
 * were loaded or measured (the first time); the autotune entry. */
void ug_opencl_gemm_open(ug_bdev *dev);
void ug_opencl_gemm_ready(ug_bdev *dev);
ug_autotune_fn ug_opencl_autotune;
/* clblast_database.cpp: CLBlast's own values of a kernel's parameters on a
 * device, read through its C++ API (the C API has no such call); false if
 * any is missing. Read before any override, which it would return. */
bool ug_opencl_clblast_database(cl_device_id device, const char *kernel, const char *const *names, int count,
                                size_t *values);

#endif
