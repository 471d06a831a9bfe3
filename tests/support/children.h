/* A test's children: this program run again with a role of its own.
 * Spawned, never forked to run on: the parent's threads (the devices',
 * the runtimes') make a forked copy unsafe to do more than exec in, and
 * setenv allocates (under AddressSanitizer a forked child once waited
 * forever for an allocator lock that a thread of the parent held). */
#ifndef UG_TESTS_CHILDREN_H
#define UG_TESTS_CHILDREN_H

#include <sys/types.h>

/* Starts /proc/self/exe with args (args[0] its name; NULL-ended), its
 * environment this process's with env's NULL-ended (name, value) pairs
 * applied in order (value NULL: unset), its stdout and stderr written to
 * out and err where they are not NULL. The child's pid, or -1. */
pid_t th_spawn_self(const char *const *args, const char *const *env, const char *out, const char *err);

/* Waits for child, at most seconds (0: as long as it takes; one still
 * running then is killed with SIGALRM, as an alarm would end it): its
 * exit status, 128 + the signal that ended it, or -1 if it was not ours. */
int th_wait_child(pid_t child, int seconds);

#endif
