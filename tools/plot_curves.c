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
 * columns (NaN where empty, absent or not a number). */
typedef struct block {
    const char *name, *kind;
    const char *columns[6];
    int count;
} block;

static const block blocks[] = {
    {"$steps", "step", {"train_loss"}, 1},
    {"$epochs", "epoch", {"train_loss", "val_loss", "test_loss", "train_accuracy", "val_accuracy", "test_accuracy"}, 6},
};

bool plot_curves_data(FILE *g, const char *csv, bool present[6], char *why, size_t len)
{
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
            double step, value;
            /* Only the values parsed here reach gnuplot: a cell's text
             * could end the data block ("EOD") and run commands after it. */
            if (strcmp(row[kind], blocks[b].kind) != 0 || !csv_number(row[x], &step) || isnan(step))
                continue;
            gnuplot_number(g, step);
            for (int c = 0; c < blocks[b].count; c++) {
                if (at[c] < 0 || !csv_number(row[at[c]], &value))
                    value = NAN;
                fputc(' ', g);
                gnuplot_number(g, value);
                if (b == 1)
                    present[c] = present[c] || !isnan(value);
            }
            fputc('\n', g);
            rows++;
        }
        fprintf(g, "EOD\n");
    }
    csv_free(&t);
    if (!rows)
        snprintf(why, len, "%s has no step or epoch row with a numeric global_step: nothing to plot", csv);
    return rows > 0;
}

/* The epochs' validation and test series of a panel whose columns start
 * at data column first (2: loss, 5: accuracy), where the log has them. */
static void held_out_series(FILE *g, int first, const bool present[6])
{
    if (present[first - 1])
        fprintf(g, ", \\\n  $epochs using 1:%d with linespoints lw 2 pt 5 lc rgb '#e6550d' title 'validation'",
                first + 1);
    if (present[first])
        fprintf(g, ", \\\n  $epochs using 1:%d with linespoints lw 2 pt 9 lc rgb '#31a354' title 'test'", first + 2);
    fputc('\n', g);
}

static void script(FILE *g, const char *title, const bool present[6])
{
    fprintf(g, "set key top right box opaque\nset grid\nset xlabel 'step (batches trained)'\n"
               "set multiplot layout 1,2 title ");
    gnuplot_quoted(g, title);
    fprintf(g, "\nset title 'loss'\nset ylabel 'loss'\n"
               "plot $steps using 1:2 with lines lw 1 lc rgb '#9ecae1' title 'training, per step', \\\n"
               "  $epochs using 1:2 with linespoints lw 2 pt 7 lc rgb '#08519c' title 'training, per epoch'");
    held_out_series(g, 2, present);
    fprintf(g, "set title 'accuracy'\nset ylabel 'accuracy (%%)'\nset key bottom right\n"
               "plot $epochs using 1:5 with linespoints lw 2 pt 7 lc rgb '#08519c' title 'training'");
    held_out_series(g, 5, present);
    fprintf(g, "unset multiplot\n");
}

bool plot_curves(const char *csv, const char *png, const char *title, char *why, size_t len)
{
    gnuplot g;
    if (!gnuplot_begin(&g, png, 1200, 500, why, len))
        return false;
    bool present[6] = {false};
    bool read = plot_curves_data(g.script, csv, present, why, len);
    if (read)
        script(g.script, title, present);
    return gnuplot_end(&g, read, why, len) && read;
}
