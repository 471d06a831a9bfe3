/* The vendor convolution library of the HIP/CUDA module, as conv.cpp sees
 * it: cuDNN in the CUDA flavour (conv_cudnn.cpp), MIOpen in the HIP one
 * (conv_miopen.cpp), each loaded with dlopen at the first convolution, so
 * the module links neither. conv.cpp owns everything the two share: which
 * passes a library takes, the plan per shape, the algorithm search's
 * choice and its cache file, and the handles on the module's queues. */
#ifndef UG_HIP_CONV_LIBRARY_H
#define UG_HIP_CONV_LIBRARY_H

#include <dlfcn.h>
#include <string.h>

#include "backends/hip/internal.h"

/* One pass's geometry in the libraries' int sizes (conv.cpp refuses the
 * shapes that do not fit). The weight is [oc, c / groups, kh, kw]. */
typedef struct ug_hip_conv_shape {
    ug_conv_pass pass;
    int n, c, h, w, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    bool bias;
} ug_hip_conv_shape;

/* An algorithm of the library for a pass: its number in the library's
 * enum for that pass, the time the library measured (ms; negative where
 * nothing was timed) and the workspace it needs. */
typedef struct ug_hip_conv_algo {
    int algo;
    float ms;
    size_t workspace;
} ug_hip_conv_algo;

enum { UG_HIP_CONV_MAX_ALGOS = 16 };
/* Candidates needing more workspace are passed over: the workspace is part
 * of the graph's memory plan, and the fastest algorithm rarely needs more. */
#define UG_HIP_CONV_WORKSPACE_LIMIT ((size_t)256 << 20)

typedef struct ug_hip_conv_library {
    const char *label;      /* "cuDNN", in messages */
    const char *cache_name; /* the cache file's name prefix */
    /* Loads the library once: true, with its version ("9.10.2"), or false
     * with why ("libcudnn.so.9: cannot open shared object file"). */
    bool (*load)(char *version, size_t version_len, char *why, size_t why_len);
    /* A handle whose work goes to stream; 0 or the library's status. */
    int (*open)(void **handle, hipStream_t stream);
    void (*close)(void *handle);
    /* The library's algorithms for the pass, fastest first as timed on the
     * handle's stream (on buffers of its own), at most `max` of them, each
     * one that runs the shape within workspace_limit bytes. */
    ug_status (*search)(void *handle, const ug_hip_conv_shape *s, size_t workspace_limit,
                        ug_hip_conv_algo *out, int max, int *count);
    /* The pass's fixed deterministic algorithm and its workspace, untimed;
     * UG_ERR_UNSUPPORTED where it does not take the shape. */
    ug_status (*fixed)(void *handle, const ug_hip_conv_shape *s, ug_hip_conv_algo *out);
    /* Runs the pass of a with algorithm algo, a's workspace holding what it
     * needs (the bias added after a forward pass with one). */
    ug_status (*run)(void *handle, const ug_hip_conv_shape *s, int algo, const ug_conv_args *a);
    /* The name of a pass's algorithm, for reports. */
    const char *(*algo_name)(ug_conv_pass pass, int algo);
} ug_hip_conv_library;

/* A symbol an adapter resolves into its function table. */
typedef struct ug_hip_symbol {
    void *slot; /* the function pointer to fill */
    const char *name;
} ug_hip_symbol;

/* Resolves every symbol of lib; false when one is missing. */
static inline bool ug_hip_bind_symbols(void *lib, const ug_hip_symbol *syms, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        void *f = dlsym(lib, syms[i].name);
        if (!f)
            return false;
        memcpy(syms[i].slot, &f, sizeof f);
    }
    return true;
}

/* This flavour's library: cuDNN (UG_CUDA) or MIOpen. */
const ug_hip_conv_library *ug_hip_conv_vendor(void);

#endif
