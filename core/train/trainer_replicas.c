/* Several local devices from one trainer (ug_trainer_config.devices, as
 * ug-train's --devices): the library opens the devices, makes their
 * in-process group (ug_comm_local_create) and one trainer per device, rank
 * 0's on the caller's thread (the trainer returned), the others' on
 * threads of their own, which then wait for the commands rank 0's calls
 * give them: fit with it, or end. Data-parallel training as config.comm
 * describes it; callbacks and checkpoints are rank 0's, evaluations its
 * own (they run whole on every rank). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/train/trainer_internal.h"

enum { MAX_REPLICAS = 16, COMMAND_FIT = 1, COMMAND_END };

typedef struct replica {
    trainer_replicas *group;
    ug_device *device;
    ug_comm *comm;
    ug_trainer *trainer; /* ranks 1..: made and freed on its thread */
    pthread_t thread;
    bool started;
    int done;            /* the last command finished */
    ug_status status;    /* its result */
    char error[512];
} replica;

struct trainer_replicas {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    int command, issued; /* the command and how many were issued */
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

/* Rank i's thread: its trainer, then each command until the end. A rank
 * that fails leaves its group, which fails the others' collectives at
 * once instead of leaving them waiting. */
static void *replica_main(void *arg)
{
    replica *r = arg;
    trainer_replicas *g = r->group;
    ug_trainer_config c = g->config;
    c.comm = r->comm;
    c.on_step = NULL;
    c.on_epoch = NULL;
    c.user = NULL;
    ug_status st = trainer_create(g->op, r->device, &g->sources, g->build, g->user, &c, &r->trainer);
    if (st != UG_OK) {
        ug_comm_free(r->comm);
        r->comm = NULL;
    }
    finish(r, st);
    for (int seen = 1;; seen++) {
        pthread_mutex_lock(&g->lock);
        while (g->issued < seen)
            pthread_cond_wait(&g->changed, &g->lock);
        const int command = g->command;
        pthread_mutex_unlock(&g->lock);
        if (command == COMMAND_END)
            break;
        st = r->trainer ? ug_trainer_fit(r->trainer) : ug_set_error(UG_ERR_STATE, "its trainer was not made");
        if (st != UG_OK && r->comm) {
            ug_comm_free(r->comm);
            r->comm = NULL;
        }
        finish(r, st);
    }
    ug_trainer_free(r->trainer);
    return NULL;
}

/* Issues a command to ranks 1.. (each finishes it in its own time). */
static void command(trainer_replicas *g, int cmd)
{
    pthread_mutex_lock(&g->lock);
    g->command = cmd;
    g->issued++;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
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
    ug_comm_free(g->r[0].comm);
    g->r[0].comm = NULL;
    if (t)
        t->config.comm = NULL;
}

ug_status trainer_replicas_fit(ug_trainer *t, ug_status (*fit)(ug_trainer *t))
{
    trainer_replicas *g = t->replicas;
    const int done = g->r[1].done + 1;
    command(g, COMMAND_FIT);
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
    command(g, COMMAND_END);
    for (int i = 1; i < g->count; i++)
        if (g->r[i].started)
            pthread_join(g->r[i].thread, NULL);
    for (int i = 0; i < g->count; i++) {
        ug_comm_free(g->r[i].comm);
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
    ug_status st = open_devices(op, config->devices, g);
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
        c.comm = g->r[0].comm;
        st = trainer_create(op, g->r[0].device, sources, build, user, &c, &t);
    }
    if (st != UG_OK) { /* leave the group (and the unstarted ranks' places) */
        char why[512];
        snprintf(why, sizeof why, "%s", ug_last_error());
        leave(g, NULL);
        for (int i = 1; i < g->count; i++)
            if (!g->r[i].started) {
                ug_comm_free(g->r[i].comm);
                g->r[i].comm = NULL;
            }
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
