/* Gradient checks of the differentiable graph ops, on every device. Every
 * elementwise op's own gradient is checked, row by row of op_table.c, in
 * test_conformance; the elementwise cases here are broadcasting, fusion,
 * ties and operands used twice.
 *
 * For each case the op's operands are model parameters (ug_model_param,
 * UG_INIT_UNIFORM, then moved into the op's domain on the host), and the
 * graph computes loss = sum(op(params...) * R) with R a fixed random input
 * of the op's output shape, so the loss is a generic linear functional of
 * the output and its gradient exercises every output element. The graph is
 * compiled without an optimizer and run once; the device's gradients
 * (ug_graph_grad + ug_graph_read) are compared with central finite
 * differences of the same loss computed on the host, in double, by a
 * reference implementation of the op written here or in reference.c
 * (which never calls the library). The device's forward loss is compared
 * with the reference loss too.
 *
 * Tolerances. The finite differences use h = 1e-3 * max(1, |x|) in double:
 * the truncation error is h^2/6 |f'''|, about 1e-7 relative for these
 * smooth functions on the chosen domains (kinks of relu/abs/maximum are at
 * least 0.1 away from every operand, denominators at least 0.5 from zero),
 * and the rounding error about 1e-16 |L| / h = 1e-13. The device computes in
 * f32 through short chains of ops: relative errors of a few 1e-7, up to
 * 16 ulp (1e-6) for OpenCL's erf/exp/log built-ins, and sums of at most a
 * few dozen terms. So we require
 *     max_i |grad_i - fd_i| <= 1e-3 * max_i |fd_i| + 1e-5,
 * three orders above the noise, while a wrong formula (a missing factor,
 * a wrong sign, a wrong transposition, a broadcast gradient not summed back
 * to the operand's shape) is off by O(1) relative. The forward loss must
 * match within 2e-5 * sum_i |y_i R_i| + 1e-6 (f32 rounding of each term
 * and of the sum, relative to the terms' magnitude since they may cancel). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "op_table.h"
#include "reference.h"
#include "train_support.h"

/* Returns a failing status from a build function. */
#define GC_TRY(expr)                         \
    do {                                     \
        ug_status gc_s_ = (expr);            \
        if (gc_s_ != UG_OK)                  \
            return gc_s_;                    \
    } while (0)

enum { GC_MAX_OPERANDS = 4, GC_MAX_VALUES = 8, GC_MAX_NDIM = 4 };

typedef enum gc_kind { GC_PARAM = 0, GC_INPUT, GC_LABELS } gc_kind;

/* Where a parameter's values are moved after the uniform [-1, 1] init. */
typedef enum gc_domain {
    GC_ANY = 0,     /* [-1, 1] */
    GC_WIDE,        /* [-3, 3] */
    GC_POSITIVE,    /* [0.2, 1.2] */
    GC_AWAY_ZERO,   /* |x| in [0.1, 1.1] */
    GC_MAGNITUDE,   /* |x| in [0.5, 1.5] */
    GC_GRID,        /* multiples of 0.2 in [-1, 1] */
    GC_GRID_HALF    /* multiples of 0.2 plus 0.1: never within 0.1 of GC_GRID */
} gc_domain;

typedef struct gc_operand {
    gc_kind kind;
    int ndim;
    int64_t shape[GC_MAX_NDIM];
    gc_domain domain;
} gc_operand;

typedef struct gc_case gc_case;
typedef ug_status (*gc_build_fn)(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out);
/* out = op(v...) in double. v holds the declared operands in order, then
 * the parameters the build created itself (ug_nn_linear's). */
typedef void (*gc_ref_fn)(const gc_case *c, const double *const *v, double *out);

struct gc_case {
    const char *name;
    int count;
    gc_operand op[GC_MAX_OPERANDS];
    gc_build_fn build;
    gc_ref_fn ref;
    const char *row;       /* elementwise: the op's row in op_table.c */
    int code;              /* softmax: log; linear: relu */
    bool ta, tb;           /* matmul */
    int axis;              /* reductions (non-negative) */
    bool all;
    float f0, f1;          /* scale/shift; smoothing; eps */
    int64_t n;             /* classes; linear out features */
    int rndim;             /* reshape target */
    int64_t rshape[GC_MAX_NDIM];
};

#define SHAPE1(a) 1, {a}
#define SHAPE2(a, b) 2, {a, b}
#define SHAPE3(a, b, c) 3, {a, b, c}
#define P(shape, dom) {GC_PARAM, shape, dom}
#define IN(shape) {GC_INPUT, shape, GC_ANY}
#define LABELS(rows) {GC_LABELS, 1, {rows}, GC_ANY}

/* ---- builds ---- */

/* The op's row; a missing one fails the case (the build returns an error). */
static const op_binary *binary_row(const gc_case *c) { return op_binary_named(c->row); }
static const op_unary *unary_row(const gc_case *c) { return op_unary_named(c->row); }

static ug_status build_binary(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return binary_row(c) ? binary_row(c)->graph(g, v[0], v[1], out) : UG_ERR_INVALID_ARGUMENT;
}

static ug_status build_matmul(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_matmul(g, v[0], v[1], c->ta, c->tb, out);
}

static ug_status build_sum(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_sum(g, v[0], c->axis, c->all, out);
}

static ug_status build_mean(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_mean(g, v[0], c->axis, c->all, out);
}

static ug_status build_softmax(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return c->code ? ug_g_log_softmax(g, v[0], out) : ug_g_softmax(g, v[0], out);
}

static ug_status build_transpose(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    (void)c;
    return ug_g_transpose(g, v[0], out);
}

static ug_status build_reshape(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_reshape(g, v[0], c->rndim, c->rshape, out);
}

/* exp(reshape(x)): a reshaped parameter read by a node. */
static ug_status build_reshape_exp(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    ug_value *r = NULL;
    GC_TRY(ug_g_reshape(g, v[0], c->rndim, c->rshape, &r));
    return ug_g_exp(g, r, out);
}

/* reshape(tanh(x)): the op's output is a view of an intermediate. */
static ug_status build_tanh_reshape(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    ug_value *t = NULL;
    GC_TRY(ug_g_tanh(g, v[0], &t));
    return ug_g_reshape(g, t, c->rndim, c->rshape, out);
}

static ug_status build_square(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    (void)c;
    return ug_g_mul(g, v[0], v[0], out);
}

/* x x^T: one operand on both sides of a matmul. */
static ug_status build_gram(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    (void)c;
    return ug_g_matmul(g, v[0], v[0], false, true, out);
}

static ug_status build_exp_plus_x(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    (void)c;
    ug_value *e = NULL;
    GC_TRY(ug_g_exp(g, v[0], &e));
    return ug_g_add(g, e, v[0], out);
}

/* act(a + b): the planner fuses the activation into the add. */
static ug_status build_add_act(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    ug_value *s = NULL;
    GC_TRY(ug_g_add(g, v[0], v[1], &s));
    return unary_row(c) ? unary_row(c)->graph(g, s, out) : UG_ERR_INVALID_ARGUMENT;
}

static ug_status build_layernorm(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_layernorm(g, v[0], v[1], v[2], c->f0, out);
}

static ug_status build_xent(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    return ug_g_cross_entropy(g, v[0], v[1], c->f0, out);
}

static ug_status build_mse(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    (void)c;
    return ug_g_mse(g, v[0], v[1], out);
}

/* ug_nn_linear (creates fc.weight [n, in] and fc.bias [n]), then relu when code. */
static ug_status build_linear(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    ug_value *y = NULL;
    GC_TRY(ug_nn_linear(g, "fc", v[0], c->n, &y));
    if (!c->code) {
        *out = y;
        return UG_OK;
    }
    return ug_g_relu(g, y, out);
}

/* ug_nn_linear(ug_nn_flatten(x)): an input read through a view. */
static ug_status build_flatten_linear(ug_graph *g, const gc_case *c, ug_value *const *v, ug_value **out)
{
    ug_value *flat = NULL;
    GC_TRY(ug_nn_flatten(g, v[0], &flat));
    return ug_nn_linear(g, "fc", flat, c->n, out);
}

/* ---- references (double) ---- */

static int64_t operand_numel(const gc_case *c, int i) { return ref_numel(c->op[i].ndim, c->op[i].shape); }

static void ref_binary_case(const gc_case *c, const double *const *v, double *out)
{
    ref_binary(binary_row(c)->f, c->op[0].ndim, c->op[0].shape, v[0], c->op[1].ndim,
               c->op[1].shape, v[1], out);
}

static void ref_matmul_case(const gc_case *c, const double *const *v, double *out)
{
    int nout = 0;
    int64_t sout[REF_MAX_DIMS];
    ref_matmul(c->op[0].ndim, c->op[0].shape, v[0], c->op[1].ndim, c->op[1].shape, v[1], c->ta,
               c->tb, out, &nout, sout);
}

static void ref_sum_case(const gc_case *c, const double *const *v, double *out)
{
    ref_reduce(REF_RSUM, c->op[0].ndim, c->op[0].shape, v[0], c->axis, c->all, out);
}

static void ref_mean_case(const gc_case *c, const double *const *v, double *out)
{
    ref_reduce(REF_RMEAN, c->op[0].ndim, c->op[0].shape, v[0], c->axis, c->all, out);
}

static void ref_softmax_case(const gc_case *c, const double *const *v, double *out)
{
    int64_t cols = c->op[0].shape[c->op[0].ndim - 1];
    ref_softmax(v[0], out, operand_numel(c, 0) / cols, cols, c->code != 0);
}

static void ref_transpose_case(const gc_case *c, const double *const *v, double *out)
{
    ref_transpose(c->op[0].ndim, c->op[0].shape, v[0], out);
}

static void ref_copy_case(const gc_case *c, const double *const *v, double *out)
{
    memcpy(out, v[0], (size_t)operand_numel(c, 0) * sizeof *out);
}

static void ref_exp_case(const gc_case *c, const double *const *v, double *out)
{
    for (int64_t i = 0; i < operand_numel(c, 0); i++)
        out[i] = exp(v[0][i]);
}

static void ref_tanh_case(const gc_case *c, const double *const *v, double *out)
{
    for (int64_t i = 0; i < operand_numel(c, 0); i++)
        out[i] = tanh(v[0][i]);
}

static void ref_square_case(const gc_case *c, const double *const *v, double *out)
{
    for (int64_t i = 0; i < operand_numel(c, 0); i++)
        out[i] = v[0][i] * v[0][i];
}

static void ref_gram_case(const gc_case *c, const double *const *v, double *out)
{
    int nout = 0;
    int64_t sout[REF_MAX_DIMS];
    ref_matmul(c->op[0].ndim, c->op[0].shape, v[0], c->op[0].ndim, c->op[0].shape, v[0], false, true, out,
               &nout, sout);
}

static void ref_exp_plus_x_case(const gc_case *c, const double *const *v, double *out)
{
    for (int64_t i = 0; i < operand_numel(c, 0); i++)
        out[i] = exp(v[0][i]) + v[0][i];
}

static void ref_add_act_case(const gc_case *c, const double *const *v, double *out)
{
    int nout = 0;
    int64_t sout[REF_MAX_DIMS];
    ref_broadcast_shape(c->op[0].ndim, c->op[0].shape, c->op[1].ndim, c->op[1].shape, &nout, sout);
    ref_binary(op_binary_named("add")->f, c->op[0].ndim, c->op[0].shape, v[0], c->op[1].ndim,
               c->op[1].shape, v[1], out);
    for (int64_t i = 0; i < ref_numel(nout, sout); i++)
        out[i] = unary_row(c)->f(out[i]);
}

/* LayerNorm over the last axis (reference.c). */
static void ref_layernorm_case(const gc_case *c, const double *const *v, double *out)
{
    int64_t cols = c->op[0].shape[c->op[0].ndim - 1], rows = operand_numel(c, 0) / cols;
    ref_layernorm(v[0], v[1], v[2], out, rows, cols, (double)c->f0);
}

/* Mean over rows of the cross-entropy with label smoothing (reference.c). */
static void ref_xent_case(const gc_case *c, const double *const *v, double *out)
{
    int64_t rows = c->op[0].shape[0], cols = c->op[0].shape[1];
    double *loss = th_alloc((size_t)rows * sizeof *loss), total = 0.0;
    ref_cross_entropy(v[0], v[1], loss, rows, cols, (double)c->f0);
    for (int64_t r = 0; r < rows; r++)
        total += loss[r];
    out[0] = total / (double)rows;
}

static void ref_mse_case(const gc_case *c, const double *const *v, double *out)
{
    int64_t n = operand_numel(c, 0);
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += (v[0][i] - v[1][i]) * (v[0][i] - v[1][i]);
    out[0] = total / (double)n;
}

/* y = x W^T + b (then relu when code); v = x [rows, in], W [n, in], b [n]. */
static void ref_linear_case(const gc_case *c, const double *const *v, double *out)
{
    int64_t rows = c->op[0].shape[0], in = operand_numel(c, 0) / rows, n = c->n; /* flattened */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < n; o++) {
            double acc = v[2][o];
            for (int64_t k = 0; k < in; k++)
                acc += v[0][r * in + k] * v[1][o * in + k];
            out[r * n + o] = c->code && acc < 0.0 ? 0.0 : acc;
        }
}

/* ---- the cases ---- */

#define BIN(nm, row_, a, b) {.name = nm, .count = 2, .op = {a, b}, .build = build_binary, .ref = ref_binary_case, .row = row_}
#define MM(nm, a, b, ta_, tb_) {.name = nm, .count = 2, .op = {a, b}, .build = build_matmul, .ref = ref_matmul_case, .ta = ta_, .tb = tb_}

static const gc_case elementwise_cases[] = {
    BIN("add", "add", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(3, 4), GC_ANY)),
    BIN("sub", "sub", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(3, 4), GC_ANY)),
    BIN("mul", "mul", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(3, 4), GC_ANY)),
    BIN("div", "div", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(3, 4), GC_MAGNITUDE)),
    BIN("maximum", "maximum", P(SHAPE2(3, 4), GC_GRID), P(SHAPE2(3, 4), GC_GRID_HALF)),
    BIN("minimum", "minimum", P(SHAPE2(3, 4), GC_GRID), P(SHAPE2(3, 4), GC_GRID_HALF)),
    {.name = "x*x (one operand twice)", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)},
     .build = build_square, .ref = ref_square_case},
    {.name = "exp(x)+x (gradients summed)", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)},
     .build = build_exp_plus_x, .ref = ref_exp_plus_x_case},
};

static const gc_case broadcast_cases[] = {
    BIN("[3,4]+[4]", "add", P(SHAPE2(3, 4), GC_ANY), P(SHAPE1(4), GC_ANY)),
    BIN("[4]+[3,4]", "add", P(SHAPE1(4), GC_ANY), P(SHAPE2(3, 4), GC_ANY)),
    BIN("[3,1]*[1,4]", "mul", P(SHAPE2(3, 1), GC_ANY), P(SHAPE2(1, 4), GC_ANY)),
    BIN("[2,3,4]-[3,1]", "sub", P(SHAPE3(2, 3, 4), GC_ANY), P(SHAPE2(3, 1), GC_ANY)),
    BIN("[1]-[2,3]", "sub", P(SHAPE1(1), GC_ANY), P(SHAPE2(2, 3), GC_ANY)),
    BIN("[1]*[3,4]", "mul", P(SHAPE1(1), GC_ANY), P(SHAPE2(3, 4), GC_ANY)),
    BIN("[3,4]*[1]", "mul", P(SHAPE2(3, 4), GC_ANY), P(SHAPE1(1), GC_ANY)),
    BIN("[3,4]/[1]", "div", P(SHAPE2(3, 4), GC_ANY), P(SHAPE1(1), GC_MAGNITUDE)),
    BIN("[4]/[3,4]", "div", P(SHAPE1(4), GC_ANY), P(SHAPE2(3, 4), GC_MAGNITUDE)),
    BIN("[3,1]/[1,4]", "div", P(SHAPE2(3, 1), GC_ANY), P(SHAPE2(1, 4), GC_MAGNITUDE)),
    BIN("maximum [3,4],[4]", "maximum", P(SHAPE2(3, 4), GC_GRID), P(SHAPE1(4), GC_GRID_HALF)),
    BIN("maximum [1],[3,4]", "maximum", P(SHAPE1(1), GC_GRID_HALF), P(SHAPE2(3, 4), GC_GRID)),
    {.name = "relu([3,4]+[4]) (fused)", .count = 2, .op = {P(SHAPE2(3, 4), GC_GRID), P(SHAPE1(4), GC_GRID_HALF)},
     .build = build_add_act, .ref = ref_add_act_case, .row = "relu"},
    {.name = "sigmoid([3,4]+[4]) (fused)", .count = 2, .op = {P(SHAPE2(3, 4), GC_ANY), P(SHAPE1(4), GC_ANY)},
     .build = build_add_act, .ref = ref_add_act_case, .row = "sigmoid"},
    {.name = "tanh([2,3]+[2,1]) (fused)", .count = 2, .op = {P(SHAPE2(2, 3), GC_ANY), P(SHAPE2(2, 1), GC_ANY)},
     .build = build_add_act, .ref = ref_add_act_case, .row = "tanh"},
    {.name = "gelu([3,4]+[4])", .count = 2, .op = {P(SHAPE2(3, 4), GC_ANY), P(SHAPE1(4), GC_ANY)},
     .build = build_add_act, .ref = ref_add_act_case, .row = "gelu"},
};

static const gc_case matmul_cases[] = {
    MM("matmul NN [3,4]x[4,5]", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(4, 5), GC_ANY), false, false),
    MM("matmul TN [4,3]^Tx[4,5]", P(SHAPE2(4, 3), GC_ANY), P(SHAPE2(4, 5), GC_ANY), true, false),
    MM("matmul NT [3,4]x[5,4]^T", P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(5, 4), GC_ANY), false, true),
    MM("matmul TT [4,3]^Tx[5,4]^T", P(SHAPE2(4, 3), GC_ANY), P(SHAPE2(5, 4), GC_ANY), true, true),
    MM("matmul batched [2,3,4]x[4,5] (shared b)", P(SHAPE3(2, 3, 4), GC_ANY), P(SHAPE2(4, 5), GC_ANY), false, false),
    MM("matmul batched [3,4]x[2,4,5] (shared a)", P(SHAPE2(3, 4), GC_ANY), P(SHAPE3(2, 4, 5), GC_ANY), false, false),
    MM("matmul batched [2,3,4]x[2,4,5]", P(SHAPE3(2, 3, 4), GC_ANY), P(SHAPE3(2, 4, 5), GC_ANY), false, false),
    MM("matmul batched TT [2,4,3]^Tx[5,4]^T (shared b)", P(SHAPE3(2, 4, 3), GC_ANY), P(SHAPE2(5, 4), GC_ANY), true, true),
    MM("matmul batched TN [4,3]^Tx[2,4,5] (shared a)", P(SHAPE2(4, 3), GC_ANY), P(SHAPE3(2, 4, 5), GC_ANY), true, false),
    MM("matmul batched NT [2,3,4]x[2,5,4]^T", P(SHAPE3(2, 3, 4), GC_ANY), P(SHAPE3(2, 5, 4), GC_ANY), false, true),
    {.name = "matmul x x^T (one operand twice)", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_gram,
     .ref = ref_gram_case},
};

static const gc_case reduce_cases[] = {
    {.name = "sum axis 0 of [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_sum, .ref = ref_sum_case, .axis = 0},
    {.name = "sum axis 1 of [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_sum, .ref = ref_sum_case, .axis = 1},
    {.name = "sum axis 2 of [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_sum, .ref = ref_sum_case, .axis = 2},
    {.name = "sum all of [3,4]", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_sum, .ref = ref_sum_case, .all = true},
    {.name = "mean axis 1 of [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_mean, .ref = ref_mean_case, .axis = 1},
    {.name = "mean axis 0 of [3,4]", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_mean, .ref = ref_mean_case, .axis = 0},
    {.name = "mean all of [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_mean, .ref = ref_mean_case, .all = true},
};

static const gc_case softmax_cases[] = {
    {.name = "softmax [3,5]", .count = 1, .op = {P(SHAPE2(3, 5), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 0},
    {.name = "log_softmax [3,5]", .count = 1, .op = {P(SHAPE2(3, 5), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 1},
    {.name = "softmax [2,2,4]", .count = 1, .op = {P(SHAPE3(2, 2, 4), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 0},
    {.name = "log_softmax [2,2,4]", .count = 1, .op = {P(SHAPE3(2, 2, 4), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 1},
};

static const gc_case shape_cases[] = {
    {.name = "transpose [3,5]", .count = 1, .op = {P(SHAPE2(3, 5), GC_ANY)}, .build = build_transpose, .ref = ref_transpose_case},
    {.name = "transpose [2,3,4]", .count = 1, .op = {P(SHAPE3(2, 3, 4), GC_ANY)}, .build = build_transpose, .ref = ref_transpose_case},
    {.name = "reshape [3,4]->[2,6]", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_reshape, .ref = ref_copy_case,
     .rndim = 2, .rshape = {2, 6}},
    {.name = "reshape [2,3,2]->[12]", .count = 1, .op = {P(SHAPE3(2, 3, 2), GC_ANY)}, .build = build_reshape, .ref = ref_copy_case,
     .rndim = 1, .rshape = {12}},
    {.name = "exp(reshape [3,4]->[4,3])", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_reshape_exp, .ref = ref_exp_case,
     .rndim = 2, .rshape = {4, 3}},
    {.name = "reshape(tanh [3,4])->[2,-1]", .count = 1, .op = {P(SHAPE2(3, 4), GC_ANY)}, .build = build_tanh_reshape, .ref = ref_tanh_case,
     .rndim = 2, .rshape = {2, -1}},
};

static const gc_case layernorm_cases[] = {
    {.name = "layernorm [3,5]", .count = 3, .op = {P(SHAPE2(3, 5), GC_WIDE), P(SHAPE1(5), GC_MAGNITUDE), P(SHAPE1(5), GC_ANY)},
     .build = build_layernorm, .ref = ref_layernorm_case, .f0 = 1e-5f},
    {.name = "layernorm [2,2,4]", .count = 3, .op = {P(SHAPE3(2, 2, 4), GC_ANY), P(SHAPE1(4), GC_MAGNITUDE), P(SHAPE1(4), GC_ANY)},
     .build = build_layernorm, .ref = ref_layernorm_case, .f0 = 1e-3f},
};

static const gc_case loss_cases[] = {
    {.name = "cross_entropy [4,5]", .count = 2, .op = {P(SHAPE2(4, 5), GC_WIDE), LABELS(4)},
     .build = build_xent, .ref = ref_xent_case, .n = 5, .f0 = 0.0f},
    {.name = "cross_entropy [4,5] smoothing 0.1", .count = 2, .op = {P(SHAPE2(4, 5), GC_WIDE), LABELS(4)},
     .build = build_xent, .ref = ref_xent_case, .n = 5, .f0 = 0.1f},
    {.name = "cross_entropy [6,3] smoothing 0.3", .count = 2, .op = {P(SHAPE2(6, 3), GC_WIDE), LABELS(6)},
     .build = build_xent, .ref = ref_xent_case, .n = 3, .f0 = 0.3f},
    {.name = "mse [3,4] (both parameters)", .count = 2, .op = {P(SHAPE2(3, 4), GC_ANY), P(SHAPE2(3, 4), GC_ANY)},
     .build = build_mse, .ref = ref_mse_case},
    {.name = "mse [3,4] (target an input)", .count = 2, .op = {P(SHAPE2(3, 4), GC_ANY), IN(SHAPE2(3, 4))},
     .build = build_mse, .ref = ref_mse_case},
};

static const gc_case linear_cases[] = {
    {.name = "ug_nn_linear [4,3]->5", .count = 1, .op = {IN(SHAPE2(4, 3))}, .build = build_linear,
     .ref = ref_linear_case, .n = 5},
    {.name = "ug_nn_linear(ug_nn_flatten [4,2,3])->5", .count = 1, .op = {IN(SHAPE3(4, 2, 3))},
     .build = build_flatten_linear, .ref = ref_linear_case, .n = 5},
    {.name = "relu(ug_nn_linear [6,4]->3) (fused)", .count = 1, .op = {IN(SHAPE2(6, 4))}, .build = build_linear,
     .ref = ref_linear_case, .n = 3, .code = 1},
};

/* Sizes past one work-group or tile, where kernels split their work:
 * gradients reduced over many rows, odd GEMM sizes, long rows. */
static const gc_case large_cases[] = {
    BIN("[300,5]+[5]", "add", P(SHAPE2(300, 5), GC_ANY), P(SHAPE1(5), GC_ANY)),
    BIN("[1]*[37,29]", "mul", P(SHAPE1(1), GC_ANY), P(SHAPE2(37, 29), GC_ANY)),
    MM("matmul NN [33,40]x[40,17]", P(SHAPE2(33, 40), GC_ANY), P(SHAPE2(40, 17), GC_ANY), false, false),
    MM("matmul TT [40,33]^Tx[17,40]^T", P(SHAPE2(40, 33), GC_ANY), P(SHAPE2(17, 40), GC_ANY), true, true),
    MM("matmul batched [3,9,20]x[20,11] (shared b)", P(SHAPE3(3, 9, 20), GC_ANY), P(SHAPE2(20, 11), GC_ANY), false, false),
    {.name = "sum axis 0 of [260,3]", .count = 1, .op = {P(SHAPE2(260, 3), GC_ANY)}, .build = build_sum, .ref = ref_sum_case, .axis = 0},
    {.name = "mean all of [40,30]", .count = 1, .op = {P(SHAPE2(40, 30), GC_ANY)}, .build = build_mean, .ref = ref_mean_case, .all = true},
    {.name = "log_softmax [5,300]", .count = 1, .op = {P(SHAPE2(5, 300), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 1},
    {.name = "softmax [4,257]", .count = 1, .op = {P(SHAPE2(4, 257), GC_WIDE)}, .build = build_softmax, .ref = ref_softmax_case, .code = 0},
    {.name = "layernorm [7,300]", .count = 3, .op = {P(SHAPE2(7, 300), GC_WIDE), P(SHAPE1(300), GC_MAGNITUDE), P(SHAPE1(300), GC_ANY)},
     .build = build_layernorm, .ref = ref_layernorm_case, .f0 = 1e-5f},
    {.name = "cross_entropy [50,40] smoothing 0.1", .count = 2, .op = {P(SHAPE2(50, 40), GC_WIDE), LABELS(50)},
     .build = build_xent, .ref = ref_xent_case, .n = 40, .f0 = 0.1f},
    {.name = "ug_nn_linear [40,30]->20", .count = 1, .op = {IN(SHAPE2(40, 30))}, .build = build_linear,
     .ref = ref_linear_case, .n = 20},
};

/* ---- the check ---- */

static float to_domain(gc_domain d, float x)
{
    switch (d) {
    case GC_WIDE: return 3.0f * x;
    case GC_POSITIVE: return 0.2f + fabsf(x);
    case GC_AWAY_ZERO: return x >= 0.0f ? x + 0.1f : x - 0.1f;
    case GC_MAGNITUDE: return x >= 0.0f ? x + 0.5f : x - 0.5f;
    case GC_GRID: return roundf(x * 5.0f) / 5.0f;
    case GC_GRID_HALF: return roundf(x * 5.0f) / 5.0f + 0.1f;
    default: return x;
    }
}

typedef struct gc_state {
    const gc_case *c;
    int count;                        /* values: declared operands, then created parameters */
    double *host[GC_MAX_VALUES];
    int64_t numel[GC_MAX_VALUES];
    bool is_param[GC_MAX_VALUES];
    const double *r;                  /* R, f32 values */
    double *out;                      /* scratch for the op's output */
    int64_t out_numel;
} gc_state;

/* sum(op(v) * R) in double; *scale receives sum |op(v) * R|. */
static double ref_loss(const gc_state *s, double *scale)
{
    s->c->ref(s->c, (const double *const *)s->host, s->out);
    double loss = 0.0, mag = 0.0;
    for (int64_t i = 0; i < s->out_numel; i++) {
        loss += s->out[i] * s->r[i];
        mag += fabs(s->out[i] * s->r[i]);
    }
    if (scale)
        *scale = mag;
    return loss;
}

static void check_case(ug_device *dev, const gc_case *c)
{
    th_context("%s", c->name);
    ug_model *m = ts_model(dev, 0x9e11);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    gc_state s;
    memset(&s, 0, sizeof s);
    s.c = c;
    ug_value *v[GC_MAX_VALUES] = {0};
    ug_tensor *bound[GC_MAX_VALUES] = {0}; /* inputs' tensors */
    int declared_params = 0;
    for (int i = 0; i < c->count; i++) {
        const gc_operand *o = &c->op[i];
        int64_t n = ref_numel(o->ndim, o->shape);
        s.numel[i] = n;
        s.host[i] = th_alloc((size_t)n * sizeof(double));
        float *f = th_alloc((size_t)n * sizeof(float));
        char name[16];
        if (o->kind == GC_PARAM) {
            snprintf(name, sizeof name, "p%d", i);
            ug_tensor *t = NULL;
            REQUIRE_OK(ug_model_param(m, name, o->ndim, o->shape, UG_INIT_UNIFORM, 1.0f, &t));
            declared_params++;
            REQUIRE_OK(ug_tensor_download(t, f, (size_t)n * sizeof *f));
            for (int64_t k = 0; k < n; k++)
                f[k] = to_domain(o->domain, f[k]);
            REQUIRE_OK(ug_tensor_upload(t, f, (size_t)n * sizeof *f));
            REQUIRE_OK(ug_graph_param(g, t, &v[i]));
            s.is_param[i] = true;
            for (int64_t k = 0; k < n; k++)
                s.host[i][k] = f[k];
        } else if (o->kind == GC_INPUT) {
            snprintf(name, sizeof name, "in%d", i);
            for (int64_t k = 0; k < n; k++) {
                f[k] = (float)th_uniform(-1.0, 1.0);
                s.host[i][k] = f[k];
            }
            bound[i] = ts_tensor_f32(dev, o->ndim, o->shape, f);
            REQUIRE(bound[i]);
            REQUIRE_OK(ug_graph_input(g, name, UG_F32, o->ndim, o->shape, &v[i]));
        } else {
            int32_t *labels = th_alloc((size_t)n * sizeof *labels);
            for (int64_t k = 0; k < n; k++) {
                labels[k] = (int32_t)(th_uniform(0.0, (double)c->n)) % (int32_t)c->n;
                s.host[i][k] = labels[k];
            }
            bound[i] = ts_tensor_i32(dev, n, labels);
            REQUIRE(bound[i]);
            REQUIRE_OK(ug_graph_input(g, "labels", UG_I32, 1, o->shape, &v[i]));
        }
    }
    ug_value *y = NULL;
    REQUIRE_OK(c->build(g, c, v, &y));
    REQUIRE(y);
    /* Parameters the build created (ug_nn_linear's), in creation order. */
    s.count = c->count;
    for (int i = declared_params; i < ug_model_param_count(m); i++) {
        REQUIRE(s.count < GC_MAX_VALUES);
        ug_tensor *t = NULL;
        REQUIRE_OK(ug_model_param_at(m, i, NULL, &t));
        int64_t n = ug_tensor_numel(t);
        float *f = ts_download_f32(t);
        REQUIRE(f);
        int k = s.count++;
        s.numel[k] = n;
        s.host[k] = th_alloc((size_t)n * sizeof(double));
        for (int64_t e = 0; e < n; e++)
            s.host[k][e] = f[e];
        s.is_param[k] = true;
        REQUIRE_OK(ug_graph_param(g, t, &v[k])); /* the value the build made */
    }

    /* loss = sum(y * R) */
    int yn = ug_value_ndim(y);
    int64_t yshape[UG_MAX_DIMS] = {1};
    for (int i = 0; i < yn; i++)
        yshape[i] = ug_value_dim(y, i);
    s.out_numel = ts_value_numel(y);
    s.out = th_alloc((size_t)s.out_numel * sizeof(double));
    float *rf = th_alloc((size_t)s.out_numel * sizeof(float));
    double *rd = th_alloc((size_t)s.out_numel * sizeof(double));
    for (int64_t i = 0; i < s.out_numel; i++) {
        rf[i] = (float)th_uniform(-1.0, 1.0);
        rd[i] = rf[i];
    }
    s.r = rd;
    ug_tensor *rt = ts_tensor_f32(dev, yn, yshape, rf);
    REQUIRE(rt);
    ug_value *R = NULL, *prod = NULL, *loss = NULL;
    REQUIRE_OK(ug_graph_input(g, "R", UG_F32, yn, yshape, &R));
    REQUIRE_OK(ug_g_mul(g, y, R, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_value *grad[GC_MAX_VALUES] = {0};
    for (int i = 0; i < s.count; i++)
        if (s.is_param[i])
            REQUIRE_OK(ug_graph_grad(g, v[i], &grad[i]));
    REQUIRE_OK(ug_graph_compile(g));
    for (int i = 0; i < c->count; i++)
        if (bound[i])
            REQUIRE_OK(ug_graph_bind(g, v[i], bound[i]));
    REQUIRE_OK(ug_graph_bind(g, R, rt));
    REQUIRE_OK(ug_graph_run(g));

    /* Forward. */
    float dev_loss = 0.0f;
    REQUIRE_OK(ug_graph_read(g, loss, &dev_loss, sizeof dev_loss));
    double scale = 0.0, want = ref_loss(&s, &scale);
    CHECK_MSG(fabs(dev_loss - want) <= 2e-5 * scale + 1e-6,
              "forward loss %.9g, reference %.9g (sum |y R| = %.3g)", (double)dev_loss, want, scale);

    /* Gradients against central differences. */
    for (int i = 0; i < s.count; i++) {
        if (!s.is_param[i])
            continue;
        float *got = ts_read(g, grad[i]);
        REQUIRE(got);
        CHECK_EQ_I64(ts_value_numel(grad[i]), s.numel[i]);
        double max_fd = 0.0, max_err = 0.0;
        int64_t worst = 0;
        double *fd = th_alloc((size_t)s.numel[i] * sizeof *fd);
        for (int64_t k = 0; k < s.numel[i]; k++) {
            double x = s.host[i][k], h = 1e-3 * (fabs(x) > 1.0 ? fabs(x) : 1.0);
            s.host[i][k] = x + h;
            double lp = ref_loss(&s, NULL);
            s.host[i][k] = x - h;
            double lm = ref_loss(&s, NULL);
            s.host[i][k] = x;
            fd[k] = (lp - lm) / (2.0 * h);
            max_fd = fabs(fd[k]) > max_fd ? fabs(fd[k]) : max_fd;
        }
        for (int64_t k = 0; k < s.numel[i]; k++) {
            double err = fabs((double)got[k] - fd[k]);
            if (!(err <= max_err)) { /* NaN counts as worst */
                max_err = isnan(err) ? INFINITY : err;
                worst = k;
            }
        }
        CHECK_MSG(max_err <= 1e-3 * max_fd + 1e-5,
                  "gradient of operand %d: max |grad - fd| = %.3g > 1e-3 * %.3g + 1e-5; element %lld is %.9g, "
                  "finite difference %.9g",
                  i, max_err, max_fd, (long long)worst, (double)got[worst], fd[worst]);
        CHECK_MSG(max_fd > 0.0, "operand %d: the reference gradient is zero (a useless case)", i);
    }

    /* A second run recomputes the same gradients (they are not accumulated
     * across runs, as PyTorch's .grad would be without zero_grad). */
    float **first = th_alloc((size_t)s.count * sizeof *first);
    for (int i = 0; i < s.count; i++)
        if (s.is_param[i])
            REQUIRE((first[i] = ts_read(g, grad[i])) != NULL);
    REQUIRE_OK(ug_graph_run(g));
    for (int i = 0; i < s.count; i++) {
        if (!s.is_param[i])
            continue;
        float *again = ts_read(g, grad[i]);
        REQUIRE(again);
        th_compare_bits("gradient of a second run", again, first[i], s.numel[i], sizeof(float));
    }
}

static void check_cases(ug_device *dev, const gc_case *cases, int count)
{
    for (int i = 0; i < count; i++) {
        int before = th_failures();
        check_case(dev, &cases[i]);
        ts_cleanup();
        if (th_failures() > before)
            printf("    (case \"%s\" failed on %s)\n", cases[i].name, ug_device_name(dev));
    }
}

#define COUNT(a) (int)(sizeof(a) / sizeof(a)[0])

TS_TEST(grad_elementwise) { check_cases(dev, elementwise_cases, COUNT(elementwise_cases)); }
TS_TEST(grad_broadcast) { check_cases(dev, broadcast_cases, COUNT(broadcast_cases)); }
TS_TEST(grad_matmul) { check_cases(dev, matmul_cases, COUNT(matmul_cases)); }
TS_TEST(grad_reduce) { check_cases(dev, reduce_cases, COUNT(reduce_cases)); }
TS_TEST(grad_softmax) { check_cases(dev, softmax_cases, COUNT(softmax_cases)); }
TS_TEST(grad_shape) { check_cases(dev, shape_cases, COUNT(shape_cases)); }
TS_TEST(grad_layernorm) { check_cases(dev, layernorm_cases, COUNT(layernorm_cases)); }
TS_TEST(grad_losses) { check_cases(dev, loss_cases, COUNT(loss_cases)); }
TS_TEST(grad_linear) { check_cases(dev, linear_cases, COUNT(linear_cases)); }
TS_TEST(grad_large) { check_cases(dev, large_cases, COUNT(large_cases)); }

/* Dropout: y = x * mask / (1 - p) and dL/dx = R * mask / (1 - p), with the
 * mask recovered from the forward output (x is never 0, so y == 0 exactly
 * where an element was dropped). */
TS_TEST(grad_dropout)
{
    const float p = 0.25f;
    int64_t shape[2] = {16, 16}, n = 256;
    ug_model *m = ts_model(dev, 77);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    ug_tensor *t = NULL;
    REQUIRE_OK(ug_model_param(m, "x", 2, shape, UG_INIT_UNIFORM, 1.0f, &t));
    float *xf = ts_download_f32(t);
    REQUIRE(xf);
    for (int64_t i = 0; i < n; i++)
        xf[i] = to_domain(GC_AWAY_ZERO, xf[i]);
    REQUIRE_OK(ug_tensor_upload(t, xf, (size_t)n * sizeof *xf));
    float *rf = th_alloc((size_t)n * sizeof *rf);
    for (int64_t i = 0; i < n; i++)
        rf[i] = (float)th_uniform(-1.0, 1.0);
    ug_tensor *rt = ts_tensor_f32(dev, 2, shape, rf);
    REQUIRE(rt);
    ug_value *x = NULL, *y = NULL, *R = NULL, *prod = NULL, *loss = NULL, *gx = NULL;
    REQUIRE_OK(ug_graph_set_seed(g, 1234));
    REQUIRE_OK(ug_graph_param(g, t, &x));
    REQUIRE_OK(ug_g_dropout(g, x, p, &y));
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_graph_input(g, "R", UG_F32, 2, shape, &R));
    REQUIRE_OK(ug_g_mul(g, y, R, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_grad(g, x, &gx));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_bind(g, R, rt));
    for (int run = 0; run < 2; run++) {
        th_context("run %d", run);
        REQUIRE_OK(ug_graph_run(g));
        float *yf = ts_read(g, y), *gf = ts_read(g, gx), dev_loss = 0.0f;
        REQUIRE(yf && gf);
        REQUIRE_OK(ug_graph_read(g, loss, &dev_loss, sizeof dev_loss));
        double keep_scale = 1.0 / (1.0 - (double)p), want = 0.0, mag = 0.0;
        int dropped = 0, bad_y = 0, bad_g = 0;
        for (int64_t i = 0; i < n; i++) {
            bool kept = yf[i] != 0.0f;
            dropped += !kept;
            double ywant = kept ? xf[i] * keep_scale : 0.0;
            double gwant = kept ? rf[i] * keep_scale : 0.0;
            if (!ts_close(yf[i], ywant, 1e-6, 0.0) && bad_y++ < 3)
                th_fail(TH_LOC, "y[%lld] = %.9g, expected 0 or x/(1-p) = %.9g", (long long)i, (double)yf[i],
                        xf[i] * keep_scale);
            if (!ts_close(gf[i], gwant, 1e-6, 0.0) && bad_g++ < 3)
                th_fail(TH_LOC, "dL/dx[%lld] = %.9g, expected R*mask/(1-p) = %.9g (%s)", (long long)i,
                        (double)gf[i], gwant, kept ? "kept" : "dropped");
            want += ywant * rf[i];
            mag += fabs(ywant * rf[i]);
        }
        CHECK_MSG(dropped > 0 && dropped < n, "%d of %lld elements dropped with p = %g", dropped, (long long)n,
                  (double)p);
        CHECK_MSG(fabs(dev_loss - want) <= 2e-5 * mag + 1e-6, "forward loss %.9g, reference %.9g",
                  (double)dev_loss, want);
    }
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(grad_elementwise),
        TH_DEVICE_TEST(grad_broadcast),
        TH_DEVICE_TEST(grad_matmul),
        TH_DEVICE_TEST(grad_reduce),
        TH_DEVICE_TEST(grad_softmax),
        TH_DEVICE_TEST(grad_shape),
        TH_DEVICE_TEST(grad_layernorm),
        TH_DEVICE_TEST(grad_losses),
        TH_DEVICE_TEST(grad_linear),
        TH_DEVICE_TEST(grad_large),
        TH_DEVICE_TEST(grad_dropout),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
