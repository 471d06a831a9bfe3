/* ug-train's data-parallel runs (see train_replicas.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "local_rank.h"
#include "wrap.h"

static bool under_mpirun(void)
{
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size)
        size = getenv("PMI_SIZE");
    return size && atoi(size) > 1;
}

static int open_list(train_options *o, train_replicas *rp, ug_device **device, ug_comm **comm)
{
    char list[512];
    snprintf(list, sizeof list, "%s", o->devices);
    ug_device *devices[TRAIN_MAX_REPLICAS];
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (rp->count == TRAIN_MAX_REPLICAS) {
            fprintf(stderr, "ug-train: --devices lists more than %d devices\n", TRAIN_MAX_REPLICAS);
            return 1;
        }
        if (ug_device_open(name, &devices[rp->count]) != UG_OK) {
            fprintf(stderr, "ug-train: --devices: %s\n", ug_last_error());
            return 1;
        }
        rp->replicas[rp->count].device = devices[rp->count];
        rp->count++;
    }
    ug_comm *comms[TRAIN_MAX_REPLICAS];
    if (!rp->count || ug_comm_local_create(rp->count, devices, comms) != UG_OK) {
        fprintf(stderr, "ug-train: --devices %s: %s\n", o->devices, rp->count ? ug_last_error() : "no device named");
        return 1;
    }
    for (int i = 0; i < rp->count; i++)
        rp->replicas[i].comm = comms[i];
    rp->size = rp->count;
    *comm = comms[0];
    /* The caller's own reference, which it closes. */
    return ug_device_open(ug_device_name(devices[0]), device) == UG_OK ? 0 : 1;
}

int replicas_open(train_options *o, train_replicas *rp, ug_device **device, ug_comm **comm)
{
    memset(rp, 0, sizeof *rp);
    *comm = NULL;
    if (o->devices)
        return open_list(o, rp, device, comm);
    char name[128];
    expand_local_rank(o->device, name, sizeof name);
    if (o->stages) /* the first stage's device speaks for the run */
        snprintf(name, strcspn(o->stages, ",") + 1 < sizeof name ? strcspn(o->stages, ",") + 1 : sizeof name, "%s",
                 o->stages);
    if (ug_device_open(name, device) != UG_OK) {
        fprintf(stderr, "ug-train: opening the device: %s\n", ug_last_error());
        return 1;
    }
    if (!under_mpirun())
        return 0;
    if (ug_comm_mpi_create(*device, comm) != UG_OK) {
        fprintf(stderr, "ug-train: joining the MPI run: %s\n", ug_last_error());
        return 1;
    }
    rp->mpi = true;
    rp->rank = ug_comm_rank(*comm);
    rp->size = ug_comm_size(*comm);
    /* GPUs reduce in place through NCCL or RCCL where every rank has it;
     * otherwise MPI carries the gradients through host memory. */
    ug_device_info info;
    ug_comm *nccl = NULL;
    if (ug_device_get_info(*device, &info) == UG_OK && info.is_gpu) {
        if (ug_comm_nccl_create(*comm, &nccl) == UG_OK)
            *comm = nccl;
        else if (rp->rank == 0)
            fprintf(stderr, "ug-train: gradients go through MPI and host memory: %s\n", ug_last_error());
    }
    rp->engine = ug_comm_engine(*comm);
    rp->transport = ug_comm_transport(*comm);
    if (rp->rank) { /* rank 0 speaks for the run */
        o->quiet = true;
        o->csv = o->tensorboard = o->plot = o->profile = NULL;
        if (!freopen("/dev/null", "w", stdout))
            fprintf(stderr, "ug-train: rank %d: could not silence its output\n", rp->rank);
    }
    return 0;
}

static void *fit_replica(void *arg)
{
    train_replica *r = arg;
    ug_trainer *t = NULL;
    ug_status st = ug_trainer_create(r->device, r->data->train, r->data->val, mlp_forward, r->model, &r->config, &t);
    if (st == UG_OK)
        st = ug_trainer_fit(t);
    if (st != UG_OK)
        snprintf(r->failure, sizeof r->failure, "%s", ug_last_error());
    ug_trainer_free(t);
    ug_comm_free(r->comm); /* a failed rank leaves: the others return at once */
    r->comm = NULL;
    return NULL;
}

void replicas_start(train_replicas *rp, const ug_trainer_config *c, const train_data *data, mlp_config *model)
{
    for (int i = 1; i < rp->count; i++) {
        train_replica *r = &rp->replicas[i];
        r->config = *c;
        r->config.comm = r->comm;
        r->config.on_step = NULL;
        r->config.on_epoch = NULL;
        r->config.user = NULL;
        r->data = data;
        r->model = model;
        r->started = pthread_create(&r->thread, NULL, fit_replica, r) == 0;
        if (!r->started)
            snprintf(r->failure, sizeof r->failure, "could not start its thread");
    }
}

int replicas_finish(train_replicas *rp)
{
    int rc = 0;
    for (int i = 1; i < rp->count; i++) {
        train_replica *r = &rp->replicas[i];
        if (r->started)
            pthread_join(r->thread, NULL);
        if (r->failure[0] && !rc) {
            fprintf(stderr, "ug-train: replica %d on %s: %s\n", i, ug_device_name(r->device), r->failure);
            rc = 1;
        }
        ug_comm_free(r->comm);
        ug_device_close(r->device);
    }
    if (rp->count)
        ug_device_close(rp->replicas[0].device);
    return rc;
}

void replicas_describe(const train_replicas *rp, char *out, size_t len)
{
    if (rp->mpi) {
        const bool mpi = !strcmp(rp->engine, "MPI");
        snprintf(out, len, "%d ranks through %s (%s)", rp->size, rp->engine,
                 !mpi ? "started over MPI" : rp->transport);
        return;
    }
    int n = snprintf(out, len, "%d replicas in this process (", rp->count);
    for (int i = 0; i < rp->count && n < (int)len; i++)
        n += snprintf(out + n, len - (size_t)n, "%s%s", i ? ", " : "", ug_device_name(rp->replicas[i].device));
    if (n < (int)len)
        snprintf(out + n, len - (size_t)n, ")");
}

void replicas_report_shares(const train_replicas *rp, const ug_trainer_epoch *e)
{
    if (e->replicas < 2)
        return;
    /* A rank's or device's share: at most about 40 characters. */
    size_t len = 32 + 48 * (size_t)e->replicas, n = 0;
    char prefix[32], *shares = malloc(len);
    if (!shares)
        return;
    n += (size_t)snprintf(shares, len, "shares of each batch");
    for (int r = 0; r < e->replicas && n < len; r++) {
        if (rp->mpi)
            n += (size_t)snprintf(shares + n, len - n, "%s rank %d %.1f%%", r ? "," : "", r, 100.0 * e->shares[r]);
        else
            n += (size_t)snprintf(shares + n, len - n, "%s %s %.1f%%", r ? "," : "",
                                  ug_device_name(rp->replicas[r].device), 100.0 * e->shares[r]);
    }
    snprintf(prefix, sizeof prefix, "world of %d: ", e->replicas);
    print_wrapped(stdout, prefix, shares);
    free(shares);
}
