/* Names of nodes in profiles: "<scope>/<op>", "<scope>/backward/<op>" and
 * "<parameter>/update/<op>", so a trace reads in the model's own words.
 *
 * A node's scope is the layer of the parameter it reads ("fc1" for
 * "fc1.weight"); a node reading no parameter takes the scope of the first
 * input whose producer has one (fc1's ReLU is "fc1/relu"); a backward node
 * takes the scope of the forward node it differentiates, and an update
 * by its whole parameter ("fc1.weight/update/adam"). Scopes are found when the graph
 * is planned, before fusion rewires the values; labels on first use. */
#include <stdio.h>
#include <string.h>

#include "core/graph/internal.h"

/* The layer of a parameter's name: up to its last dot. */
static void layer_of(const char *param, char *scope, size_t len)
{
    const char *dot = strrchr(param, '.');
    size_t keep = dot ? (size_t)(dot - param) : strlen(param);
    snprintf(scope, len, "%.*s", (int)keep, param);
}

static const char *scope_of(const ug_graph *g, graph_node *n);

static const char *value_scope(const ug_graph *g, const ug_value *v)
{
    v = ug_value_base(v);
    if (!v)
        return "";
    if (v->kind == VALUE_PARAM || v->kind == VALUE_PARAM_COPY)
        return NULL; /* the caller names it by the parameter */
    return v->producer ? scope_of(g, v->producer) : "";
}

static const char *scope_of(const ug_graph *g, graph_node *n)
{
    if (n->scoped)
        return n->scope;
    n->scoped = true;
    if (n->origin) {
        snprintf(n->scope, sizeof n->scope, "%s", scope_of(g, n->origin));
        return n->scope;
    }
    for (int k = 0; k < n->nin; k++)
        if (n->in[k] && !value_scope(g, n->in[k])) {
            const char *param = ug_value_base(n->in[k])->name;
            if (n->phase == PHASE_UPDATE) /* an update is of one parameter */
                snprintf(n->scope, sizeof n->scope, "%s", param);
            else
                layer_of(param, n->scope, sizeof n->scope);
            return n->scope;
        }
    for (int k = 0; k < n->nin; k++) {
        const char *s = n->in[k] ? value_scope(g, n->in[k]) : "";
        if (s && s[0]) {
            snprintf(n->scope, sizeof n->scope, "%s", s);
            break;
        }
    }
    return n->scope;
}

void ug_graph_find_scopes(const ug_graph *g)
{
    for (int i = 0; i < g->node_count; i++)
        scope_of(g, g->nodes[i]);
}

const char *ug_graph_node_label(const ug_graph *g, graph_node *n)
{
    if (n->label[0])
        return n->label;
    char op[64];
    if (n->op.def->describe) {
        n->op.def->describe(&n->op, op, sizeof op);
    } else {
        const char *name = n->op.name ? n->op.name : n->op.def->family;
        snprintf(op, sizeof op, "%s", strncmp(name, "graph ", 6) == 0 ? name + 6 : name);
    }
    const char *phase = n->phase == PHASE_BACKWARD ? "backward/" : n->phase == PHASE_UPDATE ? "update/" : "";
    if (n->group_count) { /* one launch for its members' scopes */
        snprintf(n->label, sizeof n->label, "%s%s (%d)", phase, op, n->group_count);
        return n->label;
    }
    const char *scope = scope_of(g, n);
    snprintf(n->label, sizeof n->label, "%s%s%s%s", scope, scope[0] ? "/" : "", phase, op);
    return n->label;
}
