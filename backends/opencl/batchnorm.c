/* Launching batch normalisation: one work-group per channel
 * (kernels/opencl/batchnorm.cl). */
#include "backends/opencl/internal.h"

ug_status ocl_batchnorm(ug_bdev *dev, const ug_batchnorm_args *a)
{
    if (a->c <= 0)
        return UG_OK;
    const ocl_kernel *k;
    ug_status st = ocl_kernel_for(dev, a->backward ? OCL_BATCHNORM_BWD : OCL_BATCHNORM_FWD,
                                  a->x.dtype, UG_F32, &k);
    if (st != UG_OK)
        return st;
    size_t local = k->wg, global = (size_t)a->c * local;
    cl_long n = a->n, c = a->c, inner = a->inner;
    cl_int training = a->training;
    OCL_VIEW(x, a->x);
    OCL_VIEW(weight, a->weight);
    OCL_VIEW(mean, a->mean);
    OCL_VIEW(rstd, a->rstd);
    if (a->backward) {
        OCL_VIEW(dx, a->dx);
        OCL_VIEW(dy, a->dy);
        OCL_VIEW(dweight, a->dweight);
        OCL_VIEW(dbias, a->dbias);
        ocl_arg args[] = {OCL_ARG(dx),      OCL_ARG(dx_off),      OCL_ARG(dy),    OCL_ARG(dy_off),
                          OCL_ARG(x),       OCL_ARG(x_off),       OCL_ARG(mean),  OCL_ARG(mean_off),
                          OCL_ARG(rstd),    OCL_ARG(rstd_off),    OCL_ARG(weight), OCL_ARG(weight_off),
                          OCL_ARG(dweight), OCL_ARG(dweight_off), OCL_ARG(dbias), OCL_ARG(dbias_off),
                          OCL_ARG(n),       OCL_ARG(c),           OCL_ARG(inner), OCL_ARG(training)};
        return ocl_launch(dev, k, 1, &global, &local, args, 20);
    }
    OCL_VIEW(y, a->y);
    OCL_VIEW(bias, a->bias);
    OCL_VIEW(rmean, a->running_mean);
    OCL_VIEW(rvar, a->running_var);
    cl_float eps = a->eps, momentum = a->momentum;
    cl_int update = a->update_running, relu = a->relu;
    ocl_arg args[] = {OCL_ARG(y),     OCL_ARG(y_off),     OCL_ARG(x),      OCL_ARG(x_off),
                      OCL_ARG(weight), OCL_ARG(weight_off), OCL_ARG(bias), OCL_ARG(bias_off),
                      OCL_ARG(mean),  OCL_ARG(mean_off),  OCL_ARG(rstd),   OCL_ARG(rstd_off),
                      OCL_ARG(rmean), OCL_ARG(rmean_off), OCL_ARG(rvar),   OCL_ARG(rvar_off),
                      OCL_ARG(n),     OCL_ARG(c),         OCL_ARG(inner),  OCL_ARG(eps),
                      OCL_ARG(momentum), OCL_ARG(training), OCL_ARG(update), OCL_ARG(relu)};
    return ocl_launch(dev, k, 1, &global, &local, args, 24);
}
