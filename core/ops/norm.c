/* The normalisations, each defined once with its gradient: batch norm over
 * [N, C, ...] tensors, eager and in graphs (weights and running statistics
 * are f32), and layer norm and RMSNorm over the last axis in graphs (f32). */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/conv.h"
#include "unigrad/ops.h"

/* x may be f32, f16 or bf16 (the kernels compute in f32); weight and bias
 * are cast to f32 (ug_op_eager_cast). The running statistics are updated
 * in place, so they must be f32 themselves. */
static ug_status need_f32_statistics(const ug_op *op, const ug_meta *m, const char *arg)
{
    if (m->dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s; %s", op->name, arg, ug_dtype_name(m->dtype),
                            ug_dtype_is_float(m->dtype) ? "running statistics are kept in f32"
                                                        : "this op takes f32, f16 or bf16 (cast it with ug_cast)");
    return UG_OK;
}

/* ---- batch norm: in x [N, C, ...], weight, bias, running mean, running var ---- */

static ug_status batchnorm_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                 int *nout)
{
    (void)nin;
    const ug_meta *x = &in[0];
    static const char *const names[] = {"x", "weight", "bias", "running_mean", "running_var"};
    UG_TRY(ug_infer_float(op, x, "x"));
    for (int i = 1; i < 5; i++)
        UG_TRY(need_f32_statistics(op, &in[i], names[i]));
    char s[96];
    if (x->ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "%s: x is %s; expected [N, C] or [N, C, H, W]", op->name,
                            ug_format_shape(x->ndim, x->shape, s, sizeof s));
    int64_t c = x->shape[1];
    for (int i = 1; i < 5; i++)
        if (in[i].ndim != 1 || in[i].shape[0] != c)
            return ug_set_error(UG_ERR_SHAPE, "%s: %s is %s; expected [%lld] (x's channels)", op->name,
                                names[i], ug_format_shape(in[i].ndim, in[i].shape, s, sizeof s),
                                (long long)c);
    if (!(op->p.batchnorm.eps > 0.0f) || !(op->p.batchnorm.momentum >= 0.0f) ||
        !(op->p.batchnorm.momentum <= 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: eps %g must be positive and momentum %g in [0, 1]", op->name,
                            (double)op->p.batchnorm.eps, (double)op->p.batchnorm.momentum);
    out[0] = *x;
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {c}}; /* mean */
    out[2] = out[1];                                               /* rstd */
    *nout = 3;
    return UG_OK;
}

static bool batchnorm_training(const ug_op *op)
{
    return op->p.batchnorm.run ? op->p.batchnorm.run->training : op->p.batchnorm.training;
}

static ug_batchnorm_args batchnorm_args(const ug_op *op, const ug_tensor *x)
{
    int64_t n = x->shape[0], c = x->shape[1];
    return (ug_batchnorm_args){.training = batchnorm_training(op),
                               .update_running = op->p.batchnorm.update_running &&
                                                 !(op->p.batchnorm.run && op->p.batchnorm.run->hold_statistics),
                               .epi.post = op->p.batchnorm.relu ? UG_UNARY_RELU : UG_UNARY_COPY,
                               .x = ug_kview_of(x), .n = n, .c = c,
                               .inner = n * c != 0 ? ug_tensor_numel(x) / (n * c) : 0,
                               .eps = op->p.batchnorm.eps, .momentum = op->p.batchnorm.momentum};
}

static ug_status batchnorm_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_batchnorm_args args = batchnorm_args(op, in[0]);
    if (args.c == 0)
        return UG_OK;
    if (args.training && args.n * args.inner < 2)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: training needs more than one value per channel (x has %lld); "
                            "use a larger batch or eval mode",
                            op->name, (long long)(args.n * args.inner));
    args.weight = ug_kview_of(in[1]);
    args.bias = ug_kview_of(in[2]);
    args.running_mean = ug_kview_of(in[3]);
    args.running_var = ug_kview_of(in[4]);
    args.y = ug_kview_of(out[0]);
    args.mean = ug_kview_of(out[1]);
    args.rstd = ug_kview_of(out[2]);
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_BATCHNORM, op->name, UG_F32, &args);
}

/* in: gy, x, mean, rstd, weight; out: dx, dweight, dbias. */
static ug_status batchnorm_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                      int *nout)
{
    (void)op;
    (void)nin;
    out[0] = in[1];
    out[1] = in[4];
    out[2] = in[4];
    *nout = 3;
    return UG_OK;
}

static ug_status batchnorm_grad_launch(const ug_op *op, ug_tensor *const *out,
                                       const ug_tensor *const *in)
{
    ug_batchnorm_args args = batchnorm_args(op, in[1]);
    if (args.c == 0)
        return UG_OK;
    args.backward = true;
    args.dy = ug_kview_of(in[0]);
    args.mean = ug_kview_of(in[2]);
    args.rstd = ug_kview_of(in[3]);
    args.weight = ug_kview_of(in[4]);
    args.dx = ug_kview_of(out[0]);
    args.dweight = ug_kview_of(out[1]);
    args.dbias = ug_kview_of(out[2]);
    return ug_dispatch(ug_dev(in[1]), UG_KERNEL_BATCHNORM, op->name, UG_F32, &args);
}

const ug_op_def ug_op_batchnorm_grad = {.family = "batch_norm gradient", .infer = batchnorm_grad_infer,
                                        .launch = batchnorm_grad_launch};

static ug_status batchnorm_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *x = n->in[0], *weight = n->in[1], *bias = n->in[2];
    ug_op op = *n->op;
    op.def = &ug_op_batchnorm_grad;
    op.name = "batch_norm gradient";
    ug_value *in[5] = {gy, x, n->saved[0], n->saved[1], weight}, *dx = NULL;
    UG_TRY(ug_op_graph(g, &op, 5, in, &dx));
    UG_TRY(ug_grad_give(g, x, dx));
    UG_TRY(ug_grad_give(g, weight, ug_saved_of(dx, 0)));
    return ug_grad_give(g, bias, ug_saved_of(dx, 1));
}

/* A recomputed copy leaves the running statistics alone: the forward
 * already moved them. */
static void batchnorm_for_recompute(ug_op *op) { op->p.batchnorm.update_running = false; }

/* A ReLU after batch norm is applied as the output is written: one pass
 * over the activations fewer each way. The backward needs only x: the
 * ReLU's gradient reads the ReLU's output, which this now writes. */
static bool batchnorm_absorb(ug_op *op, const ug_fold *f)
{
    if (f->kind != UG_FOLD_ACTIVATION || f->pair.post != UG_UNARY_RELU || op->p.batchnorm.relu)
        return false;
    op->p.batchnorm.relu = true;
    return true;
}

static void batchnorm_describe(const ug_op *op, char *out, size_t len)
{
    snprintf(out, len, "%s", op->p.batchnorm.relu ? "batch_norm+relu" : "batch_norm");
}

const ug_op_def ug_op_batchnorm = {.family = "batch_norm", .infer = batchnorm_infer,
                                   .launch = batchnorm_launch, .backward = batchnorm_backward,
                                   .inputs = {"x", "weight", "bias", "running_mean", "running_var"},
                                   .for_recompute = batchnorm_for_recompute,
                                   .absorb = batchnorm_absorb,
                                   .describe = batchnorm_describe};

ug_status ug_batch_norm(const ug_tensor *x, const ug_tensor *weight, const ug_tensor *bias,
                        ug_tensor *running_mean, ug_tensor *running_var, bool training,
                        float momentum, float eps, ug_tensor **out)
{
    ug_op op = {.def = &ug_op_batchnorm, .name = "batch_norm",
                .p.batchnorm = {.training = training, .update_running = training,
                                .momentum = momentum, .eps = eps}};
    const ug_tensor *in[5] = {x, weight, bias, running_mean, running_var};
    static const char *const names[5] = {"x", "weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 5; i++)
        if (!in[i])
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "batch_norm: %s is NULL; pass a tensor (%s), the running statistics "
                                "too, which training updates and eval normalises with",
                                names[i], i ? "[C]" : "[N, C, ...]");
    static const ug_dtype want[5] = {UG_AS_GIVEN, UG_F32, UG_F32, UG_AS_GIVEN, UG_AS_GIVEN};
    return ug_op_eager_cast(&op, 5, in, want, out);
}

ug_status ug_g_batch_norm(ug_graph *g, ug_value *x, ug_value *weight, ug_value *bias,
                          ug_value *running_mean, ug_value *running_var, float momentum, float eps,
                          ug_value **out)
{
    const char *name = "graph batch_norm";
    UG_TRY(ug_graph_check_open(g, name));
    ug_value *stats[2] = {running_mean, running_var};
    for (int i = 0; i < 2; i++) {
        UG_TRY(ug_graph_check_value(g, stats[i], name, i ? "running_var" : "running_mean"));
        if (!ug_value_is_param(stats[i]))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: %s must be a model parameter (ug_graph_param), which the op "
                                "updates in place as model state",
                                name, i ? "running_var" : "running_mean");
    }
    ug_op op = {.def = &ug_op_batchnorm, .name = name,
                .p.batchnorm = {.run = ug_graph_run_state(g), .update_running = true, .momentum = momentum,
                                .eps = eps}};
    ug_value *in[5] = {x, weight, bias, running_mean, running_var};
    static const ug_dtype want[5] = {UG_AS_GIVEN, UG_F32, UG_F32, UG_AS_GIVEN, UG_AS_GIVEN};
    return ug_op_graph_cast(g, &op, 5, in, want, out);
}

/* ---- layer norm and RMSNorm over the last axis: in x [..., cols], then
 * gamma [cols] and beta [cols] where given (op->p.layernorm says which;
 * RMSNorm has no beta). Saved: mean and rstd, RMSNorm's rstd alone. ---- */

static ug_status layernorm_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                 int *nout)
{
    static const char *const names[3] = {"x", "gamma", "beta"};
    const ug_meta *x = &in[0];
    for (int i = 0; i < nin; i++)
        UG_TRY(ug_infer_f32(op, &in[i], names[i]));
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "%s: x needs at least one axis", op->name);
    int64_t cols = x->shape[x->ndim - 1];
    for (int i = 1; i < nin; i++)
        if (ug_shape_numel(in[i].ndim, in[i].shape) != cols) {
            char s[96];
            return ug_set_error(UG_ERR_SHAPE, "%s: %s is %s; it needs %lld elements (x's last axis)",
                                op->name, names[i], ug_format_shape(in[i].ndim, in[i].shape, s, sizeof s),
                                (long long)cols);
        }
    const float eps = op->p.layernorm.eps;
    if (!(eps > 0.0f && eps <= FLT_MAX))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: eps %g must be positive and finite", op->name,
                            (double)eps);
    int64_t rows = cols ? ug_shape_numel(x->ndim, x->shape) / cols : 0;
    const bool rms = op->p.layernorm.rms;
    out[0] = *x;
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {rows}}; /* mean, or RMSNorm's rstd */
    out[2] = out[1];                                                  /* rstd */
    *nout = rms ? 2 : 3;
    return UG_OK;
}

/* Forward (in: x, [gamma], [beta]; out: y, [mean], rstd) and backward (in:
 * dy, x, [mean], rstd, [gamma]; out: dx, [dy * xhat]) share the kernel;
 * mean is absent in RMSNorm, gamma and beta where not given. */
static ug_status layernorm_run(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in,
                               bool backward)
{
    const bool rms = op->p.layernorm.rms, has_gamma = op->p.layernorm.gamma;
    const ug_tensor *x = in[backward ? 1 : 0];
    int64_t cols = x->shape[x->ndim - 1];
    ug_layernorm_args args = {.x = ug_kview_of(x), .cols = cols, .eps = op->p.layernorm.eps, .rms = rms};
    args.rows = cols ? ug_tensor_numel(x) / cols : 0;
    if (args.rows == 0)
        return UG_OK;
    if (backward) {
        int k = 2;
        args.dy = ug_kview_of(in[0]);
        if (!rms)
            args.mean = ug_kview_of(in[k++]);
        args.rstd = ug_kview_of(in[k++]);
        if (has_gamma)
            args.gamma = ug_kview_of(in[k]);
        args.dx = ug_kview_of(out[0]);
        if (op->p.layernorm.terms)
            args.terms = ug_kview_of(out[1]);
    } else {
        if (has_gamma)
            args.gamma = ug_kview_of(in[1]);
        if (op->p.layernorm.beta)
            args.beta = ug_kview_of(in[has_gamma ? 2 : 1]);
        args.y = ug_kview_of(out[0]);
        if (!rms)
            args.mean = ug_kview_of(out[1]);
        args.rstd = ug_kview_of(out[rms ? 1 : 2]);
    }
    return ug_dispatch(ug_dev(x), UG_KERNEL_LAYERNORM, op->name, UG_F32, &args);
}

static ug_status layernorm_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return layernorm_run(op, out, in, false);
}

static ug_status layernorm_grad_launch(const ug_op *op, ug_tensor *const *out,
                                       const ug_tensor *const *in)
{
    return layernorm_run(op, out, in, true);
}

static ug_status layernorm_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out,
                                      int *nout)
{
    (void)nin;
    out[0] = in[1];
    if (op->p.layernorm.terms) { /* dy * xhat as [rows, cols] */
        const int64_t cols = in[1].shape[in[1].ndim - 1];
        out[1] = (ug_meta){.dtype = UG_F32, .ndim = 2, .shape = {ug_shape_numel(in[1].ndim, in[1].shape) / cols, cols}};
        *nout = 2;
    }
    return UG_OK;
}

const ug_op_def ug_op_layernorm_grad = {.family = "layernorm backward", .infer = layernorm_grad_infer,
                                        .launch = layernorm_grad_launch};

static ug_status layernorm_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    const bool rms = n->op->p.layernorm.rms;
    ug_value *x = n->in[0];
    ug_value *gamma = n->op->p.layernorm.gamma ? n->in[1] : NULL;
    ug_value *beta = n->op->p.layernorm.beta ? n->in[gamma ? 2 : 1] : NULL;
    ug_value *mean = rms ? NULL : n->saved[0], *rstd = n->saved[rms ? 0 : 1];
    int64_t cols = ug_value_dim(x, ug_value_ndim(x) - 1);
    if (cols == 0)
        return UG_OK; /* no elements, and gamma and beta have none: nothing to give */
    const ug_meta m = ug_value_meta(x);
    int64_t rows = ug_shape_numel(m.ndim, m.shape) / cols;
    int64_t flat[2] = {rows, cols}, column[2] = {rows, 1};
    /* With x's gradient, gamma's terms dy * xhat come from the same pass. */
    ug_value *terms = NULL;
    if (ug_grad_needed(x)) {
        ug_op op = {.def = &ug_op_layernorm_grad, .name = rms ? "rmsnorm backward" : "layernorm backward",
                    .p.layernorm = n->op->p.layernorm};
        op.p.layernorm.terms = gamma && ug_grad_needed(gamma);
        ug_value *in[5] = {gy, x}, *dx = NULL;
        int nin = 2;
        if (mean)
            in[nin++] = mean;
        in[nin++] = rstd;
        if (gamma)
            in[nin++] = gamma;
        UG_TRY(ug_op_graph(g, &op, nin, in, &dx));
        UG_TRY(ug_grad_give(g, x, dx));
        if (op.p.layernorm.terms)
            terms = ug_saved_of(dx, 0);
    }
    /* dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy. */
    ug_value *gy2 = NULL, *x2 = NULL, *m2 = NULL, *r2 = NULL, *centered = NULL, *xhat = NULL;
    ug_value *prod = NULL, *dgamma = NULL, *dbeta = NULL;
    UG_TRY(ug_g_reshape(g, gy, 2, flat, &gy2));
    if (terms) {
        UG_TRY(ug_g_reduce_axes(g, terms, UG_RKERNEL_SUM, 0, false, false, &dgamma));
        UG_TRY(ug_grad_give(g, gamma, dgamma));
    } else if (gamma && ug_grad_needed(gamma)) {
        UG_TRY(ug_g_reshape(g, x, 2, flat, &x2));
        UG_TRY(ug_g_reshape(g, rstd, 2, column, &r2));
        centered = x2;
        if (mean) {
            UG_TRY(ug_g_reshape(g, mean, 2, column, &m2));
            UG_TRY(ug_g_sub(g, x2, m2, &centered));
        }
        UG_TRY(ug_g_mul(g, centered, r2, &xhat));
        UG_TRY(ug_g_mul(g, gy2, xhat, &prod));
        UG_TRY(ug_g_reduce_axes(g, prod, UG_RKERNEL_SUM, 0, false, false, &dgamma));
        UG_TRY(ug_grad_give(g, gamma, dgamma));
    }
    if (beta && ug_grad_needed(beta)) {
        UG_TRY(ug_g_reduce_axes(g, gy2, UG_RKERNEL_SUM, 0, false, false, &dbeta));
        UG_TRY(ug_grad_give(g, beta, dbeta));
    }
    return UG_OK;
}

const ug_op_def ug_op_layernorm = {.family = "layernorm", .infer = layernorm_infer,
                                   .launch = layernorm_launch, .backward = layernorm_backward,
                                   .inputs = {"x", "gamma", "beta"}, .autocast = ug_autocast_f32};

/* x, then the affine parameters given: no beta without gamma, as the
 * inputs' order (and PyTorch's modules) has it. */
static ug_status add_norm(ug_graph *g, const char *name, bool rms, ug_value *x, ug_value *gamma,
                          ug_value *beta, float eps, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, name));
    if (beta && !gamma)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: beta without gamma; pass a gamma (a parameter of ones for none)", name);
    ug_op op = {.def = &ug_op_layernorm, .name = name,
                .p.layernorm = {.eps = eps, .rms = rms, .gamma = gamma != NULL, .beta = beta != NULL}};
    ug_value *in[3] = {x, NULL, NULL};
    int nin = 1;
    if (gamma)
        in[nin++] = gamma;
    if (beta)
        in[nin++] = beta;
    return ug_op_graph(g, &op, nin, in, out);
}

ug_status ug_g_layernorm(ug_graph *g, ug_value *x, ug_value *gamma, ug_value *beta, float eps,
                         ug_value **out)
{
    return add_norm(g, "graph layernorm", false, x, gamma, beta, eps, out);
}

ug_status ug_g_rmsnorm(ug_graph *g, ug_value *x, ug_value *gamma, float eps, ug_value **out)
{
    return add_norm(g, "graph rmsnorm", true, x, gamma, NULL, eps, out);
}
