/* Private declarations shared by the OpenCL backend's files.
 *
 * ug_mem is a cl_mem. Each opened device owns one context, one in-order
 * queue, one program built from the embedded kernels (cached on disk), and
 * every cl_kernel created once. clSetKernelArg mutates a shared kernel object,
 * so setting arguments and enqueueing happen under the device's launch lock;
 * plain transfers need no lock (clEnqueue* calls are thread-safe). */
#ifndef UG_OCL_INTERNAL_H
#define UG_OCL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <CL/cl.h>

#include "backends/backend.h"

/* Every kernel of the program. The families with dtype variants are laid
 * out so the host can index them: unary (in dtype 0..3) x (out f32, f16),
 * copy by log2(element size), the rest by dtype (f32, f16). program.c
 * holds the matching names. */
typedef enum ocl_kernel_id {
    OCL_K_UNARY_CONTIG = 0,          /* + 2 * x.dtype + (y.dtype == f16) */
    OCL_K_UNARY_STRIDED = 8,         /* same layout */
    OCL_K_COPY_STRIDED = 16,         /* + 0 (1 byte), 1 (2 bytes), 2 (4 bytes) */
    OCL_K_BINARY_CONTIG = 19,        /* + dtype */
    OCL_K_BINARY_STRIDED = 21,       /* + dtype */
    OCL_K_GEMM_SCALE_C = 23,
    OCL_K_REDUCE = 24,               /* + x dtype */
    OCL_K_SOFTMAX = 26,              /* + dtype */
    OCL_K_RANDOM = 28,               /* + dtype */
    OCL_K_XENT_FWD = 30,
    OCL_K_XENT_BWD,
    OCL_K_LAYERNORM_FWD,
    OCL_K_LAYERNORM_BWD,
    OCL_K_OPTIM_SGD,
    OCL_K_OPTIM_ADAM,
    OCL_K_COUNT
} ocl_kernel_id;

/* Largest work-group the host launches; kernels size local arrays by it
 * (passed to the compiler as -DUG_WG). */
#define OCL_MAX_WG 256

typedef struct ocl_pin {
    void *ptr;
    cl_mem mem;
} ocl_pin;

struct ug_bdev {
    int index;
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
    cl_kernel kernels[OCL_K_COUNT];
    size_t kernel_wg[OCL_K_COUNT];  /* power of two, <= OCL_MAX_WG */
    size_t target_groups;           /* work-groups that keep the device busy */
    bool is_pocl;

    /* Guards clSetKernelArg + enqueue, and the reduction scratch between
     * the two passes of one reduction. */
    pthread_mutex_t launch_lock;
    cl_mem scratch_v;               /* f32 partials of two-pass reductions */
    cl_mem scratch_i;               /* i32 partial indices (ARGMAX) */
    size_t scratch_elems;

    /* Pinned host buffers: host_free gets only the pointer. */
    pthread_mutex_t pin_lock;
    ocl_pin *pins;
    size_t pin_count, pin_cap;

    char name[128];
    char driver[128];
    char platform_version[256];
};

/* The core's error sink, set by ug_opencl_backend. */
extern const ug_backend_host *ocl_host;

/* errors.c */
const char *ocl_error_name(cl_int err);
const char *ocl_clblast_error_name(int status);
/* Sets "<call>: <code> <NAME>" and returns status. */
ug_status ocl_fail(ug_status status, const char *call, cl_int err);
/* UG_ERR_OUT_OF_MEMORY for the allocation failures, else UG_ERR_BACKEND. */
ug_status ocl_status_of(cl_int err);

/* device.c */
ug_status ocl_device_string(cl_device_id device, cl_device_info what, char *out, size_t len);

/* memory.c */
ug_status ocl_alloc(ug_bdev *dev, size_t bytes, ug_mem *out);
void ocl_release(ug_bdev *dev, ug_mem mem);
ug_status ocl_write(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, const void *src,
                    size_t bytes, bool blocking);
ug_status ocl_read(ug_bdev *dev, void *dst, ug_mem src, size_t src_offset_bytes,
                   size_t bytes, bool blocking);
ug_status ocl_copy(ug_bdev *dev, ug_mem dst, size_t dst_offset_bytes, ug_mem src,
                   size_t src_offset_bytes, size_t bytes);
ug_status ocl_synchronize(ug_bdev *dev);
void *ocl_host_alloc(ug_bdev *dev, size_t bytes);
void ocl_host_free(ug_bdev *dev, void *ptr);
/* Unmaps and releases every pinned buffer still held (device_close). */
void ocl_pins_release_all(ug_bdev *dev);

/* program.c: builds (or loads from the disk cache) the program and
 * creates every kernel; ocl_program_release undoes it. */
ug_status ocl_program_create(ug_bdev *dev);
void ocl_program_release(ug_bdev *dev);

/* launch.c: launching. An argument is a pointer and a size, exactly
 * what clSetKernelArg takes. */
typedef struct ocl_arg {
    size_t size;
    const void *value;
} ocl_arg;
#define OCL_ARG(v) ((ocl_arg){sizeof(v), &(v)})

/* Sets the arguments and enqueues; the caller holds launch_lock. */
ug_status ocl_launch_locked(ug_bdev *dev, ocl_kernel_id kernel, cl_uint dims,
                            const size_t *global, const size_t *local,
                            const ocl_arg *args, cl_uint nargs);
/* The same, taking and dropping launch_lock. */
ug_status ocl_launch(ug_bdev *dev, ocl_kernel_id kernel, cl_uint dims, const size_t *global,
                     const size_t *local, const ocl_arg *args, cl_uint nargs);
size_t ocl_round_up(size_t n, size_t multiple);
/* A 1-D launch over n items with the kernel's work-group size. */
ug_status ocl_launch_1d(ug_bdev *dev, ocl_kernel_id kernel, size_t n, const ocl_arg *args,
                        cl_uint nargs);

/* One entry per kernel family, each in the file of its name. */
ug_status ocl_unary(ug_bdev *dev, const ug_unary_args *args);
ug_status ocl_binary(ug_bdev *dev, const ug_binary_args *args);
ug_status ocl_random(ug_bdev *dev, const ug_random_args *args);
ug_status ocl_optimizer(ug_bdev *dev, const ug_optim_args *args);
ug_status ocl_reduce(ug_bdev *dev, const ug_reduce_args *args);
ug_status ocl_softmax(ug_bdev *dev, const ug_softmax_args *args);
ug_status ocl_cross_entropy(ug_bdev *dev, const ug_xent_args *args);
ug_status ocl_layernorm(ug_bdev *dev, const ug_layernorm_args *args);

/* gemm.c */
ug_status ocl_gemm(ug_bdev *dev, const ug_gemm_args *args);
/* Installs CLBlast parameters that suit the device (POCL only for now). */
void ocl_gemm_tune(ug_bdev *dev);
/* Drops CLBlast's compiled programs, which hold our context. */
void ocl_gemm_release(void);

#endif
