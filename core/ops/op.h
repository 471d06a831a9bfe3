/* One definition per op, and the one point where kernels are dispatched.
 *
 * An op is defined once (a ug_op_def in core/ops/<family>.c): how it infers
 * the shape and dtype of its result from its inputs' (with every check and
 * overflow-checked element counts), how it launches its kernels into
 * tensors that exist, and how it adds its gradient to a graph. The eager
 * functions of ops.h run a definition on tensors (ug_op_eager) and the graph
 * functions of graph.h add it as a node (ug_op_graph), so the two cannot
 * disagree: they share one inference and one launch.
 *
 * Every kernel call goes through ug_dispatch (core/runtime/dispatch.c). */
#ifndef UG_CORE_OP_H
#define UG_CORE_OP_H

#include "core/runtime/dispatch.h"
#include "core/runtime/internal.h"
#include "unigrad/graph.h"

/* What inference sees of an operand: a tensor's or a graph value's. */
typedef struct ug_meta {
    ug_dtype dtype;
    int ndim;
    int64_t shape[UG_MAX_DIMS];
} ug_meta;

/* An op's results: out[0] is the result; out[1..] are values it saves for
 * its backward (layernorm's mean and rstd) or scratch (f16 matmul's f32
 * copies), which eager calls free and graphs plan like any value. */
enum { UG_OP_MAX_INPUTS = 8, UG_OP_MAX_OUTPUTS = 4 };

typedef struct ug_op ug_op;

/* What an op's launch reads of the graph running it, owned and kept
 * current by the graph (core/graph/): ops know nothing else of graphs. */
typedef struct ug_run_state {
    bool training;    /* ug_graph_set_training: batch norm's statistics, dropout's masks */
    uint64_t seed;    /* ug_graph_set_seed: dropout's key */
    /* f32 [1] on the device with dropout: runs modulo UG_RANDOM_RUN_PERIOD,
     * which the masks read there (ug_graph_count_run keeps it in step). */
    ug_tensor *run_count;
    /* The backward pass's first gradient, d loss / d loss: seed_weight
     * times the one-element loss_scale on the device (NULL: times 1). */
    float seed_weight;
    const ug_tensor *loss_scale;
    uint64_t dropout_streams; /* dropout masks added: each draws from its own stream */
    /* The first stream of this graph's masks: a pipeline stage's graph
     * draws the streams the model's earlier stages leave to it, so its
     * masks are those of the whole model on one device. */
    uint64_t first_dropout_stream;
    /* A forward pass that a backward pass will recompute (a pipeline
     * stage's): batch norm leaves its running statistics to that one. */
    bool hold_statistics;
} ug_run_state;

/* The Philox key of a graph's dropout masks (ug_g_dropout's and fused
 * attention's) for its seed; mask k draws counters from k << 32. */
uint64_t ug_dropout_key(uint64_t graph_seed);

/* What the optimizer's ops (core/ops/optim.c) read of the optimizer, owned
 * by it (core/model/optimizer.c) and fixed at its creation. */
typedef struct ug_optim_source {
    ug_optim_args shared;        /* the update's kind and hyperparameters, no tensors */
    ug_step_rule rule;           /* the step's (kernels/common/optim_step.h) */
    const ug_tensor *step_state; /* f32 [UG_STEP_STATE_SIZE]: the step counts and loss scaler */
    ug_tensor *const *state;     /* [param * slots + slot] */
    int slots;
    /* [param]: each parameter's group's weight decay and rate scale
     * (optim.h's parameter groups), carried by its update's arguments. */
    const float *weight_decay, *lr_scale;
    /* Parameter index's half copy, NULL when none: made on first use, so
     * asked at every launch. */
    const ug_tensor *(*half_copy)(const void *model, int index);
    const void *model;
    /* [param], NULL unless the state is sharded: the part of each
     * parameter this rank updates, elements [begin, begin + count). */
    const int64_t *shard_begin, *shard_count;
} ug_optim_source;

/* What an op's backward function sees of its node in a graph. */
typedef struct ug_op_node {
    const ug_op *op;
    ug_value *const *in;
    int nin;
    ug_value *out;
    ug_value *const *saved; /* its other results (see UG_OP_MAX_OUTPUTS) */
    int nsaved;
} ug_op_node;

/* How the forward pass of a mixed-precision graph feeds an op
 * (graph/autocast.c has PyTorch autocast's lists). */
typedef enum ug_autocast_class {
    UG_AUTOCAST_KEEP = 0, /* inputs as given */
    UG_AUTOCAST_HALF,     /* float operands in the graph's half dtype */
    UG_AUTOCAST_F32,      /* half operands widened to f32 */
    UG_AUTOCAST_FOLLOW    /* operands' dtype; mixed half and f32 promote */
} ug_autocast_class;

/* What a graph's numeric checks (ug_graph_set_checks) look at. */
typedef enum ug_check_role {
    UG_CHECKED_RESULT = 0, /* the result, when every node is checked */
    UG_CHECKED_NEVER,      /* results no check looks at: masks, chosen constants */
    UG_CHECKED_LOGITS      /* the result, and the first input as a loss's logits */
} ug_check_role;

/* A check's operand for an op's result (UG_FOLD_CHECK); up to
 * UG_OP_MAX_CHECKS checks fold into one op. A running sum folded in
 * (UG_FOLD_SUM) is the launch's input nin + UG_OP_SUM_INPUT, the value an
 * equality test folded in compares with (UG_FOLD_EQUALITY) its input
 * nin + UG_OP_MATCH_INPUT. */
enum {
    UG_CHECKED_OPERAND_RESULT = -1,
    UG_OP_MAX_CHECKS = 2,
    UG_OP_SUM_INPUT = UG_OP_MAX_CHECKS,
    UG_OP_MATCH_INPUT = UG_OP_SUM_INPUT + 1
};

/* An elementwise op of two operands with an activation after, as one op
 * applies it to the result of another: y = post(r op x) with r the
 * result, or post(x op r) where first (x is op's first operand). */
typedef struct ug_pair {
    bool on, first;
    ug_binary_kind op;
    float alpha;
    ug_unary_kind post;
} ug_pair;

/* What a graph's fusion (graph/plan.c, graph/check.c) can fold into the
 * launch of the op that writes (or reads) a value, so that the node it
 * stands for costs no launch. An op says what it is as a fold (ug_op_def's
 * fold: an activation, a pair, a cast, a seed; a pair of UG_BINARY_EQUAL
 * with no activation is also an equality test) and which folds it takes
 * (absorb). */
typedef enum ug_fold_kind {
    UG_FOLD_NONE = 0,
    /* y = post(x): an activation, a unary op whose formula reads only x */
    UG_FOLD_ACTIVATION,
    /* y = post(a op b) with alpha, of two inputs of the result's dtype:
     * taken with the other operand as the launch's input nin (a vector of
     * the result's last axis, or of its shape) */
    UG_FOLD_PAIR,
    /* y = x in another float dtype: taken, the launch writes its result in
     * whatever float dtype it is given, its value rounded once */
    UG_FOLD_CAST,
    /* Taken only: y = (a == b) as 1 or 0 (see above); the launch writes,
     * in place of each element r of its f32 result, whether r equals the
     * same element of its input nin + UG_OP_MATCH_INPUT (i32 or f32,
     * compared as f32) */
    UG_FOLD_EQUALITY,
    /* y = the backward pass's first gradient: taken from run in place of
     * the launch's input `input`, which it no longer reads */
    UG_FOLD_SEED,
    /* Taken only: a running sum of the result's shape, its input
     * nin + UG_OP_SUM_INPUT, to which the launch adds op->sum_alpha times
     * its f32 result as it writes it (ug_graph_accumulate) */
    UG_FOLD_SUM,
    /* Taken only, without changing op: a numeric check of operand `input`
     * (an input's index or UG_CHECKED_OPERAND_RESULT) the launch makes as
     * it reads or writes the values anyway, its flag being its input
     * nin + *slot (f32 [], set to NaN when a value is NaN or infinite) */
    UG_FOLD_CHECK
} ug_fold_kind;

typedef struct ug_fold {
    ug_fold_kind kind;
    ug_pair pair;            /* PAIR (on), and ACTIVATION's activation in post */
    int input;               /* SEED, CHECK */
    const ug_run_state *run; /* SEED */
    int *slot;               /* CHECK: where absorb writes the slot */
} ug_fold;

typedef struct ug_op_def {
    const char *family;  /* names the op in messages when the instance does not */
    /* Checks the inputs and writes the metas of the results; *nout >= 1. */
    ug_status (*infer)(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout);
    /* Queues the kernels; every tensor exists with its inferred meta. in
     * has UG_OP_MAX_INPUTS entries: the op's own, then what folds taken
     * add (ug_fold_kind), NULL where none. */
    ug_status (*launch)(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in);
    /* Adds to the graph the gradients of n's inputs given gy, the gradient
     * of its result (see ug_grad_give); NULL: not differentiable. */
    ug_status (*backward)(ug_graph *g, const ug_op_node *n, ug_value *gy);
    /* The inputs' names for messages ("x", "weight"); NULL: x for one
     * input, else a, b, c, ... */
    const char *inputs[UG_OP_MAX_INPUTS];

    /* ---- traits: all the graph passes know of an op (none asks which op
     * it has); NULL or 0 is the plain answer ---- */
    /* Mixed precision: how autocast feeds it. NULL: UG_AUTOCAST_KEEP. */
    ug_autocast_class (*autocast)(const ug_op *op);
    ug_check_role check_role;
    /* What it is as a fold into another op's launch (*f; false: nothing). */
    bool (*fold)(const ug_op *op, ug_fold *f);
    /* Takes f into its launch (ug_fold_kind says how); false: it cannot,
     * and op is unchanged. */
    bool (*absorb)(ug_op *op, const ug_fold *f);
    /* Neighbouring nodes of this op in one phase run as one launch
     * (graph/plan.c groups them): ops[i]'s inputs are
     * ins[i * UG_OP_MAX_INPUTS ...]. */
    ug_status (*launch_group)(const ug_op *const *ops, const ug_tensor *const *ins, int count);
    /* A copy run again in the backward pass (activation recomputation)
     * leaves state the forward already changed alone. */
    void (*for_recompute)(ug_op *op);
    /* Its name in profiles where the instance's name says less ("relu",
     * "add+relu", "adam"). NULL: the name, less a leading "graph ". */
    void (*describe)(const ug_op *op, char *out, size_t len);
} ug_op_def;

/* Autocast classes shared by definitions. */
ug_autocast_class ug_autocast_half(const ug_op *op);
ug_autocast_class ug_autocast_f32(const ug_op *op);
ug_autocast_class ug_autocast_follow(const ug_op *op);
/* Takes a cast and nothing else (ug_op_def's absorb). */
bool ug_absorbs_cast(ug_op *op, const ug_fold *f);

struct ug_op {
    const ug_op_def *def;
    const char *name; /* "add", "graph matmul": messages start with it */
    float sum_alpha;  /* a running sum folded in (UG_FOLD_SUM) adds this times the result */
    union {
        struct { ug_unary_kind op; float alpha, beta; } unary;
        struct { ug_binary_kind op; ug_unary_kind post; float alpha; } binary;
        struct { ug_dtype dtype; } cast;
        /* also fill. A graph's expand follows like's shape when rows change
         * (ug_graph_bind), and with mean its alpha is 1 / the elements
         * each input element spreads over. */
        struct { float alpha; int ndim; int64_t shape[UG_MAX_DIMS]; const ug_value *like; bool mean; } expand;
        /* an elementwise pair folded in (UG_FOLD_PAIR), its operand input 2; e.on: one */
        struct { bool ta, tb; ug_pair e; } matmul;
        /* compares: an equality test of argmax's index folded in (UG_FOLD_EQUALITY);
         * post: an activation of the results folded in (UG_FOLD_ACTIVATION) */
        struct { ug_reduce_kind op; int axis; bool all, keepdim, compares; ug_unary_kind post; } reduce;
        struct { bool log; } softmax;
        struct { bool normal; float p0, p1; uint64_t seed, offset; } random;
        struct { const ug_run_state *run; uint64_t stream; float p; } dropout;
        /* seed: the graph whose backward pass's first gradient the
         * gradient's launch takes (UG_FOLD_SEED); NULL: its input's.
         * ignore: rows whose label is ignore_index count for nothing. */
        struct { float smoothing; bool ignore; int64_t ignore_index; const ug_run_state *seed; } xent;
        /* rms: RMSNorm (no mean, no beta); gamma, beta: those inputs
         * given (x's, then gamma's, then beta's: no beta without gamma);
         * terms: the gradient also gives dy * xhat, gamma's terms */
        struct { float eps; bool rms, gamma, beta, terms; } layernorm;
        struct { const ug_optim_source *source; int param_index; } optim;
        /* a sum over a communicator's ranks (core/comm/graph_sum.c) */
        struct { struct ug_comm *comm; } collective;
        /* the backward pass's first gradient: 1, or the loss scale */
        struct { const ug_run_state *run; int ndim; int64_t shape[UG_MAX_DIMS]; } seed;
        /* a gradient op's win also holds the forward's image and kernel
         * size; device (NULL: not known) says whether a library runs it and
         * whether im2col goes in chunks */
        struct { ug_window2d win; int groups; bool bias; ug_device *device; } conv;
        /* a window op's geometry (pooling, upsampling; pooling's kind) */
        struct { ug_pool2d_kind kind; ug_window2d win; } window;
        /* ops along one axis (core/ops/index.c, core/ops/shape.c): take's
         * and its gradient's (size: the taken axis's length), slice's and
         * its gradient's (start, size: the sliced axis's length, or like's
         * along axis as bound now when like is set), concat's; permute's
         * order of `axis` axes */
        struct { int axis; int64_t start, size; int order[UG_MAX_DIMS]; const ug_value *like; } layout;
        /* fused attention (core/ops/attention.c); scale resolved (> 0);
         * packed_heads > 0: q, k and v in one tensor, with that many heads;
         * dropout > 0: under key seed from counter 0 (eager), or in a graph
         * (run set) its masks' key from counter offset */
        struct {
            bool causal;
            float scale, dropout;
            int64_t packed_heads;
            uint64_t seed, offset;
            const ug_run_state *run;
        } attention;
        /* training is the graph's mode when graph is set; recomputed copies
         * (recomputation) leave the running statistics alone */
        /* relu: a following ReLU fused in (graph/plan.c) */
        struct { const ug_run_state *run; bool training, update_running, relu; float momentum, eps; } batchnorm;
    } p;
};

/* ---- running a definition ---- */

/* Runs op eagerly on tensors of one device: a new result in *out. */
ug_status ug_op_eager(const ug_op *op, int nin, const ug_tensor *const *in, ug_tensor **out);
/* The same with each float input i first cast to want[i] where it differs
 * (UG_AS_GIVEN: taken as given), and the result cast back to in[0]'s
 * dtype, for ops whose operands must share a dtype or be f32 (a
 * convolution's x and weight, batch norm's parameters). */
#define UG_AS_GIVEN UG_DTYPE_COUNT /* a want[i] that casts nothing */
/* Whether a value of dtype have is cast for want: a float not already in it. */
bool ug_needs_cast(ug_dtype have, ug_dtype want);
ug_status ug_op_eager_cast(const ug_op *op, int nin, const ug_tensor *const *in,
                           const ug_dtype *want, ug_tensor **out);
ug_meta ug_meta_of_tensor(const ug_tensor *t);
/* The definition's inference with its checks; *nout results. */
ug_status ug_op_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout);
/* The op's name in messages, and its input i's (of nin). */
const char *ug_op_name(const ug_op *op);
const char *ug_op_input_name(const ug_op *op, int nin, int i);

/* ---- what a graph gives the ops (core/graph/), which know nothing else
 * of graphs: adding an op, its gradient, and the values' metas ---- */

/* Adds op to g: a new node whose result is *out. On failure the graph is
 * left exactly as it was. */
ug_status ug_op_graph(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                      ug_value **out);
/* ug_op_eager_cast's graph form; the casts' gradients pass back to the
 * inputs. */
ug_status ug_op_graph_cast(ug_graph *g, const ug_op *op, int nin, ug_value *const *in,
                           const ug_dtype *want, ug_value **out);
/* Everything added after a mark can be taken back, so a call that fails
 * part way leaves the graph (and the model's parameters) as they were. */
typedef struct ug_graph_mark {
    int values, nodes, params;
} ug_graph_mark;
ug_graph_mark ug_graph_mark_now(const ug_graph *g);
void ug_graph_rollback(ug_graph *g, ug_graph_mark mark);

/* A value's meta as bound now: its tensor's shape, else the planned one
 * (graph/rows.c). */
ug_meta ug_value_meta_now(const ug_value *v);
ug_status ug_g_fill(ug_graph *g, float value, int ndim, const int64_t *shape, ug_value **out);
/* The graph still takes ops (not planned yet). */
ug_status ug_graph_check_open(const ug_graph *g, const char *op);
/* A value given to op as arg: not NULL, of this graph. */
ug_status ug_graph_check_value(const ug_graph *g, const ug_value *v, const char *op, const char *arg);

/* A value's dtype and shape as planned. */
ug_meta ug_value_meta(const ug_value *v);
/* Result k + 1 of the op whose result is v (ug_op_node's saved[k]). */
ug_value *ug_saved_of(const ug_value *v, int k);
/* Whether v is a model parameter (ug_graph_param). */
bool ug_value_is_param(const ug_value *v);
/* The graph's device, and its precision (ug_graph_set_precision). */
ug_device *ug_graph_device(const ug_graph *g);
ug_dtype ug_graph_precision(const ug_graph *g);
/* The graph's state its ops' launches read (ug_run_state). */
ug_run_state *ug_graph_run_state(ug_graph *g);
/* Adds grad (shaped like a broadcast result) to operand's gradient, summed
 * back to operand's shape; nothing when no parameter's gradient flows
 * through operand. For the definitions' backward functions. */
ug_status ug_grad_give(ug_graph *g, ug_value *operand, ug_value *grad);
bool ug_grad_needed(const ug_value *v);

/* Internal graph ops, each a node of one definition (core/ops/). */
ug_status ug_g_binary(ug_graph *g, ug_binary_kind op, float alpha, ug_value *a, ug_value *b,
                      ug_value **out);
ug_status ug_g_unary(ug_graph *g, ug_unary_kind op, float alpha, float beta, ug_value *x,
                     ug_value **out);
ug_status ug_g_reduce_axes(ug_graph *g, ug_value *x, ug_reduce_kind op, int axis, bool all,
                           bool keepdim, ug_value **out);
/* x broadcast to like's shape; with mean, divided by the elements each of
 * x's spreads over (a mean's gradient). */
ug_status ug_g_expand(ug_graph *g, ug_value *x, const ug_value *like, bool mean, ug_value **out);
/* Sets an expand's target to shape (like's shape for the rows bound now). */
void ug_expand_follow(ug_op *op, int ndim, const int64_t *shape, int64_t input_numel);
ug_status ug_g_fill(ug_graph *g, float value, int ndim, const int64_t *shape, ug_value **out);

/* Shared inference pieces. */
ug_status ug_infer_float(const ug_op *op, const ug_meta *m, const char *arg);
/* Refuses anything but f32 (ops that compute and keep state in f32). */
ug_status ug_infer_f32(const ug_op *op, const ug_meta *m, const char *arg);
ug_status ug_infer_same_dtype(const ug_op *op, const ug_meta *a, const ug_meta *b);
/* x is float images [N, C, H, W]. */
ug_status ug_infer_images(const ug_op *op, const ug_meta *x);
/* win's oh and ow from its input and window, or an error naming the op when
 * the window has no output. */
ug_status ug_window_outputs(const ug_op *op, ug_window2d *win);
/* win's n, c, h, w from an image shape [N, C, H, W]. */
void ug_window_take_image(ug_window2d *win, const int64_t *shape);
/* axis of ndim axes (negative counts from the end) as an index, or an
 * error naming the op. */
ug_status ug_resolve_axis(const ug_op *op, int ndim, int axis, int *out);
/* The product of shape[from, to): the outer or inner size around an axis. */
int64_t ug_shape_span(const int64_t *shape, int from, int to);
ug_status ug_broadcast_shape(int a_ndim, const int64_t *a_shape, int b_ndim, const int64_t *b_shape,
                             const char *op, int *ndim, int64_t *out);

/* ---- launch helpers shared by the definitions (arguments valid) ---- */

/* y = post(a op b) with broadcasting; y has the broadcast shape. */
ug_status ug_launch_binary(const char *op, ug_binary_kind kind, ug_unary_kind post, float alpha,
                           ug_tensor *y, const ug_tensor *a, const ug_tensor *b);
/* y = f(x at the strided position of each element of y): x read through
 * strides (in elements, 0 for a broadcast axis) over y's shape as ndim
 * sizes; shape and strides are collapsed in place. */
ug_status ug_launch_strided_unary(const char *op, ug_unary_kind kind, float alpha, float beta,
                                  ug_tensor *y, const ug_tensor *x, int ndim, int64_t *shape,
                                  int64_t *strides);
/* y = f(x), same element count, contiguous. */
ug_status ug_launch_unary(const char *op, ug_unary_kind kind, float alpha, float beta,
                          ug_tensor *y, const ug_tensor *x);
/* What a graph folds into a reduction's launch, each NULL or: check, a
 * numeric check's flag for the results (f32 y); sum, a running sum that
 * the results, times sum_alpha, are added into (f32 y); match, the values
 * argmax's index is compared with (y then 1 where equal, else 0); and
 * post, an activation of the results (UG_UNARY_COPY: none). */
typedef struct ug_reduce_folds {
    const ug_tensor *check, *sum, *match;
    float sum_alpha;
    ug_unary_kind post;
} ug_reduce_folds;
/* x [outer, len, inner] reduced over len into y; folds: NULL, or what is
 * folded in. */
ug_reduce_args ug_reduce_args_of(ug_reduce_kind kind, ug_tensor *y, const ug_tensor *x, int64_t outer,
                                 int64_t len, int64_t inner, const ug_reduce_folds *folds);
ug_status ug_launch_reduce(const char *op, ug_reduce_kind kind, ug_tensor *y, const ug_tensor *x,
                           int64_t outer, int64_t len, int64_t inner, const ug_reduce_folds *folds);
/* runs: NULL, or a graph's run count on the device (ug_random_args.runs). */
ug_status ug_launch_random(const char *op, bool normal, float p0, float p1, uint64_t seed,
                           uint64_t offset, const ug_tensor *runs, ug_tensor *y);

/* ---- the definitions ---- */

extern const ug_op_def ug_op_unary, ug_op_binary, ug_op_cast, ug_op_expand, ug_op_fill,
    ug_op_matmul, ug_op_reduce, ug_op_softmax, ug_op_random,
    ug_op_dropout_mask, ug_op_dropout, ug_op_cross_entropy, ug_op_cross_entropy_grad, ug_op_layernorm,
    ug_op_layernorm_grad, ug_op_optimizer, ug_op_optimizer_step, ug_op_loss_seed, ug_op_conv2d,
    ug_op_conv2d_dx, ug_op_conv2d_dw, ug_op_pool, ug_op_pool_grad, ug_op_batchnorm, ug_op_batchnorm_grad,
    ug_op_sum_over_ranks;


#endif
