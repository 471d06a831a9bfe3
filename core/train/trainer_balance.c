/* Replicas of different speeds (a GPU beside the CPU, or two kinds of GPU)
 * each take a share of the global batch proportional to their measured
 * speed, so that they finish each step together and neither waits.
 *
 * Each replica measures its forward and backward on its own device
 * (ug_comm_compute_seconds: not the all-reduces, nor waiting for the
 * others) over rounds of updates; after each round the ranks gather every
 * rank's rows and seconds, and all compute the same new weights, each
 * rank's rows per second, which the loaders take from the next batch. A
 * step's time is not quite proportional to its rows (launches cost the
 * same for any batch), so the shares are measured again under the new
 * split, for a few rounds, and then kept. The first update is not
 * measured: it compiles kernels and warms caches. Ranks of one kind of
 * device keep equal shares: measuring them would only add noise, and an
 * equal split keeps a run reproducible bit for bit.
 *
 * The gradient average is by rows (data_parallel.c), so the update is one
 * device's on the global batch for any split. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/runtime/internal.h"
#include "core/train/trainer_internal.h"

enum { WARMUP_UPDATES = 1, ROUND_UPDATES = 4, ROUNDS = 3 };

ug_status trainer_balance_start(ug_trainer *t)
{
    trainer_balance *b = &t->balance;
    memset(b, 0, sizeof *b);
    ug_comm *c = t->config.comm;
    const int size = c ? ug_comm_size(c) : 1;
    if (size > TRAINER_MAX_REPLICAS) /* the loader refused such a world already */
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_trainer_create: %d ranks; at most %d", size,
                            TRAINER_MAX_REPLICAS);
    b->replicas = size;
    for (int r = 0; r < size; r++)
        b->shares[r] = 1.0 / size;
    if (size < 2)
        return UG_OK;
    char kind[300];
    snprintf(kind, sizeof kind, "%s/%s", t->device->info.backend, t->device->info.name);
    b->measuring = ug_comm_ranks_differ(c, kind);
    return UG_OK;
}

/* New shares from every rank's rows and seconds over the round: rows per
 * second; a rank that trained no rows keeps its share. The same on every
 * rank, as all compute them from the same gathered figures. */
static void new_shares(trainer_balance *b, const float *figures)
{
    double speed[TRAINER_MAX_REPLICAS], total = 0.0, kept = 0.0;
    for (int r = 0; r < b->replicas; r++) {
        const double rows = figures[2 * r], seconds = figures[2 * r + 1];
        speed[r] = rows > 0 && seconds > 0 ? rows / seconds : 0.0;
        total += speed[r];
        kept += speed[r] > 0 ? 0.0 : b->shares[r];
    }
    if (!(total > 0) || !(kept < 1.0))
        return;
    for (int r = 0; r < b->replicas; r++)
        if (speed[r] > 0)
            b->shares[r] = (1.0 - kept) * speed[r] / total;
}

ug_status trainer_balance_after_update(ug_trainer *t, int64_t rows)
{
    trainer_balance *b = &t->balance;
    if (!b->measuring || ++b->updates <= WARMUP_UPDATES)
        return UG_OK;
    ug_comm *c = t->config.comm;
    if (rows > 0) { /* a rank with an empty part ran no backward to time */
        b->rows += rows;
        b->seconds += ug_comm_compute_seconds(c);
    }
    if ((b->updates - WARMUP_UPDATES) % ROUND_UPDATES)
        return UG_OK;
    float mine[2] = {(float)b->rows, (float)b->seconds}, all[2 * TRAINER_MAX_REPLICAS];
    UG_TRY(c->engine->all_gather(c, mine, 2, all));
    new_shares(b, all);
    b->rows = 0;
    b->seconds = 0.0;
    b->measuring = ++b->rounds < ROUNDS;
    return t->train_sampler ? ug_token_sampler_set_shard_weights(t->train_sampler, b->shares)
                            : ug_loader_set_shard_weights(t->train_loader, b->shares);
}
