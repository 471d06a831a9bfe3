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

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gnuplot.h"

enum { MAX_FIELDS = 32 };

/* Splits line at commas (in place) into at most MAX_FIELDS fields. */
static int split(char *line, char **fields)
{
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; n < MAX_FIELDS;) {
        fields[n++] = p;
        p = strchr(p, ',');
        if (!p)
            break;
        *p++ = '\0';
    }
    return n;
}

/* The CSV's rows of one kind as a gnuplot data block: x, then the named
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
    FILE *in = fopen(csv, "r");
    if (!in) {
        snprintf(why, len, "cannot read %s: %s", csv, strerror(errno));
        return false;
    }
    char header[1024], *names[MAX_FIELDS];
    int count = fgets(header, sizeof header, in) ? split(header, names) : 0;
    int at[2][7] = {{0}};
    for (int b = 0; b < 2; b++)
        for (int c = 0; c <= blocks[b].count; c++) {
            const char *want = c ? blocks[b].columns[c - 1] : "global_step";
            at[b][c] = -1;
            for (int i = 0; i < count; i++)
                if (strcmp(names[i], want) == 0)
                    at[b][c] = i;
        }
    if (count < 2 || strcmp(names[0], "kind") != 0 || at[0][0] < 0) {
        fclose(in);
        snprintf(why, len, "%s is not a ug-train --csv log (its header has no kind and global_step)", csv);
        return false;
    }
    for (int b = 0; b < 2; b++) {
        fprintf(g, "%s << EOD\n", blocks[b].name);
        rewind(in);
        char line[1024], *fields[MAX_FIELDS];
        if (!fgets(line, sizeof line, in))
            break;
        while (fgets(line, sizeof line, in)) {
            int n = split(line, fields);
            if (strcmp(fields[0], blocks[b].kind) != 0 || at[b][0] >= n || !fields[at[b][0]][0])
                continue;
            for (int c = 0; c <= blocks[b].count; c++) {
                const char *v = at[b][c] >= 0 && at[b][c] < n && fields[at[b][c]][0] ? fields[at[b][c]] : "NaN";
                fprintf(g, "%s%s", c ? " " : "", v);
            }
            fputc('\n', g);
        }
        fprintf(g, "EOD\n");
    }
    fclose(in);
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
