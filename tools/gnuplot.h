/* Drawing a PNG with gnuplot (Debian's gnuplot-nox), run as a program:
 * for ug-plot, ug-train --plot and ug-bench report. */
#ifndef UG_TOOLS_GNUPLOT_H
#define UG_TOOLS_GNUPLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct gnuplot {
    FILE *pipe;               /* the script goes here */
    char png[4096], tmp[4096];
} gnuplot;

/* Whether gnuplot runs; else why not in why. */
bool gnuplot_available(char *why, size_t len);
/* Starts gnuplot drawing a width x height PNG (its terminal and output
 * set) into a file beside png; write the script to g->pipe. */
bool gnuplot_begin(gnuplot *g, const char *png, int width, int height, char *why, size_t len);
/* Ends the script; when drawn is true and gnuplot succeeded, renames the
 * picture over png. Removes the temporary file otherwise. */
bool gnuplot_end(gnuplot *g, bool drawn, char *why, size_t len);
/* s as a gnuplot string in single quotes. */
void gnuplot_quoted(FILE *to, const char *s);

#endif
