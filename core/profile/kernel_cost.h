/* What a kernel launch moves and computes, from its family's arguments
 * (backends/backend.h): the figures a profile reports per op. */
#ifndef UG_CORE_KERNEL_COST_H
#define UG_CORE_KERNEL_COST_H

#include <stddef.h>

#include "backends/backend.h"

typedef struct ug_kernel_cost {
    double flops; /* a multiply-add counts two; an elementwise op one per element */
    double bytes; /* read and written once each: the least traffic the launch needs */
    char shape[48]; /* "64x500x784" (a product's m x n x k), "32x1x28x28" (images), "[31360]" */
} ug_kernel_cost;

void ug_kernel_cost_of(ug_kernel_family family, const void *args, ug_kernel_cost *cost);

#endif
