/* The axes of an elementwise launch collapsed, for the backends' launchers
 * (the CPU's elementwise plans, OpenCL's rows kernels). */
#ifndef UG_BACKENDS_COLLAPSE_AXES_H
#define UG_BACKENDS_COLLAPSE_AXES_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h" /* UG_KERNEL_MAX_DIMS */

/* An elementwise launch's axes with those of size 1 dropped and
 * neighbours merged that each of count operands (strides[k]) steps evenly
 * across, into shape and out[k] (y contiguous): all contiguous is one
 * axis, a bias add rows and columns. Returns the axes left, at least one
 * (of size 1, strides 0, for a single element). */
static inline int ug_collapse_axes(int ndim, const int64_t *shape, int count, const int64_t *const *strides,
                                   int64_t *out_shape, int64_t (*out)[UG_KERNEL_MAX_DIMS])
{
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue;
        bool merge = nd > 0;
        for (int k = 0; k < count && merge; k++)
            merge = out[k][nd - 1] == strides[k][d] * shape[d];
        if (merge) {
            out_shape[nd - 1] *= shape[d];
            for (int k = 0; k < count; k++)
                out[k][nd - 1] = strides[k][d];
        } else {
            out_shape[nd] = shape[d];
            for (int k = 0; k < count; k++)
                out[k][nd] = strides[k][d];
            nd++;
        }
    }
    if (nd == 0) {
        out_shape[0] = 1;
        for (int k = 0; k < count; k++)
            out[k][0] = 0;
        nd = 1;
    }
    return nd;
}

#endif
