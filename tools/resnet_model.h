/* examples/resnet.c's model, for ug-bench resnet: ResNet-20 (He et al.
 * 2016, section 4.2) on square images, ug_nn_conv_bn units, basic blocks
 * with 1x1 projections where they downsample, global average pooling and
 * a linear layer to 10 classes. The example keeps its own copy, to be
 * read whole. */
#ifndef UG_TOOLS_RESNET_MODEL_H
#define UG_TOOLS_RESNET_MODEL_H

#include "unigrad/unigrad.h"

typedef struct resnet_config {
    int64_t channels, side; /* the images: [channels, side, side] */
} resnet_config;

/* A ug_trainer_build_fn on x [rows, channels * side * side]; user is a
 * resnet_config. */
ug_status resnet20_build(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out);

#endif
