/* libFuzzer harness for the tools' readers of files: csv_read (ug-plot's
 * logs, ug-bench report's tables), the data blocks plot_curves makes of a
 * log for gnuplot, and ug-bench compare's reader of reports and its lookup
 * of figures by name. Any bytes must give a table, blocks or a report that
 * keep their promises, or a refusal with a message: never a crash, a leak
 * or undefined behaviour (built with ASan/UBSan). The blocks must hold
 * numbers only, whatever the file held (text there could end the block
 * and run commands), and the lookup must find the first figure of a name,
 * as a scan from the start does. Each input is written to a private file,
 * read as a CSV and as a report. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

#include "csv_table.h"
#include "plot_curves.h"

/* Its reader and lookup are static: the harness compiles the file in. */
#include "../../tools/bench_compare.c"

static char path[64];
static FILE *nowhere;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(path, sizeof path, "csv", ".csv");
    nowhere = fopen("/dev/null", "w");
    if (!nowhere)
        abort();
    return 0;
}

static void check_table(void)
{
    csv_table t;
    char why[512] = "";
    if (!csv_read(path, &t, why, sizeof why)) {
        if (!why[0] || t.text || t.cells || t.header)
            abort(); /* a refusal says why and holds nothing */
        return;
    }
    if (t.columns < 1 || t.rows < 0 || csv_column(&t, t.header[0]) != 0)
        abort();
    for (int r = -1; r < t.rows; r++)
        for (int c = 0; c < t.columns; c++) {
            const char *cell = r < 0 ? t.header[c] : t.cells[r][c];
            double value;
            if (strpbrk(cell, ",\n\r"))
                abort(); /* a cell is one field of one line */
            if (csv_number(cell, &value) && !isnan(value) && !isfinite(value))
                abort();
        }
    csv_free(&t);
}

/* Whether line is one of a data block's: its start, its end, or count
 * numbers (finite, as %.9g prints them, or NaN) between single spaces. */
static bool block_line(const char *line, int count)
{
    if (!strcmp(line, "$steps << EOD") || !strcmp(line, "$epochs << EOD") || !strcmp(line, "EOD"))
        return true;
    for (int i = 0; i < count; i++) {
        size_t n = strspn(line, "0123456789.-+e");
        if (!strncmp(line, "NaN", 3) && (line[3] == ' ' || !line[3])) {
            n = 3;
        } else {
            char number[32], *end;
            if (!n || n >= sizeof number)
                return false;
            memcpy(number, line, n);
            number[n] = '\0';
            if (!isfinite(strtod(number, &end)) || *end)
                return false;
        }
        line += n;
        if (i + 1 < count && *line++ != ' ')
            return false;
    }
    return !*line;
}

static void check_blocks(void)
{
    char *text = NULL, why[512] = "";
    size_t size = 0;
    FILE *script = open_memstream(&text, &size);
    if (!script)
        abort();
    plot_data data = {0};
    const bool ok = plot_curves_data(script, path, &data, why, sizeof why);
    fclose(script);
    if (!ok && !why[0])
        abort();
    /* Lines of two numbers in $steps, seven in $epochs. */
    int count = 2;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (!next)
            abort(); /* every line ends */
        *next++ = '\0';
        if (!strcmp(line, "$epochs << EOD"))
            count = 7;
        if (!block_line(line, count))
            abort();
    }
    free(text);
}

static void check_report(void)
{
    report r;
    char why[512] = "";
    if (!read_report(path, &r, why, sizeof why)) {
        if (!why[0] || r.figures)
            abort();
        return;
    }
    if (r.count < 1)
        abort();
    for (int i = 0; i < r.count; i++)
        if (!isfinite(r.figures[i].value) || r.figures[i].order != i || !memchr(r.figures[i].name, '\0', 320))
            abort();
    /* The lookup against a scan, on a sorted copy. */
    report sorted = r;
    sorted.figures = malloc((size_t)r.count * sizeof *r.figures);
    if (!sorted.figures)
        abort();
    memcpy(sorted.figures, r.figures, (size_t)r.count * sizeof *r.figures);
    print_shared(nowhere, &r, &sorted, true);
    for (int i = 0; i < r.count; i++) {
        int first = 0;
        while (strcmp(r.figures[first].name, r.figures[i].name))
            first++;
        const figure *found = find_figure(sorted.figures, sorted.count, r.figures[i].name);
        if (!found || found->order != first)
            abort();
    }
    if (find_figure(sorted.figures, sorted.count, "no figure has a name with\na newline"))
        abort();
    free(sorted.figures);
    free(r.figures);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write_file(path, data, size);
    check_table();
    check_blocks();
    check_report();
    return 0;
}
