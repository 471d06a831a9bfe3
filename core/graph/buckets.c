/* The accumulators of the parameters' gradients, laid out in buckets: flat
 * f32 tensors whose parts are the accumulators, in the order backward
 * finishes the gradients, so that a data-parallel replica can reduce each
 * bucket (one collective) as soon as its last gradient is in, while the
 * rest of backward runs (comm/data_parallel.c). As DistributedDataParallel,
 * the first bucket is small, so the first collective starts early, and the
 * others about 25 MB, so each collective is long enough to run near the
 * engine's bandwidth.
 *
 * A gradient is done with after the last forward or backward node writing
 * or reading it (a numeric check reads it); its accumulation (graph/run.c)
 * is launched right after that node, and its bucket reduced after its
 * last part's, while backward goes on. A parameter's gradient lives in its
 * part: backward writes a first micro-batch's gradient there, and no pass
 * copies it in. A later micro-batch's gradients go to their own buffers
 * and are added in. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "core/runtime/internal.h"

/* Parts start on 64 elements (256 bytes), as the backends' widest loads. */
enum { PART_ALIGN = 64 };

static const size_t default_first_bytes = (size_t)1 << 20, default_bytes = (size_t)25 << 20;

/* A parameter value's gradient value (NULL for other values). */
static const ug_value *gradient_value(const ug_value *v)
{
    return v->kind == VALUE_PARAM ? ug_value_base(v->grad) : NULL;
}

/* Makes t view what view views (t keeps its shape). */
static void retarget(ug_tensor *t, const ug_tensor *view)
{
    ug_storage_retain(view->storage);
    ug_storage_release(t->storage);
    t->storage = view->storage;
    t->offset = view->offset;
}

ug_status ug_graph_place_gradients(ug_graph *g, bool in_buckets)
{
    if (!g->own_buffers || g->gradients_in_buckets == in_buckets)
        return UG_OK;
    for (int k = 0; k < g->accumulated_count; k++) {
        if (!g->own_buffers[k])
            continue;
        const ug_value *grad = g->gradients[k];
        retarget(grad->tensor, in_buckets ? g->accumulated[k] : g->own_buffers[k]);
        UG_TRY(ug_graph_refresh_aliases(g, grad));
    }
    g->gradients_in_buckets = in_buckets;
    return UG_OK;
}

void ug_graph_free_accumulators(ug_graph *g)
{
    /* Back to their own buffers: aliases are made again from those, and
     * no failure is possible with the graph's plan in place. */
    (void)ug_graph_place_gradients(g, false);
    for (int k = 0; g->own_buffers && k < g->accumulated_count; k++)
        ug_tensor_free(g->own_buffers[k]);
    for (int k = 0; k < g->accumulated_count; k++)
        ug_tensor_free(g->accumulated[k]);
    for (int b = 0; b < g->bucket_count; b++)
        ug_tensor_free(g->buckets[b].flat);
    free(g->accumulated);
    free(g->own_buffers);
    free(g->gradients);
    free(g->accumulate_after);
    free(g->ready_order);
    free(g->buckets);
    g->accumulated = g->own_buffers = NULL;
    g->gradients = NULL;
    g->accumulate_after = g->ready_order = NULL;
    g->buckets = NULL;
    g->accumulated_count = g->bucket_count = 0;
}

ug_status ug_graph_set_buckets(ug_graph *g, size_t first_bytes, size_t bytes)
{
    if (g->micro_batches)
        return ug_set_error(UG_ERR_STATE, "the graph holds accumulated micro-batches; apply them (ug_graph_run_update) "
                            "before changing its buckets");
    ug_graph_free_accumulators(g);
    g->bucket_first_bytes = first_bytes;
    g->bucket_bytes = bytes;
    return UG_OK;
}

/* For each parameter with a gradient (k in value order): its gradient's
 * value, and the last forward or backward node writing or reading it
 * (-1: none). */
static void find_last_uses(ug_graph *g, const ug_value **grads, int *after)
{
    for (int i = 0, k = 0; i < g->value_count; i++)
        if (gradient_value(g->values[i]))
            grads[k++] = gradient_value(g->values[i]);
    for (int k = 0; k < g->accumulated_count; k++)
        after[k] = -1;
    for (int n = 0; n < g->node_count; n++) {
        const graph_node *node = g->nodes[n];
        if (node->dead || node->phase == PHASE_UPDATE)
            continue;
        /* Its result, the others it writes (batch norm's gradient writes
         * those of its scale and shift) and its inputs. */
        for (int v = -1; v < node->nscratch + node->nin; v++) {
            const ug_value *used = v < 0                ? node->out
                                   : v < node->nscratch ? node->scratch[v]
                                                        : node->in[v - node->nscratch];
            used = used ? ug_value_base(used) : NULL;
            for (int k = 0; used && k < g->accumulated_count; k++)
                if (grads[k] == used)
                    after[k] = n;
        }
    }
}

/* The accumulators' order of readiness, stable in value order. */
static void sort_by_readiness(int count, const int *after, int *order)
{
    for (int k = 0; k < count; k++) {
        int j = k;
        for (; j > 0 && after[order[j - 1]] > after[k]; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
}

static int64_t aligned(int64_t elements) { return (elements + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN; }

/* Cuts the ready order into buckets: each closes when the next part would
 * pass its size (a part larger than a bucket is a bucket of its own). */
static int plan_buckets(ug_graph *g, graph_bucket *buckets)
{
    const size_t first = g->bucket_first_bytes ? g->bucket_first_bytes : default_first_bytes;
    const size_t rest = g->bucket_bytes ? g->bucket_bytes : default_bytes;
    int count = 0;
    int64_t filled = 0; /* elements in the last bucket */
    for (int p = 0; p < g->accumulated_count; p++) {
        const ug_value *grad = g->gradients[g->ready_order[p]];
        const int64_t part = aligned(ug_shape_numel(grad->ndim, grad->shape));
        const size_t limit = count == 1 ? first : rest;
        if (!count || (filled && (size_t)(filled + part) * sizeof(float) > limit)) {
            if (count)
                buckets[count - 1].end = p;
            buckets[count++] = (graph_bucket){.begin = p, .end = g->accumulated_count};
            filled = 0;
        }
        filled += part;
    }
    return count;
}

static int64_t bucket_elements(const ug_graph *g, const graph_bucket *b)
{
    int64_t elements = 0;
    for (int p = b->begin; p < b->end; p++)
        elements += aligned(ug_shape_numel(g->gradients[g->ready_order[p]]->ndim,
                                           g->gradients[g->ready_order[p]]->shape));
    return elements;
}

/* Bucket b, at *at elements into memory (then moved past it), or in a
 * block of its own where memory is NULL. */
static ug_status make_bucket(ug_graph *g, graph_bucket *b, ug_storage *memory, int64_t *at)
{
    const ug_value **grads = g->gradients;
    const int64_t elements = b->elements;
    if (memory) {
        UG_TRY(ug_tensor_over_storage(memory, UG_F32, 1, (int64_t[]){elements}, *at, &b->flat));
        *at += elements;
    } else {
        UG_TRY(ug_tensor_new(g->device, UG_F32, 1, (int64_t[]){elements}, "a gradient bucket", &b->flat));
    }
    /* The alignment gaps are reduced too: zeros, not stale memory. */
    UG_TRY(ug_launch_unary("a gradient bucket", UG_UNARY_FILL, 0.0f, 0.0f, b->flat, NULL));
    int64_t offset = b->flat->offset;
    for (int p = b->begin; p < b->end; p++) {
        const int k = g->ready_order[p];
        UG_TRY(ug_tensor_over_storage(b->flat->storage, UG_F32, grads[k]->ndim, grads[k]->shape, offset,
                                      &g->accumulated[k]));
        offset += aligned(ug_shape_numel(grads[k]->ndim, grads[k]->shape));
    }
    return UG_OK;
}

/* All the buckets, in one block from memory when it gives one. */
static ug_status make_buckets(ug_graph *g, ug_bucket_memory_fn *memory, void *ctx)
{
    int64_t total = 0;
    for (int b = 0; b < g->bucket_count; b++)
        total += g->buckets[b].elements = bucket_elements(g, &g->buckets[b]);
    ug_storage *block = NULL;
    if (memory)
        UG_TRY(memory(ctx, (size_t)total * sizeof(float), &block));
    int64_t at = 0;
    ug_status st = UG_OK;
    for (int b = 0; st == UG_OK && b < g->bucket_count; b++)
        st = make_bucket(g, &g->buckets[b], block, &at);
    ug_storage_release(block); /* the buckets hold it */
    return st;
}

/* The gradients that can live in their parts: a gradient value of its
 * own (kind VALUE_GRAD), not shared with another parameter; each keeps a
 * view of its own buffer. */
static ug_status find_own_buffers(ug_graph *g)
{
    for (int k = 0; k < g->accumulated_count; k++) {
        const ug_value *grad = g->gradients[k];
        bool shared = grad->kind != VALUE_GRAD || !grad->tensor;
        for (int j = 0; j < g->accumulated_count && !shared; j++)
            shared = j != k && g->gradients[j] == grad;
        if (!shared)
            UG_TRY(ug_tensor_over_storage(grad->tensor->storage, grad->tensor->dtype, grad->tensor->ndim,
                                          grad->tensor->shape, grad->tensor->offset, &g->own_buffers[k]));
    }
    return UG_OK;
}

ug_status ug_graph_make_accumulators(ug_graph *g, ug_bucket_memory_fn *memory, void *ctx)
{
    int count = 0;
    for (int i = 0; i < g->value_count; i++)
        count += gradient_value(g->values[i]) != NULL;
    const ug_value **grads = g->gradients = ug_calloc((size_t)count + 1, sizeof *grads);
    g->accumulated = ug_calloc((size_t)count + 1, sizeof *g->accumulated);
    g->own_buffers = ug_calloc((size_t)count + 1, sizeof *g->own_buffers);
    g->accumulate_after = ug_calloc((size_t)count + 1, sizeof *g->accumulate_after);
    g->ready_order = ug_calloc((size_t)count + 1, sizeof *g->ready_order);
    g->buckets = ug_calloc((size_t)count + 1, sizeof *g->buckets);
    ug_status st = UG_OK;
    if (!grads || !g->accumulated || !g->own_buffers || !g->accumulate_after || !g->ready_order || !g->buckets)
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_run_backward: out of host memory");
    g->accumulated_count = count;
    if (st == UG_OK) {
        find_last_uses(g, grads, g->accumulate_after);
        for (int k = 0; k < count; k++)
            if (grads[k]->dtype != UG_F32)
                st = ug_set_error(UG_ERR_DTYPE, "ug_graph_run_backward: the gradient of parameter %s is %s; "
                                  "accumulators are f32", grads[k]->name, ug_dtype_name(grads[k]->dtype));
    }
    if (st == UG_OK) {
        sort_by_readiness(count, g->accumulate_after, g->ready_order);
        g->bucket_count = plan_buckets(g, g->buckets);
    }
    if (st == UG_OK)
        st = make_buckets(g, memory, ctx);
    if (st == UG_OK)
        st = find_own_buffers(g);
    if (st == UG_OK)
        st = ug_graph_place_gradients(g, true);
    if (st != UG_OK) /* all or nothing: the next call tries again */
        ug_graph_free_accumulators(g);
    const ug_value *batch = ug_graph_batch_input(g); /* a full batch: its planned rows */
    g->gradient_rows = g->full_batch_rows = batch ? (float)batch->shape[0] : 1.0f;
    ug_graph_weigh_seed(g);
    static _Atomic uint64_t layouts;
    g->layout = ++layouts;
    return st;
}
