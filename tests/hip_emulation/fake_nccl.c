/* A stand-in libnccl.so.2 for the emulated CUDA device: the NCCL entry
 * points core/comm/nccl.c resolves with dlsym, with NCCL's semantics for
 * the ranks of one process (threads), on host memory (the emulator's
 * device memory). Streams are the emulator's, where every call completes
 * before it returns, so each collective completes before it returns too.
 *
 * It exists to test the engine: the unique id carried from rank 0 to the
 * others, each rank's device address and stream, in-place all-reduce (sum,
 * max, average), broadcast and all-gather, and the teardown. A collective
 * is a rendezvous of every rank of the communicator: each posts its
 * buffers, then each computes its result in rank order (the same bits on
 * every rank, as NCCL's rings give) into a buffer of its own, and after a
 * second rendezvous writes it, so in-place buffers are read before any is
 * written. Arguments that differ between ranks (count, operation, root)
 * are ncclInvalidUsage on every rank, as NCCL's checks would give; types
 * other than f32 are refused, since the engine sends f32 only. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

enum { SUCCESS = 0, SYSTEM_ERROR = 2, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };
enum { FLOAT32 = 7, SUM = 0, MAX = 2, AVG = 4, MAX_RANKS = 8 };

typedef struct unique_id {
    char internal[128];
} unique_id;

typedef struct post {
    const float *send;
    float *recv;
    size_t count;
    int kind, op, root;       /* kind: 0 all-reduce, 1 broadcast, 2 all-gather */
} post;

typedef struct group {
    unique_id id;
    int ranks, joined, left;
    int arrived;              /* at the current rendezvous */
    uint64_t round;
    post posts[MAX_RANKS];
    struct group *next;
} group;

typedef struct comm {
    group *g;
    int rank;
} comm;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static group *groups;
static uint64_t ids;

API int ncclGetVersion(int *version)
{
    *version = 21903; /* 2.19.3 */
    return SUCCESS;
}

API const char *ncclGetErrorString(int result)
{
    return result == SUCCESS ? "no error" : result == INVALID_USAGE ? "invalid usage (fake NCCL)"
                                                                     : "error (fake NCCL)";
}

API int ncclGetUniqueId(unique_id *id)
{
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&lock);
    uint64_t n = ++ids;
    pthread_mutex_unlock(&lock);
    /* Every byte matters: the engine must carry all 128 across. */
    for (int i = 0; i < 128; i++)
        id->internal[i] = (char)(0xA5 ^ (int)((n * 131u + (uint64_t)getpid() + (uint64_t)i * 7u) & 0xFF));
    return SUCCESS;
}

/* Waits until every rank of g has arrived; under the lock. */
static void rendezvous(group *g)
{
    uint64_t round = g->round;
    if (++g->arrived == g->ranks) {
        g->arrived = 0;
        g->round++;
        pthread_cond_broadcast(&changed);
    }
    while (g->round == round)
        pthread_cond_wait(&changed, &lock);
}

API int ncclCommInitRank(comm **out, int ranks, unique_id id, int rank)
{
    if (ranks < 1 || ranks > MAX_RANKS || rank < 0 || rank >= ranks)
        return INVALID_ARGUMENT;
    comm *c = calloc(1, sizeof *c);
    if (!c)
        return SYSTEM_ERROR;
    pthread_mutex_lock(&lock);
    group *g = groups;
    while (g && (memcmp(&g->id, &id, sizeof id) || g->joined == g->ranks))
        g = g->next;
    if (!g && (g = calloc(1, sizeof *g))) {
        g->id = id;
        g->ranks = ranks;
        g->next = groups;
        groups = g;
    }
    int st = !g ? SYSTEM_ERROR : g->ranks != ranks ? INVALID_USAGE : SUCCESS;
    if (st == SUCCESS) {
        g->joined++;
        rendezvous(g); /* NCCL returns once every rank has joined */
        c->g = g;
        c->rank = rank;
    }
    pthread_mutex_unlock(&lock);
    if (st != SUCCESS)
        free(c);
    else
        *out = c;
    return st;
}

static void leave(comm *c)
{
    pthread_mutex_lock(&lock);
    group *g = c->g;
    if (++g->left == g->ranks) {
        for (group **p = &groups; *p; p = &(*p)->next)
            if (*p == g) {
                *p = g->next;
                break;
            }
        free(g);
    }
    pthread_mutex_unlock(&lock);
    free(c);
}

API int ncclCommDestroy(comm *c)
{
    leave(c);
    return SUCCESS;
}

API int ncclCommAbort(comm *c)
{
    leave(c);
    return SUCCESS;
}

API int ncclCommGetAsyncError(comm *c, int *error)
{
    (void)c;
    *error = SUCCESS;
    return SUCCESS;
}

/* One collective: post, compute this rank's result from every post,
 * then write it once all have read. */
static int collective(comm *c, post mine, int type)
{
    if (type != FLOAT32)
        return INVALID_ARGUMENT;
    group *g = c->g;
    size_t out_count = mine.kind == 2 ? mine.count * (size_t)g->ranks : mine.count;
    float *result = malloc((out_count ? out_count : 1) * sizeof *result);
    pthread_mutex_lock(&lock);
    g->posts[c->rank] = mine;
    rendezvous(g);
    int st = result ? SUCCESS : SYSTEM_ERROR;
    for (int r = 0; r < g->ranks; r++) {
        const post *p = &g->posts[r];
        if (p->count != mine.count || p->kind != mine.kind || p->op != mine.op || p->root != mine.root)
            st = INVALID_USAGE;
    }
    for (size_t i = 0; st == SUCCESS && i < mine.count; i++) {
        if (mine.kind == 1) {
            result[i] = g->posts[mine.root].send[i];
        } else if (mine.kind == 2) {
            for (int r = 0; r < g->ranks; r++)
                result[(size_t)r * mine.count + i] = g->posts[r].send[i];
        } else if (mine.kind == 3) { /* reduce-scatter: this rank's block, summed in rank order */
            const size_t at = (size_t)c->rank * mine.count + i;
            float v = g->posts[0].send[at];
            for (int r = 1; r < g->ranks; r++)
                v += g->posts[r].send[at];
            result[i] = v;
        } else {
            float v = g->posts[0].send[i];
            for (int r = 1; r < g->ranks; r++)
                v = mine.op == MAX ? (g->posts[r].send[i] > v ? g->posts[r].send[i] : v) : v + g->posts[r].send[i];
            result[i] = mine.op == AVG ? v / (float)g->ranks : v;
        }
    }
    rendezvous(g);
    pthread_mutex_unlock(&lock);
    if (st == SUCCESS)
        memcpy(mine.recv, result, out_count * sizeof *result);
    free(result);
    return st;
}

API int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, comm *c, void *stream)
{
    (void)stream;
    if (op != SUM && op != MAX && op != AVG)
        return INVALID_ARGUMENT;
    return collective(c, (post){send, recv, count, 0, op, 0}, type);
}

API int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, comm *c, void *stream)
{
    (void)stream;
    return collective(c, (post){send, recv, count, 1, 0, root}, type);
}

API int ncclAllGather(const void *send, void *recv, size_t count, int type, comm *c, void *stream)
{
    (void)stream;
    return collective(c, (post){send, recv, count, 2, 0, 0}, type);
}

API int ncclReduceScatter(const void *send, void *recv, size_t count, int type, int op, comm *c, void *stream)
{
    (void)stream;
    if (op != SUM)
        return INVALID_ARGUMENT;
    return collective(c, (post){send, recv, count, 3, op, 0}, type);
}
