/* ug-plot: draws the loss and accuracy curves of a ug-train --csv log into
 * a PNG with gnuplot (plot_curves.c). */
#include <stdio.h>
#include <string.h>

#include "gnuplot.h"
#include "plot_curves.h"

static void usage(FILE *to)
{
    fprintf(to, "usage: ug-plot LOG.csv [--out FILE.png] [--title TEXT]\n"
                "Draws the loss (per step and per epoch: training, validation, test) and the\n"
                "accuracy (per epoch) of a ug-train --csv log over the batches trained, into\n"
                "FILE.png (default: LOG.png beside the log) with gnuplot (Debian: gnuplot-nox).\n");
}

int main(int argc, char **argv)
{
    const char *csv = NULL, *out = NULL, *title = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (i + 1 < argc && (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o"))) {
            out = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--title")) {
            title = argv[++i];
        } else if (argv[i][0] != '-' && !csv) {
            csv = argv[i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!csv) {
        usage(stderr);
        return 2;
    }
    char png[4096];
    if (!out) {
        const char *dot = strrchr(csv, '.'), *slash = strrchr(csv, '/');
        size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - csv) : strlen(csv);
        snprintf(png, sizeof png, "%.*s.png", (int)stem, csv);
        out = png;
    }
    char why[512];
    if (!gnuplot_available(why, sizeof why) || !plot_curves(csv, out, title ? title : csv, why, sizeof why)) {
        fprintf(stderr, "ug-plot: %s\n", why);
        return 1;
    }
    printf("%s\n", out);
    return 0;
}
