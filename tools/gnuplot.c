/* Drawing a PNG with gnuplot (see gnuplot.h). The script is written to an
 * unnamed temporary file and handed to gnuplot as its standard input once
 * complete, so gnuplot stopping at an error cannot break a pipe under the
 * writer (SIGPIPE); the picture is drawn beside its path and renamed over
 * it, so a reader never sees half of one. */
#define _POSIX_C_SOURCE 200809L /* posix_spawnp, mkstemp, fchmod */
#include "gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Runs gnuplot with args (no shell), its standard input in and output out
 * (-1: /dev/null), its messages on our standard error unless quiet;
 * true when it ran and exited with 0, else false with why. */
static bool run_gnuplot(char *const args[], int in, int out, bool quiet, char *why, size_t len)
{
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0) {
        snprintf(why, len, "cannot run gnuplot: out of memory");
        return false;
    }
    int rc = in >= 0 ? posix_spawn_file_actions_adddup2(&actions, in, STDIN_FILENO)
                     : posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    if (!rc)
        rc = out >= 0 ? posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO)
                      : posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (!rc && quiet)
        rc = posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    if (!rc)
        rc = posix_spawnp(&pid, "gnuplot", &actions, NULL, args, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
        snprintf(why, len, "cannot run gnuplot: %s%s", strerror(rc),
                 rc == ENOENT ? " (Debian: apt-get install gnuplot-nox)" : "");
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            snprintf(why, len, "cannot wait for gnuplot: %s", strerror(errno));
            return false;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, len, "gnuplot failed (%s %d)", WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? WTERMSIG(status) : -1);
        return false;
    }
    return true;
}

bool gnuplot_available(char *why, size_t len)
{
    char *args[] = {"gnuplot", "--version", NULL};
    if (run_gnuplot(args, -1, -1, true, why, len))
        return true;
    snprintf(why, len, "gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
    return false;
}

void gnuplot_quoted(FILE *to, const char *s)
{
    /* Kept as they are: text of no meaning to gnuplot or a shell. */
    static const char plain[] = " -_.,:;/()[]+=*?%";
    fputc('"', to);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c < 0x20 || *c == 0x7f)
            fputc('?', to);
        else if ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c >= 0x80 ||
                 strchr(plain, *c))
            fputc(*c, to);
        else
            fprintf(to, "\\%03o", *c);
    }
    fputc('"', to);
}

void gnuplot_number(FILE *to, double v)
{
    if (isfinite(v))
        fprintf(to, "%.9g", v);
    else
        fputs("NaN", to);
}

bool gnuplot_begin(gnuplot *g, const char *png, int width, int height, char *why, size_t len)
{
    *g = (gnuplot){0};
    if (strlen(png) >= sizeof g->png) {
        snprintf(why, len, "the file name %.64s... is too long", png);
        return false;
    }
    snprintf(g->png, sizeof g->png, "%s", png);
    g->script = tmpfile();
    if (!g->script) {
        snprintf(why, len, "cannot create a temporary file for gnuplot's script: %s", strerror(errno));
        return false;
    }
    /* "set output" without a name: the picture goes to standard output. */
    fprintf(g->script, "set terminal pngcairo size %d,%d font 'sans,11' noenhanced\nset output\n", width, height);
    return true;
}

/* Whether the file open as fd starts as a PNG does. */
static bool png_signature(int fd)
{
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8];
    return pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && !memcmp(head, signature, sizeof head);
}

/* Runs the script into a temporary file beside g->png, then renames it
 * over g->png; removes the temporary file on failure. */
static bool draw(gnuplot *g, char *why, size_t len)
{
    if (fflush(g->script) != 0 || ferror(g->script) || lseek(fileno(g->script), 0, SEEK_SET) != 0) {
        snprintf(why, len, "cannot write gnuplot's script: %s", strerror(errno));
        return false;
    }
    char tmp[sizeof g->png + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", g->png);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(why, len, "cannot create a file beside %s: %s", g->png, strerror(errno));
        return false;
    }
    (void)fchmod(fd, 0644); /* a picture to share, not mkstemp's private file */
    char *args[] = {"gnuplot", NULL};
    char failed[256];
    bool drawn = run_gnuplot(args, fileno(g->script), fd, false, failed, sizeof failed);
    if (!drawn)
        snprintf(why, len, "%s drawing %s (its messages are above)", failed, g->png);
    else if (!(drawn = png_signature(fd)))
        snprintf(why, len, "gnuplot drew no picture into %s", g->png);
    if (close(fd) != 0 && drawn) {
        snprintf(why, len, "cannot write %s: %s", tmp, strerror(errno));
        drawn = false;
    }
    if (drawn && rename(tmp, g->png) != 0) {
        snprintf(why, len, "cannot replace %s: %s", g->png, strerror(errno));
        drawn = false;
    }
    if (!drawn)
        remove(tmp);
    return drawn;
}

bool gnuplot_end(gnuplot *g, bool drawn, char *why, size_t len)
{
    drawn = drawn && draw(g, why, len);
    fclose(g->script);
    g->script = NULL;
    return drawn;
}

bool gnuplot_bar_chart(const char *png, int width, int height, const gnuplot_bars *chart, char *why, size_t len)
{
    if (chart->clusters < 1 || chart->series < 1) {
        snprintf(why, len, "a bar chart of %d clusters of %d bars has nothing to draw", chart->clusters,
                 chart->series);
        return false;
    }
    gnuplot g;
    if (!gnuplot_begin(&g, png, width, height, why, len))
        return false;
    FILE *s = g.script;
    /* The data: the cluster's index, then its bars. The names go to the
     * axis and the key as quoted strings, never into the data block. */
    fprintf(s, "$data << EOD\n");
    for (int k = 0; k < chart->clusters; k++) {
        fprintf(s, "%d", k);
        for (int d = 0; d < chart->series; d++) {
            fputc(' ', s);
            gnuplot_number(s, chart->value[(size_t)k * (size_t)chart->series + (size_t)d]);
        }
        fputc('\n', s);
    }
    fprintf(s, "EOD\nset title ");
    gnuplot_quoted(s, chart->title);
    fprintf(s, "\nset xlabel ");
    gnuplot_quoted(s, chart->xlabel);
    fprintf(s, "\nset ylabel ");
    gnuplot_quoted(s, chart->ylabel);
    fprintf(s, "\nset style data histograms\nset style histogram clustered gap 1\n"
               "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\nset yrange [0:*]\n"
               "set offsets 0, 0, graph 0.1, 0\nset key top right box opaque\nset rmargin 10\n"
               "set xtics rotate by -25 scale 0 (");
    /* A clustered histogram centres cluster k at x = k. */
    for (int k = 0; k < chart->clusters; k++) {
        fprintf(s, "%s", k ? ", " : "");
        gnuplot_quoted(s, chart->cluster_names[k]);
        fprintf(s, " %d", k);
    }
    fprintf(s, ")\nplot ");
    for (int d = 0; d < chart->series; d++) {
        fprintf(s, "%s$data using %d title ", d ? ", " : "", d + 2);
        gnuplot_quoted(s, chart->series_names[d]);
    }
    fprintf(s, "\n");
    return gnuplot_end(&g, true, why, len);
}
