/* gnuplot runs shell commands (`!cmd`, system(), backquotes) and expands
 * @macros, so ug-plot, ug-train --plot and ug-bench report's charts must
 * hand it nothing of a data file's text or a file's name but escaped data.
 * Each payload here creates the file "marker" in the test's folder if
 * gnuplot or a shell runs it: in the cells of a log, in the log's name,
 * the title and the output's name given to ug-plot, and in the names of a
 * bar chart (gnuplot_bar_chart, ug-bench report's). After every run no
 * marker may exist, no temporary file may be left, and the tool either
 * drew a valid PNG (check_png.py) or refused with a message, exit status 1
 * and no picture. The data blocks and quoting are also checked against
 * hand-worked text. Without gnuplot only the latter run, and the test
 * reports itself skipped.
 * Usage: test_plot_safety UG_PLOT CHECK_PNG */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gnuplot.h"
#include "plot_curves.h"

extern char **environ;

static int failures;
#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            printf("FAIL line %d: ", __LINE__);                                                                    \
            printf(__VA_ARGS__);                                                                                   \
            printf("\n");                                                                                          \
            failures++;                                                                                            \
        }                                                                                                          \
    } while (0)

static const char *ug_plot, *check_png;

/* Each would create "marker" if run: by gnuplot's `!` after a data block
 * ended early, by system(), backquotes, a shell's $(...), an @macro
 * defined beforehand, or by breaking out of a quoted string. None has a
 * comma (a CSV cell) or a slash (a file name). */
static const char *const payloads[] = {
    "EOD",
    "!touch marker",
    "system(\"touch marker\")",
    "system('touch marker')",
    "`touch marker`",
    "$(touch marker)",
    "cmd = \"system('touch marker')\"",
    "@cmd",
    "print @cmd",
    "' . system('touch marker') . '",
    "\" . system(\"touch marker\") . \"",
    "x\\",
    "\\'\\\"",
    "EOD\n!touch marker\n",
    "'\n!touch marker\n'",
    "\r\n!touch marker\r\n",
};
enum { PAYLOADS = sizeof payloads / sizeof payloads[0] };

static const char header[] =
    "kind,epoch,step,train_loss,val_loss,test_loss,test_accuracy,lr,samples_per_s,global_step,train_accuracy,"
    "val_accuracy\n";
/* A log that draws: two steps and an epoch. */
static const char rows[] = "step,1,1,2.5,,,,0.001,10,1,,\nstep,1,2,2.0,,,,0.001,10,2,,\n"
                           "epoch,1,2,2.1,1.9,1.8,40,0.001,10,2,35,38\n";

static bool marker_exists(void) { return access("marker", F_OK) == 0; }

/* Whether a name with ".tmp." (a picture being drawn) is in the folder. */
static bool temporary_left(void)
{
    DIR *d = opendir(".");
    bool left = false;
    for (struct dirent *e; d && (e = readdir(d));)
        left = left || strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return left;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write a file of the test");
}

/* The file's text (at most size - 1 bytes). */
static void read_file(const char *path, char *text, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, size - 1, f) : 0;
    text[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs argv without a shell, its output into run.out and run.err; its
 * exit status, or -1. */
static int run(char *const argv[])
{
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "run.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, "run.err", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int status, rc = posix_spawnp(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static bool valid_png(const char *path)
{
    char *argv[] = {"python3", (char *)check_png, (char *)path, NULL};
    return run(argv) == 0;
}

/* After each run: nothing ran, nothing is left half-made. */
static void check_clean(const char *what, int payload)
{
    CHECK(!marker_exists(), "%s: payload %d ran a command", what, payload);
    CHECK(!temporary_left(), "%s: payload %d left a temporary file", what, payload);
    remove("marker");
}

/* ug-plot csv [--out out] [--title title] drew a valid PNG at png. */
static void expect_drawn(const char *csv, const char *out, const char *title, const char *png, int payload)
{
    char *argv[8] = {(char *)ug_plot, (char *)csv};
    int n = 2;
    if (out) {
        argv[n++] = "--out";
        argv[n++] = (char *)out;
    }
    if (title) {
        argv[n++] = "--title";
        argv[n++] = (char *)title;
    }
    remove(png);
    int rc = run(argv);
    char said[8192], err[8192], expected[4200];
    read_file("run.out", said, sizeof said);
    read_file("run.err", err, sizeof err);
    snprintf(expected, sizeof expected, "%s\n", png);
    CHECK(rc == 0 && !strcmp(said, expected), "payload %d: ug-plot failed (%d): %s", payload, rc, err);
    CHECK(valid_png(png), "payload %d: no valid picture", payload);
    check_clean("ug-plot", payload);
    remove(png);
}

/* The payload in every cell of the log's rows (and as a row of its own). */
static void payload_in_cells(int p)
{
    const char *cell = payloads[p];
    if (strchr(cell, ','))
        return;
    char log[8192];
    int n = snprintf(log, sizeof log, "%s%s", header, rows);
    n += snprintf(log + n, sizeof log - (size_t)n, "step,1,3,1.5,,,,0.001,10,%s,,\n", cell);
    n += snprintf(log + n, sizeof log - (size_t)n, "step,1,3,%s,,,,0.001,10,3,,\n", cell);
    n += snprintf(log + n, sizeof log - (size_t)n, "step,1,4,EOD,,,,0.001,10,EOD,,\n");
    n += snprintf(log + n, sizeof log - (size_t)n, "step,1,4,1.5,,,,0.001,10,%s,,\n", cell);
    n += snprintf(log + n, sizeof log - (size_t)n, "epoch,1,4,%s,%s,%s,%s,0.001,10,4,%s,%s\n", cell, cell, cell,
                  cell, cell, cell);
    snprintf(log + n, sizeof log - (size_t)n, "%s\n%s,%s\n", cell, cell, cell);
    write_file("cells.csv", log);
    expect_drawn("cells.csv", "cells.png", NULL, "cells.png", p);

    /* No row to plot: refused, with no picture. */
    snprintf(log, sizeof log, "%sstep,1,1,1.5,,,,0.001,10,%s,,\nEOD\n!touch marker\n", header, cell);
    write_file("junk.csv", log);
    char *argv[] = {(char *)ug_plot, "junk.csv", "--out", "junk.png", NULL};
    int rc = run(argv);
    char err[8192];
    read_file("run.err", err, sizeof err);
    CHECK(rc == 1 && strstr(err, "ug-plot: junk.csv has no step or epoch row with a numeric global_step"),
          "payload %d: a log with nothing to plot gave %d: %s", p, rc, err);
    CHECK(access("junk.png", F_OK) != 0, "payload %d: a refused plot left a picture", p);
    check_clean("a refused plot", p);
}

/* The payload in the log's name (and so the default title and picture),
 * the title and the picture's name. */
static void payload_in_names(int p)
{
    if (strchr(payloads[p], '/'))
        return;
    char csv[512], png[512], log[1024];
    snprintf(log, sizeof log, "%s%s", header, rows);
    snprintf(csv, sizeof csv, "a\n%s\n.csv", payloads[p]);
    snprintf(png, sizeof png, "a\n%s\n.png", payloads[p]);
    write_file(csv, log);
    expect_drawn(csv, NULL, NULL, png, p);
    expect_drawn(csv, "titled.png", payloads[p], "titled.png", p);
    snprintf(png, sizeof png, "out %s\n.png", payloads[p]);
    expect_drawn(csv, png, NULL, png, p);
    remove(csv);
}

/* ug-bench report's charts: any device and cluster names, any title, any
 * picture name. */
static void payload_in_bar_chart(int p)
{
    const char *names[3] = {payloads[p], "cpu", payloads[(p + 1) % PAYLOADS]};
    const double bars[6] = {1.5, 2, 0.25, 1e30 * 1e30 /* inf: no bar */, 3, 4};
    const gnuplot_bars chart = {
        .title = payloads[p], .xlabel = payloads[p], .ylabel = "GFLOP/s", .clusters = 3, .series = 2,
        .cluster_names = names, .series_names = names + 1, .value = bars,
    };
    char png[512], why[512] = "";
    snprintf(png, sizeof png, "bars\n%s\n.png", payloads[p]);
    CHECK(gnuplot_bar_chart(png, 600, 300, &chart, why, sizeof why), "payload %d: no chart: %s", p, why);
    CHECK(valid_png(png), "payload %d: no valid chart", p);
    check_clean("gnuplot_bar_chart", p);
    remove(png);
}

/* The data blocks and a quoted string against hand-worked text: numbers
 * as parsed (NaN for a gap), rows whose step is no number left out. */
static void hand_worked_text(void)
{
    char log[2048];
    snprintf(log, sizeof log,
             "%sstep,1,1,2.5,,,,0.001,10,1,,\nstep,1,2,EOD,,,,0.001,10,2,,\nstep,1,3,1.5,,,,0.001,10,EOD,,\n"
             "step,1,4,1,,,,0.001,10,!touch marker,,\nstep,1,5,-nan,,,,0.001,10,5,,\n"
             "step,1,6,1e400,,,,0.001,10,0x10,,\nstep,1,7,0.5,,,,0.001,10,7 ,,\nEOD\n!touch marker\n"
             "epoch,1,6,1.25,0.75,`touch marker`,50,0.001,10,6,40.5,$(touch marker)\n",
             header);
    write_file("hand.csv", log);
    char *text = NULL;
    size_t size = 0;
    FILE *script = open_memstream(&text, &size);
    plot_data d;
    bool ok = plot_curves_data(script, "hand.csv", &d, log, sizeof log);
    fclose(script);
    /* Steps 2, 5 and 16 have no loss (not a number, NaN, an overflow):
     * left out, not gaps in the steps' line. */
    const char *expected = "$steps << EOD\n1 2.5\nEOD\n"
                           "$epochs << EOD\n6 1.25 0.75 NaN 40.5 NaN 50\nEOD\n";
    CHECK(ok && !strcmp(text, expected), "the data blocks are\n%s", text);
    CHECK(d.present[0] && d.present[1] && !d.present[2] && d.present[3] && !d.present[4] && d.present[5],
          "the series present are wrong");
    CHECK(d.steps == 1 && d.x_min[0] == 1 && d.x_max[0] == 6 && d.y_min[0] == 0.75 && d.y_max[0] == 2.5 &&
          d.x_min[1] == 6 && d.x_max[1] == 6 && d.y_min[1] == 40.5 && d.y_max[1] == 50,
          "the extents are wrong: %d steps, loss %g..%g x %g..%g, accuracy %g..%g x %g..%g", d.steps, d.x_min[0],
          d.x_max[0], d.y_min[0], d.y_max[0], d.x_min[1], d.x_max[1], d.y_min[1], d.y_max[1]);
    free(text);

    /* A trainer's log read every 2nd step (log_every): the others' loss
     * printed as C prints a NaN. The steps with a loss make one line. */
    snprintf(log, sizeof log,
             "%sstep,1,1,nan,,,,0.001,10,1,,\nstep,1,2,2.25,,,,0.001,10,2,,\nstep,1,3,-nan,,,,0.001,10,3,,\n"
             "step,1,4,1.75,,,,0.001,10,4,,\nstep,1,5,NaN,,,,0.001,10,5,,\nstep,1,6,1.5,,,,0.001,10,6,,\n", header);
    write_file("every2.csv", log);
    script = open_memstream(&text, &size);
    ok = plot_curves_data(script, "every2.csv", &d, log, sizeof log);
    fclose(script);
    CHECK(ok && !strcmp(text, "$steps << EOD\n2 2.25\n4 1.75\n6 1.5\nEOD\n$epochs << EOD\nEOD\n"),
          "the steps with a loss are not one line:\n%s", text);
    CHECK(d.steps == 3 && d.x_min[1] > d.x_max[1], "%d steps; the accuracy panel has points", d.steps);
    free(text);

    script = open_memstream(&text, &size);
    gnuplot_quoted(script, "it's\n`x`\x7f@m\\\t$(y)");
    fclose(script);
    CHECK(!strcmp(text, "\"it\\047s?\\140x\\140?\\100m\\134?\\044(y)\""), "quoted: %s", text);
    free(text);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_plot_safety UG_PLOT CHECK_PNG\n");
        return 2;
    }
    ug_plot = argv[1];
    check_png = argv[2];
    char dir[] = "/tmp/ug-plot-safety.XXXXXX";
    if (!mkdtemp(dir) || chdir(dir) != 0) {
        perror("test_plot_safety: a folder of its own");
        return 1;
    }
    hand_worked_text();
    char why[256];
    const bool drawing = gnuplot_available(why, sizeof why);
    if (!drawing)
        printf("skipped: the runs of ug-plot and gnuplot (%s)\n", why);
    for (int p = 0; drawing && p < PAYLOADS; p++) {
        payload_in_cells(p);
        payload_in_names(p);
        payload_in_bar_chart(p);
    }
    /* The folder and what is left in it (all of it after a failure). */
    DIR *d = opendir(".");
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            remove(e->d_name);
    if (d)
        closedir(d);
    if (chdir("/") != 0 || rmdir(dir) != 0)
        printf("warning: %s was not removed (files are left in it)\n", dir);
    printf("%s: %s\n", failures ? "FAIL" : "ok",
           drawing ? "every payload in cells, names, titles and charts" : "the hand-worked text");
    return failures ? 1 : drawing ? 0 : 77; /* 77: ctest's "skipped" (SKIP_RETURN_CODE) */
}
