/* A small classification problem and MLP the trainer tests share
 * (test_trainer.c, test_trainer_devices.c): SAMPLES seeded samples of
 * FEATURES values, labels from a fixed linear rule with noise. */
#ifndef UG_TESTS_TRAINER_PROBLEM_H
#define UG_TESTS_TRAINER_PROBLEM_H

#include "train_support.h"

enum { SAMPLES = 240, FEATURES = 6, CLASSES = 3 };

/* fc1 (16) + tanh + dropout 0.1 + fc2: the mean cross-entropy; user
 * non-NULL leaves the dropout out (its masks differ per rank). */
ug_status build_mlp(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out);
void problem_values(uint64_t seed, float *x, int32_t *labels);
ug_dataset *problem(uint64_t seed);
/* The problem's features as bytes (images of 2 x 3), for the loader's
 * conversion and augmentation on the device. */
ug_dataset *byte_problem(uint64_t seed);
/* 3 epochs, batch 32 in 2 micro-batches, a validation split, a cosine
 * schedule with warm-up. */
ug_trainer_config mlp_config(void);
/* The parameters after fitting a trainer of c on data (NULL on a failure,
 * recorded); *stopped whether it stopped early (may be NULL). */
float *train_params(ug_device *dev, ug_dataset *data, const ug_trainer_config *c, int64_t *count, bool *stopped);

#endif
