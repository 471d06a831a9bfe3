/* Loss and accuracy curves through gnuplot (see plot_curves.h).
 *
 * Two panels side by side, both over the run's batches (global_step): the
 * loss (each logged step thin, each epoch's training, validation and test
 * loss as points joined by lines) and the accuracy in percent (each
 * epoch's training, validation and test accuracy). The CSV's columns are
 * found by name, so logs of older versions plot too, and its step and
 * epoch rows go to gnuplot as two data blocks of numbers parsed here (a
 * series is a line only when its points are consecutive there). A run
 * without validation or test sets has no such series, in the plot or its
 * key. */
#include "plot_curves.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "csv_table.h"
#include "gnuplot.h"

/* The log's rows of one kind as a gnuplot data block: x, then the named
 * columns (NaN where empty, absent or not a number). A step row without a
 * loss (a trainer's log_every leaves the loss of the steps between unread)
 * is left out of its block: a NaN there would break the per-step line. */
typedef struct block {
    const char *name, *kind;
    const char *columns[6];
    int count;
} block;

static const block blocks[] = {
    {"$steps", "step", {"train_loss"}, 1},
    {"$epochs", "epoch", {"train_loss", "val_loss", "test_loss", "train_accuracy", "val_accuracy", "test_accuracy"}, 6},
};

enum { LOSS_PANEL, ACCURACY_PANEL };

/* Widens panel's extent to hold the point (x, y). */
static void extend(plot_data *d, int panel, double x, double y)
{
    if (d->x_min[panel] > d->x_max[panel]) {
        d->x_min[panel] = d->x_max[panel] = x;
        d->y_min[panel] = d->y_max[panel] = y;
        return;
    }
    d->x_min[panel] = fmin(d->x_min[panel], x);
    d->x_max[panel] = fmax(d->x_max[panel], x);
    d->y_min[panel] = fmin(d->y_min[panel], y);
    d->y_max[panel] = fmax(d->y_max[panel], y);
}

bool plot_curves_data(FILE *g, const char *csv, plot_data *d, char *why, size_t len)
{
    *d = (plot_data){.x_min = {1, 1}, .x_max = {0, 0}}; /* min above max: no point yet */
    csv_table t;
    if (!csv_read(csv, &t, why, len))
        return false;
    const int kind = csv_column(&t, "kind"), x = csv_column(&t, "global_step");
    if (kind != 0 || x < 0) {
        csv_free(&t);
        snprintf(why, len, "%s is not a ug-train --csv log (its header has no kind and global_step)", csv);
        return false;
    }
    int rows = 0;
    for (int b = 0; b < 2; b++) {
        int at[6];
        for (int c = 0; c < blocks[b].count; c++)
            at[c] = csv_column(&t, blocks[b].columns[c]);
        fprintf(g, "%s << EOD\n", blocks[b].name);
        for (int r = 0; r < t.rows; r++) {
            char **row = t.cells[r];
            double step, values[6];
            /* Only the values parsed here reach gnuplot: a cell's text
             * could end the data block ("EOD") and run commands after it. */
            if (strcmp(row[kind], blocks[b].kind) != 0 || !csv_number(row[x], &step) || isnan(step))
                continue;
            for (int c = 0; c < blocks[b].count; c++)
                if (at[c] < 0 || !csv_number(row[at[c]], &values[c]))
                    values[c] = NAN;
            if (b == 0 && isnan(values[0]))
                continue;
            gnuplot_number(g, step);
            for (int c = 0; c < blocks[b].count; c++) {
                fputc(' ', g);
                gnuplot_number(g, values[c]);
                if (isnan(values[c]))
                    continue;
                if (b == 1)
                    d->present[c] = true;
                extend(d, b == 0 || c < 3 ? LOSS_PANEL : ACCURACY_PANEL, step, values[c]);
            }
            fputc('\n', g);
            d->steps += b == 0;
            rows++;
        }
        fprintf(g, "EOD\n");
    }
    csv_free(&t);
    if (!rows)
        snprintf(why, len, "%s has no step or epoch row with a numeric global_step: nothing to plot", csv);
    return rows > 0;
}

/* An axis's range from lo to hi: gnuplot's own, unless the points share
 * one value (one epoch's), which gnuplot would widen with a warning on
 * standard error; then one unit either side. */
static void axis_range(FILE *g, char axis, double lo, double hi)
{
    if (lo < hi) {
        fprintf(g, "set autoscale %c\n", axis);
        return;
    }
    fprintf(g, "set %crange [", axis);
    gnuplot_number(g, lo - 1.0);
    fputc(':', g);
    gnuplot_number(g, hi + 1.0);
    fprintf(g, "]\n");
}

/* The epochs' series of a panel whose columns start at data column first
 * (2: loss, 5: accuracy), where the log has them: training's (title
 * training_title), validation's and test's, after the steps' line (with
 * a leading separator) when there is one. */
static void epoch_series(FILE *g, int first, const bool present[6], bool after, const char *training_title)
{
    static const char *const styles[3] = {"pt 7 lc rgb '#08519c'", "pt 5 lc rgb '#e6550d'", "pt 9 lc rgb '#31a354'"};
    const char *titles[3] = {training_title, "validation", "test"};
    for (int s = 0; s < 3; s++) {
        if (!present[first - 2 + s])
            continue;
        fprintf(g, "%s$epochs using 1:%d with linespoints lw 2 %s title '%s'", after ? ", \\\n  " : "",
                first + s, styles[s], titles[s]);
        after = true;
    }
    fputc('\n', g);
}

/* A panel of no point (no epoch has ended yet): its frame and a note,
 * with no series for gnuplot to warn of. */
static void empty_panel(FILE *g, const char *note)
{
    fprintf(g, "set xrange [0:1]\nset yrange [0:1]\nset label 1 '%s' at graph 0.5,0.5 center\n"
               "plot NaN notitle\nunset label 1\n", note);
}

static void script(FILE *g, const char *title, const plot_data *d)
{
    fprintf(g, "set key top right box opaque\nset grid\nset xlabel 'step (batches trained)'\n"
               "set multiplot layout 1,2 title ");
    gnuplot_quoted(g, title);
    fprintf(g, "\nset title 'loss'\nset ylabel 'loss'\n");
    if (d->x_min[LOSS_PANEL] > d->x_max[LOSS_PANEL]) {
        empty_panel(g, "no loss logged yet");
    } else {
        axis_range(g, 'x', d->x_min[LOSS_PANEL], d->x_max[LOSS_PANEL]);
        axis_range(g, 'y', d->y_min[LOSS_PANEL], d->y_max[LOSS_PANEL]);
        fprintf(g, "plot ");
        if (d->steps)
            fprintf(g, "$steps using 1:2 with lines lw 1 lc rgb '#9ecae1' title 'training, per step'");
        epoch_series(g, 2, d->present, d->steps > 0, "training, per epoch");
    }
    fprintf(g, "set title 'accuracy'\nset ylabel 'accuracy (%%)'\nset key bottom right\n");
    if (d->x_min[ACCURACY_PANEL] > d->x_max[ACCURACY_PANEL]) {
        empty_panel(g, "no epoch has ended yet");
    } else {
        axis_range(g, 'x', d->x_min[ACCURACY_PANEL], d->x_max[ACCURACY_PANEL]);
        axis_range(g, 'y', d->y_min[ACCURACY_PANEL], d->y_max[ACCURACY_PANEL]);
        fprintf(g, "plot ");
        epoch_series(g, 5, d->present, false, "training");
    }
    fprintf(g, "unset multiplot\n");
}

bool plot_curves(const char *csv, const char *png, const char *title, char *why, size_t len)
{
    gnuplot g;
    if (!gnuplot_begin(&g, png, 1200, 500, why, len))
        return false;
    plot_data d;
    bool read = plot_curves_data(g.script, csv, &d, why, len);
    if (read)
        script(g.script, title, &d);
    return gnuplot_end(&g, read, why, len) && read;
}
