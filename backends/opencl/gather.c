/* Launching the gather family (kernels/opencl/gather.cl): one item per
 * element moved, or per column of a chunk of rows summed. */
#include "backends/opencl/internal.h"

/* Work items the sums spread over: enough to fill a GPU, each looping over
 * every index once. */
enum { SUM_ITEMS = 1 << 15 };

/* Slices (no index) of at most this many runs move as buffer copies: one
 * item an element kept POCL at 10 ms a GPT step for its head splits. */
enum { COPIED_ROWS = 16 };

ug_status ug_opencl_gather(ug_bdev *dev, const ug_gather_args *a)
{
    UG_OPENCL_VIEW(y, a->y);
    UG_OPENCL_VIEW(x, a->x);
    /* Without an index, x is bound in its place (never read). */
    cl_mem index = a->index.mem ? (cl_mem)a->index.mem : x;
    cl_ulong index_off = (cl_ulong)a->index.offset;
    const ug_dtype idt = a->index.mem ? a->index.dtype : UG_I32;
    cl_long outer = a->outer, inner = a->inner, count = a->count, x_len = a->x_len, y_len = a->y_len;
    const ug_opencl_kernel *k;
    if (a->scatter) {
        if (outer <= 0 || inner <= 0 || count <= 0)
            return UG_OK;
        UG_BACKEND_TRY(ug_opencl_kernel_for(dev, UG_OPENCL_GATHER_SCATTER, a->x.dtype, idt, &k));
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(y_off), UG_OPENCL_ARG(x),
                                UG_OPENCL_ARG(x_off), UG_OPENCL_ARG(index), UG_OPENCL_ARG(index_off),
                                UG_OPENCL_ARG(outer), UG_OPENCL_ARG(inner), UG_OPENCL_ARG(count),
                                UG_OPENCL_ARG(y_len)};
        return ug_opencl_launch_1d(dev, k, (size_t)(outer * count * inner), args, 10);
    }
    if (!a->accumulate) {
        if (outer <= 0 || inner <= 0 || count <= 0)
            return UG_OK;
        if (!a->index.mem && outer <= COPIED_ROWS) { /* a slice or its gradient: a few runs, copied */
            const size_t es = ug_dtype_size(a->x.dtype), run = (size_t)(count * inner) * es;
            for (cl_long o = 0; o < outer; o++)
                UG_BACKEND_TRY(ug_opencl_copy(dev, y, (size_t)(y_off + (o * y_len + a->y_start) * inner) * es, x,
                                              (size_t)(x_off + (o * x_len + a->x_start) * inner) * es, run));
            return UG_OK;
        }
        UG_BACKEND_TRY(ug_opencl_kernel_for(dev, UG_OPENCL_GATHER, a->x.dtype, idt, &k));
        cl_int has_index = a->index.mem != NULL;
        cl_long x_start = a->x_start, y_start = a->y_start;
        ug_opencl_arg args[] = {UG_OPENCL_ARG(y),      UG_OPENCL_ARG(y_off),     UG_OPENCL_ARG(x),
                                UG_OPENCL_ARG(x_off),  UG_OPENCL_ARG(index),     UG_OPENCL_ARG(index_off),
                                UG_OPENCL_ARG(has_index), UG_OPENCL_ARG(outer),  UG_OPENCL_ARG(inner),
                                UG_OPENCL_ARG(count),  UG_OPENCL_ARG(x_len),     UG_OPENCL_ARG(y_len),
                                UG_OPENCL_ARG(x_start), UG_OPENCL_ARG(y_start)};
        return ug_opencl_launch_1d(dev, k, (size_t)(outer * count * inner), args, 14);
    }
    if (outer <= 0 || inner <= 0 || y_len <= 0)
        return UG_OK;
    UG_BACKEND_TRY(ug_opencl_kernel_for(dev, UG_OPENCL_GATHER_SUM, a->x.dtype, idt, &k));
    /* Chunks of rows per item: fewer rows each where outer * inner alone
     * leaves a GPU idle (each chunk reads every index once). A CPU device
     * has cores enough in outer * inner: all rows an item (the embedding
     * gradient of a GPT on POCL: 2.6 ms a step scanning the indices once a
     * row). The sums are the same either way, in index order. */
    cl_long chunks = dev->is_cpu ? 1 : SUM_ITEMS / (outer * inner);
    chunks = chunks < 1 ? 1 : chunks > y_len ? y_len : chunks;
    cl_long chunk = (y_len + chunks - 1) / chunks;
    chunks = (y_len + chunk - 1) / chunk;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),     UG_OPENCL_ARG(y_off), UG_OPENCL_ARG(x),
                            UG_OPENCL_ARG(x_off), UG_OPENCL_ARG(index), UG_OPENCL_ARG(index_off),
                            UG_OPENCL_ARG(outer), UG_OPENCL_ARG(inner), UG_OPENCL_ARG(count),
                            UG_OPENCL_ARG(y_len), UG_OPENCL_ARG(chunk)};
    return ug_opencl_launch_1d(dev, k, (size_t)(outer * chunks * inner), args, 11);
}
