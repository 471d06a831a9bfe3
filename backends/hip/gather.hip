/* Launching the gather family (kernels/hip/gather.h): one thread per
 * element moved, or per column of a chunk of rows summed. */
#include "backends/hip/launchers.h"
#include "kernels/hip/gather.h"

/* Threads the sums spread over: enough to fill a GPU, each looping over
 * every index once. */
enum { SUM_THREADS = 1 << 15 };

ug_status ug_hip_gather(ug_bdev *dev, const ug_gather_args *a)
{
    gather_k k;
    memset(&k, 0, sizeof k);
    k.y = ug_hip_ptr(&a->y);
    k.x = ug_hip_ptr(&a->x);
    k.index = ug_hip_ptr(&a->index);
    k.wide_index = a->index.dtype == UG_I64;
    k.outer = a->outer;
    k.inner = a->inner;
    k.count = a->count;
    k.x_len = a->x_len;
    k.y_len = a->y_len;
    k.x_start = a->x_start;
    k.y_start = a->y_start;
    const int64_t items = a->accumulate ? a->outer * a->inner * a->y_len : a->outer * a->count * a->inner;
    if (a->outer <= 0 || a->inner <= 0 || items <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    hipStream_t stream = ug_hip_current(dev)->stream;
    if (!a->accumulate) {
        const unsigned g = ug_hip_blocks(items, UG_HIP_BLOCK);
        const bool scatter = a->scatter;
        switch (ug_hip_dtype_size(a->x.dtype)) {
#define UG_MOVE_ROWS(R)                                                   \
    if (scatter)                                                          \
        ug_scatter_kernel<R><<<g, UG_HIP_BLOCK, 0, stream>>>(k);          \
    else                                                                  \
        ug_gather_kernel<R><<<g, UG_HIP_BLOCK, 0, stream>>>(k);
        case 1: UG_MOVE_ROWS(uint8_t) break;
        case 2: UG_MOVE_ROWS(uint16_t) break;
        case 8: UG_MOVE_ROWS(uint64_t) break;
        default: UG_MOVE_ROWS(uint32_t) break;
#undef UG_MOVE_ROWS
        }
        return ug_hip_launched(scatter ? "scatter" : "gather");
    }
    /* Chunks of rows per thread: fewer rows each where outer * inner alone
     * leaves the device idle. */
    int64_t chunks = SUM_THREADS / (a->outer * a->inner);
    chunks = chunks < 1 ? 1 : chunks > a->y_len ? a->y_len : chunks;
    k.chunk = (a->y_len + chunks - 1) / chunks;
    chunks = (a->y_len + k.chunk - 1) / k.chunk;
    const unsigned g = ug_hip_blocks(a->outer * chunks * a->inner, UG_HIP_BLOCK);
    return ug_with_type(a->x.dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        ug_gather_sum_kernel<T><<<g, UG_HIP_BLOCK, 0, stream>>>(k);
        return ug_hip_launched("gather sum");
    });
}
