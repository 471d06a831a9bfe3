/* ug-bench compare A.json B.json: the figures two reports (ug-bench
 * report) share, side by side with their ratio B / A: two machines, two
 * vendors, two commits. By default the headline figures (GFLOP/s, step
 * times, samples/s); --all prints every one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct figure {
    char name[320];
    double value;
} figure;

typedef struct report {
    figure *figures;
    int count;
    char label[160];
} report;

/* Reads the lines ug-bench report writes, one figure each; false when the
 * file is not such a report. */
static bool read_report(const char *path, report *r)
{
    *r = (report){0};
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ug-bench compare: cannot read %s\n", path);
        return false;
    }
    char line[1024];
    bool header = fgets(line, sizeof line, f) && !strncmp(line, "{\"unigrad_report\": 1", 20);
    int cap = 0;
    while (header && fgets(line, sizeof line, f)) {
        char *label = strstr(line, "\"label\": \"");
        if (label)
            sscanf(label + 10, "%159[^\"]", r->label);
        figure x;
        if (sscanf(line, " {\"name\": \"%319[^\"]\", \"value\": %lf}", x.name, &x.value) != 2 || !isfinite(x.value))
            continue;
        if (r->count == cap) {
            cap = cap ? cap * 2 : 256;
            figure *grown = realloc(r->figures, (size_t)cap * sizeof *grown);
            if (!grown)
                break;
            r->figures = grown;
        }
        r->figures[r->count++] = x;
    }
    fclose(f);
    if (!header || !r->count) {
        fprintf(stderr, "ug-bench compare: %s is not a report of ug-bench report (no figures)\n", path);
        free(r->figures);
        return false;
    }
    return true;
}

/* Four significant digits, but whole numbers from 1000 up. */
static const char *number(char *out, size_t len, double v)
{
    snprintf(out, len, fabs(v) >= 1000 ? "%.0f" : "%.4g", v);
    return out;
}

static bool headline(const char *name)
{
    static const char *const ends[] = {"/gflops", "/step_ms", "/ug_step_ms", "/samples_per_s", NULL};
    size_t n = strlen(name);
    for (int i = 0; ends[i]; i++) {
        size_t e = strlen(ends[i]);
        if (n > e && !strcmp(name + n - e, ends[i]))
            return true;
    }
    return false;
}

int bench_compare(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    bool all = false;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--all"))
            all = true;
        else if (!strcmp(argv[i], "--help") || argv[i][0] == '-' || n == 2) {
            FILE *to = strcmp(argv[i], "--help") ? stderr : stdout;
            fprintf(to, "usage: ug-bench compare A.json B.json [--all]\n"
                        "Prints the figures two reports of ug-bench report share, with B / A; the\n"
                        "headline ones (GFLOP/s, step times, samples/s) unless --all.\n");
            return to == stdout ? 0 : 2;
        } else {
            paths[n++] = argv[i];
        }
    }
    if (n != 2) {
        fprintf(stderr, "usage: ug-bench compare A.json B.json [--all]\n");
        return 2;
    }
    report a, b;
    if (!read_report(paths[0], &a))
        return 2;
    if (!read_report(paths[1], &b)) {
        free(a.figures);
        return 2;
    }
    printf("A: %s%s%s\nB: %s%s%s\n", paths[0], a.label[0] ? " - " : "", a.label, paths[1], b.label[0] ? " - " : "",
           b.label);
    /* The names whole, as wide as the longest printed: within 80 columns
     * for the names of one device and precision in f32. */
    int width = 6;
    for (int i = 0; i < a.count; i++)
        if (all || headline(a.figures[i].name))
            width = (int)strlen(a.figures[i].name) > width ? (int)strlen(a.figures[i].name) : width;
    printf("%-*s %9s %9s %7s\n", width, "figure", "A", "B", "B / A");
    int shared = 0;
    for (int i = 0; i < a.count; i++) {
        if (!all && !headline(a.figures[i].name))
            continue;
        for (int k = 0; k < b.count; k++)
            if (!strcmp(a.figures[i].name, b.figures[k].name)) {
                double x = a.figures[i].value, y = b.figures[k].value;
                char ratio[16] = "-";
                if (x != 0)
                    snprintf(ratio, sizeof ratio, "%.3f", y / x);
                char ax[24], bx[24];
                printf("%-*s %9s %9s %7s\n", width, a.figures[i].name, number(ax, sizeof ax, x),
                       number(bx, sizeof bx, y), ratio);
                shared++;
                break;
            }
    }
    if (!shared)
        printf("the two reports share no %sfigure\n", all ? "" : "headline ");
    free(a.figures);
    free(b.figures);
    return 0;
}
