/* Models: named parameters on one device, initialised reproducibly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/model/internal.h"
#include "unigrad/ops.h"

typedef struct model_param {
    char name[64];
    ug_tensor *tensor;
    ug_tensor *half_copy;      /* for mixed-precision graphs, or NULL */
} model_param;

struct ug_model {
    int refs;                  /* the program's handle plus graphs and optimizers (atomic) */
    ug_device *device;
    uint64_t seed;
    model_param *params;
    int count, capacity;
    int dropped;               /* parameters dropped (ug_model_drop_last): their counters stay taken */
    /* Their names, to say where such a parameter went when it is looked up. */
    char (*elsewhere)[64];
    int elsewhere_count, elsewhere_capacity;
};

/* Each parameter draws from its own counter range so that creating
 * parameters in the same order gives the same values on every device. */
static const uint64_t PARAM_COUNTER_STRIDE = 1ull << 40;

ug_status ug_model_create(ug_device *device, uint64_t seed, ug_model **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_create: out is NULL");
    *out = NULL;
    if (!device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_create: device is NULL");
    ug_model *m = ug_calloc(1, sizeof *m);
    if (!m)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_model_create: out of host memory");
    ug_device_retain(device);
    m->refs = 1;
    m->device = device;
    m->seed = seed;
    *out = m;
    return UG_OK;
}

void ug_model_retain(ug_model *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED); }

void ug_model_free(ug_model *m)
{
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; i < m->count; i++) {
        ug_tensor_free(m->params[i].tensor);
        ug_tensor_free(m->params[i].half_copy);
    }
    free(m->params);
    free(m->elsewhere);
    ug_device_close(m->device);
    free(m);
}

void ug_model_truncate(ug_model *m, int count)
{
    while (m->count > count) {
        model_param *p = &m->params[--m->count];
        ug_tensor_free(p->tensor);
        ug_tensor_free(p->half_copy);
        p->half_copy = NULL;
    }
}

void ug_model_drop_last(ug_model *m, int count)
{
    for (int i = count; i < m->count; i++) {
        bool known = false;
        for (int k = 0; k < m->elsewhere_count && !known; k++)
            known = !strcmp(m->elsewhere[k], m->params[i].name);
        if (!known && m->elsewhere_count == m->elsewhere_capacity) { /* without room: a plainer message */
            const int capacity = m->elsewhere_capacity ? 2 * m->elsewhere_capacity : 16;
            char(*grown)[64] = ug_realloc(m->elsewhere, (size_t)capacity * sizeof *grown);
            if (!grown)
                break;
            m->elsewhere = grown;
            m->elsewhere_capacity = capacity;
        }
        if (!known)
            snprintf(m->elsewhere[m->elsewhere_count++], sizeof m->elsewhere[0], "%s", m->params[i].name);
    }
    if (m->count > count)
        m->dropped += m->count - count;
    ug_model_truncate(m, count);
}

ug_status ug_model_copy(const ug_model *m, ug_device *device, ug_model **out)
{
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_copy: out is NULL");
    *out = NULL;
    if (!m || !device)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_copy: %s is NULL", m ? "device" : "model");
    ug_model *copy = NULL;
    UG_TRY(ug_model_create(device, m->seed, &copy));
    ug_status st = UG_OK;
    for (int i = 0; i < m->count && st == UG_OK; i++) {
        const ug_tensor *src = m->params[i].tensor;
        ug_tensor *dst = NULL;
        st = ug_model_param(copy, m->params[i].name, src->ndim, src->shape, UG_INIT_CONSTANT, 0.0f, &dst);
        if (st == UG_OK)
            st = ug_tensor_copy(dst, src);
    }
    if (st != UG_OK) {
        ug_model_free(copy);
        return ug_prefix_error(st, "ug_model_copy to %s", ug_device_name(device));
    }
    *out = copy;
    return UG_OK;
}

ug_device *ug_model_device(const ug_model *m) { return m ? m->device : NULL; }
int ug_model_param_count(const ug_model *m) { return m ? m->count : 0; }

int ug_model_param_index(const ug_model *m, const ug_tensor *param)
{
    for (int i = 0; i < m->count; i++)
        if (m->params[i].tensor == param)
            return i;
    return -1;
}

ug_status ug_model_param_at(const ug_model *m, int index, const char **name, ug_tensor **tensor)
{
    if (!m)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_param_at: model is NULL");
    if (index < 0 || index >= m->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_model_param_at: index %d out of range (the model has %d parameters)",
                            index, m->count);
    if (name)
        *name = m->params[index].name;
    if (tensor)
        *tensor = m->params[index].tensor;
    return UG_OK;
}

static int find(const ug_model *m, const char *name)
{
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return i;
    return -1;
}

static ug_status not_found(const ug_model *m, const char *op, const char *name)
{
    for (int k = 0; k < m->elsewhere_count; k++)
        if (!strcmp(m->elsewhere[k], name))
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: '%s' is another pipeline stage's (the stage whose "
                                "ops made it); a parameter two stages use (a tied embedding and head) is not "
                                "supported: give this stage a parameter of its own", op, name);
    char names[1024] = "";
    size_t used = 0;
    for (int i = 0; i < m->count && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                 m->params[i].name);
    return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: no parameter named '%s' (the model has: %s)",
                        op, name, m->count ? names : "none");
}

ug_status ug_model_find_param(const ug_model *m, const char *name, ug_tensor **tensor)
{
    if (!m || !name || !tensor)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_find_param: NULL argument");
    int i = find(m, name);
    if (i < 0)
        return not_found(m, "ug_model_find_param", name);
    *tensor = m->params[i].tensor;
    return UG_OK;
}

ug_status ug_model_read_param(const ug_model *m, const char *name, float *data, size_t bytes)
{
    ug_tensor *t = NULL;
    UG_TRY(ug_model_find_param(m, name, &t));
    return ug_tensor_download(t, data, bytes);
}

ug_status ug_model_write_param(ug_model *m, const char *name, const float *data, size_t bytes)
{
    ug_tensor *t = NULL;
    UG_TRY(ug_model_find_param(m, name, &t));
    UG_TRY(ug_tensor_upload(t, data, bytes));
    ug_tensor *copy = m->params[find(m, name)].half_copy;
    return copy ? ug_launch_unary("ug_model_write_param", UG_UNARY_COPY, 1.0f, 0.0f, copy, t) : UG_OK;
}

ug_status ug_model_half_copy(ug_model *m, int index, ug_dtype dtype, ug_tensor **out)
{
    if (index < 0 || index >= m->count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "half copy: no parameter %d", index);
    model_param *p = &m->params[index];
    if (!p->half_copy) {
        for (int i = 0; i < m->count; i++)
            if (m->params[i].half_copy && m->params[i].half_copy->dtype != dtype)
                return ug_set_error(UG_ERR_DTYPE,
                                    "'%s': the model keeps %s copies of its parameters for "
                                    "another graph; a model's mixed-precision graphs share one "
                                    "half dtype (asked for %s)",
                                    p->name, ug_dtype_name(m->params[i].half_copy->dtype),
                                    ug_dtype_name(dtype));
        UG_TRY(ug_cast(p->tensor, dtype, &p->half_copy));
    } else if (p->half_copy->dtype != dtype) {
        return ug_set_error(UG_ERR_DTYPE,
                            "'%s': the model keeps a %s copy for another graph; a model's "
                            "mixed-precision graphs share one half dtype (asked for %s)",
                            p->name, ug_dtype_name(p->half_copy->dtype), ug_dtype_name(dtype));
    }
    *out = p->half_copy;
    return UG_OK;
}

ug_tensor *ug_model_half_copy_at(const ug_model *m, int index)
{
    return index >= 0 && index < m->count ? m->params[index].half_copy : NULL;
}

ug_status ug_model_param(ug_model *m, const char *name, int ndim, const int64_t *shape,
                         ug_init init, float bound, ug_tensor **out)
{
    if (!m || !name || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_param: %s is NULL",
                            !m ? "model" : !name ? "name" : "out");
    *out = NULL;
    if (ndim < 0 || ndim > UG_MAX_DIMS || (ndim > 0 && !shape))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_model_param: '%s' with %d axes and %s shape; give 0 to %d axes and their sizes",
                            name, ndim, shape ? "a" : "a NULL", UG_MAX_DIMS);
    if (!isfinite(bound))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_param: '%s': bound %g must be finite", name,
                            (double)bound);
    if (!*name || strlen(name) >= sizeof m->params[0].name)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_model_param: name '%s' must have 1 to %zu characters", name,
                            sizeof m->params[0].name - 1);
    int i = find(m, name);
    char want[96], have[96];
    if (i >= 0) {
        ug_tensor *t = m->params[i].tensor;
        if (t->ndim != ndim || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0)
            return ug_set_error(UG_ERR_SHAPE, "ug_model_param: '%s' exists with shape %s, asked for %s",
                                name, ug_format_shape(t->ndim, t->shape, have, sizeof have),
                                ug_format_shape(ndim, shape, want, sizeof want));
        *out = t;
        return UG_OK;
    }
    if (init != UG_INIT_UNIFORM && init != UG_INIT_CONSTANT && init != UG_INIT_NORMAL)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_model_param: init %d is not a ug_init", (int)init);
    if (m->count == m->capacity) {
        int capacity = m->capacity ? m->capacity * 2 : 16;
        model_param *grown = ug_realloc(m->params, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_model_param: out of host memory");
        m->params = grown;
        m->capacity = capacity;
    }
    ug_tensor *t = NULL;
    UG_TRY(ug_tensor_new(m->device, UG_F32, ndim, shape, name, &t));
    const uint64_t counter = (uint64_t)(m->count + m->dropped) * PARAM_COUNTER_STRIDE;
    ug_status st = init == UG_INIT_UNIFORM  ? ug_random_uniform(t, m->seed, counter, -bound, bound)
                   : init == UG_INIT_NORMAL ? ug_random_normal(t, m->seed, counter, 0.0f, fabsf(bound))
                                            : ug_fill(t, bound);
    if (st != UG_OK) {
        ug_tensor_free(t);
        return st;
    }
    model_param *p = &m->params[m->count++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->tensor = t;
    p->half_copy = NULL;
    *out = t;
    return UG_OK;
}
