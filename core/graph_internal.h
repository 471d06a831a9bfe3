/* The training graph's internal representation, shared by graph.c (building),
 * autograd.c (backward), optim.c (update nodes), graph_plan.c (fusion and
 * memory plan) and graph_run.c (replay). */
#ifndef UG_CORE_GRAPH_INTERNAL_H
#define UG_CORE_GRAPH_INTERNAL_H

#include "core/exec.h"
#include "unigrad/graph.h"
#include "unigrad/optim.h"

typedef enum value_kind {
    VALUE_INPUT,     /* bound by the caller */
    VALUE_PARAM,     /* a model parameter */
    VALUE_GRAD,      /* a parameter's gradient: its own buffer, readable after a run */
    VALUE_TEMP,      /* planned into the arena */
    VALUE_ALIAS      /* a reshape: a view of another value */
} value_kind;

typedef enum node_kind {
    NODE_BINARY,          /* y = post(a op b) */
    NODE_UNARY,           /* y = f(x) */
    NODE_EXPAND,          /* y = alpha * x broadcast to y's shape */
    NODE_MATMUL,
    NODE_REDUCE,
    NODE_SOFTMAX,
    NODE_TRANSPOSE,
    NODE_FILL,            /* y = beta */
    NODE_DROPOUT_MASK,    /* y = uniform [0,1) drawn fresh each run */
    NODE_XENT,            /* y = mean cross-entropy (scratch: per-row losses) */
    NODE_XENT_GRAD,       /* y = d loss / d logits; in: logits, labels, dloss */
    NODE_LAYERNORM,       /* y; in: x, gamma, beta; saves mean, rstd */
    NODE_LAYERNORM_GRAD,  /* dx; in: dy, x, mean, rstd, gamma */
    NODE_OPTIM            /* updates in[0] (param) from in[1] (grad) */
} node_kind;

enum { NODE_MAX_INPUTS = 6 };

typedef struct graph_node graph_node;

struct ug_value {
    ug_graph *graph;
    int id;
    value_kind kind;
    ug_dtype dtype;
    int ndim;
    int64_t shape[UG_MAX_DIMS];
    char name[64];
    graph_node *producer;     /* NULL for inputs and parameters */
    ug_value *alias_of;       /* VALUE_ALIAS */
    ug_value *grad;           /* during backward: the accumulated gradient */
    ug_tensor *tensor;        /* after compile (inputs: after bind) */
    ug_tensor *param;         /* VALUE_PARAM: the model's tensor */
    bool keep;                /* readable after a run */
    bool needs_grad;          /* backward: a parameter's gradient flows through it */
    int uses;                 /* live nodes reading it */
    int last_use;             /* index of the last node reading it */
    size_t arena_offset;
};

struct graph_node {
    node_kind kind;
    bool dead;                /* removed by fusion */
    ug_value *out;
    ug_value *in[NODE_MAX_INPUTS];
    int nin;
    ug_value *scratch[2];     /* extra outputs (xent rows; layernorm mean, rstd) */
    union {
        struct { ug_binary_kind op; ug_unary_kind post; float alpha; } binary;
        struct { ug_unary_kind op; float alpha, beta; } unary;
        struct { bool ta, tb; } matmul;
        struct { ug_reduce_kind op; int64_t outer, len, inner; int axis; /* -1: all */ } reduce;
        struct { bool log; } softmax;
        struct { float smoothing; } xent;
        struct { float eps; } layernorm;
        struct { int param_index; } optim;
        struct { uint64_t stream; } dropout;
    } p;
};

struct ug_graph {
    ug_model *model;
    ug_device *device;
    bool training;
    bool compiled;
    bool has_backward;
    uint64_t seed;
    uint64_t runs;
    uint64_t dropout_streams;
    ug_value **values;
    int value_count, value_capacity;
    graph_node **nodes;
    int node_count, node_capacity;
    ug_value *loss;
    ug_optimizer *optimizer;
    ug_value *grad_scale;     /* global-norm clipping factor, or NULL */
    ug_storage *arena;
    ug_graph_memory_info memory;
};

/* graph.c */
ug_status ug_graph_new_value(ug_graph *g, value_kind kind, ug_dtype dtype, int ndim,
                             const int64_t *shape, ug_value **out);
ug_status ug_graph_add_node(ug_graph *g, node_kind kind, ug_value *out, int nin,
                            ug_value *const *in, graph_node **node);
/* A node whose output has the given shape and dtype. */
ug_status ug_graph_op(ug_graph *g, node_kind kind, ug_dtype dtype, int ndim, const int64_t *shape,
                      int nin, ug_value *const *in, graph_node **node);
ug_status ug_g_binary(ug_graph *g, ug_binary_kind op, float alpha, ug_value *a, ug_value *b,
                      ug_value **out);
ug_status ug_g_unary(ug_graph *g, ug_unary_kind op, float alpha, float beta, ug_value *x,
                     ug_value **out);
ug_status ug_g_reduce_axes(ug_graph *g, ug_value *x, ug_reduce_kind op, int axis, bool all,
                           bool keepdim, ug_value **out);
/* alpha * x broadcast to shape. */
ug_status ug_g_expand(ug_graph *g, ug_value *x, float alpha, int ndim, const int64_t *shape,
                      ug_value **out);
ug_status ug_g_fill(ug_graph *g, float value, int ndim, const int64_t *shape, ug_value **out);
ug_status ug_graph_check_open(const ug_graph *g, const char *op);

/* autograd.c */
ug_status ug_autograd_derive(ug_graph *g, ug_value *loss);

/* optim.c */
ug_status ug_optim_append(ug_graph *g, ug_optimizer *opt);
/* Fills the update arguments for the next step (host values only). */
void ug_optim_fill_args(const ug_optimizer *opt, int param_index, ug_optim_args *args);
void ug_optim_step_done(ug_optimizer *opt);
ug_model *ug_optimizer_model(const ug_optimizer *opt);

/* graph_plan.c */
ug_status ug_graph_plan(ug_graph *g);
/* Re-creates the views of reshaped values (of base, or of all when NULL). */
ug_status ug_graph_refresh_aliases(ug_graph *g, const ug_value *base);

/* graph_run.c */
ug_status ug_graph_exec_node(ug_graph *g, graph_node *node);

/* model.c */
int ug_model_param_index(const ug_model *model, const ug_tensor *param);

#endif
