/* ug-train's data-parallel runs: --devices LIST (every device a replica of
 * this process, ranks 1.. on threads of their own) and mpirun (this
 * process one rank; only rank 0 prints, logs and saves). */
#ifndef UG_TOOLS_TRAIN_REPLICAS_H
#define UG_TOOLS_TRAIN_REPLICAS_H

#include <pthread.h>
#include <stdbool.h>

#include "train_data.h"
#include "train_options.h"

enum { TRAIN_MAX_REPLICAS = 16 };

typedef struct train_replica {
    ug_device *device;
    ug_comm *comm;
    pthread_t thread;
    bool started;
    ug_trainer_config config;
    const train_data *data;
    mlp_config *model;
    char failure[512];        /* "" when it finished */
} train_replica;

typedef struct train_replicas {
    int count;                /* ranks in this process; 0: one device, no comm */
    bool mpi;
    int rank, size;           /* this process's (mpirun), else 0 and count */
    const char *engine;       /* under mpirun: "MPI", or "NCCL"/"RCCL" on GPUs that have it */
    const char *transport;    /* how its all-reduces travel (ug_comm_transport) */
    train_replica replicas[TRAIN_MAX_REPLICAS];
} train_replicas;

/* This thread's device and communicator: --devices' first (its group made
 * of every listed device), this rank's under mpirun (--device may hold
 * {local_rank}), or --device with no communicator. Non-zero ranks of an
 * mpirun are made quiet (no progress, logs, plots or profile). Returns 0,
 * or 1 with the error printed. */
int replicas_open(train_options *o, train_replicas *rp, ug_device **device, ug_comm **comm);
/* Starts ranks 1.. of a --devices run, each fitting a trainer of config c
 * (callbacks dropped) on the same data. */
void replicas_start(train_replicas *rp, const ug_trainer_config *c, const train_data *data, mlp_config *model);
/* Waits for them: 0, or 1 with the first failure printed. */
int replicas_finish(train_replicas *rp);
/* "2 replicas (cpu, opencl:0)" or "rank 0 of 2 (MPI)" for the header. */
void replicas_describe(const train_replicas *rp, char *out, size_t len);

/* The epoch report's world size and each replica's share of the batch
 * (measured when the devices differ); nothing for one device. */
void replicas_report_shares(const train_replicas *rp, const ug_trainer_epoch *e);

#endif
