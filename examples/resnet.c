/* ResNet-20 (He et al. 2016, section 4.2: a 3x3 convolution, three stages
 * of three basic blocks at 16, 32 and 64 channels, global average pooling
 * and a linear layer; 0.27M parameters) through the library's trainer, on
 * CIFAR-10 or on Fashion-MNIST: SGD with momentum 0.9 and a cosine
 * schedule from 0.1, weight decay 5e-4 on the weights only (not batch
 * norms or biases), label smoothing 0.1 (+0.4 points of test accuracy on
 * Fashion-MNIST after 10 epochs in bf16, two seeds), random crops
 * (padding 4) and flips on the device, bf16 where the device computes it
 * natively, a checkpoint after each epoch.
 * Run again after a crash or kill -9, it resumes to the same weights, bit
 * for bit.
 *
 *   resnet [DATA_DIR [CHECKPOINT [EPOCHS]]]
 *
 * DATA_DIR holds CIFAR-10's binary files (cifar-10-batches-bin), or
 * Fashion-MNIST's gzipped IDX files (Debian's dataset-fashion-mnist by
 * default: 28x28 images, taken as they are); EPOCHS defaults to 10;
 * UG_DEVICE picks the device. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <unigrad/unigrad.h>

/* Block b of a stage: two convolutions and the shortcut, x itself or a
 * strided 1x1 projection where the block halves the image and doubles the
 * channels. Named "s2.0.a" and so on, the same in every build. */
static ug_status block(ug_graph *g, int stage, int b, ug_value *x, int64_t out, int stride, ug_value **y)
{
    char n[3][32];
    for (int i = 0; i < 3; i++) snprintf(n[i], sizeof n[i], "s%d.%d.%c", stage + 1, b, "abp"[i]);
    ug_value *h = NULL, *skip = x;
    ug_status st = ug_nn_conv_bn(g, n[0], x, out, 3, &(ug_conv2d_params){.stride = {stride, stride}}, UG_NN_RELU, &h);
    if (st == UG_OK) st = ug_nn_conv_bn(g, n[1], h, out, 3, NULL, UG_NN_IDENTITY, &h);
    if (st == UG_OK && stride != 1)
        st = ug_nn_conv_bn(g, n[2], x, out, 1, &(ug_conv2d_params){.stride = {stride, stride}}, UG_NN_IDENTITY, &skip);
    if (st == UG_OK) st = ug_g_add(g, h, skip, y);
    return st == UG_OK ? ug_g_relu(g, *y, y) : st;
}

/* user: the images' channels and side. */
static ug_status resnet20(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    const int64_t *m = user, shape[4] = {ug_value_dim(x, 0), m[0], m[1], m[1]};
    ug_value *h = NULL;
    ug_status st = ug_g_reshape(g, x, 4, shape, &h);
    if (st == UG_OK) st = ug_nn_conv_bn(g, "stem", h, 16, 3, NULL, UG_NN_RELU, &h);
    for (int stage = 0; stage < 3; stage++)
        for (int b = 0; b < 3 && st == UG_OK; b++)
            st = block(g, stage, b, h, 16 << stage, stage > 0 && b == 0 ? 2 : 1, &h);
    if (st == UG_OK) st = ug_g_global_avg_pool2d(g, h, &h);
    if (st == UG_OK) st = ug_nn_flatten(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc", h, 10, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.1f, &out->loss) : st;
}

/* After each epoch: the test set is the trainer's validation set. */
static ug_status show_epoch(const ug_trainer_epoch *e, void *user)
{
    (void)user;
    printf("epoch %lld: train loss %.4f, test loss %.4f (accuracy %.2f%%), %.0f samples/s\n", (long long)e->epoch + 1,
           e->train.loss, e->validation.loss, 100.0 * e->validation.accuracy, e->samples_per_second);
    return fflush(stdout) == 0 ? UG_OK : UG_ERR_IO;
}

/* The training or test split, standardised by its pixels' mean and
 * deviation: CIFAR-10's (0.4734, 0.2516) or Fashion-MNIST's (0.2860,
 * 0.3530). */
static ug_status load(const char *dir, bool cifar, bool train, ug_dataset **out)
{
    char x[4096], y[4096];
    snprintf(x, sizeof x, "%s/%s-images-idx3-ubyte.gz", dir, train ? "train" : "t10k");
    snprintf(y, sizeof y, "%s/%s-labels-idx1-ubyte.gz", dir, train ? "train" : "t10k");
    return cifar ? ug_dataset_from_cifar10(dir, train, 1.0f / (255 * 0.2516f), -0.4734f / 0.2516f, out)
                 : ug_dataset_from_idx(x, y, 1.0f / (255 * 0.3530f), -0.2860f / 0.3530f, out);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    const char *checkpoint = argc > 2 ? argv[2] : "resnet.safetensors";
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/test_batch.bin", dir);
    const bool cifar = access(probe, R_OK) == 0;
    const int64_t m[2] = {cifar ? 3 : 1, cifar ? 32 : 28};
    ug_trainer_config c = ug_trainer_defaults();
    c.epochs = argc > 3 ? atoi(argv[3]) : 10;
    c.precision = UG_BF16;
    c.optimizer = (ug_optimizer_config){.type = UG_SGD, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f,
                                        .schedule = UG_SCHEDULE_COSINE};
    c.device_convert = true;
    c.augment = (ug_image_augment){m[0], m[1], m[1], 4, 0.5f};
    c.checkpoint = checkpoint;
    c.resume = access(checkpoint, R_OK) == 0 ? checkpoint : NULL;
    c.on_epoch = show_epoch;
    ug_dataset *train = NULL, *test = NULL;
    ug_device *device = NULL;
    ug_trainer *trainer = NULL;
    ug_status st = ug_optimizer_decay_matrices_only(&c.optimizer);
    if (st == UG_OK) st = load(dir, cifar, true, &train);
    if (st == UG_OK) st = load(dir, cifar, false, &test);
    if (st == UG_OK) st = ug_device_open(NULL, &device);
    if (st == UG_OK) st = ug_trainer_create(device, train, test, resnet20, (void *)m, &c, &trainer);
    if (st == UG_OK) st = ug_trainer_fit(trainer);
    if (st != UG_OK) fprintf(stderr, "resnet: %s\n", ug_last_error());
    ug_trainer_free(trainer);
    ug_device_close(device);
    ug_dataset_free(train);
    ug_dataset_free(test);
    return st == UG_OK ? 0 : 1;
}
