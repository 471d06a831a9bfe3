/* Scaled dot-product attention as one op (kernel family attention), eager
 * and in graphs: softmax(scale q k^T + mask) v with an online softmax, so
 * its memory is linear in the sequence (FlashAttention). It saves the
 * rows' log-sum-exp; its gradient recomputes the probabilities from it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/attention.h"
#include "unigrad/conv.h" /* ug_deterministic */

/* The heads of an attention op's operands. */
typedef struct attn_shape {
    int64_t batch, heads, q_len, kv_len, d;
} attn_shape;

static bool packed(const ug_op *op) { return op->p.attention.packed_heads > 0; }

/* q, k and v the op takes as inputs before the mask: three, or one packed. */
static int qkv_inputs(const ug_op *op) { return packed(op) ? 1 : 3; }

static ug_status check_head_dim(const ug_op *op, const attn_shape *s)
{
    if (s->d < 1 || s->d > UG_ATTENTION_MAX_HEAD_DIM)
        return ug_set_error(UG_ERR_SHAPE, "%s: head_dim %lld; the fused kernels take 1 to %d", op->name,
                            (long long)s->d, UG_ATTENTION_MAX_HEAD_DIM);
    return UG_OK;
}

/* q, k, v as [batch, heads, rows, head_dim]: 4-D, or 3-D with one head. */
static ug_status check_separate(const ug_op *op, int nin, const ug_meta *in, attn_shape *s)
{
    const ug_meta *q = &in[0], *k = &in[1], *v = &in[2];
    UG_TRY(ug_infer_float(op, q, "q"));
    char sq[96], sk[96], sv[96];
    if (q->ndim < 3 || q->ndim > 4 || k->ndim != q->ndim || v->ndim != q->ndim)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: q %s, k %s, v %s; each is [batch, heads, rows, head_dim] (or "
                            "[batch, rows, head_dim])",
                            op->name, ug_format_shape(q->ndim, q->shape, sq, sizeof sq),
                            ug_format_shape(k->ndim, k->shape, sk, sizeof sk),
                            ug_format_shape(v->ndim, v->shape, sv, sizeof sv));
    for (int i = 1; i < nin; i++)
        if (in[i].dtype != q->dtype)
            return ug_set_error(UG_ERR_DTYPE, "%s: %s is %s and q %s; give them one dtype", op->name,
                                ug_op_input_name(op, nin, i), ug_dtype_name(in[i].dtype), ug_dtype_name(q->dtype));
    const int n = q->ndim;
    bool fits = k->shape[n - 1] == q->shape[n - 1] && v->shape[n - 1] == q->shape[n - 1] &&
                v->shape[n - 2] == k->shape[n - 2];
    for (int i = 0; i < n - 2; i++)
        fits = fits && k->shape[i] == q->shape[i] && v->shape[i] == q->shape[i];
    if (!fits)
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: q %s, k %s, v %s; they share batch, heads and head_dim, and k and v "
                            "their rows",
                            op->name, ug_format_shape(q->ndim, q->shape, sq, sizeof sq),
                            ug_format_shape(k->ndim, k->shape, sk, sizeof sk),
                            ug_format_shape(v->ndim, v->shape, sv, sizeof sv));
    *s = (attn_shape){.batch = q->shape[0], .heads = n == 4 ? q->shape[1] : 1, .q_len = q->shape[n - 2],
                      .kv_len = k->shape[n - 2], .d = q->shape[n - 1]};
    return check_head_dim(op, s);
}

/* qkv as [batch, rows, 3 * heads * head_dim]. */
static ug_status check_packed(const ug_op *op, int nin, const ug_meta *in, attn_shape *s)
{
    const ug_meta *x = &in[0];
    const int64_t heads = op->p.attention.packed_heads;
    UG_TRY(ug_infer_float(op, x, "qkv"));
    if (x->ndim != 3 || x->shape[2] % (3 * heads) != 0) {
        char sx[96];
        return ug_set_error(UG_ERR_SHAPE,
                            "%s: qkv %s with %lld heads; qkv is [batch, rows, 3 x heads x head_dim] (q, k "
                            "and v side by side)",
                            op->name, ug_format_shape(x->ndim, x->shape, sx, sizeof sx), (long long)heads);
    }
    if (nin > 1 && in[1].dtype != x->dtype)
        return ug_set_error(UG_ERR_DTYPE, "%s: the mask is %s and qkv %s; give them one dtype", op->name,
                            ug_dtype_name(in[1].dtype), ug_dtype_name(x->dtype));
    *s = (attn_shape){.batch = x->shape[0], .heads = heads, .q_len = x->shape[1], .kv_len = x->shape[1],
                      .d = x->shape[2] / (3 * heads)};
    return check_head_dim(op, s);
}

static ug_status check_attention(const ug_op *op, int nin, const ug_meta *in, attn_shape *s)
{
    return packed(op) ? check_packed(op, nin, in, s) : check_separate(op, nin, in, s);
}

/* The mask's strides over [batch, heads, q_len, kv_len] (0 on a broadcast
 * axis), after checking that it broadcasts there. */
static ug_status mask_strides(const ug_op *op, const ug_meta *mask, const attn_shape *s, int64_t *strides)
{
    const int64_t full[4] = {s->batch, s->heads, s->q_len, s->kv_len};
    int ndim = 0;
    int64_t shape[UG_MAX_DIMS];
    char name[96];
    snprintf(name, sizeof name, "%s: the mask", op->name);
    UG_TRY(ug_broadcast_shape(mask->ndim, mask->shape, 4, full, name, &ndim, shape));
    if (ndim != 4 || memcmp(shape, full, sizeof full)) {
        char sm[96];
        return ug_set_error(UG_ERR_SHAPE, "%s: the mask %s does not broadcast to [%lld,%lld,%lld,%lld]",
                            op->name, ug_format_shape(mask->ndim, mask->shape, sm, sizeof sm),
                            (long long)s->batch, (long long)s->heads, (long long)s->q_len, (long long)s->kv_len);
    }
    int64_t stride = 1;
    for (int i = 3; i >= 0; i--) {
        const int at = mask->ndim - 4 + i;
        const int64_t size = at >= 0 ? mask->shape[at] : 1;
        strides[i] = size == 1 ? 0 : stride;
        stride *= size;
    }
    return UG_OK;
}

static ug_status attention_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    attn_shape s;
    UG_TRY(check_attention(op, nin, in, &s));
    int64_t strides[4];
    if (nin > qkv_inputs(op))
        UG_TRY(mask_strides(op, &in[qkv_inputs(op)], &s, strides));
    out[0] = in[0];
    if (packed(op))
        out[0].shape[2] = s.heads * s.d;
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {s.batch * s.heads * s.q_len}};
    *nout = 2;
    return UG_OK;
}

static ug_attention_layout contiguous(int64_t heads, int64_t rows, int64_t d)
{
    return (ug_attention_layout){heads * rows * d, rows * d, d};
}

/* The kernel's arguments for the op's q, k and v (or qkv) and mask, in[]
 * in the op's input order (the mask NULL where there is none). */
static ug_status attention_args(const ug_op *op, const ug_tensor *const *in, ug_attention_args *a)
{
    const int nqkv = qkv_inputs(op), n = nqkv + (in[nqkv] != NULL);
    ug_meta m[4];
    for (int i = 0; i < n; i++)
        m[i] = ug_meta_of_tensor(in[i]);
    attn_shape s;
    UG_TRY(check_attention(op, n, m, &s));
    *a = (ug_attention_args){.causal = op->p.attention.causal, .deterministic = ug_deterministic(),
                             .scale = op->p.attention.scale,
                             .batch = s.batch, .heads = s.heads, .q_len = s.q_len, .kv_len = s.kv_len,
                             .head_dim = s.d};
    if (packed(op)) { /* row t of batch entry b: q's heads, then k's, then v's */
        const int64_t width = s.heads * s.d;
        a->q = a->k = a->v = ug_kview_of(in[0]);
        a->k.offset += width;
        a->v.offset += 2 * width;
        a->q_at = a->k_at = a->v_at = (ug_attention_layout){s.q_len * 3 * width, s.d, 3 * width};
        a->o_at = (ug_attention_layout){s.q_len * width, s.d, width};
    } else {
        a->q = ug_kview_of(in[0]);
        a->k = ug_kview_of(in[1]);
        a->v = ug_kview_of(in[2]);
        a->q_at = a->o_at = contiguous(s.heads, s.q_len, s.d);
        a->k_at = a->v_at = contiguous(s.heads, s.kv_len, s.d);
    }
    if (n > nqkv) {
        a->mask = ug_kview_of(in[nqkv]);
        UG_TRY(mask_strides(op, &m[nqkv], &s, a->mask_strides));
    }
    /* Dropout: a graph's in training mode only, keyed as its masks are. */
    const ug_run_state *run = op->p.attention.run;
    if (op->p.attention.dropout > 0.0f && (!run || run->training)) {
        a->dropout = op->p.attention.dropout;
        a->seed = run ? ug_dropout_key(run->seed) : op->p.attention.seed;
        a->offset = op->p.attention.offset + (run ? run->first_dropout_stream << 32 : 0);
        if (run)
            a->runs = ug_kview_of(run->run_count);
    }
    return UG_OK;
}

static ug_status attention_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_attention_args a;
    UG_TRY(attention_args(op, in, &a));
    a.o = ug_kview_of(out[0]);
    a.lse = ug_kview_of(out[1]);
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_ATTENTION, op->name, in[0]->dtype, &a);
}

/* The gradient: inputs gy, q, k, v (or qkv), o, lse (and the mask);
 * results dq, dk, dv (or dqkv: the kernels write every element) and delta
 * (f32 scratch, a row each). */
static ug_status attention_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nin;
    const int nqkv = qkv_inputs(op);
    for (int i = 0; i < nqkv; i++)
        out[i] = in[1 + i];
    out[nqkv] = in[2 + nqkv];
    *nout = nqkv + 1;
    return UG_OK;
}

static ug_status attention_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const int nqkv = qkv_inputs(op);
    const ug_tensor *forward_in[4] = {NULL}; /* q, k, v (or qkv), then the mask or NULL */
    for (int i = 0; i < nqkv; i++)
        forward_in[i] = in[1 + i];
    forward_in[nqkv] = in[3 + nqkv];
    ug_attention_args a;
    UG_TRY(attention_args(op, forward_in, &a));
    a.backward = true;
    a.dout = ug_kview_of(in[0]);
    a.o = ug_kview_of(in[1 + nqkv]);
    a.lse = ug_kview_of(in[2 + nqkv]);
    if (packed(op)) {
        a.dq = a.dk = a.dv = ug_kview_of(out[0]);
        a.dk.offset = a.k.offset - a.q.offset + a.dq.offset;
        a.dv.offset = a.v.offset - a.q.offset + a.dq.offset;
    } else {
        a.dq = ug_kview_of(out[0]);
        a.dk = ug_kview_of(out[1]);
        a.dv = ug_kview_of(out[2]);
    }
    a.delta = ug_kview_of(out[nqkv]);
    return ug_dispatch(ug_dev(in[1]), UG_KERNEL_ATTENTION, op->name, in[1]->dtype, &a);
}

static const ug_op_def attention_grad = {.family = "attention gradient", .infer = attention_grad_infer,
                                         .launch = attention_grad_launch,
                                         .inputs = {"gy", "q", "k", "v", "o", "lse", "mask"}};
static const ug_op_def attention_packed_grad = {.family = "attention gradient", .infer = attention_grad_infer,
                                                .launch = attention_grad_launch,
                                                .inputs = {"gy", "qkv", "o", "lse", "mask"}};

static ug_status attention_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    const int nqkv = qkv_inputs(n->op);
    bool needed = false;
    for (int i = 0; i < nqkv; i++)
        needed = needed || ug_grad_needed(n->in[i]);
    if (!needed)
        return UG_OK;
    if (ug_value_dtype(gy) != ug_value_dtype(n->in[0]))
        UG_TRY(ug_g_cast(g, gy, ug_value_dtype(n->in[0]), &gy));
    ug_value *in[7] = {gy};
    for (int i = 0; i < nqkv; i++)
        in[1 + i] = n->in[i];
    in[1 + nqkv] = n->out;
    in[2 + nqkv] = n->saved[0];
    in[3 + nqkv] = n->nin > nqkv ? n->in[nqkv] : NULL;
    ug_op op = {.def = packed(n->op) ? &attention_packed_grad : &attention_grad,
                .name = "graph attention gradient", .p.attention = n->op->p.attention};
    ug_value *first = NULL;
    UG_TRY(ug_op_graph(g, &op, 3 + nqkv + (n->nin > nqkv), in, &first));
    UG_TRY(ug_grad_give(g, n->in[0], first));
    for (int i = 1; i < nqkv; i++)
        UG_TRY(ug_grad_give(g, n->in[i], ug_saved_of(first, i - 1)));
    return UG_OK;
}

static const ug_op_def attention = {.family = "attention", .infer = attention_infer, .launch = attention_launch,
                                    .backward = attention_backward, .inputs = {"q", "k", "v", "mask"},
                                    .autocast = ug_autocast_half};
static const ug_op_def attention_packed = {.family = "attention", .infer = attention_infer,
                                           .launch = attention_launch, .backward = attention_backward,
                                           .inputs = {"qkv", "mask"}, .autocast = ug_autocast_half};

/* The op for opts (NULL: defaults) on head_dim; packed_heads > 0: the
 * packed form. */
static ug_status attention_op(const char *name, const ug_attention_options *opts, int64_t head_dim,
                              int64_t packed_heads, ug_op *op)
{
    const ug_attention_options none = {0};
    if (!opts)
        opts = &none;
    if (!(opts->scale >= 0.0f) || isinf(opts->scale))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: scale %g; give a positive finite scale, or 0 for "
                            "1/sqrt(head_dim)", name, (double)opts->scale);
    if (!(opts->dropout >= 0.0f && opts->dropout < 1.0f))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: dropout %g; give a probability in [0, 1)", name,
                            (double)opts->dropout);
    *op = (ug_op){.def = packed_heads > 0 ? &attention_packed : &attention, .name = name,
                  .p.attention = {.causal = opts->causal,
                                  .scale = opts->scale > 0.0f ? opts->scale
                                                              : 1.0f / sqrtf((float)(head_dim > 0 ? head_dim : 1)),
                                  .dropout = opts->dropout, .packed_heads = packed_heads, .seed = opts->seed}};
    return UG_OK;
}

/* Adds op to the graph; with dropout, as the graph's next masks: one
 * stream of 2^32 counters per 2^32 scores (batch x heads x rows x keys). */
static ug_status attention_graph(ug_graph *g, ug_op *op, int nin, ug_value **in, int64_t scores, ug_value **out)
{
    ug_run_state *run = NULL;
    if (op->p.attention.dropout > 0.0f) {
        run = ug_graph_run_state(g);
        op->p.attention.run = run;
        op->p.attention.offset = run->dropout_streams << 32;
    }
    UG_TRY(ug_op_graph(g, op, nin, in, out));
    if (run)
        run->dropout_streams += scores > 0 ? (uint64_t)(scores - 1) / (1ull << 32) + 1 : 1;
    return UG_OK;
}

/* The packed form's head_dim from qkv's last axis (0 where it does not
 * divide: the shape check says so), after checking heads. */
static ug_status packed_head_dim(const char *name, int ndim, const int64_t *shape, int heads, int64_t *d)
{
    if (heads < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %d heads; give at least one", name, heads);
    *d = ndim > 0 && shape[ndim - 1] % (3 * (int64_t)heads) == 0 ? shape[ndim - 1] / (3 * (int64_t)heads) : 0;
    return UG_OK;
}

ug_status ug_attention(const ug_tensor *q, const ug_tensor *k, const ug_tensor *v, const ug_tensor *mask,
                       const ug_attention_options *opts, ug_tensor **out)
{
    UG_TRY(ug_check_tensor(q, "attention", "q"));
    ug_op op;
    UG_TRY(attention_op("attention", opts, q->ndim > 0 ? q->shape[q->ndim - 1] : 0, 0, &op));
    const ug_tensor *in[4] = {q, k, v, mask};
    return ug_op_eager(&op, mask ? 4 : 3, in, out);
}

ug_status ug_g_attention(ug_graph *g, ug_value *q, ug_value *k, ug_value *v, ug_value *mask,
                         const ug_attention_options *opts, ug_value **out)
{
    UG_TRY(ug_graph_check_value(g, q, "graph attention", "q"));
    ug_op op;
    const int nd = ug_value_ndim(q);
    UG_TRY(attention_op("graph attention", opts, nd > 0 ? ug_value_dim(q, nd - 1) : 0, 0, &op));
    ug_value *in[4] = {q, k, v, mask};
    int64_t scores = nd > 1 && k && ug_value_ndim(k) == nd ? ug_value_dim(k, nd - 2) : 0;
    for (int i = 0; i < nd - 1; i++)
        scores *= ug_value_dim(q, i);
    return attention_graph(g, &op, mask ? 4 : 3, in, scores, out);
}

ug_status ug_attention_packed(const ug_tensor *qkv, int heads, const ug_tensor *mask,
                              const ug_attention_options *opts, ug_tensor **out)
{
    const char *name = "attention_packed";
    UG_TRY(ug_check_tensor(qkv, name, "qkv"));
    int64_t d = 0;
    UG_TRY(packed_head_dim(name, qkv->ndim, qkv->shape, heads, &d));
    ug_op op;
    UG_TRY(attention_op(name, opts, d, heads, &op));
    const ug_tensor *in[2] = {qkv, mask};
    return ug_op_eager(&op, mask ? 2 : 1, in, out);
}

ug_status ug_g_attention_packed(ug_graph *g, ug_value *qkv, int heads, ug_value *mask,
                                const ug_attention_options *opts, ug_value **out)
{
    const char *name = "graph attention_packed";
    UG_TRY(ug_graph_check_value(g, qkv, name, "qkv"));
    const int nd = ug_value_ndim(qkv);
    int64_t shape[UG_MAX_DIMS], d = 0;
    for (int i = 0; i < nd; i++)
        shape[i] = ug_value_dim(qkv, i);
    UG_TRY(packed_head_dim(name, nd, shape, heads, &d));
    ug_op op;
    UG_TRY(attention_op(name, opts, d, heads, &op));
    ug_value *in[2] = {qkv, mask};
    const int64_t scores = nd == 3 ? shape[0] * heads * shape[1] * shape[1] : 0;
    return attention_graph(g, &op, mask ? 2 : 1, in, scores, out);
}
