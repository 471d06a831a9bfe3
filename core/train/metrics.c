/* The metrics of a trainer's graph as sums kept on the device across runs
 * (ug_graph_accumulate), read once per epoch: the samples' losses, the
 * samples classified right (a token run: the tokens predicted right),
 * those whose label is among the k largest logits, the confusion matrix,
 * and the caller's own metrics; perplexity and bits per token from the
 * loss. Counts are f32 sums of whole numbers: exact up to 2^24 per entry. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/io/string_map.h"
#include "core/train/trainer_internal.h"

/* value [rows] as a column [rows, 1]. */
static ug_status column(ug_graph *g, ug_value *v, ug_value **out)
{
    const int64_t shape[2] = {ug_value_dim(v, 0), 1};
    return ug_g_reshape(g, v, 2, shape, out);
}

/* One-hot rows [rows, classes] of whole numbers ids [rows] (f32). */
static ug_status one_hot(trainer_graph *tg, ug_value *ids, ug_value **out)
{
    ug_value *col = NULL;
    UG_TRY(column(tg->graph, ids, &col));
    return ug_g_equal(tg->graph, col, tg->class_ids, out);
}

/* The input holding 0 .. classes-1, bound once. */
static ug_status add_class_ids(ug_trainer *t, trainer_graph *tg)
{
    const int64_t shape[2] = {1, tg->classes};
    UG_TRY(ug_graph_input(tg->graph, "class_ids", UG_F32, 2, shape, &tg->class_ids));
    float *ids = ug_malloc((size_t)tg->classes * sizeof *ids);
    if (!ids)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: the class numbers (%d)", (int)tg->classes);
    for (int32_t i = 0; i < tg->classes; i++)
        ids[i] = (float)i;
    ug_status st = ug_tensor_create(t->device, UG_F32, 2, shape, &tg->class_ids_tensor);
    if (st == UG_OK)
        st = ug_tensor_upload(tg->class_ids_tensor, ids, (size_t)tg->classes * sizeof *ids);
    free(ids);
    return st;
}

/* Samples whose label's logit has fewer than k logits above it (ties count
 * for the label). */
static ug_status add_top_k(ug_trainer *t, trainer_graph *tg, ug_value *logits, ug_value *labels_oh)
{
    ug_graph *g = tg->graph;
    ug_value *picked = NULL, *label_logit = NULL, *col = NULL, *higher = NULL, *same = NULL, *above = NULL,
             *count = NULL, *limit = NULL, *low = NULL, *hit = NULL, *hits = NULL;
    UG_TRY(ug_g_mul(g, logits, labels_oh, &picked));
    UG_TRY(ug_g_sum(g, picked, 1, false, &label_logit));
    UG_TRY(column(g, label_logit, &col));
    UG_TRY(ug_g_maximum(g, logits, col, &higher));
    UG_TRY(ug_g_equal(g, higher, col, &same)); /* 1 where the logit is not above the label's */
    UG_TRY(ug_g_scale_shift(g, same, -1.0f, 1.0f, &above));
    UG_TRY(ug_g_sum(g, above, 1, false, &count));
    UG_TRY(ug_g_scale_shift(g, count, 0.0f, (float)t->config.top_k - 0.5f, &limit));
    UG_TRY(ug_g_minimum(g, count, limit, &low));
    UG_TRY(ug_g_equal(g, low, count, &hit)); /* count < k */
    UG_TRY(ug_g_sum(g, hit, 0, true, &hits));
    return ug_graph_accumulate(g, hits, 1.0f, &tg->top_k_sum);
}

/* The build function's own metrics, checked, into tg. */
static ug_status take_metrics(trainer_graph *tg, const ug_trainer_outputs *o)
{
    if (o->metric_count < 0 || o->metric_count > UG_TRAINER_MAX_METRICS)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "trainer: the build function gave %d metrics; 0 to %d are "
                                                     "allowed", o->metric_count, UG_TRAINER_MAX_METRICS);
    for (int i = 0; i < o->metric_count; i++) {
        const ug_value *v = o->metrics[i];
        int64_t elements = 1;
        for (int d = 0; v && d < ug_value_ndim(v); d++)
            elements *= ug_value_dim(v, d);
        if (!v || !o->metric_names[i] || !o->metric_names[i][0] || elements != 1)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "trainer: metric %d (%s) needs a name and a value of "
                                                         "one element, the batch's sum (ug_g_sum over the rows)",
                                i, o->metric_names[i] ? o->metric_names[i] : "no name");
        tg->metric_names[i] = ug_string_copy(o->metric_names[i]);
        if (!tg->metric_names[i])
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: the name of metric %d", i);
        tg->metric_values[i] = o->metrics[i];
        tg->metric_count = i + 1;
    }
    return UG_OK;
}

ug_status trainer_add_metrics(ug_trainer *t, trainer_graph *tg, const ug_trainer_outputs *outputs,
                              bool evaluation)
{
    ug_graph *g = tg->graph;
    UG_TRY(take_metrics(tg, outputs));
    if (!trainer_holds_loss(t)) /* a stage before the last: the names only */
        return UG_OK;
    UG_TRY(ug_graph_accumulate_rows(g, tg->loss, &tg->loss_sum));
    for (int i = 0; i < tg->metric_count; i++) {
        ug_value *v = tg->metric_values[i];
        if (ug_value_dtype(v) != UG_F32)
            UG_TRY(ug_g_cast(g, v, UG_F32, &v));
        UG_TRY(ug_graph_accumulate(g, v, 1.0f, &tg->metric_sums[i]));
    }
    if (!tg->logits || t->target_width)
        return UG_OK;
    /* y's shape and a class axis: [rows, classes], or a token run's
     * [rows, block_size, vocab]. */
    const int label_axes = ug_value_ndim(tg->y);
    bool fits = ug_value_ndim(tg->logits) == label_axes + 1;
    for (int d = 0; fits && d < label_axes; d++)
        fits = ug_value_dim(tg->logits, d) == ug_value_dim(tg->y, d);
    if (!fits)
        return ug_set_error(UG_ERR_SHAPE, "trainer: the build function's logits must be %s",
                            label_axes == 1 ? "[rows, classes], one row per sample of x"
                                            : "[rows, block_size, vocab], one row per token of x");
    tg->classes = (int32_t)ug_value_dim(tg->logits, label_axes);
    ug_value *logits = tg->logits, *pred = NULL, *pred_f = NULL, *labels_f = NULL, *hits = NULL,
             *correct = NULL;
    if (ug_value_dtype(logits) != UG_F32) /* whole class numbers and ranks stay exact in f32 */
        UG_TRY(ug_g_cast(g, logits, UG_F32, &logits));
    UG_TRY(ug_g_argmax(g, logits, label_axes, &pred));
    UG_TRY(ug_g_cast(g, pred, UG_F32, &pred_f));
    UG_TRY(ug_g_cast(g, tg->y, UG_F32, &labels_f));
    UG_TRY(ug_g_equal(g, pred_f, labels_f, &hits));
    if (label_axes == 2) /* a row's tokens first, so the rows stay the leading axis */
        UG_TRY(ug_g_sum(g, hits, 1, false, &hits));
    UG_TRY(ug_g_sum(g, hits, 0, true, &correct));
    UG_TRY(ug_graph_accumulate(g, correct, 1.0f, &tg->correct_sum));
    if (!evaluation || (t->config.top_k <= 0 && !t->config.confusion))
        return UG_OK;
    UG_TRY(add_class_ids(t, tg));
    ug_value *labels_oh = NULL;
    UG_TRY(one_hot(tg, labels_f, &labels_oh));
    if (t->config.top_k > 0)
        UG_TRY(add_top_k(t, tg, logits, labels_oh));
    if (t->config.confusion) {
        ug_value *pred_oh = NULL, *matrix = NULL;
        UG_TRY(one_hot(tg, pred_f, &pred_oh));
        UG_TRY(ug_g_matmul(g, labels_oh, pred_oh, true, false, &matrix));
        UG_TRY(ug_graph_accumulate(g, matrix, 1.0f, &tg->confusion_sum));
    }
    return UG_OK;
}

static ug_status read_count(trainer_graph *tg, ug_value *sum, double *out)
{
    float v = 0.0f;
    UG_TRY(ug_graph_read(tg->graph, sum, &v, sizeof v));
    *out = v;
    return UG_OK;
}

/* The training sums of every rank (comm): samples, loss, correct and the
 * caller's metrics, summed over the ranks. */
static ug_status sum_over_ranks(ug_trainer *t, double *values, int count)
{
    float host[UG_TRAINER_MAX_METRICS + 3];
    for (int i = 0; i < count; i++)
        host[i] = (float)values[i];
    ug_tensor *sums = NULL;
    int64_t n = count;
    UG_TRY(ug_tensor_from_host(t->device, UG_F32, 1, &n, host, &sums));
    ug_status st = ug_comm_all_reduce(t->config.comm, sums, UG_COMM_SUM);
    if (st == UG_OK)
        st = ug_tensor_download(sums, host, (size_t)count * sizeof *host);
    ug_tensor_free(sums);
    for (int i = 0; st == UG_OK && i < count; i++)
        values[i] = host[i];
    return st;
}

/* Stages: the last stage's figures to every other stage (the numbers;
 * each keeps its own names). */
static ug_status share_from_last_stage(ug_trainer *t, trainer_graph *tg, ug_trainer_metrics *out)
{
    ug_comm *c = t->stage_comm;
    const int last = ug_comm_size(c) - 1;
    const size_t cells = out->confusion ? (size_t)out->classes * (size_t)out->classes : 0;
    if (ug_comm_rank(c) == last) {
        for (int r = 0; r < last; r++) {
            UG_TRY(c->engine->send(c, out, sizeof *out, r));
            if (cells) /* the confusion matrix after them */
                UG_TRY(c->engine->send(c, out->confusion, cells * sizeof *out->confusion, r));
        }
        return UG_OK;
    }
    size_t bytes = 0;
    UG_TRY(c->engine->recv(c, out, sizeof *out, last, &bytes));
    if (bytes != sizeof *out)
        return ug_set_error(UG_ERR_BACKEND, "trainer: the last stage sent %zu bytes of figures, not %zu", bytes,
                            sizeof *out);
    out->metric_names = (const char *const *)tg->metric_names;
    if (!out->confusion)
        return UG_OK;
    const size_t sent = (size_t)out->classes * (size_t)out->classes;
    out->confusion = NULL;
    int64_t *matrix = ug_realloc(t->confusion, (sent ? sent : 1) * sizeof *matrix);
    if (!matrix)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: the confusion matrix (%lld classes)",
                            (long long)out->classes);
    t->confusion = matrix;
    UG_TRY(c->engine->recv(c, matrix, sent * sizeof *matrix, last, &bytes));
    out->confusion = matrix;
    return UG_OK;
}

ug_status trainer_read_metrics(ug_trainer *t, trainer_graph *tg, int64_t samples, bool evaluation,
                               ug_trainer_metrics *out)
{
    memset(out, 0, sizeof *out);
    if (!trainer_holds_loss(t))
        return share_from_last_stage(t, tg, out);
    out->accuracy = out->top_k_accuracy = NAN;
    /* sums[0] samples, [1] loss, [2] correct, then the caller's metrics. */
    double sums[UG_TRAINER_MAX_METRICS + 3] = {(double)samples};
    UG_TRY(read_count(tg, tg->loss_sum, &sums[1]));
    if (tg->correct_sum)
        UG_TRY(read_count(tg, tg->correct_sum, &sums[2]));
    for (int i = 0; i < tg->metric_count; i++)
        UG_TRY(read_count(tg, tg->metric_sums[i], &sums[3 + i]));
    if (t->config.comm && !evaluation)
        UG_TRY(sum_over_ranks(t, sums, 3 + tg->metric_count));
    out->samples = (int64_t)sums[0];
    const double n = out->samples ? sums[0] : NAN;
    out->loss = sums[1] / n;
    out->metric_count = tg->metric_count;
    out->metric_names = (const char *const *)tg->metric_names;
    for (int i = 0; i < tg->metric_count; i++)
        out->metrics[i] = sums[3 + i] / n;
    double count = 0.0;
    if (tg->correct_sum)
        out->accuracy = sums[2] / (n * (double)tg->row_labels);
    out->perplexity = t->target_width ? NAN : exp(out->loss);
    out->bits_per_token = t->target_width ? NAN : out->loss / log(2.0);
    if (evaluation && tg->top_k_sum) {
        UG_TRY(read_count(tg, tg->top_k_sum, &count));
        out->top_k_accuracy = count / n;
    }
    if (evaluation && tg->confusion_sum) {
        const size_t cells = (size_t)tg->classes * (size_t)tg->classes;
        float *counts = ug_malloc(cells * sizeof *counts);
        int64_t *matrix = t->confusion ? t->confusion : ug_malloc(cells * sizeof *matrix);
        if (!counts || !matrix) {
            free(counts);
            if (matrix != t->confusion)
                free(matrix);
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "trainer: the confusion matrix (%d classes)",
                                (int)tg->classes);
        }
        ug_status st = ug_graph_read(tg->graph, tg->confusion_sum, counts, cells * sizeof *counts);
        for (size_t i = 0; st == UG_OK && i < cells; i++)
            matrix[i] = (int64_t)counts[i];
        free(counts);
        t->confusion = matrix;
        UG_TRY(st);
        out->classes = tg->classes;
        out->confusion = matrix;
    }
    if (t->stage_comm)
        UG_TRY(share_from_last_stage(t, tg, out));
    return ug_graph_clear_sums(tg->graph);
}
