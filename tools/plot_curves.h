/* Loss and accuracy curves of a ug-train CSV log (train_options.h's
 * columns) drawn into a PNG by gnuplot (Debian's gnuplot-nox), for
 * ug-plot and ug-train --plot. */
#ifndef UG_TOOLS_PLOT_CURVES_H
#define UG_TOOLS_PLOT_CURVES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Draws csv's curves into png (replaced atomically), titled title (any
 * text); false with the reason in why, png untouched. */
bool plot_curves(const char *csv, const char *png, const char *title, char *why, size_t len);

/* The log's rows as gnuplot data blocks $steps and $epochs, written to
 * script: numbers only (gnuplot_number), whatever the file holds. A row
 * whose global_step is not a number is left out, a value that is not one
 * is a gap. present[c]: whether the epochs' column c has a value in some
 * row. False with why when csv is not a log or has no row to plot. */
bool plot_curves_data(FILE *script, const char *csv, bool present[6], char *why, size_t len);

#endif
