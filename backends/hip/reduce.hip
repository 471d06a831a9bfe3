/* Launching the reduction family (kernels/hip/reduce.h): how the work is
 * cut into blocks (BX columns by BY threads splitting len) and, when the
 * columns alone leave the device idle, into splits of len reduced by a
 * second pass of the same kernel. */
#include "backends/hip/launchers.h"
#include "kernels/hip/reduce.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static ug_status launch(ug_bdev *dev, const reduce_k &k, int bx)
{
    const int by = UG_HIP_BLOCK / bx;
    const dim3 grid((unsigned)min64((k.inner + bx - 1) / bx, UG_HIP_MAX_GRID),
                    (unsigned)min64(k.outer, UG_HIP_MAX_GRID), (unsigned)k.splits);
    ug_reduce_kernel<<<grid, dim3(bx, by), 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("reduce");
}

ug_status ug_hip_reduce_plan(ug_bdev *dev, const ug_reduce_args *a, reduce_k *out, int *bx_out)
{
    reduce_k k;
    memset(&k, 0, sizeof k);
    k.kind = a->op == UG_RKERNEL_MAX ? R_MAX : a->op == UG_RKERNEL_ARGMAX ? R_ARGMAX : R_SUM;
    k.square = a->op == UG_RKERNEL_SUMSQ;
    k.mean = a->op == UG_RKERNEL_MEAN;
    k.count = (float)a->len;
    k.x = ug_hip_ptr(&a->x);
    k.xt = a->x.dtype;
    k.y = ug_hip_ptr(&a->y);
    k.yt = a->y.dtype;
    k.outer = a->outer;
    k.len = a->len;
    k.inner = a->inner;
    k.check = (float *)ug_hip_ptr(&a->epi.check);
    if (k.check && (a->epi.check.dtype != UG_F32 || a->y.dtype != UG_F32))
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: a reduction's check needs f32 results and an f32 flag",
                                      UG_HIP_BACKEND);
    k.sum = (float *)ug_hip_ptr(&a->epi.sum);
    k.sum_alpha = a->epi.sum_alpha;
    if (k.sum && (a->epi.sum.dtype != UG_F32 || a->y.dtype != UG_F32 || k.kind == R_ARGMAX))
        return ug_hip_host->set_error(UG_ERR_DTYPE,
                                      "%s: a reduction's running sum needs f32 results, an f32 sum and no argmax",
                                      UG_HIP_BACKEND);
    k.match = ug_hip_ptr(&a->epi.match);
    k.mt = a->epi.match.dtype;
    k.post = a->epi.post;
    if (k.match && (k.kind != R_ARGMAX || a->y.dtype != UG_F32 || (k.mt != UG_F32 && k.mt != UG_I32)))
        return ug_hip_host->set_error(UG_ERR_DTYPE,
                                      "%s: a comparison needs argmax, f32 results and i32 or f32 values",
                                      UG_HIP_BACKEND);

    /* BX: columns per block, a power of two up to 64; BY = 256 / BX. */
    int bx = 1;
    while (bx < a->inner && bx < 64)
        bx *= 2;
    const int64_t want = (int64_t)dev->sm_count * 8;
    auto blocks_of = [&](int x) {
        return min64((a->inner + x - 1) / x, UG_HIP_MAX_GRID) * min64(a->outer, UG_HIP_MAX_GRID);
    };
    /* Fewer columns a block, down to 16 (64-byte reads), while the device
     * is short of blocks and each thread has more than 4 elements: a
     * layer's bias gradient (500 columns over a batch of 64) then runs 32
     * blocks whose threads load 4 values each, not 8 blocks whose threads
     * wait on 16 loads in a row. */
    while (bx > 16 && blocks_of(bx) < want && a->len / (UG_HIP_BLOCK / bx) > 4)
        bx /= 2;
    const int by = UG_HIP_BLOCK / bx;
    /* Split len across blocks only when the columns alone leave the device
     * idle, and keep at least 32 elements per thread in each split. */
    const int64_t blocks = blocks_of(bx);
    int64_t splits = 1;
    if (blocks < want) {
        splits = min64((want + blocks - 1) / blocks, min64(a->len / ((int64_t)by * 32), 1024));
        if (splits < 1)
            splits = 1;
    }
    k.chunk = (a->len + splits - 1) / splits;
    k.splits = (a->len + k.chunk - 1) / k.chunk;
    *out = k;
    *bx_out = bx;
    return UG_OK;
}

ug_status ug_hip_reduce(ug_bdev *dev, const ug_reduce_args *a)
{
    if (a->outer <= 0 || a->inner <= 0 || a->len <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    reduce_k k;
    int bx;
    if ((st = ug_hip_reduce_plan(dev, a, &k, &bx)) != UG_OK)
        return st;
    if (k.splits == 1)
        return launch(dev, k, bx);

    /* Pass 1: partials [outer, splits, inner] (values, and argmax indices). */
    const int64_t parts = a->outer * k.splits * a->inner;
    void *scratch;
    st = ug_hip_scratch(dev, (size_t)parts * 8, &scratch);
    if (st != UG_OK)
        return st;
    reduce_k p1 = k;
    p1.partial = true;
    p1.mean = false;
    p1.y = (char *)scratch;
    p1.yi = k.kind == R_ARGMAX ? (int32_t *)((float *)scratch + parts) : NULL;
    st = launch(dev, p1, bx);
    if (st != UG_OK)
        return st;
    /* Pass 2: reduce the partials (sums of squares are plain sums now). */
    reduce_k p2 = k;
    p2.square = false;
    p2.x = p1.y;
    p2.xt = UG_F32;
    p2.xi = p1.yi;
    p2.len = k.splits;
    p2.chunk = k.splits;
    p2.splits = 1;
    return launch(dev, p2, bx);
}
