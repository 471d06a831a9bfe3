/* For the stand-in vendor libraries (fake_cublas.c, fake_cudnn.c): their
 * work goes to the emulated runtime's ug_emu_stream_work (emu_control.h),
 * found in the module that loaded them, so a captured stream records it
 * as CUDA records a library's kernels. Included once per library. */
#ifndef UG_FAKE_STREAM_WORK_H
#define UG_FAKE_STREAM_WORK_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

typedef int stream_work_fn(void *stream, void (*fn)(const void *), const void *ctx, size_t bytes);

/* The emulated runtime's ug_emu_stream_work, in the module that loaded
 * this library; NULL outside it (the work then runs at once). */
static stream_work_fn *stream_work(void)
{
    static stream_work_fn *fn;
    static bool looked;
    if (!looked) {
        void *module = dlopen("libunigrad-cuda.so", RTLD_NOW | RTLD_NOLOAD);
        if (module) {
            fn = (stream_work_fn *)dlsym(module, "ug_emu_stream_work");
            dlclose(module); /* the module stays: it loaded this library */
        }
        looked = true;
    }
    return fn;
}

#endif
