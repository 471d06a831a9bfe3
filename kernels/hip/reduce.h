/* Reductions of x viewed as [outer, len, inner] over len.
 *
 * A block is BX x BY threads: BX consecutive inner columns (coalesced
 * reads) times BY threads splitting len. Each thread accumulates its
 * strided share with Kahan compensation, then the BY partials combine in a
 * shared-memory tree. When there are too few columns to fill the device,
 * len is also split across blocks (gridDim.z): those write partials to a
 * small scratch buffer [outer, splits, inner] that a second pass of the same
 * kernel reduces. No serial f32 sum ever runs long, so 2^24+ elements stay
 * accurate. max and argmax propagate NaN; argmax returns the first maximum
 * (the first NaN when there is one).
 * Device code: backends/hip/reduce.hip launches it. */
#ifndef UG_KERNELS_HIP_REDUCE_H
#define UG_KERNELS_HIP_REDUCE_H

#include "kernels/hip/reduce_block.h"

__global__ void ug_reduce_kernel(reduce_k k)
{
    ug_reduce_block(k, threadIdx.x, threadIdx.y, blockDim.x, blockDim.y, blockIdx.z, blockIdx.y, gridDim.y,
                    blockIdx.x, gridDim.x);
}

#endif
