/* Launching the elementwise families (kernels/hip/elementwise.h): unary
 * (also the cast, transpose and expand) and binary with broadcasting and a
 * fused activation, with 32-bit indexing where every offset fits; and the
 * probe kernel's address (module.cpp). */
#include "backends/hip/launchers.h"
#include "kernels/hip/elementwise.h"

/* True when every index below n and every offset fits in 31 bits. */
static bool small_index(int64_t n, const ug_kshape &sh, const int64_t *const *strides, int count)
{
    const int64_t lim = (int64_t)1 << 31;
    if (n >= lim)
        return false;
    for (int s = 0; s < count; s++) {
        int64_t span = 0;
        for (int d = 0; d < sh.ndim; d++) {
            if (strides[s][d] < 0)
                return false;
            span += (sh.shape[d] - 1) * strides[s][d];
            if (span >= lim)
                return false;
        }
    }
    return true;
}

static int64_t numel(int ndim, const int64_t *shape, ug_kshape *sh)
{
    int64_t n = 1;
    sh->ndim = ndim;
    for (int d = 0; d < UG_KERNEL_MAX_DIMS; d++) {
        sh->shape[d] = d < ndim ? shape[d] : 1;
        if (d < ndim)
            n *= shape[d];
    }
    return n;
}

ug_status ug_hip_unary(ug_bdev *dev, const ug_unary_args *a)
{
    unary_k k;
    memset(&k, 0, sizeof k);
    k.n = numel(a->ndim, a->shape, &k.sh);
    if (k.n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    k.op = a->op;
    k.xt = a->x.dtype;
    k.yt = a->y.dtype;
    k.alpha = a->alpha;
    k.beta = a->beta;
    k.x = ug_hip_ptr(&a->x);
    k.y = ug_hip_ptr(&a->y);
    memcpy(k.xs, a->x_strides, sizeof k.xs);
    const int64_t *s[1] = {k.xs};
    const unsigned g = ug_hip_blocks(k.n, UG_HIP_BLOCK);
    if (small_index(k.n, k.sh, s, a->op == UG_UNARY_FILL ? 0 : 1))
        ug_unary_kernel<uint32_t><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    else
        ug_unary_kernel<int64_t><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("unary");
}

ug_status ug_hip_binary(ug_bdev *dev, const ug_binary_args *a)
{
    binary_k k;
    memset(&k, 0, sizeof k);
    k.n = numel(a->ndim, a->shape, &k.sh);
    if (k.n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    k.op = a->op;
    k.post = a->epi.post;
    k.t = a->y.dtype;
    k.alpha = a->alpha;
    k.a = ug_hip_ptr(&a->a);
    k.b = ug_hip_ptr(&a->b);
    k.y = ug_hip_ptr(&a->y);
    memcpy(k.as, a->a_strides, sizeof k.as);
    memcpy(k.bs, a->b_strides, sizeof k.bs);
    const int64_t *s[2] = {k.as, k.bs};
    const unsigned g = ug_hip_blocks(k.n, UG_HIP_BLOCK);
    if (small_index(k.n, k.sh, s, 2))
        ug_binary_kernel<uint32_t><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    else
        ug_binary_kernel<int64_t><<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("binary");
}

const void *ug_hip_probe_kernel(void) { return (const void *)ug_probe_kernel; }
