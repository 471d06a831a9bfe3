/* ug-bench compare A.json B.json: the figures two reports (ug-bench
 * report) share, side by side with their ratio B / A: two machines, two
 * vendors, two commits. By default the headline figures (GFLOP/s, step
 * times, samples/s); --all prints every one.
 *
 * A's figures are looked up in B's sorted by name (binary search), so a
 * comparison takes n log n, not n^2, for reports of many figures. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct figure {
    char name[320];
    double value;
    int order;                /* its place in the file: the first of equal names wins */
} figure;

typedef struct report {
    figure *figures;
    int count;
    char label[160];
} report;

/* Reads the lines ug-bench report writes, one figure each; false with why
 * when the file is not such a report. */
static bool read_report(const char *path, report *r, char *why, size_t len)
{
    *r = (report){0};
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, len, "cannot read %s", path);
        return false;
    }
    char line[1024];
    bool header = fgets(line, sizeof line, f) && !strncmp(line, "{\"unigrad_report\": 1", 20);
    int cap = 0;
    bool full = false;
    while (header && !full && fgets(line, sizeof line, f)) {
        char *label = strstr(line, "\"label\": \"");
        if (label)
            sscanf(label + 10, "%159[^\"]", r->label);
        figure x = {0};
        if (sscanf(line, " {\"name\": \"%319[^\"]\", \"value\": %lf}", x.name, &x.value) != 2 || !isfinite(x.value))
            continue;
        if (r->count == cap) {
            figure *grown = cap <= INT_MAX / 2 ? realloc(r->figures, (size_t)(cap ? cap * 2 : 256) * sizeof *grown)
                                               : NULL;
            if (!grown) {
                full = true;
                break;
            }
            r->figures = grown;
            cap = cap ? cap * 2 : 256;
        }
        x.order = r->count;
        r->figures[r->count++] = x;
    }
    fclose(f);
    if (full || !header || !r->count) {
        if (full)
            snprintf(why, len, "out of memory reading %s (%d figures)", path, r->count);
        else
            snprintf(why, len, "%s is not a report of ug-bench report (no figures)", path);
        free(r->figures);
        *r = (report){0};
        return false;
    }
    return true;
}

static int by_name(const void *a, const void *b)
{
    const figure *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* sorted (by_name) has the figure named name: the first of the file's
 * figures of that name, or NULL. */
static const figure *find_figure(const figure *sorted, int count, const char *name)
{
    int low = 0, high = count; /* the first at or after name lies in [low, high] */
    while (low < high) {
        int mid = low + (high - low) / 2;
        if (strcmp(sorted[mid].name, name) < 0)
            low = mid + 1;
        else
            high = mid;
    }
    return low < count && !strcmp(sorted[low].name, name) ? &sorted[low] : NULL;
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

/* Prints A's figures (headline ones unless all) that B has too, in A's
 * order; sorts b's figures. Returns how many. */
static int print_shared(FILE *to, const report *a, report *b, bool all)
{
    qsort(b->figures, (size_t)b->count, sizeof *b->figures, by_name);
    /* The names whole, as wide as the longest printed: within 80 columns
     * for the names of one device and precision in f32. */
    int width = 6;
    for (int i = 0; i < a->count; i++)
        if (all || headline(a->figures[i].name))
            width = (int)strlen(a->figures[i].name) > width ? (int)strlen(a->figures[i].name) : width;
    fprintf(to, "%-*s %9s %9s %7s\n", width, "figure", "A", "B", "B / A");
    int shared = 0;
    for (int i = 0; i < a->count; i++) {
        const figure *x = &a->figures[i], *y = NULL;
        if ((!all && !headline(x->name)) || !(y = find_figure(b->figures, b->count, x->name)))
            continue;
        char ratio[16] = "-", ax[24], bx[24];
        if (x->value != 0)
            snprintf(ratio, sizeof ratio, "%.3f", y->value / x->value);
        fprintf(to, "%-*s %9s %9s %7s\n", width, x->name, number(ax, sizeof ax, x->value),
                number(bx, sizeof bx, y->value), ratio);
        shared++;
    }
    return shared;
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
    char why[512];
    if (!read_report(paths[0], &a, why, sizeof why)) {
        fprintf(stderr, "ug-bench compare: %s\n", why);
        return 2;
    }
    if (!read_report(paths[1], &b, why, sizeof why)) {
        fprintf(stderr, "ug-bench compare: %s\n", why);
        free(a.figures);
        return 2;
    }
    printf("A: %s%s%s\nB: %s%s%s\n", paths[0], a.label[0] ? " - " : "", a.label, paths[1], b.label[0] ? " - " : "",
           b.label);
    if (!print_shared(stdout, &a, &b, all))
        printf("the two reports share no %sfigure\n", all ? "" : "headline ");
    free(a.figures);
    free(b.figures);
    return 0;
}
