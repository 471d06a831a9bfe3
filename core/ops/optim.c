/* The optimizer's ops: the step (its scalars: rate, counts, loss scaler
 * and clipping, as a gate every update reads) and one parameter's update,
 * or every parameter's in one launch. What they read of the optimizer
 * comes through its ug_optim_source (core/model/optimizer.c keeps it). */
#include <stdio.h>

#include "core/ops/op.h"

/* Parameters per multi-tensor launch: a stack array's. */
enum { UG_OPTIM_GROUP_MAX = 64 };

/* Parameter index's buffers: its update node's inputs (param, grad, the
 * gate, then a folded check's flag or NULL), its state and half copy, or
 * this rank's part of them when the state is sharded; and its group's
 * settings. */
static ug_optim_tensor param_tensor(const ug_optim_source *src, int index, const ug_tensor *const *in)
{
    ug_optim_tensor t = {.param = ug_kview_of(in[0]), .grad = ug_kview_of(in[1]), .n = ug_tensor_numel(in[0]),
                         .weight_decay = src->weight_decay[index], .lr_scale = src->lr_scale[index]};
    if (in[3])
        t.epi.check = ug_kview_of(in[3]);
    if (src->slots > 0)
        t.state0 = ug_kview_of(src->state[index * src->slots]);
    if (src->slots > 1)
        t.state1 = ug_kview_of(src->state[index * src->slots + 1]);
    const ug_tensor *copy = src->half_copy(src->model, index);
    if (copy)
        t.copy = ug_kview_of(copy);
    if (src->shard_begin) { /* this rank's part of the parameter, its state all of it */
        const int64_t begin = src->shard_begin[index];
        t.param.offset += begin;
        t.grad.offset += begin;
        if (copy)
            t.copy.offset += begin;
        t.n = src->shard_count[index];
    }
    return t;
}

/* What every parameter's update shares: the rule and the step's gate. */
static ug_optim_args shared_args(const ug_optim_source *src, const ug_tensor *gate)
{
    ug_optim_args args = src->shared;
    args.gate = ug_kview_of(gate);
    return args;
}

/* One parameter's update: in param, grad and the step's gate; the
 * parameter is updated in place, so the node has no result. */
static ug_status optimizer_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)out;
    const ug_optim_source *src = op->p.optim.source;
    const ug_optim_tensor t = param_tensor(src, op->p.optim.param_index, in);
    if (t.n == 0)
        return UG_OK;
    ug_optim_args args = shared_args(src, in[2]);
    args.param = t.param, args.grad = t.grad, args.state0 = t.state0, args.state1 = t.state1;
    args.copy = t.copy, args.epi = t.epi, args.n = t.n;
    args.weight_decay = t.weight_decay, args.lr_scale = t.lr_scale;
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_OPTIMIZER, op->name, in[0]->dtype, &args);
}

/* Every parameter's update in one launch (PyTorch's multi-tensor apply):
 * the graph groups the update nodes (they share the gate); parameter
 * groups' settings travel per tensor, so they add no launch. */
static ug_status optimizer_launch_group(const ug_op *const *ops, const ug_tensor *const *ins, int count)
{
    const ug_optim_source *src = ops[0]->p.optim.source;
    ug_optim_tensor tensors[UG_OPTIM_GROUP_MAX];
    for (int first = 0; first < count; first += UG_OPTIM_GROUP_MAX) {
        const ug_tensor *const *in = &ins[first * UG_OP_MAX_INPUTS];
        ug_optim_args args = shared_args(src, in[2]);
        for (int k = first; k < count && k < first + UG_OPTIM_GROUP_MAX; k++) {
            const ug_tensor *const *mine = &ins[k * UG_OP_MAX_INPUTS];
            tensors[args.count++] = param_tensor(src, ops[k]->p.optim.param_index, mine);
        }
        args.tensors = tensors;
        UG_TRY(ug_dispatch(ug_dev(in[0]), UG_KERNEL_OPTIMIZER, ops[first]->name, in[0]->dtype, &args));
    }
    return UG_OK;
}

static void optimizer_describe(const ug_op *op, char *out, size_t len)
{
    ug_optim_kind kind = op->p.optim.source->shared.kind;
    snprintf(out, len, "%s", kind == UG_OPTIM_SGD ? "sgd" : kind == UG_OPTIM_ADAM ? "adam" : "adamw");
}

/* A check of the gradient, as the update reads it. */
static bool optimizer_absorb(ug_op *op, const ug_fold *f)
{
    (void)op;
    if (f->kind != UG_FOLD_CHECK || f->input != 1)
        return false;
    *f->slot = 0;
    return true;
}

const ug_op_def ug_op_optimizer = {.family = "optimizer update", .launch = optimizer_launch,
                                   .launch_group = optimizer_launch_group, .describe = optimizer_describe,
                                   .absorb = optimizer_absorb};

/* The step's scalars (kernels/common/optim_step.h): in the gradients' sum
 * of squares when the step clips or scales; out the gate every parameter's
 * update reads. */
static ug_status step_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)op, (void)nin, (void)in, (void)nout;
    out[0] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {UG_GATE_SIZE}};
    return UG_OK;
}

static ug_status step_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_optim_source *src = op->p.optim.source;
    ug_optim_args args = {.kind = UG_OPTIM_STEP, .param = ug_kview_of(out[0]), .state0 = ug_kview_of(src->step_state),
                          .n = 1, .rule = src->rule};
    if (in[0])
        args.grad = ug_kview_of(in[0]);
    return ug_dispatch(ug_dev(out[0]), UG_KERNEL_OPTIMIZER, op->name, UG_F32, &args);
}

const ug_op_def ug_op_optimizer_step = {.family = "optimizer step", .infer = step_infer, .launch = step_launch};
