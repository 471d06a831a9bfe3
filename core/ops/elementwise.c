/* The elementwise ops, each defined once (inference, launch, gradient) and
 * wrapped for eager use (ops.h) and graphs (graph.h): unary and binary maps
 * with broadcasting, casts, expand, fill, random numbers and
 * dropout. The formulas are kernels/common/elementwise.h's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "base/mix64.h"
#include "unigrad/ops.h"

/* ---- launching ---- */

/* Strides (in elements) of t read with ndim axes: 0 along its size-1 axes. */
static void broadcast_strides(const ug_tensor *t, int ndim, int64_t *strides)
{
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int it = t->ndim - ndim + i;
        int64_t d = it >= 0 ? t->shape[it] : 1;
        strides[i] = d == 1 ? 0 : stride;
        stride *= d;
    }
}

/* Drops size-1 axes and merges neighbours that are contiguous in every
 * operand, so most launches see one or two axes. */
static int collapse(int ndim, int64_t *shape, int64_t *s1, int64_t *s2)
{
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1)
            continue;
        if (n > 0 && s1[n - 1] == s1[i] * shape[i] && (!s2 || s2[n - 1] == s2[i] * shape[i])) {
            shape[n - 1] *= shape[i];
            s1[n - 1] = s1[i];
            if (s2)
                s2[n - 1] = s2[i];
            continue;
        }
        shape[n] = shape[i];
        s1[n] = s1[i];
        if (s2)
            s2[n] = s2[i];
        n++;
    }
    if (n == 0) {
        shape[0] = 1;
        s1[0] = 1;
        if (s2)
            s2[0] = 1;
        n = 1;
    }
    return n;
}

ug_status ug_launch_binary(const char *op, ug_binary_kind kind, ug_unary_kind post, float alpha,
                           ug_tensor *y, const ug_tensor *a, const ug_tensor *b)
{
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    ug_binary_args args = {.op = kind, .epi = {.post = post}, .alpha = alpha};
    args.y = ug_kview_of(y);
    args.a = ug_kview_of(a);
    args.b = ug_kview_of(b);
    int64_t shape[UG_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    broadcast_strides(a, y->ndim, args.a_strides);
    broadcast_strides(b, y->ndim, args.b_strides);
    args.ndim = collapse(y->ndim, shape, args.a_strides, args.b_strides);
    memcpy(args.shape, shape, sizeof shape);
    return ug_dispatch(ug_dev(y), UG_KERNEL_BINARY, op, y->dtype, &args);
}

ug_status ug_launch_strided_unary(const char *op, ug_unary_kind kind, float alpha, float beta,
                                  ug_tensor *y, const ug_tensor *x, int ndim, int64_t *shape,
                                  int64_t *strides)
{
    if (ug_tensor_numel(y) == 0)
        return UG_OK;
    ug_unary_args args = {.op = kind, .alpha = alpha, .beta = beta};
    args.y = ug_kview_of(y);
    args.x = x ? ug_kview_of(x) : ug_kview_of(y);
    args.ndim = collapse(ndim, shape, strides, NULL);
    memcpy(args.shape, shape, sizeof args.shape);
    memcpy(args.x_strides, strides, sizeof args.x_strides);
    return ug_dispatch(ug_dev(y), UG_KERNEL_UNARY, op, x ? x->dtype : y->dtype, &args);
}

ug_status ug_launch_unary(const char *op, ug_unary_kind kind, float alpha, float beta,
                          ug_tensor *y, const ug_tensor *x)
{
    int64_t shape[UG_MAX_DIMS] = {ug_tensor_numel(y)};
    int64_t strides[UG_MAX_DIMS] = {1};
    return ug_launch_strided_unary(op, kind, alpha, beta, y, x, 1, shape, strides);
}

ug_status ug_launch_random(const char *op, bool normal, float p0, float p1, uint64_t seed,
                           uint64_t offset, const ug_tensor *runs, ug_tensor *y)
{
    int64_t n = ug_tensor_numel(y);
    if (n == 0)
        return UG_OK;
    ug_random_args args = {.normal = normal, .p0 = p0, .p1 = p1, .seed = seed, .offset = offset,
                           .y = ug_kview_of(y), .n = n};
    if (runs)
        args.runs = ug_kview_of(runs);
    return ug_dispatch(ug_dev(y), UG_KERNEL_RANDOM, op, y->dtype, &args);
}

/* ---- unary ---- */

static ug_status unary_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_float(op, &in[0], "x"));
    if ((unsigned)op->p.unary.op >= UG_UNARY_COUNT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d is not a unary op", op->name,
                            (int)op->p.unary.op);
    out[0] = in[0];
    return UG_OK;
}

static ug_status unary_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return ug_launch_unary(op->name, op->p.unary.op, op->p.unary.alpha, op->p.unary.beta, out[0],
                           in[0]);
}

/* The gradient of each unary op, as PyTorch defines it. */
static ug_status unary_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *y = n->out, *gx = NULL, *t = NULL;
    switch (n->op->p.unary.op) {
    case UG_UNARY_NEG: UG_TRY(ug_g_neg(g, gy, &gx)); break;
    case UG_UNARY_ABS: UG_TRY(ug_g_binary(g, UG_BINARY_ABS_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_EXP: UG_TRY(ug_g_mul(g, gy, y, &gx)); break;
    case UG_UNARY_LOG: UG_TRY(ug_g_div(g, gy, x, &gx)); break;
    case UG_UNARY_SQRT: UG_TRY(ug_g_binary(g, UG_BINARY_SQRT_GRAD, 0, gy, y, &gx)); break;
    /* relu'(x) = [y > 0]: reading y lets the forward fuse the bias add. */
    case UG_UNARY_RELU: UG_TRY(ug_g_binary(g, UG_BINARY_RELU_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_RELU6: UG_TRY(ug_g_binary(g, UG_BINARY_RELU6_GRAD, 0, gy, y, &gx)); break;
    /* clamp'(x) = [low <= x <= high] (PyTorch's closed interval): there
     * y == x, and nowhere else (NaN included). */
    case UG_UNARY_CLAMP:
        UG_TRY(ug_g_binary(g, UG_BINARY_EQUAL, 0, x, y, &t));
        UG_TRY(ug_g_mul(g, gy, t, &gx));
        break;
    case UG_UNARY_SIGMOID: UG_TRY(ug_g_binary(g, UG_BINARY_SIGMOID_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_TANH: UG_TRY(ug_g_binary(g, UG_BINARY_TANH_GRAD, 0, gy, y, &gx)); break;
    case UG_UNARY_GELU: UG_TRY(ug_g_binary(g, UG_BINARY_GELU_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_GELU_TANH: UG_TRY(ug_g_binary(g, UG_BINARY_GELU_TANH_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_SILU: UG_TRY(ug_g_binary(g, UG_BINARY_SILU_GRAD, 0, gy, x, &gx)); break;
    case UG_UNARY_SOFTPLUS: /* softplus'(x) = sigmoid(x) */
        UG_TRY(ug_g_sigmoid(g, x, &t));
        UG_TRY(ug_g_mul(g, gy, t, &gx));
        break;
    case UG_UNARY_SCALE_SHIFT: UG_TRY(ug_g_scale_shift(g, gy, n->op->p.unary.alpha, 0.0f, &gx)); break;
    case UG_UNARY_SQUARE:
        UG_TRY(ug_g_mul(g, gy, x, &t));
        UG_TRY(ug_g_scale_shift(g, t, 2.0f, 0.0f, &gx));
        break;
    default:
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: %s has no gradient", n->op->name);
    }
    return ug_grad_give(g, x, gx);
}

/* exp, log and softplus widen half operands (PyTorch autocast's f32 list). */
static ug_autocast_class unary_autocast(const ug_op *op)
{
    const ug_unary_kind k = op->p.unary.op;
    return k == UG_UNARY_EXP || k == UG_UNARY_LOG || k == UG_UNARY_SOFTPLUS ? UG_AUTOCAST_F32
                                                                             : UG_AUTOCAST_FOLLOW;
}

/* Any unary op whose formula reads only x can be another op's post-op. */
static bool unary_fold(const ug_op *op, ug_fold *f)
{
    ug_unary_kind k = op->p.unary.op;
    if (k == UG_UNARY_COPY || k == UG_UNARY_SCALE_SHIFT || k == UG_UNARY_FILL || k == UG_UNARY_CLAMP)
        return false;
    *f = (ug_fold){.kind = UG_FOLD_ACTIVATION, .pair.post = k};
    return true;
}

/* The kinds by their names in kernels/common/elementwise.h, lower case. */
#define UG_KIND_NAME_(NAME, EXPR) #NAME,
static const char *const unary_names[] = {UG_UNARY_OPS(UG_KIND_NAME_)};
static const char *const binary_names[] = {UG_BINARY_OPS(UG_KIND_NAME_)};
#undef UG_KIND_NAME_

static void kind_name(const char *const *names, int count, int kind, char *out, size_t len)
{
    snprintf(out, len, "%s", kind >= 0 && kind < count ? names[kind] : "?");
    for (; *out; out++)
        if (*out >= 'A' && *out <= 'Z')
            *out = (char)(*out - 'A' + 'a');
}

static void unary_describe(const ug_op *op, char *out, size_t len)
{
    kind_name(unary_names, UG_UNARY_COUNT, op->p.unary.op, out, len);
}

const ug_op_def ug_op_unary = {.family = "unary op", .infer = unary_infer, .launch = unary_launch,
                               .backward = unary_backward, .autocast = unary_autocast,
                               .fold = unary_fold, .absorb = ug_absorbs_cast, .describe = unary_describe};

static ug_op unary_op(const char *name, ug_unary_kind kind, float alpha, float beta)
{
    return (ug_op){.def = &ug_op_unary, .name = name, .p.unary = {kind, alpha, beta}};
}

static ug_status eager_unary(const char *name, ug_unary_kind kind, float alpha, float beta,
                             const ug_tensor *x, ug_tensor **out)
{
    ug_op op = unary_op(name, kind, alpha, beta);
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_unary(ug_graph *g, ug_unary_kind kind, float alpha, float beta, ug_value *x,
                     ug_value **out)
{
    ug_op op = unary_op("graph unary op", kind, alpha, beta);
    return ug_op_graph(g, &op, 1, &x, out);
}

#define UG_UNARY_WRAPPERS(NAME, KIND)                                                  \
    ug_status ug_##NAME(const ug_tensor *x, ug_tensor **out)                           \
    {                                                                                  \
        return eager_unary(#NAME, KIND, 0, 0, x, out);                                 \
    }                                                                                  \
    ug_status ug_g_##NAME(ug_graph *g, ug_value *x, ug_value **out)                    \
    {                                                                                  \
        ug_op op = unary_op("graph " #NAME, KIND, 0, 0);                               \
        return ug_op_graph(g, &op, 1, &x, out);                                        \
    }
UG_UNARY_WRAPPERS(neg, UG_UNARY_NEG)
UG_UNARY_WRAPPERS(abs, UG_UNARY_ABS)
UG_UNARY_WRAPPERS(exp, UG_UNARY_EXP)
UG_UNARY_WRAPPERS(log, UG_UNARY_LOG)
UG_UNARY_WRAPPERS(sqrt, UG_UNARY_SQRT)
UG_UNARY_WRAPPERS(relu, UG_UNARY_RELU)
UG_UNARY_WRAPPERS(relu6, UG_UNARY_RELU6)
UG_UNARY_WRAPPERS(sigmoid, UG_UNARY_SIGMOID)
UG_UNARY_WRAPPERS(tanh, UG_UNARY_TANH)
UG_UNARY_WRAPPERS(gelu, UG_UNARY_GELU)
UG_UNARY_WRAPPERS(gelu_tanh, UG_UNARY_GELU_TANH)
UG_UNARY_WRAPPERS(silu, UG_UNARY_SILU)
UG_UNARY_WRAPPERS(softplus, UG_UNARY_SOFTPLUS)

ug_status ug_scale_shift(const ug_tensor *x, float scale, float shift, ug_tensor **out)
{
    return eager_unary("scale_shift", UG_UNARY_SCALE_SHIFT, scale, shift, x, out);
}

ug_status ug_g_scale_shift(ug_graph *g, ug_value *x, float scale, float shift, ug_value **out)
{
    ug_op op = unary_op("graph scale_shift", UG_UNARY_SCALE_SHIFT, scale, shift);
    return ug_op_graph(g, &op, 1, &x, out);
}

static ug_status check_bounds(const char *op, float low, float high)
{
    if (!(low <= high))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the bounds [%g, %g] are not an interval (low above high, "
                            "or NaN)", op, (double)low, (double)high);
    return UG_OK;
}

ug_status ug_clamp(const ug_tensor *x, float low, float high, ug_tensor **out)
{
    UG_TRY(check_bounds("ug_clamp", low, high));
    return eager_unary("clamp", UG_UNARY_CLAMP, low, high, x, out);
}

ug_status ug_g_clamp(ug_graph *g, ug_value *x, float low, float high, ug_value **out)
{
    UG_TRY(check_bounds("ug_g_clamp", low, high));
    ug_op op = unary_op("graph clamp", UG_UNARY_CLAMP, low, high);
    return ug_op_graph(g, &op, 1, &x, out);
}

/* ---- binary ---- */

static ug_status binary_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_float(op, &in[0], "a"));
    UG_TRY(ug_infer_same_dtype(op, &in[0], &in[1]));
    if ((unsigned)op->p.binary.op >= UG_BINARY_COUNT)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d is not a binary op", op->name,
                            (int)op->p.binary.op);
    out[0].dtype = in[0].dtype;
    return ug_broadcast_shape(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape, op->name,
                              &out[0].ndim, out[0].shape);
}

static ug_status binary_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return ug_launch_binary(op->name, op->p.binary.op, op->p.binary.post, op->p.binary.alpha,
                            out[0], in[0], in[1]);
}

static ug_status binary_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *a = n->in[0], *b = n->in[1], *ga = NULL, *gb = NULL, *t = NULL;
    switch (n->op->p.binary.op) {
    case UG_BINARY_ADD:
        UG_TRY(ug_grad_give(g, a, gy));
        return ug_grad_give(g, b, gy);
    case UG_BINARY_SUB:
        UG_TRY(ug_grad_give(g, a, gy));
        if (!ug_grad_needed(b))
            return UG_OK;
        UG_TRY(ug_g_neg(g, gy, &gb));
        return ug_grad_give(g, b, gb);
    case UG_BINARY_MUL:
        if (ug_grad_needed(a)) {
            UG_TRY(ug_g_mul(g, gy, b, &ga));
            UG_TRY(ug_grad_give(g, a, ga));
        }
        if (ug_grad_needed(b)) {
            UG_TRY(ug_g_mul(g, gy, a, &gb));
            UG_TRY(ug_grad_give(g, b, gb));
        }
        return UG_OK;
    case UG_BINARY_DIV: /* d(a/b)/db = -(a/b)/b */
        UG_TRY(ug_g_div(g, gy, b, &ga));
        UG_TRY(ug_grad_give(g, a, ga));
        if (!ug_grad_needed(b))
            return UG_OK;
        UG_TRY(ug_g_mul(g, ga, n->out, &t));
        UG_TRY(ug_g_neg(g, t, &gb));
        return ug_grad_give(g, b, gb);
    case UG_BINARY_MAXIMUM:
    case UG_BINARY_MINIMUM: {
        /* As PyTorch: ties split the gradient evenly. For the maximum
         * share_a = (ge(a,b) - ge(b,a) + 1) / 2; the minimum swaps the masks. */
        const bool max = n->op->p.binary.op == UG_BINARY_MAXIMUM;
        ug_value *ge_ab = NULL, *ge_ba = NULL, *diff = NULL, *share = NULL;
        UG_TRY(ug_g_binary(g, UG_BINARY_GE_MASK, 0, a, b, &ge_ab));
        UG_TRY(ug_g_binary(g, UG_BINARY_GE_MASK, 0, b, a, &ge_ba));
        UG_TRY(max ? ug_g_sub(g, ge_ab, ge_ba, &diff) : ug_g_sub(g, ge_ba, ge_ab, &diff));
        UG_TRY(ug_g_scale_shift(g, diff, 0.5f, 0.5f, &share));
        UG_TRY(ug_g_mul(g, gy, share, &ga));
        UG_TRY(ug_grad_give(g, a, ga));
        UG_TRY(ug_g_sub(g, gy, ga, &gb));
        return ug_grad_give(g, b, gb);
    }
    case UG_BINARY_MASKED_FILL: /* the filled places get none; the mask no gradient */
        if (!ug_grad_needed(a))
            return UG_OK;
        UG_TRY(ug_g_binary(g, UG_BINARY_MASKED_FILL, 0.0f, gy, b, &ga));
        return ug_grad_give(g, a, ga);
    default:
        return ug_set_error(UG_ERR_UNSUPPORTED, "ug_graph_backward: %s has no gradient", n->op->name);
    }
}

static bool binary_absorb(ug_op *op, const ug_fold *f)
{
    if (f->kind != UG_FOLD_ACTIVATION || op->p.binary.post != UG_UNARY_COPY)
        return false;
    op->p.binary.post = f->pair.post;
    return true;
}

/* "add", or "add+relu" with a fused activation. */
static void binary_describe(const ug_op *op, char *out, size_t len)
{
    kind_name(binary_names, UG_BINARY_COUNT, op->p.binary.op, out, len);
    if (op->p.binary.post == UG_UNARY_COPY)
        return;
    size_t used = strlen(out);
    if (used + 1 < len) {
        out[used] = '+';
        kind_name(unary_names, UG_UNARY_COUNT, op->p.binary.post, out + used + 1, len - used - 1);
    }
}

/* Every binary op is an elementwise pair; equal with no activation is
 * also the equality test a metric folds into argmax (graph/plan.c). */
static bool binary_fold(const ug_op *op, ug_fold *f)
{
    *f = (ug_fold){.kind = UG_FOLD_PAIR, .pair = {.on = true, .op = op->p.binary.op, .alpha = op->p.binary.alpha,
                                                  .post = op->p.binary.post}};
    return true;
}

const ug_op_def ug_op_binary = {.family = "binary op", .infer = binary_infer, .launch = binary_launch,
                                .backward = binary_backward, .autocast = ug_autocast_follow,
                                .fold = binary_fold, .absorb = binary_absorb, .describe = binary_describe};

static ug_op binary_op(const char *name, ug_binary_kind kind, float alpha)
{
    return (ug_op){.def = &ug_op_binary, .name = name,
                   .p.binary = {.op = kind, .post = UG_UNARY_COPY, .alpha = alpha}};
}

ug_status ug_g_binary(ug_graph *g, ug_binary_kind kind, float alpha, ug_value *a, ug_value *b,
                      ug_value **out)
{
    ug_op op = binary_op("graph binary op", kind, alpha);
    ug_value *in[2] = {a, b};
    return ug_op_graph(g, &op, 2, in, out);
}

#define UG_BINARY_WRAPPERS(NAME, KIND)                                                 \
    ug_status ug_##NAME(const ug_tensor *a, const ug_tensor *b, ug_tensor **out)       \
    {                                                                                  \
        ug_op op = binary_op(#NAME, KIND, 0);                                          \
        const ug_tensor *in[2] = {a, b};                                               \
        return ug_op_eager(&op, 2, in, out);                                           \
    }                                                                                  \
    ug_status ug_g_##NAME(ug_graph *g, ug_value *a, ug_value *b, ug_value **out)       \
    {                                                                                  \
        ug_op op = binary_op("graph " #NAME, KIND, 0);                                 \
        ug_value *in[2] = {a, b};                                                      \
        return ug_op_graph(g, &op, 2, in, out);                                        \
    }
UG_BINARY_WRAPPERS(add, UG_BINARY_ADD)
UG_BINARY_WRAPPERS(sub, UG_BINARY_SUB)
UG_BINARY_WRAPPERS(mul, UG_BINARY_MUL)
UG_BINARY_WRAPPERS(div, UG_BINARY_DIV)
UG_BINARY_WRAPPERS(maximum, UG_BINARY_MAXIMUM)
UG_BINARY_WRAPPERS(minimum, UG_BINARY_MINIMUM)
UG_BINARY_WRAPPERS(equal, UG_BINARY_EQUAL)

ug_status ug_masked_fill(const ug_tensor *x, const ug_tensor *mask, float value, ug_tensor **out)
{
    ug_op op = binary_op("masked_fill", UG_BINARY_MASKED_FILL, value);
    const ug_tensor *in[2] = {x, mask};
    return ug_op_eager(&op, 2, in, out);
}

ug_status ug_g_masked_fill(ug_graph *g, ug_value *x, ug_value *mask, float value, ug_value **out)
{
    ug_op op = binary_op("graph masked_fill", UG_BINARY_MASKED_FILL, value);
    ug_value *in[2] = {x, mask};
    return ug_op_graph(g, &op, 2, in, out);
}

/* ---- cast ---- */

static ug_status cast_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    ug_dtype to = op->p.cast.dtype;
    if (!ug_dtype_is_float(to) && to != in[0].dtype)
        return ug_set_error(UG_ERR_DTYPE,
                            "%s: %s to %s is not supported: casts go to f32, f16 or bf16 (from "
                            "f32, f16, bf16, i32 or u8)",
                            op->name, ug_dtype_name(in[0].dtype),
                            ug_dtype_size(to) ? ug_dtype_name(to) : "an invalid dtype");
    out[0] = in[0];
    out[0].dtype = to;
    return UG_OK;
}

static ug_status cast_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return ug_launch_unary(op->name, UG_UNARY_COPY, 1.0f, 0.0f, out[0], in[0]);
}

/* Between float dtypes the gradient is the incoming one cast back. */
static ug_status cast_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *gx = NULL;
    if (!ug_grad_needed(x))
        return UG_OK;
    UG_TRY(ug_g_cast(g, gy, ug_value_dtype(x), &gx));
    return ug_grad_give(g, x, gx);
}

/* The input in another dtype and nothing else: autocast reuses it for
 * every reader, and its producer may absorb it. */
static bool cast_fold(const ug_op *op, ug_fold *f)
{
    (void)op;
    *f = (ug_fold){.kind = UG_FOLD_CAST};
    return true;
}

const ug_op_def ug_op_cast = {.family = "cast", .infer = cast_infer, .launch = cast_launch,
                              .backward = cast_backward, .fold = cast_fold};

ug_status ug_cast(const ug_tensor *x, ug_dtype dtype, ug_tensor **out)
{
    ug_op op = {.def = &ug_op_cast, .name = "cast", .p.cast.dtype = dtype};
    return ug_op_eager(&op, 1, &x, out);
}

ug_status ug_g_cast(ug_graph *g, ug_value *x, ug_dtype dtype, ug_value **out)
{
    ug_op op = {.def = &ug_op_cast, .name = "graph cast", .p.cast.dtype = dtype};
    return ug_op_graph(g, &op, 1, &x, out);
}

ug_status ug_clone(const ug_tensor *x, ug_tensor **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "clone: out is NULL");
    *out = NULL;
    UG_TRY(ug_check_tensor(x, "clone", "x"));
    UG_TRY(ug_tensor_new(ug_dev(x), x->dtype, x->ndim, x->shape, "clone", out));
    ug_status st = ug_tensor_copy(*out, x);
    if (st != UG_OK) {
        ug_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* ---- expand and fill (graph-internal: broadcasts and constants) ---- */

/* A graph's expand follows its like value's shape as bound now (fewer
 * rows than planned). */
static ug_status expand_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nout;
    out[0].dtype = nin ? in[0].dtype : UG_F32;
    out[0].ndim = op->p.expand.ndim;
    memcpy(out[0].shape, op->p.expand.shape, sizeof out[0].shape);
    if (op->p.expand.like) {
        const ug_meta like = ug_value_meta_now(op->p.expand.like);
        out[0].ndim = like.ndim;
        memcpy(out[0].shape, like.shape, sizeof out[0].shape);
    }
    if (!nin)
        return UG_OK;
    int ndim;
    int64_t shape[UG_MAX_DIMS];
    UG_TRY(ug_broadcast_shape(in[0].ndim, in[0].shape, out[0].ndim, out[0].shape, op->name, &ndim,
                              shape));
    if (ndim != out[0].ndim || memcmp(shape, out[0].shape, sizeof(int64_t) * (size_t)ndim))
        return ug_set_error(UG_ERR_SHAPE, "%s: the input does not broadcast to the target shape",
                            op->name);
    return UG_OK;
}

static ug_status expand_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    int64_t shape[UG_MAX_DIMS], strides[UG_MAX_DIMS];
    memcpy(shape, out[0]->shape, sizeof shape);
    broadcast_strides(in[0], out[0]->ndim, strides);
    ug_op now = *op; /* a mean's gradient: divided by the elements each of x's spreads over now */
    if (op->p.expand.mean)
        ug_expand_follow(&now, out[0]->ndim, out[0]->shape, ug_tensor_numel(in[0]));
    return ug_launch_strided_unary(op->name, UG_UNARY_SCALE_SHIFT, now.p.expand.alpha, 0.0f, out[0],
                                in[0], out[0]->ndim, shape, strides);
}

static ug_status expand_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *gx = gy;
    if (n->op->p.expand.alpha != 1.0f)
        UG_TRY(ug_g_scale_shift(g, gy, n->op->p.expand.alpha, 0.0f, &gx));
    return ug_grad_give(g, n->in[0], gx);
}

const ug_op_def ug_op_expand = {.family = "expand", .infer = expand_infer, .launch = expand_launch,
                                .backward = expand_backward};

static ug_op shaped_op(const ug_op_def *def, const char *name, float alpha, int ndim,
                       const int64_t *shape)
{
    ug_op op = {.def = def, .name = name, .p.expand = {.alpha = alpha, .ndim = ndim}};
    if (ndim > 0 && ndim <= UG_MAX_DIMS)
        memcpy(op.p.expand.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return op;
}

void ug_expand_follow(ug_op *op, int ndim, const int64_t *shape, int64_t input_numel)
{
    op->p.expand.ndim = ndim;
    memcpy(op->p.expand.shape, shape, sizeof(int64_t) * (size_t)ndim);
    int64_t numel = ug_shape_numel(ndim, shape);
    op->p.expand.alpha = op->p.expand.mean && numel > 0 ? (float)input_numel / (float)numel : 1.0f;
}

ug_status ug_g_expand(ug_graph *g, ug_value *x, const ug_value *like, bool mean, ug_value **out)
{
    ug_op op = {.def = &ug_op_expand, .name = "graph expand", .p.expand = {.like = like, .mean = mean}};
    const ug_meta target = ug_value_meta(like), from = ug_value_meta(x);
    ug_expand_follow(&op, target.ndim, target.shape, ug_shape_numel(from.ndim, from.shape));
    return ug_op_graph(g, &op, 1, &x, out);
}

static ug_status fill_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)in;
    return ug_launch_unary(op->name, UG_UNARY_FILL, 0.0f, op->p.expand.alpha, out[0], NULL);
}

/* Constants have no inputs, hence no gradient to give. */
static ug_status no_gradient(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    (void)g;
    (void)n;
    (void)gy;
    return UG_OK;
}

const ug_op_def ug_op_fill = {.family = "fill", .infer = expand_infer, .launch = fill_launch,
                              .backward = no_gradient, .check_role = UG_CHECKED_NEVER};

ug_status ug_g_fill(ug_graph *g, float value, int ndim, const int64_t *shape, ug_value **out)
{
    ug_op op = shaped_op(&ug_op_fill, "graph fill", value, ndim, shape);
    return ug_op_graph(g, &op, 0, NULL, out);
}

ug_status ug_fill(ug_tensor *x, float value)
{
    UG_TRY(ug_check_tensor(x, "fill", "x"));
    ug_op op = shaped_op(&ug_op_fill, "fill", value, x->ndim, x->shape);
    ug_meta m = ug_meta_of_tensor(x);
    UG_TRY(ug_infer_float(&op, &m, "x"));
    return ug_op_fill.launch(&op, &x, NULL);
}

/* ---- random numbers and dropout ---- */

static ug_status random_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    (void)in;
    return ug_launch_random(op->name, op->p.random.normal, op->p.random.p0, op->p.random.p1,
                            op->p.random.seed, op->p.random.offset, NULL, out[0]);
}

const ug_op_def ug_op_random = {.family = "random", .infer = expand_infer, .launch = random_launch};

static ug_status random_into(const char *name, bool normal, float p0, float p1, ug_tensor *x,
                             uint64_t seed, uint64_t offset)
{
    UG_TRY(ug_check_tensor(x, name, "x"));
    ug_op op = {.def = &ug_op_random, .name = name,
                .p.random = {.normal = normal, .p0 = p0, .p1 = p1, .seed = seed, .offset = offset}};
    ug_meta m = ug_meta_of_tensor(x);
    UG_TRY(ug_infer_float(&op, &m, "x"));
    if (!(p0 == p0) || !(p1 == p1) || (normal ? p1 < 0 : p1 < p0))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            normal ? "%s: stddev %g must be >= 0 (mean %g)" : "%s: high %g is below low %g",
                            name, (double)p1, (double)p0);
    return ug_op_random.launch(&op, &x, NULL);
}

ug_status ug_random_uniform(ug_tensor *x, uint64_t seed, uint64_t offset, float low, float high)
{
    return random_into("random_uniform", false, low, high, x, seed, offset);
}

ug_status ug_random_normal(ug_tensor *x, uint64_t seed, uint64_t offset, float mean, float stddev)
{
    return random_into("random_normal", true, mean, stddev, x, seed, offset);
}

/* Masks use their own Philox key, the graph's seed mixed with a tag
 * (splitmix64's finaliser): with the seed itself as key, a graph seeded
 * like its model (both default to 0) would draw run r's first mask from the
 * very counters that initialised parameter r (r * 2^40 + i), so dropout
 * would drop exactly the units whose initial weights were low. */
uint64_t ug_dropout_key(uint64_t graph_seed) { return ug_mix64(graph_seed ^ 0x6a09e667f3bcc909ull); }

/* The mask has x's shape and dtype (x is its input for that alone). Each
 * run draws fresh masks: counters advance by run and by mask. */
static ug_status dropout_mask_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                    int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_float(op, &in[0], "x"));
    out[0] = in[0];
    return UG_OK;
}

static ug_status dropout_mask_launch(const ug_op *op, ug_tensor *const *out,
                                     const ug_tensor *const *in)
{
    (void)in;
    const ug_run_state *run = op->p.dropout.run;
    if (!run->training)
        return UG_OK; /* eval mode: the mask is not read */
    /* The run's part of the counter is read on the device (ug_graph_count_run). */
    return ug_launch_random(op->name, false, 0.0f, 1.0f, ug_dropout_key(run->seed),
                            (run->first_dropout_stream + op->p.dropout.stream) << 32,
                            run->run_count, out[0]);
}

const ug_op_def ug_op_dropout_mask = {.family = "dropout mask", .infer = dropout_mask_infer,
                                      .launch = dropout_mask_launch, .backward = no_gradient,
                                      .check_role = UG_CHECKED_NEVER};

/* x masked and scaled by 1 / (1 - p) in training mode, x itself in eval
 * mode: the graph's mode is read at each run (ug_graph_set_training). */
static ug_status dropout_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    UG_TRY(ug_infer_float(op, &in[0], "x"));
    UG_TRY(ug_infer_same_dtype(op, &in[0], &in[1]));
    if (in[0].ndim != in[1].ndim || memcmp(in[0].shape, in[1].shape, sizeof(int64_t) * (size_t)in[0].ndim))
        return ug_set_error(UG_ERR_SHAPE, "%s: the mask's shape is not x's", op->name);
    out[0] = in[0];
    return UG_OK;
}

static ug_status dropout_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    if (!op->p.dropout.run->training)
        return ug_launch_unary(op->name, UG_UNARY_COPY, 1.0f, 0.0f, out[0], in[0]);
    return ug_launch_binary(op->name, UG_BINARY_DROPOUT, UG_UNARY_COPY, op->p.dropout.p, out[0], in[0], in[1]);
}

/* The same mask (and mode) applied to the gradient. */
static ug_status dropout_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *in[2] = {gy, n->in[1]}, *gx = NULL;
    UG_TRY(ug_op_graph(g, n->op, 2, in, &gx));
    return ug_grad_give(g, n->in[0], gx);
}

const ug_op_def ug_op_dropout = {.family = "dropout", .infer = dropout_infer, .launch = dropout_launch,
                                 .backward = dropout_backward, .autocast = ug_autocast_follow};

ug_status ug_g_dropout(ug_graph *g, ug_value *x, float p, ug_value **out)
{
    const char *name = "graph dropout";
    UG_TRY(ug_graph_check_open(g, name));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
    if (!(p >= 0.0f && p < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: p = %g must be in [0, 1)", name, (double)p);
    if (p == 0.0f) {
        UG_TRY(ug_graph_check_value(g, x, name, "x"));
        *out = x;
        return UG_OK;
    }
    ug_run_state *run = ug_graph_run_state(g);
    ug_op op = {.def = &ug_op_dropout_mask, .name = name,
                .p.dropout = {.run = run, .stream = run->dropout_streams, .p = p}};
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *in[2] = {x, NULL};
    ug_status st = ug_op_graph(g, &op, 1, &x, &in[1]);
    if (st == UG_OK) {
        op.def = &ug_op_dropout;
        st = ug_op_graph(g, &op, 2, in, out);
    }
    if (st != UG_OK) {
        ug_graph_rollback(g, mark);
        return st;
    }
    run->dropout_streams++;
    return UG_OK;
}
