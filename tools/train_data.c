/* ug-train's data (train_data.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_data.h"

#include <stdio.h>
#include <unistd.h>

/* The path of a data file: the one given, else DIR/NAME or DIR/NAME.gz. */
static const char *data_path(const char *given, const char *dir, const char *name, char *buf, size_t len)
{
    if (given)
        return given;
    snprintf(buf, len, "%s/%s", dir, name);
    if (access(buf, R_OK) == 0)
        return buf;
    snprintf(buf, len, "%s/%s.gz", dir, name);
    return buf;
}

static int fail(const char *what)
{
    fprintf(stderr, "ug-train: %s: %s\n", what, ug_last_error());
    return 1;
}

/* IDX bytes kept as bytes; the split; standardised as torchvision's
 * Normalize does, with the training part's mean and deviation. The split
 * is the trainer's own (ug_trainer_config.val_split's part, with the
 * run's seed), made here because the standardisation needs the training
 * part first; the trainer is given both parts, and splits nothing. */
static int load(const train_options *o, train_data *d)
{
    char p1[4096], p2[4096], p3[4096], p4[4096];
    const char *train_images = data_path(o->train_images, o->data_dir, "train-images-idx3-ubyte", p1, sizeof p1);
    const char *train_labels = data_path(o->train_labels, o->data_dir, "train-labels-idx1-ubyte", p2, sizeof p2);
    const char *test_images = data_path(o->test_images, o->data_dir, "t10k-images-idx3-ubyte", p3, sizeof p3);
    const char *test_labels = data_path(o->test_labels, o->data_dir, "t10k-labels-idx1-ubyte", p4, sizeof p4);
    ug_dataset *all = NULL;
    if (ug_dataset_from_idx(train_images, train_labels, 1.0f / 255.0f, 0.0f, &all) != UG_OK)
        return fail("loading the training set (install dataset-fashion-mnist or pass --data)");
    d->train = all;
    if (ug_dataset_from_idx(test_images, test_labels, 1.0f / 255.0f, 0.0f, &d->test) != UG_OK)
        return fail("loading the test set");
    if (ug_dataset_require_classes(all, (int32_t)o->model.classes) != UG_OK ||
        ug_dataset_require_classes(d->test, (int32_t)o->model.classes) != UG_OK)
        return fail("checking the labels (--classes sets their number)");
    if (o->val_split > 0) {
        d->train = NULL;
        ug_status st = ug_dataset_split(all, o->val_split, o->seed, &d->train, &d->val);
        ug_dataset_free(all);
        if (st != UG_OK)
            return fail("splitting off the validation set (--val-split)");
    }
    double mean = 0.0, stddev = 1.0;
    float scale = 1.0f, shift = 0.0f;
    if (o->standardize) {
        if (ug_dataset_stats(d->train, &mean, &stddev) != UG_OK || stddev <= 0.0)
            return fail("standardising the data");
        scale = (float)(1.0 / stddev);
        shift = (float)(-mean / stddev);
    }
    ug_dataset *sets[3] = {d->train, d->val, d->test};
    for (int i = 0; i < 3; i++)
        if (sets[i] && ug_dataset_transform(sets[i], scale, shift) != UG_OK)
            return fail("standardising the data");
    if (ug_dataset_features(d->test) != ug_dataset_features(d->train)) {
        fprintf(stderr, "ug-train: the test images have %lld features, the training images %lld\n",
                (long long)ug_dataset_features(d->test), (long long)ug_dataset_features(d->train));
        return 1;
    }
    return 0;
}

int train_data_load(const train_options *o, train_data *out)
{
    *out = (train_data){0};
    int rc = load(o, out);
    if (rc)
        train_data_free(out);
    return rc;
}

void train_data_free(train_data *d)
{
    ug_dataset_free(d->train);
    ug_dataset_free(d->val);
    ug_dataset_free(d->test);
    *d = (train_data){0};
}
