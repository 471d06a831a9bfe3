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
    ug_dtype precision;       /* compute precision (ug_graph_set_precision) */
} mlp_config;

typedef struct mlp_graph {
    ug_graph *graph;
    ug_value *x, *y;          /* inputs: [batch, inputs] in the precision, i32 [batch] */
    ug_value *loss;           /* mean cross-entropy */
    /* Summed on the device over the runs until ug_graph_clear_sums: */
    ug_value *loss_sum;       /* loss x rows: the sum of the samples' losses */
    ug_value *correct_sum;    /* samples whose largest logit is at the label */
    int64_t batch;
} mlp_graph;

/* The model's forward pass and mean cross-entropy from x and y, as a
 * trainer's build function (config: the mlp_config). */
ug_status mlp_forward(ug_graph *graph, ug_value *x, ug_value *y, void *config, ug_trainer_outputs *out);

/* Builds the training graph (with its backward pass) for batches of up to
 * batch rows, as the trainer builds it for ug-train (ug-bench times it); parameters are created in the model on first use
 * ("fc1.weight", ...). Evaluation runs the same graph forward in eval
 * mode. Call mlp_finish to attach the optimizer and compile. */
ug_status mlp_build(ug_model *model, const mlp_config *config, int64_t batch, mlp_graph *out);
ug_status mlp_finish(mlp_graph *mlp, ug_optimizer *optimizer);
void mlp_free(mlp_graph *mlp);

/* Parses "500", "256,128" or "16x1024" (16 layers of 1024) into
 * config->hidden. */
bool mlp_parse_hidden(const char *text, mlp_config *config);
/* Parses "f32", "f16" or "bf16". */
bool mlp_parse_precision(const char *text, ug_dtype *precision);
/* The optimizer configuration's loss scaling for a precision: on for f16
 * (GradScaler's defaults), whose range small gradients fall out of. */
ug_loss_scaling mlp_loss_scaling(ug_dtype precision);

#endif
