/* libunigrad-mpi.so: the MPI engine's collectives (mpi_module.h), built
 * against Open MPI; all-reduces among the ranks of one machine go through
 * shared memory (mpi_shared.c). Each is a non-blocking MPI call polled until it
 * completes or the timeout passes, so a rank that never joins becomes an
 * error rather than a hang. A collective that timed out cannot be taken
 * back: the communicator is broken from then on (comm.c refuses further
 * calls).
 *
 * Before any data moves, the ranks agree on what they were asked (agree):
 * MPI itself trusts every rank to give the same count, op and root, and
 * ranks that do not overrun each other's buffers or mix their results. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, clock_gettime, setenv */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The module's lock (mpi_shared.h): MPI is initialised serialized, which
 * costs nothing beside a single thread; with MPI_THREAD_MULTIPLE, Open
 * MPI's own locking made a 2-stage pipeline's step x1.32 of one device's
 * instead of x1.07 (ug-bench pipeline). */
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;

void ug_mpi_pause(double waited)
{
    pthread_mutex_unlock(&module_lock);
    if (waited > 1.0)
        nanosleep(&(struct timespec){0, 50000}, NULL);
    else
        sched_yield();
    pthread_mutex_lock(&module_lock);
}

/* Polls request until done or timeout seconds. Open MPI moves a
 * non-blocking collective on only inside MPI calls, so the first second
 * polls without pause (yielding the core to the rank's compute thread);
 * later polls, of a rank waiting for a slow one, sleep between. */
int ug_mpi_wait_status(MPI_Request *request, MPI_Status *status, const char *what, double timeout, char *why,
                       size_t len)
{
    const double start = ug_seconds_now();
    for (int flag = 0;;) {
        int rc = MPI_Test(request, &flag, status);
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
            snprintf(why, len, "world rank %d waited %g s in %s for the other ranks; raise the timeout "
                     "(ug_comm_set_timeout) if a rank is slow, or look for one that stopped", rank, timeout, what);
            return 1;
        }
        ug_mpi_pause(waited);
    }
}

int ug_mpi_wait(MPI_Request *request, const char *what, double timeout, char *why, size_t len)
{
    return ug_mpi_wait_status(request, MPI_STATUS_IGNORE, what, timeout, why, len);
}

static void finalize(void)
{
    if (!abandoned)
        ug_mpi_p2p_finish();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !abandoned)
        MPI_Finalize();
}

/* ---- agreement: every rank asks the same of a collective ---- */

/* What a call is compared on, in the order a difference is reported. */
enum { REFUSED, KIND, COUNT, OP, ROOT, FIELDS };

/* One rank's side of a disagreement, sent to the others to describe it. */
typedef struct stance {
    int64_t field[FIELDS];
    char reason[320];
} stance;

static const char *kind_name(int64_t kind)
{
    static const char *const names[] = {"(none)", "ug_comm_mpi_create", "ug_comm_all_reduce", "ug_comm_broadcast",
                                        "ug_comm_all_gather", "ug_comm_barrier",
                                        "ug_comm_run_backward's shared block", "ug_comm_split",
                                        "ug_comm_reduce_scatter"};
    return kind >= 0 && kind <= UG_MPI_REDUCE_SCATTER ? names[kind] : "(unknown)";
}

/* A non-blocking collective just started (rc), waited for; what names
 * it in a timeout's message. */
static int wait_started(int rc, const char *call, MPI_Request *request, const char *what, double timeout, char *why,
                        size_t len)
{
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, call, why, len);
    return ug_mpi_wait(request, what, timeout, why, len);
}

/* field of s in words, as "rank r <this>". */
static void describe(char *out, size_t len, int field, const stance *s)
{
    static const char *const ops[] = {"sum", "average", "max"};
    const int64_t v = s->field[field];
    if (field == KIND)
        snprintf(out, len, "called %s", kind_name(v));
    else if (field == COUNT && s->field[KIND] == UG_MPI_CREATE && v)
        snprintf(out, len, "has UG_MPI_SHARED_RANKS=%lld", (long long)v);
    else if (field == COUNT && s->field[KIND] == UG_MPI_CREATE)
        snprintf(out, len, "has UG_MPI_SHARED_RANKS unset");
    else if (field == COUNT)
        snprintf(out, len, "gave %lld elements", (long long)v);
    else if (field == OP)
        snprintf(out, len, "reduces by %s", v >= 0 && v <= 2 ? ops[v] : "(unknown)");
    else
        snprintf(out, len, "broadcasts from rank %lld", (long long)v);
}

static const char *rule(int field, int64_t kind)
{
    switch (field) {
    case KIND: return "every rank must call the same collectives in the same order";
    case COUNT: return kind == UG_MPI_CREATE ? "set it alike on every rank, or on none"
                                             : "every rank must give the same count";
    case OP: return "every rank must give the same op";
    default: return "every rank must name the same root";
    }
}

/* The ranks disagree (bounds: each field's least value and the negated
 * largest): which rank refused first, or the first field that differs and
 * the first ranks with its least value and with another, then that
 * rank's stance from it, so that every rank words the same message. Two
 * more small collectives, on this error path only. */
static int explain(MPI_Comm comm, const stance *mine, const int64_t *bounds, const char *what, double timeout,
                   char *why, size_t len)
{
    int world = 0;
    MPI_Comm_rank(comm, &world);
    int64_t first[2 * FIELDS]; /* [2f]: the first rank with f's least value, [2f + 1]: with another */
    for (int f = 0; f < FIELDS; f++) {
        const bool least = mine->field[f] == bounds[2 * f];
        first[2 * f] = least ? world : INT64_MAX;
        first[2 * f + 1] = least ? INT64_MAX : world;
    }
    MPI_Request request;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, first, 2 * FIELDS, MPI_INT64_T, MPI_MIN, comm, &request);
    if (wait_started(rc, "MPI_Iallreduce", &request, what, timeout, why, len))
        return UG_MPI_FAILED;
    int field = REFUSED;
    if (-bounds[2 * REFUSED + 1] == 0) /* nobody refused: a field differs */
        for (field = KIND; field < ROOT && bounds[2 * field] == -bounds[2 * field + 1]; field++)
            continue;
    /* The rank whose stance describes it: the first that refused (the
     * largest value, 1), or the first whose value is not the least. */
    const int64_t teller = field == REFUSED ? (bounds[0] == 1 ? first[0] : first[1]) : first[2 * field + 1];
    stance told = *mine;
    rc = MPI_Ibcast(&told, (int)sizeof told, MPI_BYTE, (int)teller, comm, &request);
    if (wait_started(rc, "MPI_Ibcast", &request, what, timeout, why, len))
        return UG_MPI_FAILED;
    if (field == REFUSED) {
        snprintf(why, len, "rank %lld could not take part: %s", (long long)teller, told.reason);
        return UG_MPI_REFUSED;
    }
    stance least = told;
    least.field[field] = bounds[2 * field];
    const int64_t least_rank = first[2 * field];
    const stance *low = least_rank < teller ? &least : &told, *high = least_rank < teller ? &told : &least;
    char a[96], b[96];
    describe(a, sizeof a, field, low);
    describe(b, sizeof b, field, high);
    snprintf(why, len, "rank %lld %s, rank %lld %s; %s", (long long)(least_rank < teller ? least_rank : teller), a,
             (long long)(least_rank < teller ? teller : least_rank), b, rule(field, told.field[KIND]));
    return UG_MPI_DIFFER;
}

/* One small all-reduce of each field's least and largest value (as a
 * minimum of v and -v) before every collective: its price, some 3-5 us
 * between two ranks of one machine (an all-reduce of one float went from
 * 0.7 to 4 us through the shared window, from 2-3 to 7 us through MPI;
 * one of 1.5 MB takes 230-300 us either way), paid so that a mismatch is
 * refused on every rank instead of overrunning a buffer or mixing
 * results. */
static int agree(ug_mpi_comm *comm, const ug_mpi_call *call, const char *refusal, double timeout, char *why,
                 size_t len)
{
    stance mine = {.field = {refusal != NULL, call->kind, call->count, call->op, call->root}};
    if (refusal)
        snprintf(mine.reason, sizeof mine.reason, "%s", refusal);
    int64_t bounds[2 * FIELDS];
    for (int f = 0; f < FIELDS; f++) {
        bounds[2 * f] = mine.field[f];
        bounds[2 * f + 1] = -mine.field[f];
    }
    const char *what = call->kind ? kind_name(call->kind) : "telling the other ranks of a refusal";
    MPI_Request request;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, bounds, 2 * FIELDS, MPI_INT64_T, MPI_MIN, comm->comm, &request);
    if (wait_started(rc, "MPI_Iallreduce", &request, what, timeout, why, len))
        return UG_MPI_FAILED;
    bool alike = -bounds[2 * REFUSED + 1] == 0;
    for (int f = KIND; f < FIELDS; f++)
        alike &= bounds[2 * f] == -bounds[2 * f + 1];
    return alike ? UG_MPI_AGREED : explain(comm->comm, &mine, bounds, what, timeout, why, len);
}

static ug_mpi_comm world = {.world = true};

static int init(const char *refusal, double timeout, ug_mpi_comm **out, int *rank, int *size, int *any_thread,
                char *why, size_t len)
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
        /* Serialized: the rank's communication thread calls MPI too, and
         * the stages of a pipeline in this process each on a comm of
         * their own (ug_comm_split), one at a time (the module's lock). */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return ug_mpi_error(rc, "MPI_Init_thread", why, len);
        atexit(finalize);
    } else {
        MPI_Query_thread(&provided);
    }
    *any_thread = provided >= MPI_THREAD_SERIALIZED;
    world.comm = MPI_COMM_WORLD;
    *out = &world;
    /* Errors come back as codes, not as an abort of the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    /* Agreed first, polled: the machine's split that follows waits for
     * every rank with no timeout, for ever for one that refused here. */
    int limit = 0;
    char setting[256] = "";
    const bool malformed = ug_mpi_shared_limit(&limit, setting, sizeof setting) != 0;
    const ug_mpi_call create = {.kind = UG_MPI_CREATE, .count = limit};
    int verdict = agree(&world, &create, refusal ? refusal : malformed ? setting : NULL, timeout, why, len);
    if (verdict == UG_MPI_REFUSED && malformed && !refusal) {
        snprintf(why, len, "%s", setting);
        return UG_MPI_OWN_SETTING;
    }
    if (verdict != UG_MPI_AGREED)
        return verdict;
    return ug_mpi_shared_init(limit, why, len) ? UG_MPI_FAILED : UG_MPI_AGREED;
}

static int all_reduce(ug_mpi_comm *comm, float *data, size_t n, int op, double timeout, char *why, size_t len)
{
    int size = 1;
    MPI_Comm_size(comm->comm, &size);
    bool done = false;
    if (comm->world && ug_mpi_shared_all_reduce(data, n, op == 2, timeout, &done, why, len))
        return 1; /* (a timeout there abandons MPI too) */
    if (!done) {
        MPI_Request request;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_FLOAT, op == 2 ? MPI_MAX : MPI_SUM,
                                comm->comm, &request);
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

static int broadcast(ug_mpi_comm *comm, float *data, size_t n, int root, double timeout, char *why, size_t len)
{
    MPI_Request request;
    int rc = MPI_Ibcast(data, (int)n, MPI_FLOAT, root, comm->comm, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Ibcast", why, len);
    return ug_mpi_wait(&request, "ug_comm_broadcast", timeout, why, len);
}

static int all_gather(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout, char *why,
                      size_t len)
{
    MPI_Request request;
    int rc = MPI_Iallgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, comm->comm, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Iallgather", why, len);
    return ug_mpi_wait(&request, "ug_comm_all_gather", timeout, why, len);
}

static int reduce_scatter(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout, char *why,
                          size_t len)
{
    MPI_Request request;
    int rc = MPI_Ireduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm->comm, &request);
    if (rc != MPI_SUCCESS)
        return ug_mpi_error(rc, "MPI_Ireduce_scatter_block", why, len);
    return ug_mpi_wait(&request, "ug_comm_reduce_scatter", timeout, why, len);
}

/* MPI_Comm_split waits for every rank without a timeout: the agreement
 * before it (mpi.c) has seen them all arrive. */
static int split(ug_mpi_comm *comm, int color, int key, ug_mpi_comm **out, int *rank, int *size, char *why,
                 size_t len)
{
    ug_mpi_comm *made = calloc(1, sizeof *made);
    if (!made) {
        snprintf(why, len, "out of host memory");
        return 1;
    }
    int rc = MPI_Comm_split(comm->comm, color, key, &made->comm);
    if (rc != MPI_SUCCESS) {
        free(made);
        return ug_mpi_error(rc, "MPI_Comm_split", why, len);
    }
    MPI_Comm_set_errhandler(made->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(made->comm, rank);
    MPI_Comm_size(made->comm, size);
    *out = made;
    return 0;
}

static void comm_free(ug_mpi_comm *comm)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm && !comm->world && !finalized)
        MPI_Comm_free(&comm->comm);
    if (comm && !comm->world)
        free(comm);
}

static const char *transport(const ug_mpi_comm *comm) { return comm->world ? ug_mpi_shared_transport() : "MPI"; }

static int shared_block(ug_mpi_comm *comm, size_t bytes, double timeout, void **address, char *why, size_t len)
{
    if (comm->world)
        return ug_mpi_shared_block(bytes, timeout, address, why, len);
    *address = NULL; /* (why stays empty: nothing to warn of) */
    return 0;
}

/* The table's entries, each holding the module's lock. */
#define LOCKED(call)                                                                                           \
    do {                                                                                                       \
        pthread_mutex_lock(&module_lock);                                                                      \
        const int rc_ = (call);                                                                                \
        pthread_mutex_unlock(&module_lock);                                                                    \
        return rc_;                                                                                            \
    } while (0)
static int locked_init(const char *refusal, double timeout, ug_mpi_comm **out, int *rank, int *size, int *any_thread,
                       char *why, size_t len)
{
    LOCKED(init(refusal, timeout, out, rank, size, any_thread, why, len));
}
static int locked_agree(ug_mpi_comm *comm, const ug_mpi_call *call, const char *refusal, double timeout, char *why,
                        size_t len)
{
    LOCKED(agree(comm, call, refusal, timeout, why, len));
}
static int locked_all_reduce(ug_mpi_comm *comm, float *data, size_t n, int op, double timeout, char *why, size_t len)
{
    LOCKED(all_reduce(comm, data, n, op, timeout, why, len));
}
static int locked_broadcast(ug_mpi_comm *comm, float *data, size_t n, int root, double timeout, char *why, size_t len)
{
    LOCKED(broadcast(comm, data, n, root, timeout, why, len));
}
static int locked_all_gather(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout, char *why,
                             size_t len)
{
    LOCKED(all_gather(comm, in, n, out, timeout, why, len));
}
static int locked_reduce_scatter(ug_mpi_comm *comm, const float *in, size_t n, float *out, double timeout,
                                 char *why, size_t len)
{
    LOCKED(reduce_scatter(comm, in, n, out, timeout, why, len));
}
static int locked_split(ug_mpi_comm *comm, int color, int key, ug_mpi_comm **out, int *rank, int *size, char *why,
                        size_t len)
{
    LOCKED(split(comm, color, key, out, rank, size, why, len));
}
static void locked_comm_free(ug_mpi_comm *comm)
{
    pthread_mutex_lock(&module_lock);
    comm_free(comm);
    pthread_mutex_unlock(&module_lock);
}
static int locked_send(ug_mpi_comm *comm, const void *data, size_t bytes, int dest, char *why, size_t len)
{
    LOCKED(ug_mpi_send(comm, data, bytes, dest, why, len));
}
static int locked_recv(ug_mpi_comm *comm, void *data, size_t capacity, int source, size_t *bytes, double timeout,
                       char *why, size_t len)
{
    LOCKED(ug_mpi_recv(comm, data, capacity, source, bytes, timeout, why, len));
}
static int locked_shared_block(ug_mpi_comm *comm, size_t bytes, double timeout, void **address, char *why,
                               size_t len)
{
    LOCKED(shared_block(comm, bytes, timeout, address, why, len));
}
static void locked_shared_block_free(void *address)
{
    pthread_mutex_lock(&module_lock);
    ug_mpi_shared_block_free(address);
    pthread_mutex_unlock(&module_lock);
}
#undef LOCKED

static const ug_mpi_module module = {.version = UG_MPI_MODULE_VERSION,
                                     .init = locked_init,
                                     .agree = locked_agree,
                                     .all_reduce = locked_all_reduce,
                                     .broadcast = locked_broadcast,
                                     .all_gather = locked_all_gather,
                                     .reduce_scatter = locked_reduce_scatter,
                                     .split = locked_split,
                                     .comm_free = locked_comm_free,
                                     .send = locked_send,
                                     .recv = locked_recv,
                                     .transport = transport,
                                     .shared_block = locked_shared_block,
                                     .shared_block_free = locked_shared_block_free};

__attribute__((visibility("default"))) const ug_mpi_module *ug_mpi_module_entry(void) { return &module; }
