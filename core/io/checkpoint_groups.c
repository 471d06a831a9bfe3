/* An optimizer's parameter groups (optim.h) in a checkpoint's metadata:
 *   unigrad.optimizer.groups                    how many (absent: none)
 *   unigrad.optimizer.group.<k>.name            as configured ("" unnamed)
 *   unigrad.optimizer.group.<k>.weight_decay    f32, 9 digits: exact
 *   unigrad.optimizer.group.<k>.lr_scale
 *   unigrad.optimizer.param_group.<parameter>   k, or -1 outside every group
 * A resumed run continues bit for bit only with the same groups: the
 * state of a parameter decayed in one run and not in the other, or moved
 * at another rate, would diverge without a word, so loading compares the
 * file's groups with the optimizer's and refuses any difference. A file
 * saved without groups (or before they existed) has none of these keys and
 * loads as it always did. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/checkpoint_groups.h"
#include "core/model/internal.h"

enum { KEY_BYTES = 256 };

static const char COUNT_KEY[] = "unigrad.optimizer.groups";

static void group_key(char *key, int k, const char *field)
{
    snprintf(key, KEY_BYTES, "unigrad.optimizer.group.%d.%s", k, field);
}

static void param_key(char *key, const char *param)
{
    snprintf(key, KEY_BYTES, "unigrad.optimizer.param_group.%s", param);
}

static ug_status set_real(ug_string_map *meta, const char *key, float value)
{
    char text[32];
    snprintf(text, sizeof text, "%.9g", (double)value); /* 9 digits: the f32 exactly */
    return ug_strings_set(meta, key, text);
}

static ug_status set_int(ug_string_map *meta, const char *key, int value)
{
    char text[16];
    snprintf(text, sizeof text, "%d", value);
    return ug_strings_set(meta, key, text);
}

ug_status ug_checkpoint_save_groups(const ug_optimizer *opt, ug_string_map *meta)
{
    const ug_optimizer_config c = ug_optimizer_get_config(opt);
    if (c.group_count == 0)
        return UG_OK;
    char key[KEY_BYTES];
    UG_TRY(set_int(meta, COUNT_KEY, c.group_count));
    for (int k = 0; k < c.group_count; k++) {
        group_key(key, k, "name");
        UG_TRY(ug_strings_set(meta, key, c.groups[k].name));
        group_key(key, k, "weight_decay");
        UG_TRY(set_real(meta, key, c.groups[k].weight_decay));
        group_key(key, k, "lr_scale");
        UG_TRY(set_real(meta, key, c.groups[k].lr_scale));
    }
    const ug_model *model = ug_optimizer_model(opt);
    for (int i = 0; i < ug_optimizer_param_count(opt); i++) {
        const char *name = NULL;
        int group = -1;
        UG_TRY(ug_model_param_at(model, i, &name, NULL));
        UG_TRY(ug_optimizer_param_group(opt, i, &group));
        param_key(key, name);
        UG_TRY(set_int(meta, key, group));
    }
    return UG_OK;
}

/* The file's value of key: absent or malformed is a format error. */
static ug_status read_text(const ug_st_file *file, const char *key, const char **out)
{
    *out = ug_st_metadata(file, key);
    if (!*out)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata has no '%s' (the file has %s, so it has every group's keys)",
                            ug_st_path(file), key, COUNT_KEY);
    return UG_OK;
}

static ug_status read_int(const ug_st_file *file, const char *key, long low, long high, int *out)
{
    const char *text = NULL;
    UG_TRY(read_text(file, key, &text));
    char *end = NULL;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (!text[0] || *end || errno || v < low || v > high)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata '%s' is \"%s\"; expected a whole number in %ld..%ld",
                            ug_st_path(file), key, text, low, high);
    *out = (int)v;
    return UG_OK;
}

static ug_status read_real(const ug_st_file *file, const char *key, float *out)
{
    const char *text = NULL;
    UG_TRY(read_text(file, key, &text));
    char *end = NULL;
    *out = strtof(text, &end);
    if (!text[0] || *end)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata '%s' is \"%s\"; expected a number", ug_st_path(file), key,
                            text);
    return UG_OK;
}

/* One group's settings against the optimizer's group k. */
static ug_status check_group(const ug_st_file *file, const ug_optimizer_config *c, int k)
{
    char key[KEY_BYTES], label[UG_PARAM_GROUP_NAME + 16];
    const char *name = NULL;
    group_key(key, k, "name");
    UG_TRY(read_text(file, key, &name));
    ug_optim_group_name(c, k, label, sizeof label);
    if (strcmp(name, c->groups[k].name))
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: parameter group %d was saved as '%s'; this optimizer's is %s: create the "
                            "optimizer with the checkpoint's groups, in their order",
                            ug_st_path(file), k, name, label);
    const char *fields[2] = {"weight_decay", "lr_scale"};
    const float mine[2] = {c->groups[k].weight_decay, c->groups[k].lr_scale};
    for (int f = 0; f < 2; f++) {
        float saved = 0.0f;
        group_key(key, k, fields[f]);
        UG_TRY(read_real(file, key, &saved));
        if (saved != mine[f])
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: %s was saved with %s %.9g, and this optimizer's has %.9g: resuming would "
                                "change the run; create the optimizer with the checkpoint's groups",
                                ug_st_path(file), label, fields[f], (double)saved, (double)mine[f]);
    }
    return UG_OK;
}

ug_status ug_checkpoint_check_groups(const ug_st_file *file, const ug_optimizer *opt)
{
    const ug_optimizer_config c = ug_optimizer_get_config(opt);
    if (!ug_st_metadata(file, COUNT_KEY))
        return UG_OK;
    int count = 0;
    UG_TRY(read_int(file, COUNT_KEY, 0, UG_OPTIMIZER_MAX_GROUPS, &count));
    if (count != c.group_count)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: the optimizer was saved with %d parameter group%s and this one has %d: its state "
                            "would be updated under other settings; create the optimizer with the checkpoint's "
                            "groups",
                            ug_st_path(file), count, count == 1 ? "" : "s", c.group_count);
    for (int k = 0; k < count; k++)
        UG_TRY(check_group(file, &c, k));
    const ug_model *model = ug_optimizer_model(opt);
    char key[KEY_BYTES], saved_label[UG_PARAM_GROUP_NAME + 16], label[UG_PARAM_GROUP_NAME + 16];
    for (int i = 0; i < ug_optimizer_param_count(opt); i++) {
        const char *name = NULL;
        int mine = -1, saved = -1;
        UG_TRY(ug_model_param_at(model, i, &name, NULL));
        UG_TRY(ug_optimizer_param_group(opt, i, &mine));
        param_key(key, name);
        UG_TRY(read_int(file, key, -1, count - 1, &saved));
        if (saved != mine)
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: parameter '%s' was in %s when saved and is in %s in this optimizer: create "
                                "the optimizer with the checkpoint's groups",
                                ug_st_path(file), name, ug_optim_group_name(&c, saved, saved_label, sizeof saved_label),
                                ug_optim_group_name(&c, mine, label, sizeof label));
    }
    return UG_OK;
}
