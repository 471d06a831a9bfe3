/* Launching the optimizer family (kernels/hip/optim.h): the step's scalars
 * in one thread, or up to UG_OPTIM_TENSORS parameter updates a launch,
 * each with its parameter group's weight decay and rate scale. */
#include "backends/hip/launchers.h"
#include "kernels/hip/optim.h"

ug_status ug_hip_optimizer(ug_bdev *dev, const ug_optim_args *a)
{
    if (a->count <= 0 && a->n <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    if (a->kind == UG_OPTIM_STEP) {
        float *state = (float *)ug_hip_ptr(&a->state0), *gate = (float *)ug_hip_ptr(&a->param);
        const float *sum = (const float *)ug_hip_ptr(&a->grad);
        if (!state || !gate)
            return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer step buffers missing",
                                          UG_HIP_BACKEND);
        ug_optim_step_kernel<<<1, 1, 0, ug_hip_current(dev)->stream>>>(state, gate, sum, a->rule);
        return ug_hip_launched("optimizer step");
    }
    optim_k k;
    k.kind = a->kind;
    k.nesterov = a->nesterov;
    k.gate = (const float *)ug_hip_ptr(&a->gate);
    k.momentum = a->momentum;
    k.dampening = a->dampening;
    k.beta1 = a->beta1;
    k.beta2 = a->beta2;
    k.eps = a->eps;
    const int count = a->count > 0 ? a->count : 1;
    for (int first = 0; first < count; first += UG_OPTIM_TENSORS) {
        optim_tensors t;
        t.count = 0;
        t.first_block[0] = 0;
        for (int i = first; i < count && i < first + UG_OPTIM_TENSORS; i++) {
            const ug_optim_args one = a->count > 0 ? ug_optim_args_at(a, i) : *a;
            const int c = t.count;
            t.p[c] = (float *)ug_hip_ptr(&one.param);
            t.g[c] = (const float *)ug_hip_ptr(&one.grad);
            t.s0[c] = (float *)ug_hip_ptr(&one.state0);
            t.s1[c] = (float *)ug_hip_ptr(&one.state1);
            t.copy[c] = ug_hip_ptr(&one.copy);
            t.copy_t[c] = one.copy.dtype;
            t.check[c] = (float *)ug_hip_ptr(&one.epi.check);
            if (t.check[c] && one.epi.check.dtype != UG_F32)
                return ug_hip_host->set_error(UG_ERR_DTYPE, "%s: an optimizer's check flag must be f32",
                                              UG_HIP_BACKEND);
            t.n[c] = one.n > 0 ? one.n : 0;
            t.wd[c] = one.weight_decay;
            t.lr_scale[c] = one.lr_scale;
            if (!k.gate || !t.p[c] || !t.g[c] || (a->kind == UG_OPTIM_SGD && a->momentum != 0.0f && !t.s0[c]) ||
                (a->kind != UG_OPTIM_SGD && (!t.s0[c] || !t.s1[c])))
                return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT, "%s: optimizer state missing",
                                              UG_HIP_BACKEND);
            const int64_t blocks = (t.n[c] + UG_HIP_BLOCK - 1) / UG_HIP_BLOCK;
            if (blocks > (int64_t)0x7fffffff - t.first_block[c])
                return ug_hip_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                              "%s: an optimizer update of over 2^31 blocks", UG_HIP_BACKEND);
            t.first_block[c + 1] = t.first_block[c] + (unsigned)blocks;
            t.count++;
        }
        if (t.first_block[t.count] == 0)
            continue;
        ug_optim_kernel<<<t.first_block[t.count], UG_HIP_BLOCK, 0, ug_hip_current(dev)->stream>>>(k, t);
        UG_BACKEND_TRY(ug_hip_launched("optimizer"));
    }
    return UG_OK;
}
