/* Training checkpoints (include/unigrad/checkpoint.h): the parts' state to
 * and from a safetensors file (core/io/safetensors.c), which writes it through
 * an atomic replacement (base/atomic_file.c).
 *
 * Loading runs in two phases so that a bad file changes nothing: first
 * every entry the parts need is found and checked against them (dtype,
 * shape, metadata) and read into host memory, then the state is applied. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "core/io/checkpoint_groups.h"
#include "core/io/checkpoint_internal.h"
#include "core/io/safetensors.h"
#include "core/io/string_map.h"
#include "kernels/common/optim_step.h"
#include "unigrad/checkpoint.h"

enum { MAX_PARTS = 16, NAME_BYTES = 64, KEY_BYTES = 256 };

static const char FORMAT_KEY[] = "unigrad.format", FORMAT_VERSION[] = "1";

/* A graph or a loader, by the caller's name for it. */
typedef struct named_part {
    char name[NAME_BYTES];
    ug_graph *graph;
    ug_loader *loader;
} named_part;

struct ug_checkpoint {
    ug_model *model;
    ug_optimizer *optimizer;
    named_part graphs[MAX_PARTS];
    int graph_count;
    named_part loaders[MAX_PARTS];
    int loader_count;
    ug_string_map strings; /* the caller's */
    int keep;
    /* A pipeline stage's (checkpoint_internal.h): tensors saved beside the
     * parts, and a model that is part of the file's. */
    int extra_count;
    const char *const *extra_names;
    ug_tensor *const *extras;
    bool model_is_part;
};

/* ---- the object ---- */

ug_status ug_checkpoint_create(ug_checkpoint **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_checkpoint_create: out is NULL");
    *out = ug_calloc(1, sizeof **out);
    if (!*out)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_checkpoint_create: out of host memory");
    (*out)->keep = 1;
    return UG_OK;
}

void ug_checkpoint_free(ug_checkpoint *ck)
{
    if (!ck)
        return;
    ug_strings_clear(&ck->strings);
    free(ck);
}

ug_status ug_checkpoint_add_model(ug_checkpoint *ck, ug_model *model)
{
    const char *op = "ug_checkpoint_add_model";
    if (!ck || !model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "model" : "checkpoint");
    if (ck->model && ck->model != model)
        return ug_set_error(UG_ERR_STATE, "%s: the checkpoint has a model already", op);
    if (ck->optimizer && ug_optimizer_model(ck->optimizer) != model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the checkpoint's optimizer belongs to another model", op);
    ck->model = model;
    return UG_OK;
}

ug_status ug_checkpoint_add_optimizer(ug_checkpoint *ck, ug_optimizer *opt)
{
    const char *op = "ug_checkpoint_add_optimizer";
    if (!ck || !opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "optimizer" : "checkpoint");
    if (ck->optimizer && ck->optimizer != opt)
        return ug_set_error(UG_ERR_STATE, "%s: the checkpoint has an optimizer already", op);
    if (ck->model && ug_optimizer_model(opt) != ck->model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the optimizer belongs to another model than the checkpoint's",
                            op);
    ck->optimizer = opt;
    /* Its state is named after the model's parameters. */
    ck->model = ug_optimizer_model(opt);
    return UG_OK;
}

/* Adds a part under name: unique among its kind, and usable in metadata
 * keys. */
static ug_status add_part(const char *op, named_part *parts, int *count, const char *name, ug_graph *graph,
                          ug_loader *loader)
{
    if (!name || !name[0] || strlen(name) >= NAME_BYTES)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: name %s%s%s: give 1 to %d characters", op,
                            name ? "'" : "NULL", name ? name : "", name ? "'" : "", NAME_BYTES - 1);
    if (strchr(name, '.'))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: name '%s' may not contain '.'", op, name);
    for (int i = 0; i < *count; i++)
        if (!strcmp(parts[i].name, name))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the name '%s' is taken", op, name);
    if (*count == MAX_PARTS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: at most %d of them", op, MAX_PARTS);
    named_part *p = &parts[(*count)++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->graph = graph;
    p->loader = loader;
    return UG_OK;
}

ug_optimizer *ug_checkpoint_swap_optimizer(ug_checkpoint *ck, ug_optimizer *opt)
{
    ug_optimizer *had = ck->optimizer;
    ck->optimizer = opt;
    return had;
}

void ug_checkpoint_set_extras(ug_checkpoint *ck, int count, const char *const *names, ug_tensor *const *tensors)
{
    ck->extra_count = count;
    ck->extra_names = names;
    ck->extras = tensors;
}

void ug_checkpoint_model_is_part(ug_checkpoint *ck) { ck->model_is_part = true; }

ug_model *ug_checkpoint_swap_model(ug_checkpoint *ck, ug_model *model)
{
    ug_model *had = ck->model;
    ck->model = model;
    return had;
}

ug_status ug_checkpoint_add_graph(ug_checkpoint *ck, const char *name, ug_graph *graph)
{
    const char *op = "ug_checkpoint_add_graph";
    if (!ck || !graph)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "graph" : "checkpoint");
    return add_part(op, ck->graphs, &ck->graph_count, name, graph, NULL);
}

ug_status ug_checkpoint_add_loader(ug_checkpoint *ck, const char *name, ug_loader *loader)
{
    const char *op = "ug_checkpoint_add_loader";
    if (!ck || !loader)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "loader" : "checkpoint");
    return add_part(op, ck->loaders, &ck->loader_count, name, NULL, loader);
}

ug_status ug_checkpoint_set_string(ug_checkpoint *ck, const char *key, const char *value)
{
    const char *op = "ug_checkpoint_set_string";
    if (!ck || !key || !value)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: NULL argument", op);
    if (!key[0] || !strncmp(key, "unigrad.", 8) || !strcmp(key, FORMAT_KEY))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: key '%s': keys starting with \"unigrad.\" (or empty) are the library's",
                            op, key);
    ug_status st = ug_strings_set(&ck->strings, key, value);
    return st == UG_OK ? st : ug_prefix_error(st, "%s", op);
}

const char *ug_checkpoint_string(const ug_checkpoint *ck, const char *key)
{
    return ck && key ? ug_strings_get(&ck->strings, key) : NULL;
}

ug_status ug_checkpoint_set_keep(ug_checkpoint *ck, int keep)
{
    if (!ck || keep < 1 || keep > 1000)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_checkpoint_set_keep: %s",
                            ck ? "keep is 1 to 1000 files" : "checkpoint is NULL");
    ck->keep = keep;
    return UG_OK;
}

/* ---- the tensors of the parts ---- */

/* Called with each tensor of a part, its name in the file, and what it is
 * (for messages); saving and loading visit the same ones. */
typedef ug_status (*tensor_visit)(void *context, const char *key, ug_tensor *tensor, const char *what);

/* The optimizer's state: "<parameter>.<slot>". */
static ug_status each_state(const ug_checkpoint *ck, tensor_visit visit, void *context)
{
    ug_optimizer *opt = ck->optimizer;
    char key[KEY_BYTES];
    int rank = 0, size = 1;
    if (ug_optim_sharded(opt, &rank, &size))
        return ug_set_error(UG_ERR_UNSUPPORTED, "the optimizer's state is sharded (rank %d of %d holds its part, "
                            "ug_comm_shard_optimizer), and a checkpoint holds whole state: save a whole copy "
                            "(the trainer gathers one on rank 0), and load before sharding", rank, size);
    for (int i = 0; i < ug_optimizer_param_count(opt); i++) {
        const char *name = NULL;
        ug_tensor *param = NULL;
        UG_TRY(ug_model_param_at(ck->model, i, &name, &param));
        for (int slot = 0; slot < ug_optimizer_state_count(opt); slot++) {
            ug_tensor *t = NULL;
            UG_TRY(ug_optimizer_state(opt, i, slot, &t));
            snprintf(key, sizeof key, "%s.%s", name, ug_optimizer_state_name(opt, slot));
            UG_TRY(visit(context, key, t, "the optimizer's state"));
        }
    }
    return UG_OK;
}

/* A graph's running sums (ug_graph_accumulate), in value order:
 * "unigrad.graph.<name>.sum<k>". */
static ug_status each_sum(const named_part *ng, tensor_visit visit, void *context)
{
    const ug_graph *g = ng->graph;
    char key[KEY_BYTES];
    for (int i = 0, k = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind != VALUE_SUM || !v->tensor)
            continue;
        snprintf(key, sizeof key, "unigrad.graph.%s.sum%d", ng->name, k++);
        UG_TRY(visit(context, key, v->tensor, "the graph's running sum"));
    }
    return UG_OK;
}

/* ---- saving ---- */

/* The tensors and metadata being written, each owned here. */
typedef struct save_list {
    ug_st_entry *entries;
    int count, capacity;
    ug_string_map meta;
} save_list;

static void save_list_free(save_list *s)
{
    for (int i = 0; i < s->count; i++) {
        free((void *)s->entries[i].name);
        free((void *)s->entries[i].data);
        free((void *)s->entries[i].shape);
    }
    free(s->entries);
    ug_strings_clear(&s->meta);
}

/* Adds tensor's contents (downloaded: waits for the device) as name. */
static ug_status save_tensor(save_list *s, const char *name, const ug_tensor *tensor)
{
    if (s->count == s->capacity) {
        int cap = s->capacity ? 2 * s->capacity : 32;
        ug_st_entry *e = ug_realloc(s->entries, (size_t)cap * sizeof *e);
        if (!e)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
        s->entries = e;
        s->capacity = cap;
    }
    int ndim = ug_tensor_ndim(tensor);
    size_t bytes = ug_tensor_nbytes(tensor);
    char *copy = ug_string_copy(name);
    int64_t *shape = ug_malloc(UG_MAX_DIMS * sizeof *shape);
    void *data = ug_malloc(bytes ? bytes : 1);
    if (!copy || !shape || !data) {
        free(copy);
        free(shape);
        free(data);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory for %s (%zu bytes)", name, bytes);
    }
    ug_tensor_shape(tensor, shape);
    s->entries[s->count++] = (ug_st_entry){copy, ug_tensor_dtype(tensor), ndim, shape, data};
    ug_status st = ug_tensor_download(tensor, data, bytes);
    return st == UG_OK ? st : ug_prefix_error(st, "reading %s", name);
}

static ug_status save_visit(void *context, const char *key, ug_tensor *tensor, const char *what)
{
    (void)what;
    return save_tensor(context, key, tensor);
}

static ug_status meta_int(ug_string_map *meta, const char *key, int64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, value);
    return ug_strings_set(meta, key, text);
}

static ug_status meta_u64(ug_string_map *meta, const char *key, uint64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRIu64, value);
    return ug_strings_set(meta, key, text);
}

static const char *optimizer_type_name(ug_optim_type type)
{
    return type == UG_SGD ? "sgd" : type == UG_ADAM ? "adam" : "adamw";
}

static ug_status gather_model(const ug_checkpoint *ck, save_list *s)
{
    for (int i = 0; i < ug_model_param_count(ck->model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(ck->model, i, &name, &t));
        UG_TRY(save_tensor(s, name, t));
    }
    return UG_OK;
}

static ug_status gather_optimizer(const ug_checkpoint *ck, save_list *s)
{
    ug_optimizer *opt = ck->optimizer;
    UG_TRY(each_state(ck, save_visit, s));
    UG_TRY(ug_strings_set(&s->meta, "unigrad.optimizer.type", optimizer_type_name(ug_optimizer_get_config(opt).type)));
    UG_TRY(meta_int(&s->meta, "unigrad.optimizer.steps", ug_optimizer_steps(opt)));
    UG_TRY(ug_checkpoint_save_groups(opt, &s->meta));
    ug_loss_scaler_state scaler;
    if (!ug_optimizer_get_config(opt).loss_scaling.enabled)
        return UG_OK;
    UG_TRY(ug_optimizer_loss_scaler(opt, &scaler));
    char scale[32];
    snprintf(scale, sizeof scale, "%.9g", (double)scaler.scale); /* 9 digits: the f32 exactly */
    UG_TRY(ug_strings_set(&s->meta, "unigrad.scaler.scale", scale));
    UG_TRY(meta_int(&s->meta, "unigrad.scaler.clean_steps", scaler.clean_steps));
    return meta_int(&s->meta, "unigrad.scaler.skipped_steps", scaler.skipped_steps);
}

static ug_status gather_graph(const named_part *ng, save_list *s)
{
    const ug_graph *g = ng->graph;
    if (g->micro_batches)
        return ug_set_error(UG_ERR_STATE,
                            "graph '%s' holds the gradients of %d micro-batch%s not yet applied; save after "
                            "ug_graph_run_update",
                            ng->name, g->micro_batches, g->micro_batches == 1 ? "" : "es");
    char key[KEY_BYTES];
    snprintf(key, sizeof key, "unigrad.graph.%s.seed", ng->name);
    UG_TRY(meta_u64(&s->meta, key, g->run.seed));
    snprintf(key, sizeof key, "unigrad.graph.%s.runs", ng->name);
    UG_TRY(meta_u64(&s->meta, key, g->runs));
    return each_sum(ng, save_visit, s);
}

static ug_status gather_loader(const named_part *nl, save_list *s)
{
    ug_loader_config c = ug_loader_get_config(nl->loader);
    int64_t epoch = 0, next = 0;
    ug_loader_position(nl->loader, &epoch, &next);
    char key[KEY_BYTES];
    const char *fields[] = {"seed", "epoch", "next_batch", "batch_size", "batches", "shuffle"};
    int64_t values[] = {0, epoch, next, c.batch_size, ug_loader_batches(nl->loader), c.shuffle};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        snprintf(key, sizeof key, "unigrad.loader.%s.%s", nl->name, fields[i]);
        UG_TRY(i == 0 ? meta_u64(&s->meta, key, c.seed) : meta_int(&s->meta, key, values[i]));
    }
    return UG_OK;
}

ug_status ug_checkpoint_save(ug_checkpoint *ck, const char *path)
{
    const char *op = "ug_checkpoint_save";
    if (!ck || !path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "path" : "checkpoint");
    save_list s = {0};
    ug_status st = ug_strings_set(&s.meta, FORMAT_KEY, FORMAT_VERSION);
    if (st == UG_OK && ck->model)
        st = gather_model(ck, &s);
    for (int i = 0; st == UG_OK && i < ck->extra_count; i++)
        st = save_tensor(&s, ck->extra_names[i], ck->extras[i]);
    if (st == UG_OK && ck->optimizer)
        st = gather_optimizer(ck, &s);
    for (int i = 0; st == UG_OK && i < ck->graph_count; i++)
        st = gather_graph(&ck->graphs[i], &s);
    for (int i = 0; st == UG_OK && i < ck->loader_count; i++)
        st = gather_loader(&ck->loaders[i], &s);
    for (int i = 0; st == UG_OK && i < ck->strings.count; i++)
        st = ug_strings_set(&s.meta, ck->strings.keys[i], ck->strings.values[i]);
    if (st == UG_OK)
        st = ug_st_save(path, s.entries, s.count, (const char *const *)s.meta.keys,
                        (const char *const *)s.meta.values, s.meta.count, ck->keep);
    save_list_free(&s);
    return st == UG_OK ? st : ug_prefix_error(st, "%s: %s", op, path);
}

/* ---- loading ---- */

/* A tensor to restore: where it goes and its contents, read in phase one. */
typedef struct pending_tensor {
    const ug_st_tensor *entry;
    ug_tensor *target;         /* optimizer state, graph sum */
    const char *param;         /* or a model parameter by name */
    void *data;
    void *backup;              /* what it replaces, read before anything is written */
} pending_tensor;

typedef struct load_plan {
    ug_st_file *file;
    pending_tensor *tensors;
    int count, capacity;
    int64_t steps;
    bool has_scaler;
    ug_loss_scaler_state scaler;
    uint64_t graph_seed[MAX_PARTS], graph_runs[MAX_PARTS];
    int64_t loader_epoch[MAX_PARTS], loader_next[MAX_PARTS];
} load_plan;

static const char *file_path(const load_plan *p) { return ug_st_path(p->file); }

static void format_dims(int ndim, const int64_t *shape, char *buf, size_t len)
{
    int used = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < (int)len; i++)
        used += snprintf(buf + used, len - (size_t)used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < (int)len)
        snprintf(buf + used, len - (size_t)used, "]");
}

/* Finds name, checks it against tensor (dtype and shape) and queues it. */
static ug_status plan_tensor(load_plan *p, const char *name, const ug_tensor *tensor, ug_tensor *target,
                             const char *param, const char *what)
{
    const ug_st_tensor *e = ug_st_find(p->file, name);
    char want[160], got[160];
    int64_t shape[UG_MAX_DIMS];
    int ndim = ug_tensor_ndim(tensor);
    ug_tensor_shape(tensor, shape);
    format_dims(ndim, shape, want, sizeof want);
    if (!e)
        return ug_set_error(UG_ERR_FORMAT, "%s: no tensor '%s' (%s, %s %s); the file holds %d tensors",
                            file_path(p), name, what, ug_st_dtype_name(ug_tensor_dtype(tensor)), want,
                            ug_st_count(p->file));
    format_dims(e->ndim, e->shape, got, sizeof got);
    bool same = e->dtype == ug_tensor_dtype(tensor) && e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = e->shape[i] == shape[i];
    if (!same)
        return ug_set_error(UG_ERR_FORMAT, "%s: byte %" PRIu64 ": tensor '%s' is %s %s; %s is %s %s",
                            file_path(p), e->offset, name, e->dtype_name, got, what,
                            ug_st_dtype_name(ug_tensor_dtype(tensor)), want);
    if (p->count == p->capacity) {
        int cap = p->capacity ? 2 * p->capacity : 32;
        pending_tensor *t = ug_realloc(p->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
        p->tensors = t;
        p->capacity = cap;
    }
    pending_tensor *t = &p->tensors[p->count];
    *t = (pending_tensor){e, target, param, ug_malloc(e->bytes ? e->bytes : 1), NULL};
    if (!t->data)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for tensor '%s' (%" PRIu64 " bytes)",
                            file_path(p), name, e->bytes);
    p->count++;
    return ug_st_read(p->file, e, t->data, e->bytes);
}

static ug_status plan_visit(void *context, const char *key, ug_tensor *tensor, const char *what)
{
    return plan_tensor(context, key, tensor, tensor, NULL, what);
}

/* A metadata value as a whole number in [low, high]. */
static ug_status meta_number(const load_plan *p, const char *key, int64_t low, int64_t high, int64_t *out)
{
    const char *text = ug_st_metadata(p->file, key);
    if (!text)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata has no '%s'; was the file saved with this part?",
                            file_path(p), key);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!text[0] || *end || errno || v < low || v > high)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata '%s' is \"%s\"; expected a whole number in %" PRId64
                            "..%" PRId64, file_path(p), key, text, low, high);
    *out = v;
    return UG_OK;
}

static ug_status meta_unsigned(const load_plan *p, const char *key, uint64_t *out)
{
    const char *text = ug_st_metadata(p->file, key);
    if (!text)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata has no '%s'", file_path(p), key);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!text[0] || text[0] == '-' || *end || errno)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata '%s' is \"%s\"; expected a whole number >= 0",
                            file_path(p), key, text);
    *out = v;
    return UG_OK;
}

static bool keeps_slot(const ug_optimizer *opt, const char *slot)
{
    for (int i = 0; i < ug_optimizer_state_count(opt); i++)
        if (!strcmp(ug_optimizer_state_name(opt, i), slot))
            return true;
    return false;
}

/* Every tensor of the file must belong to some part: a model parameter,
 * an optimizer slot of one, or the library's own. Others mean the file is
 * of another model. */
static ug_status check_unexpected(const load_plan *p, const ug_checkpoint *ck)
{
    for (int i = 0; i < ug_st_count(p->file); i++) {
        const ug_st_tensor *e = ug_st_at(p->file, i);
        if (!strncmp(e->name, "unigrad.", 8))
            continue;
        ug_tensor *t = NULL;
        if (ug_model_find_param(ck->model, e->name, &t) == UG_OK)
            continue;
        const char *dot = strrchr(e->name, '.');
        bool state = false;
        if (dot && dot - e->name < KEY_BYTES) {
            char param[KEY_BYTES];
            snprintf(param, sizeof param, "%.*s", (int)(dot - e->name), e->name);
            const char *slot = dot + 1;
            state = ug_model_find_param(ck->model, param, &t) == UG_OK &&
                    (!strcmp(slot, "exp_avg") || !strcmp(slot, "exp_avg_sq") || !strcmp(slot, "momentum_buffer"));
            /* State the checkpoint's optimizer does not keep would be lost
             * without a word (SGD's momentum loaded into plain SGD). A model
             * alone may come from a whole training checkpoint. */
            if (state && ck->optimizer && !keeps_slot(ck->optimizer, slot)) {
                ug_clear_error();
                return ug_set_error(UG_ERR_FORMAT,
                                    "%s: byte %" PRIu64 ": tensor '%s' is optimizer state ('%s') that this "
                                    "%s optimizer does not keep%s; loading would drop it",
                                    file_path(p), e->offset, e->name, slot,
                                    optimizer_type_name(ug_optimizer_get_config(ck->optimizer).type),
                                    !strcmp(slot, "momentum_buffer") ? " (the file was saved with momentum > 0)" : "");
            }
        }
        if (!state && !ck->model_is_part) { /* a stage's model: the others' parameters are theirs */
            ug_clear_error();
            return ug_set_error(UG_ERR_FORMAT,
                                "%s: byte %" PRIu64 ": tensor '%s' is not a parameter of the model (nor "
                                "optimizer state of one): a checkpoint of another model?",
                                file_path(p), e->offset, e->name);
        }
    }
    ug_clear_error();
    return UG_OK;
}

static ug_status plan_model(load_plan *p, const ug_checkpoint *ck)
{
    for (int i = 0; i < ug_model_param_count(ck->model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(ck->model, i, &name, &t));
        UG_TRY(plan_tensor(p, name, t, NULL, name, "the model's parameter"));
    }
    return UG_OK;
}

static ug_status plan_optimizer(load_plan *p, const ug_checkpoint *ck)
{
    ug_optimizer *opt = ck->optimizer;
    ug_optimizer_config c = ug_optimizer_get_config(opt);
    const char *type = ug_st_metadata(p->file, "unigrad.optimizer.type");
    if (!type || strcmp(type, optimizer_type_name(c.type)))
        return ug_set_error(UG_ERR_FORMAT, "%s: the optimizer is %s, the checkpoint's %s%s%s", file_path(p),
                            optimizer_type_name(c.type), type ? "is " : "has none", type ? type : "",
                            type ? "" : " (unigrad.optimizer.type)");
    UG_TRY(meta_number(p, "unigrad.optimizer.steps", 0, UG_OPTIMIZER_MAX_STEPS, &p->steps));
    UG_TRY(each_state(ck, plan_visit, p));
    UG_TRY(ug_checkpoint_check_groups(p->file, opt));
    const char *scale = ug_st_metadata(p->file, "unigrad.scaler.scale");
    if (!c.loss_scaling.enabled)
        return UG_OK;
    if (!scale)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: the checkpoint was saved without loss scaling (no 'unigrad.scaler.scale'), and "
                            "this optimizer scales its loss (config.loss_scaling.enabled); load it into one "
                            "that does not, as it was saved",
                            file_path(p));
    char *end = NULL;
    p->has_scaler = true;
    p->scaler.scale = strtof(scale, &end);
    if (!scale[0] || *end)
        return ug_set_error(UG_ERR_FORMAT, "%s: metadata 'unigrad.scaler.scale' is \"%s\"; expected a number",
                            file_path(p), scale);
    UG_TRY(meta_number(p, "unigrad.scaler.clean_steps", 0, UG_STEP_MAX_COUNT, &p->scaler.clean_steps));
    UG_TRY(meta_number(p, "unigrad.scaler.skipped_steps", 0, p->steps, &p->scaler.skipped_steps));
    /* What the optimizer would refuse is refused now, before anything is
     * written. */
    if (ug_optim_check_restore(opt, p->steps, &p->scaler) == UG_OK)
        return UG_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", ug_last_error());
    return ug_set_error(UG_ERR_FORMAT, "%s: %s; this optimizer cannot take it", file_path(p), why);
}

static ug_status plan_graph(load_plan *p, const named_part *ng, int index)
{
    char key[KEY_BYTES];
    snprintf(key, sizeof key, "unigrad.graph.%s.seed", ng->name);
    UG_TRY(meta_unsigned(p, key, &p->graph_seed[index]));
    snprintf(key, sizeof key, "unigrad.graph.%s.runs", ng->name);
    UG_TRY(meta_unsigned(p, key, &p->graph_runs[index]));
    return each_sum(ng, plan_visit, p);
}

static ug_status plan_loader(load_plan *p, const named_part *nl, int index)
{
    ug_loader_config c = ug_loader_get_config(nl->loader);
    char key[KEY_BYTES];
    uint64_t seed = 0;
    int64_t batch_size = 0, batches = 0, shuffle = 0;
    snprintf(key, sizeof key, "unigrad.loader.%s.seed", nl->name);
    UG_TRY(meta_unsigned(p, key, &seed));
    snprintf(key, sizeof key, "unigrad.loader.%s.batch_size", nl->name);
    UG_TRY(meta_number(p, key, 1, INT64_MAX, &batch_size));
    snprintf(key, sizeof key, "unigrad.loader.%s.batches", nl->name);
    UG_TRY(meta_number(p, key, 0, INT64_MAX, &batches));
    snprintf(key, sizeof key, "unigrad.loader.%s.shuffle", nl->name);
    UG_TRY(meta_number(p, key, 0, 1, &shuffle));
    if (seed != c.seed || batch_size != c.batch_size || batches != ug_loader_batches(nl->loader) ||
        (shuffle != 0) != c.shuffle)
        return ug_set_error(UG_ERR_FORMAT,
                            "%s: loader '%s' was saved with seed %" PRIu64 ", batch size %" PRId64 ", %" PRId64
                            " batches per epoch, shuffle %s; this one has seed %" PRIu64 ", batch size %" PRId64
                            ", %" PRId64 " batches, shuffle %s: the saved position would mean other samples",
                            file_path(p), nl->name, seed, batch_size, batches, shuffle ? "on" : "off", c.seed,
                            c.batch_size, ug_loader_batches(nl->loader), c.shuffle ? "on" : "off");
    snprintf(key, sizeof key, "unigrad.loader.%s.epoch", nl->name);
    UG_TRY(meta_number(p, key, -1, INT64_MAX, &p->loader_epoch[index]));
    snprintf(key, sizeof key, "unigrad.loader.%s.next_batch", nl->name);
    /* Before the first epoch (-1) the loader has handed out nothing. */
    return meta_number(p, key, 0, p->loader_epoch[index] < 0 ? 0 : batches, &p->loader_next[index]);
}

/* Reads what tensor t will overwrite into t->backup. */
static ug_status back_up(pending_tensor *t, const ug_checkpoint *ck)
{
    t->backup = ug_malloc(t->entry->bytes ? t->entry->bytes : 1);
    if (!t->backup)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory keeping '%s' (%" PRIu64 " bytes)",
                            t->entry->name, t->entry->bytes);
    return t->param ? ug_model_read_param(ck->model, t->param, t->backup, t->entry->bytes)
                    : ug_tensor_download(t->target, t->backup, t->entry->bytes);
}

static ug_status write_tensor(const pending_tensor *t, ug_checkpoint *ck, const void *data)
{
    return t->param ? ug_model_write_param(ck->model, t->param, data, t->entry->bytes)
                    : ug_tensor_upload(t->target, data, t->entry->bytes);
}

/* Applies the checked plan. A write the device refuses part way (an upload
 * that fails) puts back what was already written from copies read first,
 * so that a failed load changes nothing here either. */
static ug_status apply_plan(load_plan *p, ug_checkpoint *ck)
{
    for (int i = 0; i < p->count; i++)
        UG_TRY(back_up(&p->tensors[i], ck));
    int64_t old_steps = ck->optimizer ? ug_optimizer_steps(ck->optimizer) : 0;
    ug_loss_scaler_state old_scaler = {0};
    if (p->has_scaler)
        UG_TRY(ug_optimizer_loss_scaler(ck->optimizer, &old_scaler));
    int written = 0;
    ug_status st = UG_OK;
    for (; written < p->count && st == UG_OK; written++)
        st = write_tensor(&p->tensors[written], ck, p->tensors[written].data);
    if (st == UG_OK && ck->optimizer)
        st = ug_optim_restore(ck->optimizer, p->steps, p->has_scaler ? &p->scaler : NULL);
    if (st != UG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ug_last_error());
        ug_status undo = UG_OK;
        for (int i = 0; i < written && undo == UG_OK; i++)
            undo = write_tensor(&p->tensors[i], ck, p->tensors[i].backup);
        if (undo == UG_OK && ck->optimizer)
            undo = ug_optim_restore(ck->optimizer, old_steps, p->has_scaler ? &old_scaler : NULL);
        return ug_set_error(st, "%s; %s", why,
                            undo == UG_OK ? "what was written is restored: nothing changed"
                                          : "restoring the previous state failed too: the parts are now a "
                                            "mixture, load a checkpoint again");
    }
    for (int i = 0; i < ck->graph_count; i++) {
        ug_graph *g = ck->graphs[i].graph;
        g->run.seed = p->graph_seed[i];
        g->checked_runs = p->graph_runs[i];
        UG_TRY(ug_graph_set_runs(g, p->graph_runs[i]));
    }
    for (int i = 0; i < ck->loader_count; i++) /* epoch -1: saved before its first epoch; checked, so it holds */
        UG_TRY(ug_loader_seek(ck->loaders[i].loader, p->loader_epoch[i], p->loader_next[i]));
    return UG_OK;
}

/* The file's strings other than the library's, for the checkpoint once
 * everything else is applied. */
static ug_status file_strings(const load_plan *p, ug_string_map *fresh)
{
    for (int i = 0; i < ug_st_metadata_count(p->file); i++) {
        const char *key = NULL, *value = NULL;
        ug_st_metadata_at(p->file, i, &key, &value);
        if (strncmp(key, "unigrad.", 8) != 0) {
            ug_status st = ug_strings_set(fresh, key, value);
            if (st != UG_OK) {
                ug_strings_clear(fresh);
                return st;
            }
        }
    }
    return UG_OK;
}

ug_status ug_checkpoint_load(ug_checkpoint *ck, const char *path)
{
    const char *op = "ug_checkpoint_load";
    if (!ck || !path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ck ? "path" : "checkpoint");
    for (int i = 0; i < ck->graph_count; i++)
        if (ck->graphs[i].graph->micro_batches)
            return ug_set_error(UG_ERR_STATE, "%s: graph '%s' holds accumulated micro-batches; apply them first",
                                op, ck->graphs[i].name);
    load_plan p = {0};
    ug_status st = ug_st_open(path, &p.file);
    /* Library state needs the library's metadata; a model alone loads from
     * any safetensors file of its tensors. */
    bool needs_format = ck->optimizer || ck->graph_count || ck->loader_count;
    if (st == UG_OK && needs_format) {
        const char *version = ug_st_metadata(p.file, FORMAT_KEY);
        if (!version || strcmp(version, FORMAT_VERSION))
            st = ug_set_error(UG_ERR_FORMAT, "%s: %s%s%s; expected a unigrad checkpoint (format %s)", path,
                              version ? "format version " : "no unigrad.format in the metadata",
                              version ? version : "", version ? " is not known" : "", FORMAT_VERSION);
    }
    if (st == UG_OK && ck->model)
        st = plan_model(&p, ck);
    if (st == UG_OK && ck->optimizer)
        st = plan_optimizer(&p, ck);
    if (st == UG_OK && ck->model) /* after the optimizer's type is checked: its message says more */
        st = check_unexpected(&p, ck);
    for (int i = 0; st == UG_OK && i < ck->graph_count; i++)
        st = plan_graph(&p, &ck->graphs[i], i);
    for (int i = 0; st == UG_OK && i < ck->loader_count; i++)
        st = plan_loader(&p, &ck->loaders[i], i);
    ug_string_map strings = {0};
    if (st == UG_OK)
        st = file_strings(&p, &strings);
    if (st == UG_OK)
        st = apply_plan(&p, ck);
    if (st == UG_OK) { /* the last step: nothing after it can fail */
        ug_strings_clear(&ck->strings);
        ck->strings = strings;
    } else {
        ug_strings_clear(&strings);
    }
    for (int i = 0; i < p.count; i++) {
        free(p.tensors[i].data);
        free(p.tensors[i].backup);
    }
    free(p.tensors);
    ug_st_close(p.file);
    return st == UG_OK ? st : ug_prefix_error(st, "%s", op);
}
