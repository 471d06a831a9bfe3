/* The stand-in libcudnn.so.9's backend (graph) API, what the module's
 * fused attention (backends/hip/attention_cudnn.cpp) is built from:
 * descriptors with typed attributes, finalized in cuDNN's order, an
 * operation graph, heuristics that offer one engine, an execution plan
 * with a workspace, a variant pack, and execution on the handle's stream.
 * Values are cudnn_graph.h's (cuDNN 9), written here from its
 * documentation independently of the module's copy.
 *
 * It checks what cuDNN checks when each descriptor is finalized (required
 * attributes, attribute types, the operands' shapes: broadcasts of
 * pointwise inputs, matmul dimensions, reductions, reshapes that keep the
 * element count; a graph whose every virtual tensor is written once before
 * it is read) and counts what it refuses, which the module must never
 * cause. Execution interprets the graph, whatever it is, on the host: each
 * operation in the graph's order, in double, a virtual tensor rounded to
 * its declared type (as P enters cuDNN's second product in the io type),
 * operands read and written through their strides (a reshape's output sees
 * its input's elements through its own strides). So a wrong graph gives
 * wrong numbers, which the conformance tests against the double reference
 * catch. The workspace the plan asks for is overwritten on every run, so a
 * short one shows under AddressSanitizer. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_stream_work.h"
#include "unigrad/dtype.h"

/* cudnn_graph.h (cuDNN 9) */
enum {
    POINTWISE = 0, ENGINECFG = 3, ENGINEHEUR = 4, EXECUTION_PLAN = 5, OP_POINTWISE = 13, OPERATIONGRAPH = 15,
    VARIANT_PACK = 16, TENSOR = 17, MATMUL = 18, OP_MATMUL = 19, REDUCTION = 21, OP_REDUCTION = 22,
    OP_RESHAPE = 31,
};
enum { TY_HANDLE = 0, TY_DATA_TYPE = 1, TY_BOOLEAN = 2, TY_INT64 = 3, TY_FLOAT = 4, TY_VOID_PTR = 6,
       TY_HEUR_MODE = 8, TY_POINTWISE_MODE = 14, TY_DESCRIPTOR = 15, TY_REDUCTION_OP = 18 };
enum { F32 = 0, F16 = 2, I32 = 4, BF16 = 9, BOOL = 11 };
enum { ADD = 0, MUL = 1, DIV = 6, SUB = 9, EXP = 13, LOG = 15, IDENTITY = 21, CMP_GE = 303, GEN_INDEX = 501,
       BINARY_SELECT = 601 };
enum { RED_ADD = 0, RED_MAX = 3 };
#define ST_OK 0
#define ST_BAD_PARAM 2000
#define ST_NOT_FINALIZED 2004
#define ST_SHAPE 2008
#define ST_DUPLICATE 2009
#define ST_ATTRIBUTE_TYPE 2010
#define ST_GRAPH_PATTERN 3001
#define FAKE_WORKSPACE 4096

/* The attributes each descriptor takes: (descriptor, name, type, most
 * elements); anything else is refused. */
static const struct {
    int desc, name, type, most;
} ATTRS[] = {
    {POINTWISE, 0, TY_POINTWISE_MODE, 1}, {POINTWISE, 1, TY_DATA_TYPE, 1}, {POINTWISE, 9, TY_INT64, 1},
    {ENGINEHEUR, 200, TY_HEUR_MODE, 1}, {ENGINEHEUR, 201, TY_DESCRIPTOR, 1},
    {EXECUTION_PLAN, 400, TY_HANDLE, 1}, {EXECUTION_PLAN, 401, TY_DESCRIPTOR, 1},
    {OP_POINTWISE, 750, TY_DESCRIPTOR, 1}, {OP_POINTWISE, 751, TY_DESCRIPTOR, 1},
    {OP_POINTWISE, 752, TY_DESCRIPTOR, 1}, {OP_POINTWISE, 753, TY_DESCRIPTOR, 1},
    {OP_POINTWISE, 754, TY_FLOAT, 1}, {OP_POINTWISE, 755, TY_FLOAT, 1}, {OP_POINTWISE, 758, TY_DESCRIPTOR, 1},
    {OPERATIONGRAPH, 800, TY_HANDLE, 1}, {OPERATIONGRAPH, 801, TY_DESCRIPTOR, 64},
    {TENSOR, 900, TY_INT64, 1}, {TENSOR, 901, TY_DATA_TYPE, 1}, {TENSOR, 902, TY_INT64, 8},
    {TENSOR, 903, TY_INT64, 8}, {TENSOR, 906, TY_INT64, 1}, {TENSOR, 907, TY_BOOLEAN, 1},
    {TENSOR, 908, TY_BOOLEAN, 1}, {VARIANT_PACK, 1000, TY_INT64, 64}, {VARIANT_PACK, 1001, TY_VOID_PTR, 64},
    {VARIANT_PACK, 1003, TY_VOID_PTR, 1}, {MATMUL, 1500, TY_DATA_TYPE, 1}, {OP_MATMUL, 1520, TY_DESCRIPTOR, 1},
    {OP_MATMUL, 1521, TY_DESCRIPTOR, 1}, {OP_MATMUL, 1522, TY_DESCRIPTOR, 1}, {OP_MATMUL, 1523, TY_DESCRIPTOR, 1},
    {REDUCTION, 1600, TY_REDUCTION_OP, 1}, {REDUCTION, 1601, TY_DATA_TYPE, 1},
    {OP_REDUCTION, 1610, TY_DESCRIPTOR, 1}, {OP_REDUCTION, 1611, TY_DESCRIPTOR, 1},
    {OP_REDUCTION, 1612, TY_DESCRIPTOR, 1}, {OP_RESHAPE, 2200, TY_DESCRIPTOR, 1},
    {OP_RESHAPE, 2201, TY_DESCRIPTOR, 1},
};
enum { MAX_ATTRS = 16, MAX_DIMS = 8, MAX_OPS = 64 };

typedef struct attr {
    int name;
    int64_t count;
    unsigned char data[64 * 8];
} attr;

typedef struct node node;
struct node {
    unsigned magic;
    int type;
    bool finalized;
    attr attrs[MAX_ATTRS];
    int nattrs;
    /* TENSOR, read at finalize */
    int dtype, rank;
    int64_t dims[MAX_DIMS], strides[MAX_DIMS], uid;
    bool is_virtual, by_value;
    /* OPERATIONGRAPH: its operations in an order that writes before reads;
     * ENGINECFG and EXECUTION_PLAN: the graph they run */
    node *ops[MAX_OPS];
    int nops;
    node *graph;
};
#define MAGIC 0x67726166u

/* ---- what a test reads (not in cuDNN) ---- */
static int g_live, g_refused, g_executed, g_graphs;
int ug_fake_cudnn_graph_live(void) { return g_live; }
int ug_fake_cudnn_graph_refused(void) { return g_refused; }
/* Graphs executed, and operation graphs finalized. */
int ug_fake_cudnn_graph_executed(void) { return g_executed; }
int ug_fake_cudnn_graph_graphs(void) { return g_graphs; }

static int refuse(int status)
{
    g_refused++;
    return status;
}

/* fake_cudnn.c: the stream of a handle it made, or false. */
bool ug_fake_cudnn_stream_of(void *handle, void **stream);

static size_t type_size(int type)
{
    switch (type) {
    case TY_BOOLEAN: return 1;
    case TY_DATA_TYPE: case TY_FLOAT: case TY_HEUR_MODE: case TY_POINTWISE_MODE: case TY_REDUCTION_OP: return 4;
    default: return 8;
    }
}

static node *as(void *p, int type)
{
    node *n = p;
    return n && n->magic == MAGIC && n->type == type && n->finalized ? n : NULL;
}

static const attr *find(const node *n, int name)
{
    for (int i = 0; i < n->nattrs; i++)
        if (n->attrs[i].name == name)
            return &n->attrs[i];
    return NULL;
}

static int64_t int_of(const node *n, int name, int64_t fallback)
{
    const attr *a = find(n, name);
    if (!a)
        return fallback;
    int64_t v = 0; /* 4-byte enums and 1-byte booleans: zero-extended */
    memcpy(&v, a->data, sizeof v);
    return a->count == 1 ? v : fallback;
}

static node *desc_of(const node *n, int name, int type)
{
    const attr *a = find(n, name);
    void *p = NULL;
    if (a)
        memcpy(&p, a->data, sizeof p);
    return a ? as(p, type) : NULL;
}

int cudnnBackendCreateDescriptor(int type, void **out)
{
    static const int known[] = {POINTWISE, ENGINECFG, ENGINEHEUR, EXECUTION_PLAN, OP_POINTWISE, OPERATIONGRAPH,
                                VARIANT_PACK, TENSOR, MATMUL, OP_MATMUL, REDUCTION, OP_REDUCTION, OP_RESHAPE};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok = ok || known[i] == type;
    if (!ok || !out)
        return refuse(ST_BAD_PARAM);
    node *n = calloc(1, sizeof *n);
    if (!n)
        return 4003;
    n->magic = MAGIC;
    n->type = type;
    *out = n;
    g_live++;
    return ST_OK;
}

int cudnnBackendDestroyDescriptor(void *p)
{
    node *n = p;
    if (!n || n->magic != MAGIC)
        return refuse(ST_BAD_PARAM);
    n->magic = 0;
    free(n);
    g_live--;
    return ST_OK;
}

int cudnnBackendSetAttribute(void *p, int name, int type, int64_t count, const void *elements)
{
    node *n = p;
    if (!n || n->magic != MAGIC || n->finalized || !elements || count < 1)
        return refuse(ST_BAD_PARAM);
    for (size_t i = 0; i < sizeof ATTRS / sizeof ATTRS[0]; i++) {
        if (ATTRS[i].desc != n->type || ATTRS[i].name != name)
            continue;
        if (ATTRS[i].type != type)
            return refuse(ST_ATTRIBUTE_TYPE);
        if (count > ATTRS[i].most)
            return refuse(ST_BAD_PARAM);
        attr *a = (attr *)find(n, name);
        if (!a) {
            if (n->nattrs == MAX_ATTRS)
                return refuse(ST_BAD_PARAM);
            a = &n->attrs[n->nattrs++];
        }
        memset(a, 0, sizeof *a);
        a->name = name;
        a->count = count;
        memcpy(a->data, elements, (size_t)count * type_size(type));
        return ST_OK;
    }
    return refuse(ST_BAD_PARAM);
}

/* ---- finalize: cuDNN's checks ---- */

static int64_t elements(const node *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

static int finalize_tensor(node *t)
{
    const attr *dims = find(t, 902), *strides = find(t, 903);
    if (!find(t, 901) || !dims || !strides || !find(t, 906) || !find(t, 900) || dims->count != strides->count)
        return ST_BAD_PARAM;
    t->dtype = (int)int_of(t, 901, -1);
    if (t->dtype != F32 && t->dtype != F16 && t->dtype != BF16 && t->dtype != I32 && t->dtype != BOOL)
        return ST_BAD_PARAM;
    t->rank = (int)dims->count;
    memcpy(t->dims, dims->data, (size_t)t->rank * 8);
    memcpy(t->strides, strides->data, (size_t)t->rank * 8);
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 1 || t->strides[i] < 0)
            return ST_BAD_PARAM;
    t->uid = int_of(t, 906, -1);
    t->is_virtual = int_of(t, 907, 0) != 0;
    t->by_value = int_of(t, 908, 0) != 0;
    return t->is_virtual && t->by_value ? ST_BAD_PARAM : ST_OK;
}

/* Whether x reaches y's shape by broadcasting axes of size 1. */
static bool broadcasts(const node *x, const node *y)
{
    if (x->rank != y->rank)
        return false;
    for (int i = 0; i < y->rank; i++)
        if (x->dims[i] != y->dims[i] && x->dims[i] != 1)
            return false;
    return true;
}

static bool unary(int mode) { return mode == EXP || mode == LOG || mode == IDENTITY || mode == GEN_INDEX; }

static int finalize_pointwise_op(node *op)
{
    const node *pw = desc_of(op, 750, POINTWISE), *x = desc_of(op, 751, TENSOR), *b = desc_of(op, 752, TENSOR);
    const node *y = desc_of(op, 753, TENSOR), *t = desc_of(op, 758, TENSOR);
    if (!pw || !x || !y)
        return find(op, 750) && find(op, 751) && find(op, 753) ? ST_NOT_FINALIZED : ST_BAD_PARAM;
    const int mode = (int)int_of(pw, 0, -1);
    if (unary(mode) != !b || (mode == BINARY_SELECT) != (t != NULL))
        return ST_BAD_PARAM;
    if (!broadcasts(x, y) || (b && !broadcasts(b, y)) || (t && !broadcasts(t, y)))
        return ST_SHAPE;
    if ((mode == CMP_GE && y->dtype != BOOL) || (t && t->dtype != BOOL) || (mode == GEN_INDEX && y->dtype == BOOL))
        return ST_BAD_PARAM;
    return ST_OK;
}

static int finalize_matmul_op(node *op)
{
    const node *a = desc_of(op, 1520, TENSOR), *b = desc_of(op, 1521, TENSOR), *c = desc_of(op, 1522, TENSOR);
    if (!a || !b || !c || !desc_of(op, 1523, MATMUL))
        return ST_BAD_PARAM;
    const int r = c->rank;
    if (r < 3 || a->rank != r || b->rank != r || a->dims[r - 1] != b->dims[r - 2] || a->dims[r - 2] != c->dims[r - 2] ||
        b->dims[r - 1] != c->dims[r - 1])
        return ST_SHAPE;
    for (int i = 0; i < r - 2; i++)
        if ((a->dims[i] != c->dims[i] && a->dims[i] != 1) || (b->dims[i] != c->dims[i] && b->dims[i] != 1))
            return ST_SHAPE;
    return ST_OK;
}

static int finalize_reduction_op(node *op)
{
    const node *x = desc_of(op, 1610, TENSOR), *y = desc_of(op, 1611, TENSOR), *r = desc_of(op, 1612, REDUCTION);
    if (!x || !y || !r)
        return ST_BAD_PARAM;
    const int reduce = (int)int_of(r, 1600, -1);
    if (reduce != RED_ADD && reduce != RED_MAX)
        return ST_BAD_PARAM;
    return broadcasts(y, x) ? ST_OK : ST_SHAPE;
}

static int finalize_reshape_op(node *op)
{
    const node *x = desc_of(op, 2200, TENSOR), *y = desc_of(op, 2201, TENSOR);
    if (!x || !y)
        return ST_BAD_PARAM;
    return elements(x) == elements(y) && y->is_virtual ? ST_OK : ST_SHAPE;
}

/* An operation's tensors: its output first, then its inputs. */
static int operands(const node *op, const node **t)
{
    int n = 0;
    static const int pw[] = {753, 751, 752, 758}, mm[] = {1522, 1520, 1521}, red[] = {1611, 1610},
                     rs[] = {2201, 2200};
    const int *names = op->type == OP_POINTWISE ? pw : op->type == OP_MATMUL ? mm : op->type == OP_REDUCTION ? red : rs;
    const int count = op->type == OP_POINTWISE ? 4 : op->type == OP_MATMUL ? 3 : 2;
    for (int i = 0; i < count; i++) {
        const node *x = desc_of(op, names[i], TENSOR);
        if (x)
            t[n++] = x;
    }
    return n;
}

/* Orders the graph's operations so each tensor is written (once) before it
 * is read; virtual tensors must be written, one tensor per unique id. */
static int finalize_graph(node *g)
{
    const attr *ops = find(g, 801);
    if (!ops)
        return ST_BAD_PARAM;
    node *pending[MAX_OPS];
    const int n = (int)ops->count;
    memcpy(pending, ops->data, (size_t)n * sizeof(node *));
    const node *tensors[4 * MAX_OPS], *written[MAX_OPS];
    int nt = 0, nw = 0;
    for (int i = 0; i < n; i++) {
        node *op = pending[i];
        if (!op || op->magic != MAGIC || !op->finalized ||
            (op->type != OP_POINTWISE && op->type != OP_MATMUL && op->type != OP_REDUCTION && op->type != OP_RESHAPE))
            return ST_NOT_FINALIZED;
        const node *t[4];
        const int count = operands(op, t);
        for (int j = 0; j < count; j++) {
            bool seen = false;
            for (int k = 0; k < nt; k++) {
                if (tensors[k]->uid == t[j]->uid && tensors[k] != t[j])
                    return ST_DUPLICATE;
                seen = seen || tensors[k] == t[j];
            }
            if (!seen)
                tensors[nt++] = t[j];
        }
        for (int k = 0; k < nw; k++)
            if (written[k] == t[0])
                return ST_GRAPH_PATTERN; /* written twice */
        written[nw++] = t[0];
    }
    /* The order: repeatedly, the operations whose inputs are all ready. */
    g->nops = 0;
    bool done[MAX_OPS] = {false};
    for (bool progress = true; progress && g->nops < n;) {
        progress = false;
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            const node *t[4];
            const int count = operands(pending[i], t);
            bool ready = true;
            for (int j = 1; j < count && ready; j++) {
                bool made = !t[j]->is_virtual;
                for (int k = 0; k < g->nops && !made; k++) {
                    const node *u[4];
                    operands(g->ops[k], u);
                    made = u[0] == t[j];
                }
                ready = made;
            }
            if (ready) {
                g->ops[g->nops++] = pending[i];
                done[i] = progress = true;
            }
        }
    }
    return g->nops == n ? ST_OK : ST_GRAPH_PATTERN; /* a virtual tensor never written, or a cycle */
}

int cudnnBackendFinalize(void *p)
{
    node *n = p;
    if (!n || n->magic != MAGIC || n->finalized)
        return refuse(ST_BAD_PARAM);
    int st = ST_OK;
    switch (n->type) {
    case TENSOR: st = finalize_tensor(n); break;
    case POINTWISE: {
        const int mode = (int)int_of(n, 0, -1);
        st = find(n, 0) && find(n, 1) && (mode != GEN_INDEX || find(n, 9)) ? ST_OK : ST_BAD_PARAM;
        break;
    }
    case MATMUL: st = int_of(n, 1500, -1) == F32 ? ST_OK : ST_BAD_PARAM; break;
    case REDUCTION: st = find(n, 1600) && int_of(n, 1601, -1) == F32 ? ST_OK : ST_BAD_PARAM; break;
    case OP_POINTWISE: st = finalize_pointwise_op(n); break;
    case OP_MATMUL: st = finalize_matmul_op(n); break;
    case OP_REDUCTION: st = finalize_reduction_op(n); break;
    case OP_RESHAPE: st = finalize_reshape_op(n); break;
    case OPERATIONGRAPH:
        st = finalize_graph(n);
        g_graphs += st == ST_OK;
        break;
    case ENGINEHEUR: {
        const int mode = (int)int_of(n, 200, -1);
        n->graph = desc_of(n, 201, OPERATIONGRAPH);
        st = n->graph && (mode == 2 || mode == 3) ? ST_OK : ST_BAD_PARAM;
        break;
    }
    case ENGINECFG: st = ST_BAD_PARAM; break; /* filled by the heuristics only */
    case EXECUTION_PLAN: {
        const node *cfg = desc_of(n, 401, ENGINECFG);
        n->graph = cfg ? cfg->graph : NULL;
        st = n->graph ? ST_OK : ST_BAD_PARAM;
        break;
    }
    case VARIANT_PACK: {
        const attr *uids = find(n, 1000), *ptrs = find(n, 1001);
        st = uids && ptrs && uids->count == ptrs->count && find(n, 1003) ? ST_OK : ST_BAD_PARAM;
        break;
    }
    }
    if (st != ST_OK)
        return refuse(st);
    n->finalized = true;
    return ST_OK;
}

int cudnnBackendGetAttribute(void *p, int name, int type, int64_t requested, int64_t *count, void *out)
{
    node *n = p;
    if (!n || n->magic != MAGIC || !n->finalized || !count)
        return refuse(ST_BAD_PARAM);
    if (n->type == ENGINEHEUR && name == 202 && type == TY_DESCRIPTOR) {
        *count = 1; /* one engine: this interpreter */
        if (requested > 0) {
            node *cfg = out ? ((node **)out)[0] : NULL;
            if (!cfg || cfg->magic != MAGIC || cfg->type != ENGINECFG || cfg->finalized)
                return refuse(ST_BAD_PARAM);
            cfg->graph = n->graph;
            cfg->finalized = true;
        }
        return ST_OK;
    }
    if (n->type == EXECUTION_PLAN && name == 402 && type == TY_INT64 && requested == 1 && out) {
        *count = 1;
        *(int64_t *)out = FAKE_WORKSPACE;
        return ST_OK;
    }
    return refuse(ST_BAD_PARAM);
}

/* ---- execution: the graph interpreted ---- */

/* Where a tensor's elements are during a run: device memory of its type,
 * a double buffer (a virtual tensor; a reshape's output shares its
 * input's), or one value (by value). */
typedef struct store {
    const node *t;
    void *mem;
    int mem_type;
    double *values;
    double scalar;
} store;

typedef struct job {
    const node *graph;
    int n;
    int64_t uids[64];
    void *ptrs[64];
    double scalars[64];
    unsigned char *workspace;
} job;

static double round_to(int type, double v)
{
    switch (type) {
    case F32: return (float)v;
    case F16: return ug_f16_to_f32(ug_f32_to_f16((float)v));
    case BF16: return ug_bf16_to_f32(ug_f32_to_bf16((float)v));
    case BOOL: return v != 0.0;
    default: return v;
    }
}

static int64_t offset_of(const node *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->rank; i++)
        off += (t->dims[i] == 1 ? 0 : idx[i]) * t->strides[i];
    return off;
}

static double load(const store *s, const int64_t *idx)
{
    if (!s->mem && !s->values)
        return s->scalar;
    const int64_t off = offset_of(s->t, idx);
    if (s->values)
        return s->values[off];
    switch (s->mem_type) {
    case F16: return ug_f16_to_f32(((const unsigned short *)s->mem)[off]);
    case BF16: return ug_bf16_to_f32(((const unsigned short *)s->mem)[off]);
    default: return ((const float *)s->mem)[off];
    }
}

static void save(const store *s, const int64_t *idx, double v)
{
    const int64_t off = offset_of(s->t, idx);
    v = round_to(s->t->dtype, v);
    if (s->values)
        s->values[off] = v;
    else if (s->mem_type == F16)
        ((unsigned short *)s->mem)[off] = ug_f32_to_f16((float)v);
    else if (s->mem_type == BF16)
        ((unsigned short *)s->mem)[off] = ug_f32_to_bf16((float)v);
    else
        ((float *)s->mem)[off] = (float)v;
}

/* Steps idx through dims (last axis fastest); false after the last. */
static bool next_index(const node *t, int64_t *idx)
{
    for (int i = t->rank - 1; i >= 0; i--) {
        if (++idx[i] < t->dims[i])
            return true;
        idx[i] = 0;
    }
    return false;
}

static double pointwise(int mode, double x, double b, double t, const int64_t *idx, int axis)
{
    switch (mode) {
    case ADD: return x + b;
    case MUL: return x * b;
    case SUB: return x - b;
    case DIV: return x / b;
    case EXP: return exp(x);
    case LOG: return log(x);
    case IDENTITY: return x;
    case CMP_GE: return x >= b;
    case BINARY_SELECT: return t != 0.0 ? x : b;
    case GEN_INDEX: return (double)idx[axis];
    default: return NAN;
    }
}

static void run_op(const node *op, store *s, int ns)
{
    const node *t[4];
    const int count = operands(op, t);
    store *io[4] = {NULL};
    for (int i = 0; i < count; i++)
        for (int k = 0; k < ns; k++)
            if (s[k].t == t[i])
                io[i] = &s[k];
    int64_t idx[MAX_DIMS] = {0};
    const node *y = t[0];
    if (op->type == OP_POINTWISE) {
        const node *pw = desc_of(op, 750, POINTWISE);
        const int mode = (int)int_of(pw, 0, -1), axis = (int)int_of(pw, 9, 0);
        /* operands() lists y, x, then b and t where set */
        const store *b = desc_of(op, 752, TENSOR) ? io[2] : NULL;
        const store *sel = desc_of(op, 758, TENSOR) ? io[count - 1] : NULL;
        do
            save(io[0], idx, pointwise(mode, load(io[1], idx), b ? load(b, idx) : 0.0, sel ? load(sel, idx) : 0.0, idx,
                                       axis));
        while (next_index(y, idx));
    } else if (op->type == OP_MATMUL) {
        const int r = y->rank;
        const int64_t k_len = t[1]->dims[r - 1];
        do {
            int64_t ai[MAX_DIMS], bi[MAX_DIMS];
            memcpy(ai, idx, sizeof ai);
            memcpy(bi, idx, sizeof bi);
            double acc = 0.0;
            for (int64_t k = 0; k < k_len; k++) {
                ai[r - 1] = k;
                bi[r - 2] = k;
                acc += load(io[1], ai) * load(io[2], bi);
            }
            save(io[0], idx, acc);
        } while (next_index(y, idx));
    } else if (op->type == OP_REDUCTION) {
        const bool max = int_of(desc_of(op, 1612, REDUCTION), 1600, -1) == RED_MAX;
        const node *x = t[1];
        const int64_t n = elements(y);
        double *acc = malloc((size_t)n * sizeof *acc);
        for (int64_t i = 0; i < n; i++)
            acc[i] = max ? -INFINITY : 0.0;
        do {
            int64_t flat = 0; /* y's element, dense */
            for (int i = 0; i < y->rank; i++)
                flat = flat * y->dims[i] + (y->dims[i] == 1 ? 0 : idx[i]);
            const double v = load(io[1], idx);
            acc[flat] = max ? fmax(acc[flat], v) : acc[flat] + v;
        } while (next_index(x, idx));
        do {
            int64_t flat = 0;
            for (int i = 0; i < y->rank; i++)
                flat = flat * y->dims[i] + idx[i];
            save(io[0], idx, acc[flat]);
        } while (next_index(y, idx));
        free(acc);
    }
    /* OP_RESHAPE: its output shares its input's elements (run_graph). */
}

static int64_t span(const node *t)
{
    int64_t last = 0;
    for (int i = 0; i < t->rank; i++)
        last += (t->dims[i] - 1) * t->strides[i];
    return last + 1;
}

static void run_graph(const void *ctx)
{
    const job *j = ctx;
    const node *g = j->graph;
    memset(j->workspace, 0xa5, FAKE_WORKSPACE);
    store s[4 * MAX_OPS];
    int ns = 0;
    for (int i = 0; i < g->nops; i++) {
        const node *t[4];
        const int count = operands(g->ops[i], t);
        for (int k = count - 1; k >= 0; k--) { /* inputs first: a reshape's output takes its input's store */
            bool known = false;
            for (int m = 0; m < ns && !known; m++)
                known = s[m].t == t[k];
            if (known)
                continue;
            store st = {t[k], NULL, t[k]->dtype, NULL, 0.0};
            if (g->ops[i]->type == OP_RESHAPE && k == 0) {
                for (int m = 0; m < ns; m++)
                    if (s[m].t == t[1])
                        st = s[m];
                st.t = t[k];
            } else if (t[k]->is_virtual) {
                st.values = calloc((size_t)span(t[k]), sizeof(double));
            } else {
                for (int u = 0; u < j->n; u++)
                    if (j->uids[u] == t[k]->uid) {
                        st.mem = j->ptrs[u];
                        st.scalar = j->scalars[u];
                    }
                if (t[k]->by_value)
                    st.mem = NULL;
            }
            s[ns++] = st;
        }
        run_op(g->ops[i], s, ns);
    }
    for (int m = 0; m < ns; m++) {
        bool shared = false; /* a reshape's output frees nothing of its own */
        for (int k = 0; k < m; k++)
            shared = shared || (s[k].values && s[k].values == s[m].values);
        if (s[m].values && !shared)
            free(s[m].values);
    }
}

int cudnnBackendExecute(void *handle, void *plan_desc, void *pack_desc)
{
    const node *plan = as(plan_desc, EXECUTION_PLAN), *pack = as(pack_desc, VARIANT_PACK);
    void *stream = NULL;
    if (!plan || !pack || !ug_fake_cudnn_stream_of(handle, &stream))
        return refuse(ST_BAD_PARAM);
    const attr *uids = find(pack, 1000), *ptrs = find(pack, 1001);
    job j;
    memset(&j, 0, sizeof j);
    j.graph = plan->graph;
    j.n = (int)uids->count;
    memcpy(j.uids, uids->data, (size_t)j.n * 8);
    memcpy(j.ptrs, ptrs->data, (size_t)j.n * 8);
    memcpy(&j.workspace, find(pack, 1003)->data, sizeof j.workspace);
    if (!j.workspace)
        return refuse(ST_BAD_PARAM);
    /* Every tensor the graph reads or writes from memory is in the pack,
     * and nothing else; by-value scalars are read now, as cuDNN does. */
    int bound = 0;
    const node *g = j.graph, *seen[4 * MAX_OPS];
    int nseen = 0;
    for (int i = 0; i < g->nops; i++) {
        const node *t[4];
        const int count = operands(g->ops[i], t);
        for (int k = 0; k < count; k++) {
            bool dup = t[k]->is_virtual;
            for (int m = 0; m < nseen && !dup; m++)
                dup = seen[m] == t[k];
            if (dup)
                continue;
            seen[nseen++] = t[k];
            int found = -1;
            for (int u = 0; u < j.n; u++)
                if (j.uids[u] == t[k]->uid)
                    found = u;
            if (found < 0 || !j.ptrs[found])
                return refuse(ST_BAD_PARAM);
            if (t[k]->by_value)
                j.scalars[found] = *(const float *)j.ptrs[found];
            bound++;
        }
    }
    if (bound != j.n)
        return refuse(ST_BAD_PARAM);
    stream_work_fn *work = stream_work();
    g_executed++;
    if (!work)
        run_graph(&j);
    else if (work(stream, run_graph, &j, sizeof j) != 0)
        return 5000;
    return ST_OK;
}

void cudnnGetLastErrorString(char *message, size_t max)
{
    if (max)
        message[0] = '\0';
}
