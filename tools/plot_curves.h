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

/* What the data blocks hold: which of the epochs' columns have a value in
 * some row, how many steps have a loss, and each panel's extent ([0] the
 * loss's, [1] the accuracy's; x_min above x_max: no point). */
typedef struct plot_data {
    bool present[6];
    int steps;
    double x_min[2], x_max[2], y_min[2], y_max[2];
} plot_data;

/* The log's rows as gnuplot data blocks $steps and $epochs, written to
 * script: numbers only (gnuplot_number), whatever the file holds. A row
 * whose global_step is not a number is left out, as is a step row without
 * a loss (so the steps' line is unbroken); another value that is not a
 * number is a gap. False with why when csv is not a log or has no row to
 * plot. */
bool plot_curves_data(FILE *script, const char *csv, plot_data *data, char *why, size_t len);

#endif
