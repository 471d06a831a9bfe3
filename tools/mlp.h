/* The multilayer perceptron that ug-train trains and ug-bench times. */
#ifndef UG_TOOLS_MLP_H
#define UG_TOOLS_MLP_H

#include "unigrad/unigrad.h"

enum { MLP_MAX_HIDDEN = 8 };

typedef enum mlp_activation { MLP_RELU = 0, MLP_GELU, MLP_TANH, MLP_SIGMOID } mlp_activation;

typedef struct mlp_config {
    int64_t inputs, classes;
    int hidden_count;
    int64_t hidden[MLP_MAX_HIDDEN];
    mlp_activation activation;
    float dropout;
    float label_smoothing;
} mlp_config;

typedef struct mlp_graph {
    ug_graph *graph;
    ug_value *x, *y;          /* inputs: f32 [batch, inputs], i32 [batch] */
    ug_value *loss;           /* mean cross-entropy */
    ug_value *loss_sum;       /* loss x rows summed over the runs (ug_graph_accumulate) */
    ug_value *prediction;     /* i32 [batch]: argmax of the logits (eval graphs) */
    int64_t batch;
} mlp_graph;

/* Builds the graph for one batch size; parameters are created in the model
 * on first use ("fc1.weight", ...). A training graph gets its backward pass;
 * call mlp_finish to attach the optimizer (NULL for eval) and compile. */
ug_status mlp_build(ug_model *model, const mlp_config *config, int64_t batch, bool training,
                    mlp_graph *out);
ug_status mlp_finish(mlp_graph *mlp, ug_optimizer *optimizer);
void mlp_free(mlp_graph *mlp);

/* Parses "500" or "256,128" into config->hidden. */
bool mlp_parse_hidden(const char *text, mlp_config *config);

#endif
