/* Training graphs. A model's step is described once as a graph of ops on
 * symbolic values; ug_graph_backward derives the gradients, an optimizer
 * appends its update, and ug_graph_compile plans all memory and fuses
 * neighbouring elementwise work. After that, ug_graph_run replays the step
 * with no device allocation and no host-device synchronisation.
 *
 *   ug_model *m;       ug_model_create(dev, 0, &m);
 *   ug_graph *g;       ug_graph_create(m, &g);
 *   ug_value *x, *y, *h, *logits, *loss;
 *   ug_graph_input(g, "x", UG_F32, 2, (int64_t[]){64, 784}, &x);
 *   ug_graph_input(g, "y", UG_I32, 1, (int64_t[]){64}, &y);
 *   ug_nn_linear(g, "fc1", x, 500, &h);   ug_g_relu(g, h, &h);
 *   ug_nn_linear(g, "fc2", h, 10, &logits);
 *   ug_g_cross_entropy(g, logits, y, 0.0f, &loss);
 *   ug_graph_backward(g, loss);  ug_graph_set_optimizer(g, opt);
 *   ug_graph_compile(g);
 *   each step: ug_graph_bind(g, x, batch.x); ug_graph_bind(g, y, batch.y);
 *              ug_graph_run(g);
 */
#ifndef UNIGRAD_GRAPH_H
#define UNIGRAD_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ug_model ug_model;
typedef struct ug_graph ug_graph;
typedef struct ug_value ug_value;   /* a symbolic tensor, owned by its graph */
typedef struct ug_optimizer ug_optimizer;

/* ---- models: named parameters on one device, shared by graphs ---- */

/* seed fixes every parameter's initial values on every device. */
UG_API ug_status ug_model_create(ug_device *device, uint64_t seed, ug_model **out);
UG_API void ug_model_free(ug_model *model);
UG_API ug_device *ug_model_device(const ug_model *model);
/* A copy of the model on device (any backend): the same parameters by
 * name, shape and value. Build the new graphs on it; ug_optimizer_copy moves
 * the optimizer's state, so training continues there as it would have. */
UG_API ug_status ug_model_copy(const ug_model *model, ug_device *device, ug_model **out);
UG_API int ug_model_param_count(const ug_model *model);
/* The i-th parameter in creation order: its name ("fc1.weight") and tensor. */
UG_API ug_status ug_model_param_at(const ug_model *model, int index, const char **name, ug_tensor **tensor);
UG_API ug_status ug_model_find_param(const ug_model *model, const char *name, ug_tensor **tensor);
/* Host access by name; bytes must match the parameter's size (f32). */
UG_API ug_status ug_model_read_param(const ug_model *model, const char *name, float *data, size_t bytes);
UG_API ug_status ug_model_write_param(ug_model *model, const char *name, const float *data, size_t bytes);
/* Finds or creates an f32 parameter. A new one is filled by init from the
 * model's seed: uniform in [-bound, bound], the constant bound, or normal
 * with mean 0 and standard deviation |bound|. */
typedef enum ug_init { UG_INIT_UNIFORM = 0, UG_INIT_CONSTANT, UG_INIT_NORMAL } ug_init;
UG_API ug_status ug_model_param(ug_model *model, const char *name, int ndim, const int64_t *shape,
                         ug_init init, float bound, ug_tensor **out);

/* ---- graphs ---- */

/* Lifetimes: a graph keeps its model (and, once set, its optimizer) alive,
 * so the program may free them in any order; the model goes with the last
 * graph or optimizer that holds it. Every free function accepts NULL. */
UG_API ug_status ug_graph_create(ug_model *model, ug_graph **out);
UG_API void ug_graph_free(ug_graph *graph);
UG_API ug_model *ug_graph_model(const ug_graph *graph);

/* Training mode (default) enables dropout; eval mode makes it the identity
 * (PyTorch's model.train() and model.eval()). It may change between runs
 * of a compiled graph: evaluate with ug_graph_run_forward in eval mode. */
UG_API ug_status ug_graph_set_training(ug_graph *graph, bool training);
/* Numeric checks, PyTorch's anomaly detection. The graph adds, on the
 * device, a flag per checked value that turns NaN once the value holds a
 * NaN or an infinity; no step waits for it. ug_graph_read (which waits
 * anyway) and ug_graph_check then return UG_ERR_NUMERIC naming the first
 * checked value, in step order, that went non-finite in a run since the
 * last report. With fusion, a kernel that reads or writes the value anyway
 * tests each element (the cross-entropy its logits and loss, a reduction
 * its results, the optimizer's update the gradients, which are then
 * checked as the update reads them); elsewhere two small kernels sum the
 * value and flag a non-finite sum (so also elements whose sum passes f32's
 * range).
 *   UG_CHECK_LOSS_AND_GRADS (default): the loss, every parameter gradient
 *     and the logits of each cross-entropy (so a label outside the classes
 *     is told apart from non-finite logits); no kernel of their own in a
 *     fused training step.
 *   UG_CHECK_EVERY_NODE: every value a node computes, to find the op where
 *     a NaN first appears (a reduction per node: for debugging).
 * Takes effect at ug_graph_compile. */
typedef enum ug_check_mode {
    UG_CHECK_NONE = 0,
    UG_CHECK_LOSS_AND_GRADS,
    UG_CHECK_EVERY_NODE
} ug_check_mode;
UG_API ug_status ug_graph_set_checks(ug_graph *graph, ug_check_mode mode);
/* Fusion at ug_graph_compile (on by default): activations and casts folded
 * into the ops producing their inputs, the optimizer's updates in one
 * launch, numeric checks and running sums into the kernels that read or
 * write their values. Off, each op is a kernel of its own, with results
 * equal within float rounding: for finding a fused kernel's fault, or
 * timing what fusion saves. */
UG_API ug_status ug_graph_set_fusion(ug_graph *graph, bool on);
/* Waits for the device; UG_ERR_NUMERIC when a checked value of a run since
 * the last report held NaN or infinity (the flags are then cleared). */
UG_API ug_status ug_graph_check(ug_graph *graph);

/* Mixed precision (PyTorch's autocast): the dtype the forward ops added
 * from now on compute in, UG_F32 (default), UG_F16 or UG_BF16. In f16 or
 * bf16, matrix products, linear layers and convolutions run in the half
 * dtype with f32 accumulation; softmax, cross-entropy, layer norm, sums,
 * means, exp and log run in f32; elementwise ops, pooling and batch norm
 * follow their inputs. The graph inserts the casts (and folds them into
 * the neighbouring kernels where it can), so activations are planned in the
 * half dtype. Parameters stay f32 master weights: products read a half copy
 * of each, kept by the model and refreshed by the optimizer's update kernel
 * in the same pass (after writing a parameter's tensor directly, rewrite it
 * with ug_model_write_param so the copy follows). Gradients reach the f32
 * parameters in f32. With f16, enable the optimizer's loss scaling
 * (ug_optimizer_config.loss_scaling), as small gradients underflow f16. A
 * model's graphs share one half dtype. */
UG_API ug_status ug_graph_set_precision(ug_graph *graph, ug_dtype dtype);

/* Seed of dropout masks; step i draws fresh counters. */
UG_API ug_status ug_graph_set_seed(ug_graph *graph, uint64_t seed);

/* A value bound to a caller's tensor at run time (ug_graph_bind). The
 * shape is the largest the graph plans for: a tensor with fewer rows (the
 * leading size, from 1) may be bound, see ug_graph_bind. */
UG_API ug_status ug_graph_input(ug_graph *graph, const char *name, ug_dtype dtype, int ndim,
                         const int64_t *shape, ug_value **out);
/* A constant: the graph's own copy of value (made now, on the graph's
 * device; the caller keeps value), the same in every run, with no
 * gradient and not following the rows bound (a causal mask, position
 * indices). Counted among the parameter bytes of ug_graph_memory. */
UG_API ug_status ug_graph_constant(ug_graph *graph, const char *name, const ug_tensor *value, ug_value **out);
/* A model parameter as a value (its gradient is derived by backward). One
 * the graph uses already is found even after compile: the same value, so
 * a parameter used in two places (a tied embedding and output head) has
 * one gradient, the sum of both uses, and one update. */
UG_API ug_status ug_graph_param(ug_graph *graph, ug_tensor *param, ug_value **out);

UG_API int ug_value_ndim(const ug_value *value);
/* The size along axis: as planned while the graph is built; once it is
 * compiled, the size of the last run (fewer rows when fewer are bound). */
UG_API int64_t ug_value_dim(const ug_value *value, int axis);
UG_API ug_dtype ug_value_dtype(const ug_value *value);

/* Ops; each adds a node and returns its result value. Shapes follow the
 * eager ops of ops.h (broadcasting included). */
UG_API ug_status ug_g_add(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
UG_API ug_status ug_g_sub(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
UG_API ug_status ug_g_mul(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
UG_API ug_status ug_g_div(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
UG_API ug_status ug_g_maximum(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
UG_API ug_status ug_g_minimum(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
/* 1 where a == b, else 0 (not differentiable); with ug_g_cast and ug_g_sum
 * it counts correct predictions on the device. */
UG_API ug_status ug_g_equal(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
/* ug_masked_fill; x's gradient is 0 where the mask filled (the mask has
 * none). */
UG_API ug_status ug_g_masked_fill(ug_graph *g, ug_value *x, ug_value *mask, float value, ug_value **out);
/* From any dtype to a float one (dtypes: f32, f16, bf16), as ug_cast (not
 * differentiable). */
UG_API ug_status ug_g_cast(ug_graph *g, ug_value *x, ug_dtype dtype, ug_value **out);
UG_API ug_status ug_g_neg(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_abs(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_exp(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_log(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_sqrt(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_relu(ug_graph *g, ug_value *x, ug_value **out);
/* The gradient passes where 0 < x < 6, as PyTorch's ReLU6 (hardtanh). */
UG_API ug_status ug_g_relu6(ug_graph *g, ug_value *x, ug_value **out);
/* The gradient passes where low <= x <= high, as torch.clamp's. */
UG_API ug_status ug_g_clamp(ug_graph *g, ug_value *x, float low, float high, ug_value **out);
UG_API ug_status ug_g_sigmoid(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_tanh(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_gelu(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_gelu_tanh(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_silu(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_softplus(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_scale_shift(ug_graph *g, ug_value *x, float scale, float shift, ug_value **out);
UG_API ug_status ug_g_matmul(ug_graph *g, ug_value *a, ug_value *b, bool transpose_a, bool transpose_b,
                      ug_value **out);
UG_API ug_status ug_g_sum(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out);
UG_API ug_status ug_g_mean(ug_graph *g, ug_value *x, int axis, bool all, ug_value **out);
/* i32 index of the first maximum along axis (not differentiable). */
UG_API ug_status ug_g_argmax(ug_graph *g, ug_value *x, int axis, ug_value **out);
UG_API ug_status ug_g_softmax(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_log_softmax(ug_graph *g, ug_value *x, ug_value **out);
UG_API ug_status ug_g_transpose(ug_graph *g, ug_value *x, ug_value **out);
/* The layout ops of ops.h in a graph, with their gradients (permute's
 * the inverse permutation, slice's and split's the gradient placed in
 * zeros, concat's and stack's its slices, broadcast_to's its sums). */
UG_API ug_status ug_g_permute(ug_graph *g, ug_value *x, int naxes, const int *order, ug_value **out);
UG_API ug_status ug_g_slice(ug_graph *g, ug_value *x, int axis, int64_t start, int64_t length, ug_value **out);
UG_API ug_status ug_g_split(ug_graph *g, ug_value *x, int axis, int count, const int64_t *sizes,
                            ug_value **outs);
UG_API ug_status ug_g_concat(ug_graph *g, int count, ug_value *const *xs, int axis, ug_value **out);
UG_API ug_status ug_g_stack(ug_graph *g, int count, ug_value *const *xs, int axis, ug_value **out);
UG_API ug_status ug_g_broadcast_to(ug_graph *g, ug_value *x, int ndim, const int64_t *shape, ug_value **out);
/* ug_index_copy in a graph: base's gradient is the result's with the
 * replaced entries zeroed, source's the replaced entries'. */
UG_API ug_status ug_g_index_copy(ug_graph *g, ug_value *base, int axis, ug_value *index, ug_value *source,
                                 ug_value **out);
/* ug_take in a graph. The gradient of x sums the rows of the result's
 * gradient that each index picked, in index order (no atomics: the same
 * bits on every device and run); index has none. */
UG_API ug_status ug_g_take(ug_graph *g, ug_value *x, ug_value *index, int axis, ug_value **out);
UG_API ug_status ug_g_reshape(ug_graph *g, ug_value *x, int ndim, const int64_t *shape, ug_value **out);
/* Dropout with probability p in training mode; identity in eval mode (the
 * mode of each run). */
UG_API ug_status ug_g_dropout(ug_graph *g, ug_value *x, float p, ug_value **out);
/* LayerNorm over the last axis of x [..., cols] (torch.nn.functional.layer_norm):
 * y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased, per row.
 * gamma [cols] and beta [cols] are optional: beta NULL adds nothing
 * (LayerNorm(bias=False)), both NULL leave no affine part; beta without
 * gamma is refused. f32 (a mixed-precision graph widens half inputs);
 * eps positive and finite. */
UG_API ug_status ug_g_layernorm(ug_graph *g, ug_value *x, ug_value *gamma, ug_value *beta, float eps,
                         ug_value **out);
/* RMSNorm over the last axis of x [..., cols] (torch.nn.functional.rms_norm):
 * y = x / sqrt(mean(x^2) + eps) * gamma, per row; gamma [cols] or NULL
 * (no scale). f32 and eps as ug_g_layernorm. */
UG_API ug_status ug_g_rmsnorm(ug_graph *g, ug_value *x, ug_value *gamma, float eps, ug_value **out);
/* Mean cross-entropy of logits [..., classes] (classes the last axis)
 * against class indices labels [...] (the logits' shape without that
 * axis; i32 or i64): log-softmax and NLL in one op, as PyTorch's
 * F.cross_entropy(logits.view(-1, classes), labels.view(-1)) with
 * reduction 'mean'. The result is f32 []. A label outside [0, classes)
 * gives a NaN loss (which ug_graph_set_checks reports) and no gradient
 * for its row. An empty batch (no rows) gives 0. */
typedef struct ug_cross_entropy_options {
    /* In [0, 1): each row's target is (1 - s) one-hot + s / classes. */
    float label_smoothing;
    /* When set, a row whose label equals ignore_index adds nothing to the
     * loss and gets a zero gradient, and the mean is over the other rows
     * (counted on the device at each run, partial batches included): a
     * language model's padding. Every row ignored gives a NaN loss, as in
     * PyTorch, and zero gradients. The index is any value of the labels'
     * dtype (an i64 outside i32's range is refused for i32 labels), in
     * [0, classes) or not; PyTorch's default is -100. Micro-batches
     * accumulated (ug_graph_run_backward) weight each one's mean by its
     * rows (the inputs' leading axis), not by the labels it counted. */
    bool ignore;
    int64_t ignore_index;
} ug_cross_entropy_options;
/* options: NULL or zero-initialised fields give no smoothing and no
 * ignored label (ug_g_cross_entropy's behaviour with smoothing 0). */
UG_API ug_status ug_g_cross_entropy_with(ug_graph *g, ug_value *logits, ug_value *labels,
                                         const ug_cross_entropy_options *options, ug_value **out);
/* ug_g_cross_entropy_with with label_smoothing = smoothing, nothing ignored. */
UG_API ug_status ug_g_cross_entropy(ug_graph *g, ug_value *logits, ug_value *labels, float smoothing,
                             ug_value **out);
/* Mean squared error: mean((a - b)^2). */
UG_API ug_status ug_g_mse(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);

/* Activation checkpointing (torch.utils.checkpoint): the ops that lie
 * between from and to (they read from, through any path, and to depends
 * on them) form a segment whose results are not kept for the backward
 * pass; backward recomputes them. Mark each layer (its input and output)
 * of a deep network: segments that feed one another form a chain, and a
 * chain of n segments holds about log2(n) of their outputs at once,
 * recomputing about log2(n) / 2 forward passes of it (the halving scheme
 * of Chen et al. 2016). The gradients are bitwise those of the graph
 * without checkpoints (dropout masks included); ug_graph_memory shows the
 * activation bytes saved. Segments may not overlap; mark them before
 * ug_graph_backward. */
UG_API ug_status ug_graph_checkpoint(ug_graph *graph, ug_value *from, ug_value *to);

/* Derives the gradient of the scalar loss with respect to every parameter
 * the loss depends on. */
UG_API ug_status ug_graph_backward(ug_graph *graph, ug_value *loss);
/* Appends the optimizer's update of every parameter with a gradient. */
UG_API ug_status ug_graph_set_optimizer(ug_graph *graph, ug_optimizer *optimizer);
/* Fuses, orders and plans memory; allocates everything the graph needs. */
UG_API ug_status ug_graph_compile(ug_graph *graph);

typedef struct ug_graph_memory_info {
    uint64_t activation_bytes;  /* one arena for every intermediate value */
    uint64_t gradient_bytes;    /* parameter gradients */
    uint64_t parameter_bytes;   /* the model's parameters the graph uses */
    uint64_t optimizer_bytes;   /* the optimizer's state for them */
    /* Everything above plus running sums and check flags, as the memory
     * pool holds it (in its block sizes): the device memory training with
     * this graph takes. */
    uint64_t total_bytes;
    uint64_t accumulator_bytes; /* taken by the first ug_graph_run_backward */
    uint64_t unplanned_bytes;   /* if every value had its own buffer */
    int nodes;                  /* kernels one run launches (after fusion) */
    int fused;                  /* nodes removed by fusion */
    int recomputed;             /* kernels added to recompute checkpointed activations */
} ug_graph_memory_info;
/* The device bytes the graph needs, so a program can tell whether a batch
 * fits before anything is allocated. Before ug_graph_compile it plans the
 * graph without allocating anything (the graph takes no more ops, only
 * compile); after, it reports what compile allocated. Parameters exist
 * once created, and the optimizer's state once it is. */
UG_API ug_status ug_graph_memory(ug_graph *graph, ug_graph_memory_info *info);

/* Points an input at a tensor for the next runs: the input's dtype and
 * shape, or fewer rows (the leading size, 1 to the declared). The graph
 * then runs on the rows bound, in the same plan and memory: every op's
 * shape follows, and means and losses divide by the actual rows (the
 * partial last batch of an epoch, evaluation in chunks). Bind every
 * batch-sized input with the same rows. */
UG_API ug_status ug_graph_bind(ug_graph *graph, ug_value *input, const ug_tensor *tensor);
/* One step: forward, backward and the optimizer update, queued without
 * waiting. The first step with given rows, training mode and stream is
 * launched kernel by kernel, the next is recorded, and the later ones
 * replay that recording, with bitwise the same results: with one launch
 * where the backend captures (CUDA and HIP graphs), elsewhere as the
 * recorded kernel calls without the ops' host work. The bound inputs are
 * copied into buffers the recording reads. */
UG_API ug_status ug_graph_run(ug_graph *graph);
/* Replay of ug_graph_run's steps, on by default. A capture that fails (an
 * old driver, a call the runtime cannot capture) falls back to launching
 * each kernel from then on, until replay is turned on again. */
UG_API ug_status ug_graph_set_replay(ug_graph *graph, bool on);
/* Whether the last ug_graph_run was a replay; when not, why gets a line
 * saying why not (the backend, the profiler, a capture's error). */
UG_API bool ug_graph_replaying(const ug_graph *graph, char *why, size_t why_len);
/* The step in parts, none waiting for the device:
 *   ug_graph_run_forward: the forward pass only (evaluation); values kept
 *     with ug_graph_keep are readable after it.
 *   ug_graph_run_backward: forward and backward, adding this batch's
 *     gradients to the ones accumulated since the last update (PyTorch's
 *     loss.backward()); gradient accumulation over micro-batches stays on
 *     the device.
 *   ug_graph_run_update: the optimizer update (clipping included) with the
 *     accumulated gradients weighted by each micro-batch's rows, which
 *     equals the gradient of one batch of all their rows (the loss being a
 *     mean over rows); then the accumulation restarts.
 *     Without an optimizer it leaves that mean in the gradients
 *     (ug_graph_grad) and restarts. Ops added after ug_graph_backward run
 *     with the forward pass.
 * ug_graph_run refuses while micro-batches are accumulated, and
 * ug_graph_run_update without any. */
UG_API ug_status ug_graph_run_forward(ug_graph *graph);
UG_API ug_status ug_graph_run_backward(ug_graph *graph);
UG_API ug_status ug_graph_run_update(ug_graph *graph);
/* Copies a value of the last run to the host (waits for the device). Only
 * values marked with ug_graph_keep (and the loss) stay readable. The data
 * is copied even when the numeric checks then report UG_ERR_NUMERIC. */
UG_API ug_status ug_graph_read(ug_graph *graph, ug_value *value, void *data, size_t bytes);
/* A running sum on the device: every run that computes value adds
 * scale * value into *sum (value's shape, f32), kept across runs until
 * ug_graph_clear_sums; read it with ug_graph_read: one read per epoch
 * instead of one wait per step (for example the count of correct
 * predictions). Where the op computing value is a reduction or the
 * cross-entropy, it adds value as it writes it: no kernel of its own. */
UG_API ug_status ug_graph_accumulate(ug_graph *graph, ug_value *value, float scale, ug_value **sum);
/* The same with scale = each run's rows (the first input's leading size):
 * for a mean over the batch such as the loss, the sum over the samples,
 * whatever the rows of each batch; divided by the epoch's samples it is
 * the epoch's mean loss. */
UG_API ug_status ug_graph_accumulate_rows(ug_graph *graph, ug_value *value, ug_value **sum);
UG_API ug_status ug_graph_clear_sums(ug_graph *graph);
/* Copies a readable value into dst (its dtype and element count, on any
 * device), queued like an op: on the graph's device nothing waits. */
UG_API ug_status ug_graph_copy_value(ug_graph *graph, ug_value *value, ug_tensor *dst);
/* Keeps a value readable after a run (call before compile). */
UG_API ug_status ug_graph_keep(ug_graph *graph, ug_value *value);
/* The gradient of a parameter value after a run (valid once backward ran). */
UG_API ug_status ug_graph_grad(ug_graph *graph, ug_value *param, ug_value **grad);

#ifdef __cplusplus
}
#endif
#endif
