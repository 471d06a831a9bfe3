/* Activation checkpointing. The forward ops between two values marked
 * with ug_graph_checkpoint form a segment whose results are not kept for
 * the backward pass: at compile, every backward node that reads one is
 * given a copy recomputed by copies of the segment's nodes, placed just
 * before it, so the originals die with their last forward reader.
 *
 * Segments that feed one another form a chain (layer after layer). To get
 * the results of a segment deep in a chain, the chain is recomputed from
 * the nearest segment whose results are still held, keeping only the
 * results at the halving points on the way (Chen et al., "Training Deep
 * Nets with Sublinear Memory Cost", 2016): n layers then hold about
 * log2(n) layer outputs at once instead of n, for about log2(n) / 2 extra
 * forward passes. The copies run the same kernels on the same inputs (the
 * dropout masks included), so the gradients are bitwise the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"

/* ---- marking ---- */

ug_status ug_graph_checkpoint(ug_graph *g, ug_value *from, ug_value *to)
{
    const char *op = "ug_graph_checkpoint";
    UG_TRY(ug_graph_check_open(g, op));
    UG_TRY(ug_graph_check_value(g, from, op, "from"));
    UG_TRY(ug_graph_check_value(g, to, op, "to"));
    if (g->has_backward)
        return ug_set_error(UG_ERR_STATE, "%s: mark segments before ug_graph_backward", op);
    bool *reached = ug_calloc((size_t)g->value_count, sizeof *reached);
    bool *needed = ug_calloc((size_t)g->value_count, sizeof *needed);
    bool *inside = ug_calloc((size_t)g->node_count + 1, sizeof *inside);
    if (!reached || !needed || !inside) {
        free(reached);
        free(needed);
        free(inside);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    /* Nodes that read (through any path) from and that to depends on. */
    reached[ug_value_base(from)->id] = true;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        for (int k = 0; k < n->nin && !inside[i]; k++)
            inside[i] = n->in[k] && reached[ug_value_base(n->in[k])->id];
        if (inside[i] && n->out)
            reached[n->out->id] = true;
    }
    needed[ug_value_base(to)->id] = true;
    int marked = 0, overlap = -1;
    for (int i = g->node_count - 1; i >= 0; i--) {
        graph_node *n = g->nodes[i];
        if (!n->out || !needed[n->out->id])
            continue;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k])
                needed[ug_value_base(n->in[k])->id] = true;
        inside[i] = inside[i] && n->phase == PHASE_FORWARD;
        if (!inside[i])
            continue;
        if (n->segment && !n->input_cast && overlap < 0)
            overlap = i;
        marked++;
    }
    ug_status st = UG_OK;
    if (overlap >= 0)
        st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: node %d is already in a checkpointed segment; "
                          "segments may not overlap", op, overlap);
    else if (marked == 0)
        st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: no op lies between from and to (is to computed from from?)",
                          op);
    if (st == UG_OK) {
        g->segments++;
        for (int i = 0; i < g->node_count; i++)
            if (inside[i] && needed[g->nodes[i]->out->id])
                g->nodes[i]->segment = g->segments;
    }
    free(reached);
    free(needed);
    free(inside);
    return st;
}

/* ---- the recompute pass ---- */

typedef struct rewire {
    graph_node *node;
    int input;
    ug_value *value;
} rewire;

typedef struct recompute {
    ug_graph *g;
    int values;                /* values before the pass; the arrays below are per value id */
    int *segment_of;           /* the segment producing the value, 0 if none */
    bool *forward_output;      /* read by a forward op outside its segment */
    ug_value **held;           /* the recomputed copy backward reads now */
    ug_value **local;          /* the copy made by the segment being copied */
    int *transient;            /* ids held only until the next segment is copied */
    int transient_count;
    int *parent;               /* per segment: the one segment feeding it, 0 none, -1 several */
    graph_node **order;        /* the new node list */
    int count, capacity;
    rewire *rewires;
    int rewire_count, rewire_capacity;
    int added;
} recompute;

static ug_status grow(void **array, int *capacity, int count, size_t size)
{
    if (count < *capacity)
        return UG_OK;
    int grown_capacity = *capacity ? *capacity * 2 : 64;
    void *grown = ug_realloc(*array, (size_t)grown_capacity * size);
    if (!grown)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    *array = grown;
    *capacity = grown_capacity;
    return UG_OK;
}

static ug_status emit(recompute *r, graph_node *n)
{
    UG_TRY(grow((void **)&r->order, &r->capacity, r->count, sizeof *r->order));
    r->order[r->count++] = n;
    return UG_OK;
}

static int segment_of(const recompute *r, const ug_value *v)
{
    return v ? r->segment_of[ug_value_base(v)->id] : 0;
}

/* The value a copy reads for v: this segment's copy, else the held copy,
 * else v itself (a value outside every segment, kept as it is). A reshape
 * of a copied value becomes a reshape of the copy. */
static ug_status resolve(recompute *r, ug_value *v, ug_value **out)
{
    *out = v;
    if (!v)
        return UG_OK;
    ug_value *base = ug_value_base(v);
    ug_value *copy = r->local[base->id] ? r->local[base->id] : r->held[base->id];
    if (!copy)
        return UG_OK;
    if (v == base) {
        *out = copy;
        return UG_OK;
    }
    UG_TRY(ug_graph_new_value(r->g, VALUE_ALIAS, v->dtype, v->ndim, v->shape, out));
    (*out)->alias_of = copy;
    return UG_OK;
}

typedef enum hold_mode {
    HOLD_ALL,        /* the segment backward works on: every result */
    HOLD_OUTPUTS,    /* a halving point: the results later forward ops read */
    HOLD_FOR_NEXT    /* on the way: its outputs, until the next segment is copied */
} hold_mode;

/* Copies segment s's nodes (phase backward) after what is emitted. */
static ug_status copy_segment(recompute *r, int s, hold_mode mode)
{
    ug_graph *g = r->g;
    memset(r->local, 0, (size_t)r->values * sizeof *r->local);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead || n->segment != s || n->phase != PHASE_FORWARD)
            continue;
        graph_node *c = ug_calloc(1, sizeof *c);
        if (!c)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
        *c = *n;
        c->phase = PHASE_BACKWARD;
        c->segment = 0;
        c->sum = NULL; /* the forward added into it once */
        if (c->op.def->for_recompute)
            c->op.def->for_recompute(&c->op);
        ug_status st = emit(r, c);
        if (st != UG_OK) {
            free(c);
            return st;
        }
        r->added++;
        for (int k = 0; k < n->nin; k++)
            UG_TRY(resolve(r, n->in[k], &c->in[k]));
        ug_value *outs[UG_OP_MAX_OUTPUTS] = {n->out};
        for (int k = 0; k < n->nscratch; k++)
            outs[k + 1] = n->scratch[k];
        for (int k = 0; k <= n->nscratch; k++) {
            ug_value *v = outs[k], *copy = NULL;
            if (!v)
                continue;
            UG_TRY(ug_graph_new_value(g, VALUE_TEMP, v->dtype, v->ndim, v->shape, &copy));
            snprintf(copy->name, sizeof copy->name, "%.50s (recomputed)", v->name[0] ? v->name : "a value");
            copy->producer = c;
            if (k == 0)
                c->out = copy;
            else
                c->scratch[k - 1] = copy;
            r->local[v->id] = copy;
        }
    }
    for (int i = 0; i < r->values; i++) {
        if (!r->local[i] || (mode != HOLD_ALL && !r->forward_output[i]))
            continue;
        r->held[i] = r->local[i];
        if (mode == HOLD_FOR_NEXT)
            r->transient[r->transient_count++] = i;
    }
    return UG_OK;
}

static bool segment_inputs_held(const recompute *r, int s)
{
    const ug_graph *g = r->g;
    for (int i = 0; i < g->node_count; i++) {
        const graph_node *n = g->nodes[i];
        if (n->dead || n->segment != s)
            continue;
        for (int k = 0; k < n->nin; k++) {
            int from = segment_of(r, n->in[k]);
            if (from && from != s && !r->held[ug_value_base(n->in[k])->id])
                return false;
        }
    }
    return true;
}

/* Makes the results of segment s held: recomputes the chain of segments
 * leading to it from the nearest one held, holding the halving points. */
static ug_status make_segment_held(recompute *r, int s)
{
    ug_graph *g = r->g;
    /* chain[0] = s, chain[1] its parent, ... back to a segment whose inputs
     * are held (or fed by several segments). */
    int *chain = ug_calloc((size_t)g->segments + 1, sizeof *chain);
    bool *halving = ug_calloc((size_t)g->segments + 1, sizeof *halving);
    if (!chain || !halving) {
        free(chain);
        free(halving);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    }
    int length = 1;
    chain[0] = s;
    while (!segment_inputs_held(r, chain[length - 1]) && r->parent[chain[length - 1]] > 0 && length <= g->segments)
        chain[length] = r->parent[chain[length - 1]], length++;
    /* A segment fed by several segments: each is made held first. */
    int first = chain[length - 1];
    ug_status st = UG_OK;
    for (int i = 0; i < g->node_count && st == UG_OK; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead || n->segment != first)
            continue;
        for (int k = 0; k < n->nin && st == UG_OK; k++) {
            int from = segment_of(r, n->in[k]);
            if (from && from != first && !r->held[ug_value_base(n->in[k])->id])
                st = make_segment_held(r, from);
        }
    }
    /* In forward order, position q is chain[length - 1 - q]; the last is
     * s. Halving points: from the held start (-1) halfway to s, again and
     * again. */
    int low = -1, high = length - 1;
    while (high - low > 1) {
        low = (low + high) / 2;
        halving[low] = true;
    }
    for (int q = 0; q < length && st == UG_OK; q++) {
        int before = r->transient_count;
        hold_mode mode = q == length - 1 ? HOLD_ALL : halving[q] ? HOLD_OUTPUTS : HOLD_FOR_NEXT;
        st = copy_segment(r, chain[length - 1 - q], mode);
        /* The previous segment's outputs on the way are not held any more. */
        for (int t = 0; t < before; t++)
            r->held[r->transient[t]] = NULL;
        memmove(r->transient, r->transient + before, (size_t)(r->transient_count - before) * sizeof *r->transient);
        r->transient_count -= before;
    }
    free(chain);
    free(halving);
    return st;
}

/* Inserts the copies and points backward's reads at them. */
static ug_status insert_recompute(recompute *r)
{
    ug_graph *g = r->g;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (!n->dead && n->phase == PHASE_BACKWARD) {
            for (int k = 0; k < n->nin; k++) {
                ug_value *base = ug_value_base(n->in[k]);
                int s = segment_of(r, base);
                if (!s || base->keep)
                    continue;
                if (!r->held[base->id])
                    UG_TRY(make_segment_held(r, s));
                memset(r->local, 0, (size_t)r->values * sizeof *r->local);
                ug_value *copy = NULL;
                UG_TRY(resolve(r, n->in[k], &copy));
                UG_TRY(grow((void **)&r->rewires, &r->rewire_capacity, r->rewire_count, sizeof *r->rewires));
                r->rewires[r->rewire_count++] = (rewire){n, k, copy};
            }
        }
        UG_TRY(emit(r, n));
    }
    return UG_OK;
}

static bool is_original(const ug_graph *g, const graph_node *n)
{
    for (int i = 0; i < g->node_count; i++)
        if (g->nodes[i] == n)
            return true;
    return false;
}

static void map_segments(recompute *r)
{
    ug_graph *g = r->g;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead || !n->segment)
            continue;
        if (n->out)
            r->segment_of[n->out->id] = n->segment;
        for (int k = 0; k < n->nscratch; k++)
            r->segment_of[n->scratch[k]->id] = n->segment;
    }
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead || n->phase != PHASE_FORWARD)
            continue;
        for (int k = 0; k < n->nin; k++) {
            int from = segment_of(r, n->in[k]);
            if (!from || from == n->segment)
                continue;
            r->forward_output[ug_value_base(n->in[k])->id] = true;
            if (n->segment)
                r->parent[n->segment] = r->parent[n->segment] == 0 || r->parent[n->segment] == from ? from : -1;
        }
    }
}

ug_status ug_graph_add_recompute(ug_graph *g)
{
    if (!g->segments || g->recompute_added)
        return UG_OK;
    size_t values = (size_t)g->value_count, segments = (size_t)g->segments + 1;
    recompute r = {.g = g, .values = g->value_count};
    r.segment_of = ug_calloc(values, sizeof *r.segment_of);
    r.forward_output = ug_calloc(values, sizeof *r.forward_output);
    r.held = ug_calloc(values, sizeof *r.held);
    r.local = ug_calloc(values, sizeof *r.local);
    r.transient = ug_calloc(values, sizeof *r.transient);
    r.parent = ug_calloc(segments, sizeof *r.parent);
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = UG_OK;
    if (!r.segment_of || !r.forward_output || !r.held || !r.local || !r.transient || !r.parent)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    if (st == UG_OK) {
        map_segments(&r);
        st = insert_recompute(&r);
    }
    if (st == UG_OK) {
        for (int i = 0; i < r.rewire_count; i++)
            r.rewires[i].node->in[r.rewires[i].input] = r.rewires[i].value;
        free(g->nodes);
        g->nodes = r.order;
        g->node_count = r.count;
        g->node_capacity = r.capacity;
        g->recomputed = r.added;
        g->recompute_added = true;
    } else {
        for (int i = 0; i < r.count; i++)
            if (!is_original(g, r.order[i]))
                free(r.order[i]);
        free(r.order);
        ug_graph_rollback(g, mark);
    }
    free(r.rewires);
    free(r.segment_of);
    free(r.forward_output);
    free(r.held);
    free(r.local);
    free(r.transient);
    free(r.parent);
    return st;
}
