/* Launching the optimizer family: the step's scalars in one work-item, then
 * one kernel per parameter update reading them (a multi-tensor update too:
 * OpenCL kernels take each buffer as an argument), with its parameter
 * group's weight decay and rate scale. */
#include "backends/opencl/internal.h"

/* Elements per work-item: optim.cl's UG_OPTIM_LOOP says why. */
static cl_long chunk_for(const ug_bdev *dev) { return dev->is_cpu ? 64 : 1; }

static size_t work_items(const ug_bdev *dev, cl_long n)
{
    return (size_t)((n + chunk_for(dev) - 1) / chunk_for(dev));
}

static ug_status launch_step(ug_bdev *dev, const ug_optim_args *a)
{
    if (!a->state0.mem || !a->param.mem)
        return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT, "OpenCL: optimizer step buffers missing");
    cl_mem state = (cl_mem)a->state0.mem, gate = (cl_mem)a->param.mem;
    cl_ulong state_off = (cl_ulong)a->state0.offset, gate_off = (cl_ulong)a->param.offset;
    /* Without a sum the gate is bound in its place: never read. */
    cl_mem sum = a->grad.mem ? (cl_mem)a->grad.mem : gate;
    cl_ulong sum_off = a->grad.mem ? (cl_ulong)a->grad.offset : 0;
    cl_int has_sum = a->grad.mem != NULL;
    const ug_step_rule *r = &a->rule;
    cl_int schedule = r->schedule, scaling = r->scaling;
    cl_float lr = r->lr, gamma = r->gamma, step_size = r->step_size, warmup = r->warmup,
             total = r->total, min_lr = r->min_lr, growth = r->growth, backoff = r->backoff,
             interval = r->growth_interval, max_norm = r->max_norm, beta1 = r->beta1, beta2 = r->beta2;
    ug_opencl_arg args[] = {UG_OPENCL_ARG(state),    UG_OPENCL_ARG(state_off), UG_OPENCL_ARG(gate),
                            UG_OPENCL_ARG(gate_off), UG_OPENCL_ARG(sum),       UG_OPENCL_ARG(sum_off),
                            UG_OPENCL_ARG(has_sum),  UG_OPENCL_ARG(schedule),  UG_OPENCL_ARG(lr),
                            UG_OPENCL_ARG(gamma),    UG_OPENCL_ARG(step_size), UG_OPENCL_ARG(warmup),
                            UG_OPENCL_ARG(total),    UG_OPENCL_ARG(min_lr),    UG_OPENCL_ARG(scaling),
                            UG_OPENCL_ARG(growth),   UG_OPENCL_ARG(backoff),   UG_OPENCL_ARG(interval),
                            UG_OPENCL_ARG(max_norm), UG_OPENCL_ARG(beta1),     UG_OPENCL_ARG(beta2)};
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, UG_OPENCL_OPTIM_STEP, UG_F32, UG_F32, &k);
    return st != UG_OK ? st : ug_opencl_launch_1d(dev, k, 1, args, sizeof args / sizeof args[0]);
}

ug_status ug_opencl_optimizer(ug_bdev *dev, const ug_optim_args *a)
{
    if (a->kind == UG_OPTIM_STEP)
        return launch_step(dev, a);
    for (int i = 0; i < a->count; i++) {
        const ug_optim_args one = ug_optim_args_at(a, i);
        UG_BACKEND_TRY(ug_opencl_optimizer(dev, &one));
    }
    if (a->count > 0 || a->n <= 0)
        return UG_OK;
    if (!a->gate.mem)
        return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                         "OpenCL: an optimizer update needs its gate");
    cl_mem p = (cl_mem)a->param.mem, g = (cl_mem)a->grad.mem, gate = (cl_mem)a->gate.mem;
    cl_ulong poff = (cl_ulong)a->param.offset, goff = (cl_ulong)a->grad.offset,
             gate_off = (cl_ulong)a->gate.offset;
    cl_long n = a->n, chunk = chunk_for(dev);
    cl_float wd = a->weight_decay, lr_scale = a->lr_scale;
    cl_mem copy = a->copy.mem ? (cl_mem)a->copy.mem : p; /* absent: bound to p, never written */
    cl_ulong coff = a->copy.mem ? (cl_ulong)a->copy.offset : 0;
    cl_int cdt = (cl_int)a->copy.dtype;
    UG_OPENCL_CHECK(check, a->epi.check, p);
    cl_int flags = (a->copy.mem ? UG_OPENCL_OPTIM_COPY : 0) | (check_on ? UG_OPENCL_OPTIM_CHECK : 0);
    if (a->copy.mem && a->copy.dtype != UG_F16 && a->copy.dtype != UG_BF16)
        return ug_opencl_host->set_error(UG_ERR_DTYPE,
                                         "OpenCL: an optimizer's half copy must be f16 or bf16");
    if (a->epi.check.mem && a->epi.check.dtype != UG_F32)
        return ug_opencl_host->set_error(UG_ERR_DTYPE, "OpenCL: an optimizer's check flag must be f32");

    if (a->kind == UG_OPTIM_SGD) {
        cl_mem b = a->state0.mem ? (cl_mem)a->state0.mem : p;
        cl_ulong boff = a->state0.mem ? (cl_ulong)a->state0.offset : 0;
        cl_float momentum = a->momentum, dampening = a->dampening;
        if (momentum != 0.0f && !a->state0.mem)
            return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT,
                                             "OpenCL: SGD with momentum needs a momentum buffer");
        flags |= a->nesterov ? UG_OPENCL_OPTIM_NESTEROV : 0;
        ug_opencl_arg args[] = {
            UG_OPENCL_ARG(p),     UG_OPENCL_ARG(poff),     UG_OPENCL_ARG(g),         UG_OPENCL_ARG(goff),
            UG_OPENCL_ARG(b),     UG_OPENCL_ARG(boff),     UG_OPENCL_ARG(gate),      UG_OPENCL_ARG(gate_off),
            UG_OPENCL_ARG(copy),  UG_OPENCL_ARG(coff),     UG_OPENCL_ARG(cdt),       UG_OPENCL_ARG(n),
            UG_OPENCL_ARG(wd),    UG_OPENCL_ARG(lr_scale), UG_OPENCL_ARG(momentum),  UG_OPENCL_ARG(dampening),
            UG_OPENCL_ARG(flags), UG_OPENCL_ARG(chunk),    UG_OPENCL_ARG(check),     UG_OPENCL_ARG(check_off)};
        const ug_opencl_kernel *k;
        ug_status st = ug_opencl_kernel_for(
            dev, a->copy.mem ? UG_OPENCL_OPTIM_SGD : UG_OPENCL_OPTIM_SGD_PLAIN, UG_F32, UG_F32, &k);
        return st != UG_OK
                   ? st
                   : ug_opencl_launch_1d(dev, k, work_items(dev, n), args, sizeof args / sizeof args[0]);
    }
    if (a->kind != UG_OPTIM_ADAM && a->kind != UG_OPTIM_ADAMW)
        return ug_opencl_host->set_error(UG_ERR_UNSUPPORTED, "OpenCL: unknown optimizer kind %d",
                                         (int)a->kind);
    if (!a->state0.mem || !a->state1.mem)
        return ug_opencl_host->set_error(UG_ERR_INVALID_ARGUMENT, "OpenCL: Adam needs both moment buffers");
    cl_mem m = (cl_mem)a->state0.mem, v = (cl_mem)a->state1.mem;
    cl_ulong moff = (cl_ulong)a->state0.offset, voff = (cl_ulong)a->state1.offset;
    cl_float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
    flags |= a->kind == UG_OPTIM_ADAMW ? UG_OPENCL_OPTIM_DECOUPLED : 0;
    ug_opencl_arg args[] = {
        UG_OPENCL_ARG(p),     UG_OPENCL_ARG(poff),     UG_OPENCL_ARG(g),     UG_OPENCL_ARG(goff),
        UG_OPENCL_ARG(m),     UG_OPENCL_ARG(moff),     UG_OPENCL_ARG(v),     UG_OPENCL_ARG(voff),
        UG_OPENCL_ARG(gate),  UG_OPENCL_ARG(gate_off), UG_OPENCL_ARG(copy),  UG_OPENCL_ARG(coff),
        UG_OPENCL_ARG(cdt),   UG_OPENCL_ARG(n),        UG_OPENCL_ARG(wd),    UG_OPENCL_ARG(lr_scale),
        UG_OPENCL_ARG(b1),    UG_OPENCL_ARG(b2),       UG_OPENCL_ARG(eps),   UG_OPENCL_ARG(flags),
        UG_OPENCL_ARG(chunk), UG_OPENCL_ARG(check),    UG_OPENCL_ARG(check_off)};
    const ug_opencl_kernel *k;
    ug_status st = ug_opencl_kernel_for(dev, a->copy.mem ? UG_OPENCL_OPTIM_ADAM : UG_OPENCL_OPTIM_ADAM_PLAIN,
                                        UG_F32, UG_F32, &k);
    return st != UG_OK ? st
                       : ug_opencl_launch_1d(dev, k, work_items(dev, n), args, sizeof args / sizeof args[0]);
}
