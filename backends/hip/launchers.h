/* What the module's launcher files (backends/hip/<family>.hip) share: the
 * module's internals, the device helpers of kernels/hip/common.h, and the
 * host-side helpers that pick a kernel's instantiation. Only the launcher
 * files include it: they are compiled with the device pass (hipcc -x hip,
 * nvcc -x cu) and include their family's device code from kernels/hip/;
 * the module's other files (*.cpp) are host code alone. */
#ifndef UG_HIP_LAUNCHERS_H
#define UG_HIP_LAUNCHERS_H

#include "backends/hip/internal.h"
#include "kernels/hip/common.h"

/* A type as a value, for ug_with_type's callback. */
template <typename T> struct ug_type_tag {
    typedef T type;
};

/* fn(ug_type_tag<T>()) with T the element type of dtype (f32, f16 or
 * bf16; others are the core's to refuse, and read as f32), so a launcher
 * names its kernel's instantiation once for every dtype. */
template <typename F> static ug_status ug_with_type(ug_dtype dtype, F &&fn)
{
    switch (dtype) {
    case UG_F16: return fn(ug_type_tag<__half>());
    case UG_BF16: return fn(ug_type_tag<ug_bf16>());
    default: return fn(ug_type_tag<float>());
    }
}

/* reduce.hip: the reduction a (validated) as the reduce kernel
 * (kernels/hip/reduce_block.h) takes it, with its block's width bx
 * (columns; 256 / bx threads split len) and its splits of len (k->splits:
 * 1, one pass); also the cross-entropy's mean (rowwise.hip), taken by its
 * kernel's last block with the same bits. */
struct reduce_k;
ug_status ug_hip_reduce_plan(ug_bdev *dev, const ug_reduce_args *a, struct reduce_k *k, int *bx);

#endif
