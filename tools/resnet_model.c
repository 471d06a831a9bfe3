/* ResNet-20 (resnet_model.h). */
#include <stdio.h>

#include "resnet_model.h"

/* Block b of a stage: two 3x3 units and the shortcut, x or a strided 1x1
 * projection where the block downsamples. */
static ug_status block(ug_graph *g, int stage, int b, ug_value *x, int64_t out, int stride, ug_value **y)
{
    char n[3][32];
    for (int i = 0; i < 3; i++)
        snprintf(n[i], sizeof n[i], "s%d.%d.%c", stage + 1, b, "abp"[i]);
    const ug_conv2d_params strided = {.stride = {stride, stride}};
    ug_value *h = NULL, *skip = x;
    ug_status st = ug_nn_conv_bn(g, n[0], x, out, 3, &strided, UG_NN_RELU, &h);
    if (st == UG_OK)
        st = ug_nn_conv_bn(g, n[1], h, out, 3, NULL, UG_NN_IDENTITY, &h);
    if (st == UG_OK && stride != 1)
        st = ug_nn_conv_bn(g, n[2], x, out, 1, &strided, UG_NN_IDENTITY, &skip);
    if (st == UG_OK)
        st = ug_g_add(g, h, skip, y);
    return st == UG_OK ? ug_g_relu(g, *y, y) : st;
}

ug_status resnet20_build(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    const resnet_config *m = user;
    const int64_t shape[4] = {ug_value_dim(x, 0), m->channels, m->side, m->side};
    ug_value *h = NULL;
    ug_status st = ug_g_reshape(g, x, 4, shape, &h);
    if (st == UG_OK)
        st = ug_nn_conv_bn(g, "stem", h, 16, 3, NULL, UG_NN_RELU, &h);
    for (int stage = 0; stage < 3; stage++)
        for (int b = 0; b < 3 && st == UG_OK; b++)
            st = block(g, stage, b, h, 16 << stage, stage > 0 && b == 0 ? 2 : 1, &h);
    if (st == UG_OK)
        st = ug_g_global_avg_pool2d(g, h, &h);
    if (st == UG_OK)
        st = ug_nn_flatten(g, h, &h);
    if (st == UG_OK)
        st = ug_nn_linear(g, "fc", h, 10, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}
