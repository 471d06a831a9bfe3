/* The optimizer's state sharded over a communicator's ranks (ZeRO stage
 * 1, comm.h): each rank keeps and updates its part of every parameter
 * (core/model/optimizer.c cuts the state, core/ops/optim.c updates the
 * part), and the parts are gathered after each update. The gradients are
 * reduce-scattered to the same parts (data_parallel.c): in-process each
 * element is summed in rank order, as the all-reduce sums it (and two
 * ranks' sum is one in any order), so the update reads the same sums and
 * the parameters come out bit for bit the same. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/model/internal.h"
#include "core/ops/op.h"

/* Every rank's status of its sharding, the worst one for all: each rank
 * returns its own failure, or names the first rank that failed. */
static ug_status agree(void *ctx, ug_status mine)
{
    ug_comm *c = ctx;
    float code = (float)mine, *codes = ug_calloc((size_t)c->size, sizeof *codes);
    if (!codes) {
        c->engine->fail(c, "out of host memory");
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_comm_shard_optimizer: out of host memory");
    }
    ug_status st = c->engine->all_gather(c, &code, 1, codes);
    for (int r = 0; st == UG_OK && mine == UG_OK && r < c->size; r++)
        if (codes[r] != (float)UG_OK)
            st = ug_set_error((ug_status)codes[r], "ug_comm_shard_optimizer: rank %d could not shard its "
                              "optimizer's state (its own call says why); no rank's is sharded", r);
    free(codes);
    return mine != UG_OK ? mine : st;
}

ug_status ug_comm_shard_optimizer(ug_comm *c, ug_optimizer *opt)
{
    const char *op = "ug_comm_shard_optimizer";
    if (!c || !opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "optimizer" : "comm");
    UG_TRY(ug_comm_check_models(c, ug_optimizer_model(opt), op));
    return ug_optim_shard(opt, c->rank, c->size, agree, c);
}

/* Values of every parameter's largest part: each rank's share of the
 * all-gather, its parts one after another, padded to that. */
static int64_t gather_width(const ug_model *model, int size)
{
    int64_t width = 0;
    for (int i = 0; i < ug_model_param_count(model); i++) {
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, NULL, &t);
        width += (ug_tensor_numel(t) + size - 1) / size;
    }
    return width;
}

/* Values of the model's largest parameter. */
static int64_t largest_param(const ug_model *model)
{
    int64_t largest = 0;
    for (int i = 0; i < ug_model_param_count(model); i++) {
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, NULL, &t);
        largest = ug_tensor_numel(t) > largest ? ug_tensor_numel(t) : largest;
    }
    return largest;
}

/* A tensor of n values whole, from each rank's part at `at` in its share
 * of all (width values a rank). */
static void assemble(const ug_comm *c, int64_t n, const float *all, int64_t width, int64_t at, float *whole)
{
    for (int r = 0; r < c->size; r++) {
        int64_t begin, count;
        ug_optim_shard_range(n, r, c->size, &begin, &count);
        memcpy(whole + begin, all + r * width + at, (size_t)count * sizeof *whole);
    }
}

/* This rank's part of each parameter, at its place in mine. */
static ug_status pack(ug_comm *c, ug_model *model, float *mine)
{
    for (int i = 0; i < ug_model_param_count(model); i++) {
        ug_tensor *t = NULL, *flat = NULL, *part = NULL;
        ug_model_param_at(model, i, NULL, &t);
        const int64_t n = ug_tensor_numel(t);
        int64_t begin, count;
        ug_optim_shard_range(n, c->rank, c->size, &begin, &count);
        ug_status st = ug_tensor_reshape(t, 1, &n, &flat);
        if (st == UG_OK)
            st = ug_tensor_slice(flat, begin, count, &part);
        if (st == UG_OK && count > 0)
            st = ug_tensor_download(part, mine, (size_t)count * sizeof *mine);
        ug_tensor_free(part);
        ug_tensor_free(flat);
        UG_TRY(st);
        mine += (n + c->size - 1) / c->size;
    }
    return UG_OK;
}

/* Each parameter whole from the ranks' parts in all, written through the
 * model (its half copy follows). */
static ug_status unpack(ug_comm *c, ug_model *model, const float *all, int64_t width, float *whole)
{
    int64_t at = 0;
    for (int i = 0; i < ug_model_param_count(model); i++) {
        const char *name = NULL;
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, &name, &t);
        const int64_t n = ug_tensor_numel(t);
        assemble(c, n, all, width, at, whole);
        UG_TRY(ug_model_write_param(model, name, whole, (size_t)n * sizeof *whole));
        at += (n + c->size - 1) / c->size;
    }
    return UG_OK;
}

static ug_status not_sharded_here(const ug_comm *c, const char *op, int size)
{
    return ug_set_error(UG_ERR_STATE, "%s: the optimizer is %s, not as rank %d of %d; shard it with "
                        "ug_comm_shard_optimizer on this comm", op, size > 1 ? "sharded otherwise" : "not sharded",
                        c->rank, c->size);
}

/* The gather where the engine gathers device memory in place (NCCL,
 * RCCL): the parts packed on the device, gathered there, and copied to
 * their places, with no trip through the host. */
static ug_status gather_on_device(ug_comm *c, ug_model *model, int64_t width, const char *op)
{
    ug_tensor *mine = NULL, *all = NULL;
    ug_status st = ug_tensor_create(c->device, UG_F32, 1, &width, &mine);
    if (st == UG_OK)
        st = ug_tensor_create(c->device, UG_F32, 1, (int64_t[]){width * c->size}, &all);
    int64_t at = 0;
    for (int i = 0; st == UG_OK && i < ug_model_param_count(model); i++) {
        ug_tensor *t = NULL;
        ug_model_param_at(model, i, NULL, &t);
        int64_t begin, count;
        ug_optim_shard_range(ug_tensor_numel(t), c->rank, c->size, &begin, &count);
        st = ug_comm_copy_range(mine, at, t, begin, count);
        at += (ug_tensor_numel(t) + c->size - 1) / c->size;
    }
    if (st != UG_OK) /* the others must not wait for this rank's part */
        c->engine->fail(c, ug_last_error());
    if (st == UG_OK)
        st = ug_comm_all_gather(c, mine, all);
    at = 0;
    for (int i = 0; st == UG_OK && i < ug_model_param_count(model); i++) {
        ug_tensor *t = NULL, *copy = ug_model_half_copy_at(model, i);
        ug_model_param_at(model, i, NULL, &t);
        const int64_t n = ug_tensor_numel(t);
        for (int r = 0; st == UG_OK && r < c->size; r++) {
            int64_t begin, count;
            ug_optim_shard_range(n, r, c->size, &begin, &count);
            st = ug_comm_copy_range(t, begin, all, r * width + at, count);
        }
        if (st == UG_OK && copy) /* the half copy follows, as ug_model_write_param's */
            st = ug_launch_unary(op, UG_UNARY_COPY, 1.0f, 0.0f, copy, t);
        at += (n + c->size - 1) / c->size;
    }
    ug_tensor_free(mine);
    ug_tensor_free(all);
    return st;
}

ug_status ug_comm_gather_parameters(ug_comm *c, ug_optimizer *opt)
{
    const char *op = "ug_comm_gather_parameters";
    if (!c || !opt)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, c ? "optimizer" : "comm");
    int rank = 0, size = 1;
    ug_model *model = ug_optimizer_model(opt);
    const int64_t width = gather_width(model, c->size);
    /* the rank's kept buffer: a fresh one each update cost page faults
     * (the MLP's epoch took 12 times as long) */
    if (c->engine->device_all_gather) {
        if (!ug_optim_sharded(opt, &rank, &size) || rank != c->rank || size != c->size)
            return not_sharded_here(c, op, size);
        return gather_on_device(c, model, width, op);
    }
    float *mine = NULL;
    ug_status st = ug_comm_host_buffer(c, (size_t)(width * (c->size + 1) + largest_param(model)), op, &mine);
    float *all = mine ? mine + width : NULL, *whole = all ? all + width * c->size : NULL;
    if (st == UG_OK && (!ug_optim_sharded(opt, &rank, &size) || rank != c->rank || size != c->size))
        st = not_sharded_here(c, op, size);
    if (st == UG_OK && (st = pack(c, model, mine)) != UG_OK)
        ug_prefix_error(st, "%s", op);
    if (st != UG_OK) /* the others must not wait for this rank's part */
        c->engine->fail(c, ug_last_error());
    if (st == UG_OK)
        st = c->engine->all_gather(c, mine, (size_t)width, all);
    if (st == UG_OK && (st = unpack(c, model, all, width, whole)) != UG_OK)
        ug_prefix_error(st, "%s", op);
    return st;
}

ug_status ug_comm_consolidate_optimizer(ug_comm *c, ug_optimizer *opt, ug_optimizer **whole)
{
    const char *op = "saving a sharded optimizer";
    *whole = NULL;
    ug_model *model = ug_optimizer_model(opt);
    const int slots = ug_optimizer_state_count(opt), params = ug_model_param_count(model);
    const int64_t width = gather_width(model, c->size) * slots;
    float *mine = NULL;
    ug_status st = ug_comm_host_buffer(c, (size_t)(width * (c->size + 1) + largest_param(model)), op, &mine);
    float *all = mine ? mine + width : NULL, *host = all ? all + width * c->size : NULL;
    /* this rank's part of each state tensor (all of the tensor), padded */
    int64_t at = 0;
    for (int i = 0; st == UG_OK && i < params; i++)
        for (int s = 0; st == UG_OK && s < slots; s++) {
            ug_tensor *t = NULL, *param = NULL;
            ug_model_param_at(model, i, NULL, &param);
            st = ug_optimizer_state(opt, i, s, &t);
            if (st == UG_OK && ug_tensor_numel(t) > 0)
                st = ug_tensor_download(t, mine + at, (size_t)ug_tensor_numel(t) * sizeof *mine);
            at += (ug_tensor_numel(param) + c->size - 1) / c->size;
        }
    if (st != UG_OK)
        c->engine->fail(c, ug_last_error());
    if (st == UG_OK)
        st = c->engine->all_gather(c, mine, (size_t)width, all);
    if (st == UG_OK && c->rank == 0)
        st = ug_optim_whole_copy(opt, whole);
    /* rank 0: each whole state tensor from the ranks' parts */
    at = 0;
    for (int i = 0; st == UG_OK && c->rank == 0 && i < params; i++) {
        ug_tensor *param = NULL;
        ug_model_param_at(model, i, NULL, &param);
        const int64_t n = ug_tensor_numel(param);
        for (int s = 0; st == UG_OK && s < slots; s++, at += (n + c->size - 1) / c->size) {
            ug_tensor *t = NULL;
            assemble(c, n, all, width, at, host);
            st = ug_optimizer_state(*whole, i, s, &t);
            if (st == UG_OK)
                st = ug_tensor_upload(t, host, (size_t)n * sizeof *host);
        }
    }
    if (st != UG_OK) {
        ug_optimizer_free(*whole);
        *whole = NULL;
    }
    return st;
}
