/* The rows of the elementwise ops (see op_table.h). */
#include "op_table.h"

#include <math.h>
#include <string.h>

#include "kernels/common/elementwise.h" /* the library's kinds */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* The standard normal distribution's density and cumulative function. */
static double normal_pdf(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * 3.14159265358979323846); }
static double normal_cdf(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))); }
/* GELU's tanh approximation reads tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3). */
static double gelu_u(double x) { return sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x); }
static double gelu_du(double x) { return sqrt(2.0 / 3.14159265358979323846) * (1.0 + 3.0 * 0.044715 * x * x); }

/* clamp with fixed bounds, as a unary op. */
static ug_status clamp(const ug_tensor *x, ug_tensor **out) { return ug_clamp(x, -1.5f, 2.0f, out); }
static ug_status g_clamp(ug_graph *g, ug_value *x, ug_value **out) { return ug_g_clamp(g, x, -1.5f, 2.0f, out); }

/* scale_shift with fixed parameters, as a unary op. */
static ug_status scale_shift(const ug_tensor *x, ug_tensor **out)
{
    return ug_scale_shift(x, 1.5f, -0.25f, out);
}
static ug_status g_scale_shift(ug_graph *g, ug_value *x, ug_value **out)
{
    return ug_g_scale_shift(g, x, 1.5f, -0.25f, out);
}

/* Unary rows: name, kind, y = f(x) and f'(x) in double, the input range
 * [lo, hi] (away from a kink or pole only as far as random values are),
 * dtypes. relu keeps NaN as torch.relu. gelu is the exact (erf) form and
 * stops at -3: below, 1 + erf(x / sqrt 2) cancels in f32 (the form the
 * backends and PyTorch compute), a relative error of 1e-3 at -4 on results
 * under 1e-4; its tail is checked by the special values. gelu_tanh, which
 * the backends compute as x sigmoid(2u) (no cancellation), runs to -6. */
#define OP_UNARY_ROWS(X)                                                                      \
    X(neg, NEG, -x, -1.0, -10, 10, OP_FLOATS)                                                 \
    X(abs, ABS, fabs(x), x > 0 ? 1.0 : -1.0, -10, 10, OP_FLOATS)                              \
    X(exp, EXP, exp(x), exp(x), -10, 10, OP_FLOATS)                                           \
    X(log, LOG, log(x), 1.0 / x, 1e-3, 100, OP_FLOATS)                                        \
    X(sqrt, SQRT, sqrt(x), 0.5 / sqrt(x), 1e-2, 100, OP_FLOATS)                               \
    X(relu, RELU, x < 0 ? 0.0 : x, x > 0 ? 1.0 : 0.0, -10, 10, OP_FLOATS)                     \
    X(relu6, RELU6, x < 0 ? 0.0 : x > 6 ? 6.0 : x, x > 0 && x < 6 ? 1.0 : 0.0, -10, 10, OP_FLOATS) \
    X(sigmoid, SIGMOID, sigmoid(x), sigmoid(x) * (1.0 - sigmoid(x)), -60, 60, OP_FLOATS)      \
    X(tanh, TANH, tanh(x), 1.0 - tanh(x) * tanh(x), -60, 60, OP_FLOATS)                       \
    X(gelu, GELU, x * normal_cdf(x), normal_cdf(x) + x * normal_pdf(x), -3, 6, OP_FLOATS)     \
    X(gelu_tanh, GELU_TANH, 0.5 * x * (1.0 + tanh(gelu_u(x))),                                \
      0.5 * (1.0 + tanh(gelu_u(x))) + 0.5 * x * (1.0 - tanh(gelu_u(x)) * tanh(gelu_u(x))) *     \
          gelu_du(x),                                                                         \
      -6, 6, OP_FLOATS)                                                                       \
    X(silu, SILU, x * sigmoid(x), sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x))), -20, 20,       \
      OP_FLOATS)                                                                              \
    X(softplus, SOFTPLUS, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), sigmoid(x), -40, 40,    \
      OP_FLOATS)

/* Binary rows: name, kind, y = f(a, b) and its partial derivatives in
 * double, whether graphs differentiate it, the ranges of a and b, how far b
 * keeps from zero, dtypes. maximum and minimum propagate NaN from
 * either side (torch.maximum); their gradient at a tie is PyTorch's half
 * to each side, away from the random values here. */
#define OP_BINARY_ROWS(X)                                                                       \
    X(add, ADD, a + b, 1.0, 1.0, true, -10, 10, -10, 10, 0, OP_FLOATS)                                \
    X(sub, SUB, a - b, 1.0, -1.0, true, -10, 10, -10, 10, 0, OP_FLOATS)                               \
    X(mul, MUL, a * b, b, a, true, -10, 10, -10, 10, 0, OP_FLOATS)                                    \
    X(div, DIV, a / b, 1.0 / b, -a / (b * b), true, -10, 10, -4, 4, 0.5, OP_FLOATS)                   \
    X(maximum, MAXIMUM, isnan(a) || isnan(b) ? NAN : a > b ? a : b, a > b ? 1.0 : 0.0,          \
      b > a ? 1.0 : 0.0, true, -10, 10, -10, 10, 0, OP_FLOATS)                                        \
    X(minimum, MINIMUM, isnan(a) || isnan(b) ? NAN : a < b ? a : b, a < b ? 1.0 : 0.0,          \
      b < a ? 1.0 : 0.0, true, -10, 10, -10, 10, 0, OP_FLOATS)                                        \
    X(equal, EQUAL, a == b ? 1.0 : 0.0, 0.0, 0.0, false, -4, 4, -4, 4, 0, OP_FLOATS)

#define UNARY_FNS(name, KIND, f, df, lo, hi, dtypes)              \
    static double name##_f(double x) { return f; }                \
    static double name##_df(double x) { return (void)x, df; }
#define UNARY_ROW(name, KIND, f, df, lo, hi, dtypes) \
    {#name, UG_UNARY_##KIND, ug_##name, ug_g_##name, name##_f, name##_df, lo, hi, dtypes},
OP_UNARY_ROWS(UNARY_FNS)
static double clamp_f(double x) { return isnan(x) ? x : x < -1.5 ? -1.5 : x > 2.0 ? 2.0 : x; }
static double clamp_df(double x) { return x >= -1.5 && x <= 2.0 ? 1.0 : 0.0; }
static double scale_shift_f(double x) { return 1.5 * x - 0.25; }
static double scale_shift_df(double x) { return (void)x, 1.5; }
const op_unary op_unaries[] = {
    OP_UNARY_ROWS(UNARY_ROW)
    /* with its parameters fixed at 1.5 and -0.25 */
    {"scale_shift", UG_UNARY_SCALE_SHIFT, scale_shift, g_scale_shift, scale_shift_f,
     scale_shift_df, -10, 10, OP_FLOATS},
    /* between -1.5 and 2 */
    {"clamp", UG_UNARY_CLAMP, clamp, g_clamp, clamp_f, clamp_df, -10, 10, OP_FLOATS},
};
const int op_unary_count = (int)(sizeof op_unaries / sizeof op_unaries[0]);

#define BINARY_FNS(name, KIND, f, dfa, dfb, grad, alo, ahi, blo, bhi, baway, dtypes)        \
    static double name##_f(double a, double b) { return f; }                          \
    static double name##_dfa(double a, double b) { return (void)a, (void)b, dfa; }    \
    static double name##_dfb(double a, double b) { return (void)a, (void)b, dfb; }
#define BINARY_ROW(name, KIND, f, dfa, dfb, grad, alo, ahi, blo, bhi, baway, dtypes)            \
    {#name, UG_BINARY_##KIND, ug_##name, ug_g_##name, name##_f, name##_dfa, name##_dfb, grad,     \
     alo, ahi, blo, bhi, baway, dtypes},
OP_BINARY_ROWS(BINARY_FNS)
const op_binary op_binaries[] = {OP_BINARY_ROWS(BINARY_ROW)};
const int op_binary_count = (int)(sizeof op_binaries / sizeof op_binaries[0]);

const op_building_block op_unary_blocks[] = {
    {"COPY", "cast_ops (test_conformance)"},
    {"FILL", "fill_ops (test_conformance)"},
    {"SQUARE", "mse_loss (test_autograd grad_losses)"},
    {"RECIPROCAL", "gradient clipping (test_optim)"},
};
const int op_unary_block_count = (int)(sizeof op_unary_blocks / sizeof op_unary_blocks[0]);

const op_building_block op_binary_blocks[] = {
    {"RELU_GRAD", "relu's gradient"},       {"RELU6_GRAD", "relu6's gradient"},
    {"SIGMOID_GRAD", "sigmoid's gradient"},
    {"TANH_GRAD", "tanh's gradient"},       {"GELU_GRAD", "gelu's gradient"},
    {"GELU_TANH_GRAD", "gelu_tanh's gradient"},
    {"SILU_GRAD", "silu's gradient"},       {"ABS_GRAD", "abs's gradient"},
    {"SQRT_GRAD", "sqrt's gradient"},       {"GE_MASK", "maximum's gradient"},
    {"ADD_SCALED", "micro-batch accumulation (test_accumulation)"},
    {"DROPOUT", "dropout (test_autograd grad_dropout)"},
    {"MASKED_FILL", "masked_fill (test_conformance layout_ops)"},
};
const int op_binary_block_count = (int)(sizeof op_binary_blocks / sizeof op_binary_blocks[0]);

const op_building_block op_definition_blocks[] = {
    {"cast", "cast_ops (test_conformance), autocast (test_mixed_precision)"},
    {"fill", "fill_ops (test_conformance)"},
    {"random", "random_ops (test_conformance)"},
    {"optimizer update", "test_optim"},
    {"optimizer step", "test_optim (schedules, clipping), test_loss_scaling"},
    {"sum over ranks", "test_pipeline (clipping, loss_scaling: the stages' gradient norm)"},
};
const int op_definition_block_count = (int)(sizeof op_definition_blocks / sizeof op_definition_blocks[0]);

bool op_definition_block(const char *family)
{
    for (int i = 0; i < op_definition_block_count; i++)
        if (!strcmp(op_definition_blocks[i].kind, family))
            return true;
    return false;
}

const op_unary *op_unary_named(const char *name)
{
    for (int i = 0; i < op_unary_count; i++)
        if (!strcmp(op_unaries[i].name, name))
            return &op_unaries[i];
    return NULL;
}

const op_binary *op_binary_named(const char *name)
{
    for (int i = 0; i < op_binary_count; i++)
        if (!strcmp(op_binaries[i].name, name))
            return &op_binaries[i];
    return NULL;
}
