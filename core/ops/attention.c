/* Scaled dot-product attention as one op (kernel family attention), eager
 * and in graphs: softmax(scale q k^T + mask) v with an online softmax, so
 * its memory is linear in the sequence (FlashAttention). It saves the
 * rows' log-sum-exp; its gradient recomputes the probabilities from it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/op.h"
#include "unigrad/attention.h"

/* q, k, v as [batch, heads, rows, head_dim]: 4-D, or 3-D with one head. */
typedef struct attn_shape {
    int64_t batch, heads, q_len, kv_len, d;
} attn_shape;

static void split_leading(const ug_meta *m, int64_t *batch, int64_t *heads)
{
    *batch = m->shape[0];
    *heads = m->ndim == 4 ? m->shape[1] : 1;
}

static ug_status check_attention(const ug_op *op, int nin, const ug_meta *in, attn_shape *s)
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
    split_leading(q, &s->batch, &s->heads);
    s->q_len = q->shape[n - 2];
    s->kv_len = k->shape[n - 2];
    s->d = q->shape[n - 1];
    if (s->d < 1 || s->d > UG_ATTENTION_MAX_HEAD_DIM)
        return ug_set_error(UG_ERR_SHAPE, "%s: head_dim %lld; the fused kernels take 1 to %d", op->name,
                            (long long)s->d, UG_ATTENTION_MAX_HEAD_DIM);
    return UG_OK;
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
    if (nin > 3)
        UG_TRY(mask_strides(op, &in[3], &s, strides));
    out[0] = in[0];
    out[1] = (ug_meta){.dtype = UG_F32, .ndim = 1, .shape = {s.batch * s.heads * s.q_len}};
    *nout = 2;
    return UG_OK;
}

/* The kernel's arguments for q, k, v and the mask of in. */
static ug_status attention_args(const ug_op *op, const ug_tensor *const *in, bool has_mask, ug_attention_args *a)
{
    ug_meta m[4];
    for (int i = 0; i < 3 + has_mask; i++)
        m[i] = ug_meta_of_tensor(in[i]);
    attn_shape s;
    UG_TRY(check_attention(op, 3, m, &s));
    *a = (ug_attention_args){.causal = op->p.attention.causal, .scale = op->p.attention.scale,
                             .q = ug_kview_of(in[0]), .k = ug_kview_of(in[1]), .v = ug_kview_of(in[2]),
                             .batch = s.batch, .heads = s.heads, .q_len = s.q_len, .kv_len = s.kv_len,
                             .head_dim = s.d};
    if (has_mask) {
        a->mask = ug_kview_of(in[3]);
        UG_TRY(mask_strides(op, &m[3], &s, a->mask_strides));
    }
    return UG_OK;
}

static ug_status attention_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    ug_attention_args a;
    UG_TRY(attention_args(op, in, in[3] != NULL, &a));
    a.o = ug_kview_of(out[0]);
    a.lse = ug_kview_of(out[1]);
    return ug_dispatch(ug_dev(in[0]), UG_KERNEL_ATTENTION, op->name, in[0]->dtype, &a);
}

/* The gradient: inputs gy, q, k, v, o, lse (and the mask); results dq, dk,
 * dv and delta (f32 scratch, a row each). */
static ug_status attention_grad_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)op;
    (void)nin;
    out[0] = in[1];
    out[1] = in[2];
    out[2] = in[3];
    out[3] = in[5];
    *nout = 4;
    return UG_OK;
}

static ug_status attention_grad_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    const ug_tensor *qkv[4] = {in[1], in[2], in[3], in[6]};
    ug_attention_args a;
    UG_TRY(attention_args(op, qkv, in[6] != NULL, &a));
    a.backward = true;
    a.dout = ug_kview_of(in[0]);
    a.o = ug_kview_of(in[4]);
    a.lse = ug_kview_of(in[5]);
    a.dq = ug_kview_of(out[0]);
    a.dk = ug_kview_of(out[1]);
    a.dv = ug_kview_of(out[2]);
    a.delta = ug_kview_of(out[3]);
    return ug_dispatch(ug_dev(in[1]), UG_KERNEL_ATTENTION, op->name, in[1]->dtype, &a);
}

static const ug_op_def attention_grad = {.family = "attention gradient", .infer = attention_grad_infer,
                                         .launch = attention_grad_launch,
                                         .inputs = {"gy", "q", "k", "v", "o", "lse", "mask"}};

static ug_status attention_backward(ug_graph *g, const ug_op_node *n, ug_value *gy)
{
    ug_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    if (!ug_grad_needed(q) && !ug_grad_needed(k) && !ug_grad_needed(v))
        return UG_OK;
    if (ug_value_dtype(gy) != ug_value_dtype(q))
        UG_TRY(ug_g_cast(g, gy, ug_value_dtype(q), &gy));
    ug_value *in[7] = {gy, q, k, v, n->out, n->saved[0], n->nin > 3 ? n->in[3] : NULL};
    ug_op op = {.def = &attention_grad, .name = "graph attention gradient", .p.attention = n->op->p.attention};
    ug_value *dq = NULL;
    UG_TRY(ug_op_graph(g, &op, n->nin > 3 ? 7 : 6, in, &dq));
    UG_TRY(ug_grad_give(g, q, dq));
    UG_TRY(ug_grad_give(g, k, ug_saved_of(dq, 0)));
    return ug_grad_give(g, v, ug_saved_of(dq, 1));
}

static const ug_op_def attention = {.family = "attention", .infer = attention_infer, .launch = attention_launch,
                                    .backward = attention_backward, .inputs = {"q", "k", "v", "mask"},
                                    .autocast = ug_autocast_half};

/* The op for opts (NULL: defaults) on q's head_dim. */
static ug_status attention_op(const char *name, const ug_attention_options *opts, int64_t head_dim, ug_op *op)
{
    const ug_attention_options none = {0};
    if (!opts)
        opts = &none;
    if (!(opts->scale >= 0.0f) || isinf(opts->scale))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: scale %g; give a positive finite scale, or 0 for "
                            "1/sqrt(head_dim)", name, (double)opts->scale);
    *op = (ug_op){.def = &attention, .name = name,
                  .p.attention = {.causal = opts->causal,
                                  .scale = opts->scale > 0.0f ? opts->scale
                                                              : 1.0f / sqrtf((float)(head_dim > 0 ? head_dim : 1))}};
    return UG_OK;
}

ug_status ug_attention(const ug_tensor *q, const ug_tensor *k, const ug_tensor *v, const ug_tensor *mask,
                       const ug_attention_options *opts, ug_tensor **out)
{
    UG_TRY(ug_check_tensor(q, "attention", "q"));
    ug_op op;
    UG_TRY(attention_op("attention", opts, q->ndim > 0 ? q->shape[q->ndim - 1] : 0, &op));
    const ug_tensor *in[4] = {q, k, v, mask};
    return ug_op_eager(&op, mask ? 4 : 3, in, out);
}

ug_status ug_g_attention(ug_graph *g, ug_value *q, ug_value *k, ug_value *v, ug_value *mask,
                         const ug_attention_options *opts, ug_value **out)
{
    UG_TRY(ug_graph_check_value(g, q, "graph attention", "q"));
    ug_op op;
    const int nd = ug_value_ndim(q);
    UG_TRY(attention_op("graph attention", opts, nd > 0 ? ug_value_dim(q, nd - 1) : 0, &op));
    ug_value *in[4] = {q, k, v, mask};
    return ug_op_graph(g, &op, mask ? 4 : 3, in, out);
}
