/* cuDNN's fused attention (flash attention in f16 and bf16) for the CUDA
 * flavour, through cuDNN 9's backend (graph) API, resolved with dlsym from
 * the libcudnn.so.9 the convolutions load (conv_cudnn.cpp): each pass is
 * an operation graph that cuDNN's runtime fusion engines compile into one
 * kernel, the graphs cudnn-frontend builds for its SDPA nodes:
 *
 *   forward:  S = Q K^T * scale (+ mask) (causal: row >= column kept,
 *             else the mask value); M = max_j S, E = exp(S - M),
 *             Z = sum_j E; Stats = M + log Z (our lse); P = E / Z in the
 *             io type; O = P V.
 *   backward: softmax_sum = sum_d dO * O (our delta); P = exp(S - Stats)
 *             recomputed; dV = P^T dO; dS = P * (dO V^T - softmax_sum) *
 *             scale; dK = dS^T Q; dQ = dS K, written directly: the
 *             frontend's deterministic form (no f32 dQ accumulated by
 *             atomics in the workspace), so a pass gives the same bits on
 *             every run.
 *
 * Every operand is a strided [batch, heads, rows, head_dim] view, so packed
 * q, k, v (ug_attention_layout) need no copies; K (and V backward) enter
 * transposed by swapping their last two strides. Scale and the mask value
 * are by-value scalars. A plan (engine configuration from cuDNN's
 * heuristics, the first that finalizes) is made per queue and shape at the
 * shape's first run and kept, with its workspace, until the queue closes.
 *
 * What cuDNN documents it takes (f16/bf16, head dim a multiple of 8 up to
 * 128, unit-stride head dim, 16-byte alignment, a mask over whole rows) is
 * screened before any graph is built (ug_hip_library_attention_refusal);
 * a graph cuDNN still refuses leaves the pass to the own kernels. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/conv_library.h"

#ifdef UG_CUDA
/* cudnn_graph.h's values (cuDNN 9). */
enum {
    /* descriptor types */
    D_POINTWISE = 0, D_ENGINECFG = 3, D_ENGINEHEUR = 4, D_EXECUTION_PLAN = 5, D_OP_POINTWISE = 13,
    D_OPERATIONGRAPH = 15, D_VARIANT_PACK = 16, D_TENSOR = 17, D_MATMUL = 18, D_OP_MATMUL = 19,
    D_REDUCTION = 21, D_OP_REDUCTION = 22, D_OP_RESHAPE = 31,
    /* attribute value types */
    T_HANDLE = 0, T_DATA_TYPE = 1, T_BOOLEAN = 2, T_INT64 = 3, T_FLOAT = 4, T_VOID_PTR = 6, T_HEUR_MODE = 8,
    T_POINTWISE_MODE = 14, T_DESCRIPTOR = 15, T_REDUCTION_OP = 18,
    /* attributes */
    A_POINTWISE_MODE = 0, A_POINTWISE_MATH_PREC = 1, A_POINTWISE_AXIS = 9, A_ENGINEHEUR_MODE = 200,
    A_ENGINEHEUR_GRAPH = 201, A_ENGINEHEUR_RESULTS = 202, A_PLAN_HANDLE = 400, A_PLAN_CONFIG = 401,
    A_PLAN_WORKSPACE = 402, A_OP_PW_DESC = 750, A_OP_PW_X = 751, A_OP_PW_B = 752, A_OP_PW_Y = 753,
    A_OP_PW_ALPHA1 = 754, A_OP_PW_ALPHA2 = 755, A_OP_PW_T = 758, A_GRAPH_HANDLE = 800, A_GRAPH_OPS = 801,
    A_TENSOR_ALIGNMENT = 900, A_TENSOR_TYPE = 901, A_TENSOR_DIMS = 902, A_TENSOR_STRIDES = 903,
    A_TENSOR_UID = 906, A_TENSOR_VIRTUAL = 907, A_TENSOR_BY_VALUE = 908, A_PACK_UIDS = 1000,
    A_PACK_POINTERS = 1001, A_PACK_WORKSPACE = 1003, A_MATMUL_COMP_TYPE = 1500, A_OP_MATMUL_A = 1520,
    A_OP_MATMUL_B = 1521, A_OP_MATMUL_C = 1522, A_OP_MATMUL_DESC = 1523, A_REDUCTION_OP = 1600,
    A_REDUCTION_COMP_TYPE = 1601, A_OP_REDUCTION_X = 1610, A_OP_REDUCTION_Y = 1611,
    A_OP_REDUCTION_DESC = 1612, A_OP_RESHAPE_X = 2200, A_OP_RESHAPE_Y = 2201,
    /* data types */
    DT_FLOAT = 0, DT_HALF = 2, DT_INT32 = 4, DT_BFLOAT16 = 9, DT_BOOLEAN = 11,
    /* pointwise modes and reductions */
    PW_ADD = 0, PW_MUL = 1, PW_DIV = 6, PW_SUB = 9, PW_EXP = 13, PW_LOG = 15, PW_CMP_GE = 303,
    PW_GEN_INDEX = 501, PW_BINARY_SELECT = 601, RED_ADD = 0, RED_MAX = 3,
    HEUR_FALLBACK = 2, HEUR_A = 3,
};

/* The tensors the caller's memory backs, by unique id; the graph's virtual
 * ones are numbered from FIRST_VIRTUAL. */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_MASK, U_MASK_VALUE, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_COUNT };
enum { FIRST_VIRTUAL = 100, MAX_DESCS = 96, MAX_OPS = 32 };

typedef void *desc;
static struct {
    size_t (*get_version)(void);
    const char *(*error_string)(int);
    void (*last_error)(char *, size_t);
    int (*create)(int, desc *);
    int (*destroy)(desc);
    int (*set)(desc, int name, int type, int64_t count, const void *elements);
    int (*get)(desc, int name, int type, int64_t requested, int64_t *count, void *elements);
    int (*finalize)(desc);
    int (*execute)(void *handle, desc plan, desc pack);
} g;

static pthread_mutex_t g_load_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_tried, g_loaded;
static size_t g_version;
static char g_label[200];

static bool loaded(void)
{
    pthread_mutex_lock(&g_load_lock);
    if (!g_tried) {
        g_tried = true;
        void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        const ug_hip_symbol syms[] = {
            {&g.get_version, "cudnnGetVersion"},       {&g.error_string, "cudnnGetErrorString"},
            {&g.last_error, "cudnnGetLastErrorString"}, {&g.create, "cudnnBackendCreateDescriptor"},
            {&g.destroy, "cudnnBackendDestroyDescriptor"}, {&g.set, "cudnnBackendSetAttribute"},
            {&g.get, "cudnnBackendGetAttribute"},      {&g.finalize, "cudnnBackendFinalize"},
            {&g.execute, "cudnnBackendExecute"},
        };
        g_loaded = lib && ug_hip_bind_symbols(lib, syms, sizeof syms / sizeof syms[0]);
        if (g_loaded) { /* stays loaded: plans live until the queues close */
            g_version = g.get_version();
            snprintf(g_label, sizeof g_label, "cuDNN %zu.%zu.%zu", g_version / 10000, g_version / 100 % 100,
                     g_version % 100);
        } else {
            snprintf(g_label, sizeof g_label, "none (%s)",
                     lib ? "libcudnn.so.9 lacks the backend API" : "no libcudnn.so.9");
            if (lib)
                dlclose(lib);
        }
    }
    const bool ok = g_loaded;
    pthread_mutex_unlock(&g_load_lock);
    return ok;
}

const char *ug_hip_library_attention_version(void)
{
    loaded();
    return g_label;
}

static bool aligned(const ug_kview *v) { return ((uintptr_t)ug_hip_ptr(v) & 15) == 0; }

/* Every stride of a layout in whole 16-byte units. */
static bool layout_aligned(const ug_attention_layout *at)
{
    return at->batch % 8 == 0 && at->head % 8 == 0 && at->row % 8 == 0;
}

const char *ug_hip_library_attention_refusal(const ug_attention_args *a)
{
    if (!loaded())
        return g_label;
    if (a->q.dtype != UG_F16 && a->q.dtype != UG_BF16)
        return "cuDNN's fused attention takes f16 and bf16 only";
    if (a->head_dim % 8 != 0 || a->head_dim > 128)
        return "cuDNN's fused attention takes head sizes of multiples of 8 up to 128";
    if (a->dropout > 0.0f)
        return "cuDNN draws other dropout masks than the library's";
    if (g_version >= 91000 && g_version < 91002)
        return "cuDNN 9.10.0 and 9.10.1 have known faults in fused attention";
    if (a->backward && (g_version < 91600 && a->kv_len % 128 != 0))
        return "cuDNN before 9.16 needs key rows in multiples of 128 for the attention gradient";
    if (a->backward && a->q_len == 1 && a->kv_len == 1)
        return "cuDNN's attention gradient refuses a single query and key";
    if (a->q_len < 1 || a->kv_len < 1)
        return "nothing to attend to";
    const int64_t *ms = a->mask_strides;
    if (a->mask.mem && (ms[3] != 1 || ms[2] == 0 || ms[2] % 8 || ms[1] % 8 || ms[0] % 8 || !aligned(&a->mask)))
        return "cuDNN's attention takes a mask of whole aligned rows only";
    const ug_attention_layout *at[4] = {&a->q_at, &a->k_at, &a->v_at, &a->o_at};
    for (int i = 0; i < 4; i++)
        if (!layout_aligned(at[i]))
            return "cuDNN's attention takes rows 16-byte aligned only";
    const ug_kview *views[] = {&a->q, &a->k, &a->v, &a->o, &a->dout, &a->dq, &a->dk, &a->dv};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++)
        if (views[i]->mem && !aligned(views[i]))
            return "cuDNN's attention takes 16-byte aligned operands only";
    return NULL;
}

/* ---- building a graph ----------------------------------------------------- */

/* What a plan was made for: everything the graph's descriptors hold. */
typedef struct plan_key {
    bool backward, causal, masked;
    int dtype;
    int64_t batch, heads, q_len, kv_len, head_dim;
    ug_attention_layout at[4];
    int64_t mask_strides[4];
} plan_key;

typedef struct plan {
    plan_key key;
    desc descs[MAX_DESCS]; /* everything made for it, kept while the plan lives */
    int count;
    desc plan;
    void *workspace;
    size_t workspace_bytes;
    struct plan *next;
} plan;

typedef struct builder {
    plan *p;
    int rc;            /* the first failing call's status */
    const char *where; /* and what it was */
    desc ops[MAX_OPS];
    int nops;
    int64_t next_uid;
} builder;

static desc keep(builder *b, int type)
{
    desc d = NULL;
    if (b->rc != 0)
        return NULL;
    if (b->p->count == MAX_DESCS) {
        b->rc = -1, b->where = "descriptor count";
        return NULL;
    }
    b->rc = g.create(type, &d);
    b->where = "cudnnBackendCreateDescriptor";
    if (b->rc == 0)
        b->p->descs[b->p->count++] = d;
    return b->rc == 0 ? d : NULL;
}

static void set(builder *b, desc d, int name, int type, int64_t count, const void *v)
{
    if (b->rc == 0 && (b->rc = g.set(d, name, type, count, v)) != 0)
        b->where = "cudnnBackendSetAttribute";
}

static void finish(builder *b, desc d, const char *what)
{
    if (b->rc == 0 && (b->rc = g.finalize(d)) != 0)
        b->where = what;
}

/* A tensor of four dims; uid 0: virtual, numbered here. */
static desc tensor(builder *b, int type, const int64_t dims[4], const int64_t strides[4], int64_t uid,
                   bool by_value = false)
{
    desc t = keep(b, D_TENSOR);
    const bool virt = uid == 0, yes = true;
    const int64_t id = virt ? b->next_uid++ : uid, alignment = 16;
    set(b, t, A_TENSOR_TYPE, T_DATA_TYPE, 1, &type);
    set(b, t, A_TENSOR_DIMS, T_INT64, 4, dims);
    set(b, t, A_TENSOR_STRIDES, T_INT64, 4, strides);
    set(b, t, A_TENSOR_UID, T_INT64, 1, &id);
    set(b, t, A_TENSOR_ALIGNMENT, T_INT64, 1, &alignment);
    if (virt)
        set(b, t, A_TENSOR_VIRTUAL, T_BOOLEAN, 1, &yes);
    if (by_value)
        set(b, t, A_TENSOR_BY_VALUE, T_BOOLEAN, 1, &yes);
    finish(b, t, "a tensor's finalize");
    return t;
}

static void add_op(builder *b, desc op, const char *what)
{
    finish(b, op, what);
    if (b->rc == 0 && b->nops == MAX_OPS)
        b->rc = -1, b->where = "operation count";
    if (b->rc == 0)
        b->ops[b->nops++] = op;
}

/* y = mode(x, in2, t): in2 and t NULL where the mode takes none; axis for
 * GEN_INDEX. */
static void pointwise(builder *b, int mode, desc x, desc in2, desc y, desc t = NULL, int precision = DT_FLOAT,
                      int64_t axis = -1)
{
    desc pw = keep(b, D_POINTWISE);
    set(b, pw, A_POINTWISE_MODE, T_POINTWISE_MODE, 1, &mode);
    set(b, pw, A_POINTWISE_MATH_PREC, T_DATA_TYPE, 1, &precision);
    if (axis >= 0)
        set(b, pw, A_POINTWISE_AXIS, T_INT64, 1, &axis);
    finish(b, pw, "a pointwise descriptor's finalize");
    desc op = keep(b, D_OP_POINTWISE);
    const float one = 1.0f;
    set(b, op, A_OP_PW_DESC, T_DESCRIPTOR, 1, &pw);
    set(b, op, A_OP_PW_X, T_DESCRIPTOR, 1, &x);
    if (in2)
        set(b, op, A_OP_PW_B, T_DESCRIPTOR, 1, &in2);
    if (t)
        set(b, op, A_OP_PW_T, T_DESCRIPTOR, 1, &t);
    set(b, op, A_OP_PW_Y, T_DESCRIPTOR, 1, &y);
    set(b, op, A_OP_PW_ALPHA1, T_FLOAT, 1, &one);
    set(b, op, A_OP_PW_ALPHA2, T_FLOAT, 1, &one);
    add_op(b, op, "a pointwise operation's finalize");
}

static void matmul(builder *b, desc x, desc y, desc out)
{
    desc mm = keep(b, D_MATMUL);
    const int f32 = DT_FLOAT;
    set(b, mm, A_MATMUL_COMP_TYPE, T_DATA_TYPE, 1, &f32);
    finish(b, mm, "a matmul descriptor's finalize");
    desc op = keep(b, D_OP_MATMUL);
    set(b, op, A_OP_MATMUL_A, T_DESCRIPTOR, 1, &x);
    set(b, op, A_OP_MATMUL_B, T_DESCRIPTOR, 1, &y);
    set(b, op, A_OP_MATMUL_C, T_DESCRIPTOR, 1, &out);
    set(b, op, A_OP_MATMUL_DESC, T_DESCRIPTOR, 1, &mm);
    add_op(b, op, "a matmul operation's finalize");
}

/* y = the sum or maximum of x over the axes where y has size 1. */
static void reduction(builder *b, int reduce, desc x, desc y)
{
    desc r = keep(b, D_REDUCTION);
    const int f32 = DT_FLOAT;
    set(b, r, A_REDUCTION_COMP_TYPE, T_DATA_TYPE, 1, &f32);
    set(b, r, A_REDUCTION_OP, T_REDUCTION_OP, 1, &reduce);
    finish(b, r, "a reduction descriptor's finalize");
    desc op = keep(b, D_OP_REDUCTION);
    set(b, op, A_OP_REDUCTION_DESC, T_DESCRIPTOR, 1, &r);
    set(b, op, A_OP_REDUCTION_X, T_DESCRIPTOR, 1, &x);
    set(b, op, A_OP_REDUCTION_Y, T_DESCRIPTOR, 1, &y);
    add_op(b, op, "a reduction operation's finalize");
}

/* y: x's elements seen through y's dims and strides (a transpose). */
static void reshape(builder *b, desc x, desc y)
{
    desc op = keep(b, D_OP_RESHAPE);
    set(b, op, A_OP_RESHAPE_X, T_DESCRIPTOR, 1, &x);
    set(b, op, A_OP_RESHAPE_Y, T_DESCRIPTOR, 1, &y);
    add_op(b, op, "a reshape operation's finalize");
}

/* The shapes of a key's graph. */
typedef struct dims_of {
    int64_t q[4], qs[4], kt[4], kts[4], k[4], ks[4], v[4], vs[4], vt[4], vts[4], o[4], os[4];
    int64_t ss[4], sss[4], sst[4], ssts[4], r1[4], r1s[4], mask[4], masks[4], scalar[4];
} dims_of;

static void put(int64_t out[4], int64_t a, int64_t b, int64_t c, int64_t d)
{
    out[0] = a, out[1] = b, out[2] = c, out[3] = d;
}

static void shapes(const plan_key *k, dims_of *d)
{
    const int64_t b = k->batch, h = k->heads, s = k->q_len, t = k->kv_len, hd = k->head_dim;
    const ug_attention_layout *q = &k->at[0], *kk = &k->at[1], *v = &k->at[2], *o = &k->at[3];
    put(d->q, b, h, s, hd), put(d->qs, q->batch, q->head, q->row, 1);
    put(d->k, b, h, t, hd), put(d->ks, kk->batch, kk->head, kk->row, 1);
    put(d->kt, b, h, hd, t), put(d->kts, kk->batch, kk->head, 1, kk->row);
    put(d->v, b, h, t, hd), put(d->vs, v->batch, v->head, v->row, 1);
    put(d->vt, b, h, hd, t), put(d->vts, v->batch, v->head, 1, v->row);
    put(d->o, b, h, s, hd), put(d->os, o->batch, o->head, o->row, 1);
    put(d->ss, b, h, s, t), put(d->sss, h * s * t, s * t, t, 1);
    put(d->sst, b, h, t, s), put(d->ssts, h * s * t, s * t, 1, t);
    put(d->r1, b, h, s, 1), put(d->r1s, h * s, s, 1, 1);
    put(d->scalar, 1, 1, 1, 1);
    /* The mask: a batch or head axis of stride 0 has size 1 (its stride
     * then that of a whole [rows, keys] plane). */
    const int64_t *m = k->mask_strides;
    put(d->mask, m[0] ? b : 1, m[1] ? h : 1, s, t);
    put(d->masks, m[0] ? m[0] : s * t, m[1] ? m[1] : s * t, m[2], m[3]);
}

/* S = Q K^T * scale (+ mask) (causal: the keys after the row set to the
 * mask value): the scores both passes start from, SS-shaped FLOAT. */
static desc scores(builder *b, const plan_key *k, const dims_of *d, desc q, desc kt, desc scale)
{
    desc s = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    matmul(b, q, kt, s);
    desc scaled = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    pointwise(b, PW_MUL, s, scale, scaled);
    if (k->masked) {
        desc mask = tensor(b, k->dtype, d->mask, d->masks, U_MASK), masked = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
        pointwise(b, PW_ADD, scaled, mask, masked);
        scaled = masked;
    }
    return scaled;
}

/* Sets the keys after each row (column > row) to the mask value. */
static desc causal(builder *b, const dims_of *d, desc x)
{
    desc row = tensor(b, DT_INT32, d->ss, d->sss, 0), col = tensor(b, DT_INT32, d->ss, d->sss, 0);
    desc kept = tensor(b, DT_BOOLEAN, d->ss, d->sss, 0), y = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    desc value = tensor(b, DT_FLOAT, d->scalar, d->scalar, U_MASK_VALUE, true);
    pointwise(b, PW_GEN_INDEX, x, NULL, row, NULL, DT_FLOAT, 2);
    pointwise(b, PW_GEN_INDEX, x, NULL, col, NULL, DT_FLOAT, 3);
    pointwise(b, PW_CMP_GE, row, col, kept, NULL, DT_BOOLEAN);
    pointwise(b, PW_BINARY_SELECT, x, value, y, kept);
    return y;
}

static void forward_graph(builder *b, const plan_key *k, const dims_of *d)
{
    const int io = k->dtype;
    desc q = tensor(b, io, d->q, d->qs, U_Q), kt = tensor(b, io, d->kt, d->kts, U_K);
    desc v = tensor(b, io, d->v, d->vs, U_V), o = tensor(b, io, d->o, d->os, U_O);
    desc stats = tensor(b, DT_FLOAT, d->r1, d->r1s, U_STATS);
    desc scale = tensor(b, DT_FLOAT, d->scalar, d->scalar, U_SCALE, true);
    desc s = scores(b, k, d, q, kt, scale);
    if (k->causal)
        s = causal(b, d, s);
    desc m = tensor(b, DT_FLOAT, d->r1, d->r1s, 0), shifted = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    desc e = tensor(b, DT_FLOAT, d->ss, d->sss, 0), z = tensor(b, DT_FLOAT, d->r1, d->r1s, 0);
    desc log_z = tensor(b, DT_FLOAT, d->r1, d->r1s, 0);
    /* P in the io type: cuDNN's second product takes its A operand so. */
    desc p = tensor(b, io, d->ss, d->sss, 0);
    reduction(b, RED_MAX, s, m);
    pointwise(b, PW_SUB, s, m, shifted);
    pointwise(b, PW_EXP, shifted, NULL, e);
    reduction(b, RED_ADD, e, z);
    pointwise(b, PW_LOG, z, NULL, log_z);
    pointwise(b, PW_ADD, m, log_z, stats);
    pointwise(b, PW_DIV, e, z, p);
    matmul(b, p, v, o);
}

static void backward_graph(builder *b, const plan_key *k, const dims_of *d)
{
    const int io = k->dtype;
    desc q = tensor(b, io, d->q, d->qs, U_Q), kt = tensor(b, io, d->kt, d->kts, U_K);
    desc vt = tensor(b, io, d->vt, d->vts, U_V), o = tensor(b, io, d->o, d->os, U_O);
    desc dout = tensor(b, io, d->o, d->os, U_DO), stats = tensor(b, DT_FLOAT, d->r1, d->r1s, U_STATS);
    desc dq = tensor(b, io, d->q, d->qs, U_DQ), dk = tensor(b, io, d->k, d->ks, U_DK);
    desc dv = tensor(b, io, d->v, d->vs, U_DV), sum = tensor(b, DT_FLOAT, d->r1, d->r1s, U_SUM);
    desc scale = tensor(b, DT_FLOAT, d->scalar, d->scalar, U_SCALE, true);
    /* softmax_sum = sum_d dO * O: the own kernels' delta. */
    desc product = tensor(b, DT_FLOAT, d->o, d->os, 0);
    pointwise(b, PW_MUL, dout, o, product);
    reduction(b, RED_ADD, product, sum);
    desc s = scores(b, k, d, q, kt, scale), shifted = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    pointwise(b, PW_SUB, s, stats, shifted);
    if (k->causal)
        shifted = causal(b, d, shifted);
    desc p = tensor(b, DT_FLOAT, d->ss, d->sss, 0), pt = tensor(b, io, d->sst, d->ssts, 0);
    pointwise(b, PW_EXP, shifted, NULL, p);
    reshape(b, p, pt);
    matmul(b, pt, dout, dv);
    desc dp = tensor(b, DT_FLOAT, d->ss, d->sss, 0), centred = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    desc weighted = tensor(b, DT_FLOAT, d->ss, d->sss, 0), ds = tensor(b, DT_FLOAT, d->ss, d->sss, 0);
    matmul(b, dout, vt, dp);
    pointwise(b, PW_SUB, dp, sum, centred);
    pointwise(b, PW_MUL, centred, p, weighted);
    pointwise(b, PW_MUL, weighted, scale, ds);
    desc dst = tensor(b, io, d->sst, d->ssts, 0), k_rows = tensor(b, DT_FLOAT, d->k, d->ks, 0);
    reshape(b, ds, dst);
    matmul(b, dst, q, dk);
    reshape(b, kt, k_rows);
    matmul(b, ds, k_rows, dq);
}

/* ---- plans ------------------------------------------------------------------ */

static void plan_free(plan *p)
{
    if (p->workspace)
        (void)hipFree(p->workspace);
    if (p->plan)
        g.destroy(p->plan);
    for (int i = p->count - 1; i >= 0; i--)
        g.destroy(p->descs[i]);
    free(p);
}

static ug_status failed(const builder *b, const plan_key *k)
{
    char detail[400] = "";
    if (b->rc > 0 && g.last_error)
        g.last_error(detail, sizeof detail);
    const bool unsupported = b->rc < 0 || b->rc / 1000 == 3;
    return ug_hip_host->set_error(unsupported ? UG_ERR_UNSUPPORTED : UG_ERR_BACKEND,
                                  "cuda: cuDNN refused the attention %s graph at %s (%s%s%s)",
                                  k->backward ? "gradient" : "forward", b->where,
                                  b->rc < 0 ? "too many descriptors" : g.error_string(b->rc), detail[0] ? ": " : "",
                                  detail);
}

/* The first engine configuration of cuDNN's heuristics (mode A, then the
 * fallback list) whose execution plan finalizes. */
static void choose_engine(builder *b, void *handle, desc graph)
{
    const int modes[2] = {HEUR_A, HEUR_FALLBACK};
    for (int m = 0; m < 2 && b->rc == 0 && !b->p->plan; m++) {
        desc heur = keep(b, D_ENGINEHEUR);
        set(b, heur, A_ENGINEHEUR_GRAPH, T_DESCRIPTOR, 1, &graph);
        set(b, heur, A_ENGINEHEUR_MODE, T_HEUR_MODE, 1, &modes[m]);
        finish(b, heur, "the heuristics' finalize");
        int64_t offered = 0, got = 0;
        if (b->rc == 0 && (b->rc = g.get(heur, A_ENGINEHEUR_RESULTS, T_DESCRIPTOR, 0, &offered, NULL)) != 0)
            b->where = "the heuristics' count";
        desc configs[16];
        offered = offered < 16 ? offered : 16;
        for (int64_t i = 0; i < offered && b->rc == 0; i++)
            configs[i] = keep(b, D_ENGINECFG); /* filled by cuDNN, not finalized here */
        if (b->rc == 0 && offered > 0 &&
            (b->rc = g.get(heur, A_ENGINEHEUR_RESULTS, T_DESCRIPTOR, offered, &got, configs)) != 0)
            b->where = "the heuristics' results";
        for (int64_t i = 0; i < got && b->rc == 0 && !b->p->plan; i++) {
            desc p = NULL;
            if (g.create(D_EXECUTION_PLAN, &p) != 0)
                break;
            if (g.set(p, A_PLAN_CONFIG, T_DESCRIPTOR, 1, &configs[i]) == 0 &&
                g.set(p, A_PLAN_HANDLE, T_HANDLE, 1, &handle) == 0 && g.finalize(p) == 0)
                b->p->plan = p;
            else
                g.destroy(p); /* this engine cannot run the graph: the next */
        }
    }
    if (b->rc == 0 && !b->p->plan)
        b->rc = 3000, b->where = "the engine choice (no engine offered runs the graph)";
}

static ug_status plan_make(void *handle, const plan_key *k, plan **out)
{
    plan *p = (plan *)calloc(1, sizeof *p);
    if (!p)
        return ug_hip_host->set_error(UG_ERR_OUT_OF_MEMORY, "cuda: out of host memory");
    p->key = *k;
    builder b{};
    b.p = p;
    b.next_uid = FIRST_VIRTUAL;
    dims_of d;
    shapes(k, &d);
    if (k->backward)
        backward_graph(&b, k, &d);
    else
        forward_graph(&b, k, &d);
    desc graph = keep(&b, D_OPERATIONGRAPH);
    set(&b, graph, A_GRAPH_OPS, T_DESCRIPTOR, b.nops, b.ops);
    set(&b, graph, A_GRAPH_HANDLE, T_HANDLE, 1, &handle); /* needed before 9.8 */
    finish(&b, graph, "the operation graph's finalize");
    choose_engine(&b, handle, graph);
    int64_t bytes = 0, count = 0;
    if (b.rc == 0 && (b.rc = g.get(p->plan, A_PLAN_WORKSPACE, T_INT64, 1, &count, &bytes)) != 0)
        b.where = "the plan's workspace size";
    if (b.rc != 0) {
        const ug_status st = failed(&b, k);
        plan_free(p);
        return st;
    }
    p->workspace_bytes = bytes > 0 ? (size_t)bytes : 0;
    hipError_t e = p->workspace_bytes ? hipMalloc(&p->workspace, p->workspace_bytes) : hipSuccess;
    if (e != hipSuccess) {
        plan_free(p);
        return ug_hip_fail(UG_ERR_OUT_OF_MEMORY, e, UG_HIP_RT "Malloc (cuDNN attention's workspace)");
    }
    *out = p;
    return UG_OK;
}

static plan_key key_of(const ug_attention_args *a)
{
    plan_key k{};
    k.backward = a->backward;
    k.causal = a->causal;
    k.masked = a->mask.mem != NULL;
    k.dtype = a->q.dtype == UG_F16 ? DT_HALF : DT_BFLOAT16;
    k.batch = a->batch, k.heads = a->heads, k.q_len = a->q_len, k.kv_len = a->kv_len, k.head_dim = a->head_dim;
    k.at[0] = a->q_at, k.at[1] = a->k_at, k.at[2] = a->v_at, k.at[3] = a->o_at;
    if (k.masked)
        memcpy(k.mask_strides, a->mask_strides, sizeof k.mask_strides);
    return k;
}

static bool same_key(const plan_key *x, const plan_key *y)
{
    return x->backward == y->backward && x->causal == y->causal && x->masked == y->masked && x->dtype == y->dtype &&
           x->batch == y->batch && x->heads == y->heads && x->q_len == y->q_len && x->kv_len == y->kv_len &&
           x->head_dim == y->head_dim && !memcmp(x->at, y->at, sizeof x->at) &&
           !memcmp(x->mask_strides, y->mask_strides, sizeof x->mask_strides);
}

void ug_hip_attention_plans_close(ug_hip_queue *q)
{
    for (plan *p = (plan *)q->attention_plans, *next; p; p = next) {
        next = p->next;
        plan_free(p);
    }
    q->attention_plans = NULL;
}

ug_status ug_hip_library_attention(ug_bdev *dev, const ug_attention_args *a)
{
    const char *why = ug_hip_library_attention_refusal(a);
    if (why)
        return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: %s", UG_HIP_BACKEND, why);
    void *handle = NULL;
    UG_BACKEND_TRY(ug_hip_enter(dev));
    UG_BACKEND_TRY(ug_hip_dnn_handle(dev, &handle));
    ug_hip_queue *queue = ug_hip_current(dev);
    const plan_key k = key_of(a);
    plan *p = (plan *)queue->attention_plans;
    while (p && !same_key(&p->key, &k))
        p = p->next;
    if (!p) {
        UG_BACKEND_TRY(plan_make(handle, &k, &p));
        p->next = (plan *)queue->attention_plans;
        queue->attention_plans = p;
    }
    /* By-value scalars are read from the host when the pass is queued. */
    const float scale = a->scale, mask_value = g_version >= 91000 ? -INFINITY : -FLT_MAX;
    int64_t uids[U_COUNT];
    void *pointers[U_COUNT];
    int n = 0;
    const struct {
        int uid;
        void *ptr;
    } bound[] = {
        {U_Q, ug_hip_ptr(&a->q)},         {U_K, ug_hip_ptr(&a->k)},          {U_V, ug_hip_ptr(&a->v)},
        {U_O, ug_hip_ptr(&a->o)},         {U_STATS, ug_hip_ptr(&a->lse)},    {U_SCALE, (void *)&scale},
        {U_MASK, ug_hip_ptr(&a->mask)},   {U_MASK_VALUE, (void *)&mask_value}, {U_DO, ug_hip_ptr(&a->dout)},
        {U_DQ, ug_hip_ptr(&a->dq)},       {U_DK, ug_hip_ptr(&a->dk)},        {U_DV, ug_hip_ptr(&a->dv)},
        {U_SUM, ug_hip_ptr(&a->delta)},
    };
    for (size_t i = 0; i < sizeof bound / sizeof bound[0]; i++) {
        const int u = bound[i].uid;
        const bool used = u == U_Q || u == U_K || u == U_V || u == U_O || u == U_STATS || u == U_SCALE ||
                          (u == U_MASK && k.masked) || (u == U_MASK_VALUE && k.causal) ||
                          (k.backward && (u == U_DO || u == U_DQ || u == U_DK || u == U_DV || u == U_SUM));
        if (used) {
            uids[n] = u;
            pointers[n++] = bound[i].ptr;
        }
    }
    desc pack = NULL;
    int rc = g.create(D_VARIANT_PACK, &pack);
    if (rc == 0)
        rc = g.set(pack, A_PACK_UIDS, T_INT64, n, uids);
    if (rc == 0)
        rc = g.set(pack, A_PACK_POINTERS, T_VOID_PTR, n, pointers);
    if (rc == 0)
        rc = g.set(pack, A_PACK_WORKSPACE, T_VOID_PTR, 1, &p->workspace);
    if (rc == 0)
        rc = g.finalize(pack);
    if (rc == 0)
        rc = g.execute(handle, p->plan, pack);
    if (pack)
        g.destroy(pack);
    (void)hipGetLastError();
    if (rc == 0)
        return UG_OK;
    char detail[400] = "";
    if (g.last_error)
        g.last_error(detail, sizeof detail);
    return ug_hip_host->set_error(rc / 1000 == 3 ? UG_ERR_UNSUPPORTED : UG_ERR_BACKEND,
                                  "cuda: cuDNN's attention %s returned %s (%d)%s%s",
                                  a->backward ? "gradient" : "forward", g.error_string(rc), rc, detail[0] ? ": " : "",
                                  detail);
}

#else /* the HIP flavour: MIOpen has no fused attention to offer */

const char *ug_hip_library_attention_refusal(const ug_attention_args *a)
{
    (void)a;
    return "no fused attention library in the HIP flavour";
}

ug_status ug_hip_library_attention(ug_bdev *dev, const ug_attention_args *a)
{
    (void)dev;
    return ug_hip_host->set_error(UG_ERR_UNSUPPORTED, "%s: %s", UG_HIP_BACKEND,
                                  ug_hip_library_attention_refusal(a));
}

const char *ug_hip_library_attention_version(void) { return "none (the HIP flavour has no fused attention library)"; }

void ug_hip_attention_plans_close(ug_hip_queue *q) { (void)q; }
#endif
