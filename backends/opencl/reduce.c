/* Launching the reduction family: one or two passes over [outer, len, inner]. */
#include "backends/opencl/internal.h"


/* Work-group shape for a reduction of [outer, len, inner]: TX along inner,
 * TY along len, TX * TY <= wg. Only a few shapes are used, because POCL
 * compiles a work-group function for every local size it meets (about a
 * second each): (1, 32) and (1, wg) for rows, (8, wg/8) and (32, wg/32)
 * for inner axes. Items beyond len or inner just skip their loads.
 *
 * On CPU devices TY is 1: each item walks len alone (splits still share
 * a long one) and no group waits at barriers for a tree over idle items
 * (a bias gradient's 64 x 500 sum: 36 us with TY = 8, 23 with 1; argmax
 * over 64 rows of 10: 18 us with TY = 32, 6 with 1; a GPT's accuracy,
 * argmax over 768 rows of 65: 2.1 ms with TY = 256). */
static void reduce_shape(const ug_bdev *dev, size_t wg, int64_t len, int64_t inner, size_t *tx,
                         size_t *ty)
{
    *tx = inner == 1 ? 1 : inner <= 8 ? 8 : 32;
    if (*tx > wg)
        *tx = wg;
    *ty = wg / *tx;
    if (inner == 1 && len <= 32 && *ty > 32)
        *ty = 32;
    if (dev->is_cpu)
        *ty = 1;
}

/* One pass of reduce_<dtype>; the caller holds launch_lock. */
static ug_status reduce_pass(ug_bdev *dev, const ug_opencl_kernel *kernel, cl_mem y, cl_ulong yoff,
                             cl_int ydt, cl_mem x, cl_ulong xoff, cl_long outer, cl_long len, cl_long inner,
                             cl_long splits, cl_int op, cl_int stage, cl_float count, const ug_reduce_args *a)
{
    UG_OPENCL_CHECK(check, a->epi.check, y);
    UG_OPENCL_SUM(sum, a->epi.sum, a->epi.sum_alpha, y);
    UG_OPENCL_CHECK(match, a->epi.match, y);
    cl_int match_dt = a->epi.match.dtype, post = a->epi.post;
    size_t tx, ty;
    reduce_shape(dev, kernel->wg, len, inner, &tx, &ty);
    cl_long chunk = (len + splits - 1) / splits;
    size_t global[2] = {ug_opencl_round_up((size_t)inner, tx), (size_t)(outer * splits) * ty};
    size_t local[2] = {tx, ty};
    ug_opencl_queue *q = ug_opencl_current(dev);
    cl_mem xidx = q->scratch_i, pv = q->scratch_v, pi = q->scratch_i;
    ug_opencl_arg args[] = {
        UG_OPENCL_ARG(y),         UG_OPENCL_ARG(yoff),      UG_OPENCL_ARG(ydt),   UG_OPENCL_ARG(x),
        UG_OPENCL_ARG(xoff),      UG_OPENCL_ARG(xidx),      UG_OPENCL_ARG(len),   UG_OPENCL_ARG(inner),
        UG_OPENCL_ARG(splits),    UG_OPENCL_ARG(chunk),     UG_OPENCL_ARG(op),    UG_OPENCL_ARG(stage),
        UG_OPENCL_ARG(count),     UG_OPENCL_ARG(pv),        UG_OPENCL_ARG(pi),    UG_OPENCL_ARG(check),
        UG_OPENCL_ARG(check_off), UG_OPENCL_ARG(check_on),  UG_OPENCL_ARG(sum),   UG_OPENCL_ARG(sum_off),
        UG_OPENCL_ARG(sum_on),    UG_OPENCL_ARG(sum_alpha), UG_OPENCL_ARG(match), UG_OPENCL_ARG(match_off),
        UG_OPENCL_ARG(match_on),  UG_OPENCL_ARG(match_dt),  UG_OPENCL_ARG(post)};
    return ug_opencl_launch_locked(dev, kernel, 2, global, local, args, sizeof args / sizeof args[0]);
}

/* How many parts to split len into so that groups x parts work-groups fill
 * the device: at most by_len parts (each keeping enough terms an item), and
 * with `partials` values a part the partials within the scratch; 1 when a
 * split is not worth it. */
static int64_t len_splits(ug_bdev *dev, int64_t groups, int64_t by_len, int64_t partials)
{
    if (groups >= (int64_t)dev->target_groups)
        return 1;
    int64_t splits = ((int64_t)dev->target_groups + groups - 1) / groups;
    int64_t by_scratch = (int64_t)ug_opencl_current(dev)->scratch_elems / partials;
    splits = splits < by_len ? splits : by_len;
    splits = splits < by_scratch ? splits : by_scratch;
    return splits < 2 ? 1 : splits;
}

/* f32 rows on CPU devices (reduce.cl's reduce_rows_f32): one group per row
 * part, each row split until the groups fill the device; the parts'
 * partials are then summed (or maxed) by the general kernel. */
static ug_status reduce_rows(ug_bdev *dev, const ug_reduce_args *a, const ug_opencl_kernel *partials)
{
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_REDUCE_ROWS, UG_F32, UG_F32, &k);
    if (st != UG_OK)
        return st;
    /* 64 items a group: a shorter tree of barriers than the kernel's
     * limit (a gradient check's sum of 392000 values: 48 us with 256, 32
     * with 64). At least 64 terms an item. */
    size_t local = k->wg > 64 ? 64 : k->wg;
    cl_long splits = len_splits(dev, a->outer, a->len / ((int64_t)local * 64), a->outer);
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_int ydt = a->y.dtype, op = a->op;
    cl_float count = (cl_float)a->len;
    cl_long len = a->len, chunk = (len + splits - 1) / splits;
    size_t global = (size_t)(a->outer * splits) * local;
    /* Both passes under one lock: the scratch is this reduction's until its
     * second pass is queued. */
    pthread_mutex_lock(&dev->launch_lock);
    ug_opencl_queue *q = ug_opencl_current(dev);
    cl_mem pv = q->scratch_v;
    UG_OPENCL_CHECK(check, a->epi.check, y);
    UG_OPENCL_SUM(sum, a->epi.sum, a->epi.sum_alpha, y);
    cl_int post = a->epi.post;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),         UG_OPENCL_ARG(yoff),     UG_OPENCL_ARG(ydt),
                            UG_OPENCL_ARG(x),         UG_OPENCL_ARG(xoff),     UG_OPENCL_ARG(len),
                            UG_OPENCL_ARG(splits),    UG_OPENCL_ARG(chunk),    UG_OPENCL_ARG(op),
                            UG_OPENCL_ARG(count),     UG_OPENCL_ARG(pv),       UG_OPENCL_ARG(check),
                            UG_OPENCL_ARG(check_off), UG_OPENCL_ARG(check_on), UG_OPENCL_ARG(sum),
                            UG_OPENCL_ARG(sum_off),   UG_OPENCL_ARG(sum_on),   UG_OPENCL_ARG(sum_alpha),
                            UG_OPENCL_ARG(post)};
    st = ug_opencl_launch_locked(dev, k, 1, &global, &local, args, sizeof args / sizeof args[0]);
    if (st == UG_OK && splits > 1)
        st = reduce_pass(dev, partials, y, yoff, ydt, pv, 0, a->outer, splits, 1, 1, op, 1, count, a);
    pthread_mutex_unlock(&dev->launch_lock);
    return st;
}

/* f32 columns on CPU devices (reduce.cl's reduce_cols_f32): an item per
 * 16 columns of each outer slice, walking len alone. Longer columns take
 * the general kernel, whose items share len and sum pairwise. */
enum { COLS_MAX_LEN = 1024 };

static bool columns_apply(const ug_bdev *dev, const ug_reduce_args *a)
{
    return dev->is_cpu && a->x.dtype == UG_F32 && a->op != UG_RKERNEL_ARGMAX && a->inner >= 16 &&
           a->len <= COLS_MAX_LEN;
}

static ug_status reduce_cols(ug_bdev *dev, const ug_reduce_args *a)
{
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_REDUCE_COLS, UG_F32, UG_F32, &k);
    if (st != UG_OK)
        return st;
    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_int ydt = a->y.dtype, op = a->op;
    cl_long outer = a->outer, len = a->len, inner = a->inner;
    cl_float count = (cl_float)a->len;
    UG_OPENCL_CHECK(check, a->epi.check, y);
    UG_OPENCL_SUM(sum, a->epi.sum, a->epi.sum_alpha, y);
    cl_int post = a->epi.post;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(y),        UG_OPENCL_ARG(yoff),     UG_OPENCL_ARG(ydt),
                            UG_OPENCL_ARG(x),        UG_OPENCL_ARG(xoff),     UG_OPENCL_ARG(outer),
                            UG_OPENCL_ARG(len),      UG_OPENCL_ARG(inner),    UG_OPENCL_ARG(op),
                            UG_OPENCL_ARG(count),    UG_OPENCL_ARG(check),    UG_OPENCL_ARG(check_off),
                            UG_OPENCL_ARG(check_on), UG_OPENCL_ARG(sum),      UG_OPENCL_ARG(sum_off),
                            UG_OPENCL_ARG(sum_on),   UG_OPENCL_ARG(sum_alpha), UG_OPENCL_ARG(post)};
    return ug_opencl_launch_1d(dev, k, (size_t)(outer * ((inner + 15) / 16)), args,
                               sizeof args / sizeof args[0]);
}

ug_status ug_opencl_reduce(ug_bdev *dev, const ug_reduce_args *a)
{
    if (a->outer <= 0 || a->inner <= 0 || a->len <= 0)
        return UG_OK;
    bool argmax = a->op == UG_RKERNEL_ARGMAX;
    if (a->y.dtype != UG_F32 && a->y.dtype != UG_F16 && a->y.dtype != UG_BF16 &&
        !(argmax && a->y.dtype == UG_I32))
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: reduce does not write %s here",
                                         ug_dtype_name(a->y.dtype));
    if (a->epi.check.mem && (a->epi.check.dtype != UG_F32 || a->y.dtype != UG_F32))
        return ug_opencl_host->set_error(UG_ERR_DTYPE,
                                         "OpenCL: a reduction's check needs f32 results and an f32 flag");
    if (a->epi.sum.mem && (a->epi.sum.dtype != UG_F32 || a->y.dtype != UG_F32 || argmax))
        return ug_opencl_host->set_error(
            UG_ERR_DTYPE, "OpenCL: a reduction's running sum needs f32 results, an f32 sum and no argmax");
    const ug_kview match = a->epi.match;
    if (match.mem && (!argmax || a->y.dtype != UG_F32 || (match.dtype != UG_F32 && match.dtype != UG_I32)))
        return ug_opencl_host->set_error(
            UG_ERR_DTYPE, "OpenCL: a comparison needs argmax, f32 results and i32 or f32 values");
    const ug_opencl_kernel *kernel, *partials;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_REDUCE, a->x.dtype, a->x.dtype, &kernel);
    if (st == UG_OK)
        st = ug_opencl_kernel_for(dev, UG_OPENCL_REDUCE, UG_F32, UG_F32, &partials);
    if (st != UG_OK)
        return st;
    if (dev->is_cpu && a->inner == 1 && a->x.dtype == UG_F32 && !argmax)
        return reduce_rows(dev, a, partials);
    if (columns_apply(dev, a))
        return reduce_cols(dev, a);
    size_t tx, ty;
    reduce_shape(dev, kernel->wg, a->len, a->inner, &tx, &ty);

    /* Split len when the output alone gives too few work-groups to fill the
     * device and each split still has a few dozen terms per item; the
     * partials are [outer, splits, inner]. */
    int64_t groups = (a->inner + (int64_t)tx - 1) / (int64_t)tx * a->outer;
    int64_t splits = len_splits(dev, groups, a->len / ((int64_t)ty * 32), a->outer * a->inner);

    cl_mem y = (cl_mem)a->y.mem, x = (cl_mem)a->x.mem;
    cl_ulong yoff = (cl_ulong)a->y.offset, xoff = (cl_ulong)a->x.offset;
    cl_int ydt = a->y.dtype, op = a->op;
    cl_float count = (cl_float)a->len;
    /* Both passes under one lock: the scratch belongs to this reduction
     * until its second pass is queued. */
    pthread_mutex_lock(&dev->launch_lock);
    /* With a split, the first pass writes partials: the second checks and adds. */
    st = reduce_pass(dev, kernel, y, yoff, ydt, x, xoff, a->outer, a->len, a->inner,
                     splits, op, 0, count, a);
    if (st == UG_OK && splits > 1)
        st = reduce_pass(dev, partials, y, yoff, ydt, ug_opencl_current(dev)->scratch_v, 0, a->outer, splits,
                         a->inner, 1, op, 1, count, a);
    pthread_mutex_unlock(&dev->launch_lock);
    return st;
}
