/* Loss and accuracy curves through gnuplot (see plot_curves.h).
 *
 * Two panels side by side, both over the run's batches (global_step): the
 * loss (each logged step thin, each epoch's training, validation and test
 * loss as points joined by lines) and the accuracy in percent (each
 * epoch's training, validation and test accuracy). The CSV's columns are
 * found by name, so logs of older versions plot too, and its step and
 * epoch rows go to gnuplot as two data blocks (a series is a line only
 * when its points are consecutive there). */
#include "plot_curves.h"

#include <stdio.h>
#include <string.h>

#include "csv_table.h"
#include "gnuplot.h"

/* The log's rows of one kind as a gnuplot data block: x, then the named
 * columns ("NaN" where empty or absent). */
typedef struct block {
    const char *name, *kind;
    const char *columns[6];
    int count;
} block;

static const block blocks[] = {
    {"$steps", "step", {"train_loss"}, 1},
    {"$epochs", "epoch", {"train_loss", "val_loss", "test_loss", "train_accuracy", "val_accuracy", "test_accuracy"}, 6},
};

static bool data_blocks(FILE *g, const char *csv, char *why, size_t len)
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
    for (int b = 0; b < 2; b++) {
        fprintf(g, "%s << EOD\n", blocks[b].name);
        for (int r = 0; r < t.rows; r++) {
            char **row = t.cells[r];
            if (strcmp(row[kind], blocks[b].kind) != 0 || !row[x][0])
                continue;
            fprintf(g, "%s", row[x]);
            for (int c = 0; c < blocks[b].count; c++) {
                int at = csv_column(&t, blocks[b].columns[c]);
                fprintf(g, " %s", at >= 0 && row[at][0] ? row[at] : "NaN");
            }
            fputc('\n', g);
        }
        fprintf(g, "EOD\n");
    }
    csv_free(&t);
    return true;
}

static void script(FILE *g, const char *title)
{
    fprintf(g, "set key top right box opaque\nset grid\nset xlabel 'step (batches trained)'\n"
               "set multiplot layout 1,2 title ");
    gnuplot_quoted(g, title);
    fprintf(g, "\nset title 'loss'\nset ylabel 'loss'\n"
               "plot $steps using 1:2 with lines lw 1 lc rgb '#9ecae1' title 'training, per step', \\\n"
               "  $epochs using 1:2 with linespoints lw 2 pt 7 lc rgb '#08519c' title 'training, per epoch', \\\n"
               "  $epochs using 1:3 with linespoints lw 2 pt 5 lc rgb '#e6550d' title 'validation', \\\n"
               "  $epochs using 1:4 with linespoints lw 2 pt 9 lc rgb '#31a354' title 'test'\n"
               "set title 'accuracy'\nset ylabel 'accuracy (%%)'\nset key bottom right\n"
               "plot $epochs using 1:5 with linespoints lw 2 pt 7 lc rgb '#08519c' title 'training', \\\n"
               "  $epochs using 1:6 with linespoints lw 2 pt 5 lc rgb '#e6550d' title 'validation', \\\n"
               "  $epochs using 1:7 with linespoints lw 2 pt 9 lc rgb '#31a354' title 'test'\n"
               "unset multiplot\n");
}

bool plot_curves(const char *csv, const char *png, const char *title, char *why, size_t len)
{
    gnuplot g;
    if (!gnuplot_begin(&g, png, 1200, 500, why, len))
        return false;
    bool read = data_blocks(g.pipe, csv, why, len);
    if (read)
        script(g.pipe, title);
    return gnuplot_end(&g, read, why, len) && read;
}
