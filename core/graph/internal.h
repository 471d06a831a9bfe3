/* The training graph's internal representation, shared by graph.c (building),
 * the op definitions (core/ops/), autograd.c (backward), update.c (the
 * optimizer's nodes), graph/check.c (numeric checks), graph/plan.c (fusion and memory
 * plan) and graph/run.c (replay and phases). */
#ifndef UG_CORE_GRAPH_INTERNAL_H
#define UG_CORE_GRAPH_INTERNAL_H

#include "core/model/internal.h"
#include "core/ops/op.h"
#include "unigrad/graph.h"
#include "unigrad/optim.h"

typedef struct graph_node graph_node;

typedef enum value_kind {
    VALUE_INPUT,     /* bound by the caller */
    VALUE_PARAM,     /* a model parameter */
    VALUE_GRAD,      /* a parameter's gradient: its own buffer, readable after a run */
    VALUE_TEMP,      /* planned into the arena */
    VALUE_ALIAS,     /* a reshape: a view of another value */
    VALUE_SUM,       /* ug_graph_accumulate: its own buffer, kept across runs */
    VALUE_PARAM_COPY, /* a parameter's half copy, the model's (graph/autocast.c) */
    VALUE_CONSTANT    /* ug_graph_constant: the graph's own copy, fixed */
} value_kind;


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
    /* A pipeline stage's graph: 1 + the stage whose value this was, set
     * aside (ug_graph_set_aside); 0: this graph's own. */
    int elsewhere;
    int uses;                 /* live nodes reading it */
    int last_use;             /* index of the last node reading it */
    size_t arena_offset;
};

/* One op of the step: its definition and parameters, inputs and results. */
/* Which part of a step a node belongs to (ug_graph_run_forward, ...). */
typedef enum graph_phase { PHASE_FORWARD, PHASE_BACKWARD, PHASE_UPDATE } graph_phase;

struct graph_node {
    ug_op op;
    graph_phase phase;
    bool dead;                /* never launched: fused, or a parameter's half copy */
    bool fused;               /* folded into the node producing its input, or into its group */
    /* The last node of a group (launch_group) launches the group's
     * members, itself included (NULL otherwise); group_ops and group_ins
     * are the launch's arguments, the inputs' tensors filled at each run. */
    graph_node **group;
    const ug_op **group_ops;
    const ug_tensor **group_ins;
    int group_count;
    ug_value *out;
    ug_value *in[UG_OP_MAX_INPUTS];
    int nin;
    /* The flags of numeric checks folded into its launch (UG_FOLD_CHECK),
     * launched as inputs nin, nin + 1; NULL: none. */
    ug_value *checks[UG_OP_MAX_CHECKS];
    /* A running sum folded into its launch (UG_FOLD_SUM),
     * launched as input nin + UG_OP_SUM_INPUT; NULL: none. */
    ug_value *sum;
    /* The values a comparison folded in (UG_FOLD_EQUALITY)
     * compares its result with, launched as input nin + UG_OP_MATCH_INPUT;
     * NULL: none. */
    ug_value *match;
    ug_value *scratch[UG_OP_MAX_OUTPUTS - 1]; /* saved or scratch results (ug_op_def) */
    int nscratch;
    float per_row_scale;      /* an accumulation (ADD_SCALED, or a sum folded in) whose alpha is this times the run's rows */
    int segment;              /* a recomputed segment (ug_graph_checkpoint), 0 if none */
    bool writes_cast;         /* a cast was folded in: out is written in its own dtype */
    bool input_cast;          /* autocast's cast of an input: a segment recomputation may take over */
    graph_node *origin;       /* a backward node: the forward node whose gradient it computes */
    /* The profiler's name for it (graph/labels.c), made on first use. */
    bool scoped;
    char scope[64];
    char label[144];
};

/* A bucket of gradient accumulators: ready_order[begin..end) are parts
 * of one flat f32 tensor, so one collective reduces them. */
typedef struct graph_bucket {
    ug_tensor *flat;
    int begin, end;
    int64_t elements;         /* with the parts' alignment gaps */
} graph_bucket;

/* A checked value (ug_graph_set_checks): its flag is flags[index]. */
typedef enum check_role { CHECK_NODE, CHECK_LOSS, CHECK_GRADIENT, CHECK_LOGITS } check_role;
enum { CHECK_MAX_NODES = 4 }; /* an f16 value's: zeroed, summed, widened, flagged */
typedef struct graph_check {
    ug_value *value;
    ug_value *flag;           /* bound to flags[index] while compiled */
    int node;                 /* the producing node's index, before checks were added */
    check_role role;
    graph_node *nodes[CHECK_MAX_NODES]; /* the nodes that make it, unless folded */
    int node_count;
    bool folded;              /* made by the kernels of the nodes that read or write the value */
} graph_check;

typedef struct graph_replay graph_replay;

struct ug_graph {
    ug_model *model;
    ug_device *device;
    /* What the ops' launches read of the graph (core/ops/op.h). */
    ug_run_state run;
    ug_dtype precision;       /* ug_graph_set_precision: f32, f16 or bf16 */
    bool autocasting;         /* adding autocast's casts, which are not autocast again */
    bool compiled;
    bool planned;             /* the plan is made (ug_graph_memory or compile): no more ops */
    bool has_backward;
    bool unfused;             /* ug_graph_set_fusion(g, false) */
    uint64_t runs;
    ug_value **values;
    int value_count, value_capacity;
    graph_node **nodes;
    int node_count, node_capacity;
    ug_value *loss;
    ug_optimizer *optimizer;
    /* The ranks whose gradients the update's norm (clipping, the loss
     * scaler's overflow) is over with this graph's (a pipeline's stages):
     * the sum of squares is summed over them (NULL: this graph's alone). */
    struct ug_comm *norm_comm;
    ug_storage *arena;
    ug_graph_memory_info memory;
    ug_check_mode check_mode;
    graph_check *checks;
    int check_count;
    bool checks_added;        /* the check nodes are in (once, even if compile is retried) */
    ug_tensor *flags;         /* f32 [check_count], 0 while every checked value is finite */
    graph_phase building;     /* the phase of nodes being added */
    graph_node *deriving;     /* during autograd: the forward node whose gradient is being added */
    /* Gradient accumulation (ug_graph_run_backward / ug_graph_run_update):
     * per parameter with a gradient (k, in value order), the sum of the
     * micro-batches', a part of a bucket (graph/buckets.c). */
    ug_tensor **accumulated;
    int accumulated_count;    /* parameters with a gradient */
    const ug_value **gradients; /* per k: the parameter's gradient value */
    /* Per k: the gradient's own buffer when the gradient lives in its
     * bucket part, so a first micro-batch needs no copy (NULL: a gradient
     * value shared with another parameter, copied into its part). */
    ug_tensor **own_buffers;
    bool gradients_in_buckets; /* those gradients' tensors view their parts now */
    bool accumulating;        /* in ug_graph_run_backward: the loss seed weights the rows */
    float gradient_rows;      /* the rows a micro-batch's gradient is weighted against */
    float full_batch_rows;    /* the planned rows: gradient_rows after each update */
    int *accumulate_after;    /* per k: the node after which its gradient is done with (-1: before any) */
    int *ready_order;         /* the k in the order backward finishes them */
    graph_bucket *buckets;
    int bucket_count;
    size_t bucket_first_bytes, bucket_bytes; /* 0: the defaults */
    uint64_t layout;          /* names this layout of the accumulators, unique in the process */
    int micro_batches;        /* summed since the last update */
    int64_t accumulated_rows; /* their rows: the update divides by it */
    int64_t accumulation_step; /* the optimizer's steps at the first of them */
    /* Replay (replay.c): the step captured once and replayed with one
     * launch on backends that capture. */
    graph_replay *replay;
    /* Inputs may be bound with fewer rows than declared: every value's
     * tensor then takes the shape its op infers from the rows bound. */
    bool shapes_fitted;       /* the tensors' shapes follow the inputs bound now */
    int64_t rows;             /* the run's rows: the first input's leading size */
    uint64_t checked_runs;    /* runs when the flags were last cleared */
    int segments;             /* recomputed segments marked */
    bool recompute_added;     /* their recompute nodes are in (once, even if compile is retried) */
    int recomputed;           /* nodes added to recompute them */
    /* A pipeline stage's graph (core/comm/pipeline_build.c): the values of
     * other stages, set aside so that the caller's handles stay valid, and
     * the stage told when an op reads one (its group then breaks). */
    ug_value **aside;
    int aside_count, aside_capacity;
    int stage;                /* this graph's stage (0 without a pipeline) */
    void (*cut_wrongly)(void *ctx, const char *why);
    void *cut_ctx;
};

/* The loss seed's weight (ug_run_state): a micro-batch accumulated
 * (ug_graph_run_backward) weights it by its share of a full batch's rows;
 * called wherever one of the three changes. */
static inline void ug_graph_weigh_seed(ug_graph *g)
{
    g->run.seed_weight = g->accumulating ? (float)g->rows / g->gradient_rows : 1.0f;
}

/* The value a reshape views (the value itself otherwise). */
static inline ug_value *ug_value_base(const ug_value *v)
{
    return v && v->kind == VALUE_ALIAS ? v->alias_of : (ug_value *)v;
}

/* What n's op is as a fold into another op's launch (ug_op_def's fold);
 * kind UG_FOLD_NONE: nothing. */
static inline ug_fold ug_node_fold(const graph_node *n)
{
    ug_fold f = {.kind = UG_FOLD_NONE};
    if (!n->op.def->fold || !n->op.def->fold(&n->op, &f))
        f.kind = UG_FOLD_NONE;
    return f;
}

/* Whether n's op takes f into its launch (ug_op_def's absorb). */
static inline bool ug_node_absorbs(graph_node *n, const ug_fold *f)
{
    return n->op.def->absorb && n->op.def->absorb(&n->op, f);
}

/* ug_graph_accumulate's node, sum += alpha * v (in[1]): the only one that
 * writes a running sum, into its first input. */
static inline bool ug_node_is_running_sum(const graph_node *n)
{
    return n->out && n->out->kind == VALUE_SUM && n->nin == 2 && n->in[0] == n->out;
}

/* graph.c */
ug_status ug_graph_new_value(ug_graph *g, value_kind kind, ug_dtype dtype, int ndim,
                             const int64_t *shape, ug_value **out);
ug_status ug_graph_add_node(ug_graph *g, const ug_op *op, ug_value *out, int nin,
                            ug_value *const *in, graph_node **node);
/* graph.c, for pipeline stages: the nodes, values and parameters made
 * since mark go (the model's initial values of later parameters stay
 * those of one device), except the inputs, and drop_input among them
 * too; the values are kept aside (their handles stay valid), of stage
 * `stage`, and an op reading one is refused. */
ug_status ug_graph_set_aside(ug_graph *g, ug_graph_mark mark, int stage, const ug_value *drop_input);
/* graph/autocast.c */
/* The inputs op reads in a mixed-precision graph, casts added as needed
 * (cast[i] is in[i] where none is). */
ug_status ug_autocast_inputs(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                             ug_value **cast);

/* autograd.c: the gradients of root, seeded by seed (a value of root's
 * shape; NULL: root is the loss, seeded as ug_graph_backward seeds it),
 * with respect to every parameter and to wanted (an input, or NULL),
 * whose gradient is then wanted->grad. */
ug_status ug_autograd_derive(ug_graph *g, ug_value *root, ug_value *seed, ug_value *wanted);
/* graph.c, for pipeline stages (core/comm/pipeline.c): ug_graph_backward
 * from root, seeded by seed as above, which also derives the gradient of
 * the input `input` (when not NULL) and keeps it readable in *input_grad. */
ug_status ug_graph_backward_stage(ug_graph *g, ug_value *root, ug_value *seed, ug_value *input,
                                  ug_value **input_grad);

/* graph/update.c */
/* Appends opt's update nodes: the step's gate, then each parameter's. */
ug_status ug_graph_append_updates(ug_graph *g, ug_optimizer *opt);

/* graph/plan.c */
ug_status ug_graph_plan(ug_graph *g);
/* Re-creates the views of reshaped values (of base, or of all when NULL),
 * shaped for the rows their base has now. */
ug_status ug_graph_refresh_aliases(ug_graph *g, const ug_value *base);

/* graph/check.c */
/* Adds the check nodes (once, even if compile is retried). */
ug_status ug_graph_add_checks(ug_graph *g);
/* Folds each check that a node's kernel can make into that node, its own
 * nodes then fused away (after fusion, which may change which node writes
 * a value). */
void ug_graph_fold_checks(ug_graph *g);
/* Allocates the flags (cleared) and binds the checks to them; release gives
 * them back. */
ug_status ug_graph_alloc_checks(ug_graph *g);
void ug_graph_release_checks(ug_graph *g);
void ug_graph_free_checks(ug_graph *g);

/* graph/recompute.c */
/* Inserts the recompute nodes of the recomputed segments (once). */
ug_status ug_graph_add_recompute(ug_graph *g);

/* graph/rows.c */
/* The input whose leading size is the batch's rows: the first used input
 * with any axis (NULL: none). */
const ug_value *ug_graph_batch_input(const ug_graph *g);
/* Before a run: the tensors' shapes for the rows bound (when they changed). */
ug_status ug_graph_fit_rows(ug_graph *g);
/* A reshape follows its base's tensor shape (fewer rows bound). */
ug_status ug_graph_fit_alias(ug_value *alias);

/* graph/run.c */
ug_status ug_graph_exec_node(ug_graph *g, graph_node *node);
/* ug_graph_run's phases (mask: a bit per graph_phase), replayed when the
 * device captures (replay.c), else launched node by node. */
ug_status ug_graph_run_step(ug_graph *g, unsigned mask, const char *op);
ug_status ug_graph_launch_phases(ug_graph *g, unsigned mask, const char *op);
ug_status ug_graph_make_replay(ug_graph *g);
void ug_graph_free_replay(ug_graph *g);
void ug_graph_free_group(graph_node *n);
/* A run done: runs + 1, on the host and the device. */
ug_status ug_graph_count_run(ug_graph *g);
/* Sets runs (a checkpoint's), on the host and the device. */
ug_status ug_graph_set_runs(ug_graph *g, uint64_t runs);
/* ug_graph_run_backward, calling ready(ctx, b) as soon as bucket b's
 * accumulation is launched (NULL: no calls); an error from it stops the
 * run and discards the accumulated micro-batches. */
typedef ug_status ug_bucket_ready_fn(void *ctx, int bucket);
ug_status ug_graph_run_backward_notify(ug_graph *g, ug_bucket_ready_fn *ready, void *ctx);
/* The rows the next run would take, after the checks a run makes. */
ug_status ug_graph_rows_to_run(ug_graph *g, const char *op, int64_t *rows);
/* A micro-batch's gradient is its mean's times its rows over rows (the
 * loss seed weights it): weighted against the rows of all the ranks' batch,
 * they add up to its mean, and the update divides by nothing. The
 * accumulated micro-batches are weighted again. */
ug_status ug_graph_weigh_gradients(ug_graph *g, float rows, const char *op);

/* graph/buckets.c */
/* The accumulators of the parameters' gradients (g->accumulated) in their
 * buckets, made on first use, all or none. memory, if not NULL, is asked
 * once for a block of the buckets' bytes: a storage the buckets are laid
 * in, or NULL for blocks of the device's pool (a data-parallel replica's
 * shared memory, comm/data_parallel.c). */
typedef ug_status ug_bucket_memory_fn(void *ctx, size_t bytes, ug_storage **out);
ug_status ug_graph_make_accumulators(ug_graph *g, ug_bucket_memory_fn *memory, void *ctx);
void ug_graph_free_accumulators(ug_graph *g);
/* Points the gradients that live in buckets at their parts (true) or at
 * their own buffers (false), where a later micro-batch's gradients go
 * before they are added in. */
ug_status ug_graph_place_gradients(ug_graph *g, bool in_buckets);
/* The buckets' sizes in bytes (0: the defaults, 1 MiB then 25 MiB), the
 * accumulators made again on next use; refused while micro-batches are
 * accumulated. */
ug_status ug_graph_set_buckets(ug_graph *g, size_t first_bytes, size_t bytes);

/* graph/labels.c */
/* The profiler's name of node: "fc1/matmul", "fc1/backward/matmul",
 * "fc1.weight/update/adam" (made on first use, then kept). */
const char *ug_graph_node_label(const ug_graph *g, graph_node *node);
/* Finds every node's scope, which labels use; before fusion rewires values. */
void ug_graph_find_scopes(const ug_graph *g);

#endif
