/* A CNN on Fashion-MNIST through the library's trainer: a validation
 * split, bf16 compute (f32 on devices without native bf16 arithmetic,
 * where it would be slower), gradient accumulation over 2 batches, a cosine
 * schedule, a checkpoint after each epoch, and early stopping. Stopped
 * (Ctrl-C, a lost machine), it loses at most the epoch under way: run it
 * again and it resumes from the checkpoint, which holds the whole run
 * (weights, optimizer, data order, random state, configuration), to the
 * same weights bit for bit. (trainer.h's stop flag also saves mid-epoch.)
 *
 *   cnn [DATA_DIR [CHECKPOINT]]
 *
 * DATA_DIR holds Fashion-MNIST's gzipped IDX files (Debian's
 * dataset-fashion-mnist by default); UG_DEVICE picks the device (cpu,
 * opencl:0, hip:0, cuda:0; the best one found by default). An epoch can
 * take minutes on a CPU: a line after the first step and every 10 s
 * says how far it is. */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <unigrad/unigrad.h>

/* conv 3x3 (same size) + batch norm + ReLU + 2x2 max-pool. */
static ug_status conv_block(ug_graph *g, const char *conv, const char *norm, int64_t channels, ug_value **h)
{
    ug_status st = ug_nn_conv2d(g, conv, *h, channels, 3, 3, &(ug_conv2d_params){.padding = {1, 1}}, h);
    if (st == UG_OK) st = ug_nn_batch_norm(g, norm, *h, h);
    if (st == UG_OK) st = ug_g_relu(g, *h, h);
    return st == UG_OK ? ug_g_max_pool2d(g, *h, &(ug_pool2d_params){.kernel = {2, 2}}, h) : st;
}

/* The model for a batch x [rows, 784] with labels y: the trainer calls it
 * for its training and evaluation graphs (parameters are made once). */
static ug_status cnn(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    (void)user;
    const int64_t images[4] = {ug_value_dim(x, 0), 1, 28, 28};
    ug_value *h = NULL;
    ug_status st = ug_g_reshape(g, x, 4, images, &h);
    if (st == UG_OK) st = conv_block(g, "conv1", "bn1", 32, &h);
    if (st == UG_OK) st = conv_block(g, "conv2", "bn2", 64, &h);
    if (st == UG_OK) st = ug_nn_flatten(g, h, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc1", h, 128, &h);
    if (st == UG_OK) st = ug_g_relu(g, h, &h);
    if (st == UG_OK) st = ug_g_dropout(g, h, 0.25f, &h);
    if (st == UG_OK) st = ug_nn_linear(g, "fc2", h, 10, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* Where the callbacks write, and when a step was last shown. */
typedef struct progress {
    FILE *out;
    ug_trainer *trainer;  /* set once created: its loss is read when shown */
    time_t last;
} progress;

/* After each batch: a line after the run's first step and every 10 s. The
 * trainer reads the loss only now and then (it waits for the device), so
 * it is read here when shown. */
static ug_status show_step(const ug_trainer_step *s, void *user)
{
    progress *p = user;
    const time_t now = time(NULL);
    if (s->global_batch > 1 && difftime(now, p->last) < 10.0)
        return UG_OK;
    p->last = now;
    float loss = s->loss;
    ug_status st = isnan(loss) ? ug_trainer_last_loss(p->trainer, &loss) : UG_OK;
    if (st != UG_OK)
        return st;
    fprintf(p->out, "epoch %lld step %lld/%lld: loss %.4f, %.0f samples/s\n", (long long)s->epoch + 1,
            (long long)s->batch + 1, (long long)s->batches, (double)loss, s->samples_per_second);
    return fflush(p->out) == 0 ? UG_OK : UG_ERR_IO;
}

/* After each epoch. */
static ug_status show_epoch(const ug_trainer_epoch *e, void *user)
{
    progress *p = user;
    fprintf(p->out, "epoch %lld: train loss %.4f, validation loss %.4f (accuracy %.2f%%)%s\n",
            (long long)e->epoch + 1, e->train.loss, e->validation.loss, 100.0 * e->validation.accuracy,
            e->best ? ", the best so far" : "");
    return fflush(p->out) == 0 ? UG_OK : UG_ERR_IO;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    const char *checkpoint = argc > 2 ? argv[2] : "cnn.safetensors";
    char files[4][4096];
    const char *names[4] = {"train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"};
    for (int i = 0; i < 4; i++)
        snprintf(files[i], sizeof files[i], "%s/%s-ubyte.gz", dir, names[i]);
    ug_trainer_config c = ug_trainer_defaults();
    c.precision = UG_BF16;
    c.accumulate = 2;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.val_split = 0.1;
    c.patience = 2;
    c.checkpoint = checkpoint;
    c.resume = access(checkpoint, R_OK) == 0 ? checkpoint : NULL;
    progress shown = {.out = stdout};
    c.on_step = show_step;
    c.on_epoch = show_epoch;
    c.user = &shown;
    /* Pixels standardised as torchvision's Normalize((0.2860,), (0.3530,)). */
    const float scale = 1.0f / (255.0f * 0.3530f), shift = -0.2860f / 0.3530f;
    ug_dataset *train = NULL, *test = NULL;
    ug_device *device = NULL;
    ug_trainer *trainer = NULL;
    ug_trainer_metrics m;
    ug_status st = ug_dataset_from_idx(files[0], files[1], scale, shift, &train);
    if (st == UG_OK) st = ug_dataset_from_idx(files[2], files[3], scale, shift, &test);
    if (st == UG_OK) st = ug_device_open(NULL, &device);
    if (st == UG_OK) st = ug_trainer_create(device, train, NULL, cnn, NULL, &c, &trainer);
    shown.trainer = trainer;
    if (st == UG_OK) st = ug_trainer_fit(trainer);
    if (st == UG_OK && (st = ug_trainer_evaluate(trainer, test, &m)) == UG_OK)
        printf("test loss %.4f, accuracy %.2f%%\n", m.loss, 100.0 * m.accuracy);
    if (st != UG_OK)
        fprintf(stderr, "cnn: %s\n", ug_last_error());
    ug_trainer_free(trainer);
    ug_device_close(device);
    ug_dataset_free(train);
    ug_dataset_free(test);
    return st == UG_OK ? 0 : 1;
}
