/* The CPU device's convolutions through oneDNN (conv.c), present
 * when the build found it (UG_CPU_ONEDNN): each device keeps the passes it
 * planned, with their primitives, for the shapes it has seen. */
#ifndef UG_CPU_CONVS_H
#define UG_CPU_CONVS_H

#include "backends/cpu/internal.h"

ug_status ug_cpu_convs_create(ug_cpu_convs **out);
void ug_cpu_convs_destroy(ug_cpu_convs *convs);

ug_conv_plan_fn ug_cpu_conv_plan;
ug_conv2d_fn ug_cpu_conv2d;

#endif
