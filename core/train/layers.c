/* Layers: parameters created in the model under the layer's name, plus the
 * ops that use them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/graph/internal.h"
#include "unigrad/nn.h"

static ug_status named_param(ug_graph *g, const char *layer, const char *suffix, int ndim,
                             const int64_t *shape, ug_init init, float bound, ug_value **out)
{
    char name[64];
    if (!layer || (size_t)snprintf(name, sizeof name, "%s.%s", layer, suffix) >= sizeof name)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "layer name '%s' is missing or too long (limit %zu)",
                            layer ? layer : "(null)", sizeof name - 8);
    ug_tensor *t = NULL;
    UG_TRY(ug_model_param(g->model, name, ndim, shape, init, bound, &t));
    return ug_graph_param(g, t, out);
}

ug_status ug_nn_linear(ug_graph *g, const char *name, ug_value *x, int64_t out_features, ug_value **out)
{
    return ug_nn_linear_with(g, name, x, out_features, NULL, out);
}

ug_status ug_nn_linear_with(ug_graph *g, const char *name, ug_value *x, int64_t out_features,
                            const ug_nn_layer_params *layer, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_linear"));
    const bool bias = !layer || !layer->without_bias;
    if (!x || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_linear: %s is NULL", x ? "out" : "x");
    if (x->ndim < 2 || out_features <= 0) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE, "ug_nn_linear '%s': x is %s and out_features %lld; x must be [..., in] "
                            "with a leading axis of rows, and out_features positive",
                            name ? name : "", ug_format_shape(x->ndim, x->shape, s, sizeof s), (long long)out_features);
    }
    int64_t in_features = x->shape[x->ndim - 1];
    /* nn.Linear: kaiming_uniform(a = sqrt 5) gives bound 1/sqrt(fan_in); the bias uses the same bound. */
    float bound = in_features > 0 ? 1.0f / sqrtf((float)in_features) : 0.0f;
    int64_t wshape[2] = {out_features, in_features};
    /* N-D x runs as one product over its rows [x.numel / in, in] (one GEMM,
     * not a batch of small ones), reshaped back to [..., out]. */
    int64_t flat[2] = {-1, in_features}, shape[UG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = out_features;
    ug_value *w = NULL, *b = NULL, *xw = NULL, *rows = x, *y = NULL;
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = named_param(g, name, "weight", 2, wshape, UG_INIT_UNIFORM, bound, &w);
    if (st == UG_OK && bias)
        st = named_param(g, name, "bias", 1, &out_features, UG_INIT_UNIFORM, bound, &b);
    if (st == UG_OK && x->ndim > 2)
        st = ug_g_reshape(g, x, 2, flat, &rows);
    if (st == UG_OK)
        st = ug_g_matmul(g, rows, w, false, true, &xw);
    y = xw;
    if (st == UG_OK && bias)
        st = ug_g_add(g, xw, b, &y);
    if (st == UG_OK && x->ndim > 2)
        st = ug_g_reshape(g, y, x->ndim, shape, &y);
    if (st == UG_OK)
        *out = y;
    else
        ug_graph_rollback(g, mark);
    return st;
}

/* A normalisation over the last axis with its named parameters: weight
 * (ones) unless without_weight, bias (zeros) for a layer norm unless
 * without_bias; all taken back when the op refuses. */
static ug_status norm_layer(ug_graph *g, const char *api, const char *name, bool rms, ug_value *x, float eps,
                            const ug_nn_norm_params *params, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, api));
    if (!x || !out || x->ndim < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: x must have at least one axis and out not be NULL", api);
    const bool weighted = !(params && params->without_weight);
    const bool biased = !rms && weighted && !(params && params->without_bias);
    int64_t cols = x->shape[x->ndim - 1];
    ug_value *gamma = NULL, *beta = NULL;
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = UG_OK;
    if (weighted)
        st = named_param(g, name, "weight", 1, &cols, UG_INIT_CONSTANT, 1.0f, &gamma);
    if (st == UG_OK && biased)
        st = named_param(g, name, "bias", 1, &cols, UG_INIT_CONSTANT, 0.0f, &beta);
    if (st == UG_OK)
        st = rms ? ug_g_rmsnorm(g, x, gamma, eps, out) : ug_g_layernorm(g, x, gamma, beta, eps, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

ug_status ug_nn_layernorm(ug_graph *g, const char *name, ug_value *x, float eps, ug_value **out)
{
    return norm_layer(g, "ug_nn_layernorm", name, false, x, eps, NULL, out);
}

ug_status ug_nn_layernorm_with(ug_graph *g, const char *name, ug_value *x, float eps,
                               const ug_nn_norm_params *params, ug_value **out)
{
    return norm_layer(g, "ug_nn_layernorm_with", name, false, x, eps, params, out);
}

ug_status ug_nn_rmsnorm(ug_graph *g, const char *name, ug_value *x, float eps, ug_value **out)
{
    return norm_layer(g, "ug_nn_rmsnorm", name, true, x, eps, NULL, out);
}

ug_status ug_nn_embedding(ug_graph *g, const char *name, ug_value *index, int64_t vocab, int64_t dim,
                          float init_std, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_embedding"));
    if (!index || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_embedding: %s is NULL", index ? "out" : "index");
    if (vocab <= 0 || dim <= 0 || !(init_std >= 0.0f) || init_std > 1e30f)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_nn_embedding '%s': vocab %lld, dim %lld, init_std %g; sizes must be positive "
                            "and the deviation finite and not negative",
                            name ? name : "", (long long)vocab, (long long)dim, (double)init_std);
    int64_t shape[2] = {vocab, dim};
    ug_value *table = NULL;
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = named_param(g, name, "weight", 2, shape, UG_INIT_NORMAL, init_std, &table);
    if (st == UG_OK)
        st = ug_g_take(g, table, index, 0, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

ug_status ug_nn_flatten(ug_graph *g, ug_value *x, ug_value **out)
{
    if (!x)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_flatten: x is NULL");
    if (x->ndim < 1)
        return ug_set_error(UG_ERR_SHAPE, "ug_nn_flatten: x needs a first (batch) axis");
    int64_t shape[2] = {x->shape[0], ug_shape_numel(x->ndim - 1, x->shape + 1)};
    return ug_g_reshape(g, x, 2, shape, out);
}

ug_status ug_nn_conv2d(ug_graph *g, const char *name, ug_value *x, int64_t out_channels,
                       int kernel_h, int kernel_w, const ug_conv2d_params *params, ug_value **out)
{
    return ug_nn_conv2d_with(g, name, x, out_channels, kernel_h, kernel_w, params, NULL, out);
}

ug_status ug_nn_conv2d_with(ug_graph *g, const char *name, ug_value *x, int64_t out_channels, int kernel_h,
                            int kernel_w, const ug_conv2d_params *params, const ug_nn_layer_params *layer,
                            ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_conv2d"));
    if (!x || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_conv2d: %s is NULL", x ? "out" : "x");
    int groups = params && params->groups ? params->groups : 1;
    if (x->ndim != 4 || out_channels <= 0 || kernel_h < 1 || kernel_w < 1 || groups < 1 ||
        x->shape[1] % groups != 0 || out_channels % groups != 0) {
        char s[96];
        return ug_set_error(UG_ERR_SHAPE,
                            "ug_nn_conv2d '%s': x is %s, %lld output channels, kernel %dx%d, %d "
                            "group(s); x must be [N, C, H, W], the sizes positive and the channels "
                            "divisible by the groups",
                            name ? name : "", ug_format_shape(x->ndim, x->shape, s, sizeof s),
                            (long long)out_channels, kernel_h, kernel_w, groups);
    }
    int64_t in_per_group = x->shape[1] / groups;
    /* nn.Conv2d: kaiming_uniform(a = sqrt 5) gives bound 1/sqrt(fan_in); the bias uses the same. */
    double fan_in = (double)in_per_group * kernel_h * kernel_w; /* a shape's product may overflow int64 */
    float bound = (float)(1.0 / sqrt(fan_in));
    int64_t wshape[4] = {out_channels, in_per_group, kernel_h, kernel_w};
    ug_value *w = NULL, *b = NULL;
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = named_param(g, name, "weight", 4, wshape, UG_INIT_UNIFORM, bound, &w);
    if (st == UG_OK && !(layer && layer->without_bias))
        st = named_param(g, name, "bias", 1, &out_channels, UG_INIT_UNIFORM, bound, &b);
    if (st == UG_OK)
        st = ug_g_conv2d(g, x, w, b, params, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}

ug_status ug_nn_conv_bn(ug_graph *g, const char *name, ug_value *x, int64_t out_channels, int kernel,
                        const ug_conv2d_params *params, ug_nn_activation activation, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_conv_bn"));
    if (!out || (unsigned)activation > UG_NN_RELU6)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_conv_bn '%s': %s", name ? name : "",
                            out ? "activation is not a ug_nn_activation" : "out is NULL");
    char conv[64], norm[64];
    if (!name || (size_t)snprintf(conv, sizeof conv, "%s.conv", name) >= sizeof conv ||
        (size_t)snprintf(norm, sizeof norm, "%s.bn", name) >= sizeof norm)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_nn_conv_bn: layer name '%s' is missing or too long",
                            name ? name : "(null)");
    ug_conv2d_params p = params ? *params : (ug_conv2d_params){0};
    if (p.padding[0] == 0 && p.padding[1] == 0)
        p.padding[0] = p.padding[1] = kernel / 2;
    const ug_nn_layer_params no_bias = {.without_bias = true};
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_value *h = NULL;
    ug_status st = ug_nn_conv2d_with(g, conv, x, out_channels, kernel, kernel, &p, &no_bias, &h);
    if (st == UG_OK)
        st = ug_nn_batch_norm(g, norm, h, &h);
    if (st == UG_OK && activation == UG_NN_RELU)
        st = ug_g_relu(g, h, &h);
    else if (st == UG_OK && activation == UG_NN_RELU6)
        st = ug_g_relu6(g, h, &h);
    if (st == UG_OK)
        *out = h;
    else
        ug_graph_rollback(g, mark);
    return st;
}

ug_status ug_nn_batch_norm(ug_graph *g, const char *name, ug_value *x, ug_value **out)
{
    UG_TRY(ug_graph_check_open(g, "ug_nn_batch_norm"));
    if (!x || !out || x->ndim < 2)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT,
                            "ug_nn_batch_norm: x must be [N, C] or [N, C, H, W] and out not NULL");
    int64_t c = x->shape[1];
    ug_value *weight = NULL, *bias = NULL, *mean = NULL, *var = NULL;
    ug_graph_mark mark = ug_graph_mark_now(g);
    ug_status st = named_param(g, name, "weight", 1, &c, UG_INIT_CONSTANT, 1.0f, &weight);
    if (st == UG_OK)
        st = named_param(g, name, "bias", 1, &c, UG_INIT_CONSTANT, 0.0f, &bias);
    if (st == UG_OK)
        st = named_param(g, name, "running_mean", 1, &c, UG_INIT_CONSTANT, 0.0f, &mean);
    if (st == UG_OK)
        st = named_param(g, name, "running_var", 1, &c, UG_INIT_CONSTANT, 1.0f, &var);
    if (st == UG_OK)
        st = ug_g_batch_norm(g, x, weight, bias, mean, var, 0.1f, 1e-5f, out);
    if (st != UG_OK)
        ug_graph_rollback(g, mark);
    return st;
}
