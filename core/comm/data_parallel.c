/* Data-parallel training on a communicator (comm.h): the replicas' models
 * made one (rank 0's parameters, after checking that every rank has the
 * same ones), and the accumulated gradients summed over the ranks.
 *
 * Before an update's gradients are summed, the ranks sum their rows, and
 * each weights its micro-batches' gradients by their share of all the
 * rows (graph/run.c's ug_graph_weigh_gradients): the sum is then the
 * global batch's mean gradient, the update one device would make on it,
 * however unevenly the batch is split. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/mix64.h"
#include "core/comm/internal.h"
#include "core/graph/internal.h"
#include "core/model/internal.h"

/* A 64-bit hash as four floats holding 16 bits each, which f32 carries
 * exactly through any engine. */
static void as_floats(uint64_t h, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = (float)((h >> (16 * i)) & 0xFFFF);
}

static uint64_t hash_text(uint64_t h, const char *text)
{
    for (const char *c = text; *c; c++)
        h = ug_mix64(h ^ (unsigned char)*c);
    return h;
}

/* A parameter's name and shape, as four floats. */
static void signature(const char *name, const ug_tensor *t, float out[4])
{
    uint64_t h = ug_mix64(hash_text(0x9E3779B97F4A7C15ull, name) ^ (uint64_t)ug_tensor_ndim(t));
    for (int d = 0; d < ug_tensor_ndim(t); d++)
        h = ug_mix64(h ^ (uint64_t)ug_tensor_dim(t, d));
    as_floats(h, out);
}

ug_status ug_comm_check_models(ug_comm *c, ug_model *model, const char *op)
{
    const int n = ug_model_param_count(model);
    float count = (float)n, *counts = ug_calloc((size_t)c->size, sizeof *counts);
    if (!counts)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    ug_status st = c->engine->all_gather(c, &count, 1, counts);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        if (counts[r] != counts[0])
            st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                              "%s: rank %d's model has %.0f parameters, rank 0's %.0f; every rank must build the "
                              "same model", op, r, (double)counts[r], (double)counts[0]);
    free(counts);
    UG_TRY(st);
    float *mine = ug_calloc((size_t)n * 4 + 1, sizeof *mine), *all = ug_calloc((size_t)n * 4 * (size_t)c->size + 1,
                                                                             sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, &name, &t);
        signature(name, t, mine + 4 * i);
    }
    st = c->engine->all_gather(c, mine, (size_t)n * 4, all);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        for (int i = 0; i < n && st == UG_OK; i++)
            if (memcmp(all + ((size_t)r * (size_t)n + (size_t)i) * 4, all + (size_t)i * 4, 4 * sizeof(float))) {
                const char *name = NULL;
                ug_model_param_at(model, i, &name, NULL);
                st = ug_set_error(UG_ERR_INVALID_ARGUMENT,
                                  "%s: parameter %d (%s on rank %d) has another name or shape on rank %d than on "
                                  "rank 0; every rank must build the same model", op, i, name, c->rank, r);
            }
    free(mine);
    free(all);
    return st;
}

ug_status ug_comm_broadcast_model(ug_comm *c, ug_model *model)
{
    const char *op = "ug_comm_broadcast_model";
    if (!c || !model)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "model" : "comm");
    UG_TRY(ug_comm_check_models(c, model, op));
    return ug_comm_take_rank0_params(c, model, op);
}

bool ug_comm_ranks_differ(ug_comm *c, const char *text)
{
    /* Each rank's text as a signature; any difference counts. */
    float mine[4], *all = ug_calloc((size_t)c->size * 4, sizeof *all);
    as_floats(hash_text(0x9E3779B97F4A7C15ull, text), mine);
    bool mixed = true; /* when it cannot be told: the safe answer for both callers */
    if (all && c->engine->all_gather(c, mine, 4, all) == UG_OK) {
        mixed = false;
        for (int r = 1; r < c->size; r++)
            mixed |= memcmp(all, all + 4 * r, 4 * sizeof(float)) != 0;
    }
    free(all);
    return mixed;
}

ug_status ug_comm_check_same(ug_comm *c, int count, const char *const *names, const char *const *texts,
                             const char *op)
{
    /* The texts themselves, a byte a float (exact through any engine),
     * so that every rank can name both values. */
    enum { W = UG_COMM_FIELD_TEXT };
    const size_t per_rank = (size_t)count * W;
    float *all = ug_calloc(((size_t)c->size + 1) * per_rank + 1, sizeof *all), *mine = all + (size_t)c->size * per_rank;
    if (!all)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int f = 0; f < count; f++)
        for (size_t i = 0; i < W - 1 && texts[f][i]; i++)
            mine[(size_t)f * W + i] = (float)(unsigned char)texts[f][i];
    ug_status st = c->engine->all_gather(c, mine, per_rank, all);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        for (int f = 0; f < count && st == UG_OK; f++) {
            const float *first = all + (size_t)f * W, *other = all + (size_t)r * per_rank + (size_t)f * W;
            if (!memcmp(first, other, W * sizeof *first))
                continue;
            char a[W], b[W];
            for (size_t i = 0; i < W; i++) {
                a[i] = (char)(unsigned char)first[i];
                b[i] = (char)(unsigned char)other[i];
            }
            st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: rank %d's %s is %s, rank 0's %s; the replicas of one "
                              "run must agree on every setting (give each rank the same options)",
                              op, r, names[f], b, a);
        }
    free(all);
    return st;
}

ug_status ug_comm_take_rank0_params(ug_comm *c, ug_model *model, const char *op)
{
    for (int i = 0; i < ug_model_param_count(model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        UG_TRY(ug_model_param_at(model, i, &name, &t));
        size_t n = (size_t)ug_tensor_numel(t);
        float *host = ug_malloc((n ? n : 1) * sizeof *host);
        if (!host)
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory for %s", op, name);
        ug_status st = c->rank == 0 ? ug_model_read_param(model, name, host, n * sizeof *host) : UG_OK;
        if (st != UG_OK)
            c->engine->fail(c, ug_last_error());
        if (st == UG_OK)
            st = c->engine->broadcast(c, host, n, 0);
        /* Written through the model, so its half copies follow. */
        if (st == UG_OK && c->rank != 0)
            st = ug_model_write_param(model, name, host, n * sizeof *host);
        free(host);
        UG_TRY(st);
    }
    return UG_OK;
}

/* ---- gradient buckets, reduced after backward or overlapped with it ---- */

/* The events and timings of the buckets of the graph last reduced. */
struct comm_data_parallel {
    const ug_graph *graph;
    uint64_t layout;          /* of its accumulators (a graph at a freed one's address has another) */
    int count;                /* buckets */
    ug_event **ready;         /* per bucket: backward has finished it */
    comm_timing *timing;      /* per bucket: its last all-reduce */
    /* Per part (ready_order's p): where it lies in its bucket, and its
     * elements, for a bucket's reduce-scatter. */
    int64_t *part_offset, *part_length;
    bool scatter;             /* this update's buckets reduce-scattered (reduce_bucket) */
    double backward_end;      /* when the last overlapped backward finished (0: not overlapped) */
    double compute_seconds;   /* the last ug_comm_run_backward's forward and backward, on the device */
    bool reduce_inline;       /* each bucket reduced on the compute's thread (side_thread_helps) */
};

void ug_comm_data_parallel_free(ug_comm *c)
{
    comm_data_parallel *dp = c->data_parallel;
    if (!dp)
        return;
    for (int b = 0; b < dp->count; b++)
        ug_event_free(dp->ready[b]);
    free(dp->ready);
    free(dp->timing);
    free(dp->part_offset);
    free(dp->part_length);
    free(dp);
    c->data_parallel = NULL;
}

/* Every rank's world size and optimizer against rank 0's, before the
 * first reduction; the same verdict on every rank, naming what differs. */
static ug_status check_setup(ug_comm *c, const ug_graph *g, const char *op)
{
    static const char *const fields[] = {"world size", "optimizer", "learning rate", "weight decay",
                                         "momentum", "beta1", "beta2", "eps", "schedule",
                                         "gradient clipping", "loss scaling", "buckets", "parameter groups",
                                         "groups' weight decays and rates (a digest)"};
    enum { FIELDS = sizeof fields / sizeof fields[0] };
    ug_optimizer_config oc = {0};
    const bool has = g->optimizer != NULL;
    if (has)
        oc = ug_optimizer_get_config(g->optimizer);
    float groups = 0.0f; /* each group's settings weighed by its place, so a swap shows */
    for (int i = 0; i < oc.group_count; i++)
        groups += (float)(i + 1) * (3.0f * oc.groups[i].weight_decay + 5.0f * oc.groups[i].lr_scale);
    float mine[FIELDS] = {(float)c->size, has ? (float)oc.type : -1.0f, oc.lr, oc.weight_decay, oc.momentum,
                          oc.beta1, oc.beta2, oc.eps, (float)oc.schedule, oc.max_grad_norm,
                          oc.loss_scaling.enabled ? 1.0f : 0.0f, (float)g->bucket_count, (float)oc.group_count,
                          groups};
    float *all = ug_calloc((size_t)c->size * FIELDS, sizeof *all);
    if (!all)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    ug_status st = c->engine->all_gather(c, mine, FIELDS, all);
    for (int r = 1; st == UG_OK && r < c->size; r++)
        for (int f = 0; f < FIELDS && st == UG_OK; f++)
            if (memcmp(&all[r * FIELDS + f], &all[f], sizeof(float)))
                st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: rank %d's %s (%g) is not rank 0's (%g); every rank "
                                  "must train the same model with the same optimizer in one world", op, r,
                                  fields[f], (double)all[r * FIELDS + f], (double)all[f]);
    free(all);
    return st;
}

/* Whether the replica computes on the CPU backend, its facts in info. */
static bool on_cpu(const ug_comm *c, ug_device_info *info)
{
    return ug_device_get_info(c->device, info) == UG_OK && !strcmp(info->backend, "cpu");
}

/* Whether the communication thread could reduce beside the compute. Not
 * where the CPU backend computes with as many threads as the process may
 * use cores (a rank that mpirun bound to one core, UG_NUM_THREADS=1): the
 * thread would only take turns with the compute, and cost it more than it
 * hides (2 ranks on 2 cores: x1.25 of one rank's step, against x1.19
 * reducing each bucket on the compute's thread as backward finishes it). */
static bool side_thread_helps(const ug_comm *c)
{
    ug_device_info info;
    if (!on_cpu(c, &info))
        return true;
    cpu_set_t allowed;
    return sched_getaffinity(0, sizeof allowed, &allowed) == 0 && (uint32_t)CPU_COUNT(&allowed) > info.compute_units;
}

static ug_status bucket_memory(void *ctx, size_t bytes, ug_storage **out)
{
    ug_comm *c = ctx;
    return c->engine->bucket_memory(c, bytes, out);
}

/* The graph's buckets, made again in memory the engine reduces where it
 * lies, when it has some for this device and every rank can (none holds
 * accumulated micro-batches): a CPU replica's all-reduce then copies
 * nothing (mpi_shared.c). */
static ug_status make_buckets(ug_comm *c, ug_graph *g)
{
    ug_device_info info;
    float cannot = !c->engine->bucket_memory || g->micro_batches || !on_cpu(c, &info);
    if (c->engine->bucket_memory) /* (the same engine on every rank) */
        UG_TRY(c->engine->all_reduce(c, &cannot, 1, UG_COMM_SUM));
    if (cannot > 0.0f)
        return g->accumulated ? UG_OK : ug_graph_make_accumulators(g, NULL, NULL);
    ug_graph_free_accumulators(g);
    return ug_graph_make_accumulators(g, bucket_memory, c);
}

/* The graph's accumulators, and this rank's state for its buckets. */
static ug_status prepare(ug_comm *c, ug_graph *g, const char *op)
{
    if (!g->compiled || !g->has_backward)
        return ug_set_error(UG_ERR_STATE, "%s: the graph is not compiled with a backward pass", op);
    comm_data_parallel *dp = c->data_parallel;
    if (dp && dp->graph == g && dp->layout == g->layout && g->accumulated)
        return UG_OK;
    UG_TRY(make_buckets(c, g));
    ug_comm_data_parallel_free(c);
    dp = ug_calloc(1, sizeof *dp);
    if (!dp)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    c->data_parallel = dp;
    dp->graph = g;
    dp->layout = g->layout;
    dp->reduce_inline = !side_thread_helps(c);
    dp->ready = ug_calloc((size_t)g->bucket_count + 1, sizeof *dp->ready);
    dp->timing = ug_calloc((size_t)g->bucket_count + 1, sizeof *dp->timing);
    dp->part_offset = ug_calloc((size_t)g->accumulated_count + 1, sizeof *dp->part_offset);
    dp->part_length = ug_calloc((size_t)g->accumulated_count + 1, sizeof *dp->part_length);
    if (!dp->ready || !dp->timing || !dp->part_offset || !dp->part_length)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int b = 0; b < g->bucket_count; b++)
        for (int p = g->buckets[b].begin; p < g->buckets[b].end; p++) {
            const ug_tensor *part = g->accumulated[g->ready_order[p]];
            dp->part_offset[p] = part->offset - g->buckets[b].flat->offset;
            dp->part_length[p] = ug_tensor_numel(part);
        }
    for (; dp->count < g->bucket_count; dp->count++)
        UG_TRY(ug_event_create(c->device, false, &dp->ready[dp->count]));
    return check_setup(c, g, op);
}

/* Every rank's verdict: a failure here breaks the group, so that the
 * others do not wait for this rank's collectives. */
static ug_status failing(ug_comm *c, ug_status st)
{
    if (st != UG_OK)
        c->engine->fail(c, ug_last_error());
    return st;
}

/* The rows of the ranks' batch, summed before their gradients are: each
 * rank weights its micro-batches by their share of them, so that the sum
 * of the buckets is the batch's mean gradient, with no pass after it.
 * rows: those this rank is about to run, besides those accumulated. */
static ug_status weigh_by_all_rows(ug_comm *c, ug_graph *g, int64_t rows, float *total, const char *op)
{
    *total = (float)((g->micro_batches ? g->accumulated_rows : 0) + rows);
    UG_TRY(c->engine->all_reduce(c, total, 1, UG_COMM_SUM));
    if (*total < 1.0f)
        return ug_set_error(UG_ERR_STATE, "%s: no rank ran a micro-batch (ug_graph_run_backward) since the last "
                            "update", op);
    return failing(c, ug_graph_weigh_gradients(g, *total, op));
}

/* After the buckets: batch norm's statistics made rank 0's, and the
 * update told of every rank's rows. */
static ug_status finish(ug_comm *c, ug_graph *g, float total)
{
    /* Parameters the graph does not train but its forward pass updates
     * (batch norm's running statistics) take rank 0's values, as
     * DistributedDataParallel's buffers do, so the replicas stay alike. */
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind == VALUE_PARAM && !v->grad && v->param && v->param->dtype == UG_F32)
            UG_TRY(ug_comm_broadcast(c, v->param, 0));
    }
    if (!g->micro_batches++ && g->optimizer)
        g->accumulation_step = ug_optimizer_steps(g->optimizer);
    g->accumulated_rows = (int64_t)total;
    return UG_OK;
}

/* Whether this update's buckets are reduce-scattered (ZeRO stage 1's):
 * the optimizer is sharded over c and updates this rank's part of each
 * gradient alone, and nothing reads the whole gradients (clipping and
 * loss scaling take the norm of all of them, so they are all-reduced
 * whole). Not where the buckets lie in the engine's shared memory: its
 * all-reduce there copies nothing, and took a sharded MLP's epoch under
 * mpirun -np 2 in 0.8 s where MPI's reduce-scatter took 1.0-1.1 s. */
static bool scatter_only(const ug_comm *c, const ug_graph *g)
{
    int rank = 0, size = 1;
    /* (buckets in memory the engine made: bucket_memory's block, where it
     * did not decline) */
    const bool in_engine_memory = g->bucket_count > 0 && g->buckets[0].flat->storage->give_back != NULL;
    if (in_engine_memory || !g->optimizer || !ug_optim_sharded(g->optimizer, &rank, &size) || rank != c->rank ||
        size != c->size)
        return false;
    const ug_optimizer_config oc = ug_optimizer_get_config(g->optimizer);
    return !(oc.max_grad_norm > 0.0f) && !oc.loss_scaling.enabled;
}

ug_status ug_comm_reduce_bucket(ug_comm *c, int b, float **staging, size_t *staging_floats)
{
    const comm_data_parallel *dp = c->data_parallel;
    const graph_bucket *bucket = &dp->graph->buckets[b];
    if (!dp->scatter)
        return ug_comm_reduce_staged(c, bucket->flat, UG_COMM_SUM, staging, staging_floats);
    return ug_comm_reduce_parts_staged(c, bucket->flat, bucket->end - bucket->begin, dp->part_offset + bucket->begin,
                                       dp->part_length + bucket->begin, staging, staging_floats);
}

/* Each bucket's all-reduce, one after the other. */
static ug_status reduce_buckets(ug_comm *c, ug_graph *g, float total, const char *op)
{
    comm_data_parallel *dp = c->data_parallel;
    /* An empty part adds nothing: zeros. */
    for (int b = 0; !g->micro_batches && b < g->bucket_count; b++)
        UG_TRY(failing(c, ug_launch_unary(op, UG_UNARY_FILL, 0.0f, 0.0f, g->buckets[b].flat, NULL)));
    dp->backward_end = 0.0;
    for (int b = 0; b < g->bucket_count; b++) {
        const double start = ug_seconds_now();
        UG_TRY(ug_comm_reduce_bucket(c, b, &c->staging, &c->staging_floats));
        dp->timing[b] = (comm_timing){start, ug_seconds_now()};
    }
    return finish(c, g, total);
}

ug_status ug_comm_reduce_gradients(ug_comm *c, ug_graph *g)
{
    const char *op = "ug_comm_reduce_gradients";
    if (!c || !g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "graph" : "comm");
    UG_TRY(failing(c, prepare(c, g, op)));
    c->data_parallel->scatter = scatter_only(c, g);
    float total = 0.0f;
    UG_TRY(weigh_by_all_rows(c, g, 0, &total, op));
    return reduce_buckets(c, g, total, op);
}

/* Backward has launched bucket b's last accumulation: its all-reduce is
 * queued on the communication thread, to start when the device is there. */
static ug_status bucket_ready(void *ctx, int b)
{
    ug_comm *c = ctx;
    comm_data_parallel *dp = c->data_parallel;
    UG_TRY(ug_event_record(dp->ready[b], ug_stream_current(c->device)));
    return ug_comm_side_submit(c, b, dp->ready[b], &dp->timing[b]);
}

/* Backward has finished bucket b on a device that computes on this
 * thread (the CPU backend): its all-reduce, here and now. */
static ug_status bucket_reduce_now(void *ctx, int b)
{
    ug_comm *c = ctx;
    comm_data_parallel *dp = c->data_parallel;
    const double start = ug_seconds_now();
    UG_TRY(ug_comm_reduce_bucket(c, b, &c->staging, &c->staging_floats));
    dp->timing[b] = (comm_timing){start, ug_seconds_now()};
    return UG_OK;
}

ug_status ug_comm_run_backward(ug_comm *c, ug_graph *g)
{
    const char *op = "ug_comm_run_backward";
    if (!c || !g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "graph" : "comm");
    UG_TRY(failing(c, prepare(c, g, op)));
    c->data_parallel->scatter = scatter_only(c, g);
    int64_t rows = 0;
    UG_TRY(failing(c, ug_graph_rows_to_run(g, op, &rows)));
    float total = 0.0f;
    UG_TRY(weigh_by_all_rows(c, g, rows, &total, op));
    comm_data_parallel *dp = c->data_parallel;
    const double start = ug_seconds_now();
    if (c->debug_backward_delay > 0) /* at most 1 s: ug_comm_debug_slow */
        nanosleep(&(struct timespec){.tv_nsec = (long)(c->debug_backward_delay * 1e9)}, NULL);
    if (!c->side_allowed || c->overlap_off) { /* (MPI may allow only its first thread) */
        UG_TRY(failing(c, ug_graph_run_backward(g)));
        UG_TRY(failing(c, ug_device_synchronize(c->device)));
        dp->compute_seconds = ug_seconds_now() - start;
        return reduce_buckets(c, g, total, op);
    }
    dp->backward_end = 0.0;
    if (dp->reduce_inline) { /* (nothing hidden: backward_end stays 0) */
        UG_TRY(failing(c, ug_graph_run_backward_notify(g, bucket_reduce_now, c)));
        /* Not the all-reduces run inside, nor their waits for the other
         * ranks: counted in, a CPU replica beside a slower device measured
         * itself slower still, and the shares drifted the wrong way. */
        double reducing = 0.0;
        for (int b = 0; b < g->bucket_count; b++)
            reducing += dp->timing[b].end - dp->timing[b].start;
        dp->compute_seconds = ug_seconds_now() - start - reducing;
        return finish(c, g, total);
    }
    ug_status st = ug_graph_run_backward_notify(g, bucket_ready, c);
    if (st == UG_OK && g->bucket_count) { /* when the device finished backward: what the overlap hid behind */
        st = ug_event_synchronize(dp->ready[g->bucket_count - 1]);
        dp->backward_end = ug_seconds_now();
        dp->compute_seconds = dp->backward_end - start;
    }
    if (st != UG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ug_last_error());
        c->engine->fail(c, why);
        ug_comm_side_drain(c);
        return ug_set_error(st, "%s", why);
    }
    UG_TRY(failing(c, ug_comm_side_drain(c)));
    return finish(c, g, total);
}

ug_status ug_comm_set_bucket_bytes(ug_graph *g, size_t first_bytes, size_t bytes)
{
    const char *op = "ug_comm_set_bucket_bytes";
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: graph is NULL", op);
    if ((first_bytes && first_bytes < sizeof(float)) || (bytes && bytes < sizeof(float)))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: buckets of %zu and %zu bytes; give at least 4 bytes, or 0 "
                            "for the defaults (1 MiB, then 25 MiB)", op, first_bytes, bytes);
    ug_status st = ug_graph_set_buckets(g, first_bytes, bytes);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}

double ug_comm_compute_seconds(const ug_comm *c)
{
    if (!c->data_parallel)
        return 0.0;
    const ug_graph *g = c->data_parallel->graph;
    return c->debug_seconds_per_row > 0 ? c->debug_seconds_per_row * (double)g->rows
                                        : c->data_parallel->compute_seconds;
}

void ug_comm_debug_seconds_per_row(ug_comm *c, double seconds)
{
    c->debug_seconds_per_row = seconds;
}

void ug_comm_debug_slow(ug_comm *c, double seconds)
{
    c->debug_backward_delay = seconds < 0.999 ? seconds : 0.999; /* nanosleep's tv_nsec */
}

int ug_comm_bucket_count(const ug_comm *c)
{
    return c && c->data_parallel ? c->data_parallel->count : 0;
}

ug_status ug_comm_bucket_at(const ug_comm *c, int index, ug_comm_bucket *out)
{
    const char *op = "ug_comm_bucket_at";
    if (!c || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "out" : "comm");
    const comm_data_parallel *dp = c->data_parallel;
    if (index < 0 || index >= ug_comm_bucket_count(c))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: bucket %d of %d", op, index, ug_comm_bucket_count(c));
    const graph_bucket *b = &dp->graph->buckets[index];
    const comm_timing t = dp->timing[index];
    double hidden = 0.0;
    if (dp->backward_end > 0.0 && t.end > t.start) {
        const double before = (dp->backward_end < t.end ? dp->backward_end : t.end) - t.start;
        hidden = before <= 0.0 ? 0.0 : before / (t.end - t.start);
    }
    *out = (ug_comm_bucket){.parameters = b->end - b->begin, .bytes = b->elements * (int64_t)sizeof(float),
                            .seconds = t.end - t.start, .hidden = hidden,
                            .scattered = dp->scatter};
    return UG_OK;
}
