/* ug-train's data: IDX files (Fashion-MNIST's by default), a seeded
 * validation split, standardised with the training part's statistics. */
#ifndef UG_TOOLS_TRAIN_DATA_H
#define UG_TOOLS_TRAIN_DATA_H

#include "train_options.h"

typedef struct train_data {
    ug_dataset *train, *val, *test; /* val NULL without --val-split */
} train_data;

/* 0, or 1 with the reason on stderr (partly loaded sets freed). */
int train_data_load(const train_options *o, train_data *out);
void train_data_free(train_data *d);

#endif
