/* Launching batch normalisation (kernels/hip/batchnorm.h): each channel cut
 * into chunks, a block each, in two launches. */
#include "backends/hip/launchers.h"
#include "kernels/hip/batchnorm.h"

ug_status ug_hip_batchnorm(ug_bdev *dev, const ug_batchnorm_args *a)
{
    if (a->c <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    batchnorm_k k;
    k.x = ug_hip_ptr(&a->x);
    k.dy = ug_hip_ptr(&a->dy);
    k.y = ug_hip_ptr(&a->y);
    k.dx = ug_hip_ptr(&a->dx);
    k.weight = (const float *)ug_hip_ptr(&a->weight);
    k.bias = (const float *)ug_hip_ptr(&a->bias);
    k.mean = (float *)ug_hip_ptr(&a->mean);
    k.rstd = (float *)ug_hip_ptr(&a->rstd);
    k.running_mean = (float *)ug_hip_ptr(&a->running_mean);
    k.running_var = (float *)ug_hip_ptr(&a->running_var);
    k.dweight = (float *)ug_hip_ptr(&a->dweight);
    k.dbias = (float *)ug_hip_ptr(&a->dbias);
    k.n = a->n;
    k.c = a->c;
    k.inner = a->inner;
    k.count = a->n * a->inner;
    k.eps = a->eps;
    k.momentum = a->momentum;
    k.training = a->training;
    k.update_running = a->update_running;
    k.relu = a->epi.post == UG_UNARY_RELU;
    /* Chunks enough for four blocks an SM, each of BN_MIN_CHUNK values or
     * more. */
    const int64_t want = (4 * (int64_t)dev->sm_count + a->c - 1) / a->c;
    const int64_t most = (k.count + BN_MIN_CHUNK - 1) / BN_MIN_CHUNK;
    int64_t chunks = want < most ? want : most;
    chunks = chunks < 1 ? 1 : chunks > UG_HIP_MAX_GRID ? UG_HIP_MAX_GRID : chunks;
    k.chunk = (k.count + chunks - 1) / chunks;
    k.chunks = k.chunk ? (k.count + k.chunk - 1) / k.chunk : 1;
    const bool sums = a->backward || a->training;
    k.parts = NULL;
    if (sums) {
        void *scratch;
        const int64_t per = a->backward ? BN_BACKWARD_PARTS : BN_FORWARD_PARTS;
        if ((st = ug_hip_scratch(dev, (size_t)(a->c * k.chunks * per) * sizeof(float), &scratch)) != UG_OK)
            return st;
        k.parts = (float *)scratch;
    }
    const dim3 grid((unsigned)k.chunks, a->c < UG_HIP_MAX_GRID ? (unsigned)a->c : UG_HIP_MAX_GRID);
    hipStream_t stream = ug_hip_current(dev)->stream;
    return ug_with_type(a->x.dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        if (a->backward) {
            ug_batchnorm_grad_sums_kernel<T><<<grid, UG_HIP_BLOCK, 0, stream>>>(k);
            ug_batchnorm_bwd_kernel<T><<<grid, UG_HIP_BLOCK, 0, stream>>>(k);
        } else {
            if (sums)
                ug_batchnorm_stats_kernel<T><<<grid, UG_HIP_BLOCK, 0, stream>>>(k);
            ug_batchnorm_fwd_kernel<T><<<grid, UG_HIP_BLOCK, 0, stream>>>(k);
        }
        return ug_hip_launched("batch norm");
    });
}
