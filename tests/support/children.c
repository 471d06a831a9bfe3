/* The test's children (see children.h): posix_spawn, which starts the new
 * program without running any of this one's code in the child. */
#define _GNU_SOURCE /* environ */
#include "children.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* environ with the pairs applied: entries of its own, freed by the caller
 * (the strings of environ it keeps are borrowed). */
static char **changed_environment(const char *const *env, char ***owned, int *owned_count)
{
    int count = 0, pairs = 0;
    while (environ[count])
        count++;
    while (env && env[2 * pairs])
        pairs++;
    char **out = calloc((size_t)(count + pairs + 1), sizeof *out);
    *owned = calloc((size_t)pairs + 1, sizeof **owned);
    *owned_count = 0;
    if (!out || !*owned) {
        free(out);
        free(*owned);
        *owned = NULL;
        return NULL;
    }
    memcpy(out, environ, (size_t)count * sizeof *out);
    for (int p = 0; p < pairs; p++) {
        const char *name = env[2 * p], *value = env[2 * p + 1];
        size_t len = strlen(name);
        for (int i = 0; i < count; i++)
            if (!strncmp(out[i], name, len) && out[i][len] == '=') {
                out[i] = out[--count];
                out[count] = NULL;
                break;
            }
        if (!value)
            continue;
        char *entry = malloc(len + strlen(value) + 2);
        if (!entry)
            return out; /* the caller frees what was made */
        strcpy(entry, name);
        entry[len] = '=';
        strcpy(entry + len + 1, value);
        (*owned)[(*owned_count)++] = entry;
        out[count++] = entry;
    }
    return out;
}

pid_t th_spawn_self(const char *const *args, const char *const *env, const char *out, const char *err)
{
    char **owned = NULL;
    int owned_count = 0;
    char **envp = changed_environment(env, &owned, &owned_count);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (out)
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err)
        posix_spawn_file_actions_addopen(&actions, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t child = -1;
    if (!envp || posix_spawn(&child, "/proc/self/exe", &actions, NULL, (char *const *)args, envp) != 0)
        child = -1;
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < owned_count; i++)
        free(owned[i]);
    free(owned);
    free(envp);
    return child;
}

int th_wait_child(pid_t child, int seconds)
{
    if (child <= 0)
        return -1;
    int status = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pid_t got = waitpid(child, &status, seconds > 0 ? WNOHANG : 0);
        if (got == child)
            break;
        if (got < 0)
            return -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= seconds) {
            kill(child, SIGALRM);
            if (waitpid(child, &status, 0) != child)
                return -1;
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
