/* libunigrad-mpi.so: the MPI engine's collectives (mpi_module.h), built
 * against Open MPI; all-reduces among the ranks of one machine go through
 * shared memory (mpi_shared.c). Each is a non-blocking MPI call polled until it
 * completes or the timeout passes, so a rank that never joins becomes an
 * error rather than a hang. A collective that timed out cannot be taken
 * back: the communicator is broken from then on (comm.c refuses further
 * calls). */
#define _POSIX_C_SOURCE 200809L /* nanosleep, clock_gettime, setenv */
#include <mpi.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "core/comm/mpi_module.h"
#include "core/comm/mpi_shared.h"

int ug_mpi_error(int code, const char *call, char *why, size_t len)
{
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, text, &n) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", code);
    snprintf(why, len, "%s failed: %s", call, text);
    return 1;
}

/* Set once a collective was given up: MPI_Finalize would then wait for
 * the abandoned request or the rank that never came, and hang the exit of
 * a process that already returned the error (seen with Open MPI 4.1 when
 * a peer died), so the process leaves without it. */
static volatile int abandoned;

void ug_mpi_abandon(void) { abandoned = 1; }

/* Polls request until done or timeout seconds. Open MPI moves a
 * non-blocking collective on only inside MPI calls, so the first second
 * polls without pause (yielding the core to the rank's compute thread);
 * later polls, of a rank waiting for a slow one, sleep between. */
int ug_mpi_wait(MPI_Request *request, const char *what, double timeout, char *why, size_t len)
{
    const double start = ug_seconds_now();
    for (int flag = 0;;) {
        int rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            ug_mpi_abandon();
            return ug_mpi_error(rc, what, why, len);
        }
        if (flag)
            return 0;
        double waited = ug_seconds_now() - start;
        if (waited > timeout) {
            ug_mpi_abandon();
            int rank = -1;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            snprintf(why, len, "rank %d waited %g s in %s for the other ranks; raise the timeout "
                     "(ug_comm_set_timeout) if a rank is slow, or look for one that stopped", rank, timeout, what);
            return 1;
        }
        if (waited > 1.0)
            nanosleep(&(struct timespec){0, 50000}, NULL);
        else
            sched_yield();
    }
}

static void finalize(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !abandoned)
        MPI_Finalize();
}

static int init(int *rank, int *size, int *any_thread, char *why, size_t len)
{
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&initialized);
    if (!initialized) {
        /* Open MPI's non-blocking all-reduce (libnbc) takes, on buffers
         * reduced in place, a binomial tree: to rank 0 and back, twice
         * the time of its blocking all-reduce (1 MiB floats between two
         * ranks of one machine: 0.95 ms against 0.70 ms by the ring,
         * 6 M floats: 9.3 against 3.8). The ring, as NCCL's, where the
         * user chose none. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
        /* Serialized: the rank's communication thread calls MPI too,
         * never at once with another (comm/side.c). */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Init_thread", why, len);
        atexit(finalize);
    } else {
        MPI_Query_thread(&provided);
    }
    *any_thread = provided >= MPI_THREAD_SERIALIZED;
    /* Errors come back as codes, not as an abort of the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return ug_mpi_shared_init(why, len);
}

static int all_reduce(float *data, size_t n, int op, double timeout, char *why, size_t len)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bool done = false;
    if (ug_mpi_shared_all_reduce(data, n, op == 2, timeout, &done, why, len))
        return 1; /* (a timeout there abandons MPI too) */
    if (!done) {
        MPI_Request request;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_FLOAT, op == 2 ? MPI_MAX : MPI_SUM,
                                MPI_COMM_WORLD, &request);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Iallreduce", why, len);
        if (ug_mpi_wait(&request, "ug_comm_all_reduce", timeout, why, len))
            return 1;
    }
    if (op == 1)
        for (size_t i = 0; i < n; i++)
            data[i] /= (float)size;
    return 0;
}

static int broadcast(float *data, size_t n, int root, double timeout, char *why, size_t len)
{
    MPI_Request request;
    int rc = MPI_Ibcast(data, (int)n, MPI_FLOAT, root, MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Ibcast", why, len);
    return ug_mpi_wait(&request, "ug_comm_broadcast", timeout, why, len);
}

static int all_gather(const float *in, size_t n, float *out, double timeout, char *why, size_t len)
{
    MPI_Request request;
    int rc = MPI_Iallgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Iallgather", why, len);
    return ug_mpi_wait(&request, "ug_comm_all_gather", timeout, why, len);
}

static int barrier(double timeout, char *why, size_t len)
{
    MPI_Request request;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Ibarrier", why, len);
    return ug_mpi_wait(&request, "ug_comm_barrier", timeout, why, len);
}

static const ug_mpi_module module = {UG_MPI_MODULE_VERSION, init,    all_reduce, broadcast, all_gather, barrier,
                                     ug_mpi_shared_transport, ug_mpi_shared_block, ug_mpi_shared_block_free};

__attribute__((visibility("default"))) const ug_mpi_module *ug_mpi_module_entry(void) { return &module; }
