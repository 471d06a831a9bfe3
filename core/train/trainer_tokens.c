/* A training run on token sets (ug_trainer_create_tokens): the checks of
 * what a token run takes, the model, optimizer and graphs for batches of
 * windows, the samplers (the training one sharded across replicas), and
 * evaluations over a sampler's fixed evaluation batches. The steps
 * themselves are trainer_fit.c's, beside the epochs of a data set. */
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "core/comm/internal.h"
#include "core/train/trainer_internal.h"
#include "unigrad/tokens.h"

/* What a token run has no use for, or must be given. */
static ug_status check_token_config(const ug_trainer_config *c, const ug_tokens *train, const ug_tokens *val)
{
    const char *bad = NULL;
    const ug_image_augment *a = &c->augment;
    if (c->batch_size < 1) bad = "batch_size is 0: give the windows a batch holds (a token run searches no batch size)";
    else if (c->block_size < 1) bad = "block_size is 0: give the tokens a window holds (T)";
    else if (c->max_steps < 1) bad = "max_steps is 0: give the updates to train (a token run has no epochs)";
    else if (c->max_steps > UG_OPTIMIZER_MAX_STEPS) bad = "max_steps is past the optimizer's largest step count (2^53)";
    else if (c->eval_iters < 1) bad = "eval_iters is 0: give the batches an evaluation takes";
    else if (c->val_split != 0.0)
        bad = "val_split is set: split the tokens by position (ug_tokens_split) and give the validation part";
    else if (c->top_k || c->confusion)
        bad = "top_k and confusion are for classes of samples; a token run reports its per-token accuracy";
    else if (c->device_convert || a->channels || a->height || a->width || a->crop_padding || a->flip != 0.0f)
        bad = "device_convert and augment are for byte images, not tokens";
    else if (c->patience && !val) bad = "patience needs validation tokens to measure the loss on";
    if (bad)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: %s", bad);
    /* The sampler's counters, step * accumulate * batch_size + row, stay
     * below 2^64 for the whole run. */
    const uint64_t draws = UINT64_MAX / (uint64_t)c->batch_size - 1;
    if ((uint64_t)c->max_steps > draws / (uint64_t)c->accumulate)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: %lld steps of %d batches of %lld "
                                                     "windows are more draws than the sampler numbers",
                            (long long)c->max_steps, c->accumulate, (long long)c->batch_size);
    const ug_tokens *sets[2] = {train, val};
    for (int i = 0; i < 2; i++)
        if (sets[i] && ug_tokens_count(sets[i]) < c->block_size + 1)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: the %s tokens (%lld) make no "
                                                         "window of block_size + 1 = %lld tokens",
                                i ? "validation" : "training", (long long)ug_tokens_count(sets[i]),
                                (long long)c->block_size + 1);
    if (val && ug_tokens_vocab_size(val) > ug_tokens_vocab_size(train))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: the validation tokens' vocabulary "
                                                     "(%lld ids) is larger than the training tokens' (%lld)",
                            (long long)ug_tokens_vocab_size(val), (long long)ug_tokens_vocab_size(train));
    return UG_OK;
}

static ug_token_sampler_config sampler_config(const ug_trainer *t)
{
    ug_token_sampler_config sc = ug_token_sampler_defaults();
    sc.batch_size = t->batch;
    sc.block_size = t->config.block_size;
    sc.seed = t->config.seed;
    sc.dtype = UG_I32;
    return sc;
}

ug_status trainer_open_tokens(ug_trainer *t, const ug_tokens *train, const ug_tokens *validation)
{
    const ug_trainer_config *c = &t->config;
    UG_TRY(check_token_config(c, train, validation));
    /* Kept through a range of each (a reference the trainer owns). */
    UG_TRY(ug_tokens_range(train, 0, ug_tokens_count(train), &t->train_tokens));
    if (validation)
        UG_TRY(ug_tokens_range(validation, 0, ug_tokens_count(validation), &t->val_tokens));
    t->token_windows = true;
    t->features = c->block_size;
    t->target_width = 0;
    t->batch = c->batch_size;
    UG_TRY(ug_model_create(t->device, c->seed, &t->model));
    trainer_graph first; /* creates the parameters the optimizer takes */
    UG_TRY(trainer_build_graph(t, t->batch, true, &first));
    trainer_graph_free(&first);
    UG_TRY(trainer_make_optimizer(t, 1));
    UG_TRY(trainer_build_graph(t, t->batch, true, &t->train));
    UG_TRY(trainer_finish_graph(t, &t->train, true));
    UG_TRY(trainer_build_graph(t, t->batch, false, &t->eval));
    UG_TRY(trainer_finish_graph(t, &t->eval, false));
    ug_token_sampler_config sc = sampler_config(t);
    if (c->comm) { /* each rank its rows of every global batch */
        sc.shard_count = ug_comm_size(c->comm);
        sc.shard_index = ug_comm_rank(c->comm);
    }
    UG_TRY(ug_token_sampler_create(t->train_tokens, t->device, &sc, &t->train_sampler));
    sc.shard_count = 0; /* evaluations run whole on every rank */
    if (t->val_tokens)
        UG_TRY(ug_token_sampler_create(t->val_tokens, t->device, &sc, &t->val_sampler));
    /* The sampler's position is the step, which trainer_state.c saves
     * (trainer.global_batch): no loader to add. */
    UG_TRY(ug_checkpoint_create(&t->checkpoint));
    UG_TRY(ug_checkpoint_add_model(t->checkpoint, t->model));
    UG_TRY(ug_checkpoint_add_optimizer(t->checkpoint, t->optimizer));
    UG_TRY(ug_checkpoint_add_graph(t->checkpoint, "train", t->train.graph));
    return c->keep > 1 ? ug_checkpoint_set_keep(t->checkpoint, c->keep) : UG_OK;
}

ug_status ug_trainer_create_tokens(ug_device *device, const ug_tokens *train, const ug_tokens *validation,
                                   ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                   ug_trainer **out)
{
    if (!train && out) {
        *out = NULL;
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create_tokens: the training tokens are NULL");
    }
    const trainer_sources sources = {.train_tokens = train, .val_tokens = validation};
    return trainer_create("ug_trainer_create_tokens", device, &sources, build, user, config, NULL, out);
}

ug_status trainer_evaluate_sampler(ug_trainer *t, ug_token_sampler *sampler, ug_trainer_metrics *out)
{
    int64_t samples = 0;
    UG_TRY(ug_graph_clear_sums(t->eval.graph));
    for (int64_t i = 0; i < t->config.eval_iters; i++) {
        ug_token_batch b;
        UG_TRY(ug_token_sampler_batch(sampler, UG_TOKEN_EVAL, i, &b));
        UG_TRY(trainer_eval_batch(t, b.x, b.y));
        samples += b.rows;
    }
    return trainer_read_metrics(t, &t->eval, samples, true, out);
}

ug_status ug_trainer_evaluate_tokens(ug_trainer *t, const ug_tokens *data, ug_trainer_metrics *out)
{
    const char *op = "ug_trainer_evaluate_tokens";
    if (!t || !data || !out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !t ? "trainer" : !data ? "data" : "out");
    if (!t->train_tokens)
        return ug_set_error(UG_ERR_STATE, "%s: this run trains on a data set; evaluate one with ug_trainer_evaluate",
                            op);
    if (ug_tokens_vocab_size(data) > ug_tokens_vocab_size(t->train_tokens))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: the tokens' vocabulary (%lld ids) is larger than the "
                                                     "training tokens' (%lld)",
                            op, (long long)ug_tokens_vocab_size(data), (long long)ug_tokens_vocab_size(t->train_tokens));
    if (t->replicas && t->stage_comm) /* the other stages evaluate with this one */
        UG_TRY(trainer_stages_evaluate(t, NULL, data));
    const ug_token_sampler_config sc = sampler_config(t);
    ug_token_sampler *sampler = NULL;
    UG_TRY(ug_token_sampler_create(data, t->device, &sc, &sampler));
    bool flushed = trainer_denormals_begin(t);
    ug_status st = trainer_evaluate_sampler(t, sampler, out);
    ug_set_flush_denormal(flushed);
    ug_token_sampler_free(sampler);
    return st == UG_OK ? UG_OK : ug_prefix_error(st, "%s", op);
}
