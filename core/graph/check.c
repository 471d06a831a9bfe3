/* Numeric checks (ug_graph_set_checks). Each checked value v gets two
 * small nodes right after the node that produces it:
 *   s = sum(v)          NaN or an infinity anywhere makes the sum non-finite
 *   flag += 0 * s       0 * s is NaN exactly when s is not finite, so the
 *                       slot of g->flags stays NaN once set (one
 *                       ADD_SCALED kernel: a launch fewer than a separate
 *                       0 * s)
 * so no step waits for the device; the flags are read when the program
 * reads a value anyway (ug_graph_read) or asks (ug_graph_check).
 *
 * Where a kernel reads or writes v anyway, the check is folded into it
 * instead and those two nodes are dropped (UG_FOLD_CHECK): the
 * cross-entropy checks its logits as it reads them and its loss as it
 * writes it, a reduction its results, and the optimizer's update each
 * gradient (so the default checks of a training step cost no launch). A
 * folded kernel tests each element, where the sum could also overflow. A
 * gradient is then checked when the update reads it: a step of
 * accumulated micro-batches checks their sum, once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "unigrad/ops.h"

static int node_index(const ug_graph *g, const graph_node *n)
{
    for (int i = 0; i < g->node_count; i++)
        if (g->nodes[i] == n)
            return i;
    return -1;
}

static ug_status want_check(ug_graph *g, ug_value *v, check_role role)
{
    v = ug_value_base(v);
    if (!v || !ug_dtype_is_float(v->dtype) || !v->producer)
        return UG_OK;
    for (int i = 0; i < g->check_count; i++)
        if (g->checks[i].value == v)
            return UG_OK;
    graph_check *grown = ug_realloc(g->checks, (size_t)(g->check_count + 1) * sizeof *grown);
    if (!grown)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    g->checks = grown;
    g->checks[g->check_count++] = (graph_check){.value = v, .node = node_index(g, v->producer), .role = role};
    return UG_OK;
}

static ug_status collect_checks(ug_graph *g)
{
    if (g->check_mode == UG_CHECK_EVERY_NODE) {
        for (int i = 0; i < g->node_count; i++) {
            graph_node *n = g->nodes[i];
            if (!n->dead && n->op.def->check_role != UG_CHECKED_NEVER)
                UG_TRY(want_check(g, n->out, CHECK_NODE));
        }
    } else if (g->check_mode == UG_CHECK_LOSS_AND_GRADS) {
        for (int i = 0; i < g->node_count; i++)
            if (!g->nodes[i]->dead && g->nodes[i]->op.def->check_role == UG_CHECKED_LOGITS)
                UG_TRY(want_check(g, g->nodes[i]->in[0], CHECK_LOGITS));
        if (g->loss)
            UG_TRY(want_check(g, g->loss, CHECK_LOSS));
        /* With loss scaling a non-finite gradient is the scaler's to handle
         * (the step is skipped and the scale backs off), not an error. */
        bool scaled = g->optimizer && ug_optimizer_get_config(g->optimizer).loss_scaling.enabled;
        for (int i = 0; i < g->value_count && !scaled; i++)
            if (g->values[i]->kind == VALUE_PARAM && g->values[i]->grad)
                UG_TRY(want_check(g, g->values[i]->grad, CHECK_GRADIENT));
    }
    return UG_OK;
}

static int by_node(const void *a, const void *b)
{
    const graph_check *x = a, *y = b;
    return (x->node > y->node) - (x->node < y->node);
}

/* The nodes of check c, appended to the graph. */
static ug_status append_check_nodes(ug_graph *g, graph_check *c, int index)
{
    ug_value *nonfinite = NULL, *flag = NULL;
    if (c->value->dtype == UG_F32) {
        UG_TRY(ug_g_reduce_axes(g, c->value, UG_RKERNEL_SUM, 0, true, false, &nonfinite));
    } else { /* an f16 sum would overflow: zero the elements first, sum, widen */
        ug_op cast = {.def = &ug_op_cast, .name = "graph check", .p.cast.dtype = UG_F32};
        UG_TRY(ug_g_unary(g, UG_UNARY_SCALE_SHIFT, 0.0f, 0.0f, c->value, &nonfinite));
        UG_TRY(ug_g_reduce_axes(g, nonfinite, UG_RKERNEL_SUM, 0, true, false, &nonfinite));
        ug_value *sum = nonfinite;
        UG_TRY(ug_op_graph(g, &cast, 1, &sum, &nonfinite));
    }
    UG_TRY(ug_graph_new_value(g, VALUE_INPUT, UG_F32, 0, NULL, &flag));
    snprintf(flag->name, sizeof flag->name, "check flag %d", index);
    c->flag = flag;
    ug_op add = {.def = &ug_op_binary, .name = "graph check",
                 .p.binary = {.op = UG_BINARY_ADD_SCALED, .post = UG_UNARY_COPY, .alpha = 0.0f}};
    ug_value *in[2] = {flag, nonfinite};
    graph_node *n;
    return ug_graph_add_node(g, &add, flag, 2, in, &n);
}

ug_status ug_graph_add_checks(ug_graph *g)
{
    if (g->checks_added)
        return UG_OK;
    UG_TRY(collect_checks(g));
    if (g->check_count == 0) {
        g->checks_added = true;
        return UG_OK;
    }
    qsort(g->checks, (size_t)g->check_count, sizeof *g->checks, by_node);

    /* Each check's nodes go right after its value's producer, before the
     * arena can give that value's memory to another. */
    int original = g->node_count;
    ug_graph_mark mark = ug_graph_mark_now(g);
    int *first = ug_malloc((size_t)g->check_count * sizeof *first);
    graph_node **order = NULL;
    ug_status st = first ? UG_OK : ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    for (int c = 0; c < g->check_count && st == UG_OK; c++) {
        first[c] = g->node_count;
        g->building = g->checks[c].value->producer->phase;
        st = append_check_nodes(g, &g->checks[c], c);
        graph_check *made = &g->checks[c]; /* for folding to drop; with more, it keeps them */
        made->node_count = g->node_count - first[c];
        for (int j = 0; j < made->node_count && j < CHECK_MAX_NODES; j++)
            made->nodes[j] = g->nodes[first[c] + j];
    }
    g->building = PHASE_FORWARD;
    if (st == UG_OK && !(order = ug_malloc((size_t)g->node_count * sizeof *order)))
        st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_compile: out of host memory");
    if (st == UG_OK) {
        int k = 0, c = 0;
        for (int i = 0; i < original; i++) {
            order[k++] = g->nodes[i];
            for (; c < g->check_count && g->checks[c].node == i; c++) {
                int end = c + 1 < g->check_count ? first[c + 1] : g->node_count;
                for (int j = first[c]; j < end; j++)
                    order[k++] = g->nodes[j];
            }
        }
        memcpy(g->nodes, order, (size_t)g->node_count * sizeof *order);
        g->checks_added = true;
    }
    free(order);
    free(first);
    if (st != UG_OK) { /* take back every check node: the next compile starts over */
        ug_graph_rollback(g, mark);
        g->check_count = 0;
    }
    return st;
}

/* Whether node n's kernels can make a check of its operand (an input's
 * index or UG_CHECKED_OPERAND_RESULT) in a slot still free: *slot. */
static bool can_make(graph_node *n, int operand, int *slot)
{
    const ug_fold f = {.kind = UG_FOLD_CHECK, .input = operand, .slot = slot};
    if (n->dead || !ug_node_absorbs(n, &f))
        return false;
    return *slot >= 0 && *slot < UG_OP_MAX_CHECKS && n->nin + *slot < UG_OP_MAX_INPUTS &&
           !n->checks[*slot];
}

/* The elements of v that the nodes able to check them read; with a flag,
 * those nodes take the check. */
static int64_t checking_readers(ug_graph *g, const ug_value *v, ug_value *flag)
{
    int64_t covered = 0;
    int slot;
    for (int i = 0; i < g->node_count; i++) {
        graph_node *n = g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            if (!n->in[k] || ug_value_base(n->in[k]) != v || !can_make(n, k, &slot))
                continue;
            covered += ug_shape_numel(n->in[k]->ndim, n->in[k]->shape);
            if (flag)
                n->checks[slot] = flag;
        }
    }
    return covered;
}

/* Check c folded into the node that writes its value, or into nodes that
 * read all of it between them; false: none can. */
static bool fold_check(ug_graph *g, graph_check *c)
{
    ug_value *v = c->value;
    graph_node *writer = v->producer;
    int slot;
    if (writer && writer->out == v && v->dtype == UG_F32 &&
        can_make(writer, UG_CHECKED_OPERAND_RESULT, &slot)) {
        writer->checks[slot] = c->flag;
        return true;
    }
    if (checking_readers(g, v, NULL) < ug_shape_numel(v->ndim, v->shape))
        return false;
    checking_readers(g, v, c->flag);
    return true;
}

void ug_graph_fold_checks(ug_graph *g)
{
    for (int c = 0; c < g->check_count; c++) {
        graph_check *check = &g->checks[c];
        if (check->folded || check->node_count > CHECK_MAX_NODES || !fold_check(g, check))
            continue;
        for (int j = 0; j < check->node_count; j++)
            check->nodes[j]->dead = check->nodes[j]->fused = true;
        check->folded = true;
    }
}

ug_status ug_graph_alloc_checks(ug_graph *g)
{
    if (!g->check_count)
        return UG_OK;
    int64_t count = g->check_count;
    UG_TRY(ug_tensor_new(g->device, UG_F32, 1, &count, "a graph's numeric check flags", &g->flags));
    UG_TRY(ug_fill(g->flags, 0.0f));
    for (int i = 0; i < g->check_count; i++) {
        ug_tensor *slot = NULL;
        int64_t scalar[1] = {0};
        UG_TRY(ug_tensor_slice(g->flags, i, 1, &slot));
        ug_status st = ug_tensor_reshape(slot, 0, scalar, &g->checks[i].flag->tensor);
        ug_tensor_free(slot);
        UG_TRY(st);
    }
    g->checked_runs = g->runs;
    return UG_OK;
}

void ug_graph_release_checks(ug_graph *g)
{
    for (int i = 0; i < g->check_count; i++) {
        ug_tensor_free(g->checks[i].flag->tensor);
        g->checks[i].flag->tensor = NULL;
    }
    ug_tensor_free(g->flags);
    g->flags = NULL;
}

void ug_graph_free_checks(ug_graph *g)
{
    free(g->checks); /* the flag values and their tensors go with the graph's values */
    ug_tensor_free(g->flags);
}

static const char *value_label(const graph_check *c, char *buf, size_t len)
{
    const ug_value *v = c->value;
    char shape[96];
    ug_format_shape(v->ndim, v->shape, shape, sizeof shape);
    const graph_node *n = v->producer;
    const char *op = n ? (n->op.name ? n->op.name : n->op.def->family) : "an input";
    if (c->role == CHECK_GRADIENT) {
        const char *param = "a parameter";
        for (int i = 0; i < v->graph->value_count; i++)
            if (v->graph->values[i]->kind == VALUE_PARAM && ug_value_base(v->graph->values[i]->grad) == v)
                param = v->graph->values[i]->name;
        snprintf(buf, len, "the gradient of %s (%s %s)", param, ug_dtype_name(v->dtype), shape);
    } else if (c->role != CHECK_NODE) {
        snprintf(buf, len, "%s (%s %s, computed by %s)",
                 c->role == CHECK_LOSS ? "the loss" : "the logits of cross_entropy",
                 ug_dtype_name(v->dtype), shape, op);
    } else {
        snprintf(buf, len, "the result of node %d, %s (%s %s)", c->node, op, ug_dtype_name(v->dtype),
                 shape);
    }
    return buf;
}

ug_status ug_graph_check(ug_graph *g)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_check: graph is NULL");
    if (!g->compiled)
        return ug_set_error(UG_ERR_STATE, "ug_graph_check: compile the graph first");
    if (!g->flags || g->runs == g->checked_runs)
        return UG_OK;
    float *flags = ug_malloc((size_t)g->check_count * sizeof *flags);
    if (!flags)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_graph_check: out of host memory");
    ug_status st = ug_tensor_download(g->flags, flags, (size_t)g->check_count * sizeof *flags);
    int bad = -1, logits_ok = -1;
    for (int i = 0; i < g->check_count && st == UG_OK && bad < 0; i++) {
        if (flags[i] != 0.0f)
            bad = i;
        else if (g->checks[i].role == CHECK_LOGITS)
            logits_ok = i;
    }
    free(flags);
    if (st != UG_OK || bad < 0) {
        g->checked_runs = g->runs;
        return st;
    }
    uint64_t from = g->checked_runs + 1, to = g->runs;
    g->checked_runs = g->runs;
    UG_TRY(ug_fill(g->flags, 0.0f));
    const graph_check *c = &g->checks[bad];
    char what[256];
    value_label(c, what, sizeof what);
    if (c->role == CHECK_LOSS && logits_ok >= 0) {
        const ug_value *logits = g->checks[logits_ok].value;
        return ug_set_error(UG_ERR_NUMERIC,
                            "the loss became NaN or infinite in runs %llu..%llu while the logits "
                            "of cross_entropy were finite: a label is outside [0, %lld), the "
                            "classes of the logits (check the data set's labels, "
                            "ug_dataset_classes), every label of the batch is the ignore index "
                            "(a mean over no rows), or logits near f32's limit made it overflow "
                            "(lower the learning rate or clip the gradients, max_grad_norm)",
                            (unsigned long long)from, (unsigned long long)to,
                            (long long)logits->shape[logits->ndim - 1]);
    }
    char runs[64];
    if (from == to)
        snprintf(runs, sizeof runs, "run %llu", (unsigned long long)to);
    else
        snprintf(runs, sizeof runs, "runs %llu..%llu", (unsigned long long)from, (unsigned long long)to);
    return ug_set_error(UG_ERR_NUMERIC,
                        "a NaN or infinity appeared in %s in %s; what comes after it "
                        "follows from it. Look for NaN or infinity in the inputs, or lower the "
                        "learning rate or clip the gradients (max_grad_norm); "
                        "ug_graph_set_checks(graph, UG_CHECK_EVERY_NODE) names the first op",
                        what, runs);
}
