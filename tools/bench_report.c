/* ug-bench report: gemm, train-mlp, train-cnn and conv on every device (or
 * one), their CSV tables kept, every figure in one JSON file, plots drawn
 * with gnuplot, and a Markdown report with the machine's description.
 * ug-bench compare (bench_compare.c) puts two reports' figures side by side. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include <cblas.h>

#include "bench.h"
#include "csv_table.h"
#include "gnuplot.h"
#include "json_string.h"

/* A benchmark of the report: its subcommand, the columns that name a row
 * (the others are figures), and the arguments it runs with. */
typedef struct section {
    const char *name;                /* the subcommand, the CSV's and the figures' prefix */
    int (*run)(int argc, char **argv);
    const char *keys[4];             /* the row's name, in this order */
} section;

static const section sections[] = {
    {"gemm", bench_gemm, {"device", "product"}},
    {"train-mlp", bench_train_mlp, {"device", "batch", "mode"}},
    {"train-cnn", bench_train_cnn, {"device", "batch", "mode"}},
    {"conv", bench_conv, {"device", "layer", "batch"}},
};
enum { SECTIONS = sizeof sections / sizeof sections[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: ug-bench report --out DIR [--device NAME] [--seconds S] [--label TEXT]\n"
                 "Runs gemm (--quick), train-mlp, train-cnn (batch 64) and conv (batch 64) on\n"
                 "every device (or NAME) and writes into DIR: each one's CSV, report.json with\n"
                 "every figure and the machine's description, PNG plots (gnuplot) and\n"
                 "report.md.\n"
                 "--seconds sets each timing's length (default 1); --label names the report (a\n"
                 "commit, a machine). ug-bench compare A.json B.json prints the ratios of two.\n");
}

/* ---- the machine ---- */

typedef struct machine {
    char cpu[160], kernel[400], compiler[96], openblas[160], label[160], when[32];
    int threads;
} machine;

static void describe_machine(machine *m, const char *label)
{
    snprintf(m->cpu, sizeof m->cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            snprintf(m->cpu, sizeof m->cpu, "%.*s", (int)strcspn(colon + 2, "\n"), colon + 2);
            break;
        }
    }
    if (f)
        fclose(f);
    m->threads = bench_cpu_threads();
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(m->kernel, sizeof m->kernel, "%s %s %s", u.sysname, u.release, u.machine);
    snprintf(m->compiler, sizeof m->compiler, "%s", __VERSION__);
    snprintf(m->openblas, sizeof m->openblas, "%s", openblas_get_config());
    snprintf(m->label, sizeof m->label, "%s", label ? label : "");
    time_t now = time(NULL);
    strftime(m->when, sizeof m->when, "%Y-%m-%d %H:%M:%S", localtime(&now));
}

/* ---- figures ---- */

/* Whether text is a whole number or decimal (a figure, not a name). */
static bool numeric(const char *text, double *value)
{
    char *end = NULL;
    *value = strtod(text, &end);
    return *text && end && !*end && isfinite(*value);
}

/* A row's name: section/key1/key2/... */
static void row_name(const section *s, const csv_table *t, int r, char *out, size_t len)
{
    int n = snprintf(out, len, "%s", s->name);
    for (int k = 0; k < 4 && s->keys[k] && n < (int)len; k++) {
        int c = csv_column(t, s->keys[k]);
        n += snprintf(out + n, len - (size_t)n, "/%s", c >= 0 ? t->cells[r][c] : "-");
    }
}

static bool is_key(const section *s, const char *column)
{
    for (int k = 0; k < 4 && s->keys[k]; k++)
        if (!strcmp(s->keys[k], column))
            return true;
    return false;
}

/* Every numeric cell of the section's table, one JSON line each. */
static int write_figures(FILE *json, const section *s, const csv_table *t, bool *first)
{
    int count = 0;
    for (int r = 0; r < t->rows; r++) {
        char name[256];
        row_name(s, t, r, name, sizeof name);
        for (int c = 0; c < t->columns; c++) {
            double v = 0;
            if (is_key(s, t->header[c]) || !numeric(t->cells[r][c], &v))
                continue;
            char figure[320];
            snprintf(figure, sizeof figure, "%s/%s", name, t->header[c]);
            fprintf(json, "%s\n  {\"name\": ", *first ? "" : ",");
            json_string(json, figure);
            fprintf(json, ", \"value\": %.10g}", v);
            *first = false;
            count++;
        }
    }
    return count;
}

/* ---- plots ---- */

/* Row r's cluster in a chart: its keys but the device and mode ("square
 * 2048", "b64"). */
static void cluster_of(const section *s, const csv_table *t, int r, char *out, size_t len)
{
    out[0] = '\0';
    for (int k = 0, n = 0; k < 4 && s->keys[k]; k++) {
        int c = csv_column(t, s->keys[k]);
        if (c < 0 || !strcmp(s->keys[k], "device") || !strcmp(s->keys[k], "mode"))
            continue;
        n += snprintf(out + n, len - (size_t)n, "%s%s%s", n ? " " : "", !strcmp(s->keys[k], "batch") ? "b" : "",
                      t->cells[r][c]);
    }
}

/* A clustered bar chart of one figure column: a cluster per row name less
 * its device, a bar per device. The names and the figures (parsed here)
 * reach gnuplot through gnuplot_bar_chart, never the table's text. */
static bool bar_chart(const char *png, const char *title, const char *xlabel, const char *ylabel, const section *s,
                      const csv_table *t, const char *column, const char *only_mode, char *why, size_t len)
{
    int value = csv_column(t, column), device = csv_column(t, "device"), mode = csv_column(t, "mode");
    if (value < 0 || device < 0) {
        snprintf(why, len, "the %s table has no %s column", s->name, column);
        return false;
    }
    /* Distinct devices and clusters, in order of appearance; a bar is the
     * last such row's figure. */
    enum { MAX = 64 };
    char devices[MAX][48], clusters[MAX][96];
    const char *device_names[MAX], *cluster_names[MAX];
    double bars[MAX * MAX];
    for (int i = 0; i < MAX * MAX; i++)
        bars[i] = NAN;
    int nd = 0, nc = 0;
    for (int r = 0; r < t->rows; r++) {
        if (only_mode && mode >= 0 && strcmp(t->cells[r][mode], only_mode))
            continue;
        char cluster[96];
        cluster_of(s, t, r, cluster, sizeof cluster);
        int d = 0, k = 0;
        while (d < nd && strcmp(devices[d], t->cells[r][device]))
            d++;
        while (k < nc && strcmp(clusters[k], cluster))
            k++;
        if (d == nd && nd < MAX) {
            snprintf(devices[nd], sizeof devices[0], "%s", t->cells[r][device]);
            device_names[nd++] = devices[d];
        }
        if (k == nc && nc < MAX) {
            snprintf(clusters[nc], sizeof clusters[0], "%s", cluster);
            cluster_names[nc++] = clusters[k];
        }
        double figure;
        if (d < nd && k < nc && csv_number(t->cells[r][value], &figure) && !isnan(figure))
            bars[k * MAX + d] = figure;
    }
    if (!nd || !nc) {
        snprintf(why, len, "the %s table has no rows to plot", s->name);
        return false;
    }
    double value_of[MAX * MAX];
    for (int k = 0; k < nc; k++)
        for (int d = 0; d < nd; d++)
            value_of[k * nd + d] = bars[k * MAX + d];
    const gnuplot_bars chart = {
        .title = title, .xlabel = xlabel, .ylabel = ylabel, .clusters = nc, .series = nd,
        .cluster_names = cluster_names, .series_names = device_names, .value = value_of,
    };
    return gnuplot_bar_chart(png, 1000, 500, &chart, why, len);
}

/* ---- the report ---- */

static void markdown_table(FILE *md, const section *s, const csv_table *t, const char *const *columns, int count,
                           const char *only_mode)
{
    int mode = csv_column(t, "mode");
    fprintf(md, "\n|");
    for (int k = 0; k < 4 && s->keys[k]; k++)
        if (strcmp(s->keys[k], "mode") || !only_mode)
            fprintf(md, " %s |", s->keys[k]);
    for (int c = 0; c < count; c++)
        fprintf(md, " %s |", columns[c]);
    fprintf(md, "\n|");
    for (int k = 0; k < 4 && s->keys[k]; k++)
        if (strcmp(s->keys[k], "mode") || !only_mode)
            fprintf(md, " --- |");
    for (int c = 0; c < count; c++)
        fprintf(md, " ---: |");
    fprintf(md, "\n");
    for (int r = 0; r < t->rows; r++) {
        if (only_mode && mode >= 0 && strcmp(t->cells[r][mode], only_mode))
            continue;
        fprintf(md, "|");
        for (int k = 0; k < 4 && s->keys[k]; k++) {
            int c = csv_column(t, s->keys[k]);
            if (strcmp(s->keys[k], "mode") || !only_mode)
                fprintf(md, " %s |", c >= 0 ? t->cells[r][c] : "-");
        }
        for (int c = 0; c < count; c++) {
            int at = csv_column(t, columns[c]);
            fprintf(md, " %s |", at >= 0 && t->cells[r][at][0] ? t->cells[r][at] : "-");
        }
        fprintf(md, "\n");
    }
}

static void machine_markdown(FILE *md, const machine *m)
{
    fprintf(md, "# unigrad benchmark report%s%s\n\n%s\n\n## Machine\n\n", m->label[0] ? ": " : "", m->label,
            m->when);
    fprintf(md, "- CPU: %s (%d threads for unigrad)\n- System: %s\n- Compiler: %s\n- OpenBLAS: %s\n\n", m->cpu,
            m->threads, m->kernel, m->compiler, m->openblas);
    fprintf(md, "| device | name | vendor | driver | memory GiB |\n| --- | --- | --- | --- | ---: |\n");
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) == UG_OK)
            fprintf(md, "| %s | %s | %s | %s | %.1f |\n", info.id, info.name, info.vendor, info.driver,
                    (double)info.global_memory / (1024.0 * 1024.0 * 1024.0));
    }
}

static void machine_json(FILE *json, const machine *m)
{
    fprintf(json, "{\"unigrad_report\": 1,\n\"machine\": {\"label\": ");
    json_string(json, m->label);
    fprintf(json, ", \"when\": ");
    json_string(json, m->when);
    fprintf(json, ", \"cpu\": ");
    json_string(json, m->cpu);
    fprintf(json, ", \"threads\": %d, \"system\": ", m->threads);
    json_string(json, m->kernel);
    fprintf(json, ", \"compiler\": ");
    json_string(json, m->compiler);
    fprintf(json, ", \"openblas\": ");
    json_string(json, m->openblas);
    fprintf(json, ", \"devices\": [");
    for (int i = 0; i < ug_device_count(); i++) {
        ug_device_info info;
        if (ug_device_info_at(i, &info) != UG_OK)
            continue;
        fprintf(json, "%s{\"id\": ", i ? ", " : "");
        json_string(json, info.id);
        fprintf(json, ", \"name\": ");
        json_string(json, info.name);
        fprintf(json, ", \"driver\": ");
        json_string(json, info.driver);
        fprintf(json, "}");
    }
    fprintf(json, "]},\n\"figures\": [");
}

int bench_report(int argc, char **argv)
{
    const char *out = NULL, *device = NULL, *seconds = "1", *label = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--out")) {
            out = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            device = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--seconds")) {
            seconds = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--label")) {
            label = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    char why[512];
    if (!out) {
        usage(stderr);
        return 2;
    }
    if (!gnuplot_available(why, sizeof why)) {
        fprintf(stderr, "ug-bench report: %s\n", why);
        return 2;
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ug-bench report: cannot create %s: %s\n", out, strerror(errno));
        return 2;
    }
    machine m;
    describe_machine(&m, label);
    char path[4096], md_path[4096], json_path[4096];
    snprintf(json_path, sizeof json_path, "%s/report.json", out);
    snprintf(md_path, sizeof md_path, "%s/report.md", out);
    FILE *json = fopen(json_path, "w"), *md = fopen(md_path, "w");
    if (!json || !md) {
        fprintf(stderr, "ug-bench report: cannot write into %s: %s\n", out, strerror(errno));
        if (json) fclose(json);
        if (md) fclose(md);
        return 2;
    }
    machine_json(json, &m);
    machine_markdown(md, &m);
    bool first = true;
    int rc = 0, figures = 0;
    for (int s = 0; s < SECTIONS && !rc; s++) {
        const section *sec = &sections[s];
        snprintf(path, sizeof path, "%s/%s.csv", out, sec->name);
        char *args[16] = {(char *)sec->name, "--csv", path};
        int n = 3;
        if (device) {
            args[n++] = "--device";
            args[n++] = (char *)device;
        }
        if (s == 0) {
            args[n++] = "--quick";
            args[n++] = "--time";
        } else {
            args[n++] = "--seconds";
        }
        args[n++] = (char *)(s == 0 ? "0.2" : seconds);
        if (s == 1 || s == 2) {
            args[n++] = "--no-modes";
            args[n++] = "--no-epoch";
        }
        if (s >= 2) {
            args[n++] = "--batch";
            args[n++] = "64";
        }
        printf("\n==== ug-bench %s ====\n", sec->name);
        fflush(stdout);
        if (sec->run(n, args) != 0) {
            fprintf(stderr, "ug-bench report: ug-bench %s failed\n", sec->name);
            rc = 1;
            break;
        }
        csv_table t;
        if (!csv_read(path, &t, why, sizeof why)) {
            fprintf(stderr, "ug-bench report: %s\n", why);
            rc = 1;
            break;
        }
        figures += write_figures(json, sec, &t, &first);
        char png[4096];
        snprintf(png, sizeof png, "%s/%s.png", out, sec->name);
        bool drawn = false;
        if (s == 0) {
            drawn = bar_chart(png, "GEMM: ug_matmul per device", "product", "GFLOP/s", sec, &t, "gflops", NULL, why, sizeof why);
            fprintf(md, "\n## GEMM\n\n![GEMM GFLOP/s](gemm.png)\n");
            markdown_table(md, sec, &t, (const char *const[]){"gflops", "cblas_gflops", "ratio"}, 3, NULL);
        } else if (s < 3) {
            drawn = bar_chart(png, s == 1 ? "Training step: MLP 784-500-10, Adam" : "Training step: CNN, Adam",
                              "batch size", "step time (ms)", sec, &t, "step_ms", "plain", why, sizeof why);
            fprintf(md, "\n## %s\n\n![step time](%s.png)\n", s == 1 ? "MLP training step" : "CNN training step",
                    sec->name);
            markdown_table(md, sec, &t,
                           (const char *const[]){"step_ms", "samples_per_s", "blas_products_ms", "step_over_products"},
                           4, "plain");
        } else {
            drawn = bar_chart(png, "Convolutions: forward, backward and update", "layer, batch size",
                              "step time (ms)", sec, &t,
                              "ug_step_ms", NULL, why, sizeof why);
            fprintf(md, "\n## Convolutions\n\n![convolution step](conv.png)\n");
            markdown_table(md, sec, &t, (const char *const[]){"ug_step_ms", "onednn_step_ms", "ug_over_onednn_step"},
                           3, NULL);
        }
        csv_free(&t);
        if (!drawn) {
            fprintf(stderr, "ug-bench report: %s\n", why);
            rc = 1;
        }
    }
    fprintf(json, "\n]}\n");
    fprintf(md, "\nEvery figure is in report.json; `ug-bench compare A.json B.json` prints the ratios between "
                "two reports (two machines, two vendors, two commits).\n");
    bool closed = fclose(json) == 0;
    closed = fclose(md) == 0 && closed;
    if (!closed && !rc) {
        fprintf(stderr, "ug-bench report: writing into %s failed\n", out);
        rc = 1;
    }
    if (!rc)
        printf("\nreport: %s (%d figures in %s)\n", md_path, figures, json_path);
    return rc;
}
