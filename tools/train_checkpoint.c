/* ug-train's checkpoints (train_checkpoint.h). */
#define _DEFAULT_SOURCE /* mkstemp */
#include "train_checkpoint.h"
#include "train_options.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The arguments a checkpoint does not keep, as the count to skip:
 * "--resume" (its value follows), "--resume=...", "--resume-override"
 * (which applies to one resume only). */
static int resume_arg(const char *arg)
{
    if (!strcmp(arg, "--resume"))
        return 2;
    return !strncmp(arg, "--resume=", 9) || !strcmp(arg, "--resume-override") ? 1 : 0;
}

char *train_join_args(int argc, char **argv)
{
    size_t bytes = 1;
    for (int i = 1; i < argc; i++) {
        if (strchr(argv[i], '\n'))
            return NULL;
        bytes += strlen(argv[i]) + 1;
    }
    char *text = malloc(bytes), *p = text;
    if (!text)
        return NULL;
    for (int i = 1; i < argc; i++) {
        int skip = resume_arg(argv[i]);
        if (skip) {
            i += skip - 1;
            continue;
        }
        size_t n = strlen(argv[i]);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\n';
    }
    *p = '\0';
    return text;
}

/* Whether a and b name one existing file. */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Appends " ARG" to list (of size len), or "..." once it is full. */
static void list_arg(char *list, size_t len, const char *arg)
{
    size_t used = strlen(list);
    if (used + strlen(arg) + 5 < len)
        snprintf(list + used, len - used, " %s", arg);
    else if (used + 5 < len && strcmp(list + (used >= 4 ? used - 4 : 0), " ...") != 0)
        snprintf(list + used, len - used, " ...");
}

char **train_resume_args(const char *path, int argc, char **argv, int *out_argc)
{
    /* A checkpoint with no parts reads the file's strings only. */
    ug_checkpoint *ck = NULL;
    if (ug_checkpoint_create(&ck) != UG_OK || ug_checkpoint_load(ck, path) != UG_OK) {
        fprintf(stderr, "ug-train: --resume: %s\n", ug_last_error());
        ug_checkpoint_free(ck);
        return NULL;
    }
    const char *saved = ug_checkpoint_string(ck, TRAIN_ARGS_KEY);
    if (!saved) {
        fprintf(stderr, "ug-train: --resume: %s holds no %s: not a checkpoint of ug-train\n", path, TRAIN_ARGS_KEY);
        ug_checkpoint_free(ck);
        return NULL;
    }
    size_t lines = 0, text = strlen(saved) + 1;
    for (const char *p = saved; *p; p++)
        lines += *p == '\n';
    /* One block: the pointers, then a copy of the saved text split in place. */
    size_t count = 1 + lines + (size_t)(argc - 1);
    char **args = malloc((count + 1) * sizeof *args + text);
    if (!args) {
        ug_checkpoint_free(ck);
        return NULL;
    }
    char *copy = (char *)(args + count + 1);
    memcpy(copy, saved, text);
    ug_checkpoint_free(ck);
    char **split = malloc((lines + 1) * sizeof *split);
    if (!split) {
        free(args);
        return NULL;
    }
    size_t n_saved = 0;
    for (char *line = copy, *end; (end = strchr(line, '\n')); line = end + 1) {
        *end = '\0';
        split[n_saved++] = line;
    }
    /* The saved options, less the files and folders they name for
     * writing: a checkpoint (perhaps someone else's) must not decide where
     * this run writes. A saved --save naming the checkpoint being resumed
     * stays: this command line names that file. */
    char reused[1024] = "", dropped[1024] = "";
    int n = 0;
    args[n++] = argv[0];
    for (size_t i = 0; i < n_saved; i++) {
        const char *name = NULL;
        const int span = train_option_output(split[i], &name);
        if (span == 0) {
            args[n++] = split[i];
            list_arg(reused, sizeof reused, split[i]);
            continue;
        }
        const char *value = span == 1 ? strchr(split[i], '=') + 1 : i + 1 < n_saved ? split[i + 1] : "";
        if (!strcmp(name, "save") && same_file(value, path)) {
            args[n++] = split[i];
            list_arg(reused, sizeof reused, split[i]);
            if (span == 2 && i + 1 < n_saved) {
                args[n++] = split[i + 1];
                list_arg(reused, sizeof reused, split[i + 1]);
            }
        } else {
            list_arg(dropped, sizeof dropped, split[i]);
            if (span == 2 && i + 1 < n_saved)
                list_arg(dropped, sizeof dropped, split[i + 1]);
        }
        i += (size_t)span - 1;
    }
    for (int i = 1; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    *out_argc = n;
    free(split);
    printf("resuming %s with its saved options:%s%s\n", path, reused[0] ? reused : " none",
           argc > 1 ? " (those given now take precedence)" : "");
    if (dropped[0])
        printf("not reused:%s (a resume writes only to the files named on its command line: give them again "
               "to write there)\n",
               dropped);
    return args;
}

int train_read_options(int argc, char **argv, train_options *o, char **kept, char ***resumed)
{
    *kept = NULL;
    *resumed = NULL;
    int rc = train_options_parse(argc, argv, o);
    if (!rc && o->resume) {
        const char *path = o->resume;
        *resumed = train_resume_args(path, argc, argv, &argc);
        if (!*resumed)
            return -1;
        argv = *resumed;
        rc = train_options_parse(argc, argv, o);
        o->resume = path;
    }
    if (rc)
        return rc;
    *kept = train_join_args(argc, argv);
    if (!*kept) {
        fprintf(stderr, "ug-train: keeping the options (an argument holds a newline?): %s\n", ug_last_error());
        return -1;
    }
    return TRAIN_OPTIONS_OK;
}

volatile sig_atomic_t train_interrupt_signal;

static void on_interrupt(int sig) { train_interrupt_signal = sig; }

void train_catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends the process */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* the terminal closed: save like Ctrl-C */
}

bool train_check_output_file(const char *option, const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (strlen(path) >= sizeof dir - 32 || !path[0] || path[strlen(path) - 1] == '/') {
        fprintf(stderr, "ug-train: --%s %s: expected a file name\n", option, path);
        return false;
    }
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ug-train: --%s %s: a folder; give a file name in it\n", option, path);
        return false;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ug-train: --%s %s: not a regular file (a device, FIFO or socket), which the new file "
                        "would replace; give the name of a file\n", option, path);
        return false;
    }
    /* A file made and removed again: the one proof that saves can work
     * (permissions, a read-only or missing folder, root's exceptions). */
    char probe[4096 + 32];
    snprintf(probe, sizeof probe, "%s/.ug-train-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        fprintf(stderr, "ug-train: --%s %s: the folder %s cannot take files (%s), so the run does not start%s\n",
                option, path, dir, strerror(errno), errno == ENOENT ? "; create the folder first" : "");
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}
