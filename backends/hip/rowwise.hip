/* Launching the row-wise families (kernels/hip/rowwise.h): softmax,
 * cross-entropy (its mean in the last block where one block would take it)
 * and layernorm, one block of UG_HIP_BLOCK threads per row. */
#include "backends/hip/launchers.h"
#include "kernels/hip/rowwise.h"

ug_status ug_hip_softmax(ug_bdev *dev, const ug_softmax_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    softmax_k k = {a->log, (int)a->x.dtype, ug_hip_ptr(&a->x), ug_hip_ptr(&a->y), a->rows, a->cols};
    ug_softmax_kernel<<<ug_hip_blocks(a->rows, 1), UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    return ug_hip_launched("softmax");
}

ug_status ug_hip_cross_entropy(ug_bdev *dev, const ug_xent_args *a)
{
    if (a->rows <= 0)
        return UG_OK;
    if (a->cols <= 0) /* no row kernel; the mean of what the losses hold */
        return a->mean.y.mem ? ug_hip_reduce(dev, &a->mean) : UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    xent_k k = {};
    k.x = ug_hip_ptr(&a->logits);
    k.xt = a->logits.dtype;
    k.labels = (const int32_t *)ug_hip_ptr(&a->labels);
    k.loss = ug_hip_ptr(&a->loss);
    k.loss_t = a->loss.dtype;
    k.grad = ug_hip_ptr(&a->grad);
    k.grad_t = a->grad.dtype;
    k.dloss = (const float *)ug_hip_ptr(&a->dloss);
    k.check = k.grad ? NULL : (float *)ug_hip_ptr(&a->epi.check);
    if (k.check && a->epi.check.dtype != UG_F32)
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: cross_entropy's check flag must be f32", UG_HIP_BACKEND);
    k.rows = a->rows;
    k.cols = a->cols;
    k.smoothing = a->smoothing;
    k.scale = a->scale;
    ug_hip_queue *q = ug_hip_current(dev);
    const bool with_mean = a->mean.y.mem && !k.grad;
    if (with_mean) {
        int bx;
        if ((st = ug_hip_reduce_plan(dev, &a->mean, &k.mean, &bx)) != UG_OK)
            return st;
        /* Where the reduce kernel would take it in one block (a batch's
         * row losses: fewer than 16384), the last block does. */
        k.mean_in_last = k.mean.splits == 1 && k.mean.outer == 1 && k.mean.inner == 1 && bx == 1;
        k.count = q->block_counts;
    }
    ug_xent_kernel<<<ug_hip_blocks(a->rows, 1), UG_HIP_BLOCK, 0, q->stream>>>(k);
    st = ug_hip_launched("cross_entropy");
    return st == UG_OK && with_mean && !k.mean_in_last ? ug_hip_reduce(dev, &a->mean) : st;
}

ug_status ug_hip_layernorm(ug_bdev *dev, const ug_layernorm_args *a)
{
    if (a->rows <= 0 || a->cols <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    layernorm_k k;
    k.x = (const float *)ug_hip_ptr(&a->x);
    k.gamma = (const float *)ug_hip_ptr(&a->gamma);
    k.beta = (const float *)ug_hip_ptr(&a->beta);
    k.dy = (const float *)ug_hip_ptr(&a->dy);
    k.y = (float *)ug_hip_ptr(&a->y);
    k.mean = (float *)ug_hip_ptr(&a->mean);
    k.rstd = (float *)ug_hip_ptr(&a->rstd);
    k.dx = (float *)ug_hip_ptr(&a->dx);
    k.rows = a->rows;
    k.cols = a->cols;
    k.eps = a->eps;
    const unsigned g = ug_hip_blocks(a->rows, 1);
    if (k.dx) {
        if (!k.dy || !k.mean || !k.rstd)
            return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                          "%s: layernorm backward needs dy, mean and rstd",
                                          UG_HIP_BACKEND);
        ug_layernorm_bwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    } else {
        ug_layernorm_fwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    }
    return ug_hip_launched("layernorm");
}
