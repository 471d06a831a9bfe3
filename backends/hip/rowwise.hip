/* Launching the row-wise families (kernels/hip/rowwise.h): softmax,
 * cross-entropy (its mean and count in the last block to finish) and
 * layernorm, one block of UG_HIP_BLOCK threads per row. */
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
    if (a->rows <= 0 || a->cols <= 0) /* the core gives neither */
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    if (a->labels.dtype != UG_I32 && a->labels.dtype != UG_I64)
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: cross_entropy's labels must be i32 or i64",
                                      UG_HIP_BACKEND);
    if (a->count.mem && a->count.dtype != UG_F32)
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: cross_entropy's count must be f32", UG_HIP_BACKEND);
    xent_k k = {};
    k.x = ug_hip_ptr(&a->logits);
    k.xt = a->logits.dtype;
    k.labels = ug_hip_ptr(&a->labels);
    k.labels64 = a->labels.dtype == UG_I64;
    k.ignore = a->ignore;
    k.ignore_index = a->ignore_index;
    k.loss = ug_hip_ptr(&a->loss);
    k.loss_t = a->loss.dtype;
    k.grad = ug_hip_ptr(&a->grad);
    k.grad_t = a->grad.dtype;
    k.dloss = (const float *)ug_hip_ptr(&a->dloss);
    k.counted = (float *)ug_hip_ptr(&a->count);
    k.check = k.grad ? NULL : (float *)ug_hip_ptr(&a->epi.check);
    if (k.check && a->epi.check.dtype != UG_F32)
        return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: cross_entropy's check flag must be f32", UG_HIP_BACKEND);
    k.rows = a->rows;
    k.cols = a->cols;
    k.smoothing = a->smoothing;
    k.scale = a->scale;
    ug_hip_queue *q = ug_hip_current(dev);
    k.with_mean = a->mean.y.mem && !k.grad;
    if (k.with_mean) {
        int bx;
        if ((st = ug_hip_reduce_plan(dev, &a->mean, &k.mean, &bx)) != UG_OK)
            return st;
        /* The whole mean in the last block, its divisor counted there:
         * one split of all the rows (a batch's row losses, tens of
         * thousands for a language model's tokens: one block's work). */
        k.mean.chunk = k.mean.len;
        k.mean.splits = 1;
        k.count = q->block_counts;
    }
    ug_xent_kernel<<<ug_hip_blocks(a->rows, 1), UG_HIP_BLOCK, 0, q->stream>>>(k);
    return ug_hip_launched("cross_entropy");
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
    k.terms = (float *)ug_hip_ptr(&a->terms);
    k.rows = a->rows;
    k.cols = a->cols;
    k.eps = a->eps;
    k.rms = a->rms;
    const unsigned g = ug_hip_blocks(a->rows, 1);
    if (k.dx) {
        if (!k.dy || (!k.mean && !k.rms) || !k.rstd)
            return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                          "%s: layernorm backward needs dy, %s", UG_HIP_BACKEND,
                                          k.rms ? "and rstd" : "mean and rstd");
        ug_layernorm_bwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    } else {
        ug_layernorm_fwd_kernel<<<g, UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k);
    }
    return ug_hip_launched("layernorm");
}
