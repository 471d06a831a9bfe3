/* Compiling a graph: fusion, liveness, and one arena for every intermediate
 * value, so that a run allocates nothing. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "unigrad/ops.h"

enum { ARENA_ALIGN = 256 }; /* keeps every value aligned for vector loads and DMA */

static size_t value_bytes(const ug_value *v)
{
    size_t bytes = (size_t)ug_shape_numel(v->ndim, v->shape) * ug_dtype_size(v->dtype);
    return (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

static void count_uses(ug_graph *g)
{
    for (int i = 0; i < g->value_count; i++) {
        g->values[i]->uses = 0;
        g->values[i]->last_use = -1;
    }
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k <= n->nin; k++) { /* its inputs, and what a comparison folded in reads */
            ug_value *v = ug_value_base(k < n->nin ? n->in[k] : n->match);
            if (v) {
                v->uses++;
                v->last_use = i;
            }
        }
    }
}

/* Whether v, a result of one node, can go to another writer: read by
 * nothing else, no alias of it. */
static bool only_temp_of(const ug_graph *g, const ug_value *v)
{
    if (v->kind != VALUE_TEMP || v->keep || v->uses != 1 || !v->producer || v->producer->dead)
        return false;
    for (int k = 0; k < g->value_count; k++)
        if (g->values[k]->alias_of == v)
            return false;
    return true;
}

/* Bias add + activation, batch norm + ReLU: an activation whose input is
 * the result, read by nothing else, of an op that takes post-ops (binary
 * ops any activation, batch norm a ReLU) becomes that op's. relu,
 * sigmoid and tanh gradients read the output, so training graphs fuse them
 * too; gelu's reads its input, so it fuses only where nothing else does.
 * Any unary op whose formula reads only x can be a post-op. */
static void fuse_activations(ug_graph *g)
{
    count_uses(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *act = g->nodes[i];
        const ug_fold f = act->dead ? (ug_fold){.kind = UG_FOLD_NONE} : ug_node_fold(act);
        if (f.kind != UG_FOLD_ACTIVATION)
            continue;
        ug_value *x = act->in[0];
        graph_node *producer = x->producer;
        if (!only_temp_of(g, x) || !ug_node_absorbs(producer, &f))
            continue;
        producer->out = act->out;
        act->out->producer = producer;
        x->producer = NULL;
        act->dead = act->fused = true;
    }
}

/* An elementwise op of two operands (with its activation, fuse_activations
 * having folded it in) on a result read by nothing else is made by the op
 * writing the result, where the op can (UG_FOLD_PAIR): a
 * linear layer's product adds its bias and applies its ReLU as it stores
 * C, the product feeding a ReLU's gradient masks it. The other operand is
 * a vector of the result's last axis (a bias) or a value of its shape,
 * in its dtype; neither node may carry anything else folded in (a check,
 * a running sum, a comparison, a cast, a group). */
static bool no_folds(const graph_node *n)
{
    for (int k = 0; k < UG_OP_MAX_CHECKS; k++)
        if (n->checks[k])
            return false;
    return !n->sum && !n->match && !n->writes_cast && !n->group;
}

/* x can be read where r is written, as an epilogue of r's producer (at
 * node index at): x is written before (or by no live node: a parameter's
 * half copy, which the last step's update wrote), is not what the op
 * writes nor a running sum (updated in place), and is a vector of r's
 * last axis or of r's shape, in its dtype. */
static bool epilogue_operand(const ug_graph *g, const ug_value *x, const ug_value *r, const ug_value *out, int at)
{
    if (!x || x->dtype != r->dtype || ug_value_base(x) == ug_value_base(out) || ug_value_base(x)->kind == VALUE_SUM)
        return false;
    for (int k = at; k < g->node_count; k++)
        if (!g->nodes[k]->dead && g->nodes[k] == ug_value_base(x)->producer)
            return false;
    if (x->ndim == 1 && x->shape[0] == r->shape[r->ndim - 1])
        return true;
    return x->ndim == r->ndim && !memcmp(x->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim);
}

static void fold_epilogues(ug_graph *g)
{
    count_uses(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *pair = g->nodes[i];
        ug_fold f = pair->dead ? (ug_fold){.kind = UG_FOLD_NONE} : ug_node_fold(pair);
        if (f.kind != UG_FOLD_PAIR || pair->nin != 2 || !no_folds(pair) || pair->per_row_scale != 0.0f)
            continue;
        for (int side = 0; side < 2; side++) {
            ug_value *r = pair->in[side], *x = pair->in[1 - side];
            graph_node *producer = r ? r->producer : NULL;
            int at = 0;
            while (at < i && g->nodes[at] != producer)
                at++;
            f.pair.first = side == 1; /* x is the op's first operand */
            if (!r || x == r || !only_temp_of(g, r) || producer->out != r || !no_folds(producer) || producer->segment != pair->segment || producer->phase != pair->phase ||
                producer->nin >= UG_OP_MAX_INPUTS || r->dtype != pair->out->dtype ||
                !epilogue_operand(g, x, r, pair->out, at) || r->ndim != pair->out->ndim ||
                memcmp(r->shape, pair->out->shape, sizeof(int64_t) * (size_t)r->ndim) ||
                !ug_node_absorbs(producer, &f))
                continue;
            producer->in[producer->nin++] = x;
            producer->out = pair->out;
            pair->out->producer = producer;
            r->producer = NULL;
            pair->dead = pair->fused = true;
            break;
        }
    }
}

/* A cast of a result read by nothing else is folded into the op that
 * produces it, which then writes the cast's dtype: GEMM's C may be f32 for
 * half operands (so a half copy's weight gradient, of a product or a
 * convolution, goes straight to f32), unary ops and sums write any
 * float dtype, and argmax its index as a float (a metric's predicted
 * class, compared with the labels). */
static bool is_cast(const graph_node *n)
{
    return !n->dead && ug_node_fold(n).kind == UG_FOLD_CAST;
}

static void fuse_casts(ug_graph *g)
{
    count_uses(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *cast = g->nodes[i];
        if (!is_cast(cast) || !ug_dtype_is_float(cast->out->dtype))
            continue;
        ug_value *x = cast->in[0];
        graph_node *producer = x->producer;
        const ug_fold f = {.kind = UG_FOLD_CAST};
        if (!only_temp_of(g, x) || producer->segment != cast->segment || !ug_node_absorbs(producer, &f))
            continue;
        producer->out = cast->out;
        producer->writes_cast = true;
        cast->out->producer = producer;
        x->producer = NULL;
        cast->dead = cast->fused = true;
    }
}

/* What a comparison folded into r's producer compares with, for the
 * other operand of equal(r, other): a graph input of r's shape, f32 or
 * i32, or an i32 input cast to f32 (the labels of a metric), the cast then
 * left to die (*cast) when nothing else reads it. NULL: none, since only
 * an input can be read at any point of the step. */
static ug_value *comparison_input(const ug_graph *g, ug_value *other, const ug_value *r, graph_node **cast)
{
    *cast = NULL;
    ug_value *m = other;
    if (other->producer && is_cast(other->producer) &&
        other->producer->in[0]->dtype == UG_I32) {
        m = other->producer->in[0];
        if (only_temp_of(g, other))
            *cast = other->producer;
    }
    if (m->kind != VALUE_INPUT || (m->dtype != UG_F32 && m->dtype != UG_I32) || m->ndim != r->ndim ||
        memcmp(m->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim))
        return NULL;
    return m;
}

/* An equality test of a result read by nothing else (equal(argmax(x),
 * labels): a metric's correct predictions) is made by the op writing the
 * result, where the op can (UG_FOLD_EQUALITY), with the graph
 * input the result is compared with; a cast of that input goes too when
 * nothing else reads it. Both in f32, as the test would: the same bits. */
static void fold_comparisons(ug_graph *g)
{
    count_uses(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *eq = g->nodes[i];
        const ug_fold pair = eq->dead ? (ug_fold){.kind = UG_FOLD_NONE} : ug_node_fold(eq);
        if (pair.kind != UG_FOLD_PAIR || pair.pair.op != UG_BINARY_EQUAL || pair.pair.post != UG_UNARY_COPY ||
            eq->out->dtype != UG_F32)
            continue;
        const ug_fold f = {.kind = UG_FOLD_EQUALITY};
        for (int side = 0; side < 2; side++) {
            ug_value *r = eq->in[side], *m = NULL;
            graph_node *producer = r->producer, *cast = NULL;
            if (!only_temp_of(g, r) || producer->out != r || r->dtype != UG_F32 || producer->match ||
                producer->segment != eq->segment || producer->nin + UG_OP_MATCH_INPUT >= UG_OP_MAX_INPUTS ||
                r->ndim != eq->out->ndim || memcmp(r->shape, eq->out->shape, sizeof(int64_t) * (size_t)r->ndim) ||
                !(m = comparison_input(g, eq->in[1 - side], r, &cast)) || !ug_node_absorbs(producer, &f))
                continue;
            producer->match = m;
            producer->out = eq->out;
            eq->out->producer = producer;
            r->producer = NULL;
            eq->dead = eq->fused = true;
            if (cast) {
                cast->out->producer = NULL;
                cast->dead = cast->fused = true;
            }
            break;
        }
    }
}

/* A running sum of a result (ug_graph_accumulate's node, sum += alpha *
 * v) is added by the op that writes v, as it writes it, where the op can
 * (UG_FOLD_SUM): the cross-entropy's loss, a reduction's
 * sums such as a metric's count of correct predictions. The sum's own
 * node goes; v is still written for any other reader. */
static void fold_sums(ug_graph *g)
{
    for (int i = 0; i < g->node_count; i++) {
        graph_node *add = g->nodes[i];
        if (add->dead || !ug_node_is_running_sum(add))
            continue;
        ug_value *v = add->in[1];
        graph_node *producer = v->producer;
        if (!producer || producer->dead || producer->out != v || v->dtype != UG_F32 || producer->sum ||
            producer->phase != add->phase || producer->segment != add->segment ||
            producer->nin + UG_OP_SUM_INPUT >= UG_OP_MAX_INPUTS ||
            !ug_node_absorbs(producer, &(const ug_fold){.kind = UG_FOLD_SUM}))
            continue;
        producer->sum = add->out;
        producer->op.sum_alpha = add->op.p.binary.alpha;
        producer->per_row_scale = add->per_row_scale;
        add->dead = add->fused = true;
    }
}

/* The backward pass's first gradient (the loss seed: 1, or the loss scale,
 * weighted by the rows) is made by the op reading it, where the op can
 * (UG_FOLD_SEED): the cross-entropy's gradient, when the loss is
 * the cross-entropy's. The seed's node goes, and its reader no longer
 * reads the value. */
static void fold_seed(ug_graph *g)
{
    count_uses(g);
    for (int i = 0; i < g->node_count; i++) {
        graph_node *seed = g->nodes[i];
        ug_fold f = seed->dead ? (ug_fold){.kind = UG_FOLD_NONE} : ug_node_fold(seed);
        if (f.kind != UG_FOLD_SEED || !only_temp_of(g, seed->out))
            continue;
        for (int j = i + 1; j < g->node_count && !seed->dead; j++) {
            graph_node *n = g->nodes[j];
            for (int k = 0; k < n->nin && !n->dead && !seed->dead; k++) {
                f.input = k;
                if (n->in[k] != seed->out || !ug_node_absorbs(n, &f))
                    continue;
                n->in[k] = NULL;
                seed->out->producer = NULL;
                seed->dead = seed->fused = true;
            }
        }
    }
}

void ug_graph_free_group(graph_node *n)
{
    free(n->group);
    free(n->group_ops);
    free(n->group_ins);
    n->group = NULL;
    n->group_ops = NULL;
    n->group_ins = NULL;
    n->group_count = 0;
}

/* Neighbouring live nodes of one op with launch_group, in one phase (the
 * optimizer's updates), run as one launch: the last takes the group, the
 * others are fused into it. The last, so every member's inputs are ready
 * when it runs. A graph planned again keeps its groups. */
static ug_status group_launches(ug_graph *g)
{
    for (int i = 0; i < g->node_count; i++) {
        graph_node *first = g->nodes[i];
        if (first->dead || first->group || !first->op.def->launch_group)
            continue;
        int end = i + 1, count = 1;
        for (; end < g->node_count; end++) {
            graph_node *n = g->nodes[end];
            if (n->dead)
                continue;
            if (n->op.def != first->op.def || n->phase != first->phase || n->group)
                break;
            count++;
        }
        if (count < 2)
            continue;
        graph_node *last = NULL;
        for (int k = end - 1; !last; k--)
            last = g->nodes[k]->dead ? NULL : g->nodes[k];
        last->group = ug_malloc((size_t)count * sizeof *last->group);
        last->group_ops = ug_malloc((size_t)count * sizeof *last->group_ops);
        last->group_ins = ug_calloc((size_t)count * UG_OP_MAX_INPUTS, sizeof *last->group_ins);
        if (!last->group || !last->group_ops || !last->group_ins) {
            ug_graph_free_group(last);
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
        }
        for (int k = i; k < end; k++) {
            graph_node *n = g->nodes[k];
            if (n->dead)
                continue;
            last->group_ops[last->group_count] = &n->op;
            last->group[last->group_count++] = n;
            if (n != last)
                n->dead = n->fused = true;
        }
        i = end - 1;
    }
    return UG_OK;
}

/* A parameter's gradient gets its own buffer, readable after the run. */
static void mark_gradients(ug_graph *g)
{
    for (int i = 0; i < g->value_count; i++) {
        ug_value *p = g->values[i];
        ug_value *grad = p->kind == VALUE_PARAM ? ug_value_base(p->grad) : NULL;
        if (grad && grad->kind == VALUE_TEMP)
            grad->kind = VALUE_GRAD;
    }
}

typedef struct free_block {
    size_t offset, size;
} free_block;

typedef struct arena_plan {
    free_block *blocks;
    int count, capacity;
    size_t top;
} arena_plan;

static size_t arena_take(arena_plan *a, size_t size)
{
    int best = -1;
    for (int i = 0; i < a->count; i++)
        if (a->blocks[i].size >= size && (best < 0 || a->blocks[i].size < a->blocks[best].size))
            best = i;
    if (best < 0) {
        /* Grow from the top, absorbing a free block that ends there. */
        for (int i = 0; i < a->count; i++) {
            if (a->blocks[i].offset + a->blocks[i].size == a->top) {
                size_t offset = a->blocks[i].offset;
                a->blocks[i] = a->blocks[--a->count];
                a->top = offset + size;
                return offset;
            }
        }
        size_t offset = a->top;
        a->top += size;
        return offset;
    }
    size_t offset = a->blocks[best].offset;
    a->blocks[best].offset += size;
    a->blocks[best].size -= size;
    if (a->blocks[best].size == 0)
        a->blocks[best] = a->blocks[--a->count];
    return offset;
}

static bool arena_give(arena_plan *a, size_t offset, size_t size)
{
    for (int i = 0; i < a->count; i++) { /* merge with neighbours */
        free_block *b = &a->blocks[i];
        if (b->offset + b->size == offset) {
            offset = b->offset;
            size += b->size;
            a->blocks[i--] = a->blocks[--a->count];
        } else if (offset + size == b->offset) {
            size += b->size;
            a->blocks[i--] = a->blocks[--a->count];
        }
    }
    if (a->count == a->capacity) {
        int capacity = a->capacity ? a->capacity * 2 : 32;
        free_block *grown = ug_realloc(a->blocks, (size_t)capacity * sizeof *grown);
        if (!grown)
            return false;
        a->blocks = grown;
        a->capacity = capacity;
    }
    a->blocks[a->count++] = (free_block){offset, size};
    return true;
}

static bool is_planned(const ug_value *v) { return v && v->kind == VALUE_TEMP; }

static ug_status plan_arena(ug_graph *g)
{
    arena_plan a = {0};
    ug_status st = UG_OK;
    for (int i = 0; i < g->node_count && st == UG_OK; i++) {
        graph_node *n = g->nodes[i];
        if (n->dead)
            continue;
        ug_value *outs[UG_OP_MAX_OUTPUTS] = {n->out};
        for (int k = 0; k < n->nscratch; k++)
            outs[k + 1] = n->scratch[k];
        int nout = 1 + n->nscratch;
        for (int k = 0; k < nout; k++) {
            if (!is_planned(outs[k]))
                continue;
            outs[k]->arena_offset = arena_take(&a, value_bytes(outs[k]));
            g->memory.unplanned_bytes += value_bytes(outs[k]);
            if (outs[k]->last_use < i)
                outs[k]->last_use = outs[k]->keep ? INT_MAX : i;
        }
        /* Values whose last reader is this node are free for later nodes. */
        for (int k = 0; k < n->nin + nout; k++) {
            ug_value *v = k < n->nin ? ug_value_base(n->in[k]) : outs[k - n->nin];
            if (!is_planned(v) || v->last_use != i)
                continue;
            v->last_use = -3; /* freed; not again */
            if (!arena_give(&a, v->arena_offset, value_bytes(v)))
                st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
        }
    }
    free(a.blocks);
    g->memory.activation_bytes = a.top;
    return st;
}

static ug_status alias_tensor(ug_value *v)
{
    ug_value *base = v->alias_of;
    ug_tensor_free(v->tensor);
    v->tensor = NULL;
    if (!base->tensor)
        return UG_OK; /* an input not bound yet */
    UG_TRY(ug_tensor_over_storage(base->tensor->storage, v->dtype, v->ndim, v->shape, base->tensor->offset,
                                  &v->tensor));
    return ug_graph_fit_alias(v); /* a base bound with fewer rows */
}

ug_status ug_graph_refresh_aliases(ug_graph *g, const ug_value *base)
{
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->kind == VALUE_ALIAS && (!base || g->values[i]->alias_of == base))
            UG_TRY(alias_tensor(g->values[i]));
    return UG_OK;
}

static ug_status allocate(ug_graph *g)
{
    /* Even when every planned value is empty (a batch of 0 rows), values
     * need storage to point into. */
    size_t arena_bytes = g->memory.activation_bytes ? g->memory.activation_bytes : ARENA_ALIGN;
    UG_TRY(ug_pool_alloc(g->device, arena_bytes, "a graph's activations", &g->arena));
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_TEMP && (v->producer || v->uses)) {
            size_t elem = ug_dtype_size(v->dtype);
            UG_TRY(ug_tensor_over_storage(g->arena, v->dtype, v->ndim, v->shape,
                                          (int64_t)(v->arena_offset / elem), &v->tensor));
        } else if (v->kind == VALUE_SUM) {
            UG_TRY(ug_tensor_new(g->device, v->dtype, v->ndim, v->shape, "a graph's running sum", &v->tensor));
            UG_TRY(ug_fill(v->tensor, 0.0f));
        } else if (v->kind == VALUE_GRAD) {
            UG_TRY(ug_tensor_new(g->device, v->dtype, v->ndim, v->shape, "a parameter gradient", &v->tensor));
        }
    }
    UG_TRY(ug_graph_alloc_checks(g));
    return ug_graph_refresh_aliases(g, NULL);
}

/* Gives back what a compile allocated, so a failed one can be retried. */
static void release_plan(ug_graph *g)
{
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_TEMP || v->kind == VALUE_GRAD || v->kind == VALUE_ALIAS ||
            v->kind == VALUE_SUM) {
            ug_tensor_free(v->tensor);
            v->tensor = NULL;
        }
    }
    ug_storage_release(g->arena);
    g->arena = NULL;
    ug_graph_release_checks(g);
    memset(&g->memory, 0, sizeof g->memory);
}

static uint64_t block_bytes(const ug_value *v)
{
    return ug_pool_block_bytes((size_t)ug_shape_numel(v->ndim, v->shape) * ug_dtype_size(v->dtype));
}

/* The optimizer's state for the graph's trained parameters, as the pool
 * counts it: the state tensors as they are (this rank's part of each when
 * the state is sharded, ug_comm_shard_optimizer, which may come after
 * compile), or shaped like the parameters before the optimizer is set. */
static uint64_t optimizer_device_bytes(const ug_graph *g)
{
    const int slots = g->optimizer ? ug_optim_slots(g->optimizer) : 0;
    uint64_t bytes = 0;
    for (int i = 0; slots && i < g->value_count; i++) {
        const ug_value *v = g->values[i];
        if (v->kind != VALUE_PARAM || !v->grad)
            continue;
        const int index = ug_model_param_index(g->model, v->param);
        for (int s = 0; s < slots; s++) {
            ug_tensor *t = NULL;
            if (index >= 0 && index < ug_optimizer_param_count(g->optimizer))
                ug_optimizer_state(g->optimizer, index, s, &t);
            bytes += t ? ug_pool_block_bytes((size_t)ug_tensor_numel(t) * sizeof(float)) : block_bytes(v);
        }
    }
    return bytes;
}

/* What the graph holds on the device, as the pool counts it. */
static void count_device_bytes(ug_graph *g)
{
    ug_graph_memory_info *m = &g->memory;
    uint64_t sums = 0, gradients = 0;
    for (int i = 0; i < g->value_count; i++) {
        const ug_value *v = g->values[i];
        if (v->kind == VALUE_GRAD) {
            m->gradient_bytes += (uint64_t)ug_shape_numel(v->ndim, v->shape) * ug_dtype_size(v->dtype);
            gradients += block_bytes(v);
        } else if (v->kind == VALUE_PARAM || v->kind == VALUE_PARAM_COPY || v->kind == VALUE_CONSTANT) {
            m->parameter_bytes += block_bytes(v); /* constants: fixed tensors, as PyTorch's buffers */
        } else if (v->kind == VALUE_SUM) {
            sums += block_bytes(v);
        }
    }
    if (g->check_count)
        sums += ug_pool_block_bytes((size_t)g->check_count * sizeof(float));
    size_t arena = m->activation_bytes ? (size_t)m->activation_bytes : ARENA_ALIGN;
    m->optimizer_bytes = optimizer_device_bytes(g);
    m->accumulator_bytes = gradients; /* one per gradient */
    m->total_bytes = ug_pool_block_bytes(arena) + gradients + m->parameter_bytes + m->optimizer_bytes + sums;
}

/* Everything but the allocation: fusion, checks, liveness, the arena's
 * layout and the byte counts. */
static ug_status plan_graph(ug_graph *g)
{
    release_plan(g);
    mark_gradients(g); /* first: a gradient's buffer is read after the run, never fused away */
    g->autocasting = true; /* the nodes compile adds keep their operands' dtypes */
    ug_status st = ug_graph_add_checks(g); /* before fusion: a checked value must exist */
    if (st == UG_OK) {
        ug_graph_find_scopes(g);
        if (!g->unfused) {
            fuse_activations(g);
            fuse_casts(g);
            fold_comparisons(g);
            ug_graph_fold_checks(g);
            fold_sums(g);
            fold_seed(g);
            fold_epilogues(g);
        }
        st = ug_graph_add_recompute(g); /* after fusion: the copies are of fused nodes */
    }
    if (st == UG_OK && !g->unfused)
        st = group_launches(g);
    g->autocasting = false;
    UG_TRY(st);
    count_uses(g);
    for (int i = 0; i < g->value_count; i++)
        if (g->values[i]->keep)
            g->values[i]->last_use = INT_MAX;
    UG_TRY(plan_arena(g));
    g->memory.recomputed = g->recomputed;
    for (int i = 0; i < g->node_count; i++) {
        g->memory.nodes += !g->nodes[i]->dead;
        g->memory.fused += g->nodes[i]->fused;
    }
    count_device_bytes(g);
    g->planned = true;
    return UG_OK;
}

ug_status ug_graph_plan(ug_graph *g)
{
    UG_TRY(plan_graph(g));
    g->shapes_fitted = false; /* the tensors have the planned shapes */
    ug_status st = allocate(g);
    if (st != UG_OK)
        release_plan(g);
    return st;
}

ug_status ug_graph_compile(ug_graph *g)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_compile: graph is NULL");
    if (g->compiled)
        return ug_set_error(UG_ERR_STATE, "ug_graph_compile: the graph is compiled already");
    ug_status st = ug_graph_plan(g);
    if (st == UG_OK && g->run.dropout_streams && !g->run.run_count)
        st = ug_tensor_new(g->device, UG_F32, 1, (int64_t[]){1}, "dropout run count", &g->run.run_count);
    if (st == UG_OK && g->run.run_count)
        st = ug_graph_set_runs(g, g->runs);
    if (st == UG_OK)
        st = ug_graph_make_replay(g);
    if (st != UG_OK)
        return ug_prefix_error(st, "ug_graph_compile");
    g->compiled = true;
    return UG_OK;
}

ug_status ug_graph_memory(ug_graph *g, ug_graph_memory_info *info)
{
    if (!g || !info)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_memory: NULL argument");
    if (!g->compiled && !g->planned) {
        ug_status st = plan_graph(g);
        if (st != UG_OK)
            return ug_prefix_error(st, "ug_graph_memory");
    }
    *info = g->memory;
    /* the state as it is now: sharding after compile takes a part of it */
    info->optimizer_bytes = optimizer_device_bytes(g);
    info->total_bytes = info->total_bytes - g->memory.optimizer_bytes + info->optimizer_bytes;
    return UG_OK;
}
