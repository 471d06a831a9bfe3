/* Loss and accuracy curves of a ug-train CSV log (train_options.h's
 * columns) drawn into a PNG by gnuplot (Debian's gnuplot-nox), for
 * ug-plot and ug-train --plot. */
#ifndef UG_TOOLS_PLOT_CURVES_H
#define UG_TOOLS_PLOT_CURVES_H

#include <stdbool.h>
#include <stddef.h>

/* Draws csv's curves into png (replaced atomically), titled title; false
 * with the reason in why. */
bool plot_curves(const char *csv, const char *png, const char *title, char *why, size_t len);

#endif
