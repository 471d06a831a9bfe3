/* What ug-train prints and logs: the run's header, each epoch's line, the
 * CSV log's rows, and the time from the process's start. */
#ifndef UG_TOOLS_TRAIN_REPORT_H
#define UG_TOOLS_TRAIN_REPORT_H

#include <stdio.h>

#include "train_data.h"
#include "train_options.h"

/* "batch size auto: ..." when the trainer searched; the device, the model,
 * the step's plan and, when resumed, where the run stands. */
void report_header(const train_options *o, ug_trainer *trainer, ug_device *device, const train_data *data);
/* "epoch N: train loss ..." and, in f16, the loss scaler's state. */
void report_epoch(const ug_trainer *trainer, const ug_trainer_epoch *e, const ug_trainer_metrics *test);

/* The CSV log's rows: each column means one thing in every row, empty
 * where it does not apply. Accuracies in percent. */
void csv_step(FILE *csv, const ug_trainer_step *s, float loss);
void csv_epoch(FILE *csv, const ug_trainer_epoch *e, const ug_trainer_metrics *test, int64_t steps,
               int64_t global_step, float lr);

/* Seconds since this process started (loading the library and finding
 * the devices included); -1 where /proc is not. */
double seconds_since_process_start(void);

#endif
