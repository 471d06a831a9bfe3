/* Conformance of fused attention (attention.h: ug_attention,
 * ug_g_attention and their packed forms) against a double-precision
 * reference written here from the definition (softmax(scale q k^T +
 * mask) v and its analytic gradients), and against the composed path of existing ops (two products
 * and a softmax): gradients through graphs, eager values in f32, f16 and
 * bf16, causal and masked, head dims 16 to 128, rows and keys not
 * multiples of any tile; the plan's memory against the composed path's at
 * 1024 positions; and what it refuses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "train_support.h"

typedef struct attn_case {
    int64_t batch, heads, rows, keys, d;
    bool causal, masked, three_d;
} attn_case;

/* The additive mask the masked cases use, [rows, keys]: -inf on a
 * diagonal band of keys (never a whole row), a bias elsewhere. */
static double mask_at(int64_t i, int64_t j)
{
    return (i + 2 * j) % 5 == 1 ? -INFINITY : 0.25 * (double)((i * 3 + j) % 4) - 0.3;
}

/* mask_at as a [rows, keys] tensor of dt (with triangle: -inf where the
 * causal mask hides a key too, and 0 elsewhere without masked). */
static ug_tensor *mask_tensor(ug_device *dev, ug_dtype dt, int64_t rows, int64_t keys, bool masked, bool triangle)
{
    const int64_t ms[2] = {rows, keys};
    double *m = th_alloc((size_t)(rows * keys) * sizeof *m);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < keys; j++)
            m[i * keys + j] = triangle && j > i ? -INFINITY : masked ? mask_at(i, j) : 0.0;
    th_round_to(dt, m, rows * keys);
    return th_tensor(dev, dt, 2, ms, m);
}

/* The double reference: y = softmax(scale q k^T + mask) v per (b, h), and
 * given w = d loss / d y, the gradients of q, k and v (gq, gk, gv: NULL
 * when not wanted). z (NULL: none) is dropout's factor for each
 * probability, [batch * heads, rows, keys]: 0, or 1 / (1 - p). */
static void ref_attention(const attn_case *c, const double *q, const double *k, const double *v, const double *z,
                          const double *w, double *y, double *gq, double *gk, double *gv)
{
    const int64_t T = c->rows, S = c->keys, D = c->d, heads = c->batch * c->heads;
    const double scale = 1.0 / sqrt((double)D);
    double *p = th_alloc((size_t)(S + 1) * sizeof *p), *dp = th_alloc((size_t)(S + 1) * sizeof *dp);
    if (gq) {
        memset(gq, 0, (size_t)(heads * T * D) * sizeof *gq);
        memset(gk, 0, (size_t)(heads * S * D) * sizeof *gk);
        memset(gv, 0, (size_t)(heads * S * D) * sizeof *gv);
    }
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < T; i++) {
            const double *qi = q + (h * T + i) * D;
            double top = -INFINITY;
            for (int64_t j = 0; j < S; j++) {
                double s = -INFINITY;
                if (!(c->causal && j > i)) {
                    s = 0.0;
                    for (int64_t e = 0; e < D; e++)
                        s += qi[e] * k[(h * S + j) * D + e];
                    s = s * scale + (c->masked ? mask_at(i, j) : 0.0);
                }
                p[j] = s;
                top = s > top ? s : top;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < S; j++) {
                p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - top);
                sum += p[j];
            }
            const double *zi = z ? z + (h * T + i) * S : NULL;
            for (int64_t e = 0; e < D; e++) {
                double acc = 0.0;
                for (int64_t j = 0; j < S; j++)
                    acc += p[j] / sum * (zi ? zi[j] : 1.0) * v[(h * S + j) * D + e];
                y[(h * T + i) * D + e] = acc;
            }
            if (!gq)
                continue;
            const double *wi = w + (h * T + i) * D;
            double delta = 0.0;
            for (int64_t j = 0; j < S; j++) {
                p[j] /= sum;
                dp[j] = 0.0;
                for (int64_t e = 0; e < D; e++)
                    dp[j] += wi[e] * v[(h * S + j) * D + e];
                dp[j] *= zi ? zi[j] : 1.0;
                delta += p[j] * dp[j];
            }
            for (int64_t j = 0; j < S; j++) {
                const double ds = p[j] * (dp[j] - delta) * scale;
                for (int64_t e = 0; e < D; e++) {
                    gq[(h * T + i) * D + e] += ds * k[(h * S + j) * D + e];
                    gk[(h * S + j) * D + e] += ds * qi[e];
                    gv[(h * S + j) * D + e] += p[j] * (zi ? zi[j] : 1.0) * wi[e];
                }
            }
        }
}

static cf_shape shape_of(const attn_case *c, int64_t rows)
{
    if (c->three_d)
        return (cf_shape){3, {c->batch, rows, c->d}};
    return (cf_shape){4, {c->batch, c->heads, rows, c->d}};
}

/* ---- gradients through graphs ---- */

static const attn_case grad_specs[] = {
    {2, 2, 5, 5, 16, true, false, false},   {1, 3, 7, 9, 16, false, false, false},
    {2, 1, 6, 6, 32, true, false, true},    {1, 2, 67, 67, 128, true, false, false},
    {1, 1, 20, 70, 24, false, false, false},
};

static ug_status build_attention(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const attn_case *s = c->row;
    const ug_attention_options opts = {.causal = s->causal};
    return ug_g_attention(cg->g, p[0], p[1], p[2], NULL, &opts, y);
}

static void ref_attention_grad(const cf_grad_case *c, const double *const *p, const double *w,
                               const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    ref_attention(c->row, p[0], p[1], p[2], NULL, w, y, grad[0], grad[1], grad[2]);
}

/* ---- gradients in f16 and bf16 ----
 * Through casts from the f32 parameters, so the graph's attention and its
 * gradient run in the half type; shapes a library's fused attention takes
 * (cuDNN's: head sizes of multiples of 8, rows 16-byte aligned), so with
 * UG_ATTENTION=cudnn these run there. */

typedef struct half_case {
    attn_case s;
    ug_dtype dt;
} half_case;

static ug_status build_half(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const half_case *h = c->row;
    const ug_attention_options opts = {.causal = h->s.causal};
    ug_value *x[3] = {NULL}, *mask = NULL, *out = NULL;
    ug_status st = UG_OK;
    for (int i = 0; i < 3 && st == UG_OK; i++)
        st = ug_g_cast(cg->g, p[i], h->dt, &x[i]);
    if (st == UG_OK && h->s.masked) {
        ug_tensor *m = mask_tensor(ug_model_device(ug_graph_model(cg->g)), h->dt, h->s.rows, h->s.keys, true, false);
        st = m ? ug_graph_constant(cg->g, "mask", m, &mask) : UG_ERR_OUT_OF_MEMORY;
    }
    if (st == UG_OK)
        st = ug_g_attention(cg->g, x[0], x[1], x[2], mask, &opts, &out);
    return st == UG_OK ? ug_g_cast(cg->g, out, UG_F32, y) : st;
}

/* The reference on the values the half type holds. */
static void ref_half(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev, double *y,
                     double *const *grad)
{
    (void)y_dev;
    const half_case *h = c->row;
    double *r[3];
    for (int i = 0; i < 3; i++)
        r[i] = th_rounded_copy(h->dt, p[i], cf_numel(&c->p[i].shape));
    ref_attention(&h->s, r[0], r[1], r[2], NULL, w, y, grad[0], grad[1], grad[2]);
}

static void half_gradients(ug_device *dev)
{
    static const half_case cases[] = {
        {{2, 2, 24, 24, 16, true, false, false}, UG_F16},  {{1, 3, 17, 40, 32, false, true, false}, UG_BF16},
        {{2, 2, 33, 33, 64, true, false, false}, UG_BF16}, {{1, 2, 19, 24, 8, false, true, false}, UG_F16},
    };
    for (int i = 0; i < CF_COUNT(cases); i++) {
        const attn_case *s = &cases[i].s;
        const cf_shape qs = shape_of(s, s->rows), ks = shape_of(s, s->keys);
        char name[96];
        snprintf(name, sizeof name, "attention %s [%lld,%lld,%lld/%lld,%lld]%s%s", ug_dtype_name(cases[i].dt),
                 (long long)s->batch, (long long)s->heads, (long long)s->rows, (long long)s->keys, (long long)s->d,
                 s->causal ? " causal" : "", s->masked ? " masked" : "");
        const cf_grad_case c = {.name = name, .count = 3, .p = {{qs, -1, 1, 0}, {ks, -1, 1, 0}, {ks, -1, 1, 0}},
                                .build = build_half, .ref = ref_half, .row = &cases[i],
                                .tol = 20 * th_tol(cases[i].dt)};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
}

/* ---- eager values: the double reference and the composed path ---- */

/* softmax(scale q k^T + mask) v with the library's products and softmax. */
static ug_status composed(const ug_tensor *q, const ug_tensor *k, const ug_tensor *v, const ug_tensor *mask,
                          float scale, ug_tensor **out)
{
    ug_tensor *s = NULL, *scaled = NULL, *masked = NULL, *p = NULL;
    ug_status st = ug_matmul(q, k, false, true, &s);
    if (st == UG_OK)
        st = ug_scale_shift(s, scale, 0.0f, &scaled);
    if (st == UG_OK && mask)
        st = ug_add(scaled, mask, &masked);
    if (st == UG_OK)
        st = ug_softmax(mask ? masked : scaled, &p);
    if (st == UG_OK)
        st = ug_matmul(p, v, false, false, out);
    ug_tensor_free(s);
    ug_tensor_free(scaled);
    ug_tensor_free(masked);
    ug_tensor_free(p);
    return st;
}

static void check_eager(ug_device *dev, const attn_case *c, ug_dtype dt)
{
    th_context("attention %s [%lld,%lld,%lld/%lld,%lld]%s%s", ug_dtype_name(dt), (long long)c->batch,
               (long long)c->heads, (long long)c->rows, (long long)c->keys, (long long)c->d,
               c->causal ? " causal" : "", c->masked ? " masked" : "");
    const cf_shape qs = shape_of(c, c->rows), ks = shape_of(c, c->keys);
    double *q = cf_values(cf_numel(&qs), -2, 2, 0), *k = cf_values(cf_numel(&ks), -2, 2, 0);
    double *v = cf_values(cf_numel(&ks), -2, 2, 0);
    th_guard *g = NULL, *plain = NULL;
    ug_tensor *tq = cf_input(dev, dt, &qs, q, true, &g), *tk = cf_input(dev, dt, &ks, k, false, &plain);
    ug_tensor *tv = cf_input(dev, dt, &ks, v, false, &plain), *tm = NULL;
    REQUIRE(tq && tk && tv);
    if (c->masked || c->causal) { /* the composed path's mask: the causal triangle folded in */
        tm = mask_tensor(dev, dt, c->rows, c->keys, c->masked, c->causal);
        REQUIRE(tm);
    }
    ug_tensor *fused_mask = NULL;
    if (c->masked) { /* the same mask without the triangle: causal says that */
        fused_mask = mask_tensor(dev, dt, c->rows, c->keys, true, false);
        REQUIRE(fused_mask);
    }
    double *want = th_alloc((size_t)cf_numel(&qs) * sizeof *want);
    ref_attention(c, q, k, v, NULL, NULL, want, NULL, NULL, NULL);
    th_round_to(dt, want, cf_numel(&qs));
    const ug_attention_options opts = {.causal = c->causal};
    ug_tensor *out = NULL, *ref = NULL;
    ug_status st = ug_attention(tq, tk, tv, fused_mask, &opts, &out);
    const double tol = dt == UG_F32 ? 1e-10 : th_tol(dt);
    if (!cf_check_result(st, out, dt, &qs, want, tol, "fused against the double reference"))
        return;
    th_guard_check(g);
    st = composed(tq, tk, tv, tm, 1.0f / sqrtf((float)c->d), &ref);
    th_track(ref);
    REQUIRE_OK(st);
    double *got = th_download(out), *path = th_download(ref);
    /* The composed path rounds its scores and probabilities to dt too. */
    th_compare("fused against the composed path", got, path, cf_numel(&qs), dt == UG_F32 ? tol : 10 * tol);
}

static const attn_case eager_specs[] = {
    {2, 3, 17, 17, 16, true, false, false},  {1, 2, 9, 33, 32, false, true, false},
    {1, 1, 65, 65, 64, true, true, false},   {2, 1, 33, 40, 128, false, false, true},
    {1, 2, 70, 70, 128, true, false, false},
};

/* ---- q, k and v packed in one tensor ---- */

/* Part `part` of a [batch, rows, parts * heads * d] tensor as [batch,
 * heads, rows, d] (back: the reverse). */
static void heads_of(const attn_case *c, int parts, int part, bool back, double *packed, double *heads)
{
    const int64_t H = c->heads, T = c->rows, D = c->d;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t e = 0; e < D; e++) {
                    const int64_t at = ((b * H + h) * T + t) * D + e;
                    const int64_t from = ((b * T + t) * parts + part) * H * D + h * D + e;
                    if (back)
                        packed[from] = heads[at];
                    else
                        heads[at] = packed[from];
                }
}

static cf_shape packed_shape(const attn_case *c, int parts)
{
    return (cf_shape){3, {c->batch, c->rows, parts * c->heads * c->d}};
}

static const attn_case packed_specs[] = {
    {2, 2, 5, 5, 16, true, false, false},
    {1, 3, 19, 19, 8, false, false, false},
    {2, 4, 33, 33, 32, true, false, false},
};

static ug_status build_packed(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const attn_case *s = c->row;
    const ug_attention_options opts = {.causal = s->causal};
    return ug_g_attention_packed(cg->g, p[0], (int)s->heads, NULL, &opts, y);
}

/* The separate op's reference on the unpacked heads, packed back. */
static void ref_packed_grad(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev,
                            double *y, double *const *grad)
{
    (void)y_dev;
    const attn_case *s = c->row;
    const size_t n = (size_t)(s->batch * s->heads * s->rows * s->d);
    double *part[3], *g[3], *wh = th_alloc(n * sizeof *wh), *yh = th_alloc(n * sizeof *yh);
    for (int i = 0; i < 3; i++) {
        part[i] = th_alloc(n * sizeof *part[i]);
        g[i] = th_alloc(n * sizeof *g[i]);
        heads_of(s, 3, i, false, (double *)p[0], part[i]);
    }
    heads_of(s, 1, 0, false, (double *)w, wh);
    ref_attention(s, part[0], part[1], part[2], NULL, wh, yh, g[0], g[1], g[2]);
    heads_of(s, 1, 0, true, y, yh);
    for (int i = 0; i < 3; i++)
        heads_of(s, 3, i, true, grad[0], g[i]);
}

/* Eager, against the double reference and bit for bit against the
 * separate op on the same heads (the kernels differ only in addressing). */
static void check_packed_eager(ug_device *dev, const attn_case *c, ug_dtype dt)
{
    th_context("attention_packed %s [%lld,%lld,%lld,%lld]%s%s", ug_dtype_name(dt), (long long)c->batch,
               (long long)c->heads, (long long)c->rows, (long long)c->d, c->causal ? " causal" : "",
               c->masked ? " masked" : "");
    const cf_shape xs = packed_shape(c, 3), ys = packed_shape(c, 1), hs = shape_of(c, c->rows);
    const int64_t n = cf_numel(&hs);
    double *x = cf_values(cf_numel(&xs), -2, 2, 0), *part[3];
    th_round_to(dt, x, cf_numel(&xs));
    th_guard *g = NULL, *plain = NULL;
    ug_tensor *tx = cf_input(dev, dt, &xs, x, true, &g), *tp[3], *mask = NULL;
    REQUIRE(tx);
    for (int i = 0; i < 3; i++) {
        part[i] = th_alloc((size_t)n * sizeof *part[i]);
        heads_of(c, 3, i, false, x, part[i]);
        tp[i] = cf_input(dev, dt, &hs, part[i], false, &plain);
        REQUIRE(tp[i]);
    }
    if (c->masked) {
        mask = mask_tensor(dev, dt, c->rows, c->rows, true, false);
        REQUIRE(mask);
    }
    double *heads = th_alloc((size_t)n * sizeof *heads), *want = th_alloc((size_t)n * sizeof *want);
    ref_attention(c, part[0], part[1], part[2], NULL, NULL, heads, NULL, NULL, NULL);
    heads_of(c, 1, 0, true, want, heads);
    th_round_to(dt, want, n);
    const ug_attention_options opts = {.causal = c->causal};
    ug_tensor *out = NULL, *separate = NULL, *merged = NULL;
    const ug_status st = ug_attention_packed(tx, (int)c->heads, mask, &opts, &out);
    if (!cf_check_result(st, out, dt, &ys, want, dt == UG_F32 ? 1e-10 : th_tol(dt), "against the double reference"))
        return;
    th_guard_check(g);
    static const int back[4] = {0, 2, 1, 3};
    REQUIRE_OK(ug_attention(tp[0], tp[1], tp[2], mask, &opts, &separate));
    th_track(separate);
    REQUIRE_OK(ug_permute(separate, 4, back, &merged));
    th_track(merged);
    /* With UG_ATTENTION=cudnn the library runs the separate op but not the
     * packed one (the guarded input's odd offset is not 16-byte aligned):
     * two arithmetics, alike within the type's rounding. */
    const char *path = getenv("UG_ATTENTION");
    if (path && strcmp(path, "cudnn") == 0 && dt != UG_F32)
        th_compare("against the separate op", th_download(out), th_download(merged), n, th_tol(dt));
    else
        th_compare_bits("against the separate op", th_download_raw(out), th_download_raw(merged), n,
                        ug_dtype_size(dt));
}

static const attn_case packed_eager_specs[] = {
    {2, 3, 17, 17, 16, true, false, false},
    {1, 2, 40, 40, 32, false, true, false},
    {1, 4, 65, 65, 64, true, true, false},
};

/* ---- dropout on the probabilities ---- */

enum { DROP_B = 2, DROP_H = 2, DROP_T = 19, DROP_D = 16, DROP_N = DROP_B * DROP_H * DROP_T * DROP_T };
#define DROP_P 0.3f
#define DROP_TOL_GRAD 1e-6 /* conformance_grad.c's: f32 sums over the rows and keys */

/* Eager, against the double reference with the mask drawn here as the
 * header says: ug_random_uniform under the seed, from counter 0. */
static void eager_dropout(ug_device *dev, const attn_case *c, ug_dtype dt)
{
    th_context("attention %s dropout [%lld,%lld,%lld,%lld]%s%s", ug_dtype_name(dt), (long long)c->batch,
               (long long)c->heads, (long long)c->rows, (long long)c->d, c->causal ? " causal" : "",
               c->masked ? " masked" : "");
    const cf_shape qs = shape_of(c, c->rows), ks = shape_of(c, c->keys);
    const int64_t scores[2] = {c->batch * c->heads * c->rows, c->keys}, nz = scores[0] * scores[1];
    double *q = cf_values(cf_numel(&qs), -2, 2, 0), *k = cf_values(cf_numel(&ks), -2, 2, 0);
    double *v = cf_values(cf_numel(&ks), -2, 2, 0);
    th_guard *plain = NULL;
    ug_tensor *tq = cf_input(dev, dt, &qs, q, false, &plain), *tk = cf_input(dev, dt, &ks, k, false, &plain);
    double *zeros = th_alloc((size_t)nz * sizeof *zeros);
    memset(zeros, 0, (size_t)nz * sizeof *zeros);
    ug_tensor *tv = cf_input(dev, dt, &ks, v, false, &plain), *draw = th_tensor(dev, UG_F32, 2, scores, zeros);
    ug_tensor *mask = NULL;
    REQUIRE(tq && tk && tv && draw);
    if (c->masked) {
        mask = mask_tensor(dev, dt, c->rows, c->keys, true, false);
        REQUIRE(mask);
    }
    const uint64_t seed = 0x5eed;
    REQUIRE_OK(ug_random_uniform(draw, seed, 0, 0.0f, 1.0f));
    const double *u = th_download(draw);
    double *z = th_alloc((size_t)nz * sizeof *z), dropped = 0.0;
    for (int64_t i = 0; i < nz; i++) {
        z[i] = (float)u[i] >= DROP_P ? 1.0 / (1.0 - DROP_P) : 0.0;
        dropped += z[i] == 0.0;
    }
    CHECK_MSG(dropped > 0.2 * (double)nz && dropped < 0.4 * (double)nz, "%g of %lld dropped", dropped,
              (long long)nz);
    double *want = th_alloc((size_t)cf_numel(&qs) * sizeof *want);
    ref_attention(c, q, k, v, z, NULL, want, NULL, NULL, NULL);
    th_round_to(dt, want, cf_numel(&qs));
    const ug_attention_options opts = {.causal = c->causal, .dropout = DROP_P, .seed = seed};
    ug_tensor *out = NULL;
    const ug_status st = ug_attention(tq, tk, tv, mask, &opts, &out);
    cf_check_result(st, out, dt, &qs, want, dt == UG_F32 ? 1e-10 : th_tol(dt), "against the double reference");
}

/* y = attention(q, k, v) with dropout in a graph of m, fused or composed
 * (products, softmax, ug_g_dropout, product), loss = sum(y * w). */
typedef struct dropout_graph {
    ug_graph *g;
    ug_value *y, *grad[3], *probs, *dropped;
} dropout_graph;

static void dropout_graph_build(ug_model *m, ug_tensor *const *params, ug_tensor *w, bool fused, dropout_graph *d)
{
    ug_graph *g = d->g = ts_graph(m);
    REQUIRE(g);
    ug_value *in[3], *wv = NULL, *prod = NULL, *loss = NULL;
    for (int i = 0; i < 3; i++)
        REQUIRE_OK(ug_graph_param(g, params[i], &in[i]));
    if (fused) {
        const ug_attention_options opts = {.dropout = DROP_P};
        REQUIRE_OK(ug_g_attention(g, in[0], in[1], in[2], NULL, &opts, &d->y));
    } else {
        ug_value *scores = NULL, *scaled = NULL;
        REQUIRE_OK(ug_g_matmul(g, in[0], in[1], false, true, &scores));
        REQUIRE_OK(ug_g_scale_shift(g, scores, 1.0f / sqrtf((float)DROP_D), 0.0f, &scaled));
        REQUIRE_OK(ug_g_softmax(g, scaled, &d->probs));
        REQUIRE_OK(ug_g_dropout(g, d->probs, DROP_P, &d->dropped));
        REQUIRE_OK(ug_g_matmul(g, d->dropped, in[2], false, false, &d->y));
        REQUIRE_OK(ug_graph_keep(g, d->probs));
        REQUIRE_OK(ug_graph_keep(g, d->dropped));
    }
    REQUIRE_OK(ug_graph_keep(g, d->y));
    const int64_t shape[4] = {DROP_B, DROP_H, DROP_T, DROP_D};
    REQUIRE_OK(ug_graph_input(g, "w", UG_F32, 4, shape, &wv));
    REQUIRE_OK(ug_g_mul(g, d->y, wv, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    for (int i = 0; i < 3; i++)
        REQUIRE_OK(ug_graph_grad(g, in[i], &d->grad[i]));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_bind(g, wv, w));
}

static double *as_doubles(const float *f, int64_t n)
{
    double *d = th_alloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

/* In a graph: the masks ug_g_dropout draws on the probabilities (the
 * composed graph's, recovered as dropped / p), fresh each run; y and the
 * gradients against the double reference under those masks; eval mode
 * drops nothing. */
static void graph_dropout(ug_device *dev)
{
    th_context("graph attention dropout [%d,%d,%d,%d]", DROP_B, DROP_H, DROP_T, DROP_D);
    const int64_t shape[4] = {DROP_B, DROP_H, DROP_T, DROP_D}, n = DROP_B * DROP_H * DROP_T * DROP_D;
    ug_model *m = ts_model(dev, 31);
    REQUIRE(m);
    ug_tensor *params[3];
    double *host[3];
    static const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        REQUIRE_OK(ug_model_param(m, names[i], 4, shape, UG_INIT_CONSTANT, 0.0f, &params[i]));
        host[i] = cf_values(n, -2, 2, 0);
        float *f = th_alloc((size_t)n * sizeof *f);
        for (int64_t e = 0; e < n; e++)
            host[i][e] = f[e] = (float)host[i][e];
        REQUIRE_OK(ug_tensor_upload(params[i], f, (size_t)n * sizeof *f));
    }
    double *w = cf_values(n, -1, 1, 0);
    float *wf = th_alloc((size_t)n * sizeof *wf);
    for (int64_t e = 0; e < n; e++)
        w[e] = wf[e] = (float)w[e];
    ug_tensor *tw = ts_tensor_f32(dev, 4, shape, wf);
    REQUIRE(tw);
    dropout_graph fused = {0}, composed = {0};
    dropout_graph_build(m, params, tw, true, &fused);
    dropout_graph_build(m, params, tw, false, &composed);
    const attn_case c = {DROP_B, DROP_H, DROP_T, DROP_T, DROP_D, false, false, false};
    double *z = th_alloc(DROP_N * sizeof *z), *first = th_alloc(DROP_N * sizeof *first);
    double *y = th_alloc((size_t)n * sizeof *y), *g[3];
    for (int i = 0; i < 3; i++)
        g[i] = th_alloc((size_t)n * sizeof *g[i]);
    for (int run = 0; run < 2; run++) {
        REQUIRE_OK(ug_graph_run(fused.g));
        REQUIRE_OK(ug_graph_run(composed.g));
        const float *p = ts_read(composed.g, composed.probs), *kept = ts_read(composed.g, composed.dropped);
        REQUIRE(p && kept);
        int64_t dropped = 0, changed = 0;
        for (int64_t e = 0; e < DROP_N; e++) {
            z[e] = kept[e] == 0.0f ? 0.0 : 1.0 / (1.0 - DROP_P);
            dropped += z[e] == 0.0;
            changed += run && z[e] != first[e];
            first[e] = run ? first[e] : z[e];
        }
        CHECK_MSG(dropped > DROP_N / 5 && dropped < 2 * DROP_N / 5, "run %d: %lld of %d dropped", run,
                  (long long)dropped, DROP_N);
        CHECK_MSG(!run || changed > DROP_N / 5, "the second run's mask is the first's (%lld changed)",
                  (long long)changed);
        ref_attention(&c, host[0], host[1], host[2], z, w, y, g[0], g[1], g[2]);
        const float *got = ts_read(fused.g, fused.y);
        REQUIRE(got);
        th_compare("y against the double reference", as_doubles(got, n), y, n, TH_TOL_F32);
        for (int i = 0; i < 3; i++) {
            const float *gi = ts_read(fused.g, fused.grad[i]);
            REQUIRE(gi);
            th_compare(names[i], as_doubles(gi, n), g[i], n, DROP_TOL_GRAD);
        }
    }
    REQUIRE_OK(ug_graph_set_training(fused.g, false));
    REQUIRE_OK(ug_graph_run_forward(fused.g));
    ref_attention(&c, host[0], host[1], host[2], NULL, NULL, y, NULL, NULL, NULL);
    const float *got = ts_read(fused.g, fused.y);
    REQUIRE(got);
    th_compare("eval mode against the reference without dropout", as_doubles(got, n), y, n, TH_TOL_F32);
    ts_cleanup();
}

/* ---- the plan's memory: linear, not quadratic, in the positions ---- */

static void activation_bytes(ug_device *dev, bool fused, uint64_t *bytes)
{
    *bytes = 0;
    ug_model *m = ts_model(dev, 3);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    const int64_t s[4] = {1, 4, 1024, 32};
    ug_tensor *tq = NULL;
    ug_value *q = NULL, *k = NULL, *v = NULL, *y = NULL, *loss = NULL;
    REQUIRE_OK(ug_model_param(m, "q", 4, s, UG_INIT_UNIFORM, 1.0f, &tq));
    REQUIRE_OK(ug_graph_param(g, tq, &q));
    REQUIRE_OK(ug_graph_input(g, "k", UG_F32, 4, s, &k));
    REQUIRE_OK(ug_graph_input(g, "v", UG_F32, 4, s, &v));
    if (fused) {
        const ug_attention_options opts = {.causal = true};
        REQUIRE_OK(ug_g_attention(g, q, k, v, NULL, &opts, &y));
    } else {
        ug_value *scores = NULL, *scaled = NULL, *p = NULL;
        REQUIRE_OK(ug_g_matmul(g, q, k, false, true, &scores));
        REQUIRE_OK(ug_g_scale_shift(g, scores, 0.17f, 0.0f, &scaled));
        REQUIRE_OK(ug_g_softmax(g, scaled, &p));
        REQUIRE_OK(ug_g_matmul(g, p, v, false, false, &y));
    }
    REQUIRE_OK(ug_g_sum(g, y, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    ug_graph_memory_info info;
    REQUIRE_OK(ug_graph_memory(g, &info));
    ts_cleanup();
    *bytes = info.activation_bytes;
}

static void memory_linear(ug_device *dev)
{
    th_context("activation memory at 1024 positions, fused and composed");
    uint64_t fused = 0, path = 0;
    activation_bytes(dev, true, &fused);
    activation_bytes(dev, false, &path);
    CHECK_MSG(fused > 0 && fused * 8 <= path, "fused %llu bytes against the composed path's %llu: more than 1/8",
              (unsigned long long)fused, (unsigned long long)path);
}

/* ---- the self-attention layer against its definition in double ---- */

static void self_attention_layer(ug_device *dev)
{
    th_context("ug_nn_self_attention [2,5,8], 2 heads, causal");
    enum { B = 2, T = 5, C = 8, H = 2, D = C / H };
    ug_model *m = ts_model(dev, 21);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    const int64_t xs[3] = {B, T, C};
    ug_value *x = NULL, *y = NULL;
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 3, xs, &x));
    REQUIRE_OK(ug_nn_self_attention(g, "attn", x, H, true, &y));
    REQUIRE_OK(ug_graph_keep(g, y));
    REQUIRE_OK(ug_graph_compile(g));
    double *xv = cf_values(B * T * C, -1, 1, 0);
    float xf[B * T * C], wq[3 * C * C], bq[3 * C], wp[C * C], bp[C];
    for (int i = 0; i < B * T * C; i++) {
        xf[i] = (float)xv[i];
        xv[i] = xf[i];
    }
    REQUIRE_OK(ug_model_read_param(m, "attn.qkv.weight", wq, sizeof wq));
    REQUIRE_OK(ug_model_read_param(m, "attn.qkv.bias", bq, sizeof bq));
    REQUIRE_OK(ug_model_read_param(m, "attn.proj.weight", wp, sizeof wp));
    REQUIRE_OK(ug_model_read_param(m, "attn.proj.bias", bp, sizeof bp));
    ug_tensor *tx = ts_tensor_f32(dev, 3, xs, xf);
    REQUIRE(tx);
    REQUIRE_OK(ug_graph_bind(g, x, tx));
    REQUIRE_OK(ug_graph_run_forward(g));
    const float *got = ts_read(g, y);
    REQUIRE(got);
    /* qkv = x W^T + b; head h of q is columns [h D, h D + D), k's start at
     * C, v's at 2 C; the heads' outputs side by side, then the projection. */
    static double qkv[B * T * 3 * C], q[B * H * T * D], k[B * H * T * D], v[B * H * T * D], o[B * H * T * D];
    for (int r = 0; r < B * T; r++)
        for (int j = 0; j < 3 * C; j++) {
            double acc = bq[j];
            for (int e = 0; e < C; e++)
                acc += xv[r * C + e] * wq[j * C + e];
            qkv[r * 3 * C + j] = acc;
        }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < D; e++) {
                    const int at = ((b * H + h) * T + t) * D + e, from = (b * T + t) * 3 * C + h * D + e;
                    q[at] = qkv[from];
                    k[at] = qkv[from + C];
                    v[at] = qkv[from + 2 * C];
                }
    const attn_case shape = {B, H, T, T, D, true, false, false};
    ref_attention(&shape, q, k, v, NULL, NULL, o, NULL, NULL, NULL);
    double want[B * T * C], have[B * T * C];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < C; j++) {
                double acc = bp[j];
                for (int h = 0; h < H; h++)
                    for (int e = 0; e < D; e++)
                        acc += o[((b * H + h) * T + t) * D + e] * wp[j * C + h * D + e];
                want[(b * T + t) * C + j] = acc;
                have[(b * T + t) * C + j] = got[(b * T + t) * C + j];
            }
    th_compare("self-attention layer", have, want, B * T * C, 1e-10);
    ts_cleanup();
}

/* ---- what it refuses ---- */

static void attention_errors(ug_device *dev)
{
    th_context("attention errors");
    const int64_t s4[4] = {1, 2, 3, 8}, s4k[4] = {1, 2, 5, 8}, bad_d[4] = {1, 2, 5, 4}, wide[4] = {1, 1, 2, 300};
    const int64_t s34[2] = {3, 4};
    double vals[2400] = {0};
    ug_tensor *q = th_tensor(dev, UG_F32, 4, s4, vals), *k = th_tensor(dev, UG_F32, 4, s4k, vals);
    ug_tensor *kh = th_tensor(dev, UG_F16, 4, s4k, vals), *kd = th_tensor(dev, UG_F32, 4, bad_d, vals);
    ug_tensor *w = th_tensor(dev, UG_F32, 4, wide, vals), *flat = th_tensor(dev, UG_F32, 2, s4k + 2, vals);
    ug_tensor *mask = th_tensor(dev, UG_F32, 2, s34, vals), *out = NULL;
    REQUIRE(q && k && kh && kd && w && flat && mask);
    if (CHECK_STATUS(ug_attention(q, kh, kh, NULL, NULL, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("one dtype");
    if (CHECK_STATUS(ug_attention(q, kd, kd, NULL, NULL, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("head_dim");
    CHECK_STATUS(ug_attention(flat, flat, flat, NULL, NULL, &out), UG_ERR_SHAPE);
    if (CHECK_STATUS(ug_attention(w, w, w, NULL, NULL, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("1 to 256");
    if (CHECK_STATUS(ug_attention(q, k, k, mask, NULL, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("mask");
    const ug_attention_options negative = {.scale = -1.0f};
    CHECK_STATUS(ug_attention(q, k, k, NULL, &negative, &out), UG_ERR_INVALID_ARGUMENT);
    const ug_attention_options all_dropped = {.dropout = 1.0f};
    if (CHECK_STATUS(ug_attention(q, k, k, NULL, &all_dropped, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("[0, 1)");
    CHECK(out == NULL);
    const int64_t packed[3] = {1, 3, 48}; /* three heads of 16, or 16 of 1 */
    ug_tensor *qkv = th_tensor(dev, UG_F32, 3, packed, vals), *qkv_h = th_tensor(dev, UG_F16, 3, packed, vals);
    const int64_t s33[2] = {3, 3};
    ug_tensor *square = th_tensor(dev, UG_F32, 2, s33, vals);
    REQUIRE(qkv && qkv_h && square);
    if (CHECK_STATUS(ug_attention_packed(qkv, 5, NULL, NULL, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("3 x heads x head_dim");
    if (CHECK_STATUS(ug_attention_packed(qkv, 0, NULL, NULL, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("heads");
    CHECK_STATUS(ug_attention_packed(flat, 1, NULL, NULL, &out), UG_ERR_SHAPE);
    if (CHECK_STATUS(ug_attention_packed(qkv_h, 1, square, NULL, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("mask");
    if (CHECK_STATUS(ug_attention_packed(qkv, 1, mask, NULL, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("mask");
    CHECK(out == NULL);
}

void test_attention_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(grad_specs); i++) {
        const attn_case *s = &grad_specs[i];
        const cf_shape qs = shape_of(s, s->rows), ks = shape_of(s, s->keys);
        char name[96];
        snprintf(name, sizeof name, "attention [%lld,%lld,%lld/%lld,%lld]%s", (long long)s->batch,
                 (long long)s->heads, (long long)s->rows, (long long)s->keys, (long long)s->d,
                 s->causal ? " causal" : "");
        const cf_grad_case c = {.name = name, .count = 3, .p = {{qs, -1, 1, 0}, {ks, -1, 1, 0}, {ks, -1, 1, 0}},
                                .build = build_attention, .ref = ref_attention_grad, .row = s};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
    for (int i = 0; i < CF_COUNT(packed_specs); i++) {
        const attn_case *s = &packed_specs[i];
        char name[96];
        snprintf(name, sizeof name, "attention_packed [%lld,%lld,%lld,%lld]%s", (long long)s->batch,
                 (long long)s->heads, (long long)s->rows, (long long)s->d, s->causal ? " causal" : "");
        const cf_grad_case c = {.name = name, .count = 1, .p = {{packed_shape(s, 3), -1, 1, 0}},
                                .build = build_packed, .ref = ref_packed_grad, .row = s};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
    half_gradients(dev);
    cf_rows_ran(CF_ROWS_ATTENTION);
    static const ug_dtype dtypes[] = {UG_F32, UG_F16, UG_BF16};
    for (int t = 0; t < CF_COUNT(dtypes); t++) {
        for (int i = 0; i < CF_COUNT(eager_specs); i++)
            check_eager(dev, &eager_specs[i], dtypes[t]);
        for (int i = 0; i < CF_COUNT(packed_eager_specs); i++)
            check_packed_eager(dev, &packed_eager_specs[i], dtypes[t]);
    }
    static const attn_case dropout_specs[] = {
        {2, 2, 17, 17, 16, true, false, false},
        {1, 3, 9, 40, 32, false, true, false},
    };
    for (int t = 0; t < CF_COUNT(dtypes); t++)
        for (int i = 0; i < CF_COUNT(dropout_specs); i++)
            eager_dropout(dev, &dropout_specs[i], dtypes[t]);
    graph_dropout(dev);
    memory_linear(dev);
    self_attention_layer(dev);
    attention_errors(dev);
}
