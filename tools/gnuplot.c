/* Drawing a PNG with gnuplot (see gnuplot.h). The picture is drawn beside
 * its path and renamed over it, so a reader never sees half of one. */
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp */
#include "gnuplot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool gnuplot_available(char *why, size_t len)
{
    int rc = system("gnuplot --version > /dev/null 2>&1");
    if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
        return true;
    snprintf(why, len, "gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
    return false;
}

void gnuplot_quoted(FILE *to, const char *s)
{
    fputc('\'', to);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', to);
        fputc(*s, to);
    }
    fputc('\'', to);
}

bool gnuplot_begin(gnuplot *g, const char *png, int width, int height, char *why, size_t len)
{
    *g = (gnuplot){0};
    snprintf(g->png, sizeof g->png, "%s", png);
    if ((size_t)snprintf(g->tmp, sizeof g->tmp, "%s.tmp.XXXXXX", png) >= sizeof g->tmp) {
        snprintf(why, len, "the file name %s is too long", png);
        return false;
    }
    int fd = mkstemp(g->tmp);
    if (fd < 0) {
        snprintf(why, len, "cannot create a file beside %s: %s", png, strerror(errno));
        return false;
    }
    (void)fchmod(fd, 0644); /* a picture to share, not mkstemp's private file */
    close(fd);
    g->pipe = popen("gnuplot 2>&1", "w");
    if (!g->pipe) {
        snprintf(why, len, "cannot run gnuplot: %s", strerror(errno));
        remove(g->tmp);
        return false;
    }
    fprintf(g->pipe, "set terminal pngcairo size %d,%d font 'sans,11' noenhanced\nset output ", width, height);
    gnuplot_quoted(g->pipe, g->tmp);
    fprintf(g->pipe, "\n");
    return true;
}

bool gnuplot_end(gnuplot *g, bool drawn, char *why, size_t len)
{
    if (drawn)
        fprintf(g->pipe, "set output\n");
    int rc = pclose(g->pipe);
    g->pipe = NULL;
    if (drawn && (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)) {
        snprintf(why, len, "gnuplot failed drawing %s (its messages are above)", g->png);
        drawn = false;
    } else if (drawn && rename(g->tmp, g->png) != 0) {
        snprintf(why, len, "cannot replace %s: %s", g->png, strerror(errno));
        drawn = false;
    }
    if (!drawn)
        remove(g->tmp);
    return drawn;
}
