/* Matrix products of the last two axes, 2-D and batched: defined once and
 * wrapped for eager use and graphs. */
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/conv.h"
#include "unigrad/ops.h"

static int64_t rows_of(const ug_tensor *t) { return t->shape[t->ndim - 2]; }
static int64_t cols_of(const ug_tensor *t) { return t->shape[t->ndim - 1]; }
static int64_t matrix_count(const ug_tensor *t) { return ug_shape_numel(t->ndim - 2, t->shape); }

/* C = op(A) op(B), then an epilogue folded in with operand x (a graph's
 * elementwise op on the product: C is contiguous, as the GEMM requires,
 * and x a vector of its last axis or a tensor of its shape). */
static ug_status gemm(const char *op, ug_tensor *c, const ug_tensor *a, const ug_tensor *b,
                      bool trans_a, bool trans_b, const ug_pair *e, const ug_tensor *x)
{
    if (ug_tensor_numel(c) == 0)
        return UG_OK;
    ug_gemm_args g = {.trans_a = trans_a, .trans_b = trans_b, .deterministic = ug_deterministic(),
                      .alpha = 1.0f, .beta = 0.0f};
    if (e->on) {
        g.epi = (ug_epilogue){.operand = ug_kview_of(x), .op = e->op, .alpha = e->alpha, .first = e->first,
                              .operand_rows = ug_tensor_numel(x) == ug_tensor_numel(c) ? cols_of(c) : 0,
                              .post = e->post};
    }
    g.a = ug_kview_of(a);
    g.b = ug_kview_of(b);
    g.c = ug_kview_of(c);
    g.m = rows_of(c);
    g.n = cols_of(c);
    g.k = trans_a ? rows_of(a) : cols_of(a);
    g.lda = cols_of(a);
    g.ldb = cols_of(b);
    g.ldc = g.n;
    g.stride_a = matrix_count(a) > 1 ? rows_of(a) * cols_of(a) : 0;
    g.stride_b = matrix_count(b) > 1 ? rows_of(b) * cols_of(b) : 0;
    g.stride_c = g.m * g.n;
    g.batch = matrix_count(c);
    if (g.batch > 1 && g.stride_b == 0 && !trans_a) {
        /* A stack of A matrices times one B is a single taller product. */
        g.m *= g.batch;
        g.batch = 1;
    }
    return ug_dispatch(ug_dev(c), UG_KERNEL_GEMM, op, a->dtype, &g);
}

/* Half operands multiply with f32 accumulation in the backend's GEMM (the
 * result rounded once to their dtype), so no f32 copy is planned. */
static ug_status matmul_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    (void)nout;
    const ug_meta *a = &in[0], *b = &in[1];
    bool ta = op->p.matmul.ta, tb = op->p.matmul.tb;
    UG_TRY(ug_infer_float(op, a, "a"));
    UG_TRY(ug_infer_same_dtype(op, a, b));
    char sa[96], sb[96];
    ug_format_shape(a->ndim, a->shape, sa, sizeof sa);
    ug_format_shape(b->ndim, b->shape, sb, sizeof sb);
    if (a->ndim < 2 || b->ndim < 2)
        return ug_set_error(UG_ERR_SHAPE, "%s: a is %s, b is %s; both need at least two axes",
                            op->name, sa, sb);
    int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    int64_t m = ta ? ac : ar, ka = ta ? ar : ac, kb = tb ? bc : br, n = tb ? br : bc;
    if (ka != kb) {
        const char *hint = "";
        if (!tb && ka == bc)
            hint = " (did you mean transpose_b?)";
        else if (!ta && ar == kb)
            hint = " (did you mean transpose_a?)";
        else if (tb && ka == br)
            hint = " (did you mean transpose_b = false?)";
        return ug_set_error(UG_ERR_SHAPE, "%s: inner dimensions differ: a is %s%s, b is %s%s%s",
                            op->name, sa, ta ? " (transposed)" : "", sb,
                            tb ? " (transposed)" : "", hint);
    }
    if (a->ndim > 2 && b->ndim > 2 &&
        (a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)(a->ndim - 2) * sizeof *a->shape)))
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: batch axes differ: a is %s, b is %s (batch axes must be equal, "
                            "or one operand 2-D)",
                            op->name, sa, sb);
    const ug_meta *batched = a->ndim >= b->ndim ? a : b;
    out[0] = *batched;
    out[0].dtype = a->dtype;
    out[0].shape[out[0].ndim - 2] = m;
    out[0].shape[out[0].ndim - 1] = n;
    return UG_OK;
}

static ug_status matmul_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    return gemm(op->name, out[0], in[0], in[1], op->p.matmul.ta, op->p.matmul.tb, &op->p.matmul.e, in[2]);
}

/* A cast of C (a half copy's weight gradient straight to f32), or an
 * elementwise pair with C: a linear layer's product adds its bias and
 * applies its activation as it stores C. */
static bool matmul_absorb(ug_op *op, const ug_fold *f)
{
    if (f->kind == UG_FOLD_CAST)
        return true;
    if (f->kind != UG_FOLD_PAIR || op->p.matmul.e.on)
        return false;
    op->p.matmul.e = f->pair;
    return true;
}

/* "matmul", or with an epilogue folded in as the binary op names it:
 * "matmul+add+relu", "matmul+relu_grad". */
static void matmul_describe(const ug_op *op, char *out, size_t len)
{
    char epilogue[48] = "";
    const ug_pair *e = &op->p.matmul.e;
    if (e->on) {
        const ug_op pair = {.def = &ug_op_binary, .p.binary = {.op = e->op, .post = e->post, .alpha = e->alpha}};
        ug_op_binary.describe(&pair, epilogue, sizeof epilogue);
    }
    snprintf(out, len, "matmul%s%s", e->on ? "+" : "", epilogue);
}

/* Gradients of C = op(A) op(B); the products broadcast a 2-D operand over
 * the batch, and ug_grad_give sums that batch back. */
static ug_status matmul_backward(ug_graph *g, const ug_op_node *n, ug_value *gc)
{
    ug_value *a = n->in[0], *b = n->in[1], *ga = NULL, *gb = NULL;
    bool ta = n->op->p.matmul.ta, tb = n->op->p.matmul.tb;
    if (ug_grad_needed(a)) {
        if (!ta)
            UG_TRY(ug_g_matmul(g, gc, b, false, !tb, &ga));   /* dC op(B)^T */
        else
            UG_TRY(ug_g_matmul(g, b, gc, tb, true, &ga));      /* op(B) dC^T */
        UG_TRY(ug_grad_give(g, a, ga));
    }
    if (ug_grad_needed(b)) {
        if (!tb)
            UG_TRY(ug_g_matmul(g, a, gc, !ta, false, &gb));    /* op(A)^T dC */
        else
            UG_TRY(ug_g_matmul(g, gc, a, true, ta, &gb));      /* dC^T op(A) */
        UG_TRY(ug_grad_give(g, b, gb));
    }
    return UG_OK;
}

const ug_op_def ug_op_matmul = {.family = "matmul", .infer = matmul_infer, .launch = matmul_launch,
                                .backward = matmul_backward, .autocast = ug_autocast_half,
                                .absorb = matmul_absorb, .describe = matmul_describe};

ug_status ug_matmul(const ug_tensor *a, const ug_tensor *b, bool transpose_a, bool transpose_b,
                    ug_tensor **out)
{
    ug_op op = {.def = &ug_op_matmul, .name = "matmul", .p.matmul = {.ta = transpose_a, .tb = transpose_b}};
    const ug_tensor *in[2] = {a, b};
    return ug_op_eager(&op, 2, in, out);
}

ug_status ug_g_matmul(ug_graph *g, ug_value *a, ug_value *b, bool transpose_a, bool transpose_b,
                      ug_value **out)
{
    ug_op op = {.def = &ug_op_matmul, .name = "graph matmul", .p.matmul = {.ta = transpose_a, .tb = transpose_b}};
    ug_value *in[2] = {a, b};
    return ug_op_graph(g, &op, 2, in, out);
}
