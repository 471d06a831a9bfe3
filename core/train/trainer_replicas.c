/* Several local devices from one trainer (ug_trainer_config.devices, as
 * ug-train's --devices, or config.stages, as --stages): the library opens
 * the devices, makes their in-process group (ug_comm_local_create) and
 * one trainer per device, rank 0's on the caller's thread (the trainer
 * returned), the others' on threads of their own, which then follow the
 * commands rank 0's calls give them: fit with it, evaluate, or end.
 * Replicas: data-parallel training as config.comm describes it;
 * callbacks and checkpoints are rank 0's, evaluations its own (they run
 * whole on every rank). Stages: every stage takes part in each batch and
 * evaluation, so where stage 0 calls back, the others wait for what its
 * callbacks ask (an evaluation, the last stage's loss) until it goes on;
 * with config.comm, each of its ranks such a pipeline, and each stage's
 * trainer a replica of the same stage of the others (pipeline.h's
 * ug_pipeline_set_replicas). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/comm/internal.h"
#include "core/train/trainer_internal.h"

enum { MAX_REPLICAS = 16, QUEUE = 64 };
enum { COMMAND_FIT = 1, COMMAND_END, COMMAND_EVALUATE, COMMAND_LOSS, COMMAND_GO_ON };

typedef struct replica {
    trainer_replicas *group;
    ug_device *device;
    ug_comm *comm;
    ug_comm *replicas;   /* stages with config.comm: this stage of every pipeline */
    ug_trainer *trainer; /* ranks 1..: made and freed on its thread */
    pthread_t thread;
    bool started;
    int seen;            /* commands taken */
    int done;            /* fits finished (and the creation) */
    ug_status status;    /* the last one's result */
    char error[512];
} replica;

/* A command and what it takes. */
typedef struct command_entry {
    int command;
    const ug_dataset *data;   /* COMMAND_EVALUATE: a data set, */
    const ug_tokens *tokens;  /* or tokens */
} command_entry;

struct trainer_replicas {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    bool stages;         /* config.stages: the ranks are pipeline stages */
    int issued;          /* commands issued; command i is queue[i % QUEUE] */
    command_entry queue[QUEUE];
    replica r[MAX_REPLICAS];
    /* What the ranks make their trainers of. */
    const char *op;
    trainer_sources sources;
    ug_trainer_build_fn build;
    void *user;
    ug_trainer_config config;
};

static void finish(replica *r, ug_status st)
{
    trainer_replicas *g = r->group;
    pthread_mutex_lock(&g->lock);
    r->status = st;
    if (st != UG_OK)
        snprintf(r->error, sizeof r->error, "%s", ug_last_error());
    r->done++;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

/* The next command for r, waited for. */
static command_entry next_command(replica *r)
{
    trainer_replicas *g = r->group;
    pthread_mutex_lock(&g->lock);
    while (g->issued <= r->seen)
        pthread_cond_wait(&g->changed, &g->lock);
    const command_entry e = g->queue[r->seen % QUEUE];
    r->seen++;
    pthread_cond_broadcast(&g->changed); /* a full queue has room again */
    pthread_mutex_unlock(&g->lock);
    return e;
}

/* A stage's part of what stage 0 asked: an evaluation, or the loss (the
 * last stage sends it). */
static ug_status serve(replica *r, command_entry e)
{
    if (e.command == COMMAND_EVALUATE) {
        ug_trainer_metrics ignored;
        return e.tokens ? ug_trainer_evaluate_tokens(r->trainer, e.tokens, &ignored)
                        : ug_trainer_evaluate(r->trainer, e.data, &ignored);
    }
    if (!trainer_holds_loss(r->trainer))
        return UG_OK;
    float loss = 0.0f;
    UG_TRY(ug_trainer_last_loss(r->trainer, &loss));
    return r->comm->engine->send(r->comm, &loss, sizeof loss, 0);
}

/* A rank that failed leaves its groups, which fails the others'
 * collectives at once instead of leaving them waiting. */
static void leave_groups(replica *r)
{
    ug_comm_free(r->comm);
    ug_comm_free(r->replicas);
    r->comm = r->replicas = NULL;
}

/* Rank i's thread: its trainer, then each command until the end. A rank
 * that fails leaves its group, which fails the others' collectives at
 * once instead of leaving them waiting. */
static void *replica_main(void *arg)
{
    replica *r = arg;
    trainer_replicas *g = r->group;
    ug_trainer_config c = g->config;
    c.comm = g->stages ? r->replicas : r->comm;
    c.on_step = NULL;
    c.on_epoch = NULL;
    c.user = NULL;
    ug_status st = trainer_create(g->op, r->device, &g->sources, g->build, g->user, &c, g->stages ? r->comm : NULL,
                                  &r->trainer);
    if (st != UG_OK) {
        leave_groups(r);
    } else if (g->stages) {
        r->trainer->following = g;
    }
    finish(r, st);
    for (;;) {
        const command_entry e = next_command(r);
        if (e.command == COMMAND_END)
            break;
        if (e.command == COMMAND_GO_ON)
            continue;
        if (!r->trainer)
            st = ug_set_error(UG_ERR_STATE, "its trainer was not made");
        else
            st = e.command == COMMAND_FIT ? ug_trainer_fit(r->trainer) : serve(r, e);
        if (st != UG_OK)
            leave_groups(r);
        if (e.command == COMMAND_FIT || st != UG_OK)
            finish(r, st);
    }
    ug_trainer_free(r->trainer);
    return NULL;
}

/* Issues a command to ranks 1.. (each takes it in its own time). */
static void command(trainer_replicas *g, int cmd, const ug_dataset *data, const ug_tokens *tokens)
{
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < g->count; i++) /* the queue is full until the slowest takes one */
        while (g->r[i].started && g->issued - g->r[i].seen >= QUEUE)
            pthread_cond_wait(&g->changed, &g->lock);
    g->queue[g->issued % QUEUE] = (command_entry){.command = cmd, .data = data, .tokens = tokens};
    g->issued++;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

static replica *replica_of(trainer_replicas *g, const ug_trainer *t)
{
    for (int i = 1; i < g->count; i++)
        if (g->r[i].trainer == t)
            return &g->r[i];
    return NULL;
}

ug_status trainer_stage_callbacks_done(ug_trainer *t)
{
    if (t->replicas && t->replicas->stages) {
        command(t->replicas, COMMAND_GO_ON, NULL, NULL);
        return UG_OK;
    }
    replica *r = t->following ? replica_of(t->following, t) : NULL;
    for (command_entry e; r && (e = next_command(r)).command != COMMAND_GO_ON;) {
        if (e.command == COMMAND_END) { /* stage 0 stopped: its end is for the thread's loop */
            pthread_mutex_lock(&r->group->lock);
            r->seen--;
            pthread_mutex_unlock(&r->group->lock);
            return ug_set_error(UG_ERR_STATE, "trainer: stage 0 ended the run inside fit");
        }
        UG_TRY(serve(r, e));
    }
    return UG_OK;
}

ug_status trainer_stages_evaluate(ug_trainer *t, const ug_dataset *data, const ug_tokens *tokens)
{
    command(t->replicas, COMMAND_EVALUATE, data, tokens);
    return UG_OK;
}

ug_status trainer_stages_last_loss(ug_trainer *t, float *loss)
{
    if (!t->replicas)
        return ug_set_error(UG_ERR_STATE, "ug_trainer_last_loss: the last stage holds the loss");
    command(t->replicas, COMMAND_LOSS, NULL, NULL);
    ug_comm *c = t->stage_comm;
    size_t bytes = 0;
    return c->engine->recv(c, loss, sizeof *loss, ug_comm_size(c) - 1, &bytes);
}

/* Waits for ranks 1.. to have finished `done` commands; own (rank 0's
 * result) if it failed, else the first replica's failure. */
static ug_status wait_done(trainer_replicas *g, int done, ug_status own)
{
    char error[600] = "";
    ug_status st = UG_OK;
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < g->count; i++) {
        replica *r = &g->r[i];
        while (r->started && r->done < done)
            pthread_cond_wait(&g->changed, &g->lock);
        if (st == UG_OK && r->status != UG_OK) {
            st = r->status;
            snprintf(error, sizeof error, "rank %d on %s: %s", i, ug_device_name(r->device), r->error);
        }
    }
    pthread_mutex_unlock(&g->lock);
    if (own != UG_OK || st == UG_OK)
        return own;
    return ug_set_error(st, "%s", error);
}

/* Rank 0 leaving the group after a failure: the others' collectives fail
 * at once instead of waiting. */
static void leave(trainer_replicas *g, ug_trainer *t)
{
    leave_groups(&g->r[0]);
    if (t)
        t->config.comm = NULL;
}

ug_status trainer_replicas_fit(ug_trainer *t, ug_status (*fit)(ug_trainer *t))
{
    trainer_replicas *g = t->replicas;
    const int done = g->r[1].done + 1;
    command(g, COMMAND_FIT, NULL, NULL);
    const ug_status own = fit(t);
    if (own != UG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ug_last_error());
        leave(g, t);
        ug_set_error(own, "%s", why);
    }
    return wait_done(g, done, own);
}

void trainer_replicas_free(trainer_replicas *g)
{
    if (!g)
        return;
    command(g, COMMAND_END, NULL, NULL);
    for (int i = 1; i < g->count; i++)
        if (g->r[i].started)
            pthread_join(g->r[i].thread, NULL);
    for (int i = 0; i < g->count; i++) {
        leave_groups(&g->r[i]);
        ug_device_close(g->r[i].device);
    }
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* The devices of list, opened into g (count set); false with an error. */
static ug_status open_devices(const char *op, const char *list, trainer_replicas *g)
{
    char names[512];
    if ((size_t)snprintf(names, sizeof names, "%s", list) >= sizeof names)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: devices \"%.40s...\" is longer than %zu characters", op,
                            list, sizeof names - 1);
    char *save = NULL;
    for (char *name = strtok_r(names, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (g->count == MAX_REPLICAS)
            return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: devices lists more than %d devices", op, MAX_REPLICAS);
        UG_TRY(ug_device_open(name, &g->r[g->count].device));
        g->r[g->count].group = g;
        g->count++;
    }
    if (g->count < 1)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: devices \"%s\" names no device (e.g. \"cpu,opencl:0\")",
                            op, list);
    return UG_OK;
}

ug_status trainer_replicas_create(const char *op, ug_device *device, const trainer_sources *sources,
                                  ug_trainer_build_fn build, void *user, const ug_trainer_config *config,
                                  ug_trainer **out)
{
    trainer_replicas *g = ug_calloc(1, sizeof *g);
    if (!g)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    g->op = op;
    g->sources = *sources;
    g->build = build;
    g->user = user;
    g->config = *config;
    g->config.devices = NULL;
    g->stages = config->stages != NULL;
    ug_status st = open_devices(op, g->stages ? config->stages : config->devices, g);
    if (st == UG_OK && g->stages && g->count < 2)
        st = ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: stages \"%s\" names one device; a pipeline has two "
                          "stages or more", op, config->stages);
    if (st == UG_OK && device && device != g->r[0].device)
        st = ug_set_error(UG_ERR_DEVICE, "%s: the device is %s, devices' first %s; pass NULL or the first", op,
                          ug_device_name(device), ug_device_name(g->r[0].device));
    ug_device *devices[MAX_REPLICAS];
    ug_comm *comms[MAX_REPLICAS] = {NULL};
    for (int i = 0; i < g->count; i++)
        devices[i] = g->r[i].device;
    if (st == UG_OK)
        st = ug_comm_local_create(g->count, devices, comms);
    for (int i = 0; i < g->count; i++)
        g->r[i].comm = comms[i];
    /* Pipelines side by side (stages with comm, each of its ranks one):
     * each stage's replicas, a comm of their own on its device, split
     * from comm (every pipeline makes them in stage order). */
    if (st == UG_OK && g->stages && config->comm && !config->comm->side_allowed)
        st = ug_set_error(UG_ERR_UNSUPPORTED, "%s: the stages' threads would each call MPI, which the program "
                          "initialised for one thread only; initialise it with MPI_THREAD_SERIALIZED or more, or "
                          "let unigrad initialise it", op);
    for (int i = 0; i < g->count && g->stages && config->comm; i++) {
        const ug_status split = ug_comm_split(config->comm, 0, ug_comm_rank(config->comm), g->r[i].device,
                                              &g->r[i].replicas);
        st = st != UG_OK ? st : split;
    }
    /* Ranks 1.. make their trainers alongside rank 0's (its model is
     * broadcast to them). */
    for (int i = 1; i < g->count && st == UG_OK; i++) {
        g->r[i].started = pthread_create(&g->r[i].thread, NULL, replica_main, &g->r[i]) == 0;
        if (!g->r[i].started)
            st = ug_set_error(UG_ERR_OUT_OF_MEMORY, "%s: could not start rank %d's thread", op, i);
    }
    ug_trainer *t = NULL;
    if (st == UG_OK) {
        ug_trainer_config c = g->config;
        c.comm = g->stages ? g->r[0].replicas : g->r[0].comm;
        st = trainer_create(op, g->r[0].device, sources, build, user, &c, g->stages ? g->r[0].comm : NULL, &t);
    }
    if (st != UG_OK) { /* leave the group (and the unstarted ranks' places) */
        char why[512];
        snprintf(why, sizeof why, "%s", ug_last_error());
        leave(g, NULL);
        for (int i = 1; i < g->count; i++)
            if (!g->r[i].started)
                leave_groups(&g->r[i]);
        ug_set_error(st, "%s", why);
    }
    st = wait_done(g, 1, st);
    if (st != UG_OK) {
        ug_trainer_free(t);
        trainer_replicas_free(g);
        return st;
    }
    t->replicas = g;
    *out = t;
    return UG_OK;
}
