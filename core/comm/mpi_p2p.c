/* The MPI module's point-to-point messages (mpi_module.h's send and
 * recv), for pipeline stages: activations forward, gradients back. A
 * send never waits for its receiver, since two neighbouring stages send
 * to each other at once (one an activation, the other a gradient) and
 * MPI's rendezvous for large messages would hold both: each send starts
 * on a copy of its bytes, and the copies are freed as their sends
 * complete, inside later calls. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/comm/mpi_shared.h"

enum { P2P_TAG = 0x5047 };

typedef struct pending_send {
    MPI_Request request;
    void *copy;
} pending_send;

/* The sends of every comm (the module's lock held: mpi_module.c). */
static pending_send *pending;
static int pending_count, pending_capacity;

/* Frees the copies whose sends completed. */
static int progress(char *why, size_t len)
{
    int kept = 0;
    for (int i = 0; i < pending_count; i++) {
        int done = 0;
        int rc = MPI_Test(&pending[i].request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Test of a send", why, len);
        if (done)
            free(pending[i].copy);
        else
            pending[kept++] = pending[i];
    }
    pending_count = kept;
    return 0;
}

/* Starts a send of copy (malloc'd; freed once it completes). */
static int start_send(ug_mpi_comm *comm, void *copy, size_t bytes, int dest, char *why, size_t len)
{
    int rc = progress(why, len);
    if (rc == 0 && pending_count == pending_capacity) {
        int capacity = pending_capacity ? 2 * pending_capacity : 16;
        pending_send *grown = realloc(pending, (size_t)capacity * sizeof *grown);
        if (grown) {
            pending = grown;
            pending_capacity = capacity;
        } else {
            rc = 1;
            snprintf(why, len, "ug_comm_send: out of host memory");
        }
    }
    if (rc == 0) {
        const int sent = MPI_Isend(copy, (int)bytes, MPI_BYTE, dest, P2P_TAG, comm->comm,
                                   &pending[pending_count].request);
        if (sent == MPI_SUCCESS)
            pending[pending_count++].copy = copy;
        else
            rc = ug_mpi_error(sent, "MPI_Isend", why, len);
    }
    if (rc)
        free(copy);
    return rc;
}

int ug_mpi_send(ug_mpi_comm *comm, const void *data, size_t bytes, int dest, char *why, size_t len)
{
    if (bytes > INT_MAX) {
        snprintf(why, len, "ug_comm_send of %zu bytes: MPI counts stop at %d", bytes, INT_MAX);
        return 1;
    }
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) {
        snprintf(why, len, "ug_comm_send: out of host memory for %zu bytes", bytes);
        return 1;
    }
    memcpy(copy, data, bytes);
    return start_send(comm, copy, bytes, dest, why, len);
}

/* Probes for the message (polled, as ug_mpi_wait polls) to learn its
 * size first; a probe leaves it queued, and the receive after takes the
 * first message from source, which is the one probed (MPI keeps the
 * order of messages between two ranks). */
int ug_mpi_recv(ug_mpi_comm *comm, void *data, size_t capacity, int source, size_t *bytes, double timeout, char *why,
                size_t len)
{
    if (progress(why, len))
        return 1;
    const double start = ug_seconds_now();
    MPI_Status status;
    for (int found = 0; !found;) {
        int rc = MPI_Iprobe(source, P2P_TAG, comm->comm, &found, &status);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Iprobe", why, len);
        if (found)
            break;
        const double waited = ug_seconds_now() - start;
        if (waited > timeout) {
            ug_mpi_abandon();
            snprintf(why, len, "waited %g s in ug_comm_recv for rank %d's message; raise the timeout "
                     "(ug_comm_set_timeout) if it is slow, or look for why it stopped", timeout, source);
            return 1;
        }
        ug_mpi_pause(waited);
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    *bytes = (size_t)count;
    if ((size_t)count > capacity)
        return 2;
    int rc = MPI_Recv(data, count, MPI_BYTE, source, P2P_TAG, comm->comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Recv", why, len);
    return progress(why, len);
}

/* Before MPI is finalised: the sends the receivers took complete (one
 * never received is left, as the rank it was for has gone). */
void ug_mpi_p2p_finish(void)
{
    char why[8];
    for (int round = 0; pending_count && round < 1000; round++)
        progress(why, sizeof why);
    free(pending);
    pending = NULL;
    pending_count = pending_capacity = 0;
}
