/* Parameter groups (optim.h): checking a configuration's groups, the
 * helpers that build them, and which group chooses each parameter of a
 * model. The optimizer (optimizer.c) turns the choice into each
 * parameter's weight decay and rate scale, which its updates carry. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/model/internal.h"

ug_param_group ug_param_group_defaults(void)
{
    return (ug_param_group){.select = UG_SELECT_NAMES, .weight_decay = 0.0f, .lr_scale = 1.0f};
}

const char *ug_optim_group_name(const ug_optimizer_config *c, int group, char *buf, size_t len)
{
    if (group < 0)
        snprintf(buf, len, "no group");
    else if (c->groups[group].name[0])
        snprintf(buf, len, "group '%s'", c->groups[group].name);
    else
        snprintf(buf, len, "group %d", group);
    return buf;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The next whitespace-separated word of a pattern from *at: its start and
 * length (0 at the end). */
static size_t next_word(const char *pattern, size_t *at, const char **word)
{
    size_t i = *at;
    while (pattern[i] && is_space(pattern[i]))
        i++;
    size_t len = 0;
    while (pattern[i + len] && !is_space(pattern[i + len]))
        len++;
    *word = pattern + i;
    *at = i + len;
    return len;
}

/* Shell-style glob over the len characters of glob: '*' any run of
 * characters (dots included), '?' one. Backtracks only to the last '*',
 * so it is linear in practice and never recursive. */
static bool glob_match(const char *glob, size_t len, const char *name)
{
    size_t g = 0, star = (size_t)-1;
    const char *n = name, *resume = NULL;
    while (*n) {
        if (g < len && (glob[g] == '?' || glob[g] == *n)) {
            g++, n++;
        } else if (g < len && glob[g] == '*') {
            star = g++;
            resume = n;
        } else if (star != (size_t)-1) {
            g = star + 1;
            n = ++resume;
        } else {
            return false;
        }
    }
    while (g < len && glob[g] == '*')
        g++;
    return g == len;
}

static bool names_match(const char *pattern, const char *name)
{
    size_t at = 0, len;
    const char *word;
    while ((len = next_word(pattern, &at, &word)) > 0)
        if (glob_match(word, len, name))
            return true;
    return false;
}

/* A fixed-size text field holds a string: its NUL inside the field. */
static bool terminated(const char *field, size_t size) { return memchr(field, '\0', size) != NULL; }

/* One group on its own: what does not depend on the model. */
static ug_status check_group(const char *op, const ug_optimizer_config *c, int k)
{
    const ug_param_group *g = &c->groups[k];
    if (!terminated(g->name, sizeof g->name))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: group %d's name is not a string of at most %d characters",
                            op, k, UG_PARAM_GROUP_NAME - 1);
    char label[UG_PARAM_GROUP_NAME + 16];
    ug_optim_group_name(c, k, label, sizeof label);
    if ((unsigned)g->select > UG_SELECT_PREDICATE)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s: select %d is not a ug_param_select", op, label,
                            (int)g->select);
    if (!terminated(g->pattern, sizeof g->pattern))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: the pattern of %s is not a string of at most %d characters", op, label,
                            UG_PARAM_GROUP_PATTERN - 1);
    size_t at = 0;
    const char *word;
    const bool has_pattern = next_word(g->pattern, &at, &word) > 0;
    if (g->select == UG_SELECT_NAMES && !has_pattern)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %s chooses by name (UG_SELECT_NAMES) and its pattern is empty; give "
                            "names or globs separated by spaces (\"*.bias ln_f.weight\")",
                            op, label);
    if (g->select != UG_SELECT_NAMES && has_pattern)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %s has a pattern (\"%s\") but does not choose by name (select %d); set "
                            "select to UG_SELECT_NAMES or clear the pattern",
                            op, label, g->pattern, (int)g->select);
    if ((g->select == UG_SELECT_PREDICATE) != (g->predicate != NULL))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s: %s", op, label,
                            g->predicate ? "a predicate is only for select UG_SELECT_PREDICATE"
                                         : "select UG_SELECT_PREDICATE needs a predicate");
    if (!(g->weight_decay >= 0.0f && g->weight_decay <= FLT_MAX) || !(g->lr_scale >= 0.0f && g->lr_scale <= FLT_MAX))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %s: weight_decay %g and lr_scale %g must be finite and >= 0", op, label,
                            (double)g->weight_decay, (double)g->lr_scale);
    /* The schedule's rate is at most lr (an ulp more after the cosine's
     * rounding): half of f32's range keeps the group's rate finite. */
    if ((double)c->lr * (double)g->lr_scale > (double)FLT_MAX / 2)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "%s: %s: lr_scale %g times the learning rate %g must stay below FLT_MAX / 2 (%g)", op,
                            label, (double)g->lr_scale, (double)c->lr, (double)FLT_MAX / 2);
    for (int other = 0; other < k; other++)
        if (g->name[0] && !strcmp(g->name, c->groups[other].name))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: groups %d and %d are both named '%s'; names are unique",
                                op, other, k, g->name);
    return UG_OK;
}

ug_status ug_optim_groups_check(const ug_optimizer_config *c, const char *op)
{
    if (c->group_count < 0 || c->group_count > UG_OPTIMIZER_MAX_GROUPS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: group_count %d must be 0 to %d", op, c->group_count,
                            UG_OPTIMIZER_MAX_GROUPS);
    for (int k = 0; k < c->group_count; k++)
        UG_TRY(check_group(op, c, k));
    return UG_OK;
}

ug_status ug_optimizer_add_group(ug_optimizer_config *config, const ug_param_group *group)
{
    const char *op = "ug_optimizer_add_group";
    if (!config || !group)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, config ? "group" : "config");
    if (config->group_count < 0 || config->group_count >= UG_OPTIMIZER_MAX_GROUPS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the configuration has %d groups; at most %d", op,
                            config->group_count, UG_OPTIMIZER_MAX_GROUPS);
    ug_optimizer_config grown = *config;
    grown.groups[grown.group_count++] = *group;
    UG_TRY(ug_optim_groups_check(&grown, op));
    *config = grown;
    return UG_OK;
}

ug_status ug_optimizer_decay_matrices_only(ug_optimizer_config *config)
{
    const char *op = "ug_optimizer_decay_matrices_only";
    if (!config)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: config is NULL", op);
    ug_param_group decay = ug_param_group_defaults(), no_decay = ug_param_group_defaults();
    snprintf(decay.name, sizeof decay.name, "decay");
    decay.select = UG_SELECT_MATRICES;
    decay.weight_decay = config->weight_decay;
    snprintf(no_decay.name, sizeof no_decay.name, "no_decay");
    no_decay.select = UG_SELECT_VECTORS;
    ug_optimizer_config grown = *config;
    ug_status st = ug_optimizer_add_group(&grown, &decay);
    if (st == UG_OK)
        st = ug_optimizer_add_group(&grown, &no_decay);
    if (st != UG_OK)
        return ug_prefix_error(st, "%s", op);
    *config = grown;
    return UG_OK;
}

/* Whether group g chooses the parameter. */
static bool chooses(const ug_param_group *g, const char *name, const ug_tensor *t)
{
    const int ndim = ug_tensor_ndim(t);
    switch (g->select) {
    case UG_SELECT_NAMES:
        return names_match(g->pattern, name);
    case UG_SELECT_MATRICES:
        return ndim >= 2;
    case UG_SELECT_VECTORS:
        return ndim < 2;
    default: {
        int64_t shape[UG_MAX_DIMS];
        ug_tensor_shape(t, shape);
        return g->predicate(name, ndim, shape, g->user);
    }
    }
}

/* The model's parameter names, for a message ("a, b, c"), cut to fit. */
static void list_names(const ug_model *model, int params, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < params && used + 1 < len; i++) {
        const char *name = NULL;
        ug_model_param_at(model, i, &name, NULL);
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", name);
    }
}

/* A group that chooses by name or predicate must choose something: each of
 * its words matches a parameter, and the predicate accepts one. */
static ug_status check_chosen(const char *op, const ug_optimizer_config *c, const ug_model *model, int params,
                              const int *group_of, int k)
{
    const ug_param_group *g = &c->groups[k];
    char label[UG_PARAM_GROUP_NAME + 16], names[512];
    ug_optim_group_name(c, k, label, sizeof label);
    if (g->select == UG_SELECT_PREDICATE) {
        for (int i = 0; i < params; i++)
            if (group_of[i] == k)
                return UG_OK;
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s: its predicate chose none of the model's %d "
                            "parameters", op, label, params);
    }
    if (g->select != UG_SELECT_NAMES)
        return UG_OK; /* a shape rule may find no parameter of its shape */
    size_t at = 0, len;
    const char *word;
    while ((len = next_word(g->pattern, &at, &word)) > 0) {
        bool found = false;
        for (int i = 0; i < params && !found; i++) {
            const char *name = NULL;
            ug_model_param_at(model, i, &name, NULL);
            found = glob_match(word, len, name);
        }
        if (!found) {
            list_names(model, params, names, sizeof names);
            return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                "%s: %s: '%.*s' matches no parameter of the model (it has: %s)", op, label,
                                (int)len, word, names);
        }
    }
    return UG_OK;
}

ug_status ug_optim_groups_assign(const ug_optimizer_config *c, const ug_model *model, int params, int *group_of,
                                 const char *op)
{
    for (int i = 0; i < params; i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(model, i, &name, &t));
        group_of[i] = -1;
        for (int k = 0; k < c->group_count; k++) {
            if (!chooses(&c->groups[k], name, t))
                continue;
            if (group_of[i] >= 0) {
                char first[UG_PARAM_GROUP_NAME + 16], second[UG_PARAM_GROUP_NAME + 16];
                return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                    "%s: parameter '%s' is chosen by %s and %s; a parameter belongs to "
                                    "one group",
                                    op, name, ug_optim_group_name(c, group_of[i], first, sizeof first),
                                    ug_optim_group_name(c, k, second, sizeof second));
            }
            group_of[i] = k;
        }
    }
    for (int k = 0; k < c->group_count; k++)
        UG_TRY(check_chosen(op, c, model, params, group_of, k));
    return UG_OK;
}
