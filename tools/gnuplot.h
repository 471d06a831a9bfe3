/* Drawing a PNG with gnuplot (Debian's gnuplot-nox), run as a program:
 * for ug-plot, ug-train --plot and ug-bench report.
 *
 * gnuplot runs shell commands (`!cmd`, system(), backquotes) and expands
 * @macros, so its script holds only text this file vouches for: numbers
 * printed by gnuplot_number, strings through gnuplot_quoted, and the
 * callers' own constant commands. No file name enters it: gnuplot writes
 * the picture to its standard output, a temporary file beside the PNG, and
 * it runs without a shell (posix_spawnp). */
#ifndef UG_TOOLS_GNUPLOT_H
#define UG_TOOLS_GNUPLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct gnuplot {
    FILE *script;             /* the commands go here; gnuplot runs them in gnuplot_end */
    char png[4096];
} gnuplot;

/* Whether gnuplot runs; else why not in why. */
bool gnuplot_available(char *why, size_t len);
/* Starts a script drawing a width x height PNG (its terminal set); write
 * the plot's commands to g->script. */
bool gnuplot_begin(gnuplot *g, const char *png, int width, int height, char *why, size_t len);
/* Ends the script; when drawn is true, runs gnuplot on it into a file
 * beside png and, when gnuplot succeeded and drew a PNG, renames that over
 * png. Nothing is left beside png otherwise, and png is untouched. */
bool gnuplot_end(gnuplot *g, bool drawn, char *why, size_t len);
/* s as a gnuplot string, whatever it holds: in double quotes, each byte
 * but letters, digits, bytes from 128 (UTF-8) and " -_.,:;/()[]+=*?%"
 * written as an octal escape (\047 for '), so the script's text has no
 * quote, backquote (a shell command even inside double quotes), @ (a
 * macro), ! or # of the string's; a control character (bytes below 32,
 * and 127: a newline would end the command) becomes '?'. Not single
 * quotes: gnuplot 5.4 ends a single-quoted string at a doubled quote that
 * follows the opening one or another doubled quote ('''a' is '' then 'a'). */
void gnuplot_quoted(FILE *to, const char *s);
/* v as data: %.9g when finite, else NaN (a gap in the curve). */
void gnuplot_number(FILE *to, double v);

/* A clustered bar chart: value[k * series + d] is series d's bar in
 * cluster k (NaN: none). The names are any text (gnuplot_quoted). */
typedef struct gnuplot_bars {
    const char *title, *xlabel, *ylabel;
    int clusters, series;
    const char *const *cluster_names; /* [clusters]: the x axis's labels */
    const char *const *series_names;  /* [series]: the key's */
    const double *value;              /* [clusters * series] */
} gnuplot_bars;

bool gnuplot_bar_chart(const char *png, int width, int height, const gnuplot_bars *chart, char *why, size_t len);

#endif
