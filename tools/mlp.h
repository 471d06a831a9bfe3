/* The models that ug-train trains and ug-bench times: the multilayer
 * perceptron and the small convolutional network. */
#ifndef UG_TOOLS_MLP_H
#define UG_TOOLS_MLP_H

#include "unigrad/unigrad.h"

enum { MLP_MAX_HIDDEN = 32 };

/* Returns a failed call's status from the calling function (the message
 * stays in ug_last_error). */
#define TRY(call)                      \
    do {                               \
        ug_status try_ = (call);       \
        if (try_ != UG_OK)             \
            return try_;               \
    } while (0)

typedef enum mlp_activation { MLP_RELU = 0, MLP_GELU, MLP_TANH, MLP_SIGMOID } mlp_activation;

typedef struct mlp_config {
    int64_t inputs, classes;
    /* The convolutional network instead of the hidden layers, on square
     * one-channel images of inputs pixels: conv 32 (3x3, padding 1) + batch
     * norm + ReLU + max-pool 2, conv 64 (the same), flatten, linear 128 +
     * ReLU + dropout, linear classes. */
    bool cnn;
    int hidden_count;
    int64_t hidden[MLP_MAX_HIDDEN];
    mlp_activation activation;
    float dropout;
    float label_smoothing;
    bool checkpoint;          /* each hidden layer a checkpointed segment */
    /* Pipeline stages (ug-train --stages): the layers split into this many
     * parts, a boundary (ug_pipeline_boundary) after each part; 0 or 1:
     * none. The MLP's layers (its hidden layers and the output layer) are
     * spread evenly; the CNN's parts end after each conv block and fc1. */
    int stages;
    ug_dtype precision;       /* compute precision: the trainer's (ug_trainer_config.precision) */
} mlp_config;

/* The model's forward pass and mean cross-entropy from x and y, as a
 * trainer's build function (config: the mlp_config), for ug-train's
 * trainer and ug-bench's steps (ug_train_step): the parameters are created
 * in the model on first use ("fc1.weight", ...), the metrics' sums and
 * backward are the trainer's. */
ug_status mlp_forward(ug_graph *graph, ug_value *x, ug_value *y, void *config, ug_trainer_outputs *out);

/* Parses "500", "256,128" or "16x1024" (16 layers of 1024) into
 * config->hidden. */
bool mlp_parse_hidden(const char *text, mlp_config *config);
/* The most stages config's model can be split into. */
int mlp_max_stages(const mlp_config *config);
/* Parses "f32", "f16" or "bf16". */
bool mlp_parse_precision(const char *text, ug_dtype *precision);

#endif
