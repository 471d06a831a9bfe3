/* A program that returns from main with a training step's kernels still
 * queued, its device, graph and tensors never freed (as short programs
 * do). It must exit with status 0: on POCL it once died in POCL's compiler
 * thread during exit, every time. Usage: exit_with_queued_work DEVICE */
#include <stdio.h>

#include "unigrad/unigrad.h"

#define TRY(call)                                                   \
    do {                                                            \
        if ((call) != UG_OK) {                                      \
            fprintf(stderr, "%s: %s\n", #call, ug_last_error());    \
            return 1;                                               \
        }                                                           \
    } while (0)

int main(int argc, char **argv)
{
    ug_device *dev = NULL;
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_optimizer *opt = NULL;
    ug_value *x = NULL, *y = NULL, *h = NULL, *loss = NULL;
    ug_tensor *tx = NULL, *ty = NULL;
    TRY(ug_device_open(argc > 1 ? argv[1] : "auto", &dev));
    TRY(ug_model_create(dev, 1, &m));
    TRY(ug_graph_create(m, &g));
    TRY(ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){256, 784}, &x));
    TRY(ug_graph_input(g, "y", UG_I32, 1, (int64_t[]){256}, &y));
    TRY(ug_nn_linear(g, "fc1", x, 512, &h));
    TRY(ug_g_relu(g, h, &h));
    TRY(ug_nn_linear(g, "fc2", h, 10, &h));
    TRY(ug_g_cross_entropy(g, h, y, 0.0f, &loss));
    TRY(ug_graph_backward(g, loss));
    ug_optimizer_config c = ug_optimizer_defaults(UG_ADAM);
    TRY(ug_optimizer_create(m, &c, &opt));
    TRY(ug_graph_set_optimizer(g, opt));
    TRY(ug_graph_compile(g));
    TRY(ug_tensor_create(dev, UG_F32, 2, (int64_t[]){256, 784}, &tx));
    static int32_t labels[256];
    for (int i = 0; i < 256; i++)
        labels[i] = i % 10;
    TRY(ug_tensor_from_host(dev, UG_I32, 1, (int64_t[]){256}, labels, &ty));
    TRY(ug_fill(tx, 0.1f));
    TRY(ug_graph_bind(g, x, tx));
    TRY(ug_graph_bind(g, y, ty));
    for (int i = 0; i < 20; i++)
        TRY(ug_graph_run(g));
    return 0; /* twenty steps still queued, nothing freed */
}
