/* Launching the optimizer family: one kernel per parameter update. */
#include "backends/opencl/internal.h"

ug_status ocl_optimizer(ug_bdev *dev, const ug_optim_args *a)
{
    if (a->n <= 0)
        return UG_OK;
    cl_mem p = (cl_mem)a->param.mem, g = (cl_mem)a->grad.mem;
    cl_ulong poff = (cl_ulong)a->param.offset, goff = (cl_ulong)a->grad.offset;
    /* Absent buffers are bound to the parameter: never read (flags say so). */
    cl_mem s = a->grad_scale.mem ? (cl_mem)a->grad_scale.mem : p;
    cl_ulong soff = a->grad_scale.mem ? (cl_ulong)a->grad_scale.offset : 0;
    cl_long n = a->n;
    cl_float lr = a->lr, wd = a->weight_decay;
    cl_int flags = a->grad_scale.mem ? OCL_OPTIM_GRAD_SCALE | (a->gated ? OCL_OPTIM_GATED : 0) : 0;
    cl_mem copy = a->copy.mem ? (cl_mem)a->copy.mem : p;
    cl_ulong coff = a->copy.mem ? (cl_ulong)a->copy.offset : 0;
    cl_int cdt = (cl_int)a->copy.dtype;
    flags |= a->copy.mem ? OCL_OPTIM_COPY : 0;
    /* Neither gate nor half copy: the kernel POCL vectorizes (optim.cl). */
    const bool plain = !(flags & (OCL_OPTIM_GATED | OCL_OPTIM_COPY));
    if (a->copy.mem && a->copy.dtype != UG_F16 && a->copy.dtype != UG_BF16)
        return ocl_host->set_error(UG_ERR_DTYPE, "OpenCL: an optimizer's half copy must be f16 or bf16");

    if (a->kind == UG_OPTIM_SCALER) {
        if (!a->state0.mem || !a->param.mem || !a->grad.mem)
            return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT, "OpenCL: loss scaler buffers missing");
        cl_mem state = (cl_mem)a->state0.mem;
        cl_ulong state_off = (cl_ulong)a->state0.offset;
        cl_float growth = a->growth, backoff = a->backoff, interval = a->growth_interval,
                 max_norm = a->max_norm, beta1 = a->beta1, beta2 = a->beta2;
        ocl_arg args[] = {OCL_ARG(state), OCL_ARG(state_off), OCL_ARG(p),       OCL_ARG(poff),
                          OCL_ARG(g),     OCL_ARG(goff),      OCL_ARG(growth),  OCL_ARG(backoff),
                          OCL_ARG(interval), OCL_ARG(max_norm), OCL_ARG(beta1), OCL_ARG(beta2)};
        const ocl_kernel *k;
        ug_status st = ocl_kernel_for(dev, OCL_OPTIM_SCALER, UG_F32, UG_F32, &k);
        return st != UG_OK ? st : ocl_launch_1d(dev, k, 1, args, 12);
    }

    if (a->kind == UG_OPTIM_SGD) {
        cl_mem b = a->state0.mem ? (cl_mem)a->state0.mem : p;
        cl_ulong boff = a->state0.mem ? (cl_ulong)a->state0.offset : 0;
        cl_float momentum = a->momentum, dampening = a->dampening;
        if (momentum != 0.0f && !a->state0.mem)
            return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                       "OpenCL: SGD with momentum needs a momentum buffer");
        flags |= (a->nesterov ? OCL_OPTIM_NESTEROV : 0) | (a->first_step ? OCL_OPTIM_FIRST_STEP : 0);
        ocl_arg args[] = {OCL_ARG(p),  OCL_ARG(poff), OCL_ARG(g),  OCL_ARG(goff),
                          OCL_ARG(b),  OCL_ARG(boff), OCL_ARG(s),  OCL_ARG(soff),
                          OCL_ARG(copy), OCL_ARG(coff), OCL_ARG(cdt), OCL_ARG(n),  OCL_ARG(lr),   OCL_ARG(wd), OCL_ARG(momentum),
                          OCL_ARG(dampening), OCL_ARG(flags)};
        const ocl_kernel *k;
        ug_status st = ocl_kernel_for(dev, plain ? OCL_OPTIM_SGD_PLAIN : OCL_OPTIM_SGD, UG_F32, UG_F32, &k);
        return st != UG_OK ? st : ocl_launch_1d(dev, k, (size_t)n, args, 17);
    }
    if (a->kind != UG_OPTIM_ADAM && a->kind != UG_OPTIM_ADAMW)
        return ocl_host->set_error(UG_ERR_UNSUPPORTED, "OpenCL: unknown optimizer kind %d",
                                   (int)a->kind);
    if (!a->state0.mem || !a->state1.mem)
        return ocl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                   "OpenCL: Adam needs both moment buffers");
    cl_mem m = (cl_mem)a->state0.mem, v = (cl_mem)a->state1.mem;
    cl_ulong moff = (cl_ulong)a->state0.offset, voff = (cl_ulong)a->state1.offset;
    cl_float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
    cl_float bc1 = a->bias_correction1, bc2 = a->bias_correction2;
    flags |= a->kind == UG_OPTIM_ADAMW ? OCL_OPTIM_DECOUPLED : 0;
    ocl_arg args[] = {OCL_ARG(p),  OCL_ARG(poff), OCL_ARG(g),   OCL_ARG(goff), OCL_ARG(m),
                      OCL_ARG(moff), OCL_ARG(v),  OCL_ARG(voff), OCL_ARG(s),   OCL_ARG(soff),
                      OCL_ARG(copy), OCL_ARG(coff), OCL_ARG(cdt), OCL_ARG(n),  OCL_ARG(lr),   OCL_ARG(wd),   OCL_ARG(b1),  OCL_ARG(b2),
                      OCL_ARG(eps), OCL_ARG(bc1), OCL_ARG(bc2),  OCL_ARG(flags)};
    const ocl_kernel *k;
    ug_status st = ocl_kernel_for(dev, plain ? OCL_OPTIM_ADAM_PLAIN : OCL_OPTIM_ADAM, UG_F32, UG_F32, &k);
    return st != UG_OK ? st : ocl_launch_1d(dev, k, (size_t)n, args, 22);
}
