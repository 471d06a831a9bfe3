/* Launching batch normalisation: one work-group per channel
 * (kernels/opencl/batchnorm.cl), whole runs a work-item on CPU devices. */
#include "backends/opencl/internal.h"

ug_status ug_opencl_batchnorm(ug_bdev *dev, const ug_batchnorm_args *a)
{
    if (a->c <= 0)
        return UG_OK;
    const ug_opencl_kernel *k;
    /* CPU devices: each work-item whole runs of the channel (batchnorm.cl) */
    const ug_opencl_family family = a->backward ? (dev->is_cpu ? UG_OPENCL_BATCHNORM_BWD_ROWS : UG_OPENCL_BATCHNORM_BWD)
                                                : (dev->is_cpu ? UG_OPENCL_BATCHNORM_FWD_ROWS : UG_OPENCL_BATCHNORM_FWD);
    ug_status st = ug_opencl_kernel_for(dev, family, a->x.dtype, UG_F32, &k);
    if (st != UG_OK)
        return st;
    size_t local = k->wg, global = (size_t)a->c * local;
    cl_long n = a->n, c = a->c, inner = a->inner;
    cl_int training = a->training;
    UG_OPENCL_VIEW(x, a->x);
    UG_OPENCL_VIEW(weight, a->weight);
    UG_OPENCL_VIEW(mean, a->mean);
    UG_OPENCL_VIEW(rstd, a->rstd);
    if (a->backward) {
        UG_OPENCL_VIEW(dx, a->dx);
        UG_OPENCL_VIEW(dy, a->dy);
        UG_OPENCL_VIEW(dweight, a->dweight);
        UG_OPENCL_VIEW(dbias, a->dbias);
        ug_opencl_arg args[] = {
            UG_OPENCL_ARG(dx),        UG_OPENCL_ARG(dx_off),      UG_OPENCL_ARG(dy),
            UG_OPENCL_ARG(dy_off),    UG_OPENCL_ARG(x),           UG_OPENCL_ARG(x_off),
            UG_OPENCL_ARG(mean),      UG_OPENCL_ARG(mean_off),    UG_OPENCL_ARG(rstd),
            UG_OPENCL_ARG(rstd_off),  UG_OPENCL_ARG(weight),      UG_OPENCL_ARG(weight_off),
            UG_OPENCL_ARG(dweight),   UG_OPENCL_ARG(dweight_off), UG_OPENCL_ARG(dbias),
            UG_OPENCL_ARG(dbias_off), UG_OPENCL_ARG(n),           UG_OPENCL_ARG(c),
            UG_OPENCL_ARG(inner),     UG_OPENCL_ARG(training)};
        return ug_opencl_launch(dev, k, 1, &global, &local, args, 20);
    }
    UG_OPENCL_VIEW(y, a->y);
    UG_OPENCL_VIEW(bias, a->bias);
    UG_OPENCL_VIEW(rmean, a->running_mean);
    UG_OPENCL_VIEW(rvar, a->running_var);
    cl_float eps = a->eps, momentum = a->momentum;
    cl_int update = a->update_running, relu = a->epi.post == UG_UNARY_RELU;
    ug_opencl_arg args[] = {
        UG_OPENCL_ARG(y),        UG_OPENCL_ARG(y_off),      UG_OPENCL_ARG(x),      UG_OPENCL_ARG(x_off),
        UG_OPENCL_ARG(weight),   UG_OPENCL_ARG(weight_off), UG_OPENCL_ARG(bias),   UG_OPENCL_ARG(bias_off),
        UG_OPENCL_ARG(mean),     UG_OPENCL_ARG(mean_off),   UG_OPENCL_ARG(rstd),   UG_OPENCL_ARG(rstd_off),
        UG_OPENCL_ARG(rmean),    UG_OPENCL_ARG(rmean_off),  UG_OPENCL_ARG(rvar),   UG_OPENCL_ARG(rvar_off),
        UG_OPENCL_ARG(n),        UG_OPENCL_ARG(c),          UG_OPENCL_ARG(inner),  UG_OPENCL_ARG(eps),
        UG_OPENCL_ARG(momentum), UG_OPENCL_ARG(training),   UG_OPENCL_ARG(update), UG_OPENCL_ARG(relu)};
    return ug_opencl_launch(dev, k, 1, &global, &local, args, 24);
}
